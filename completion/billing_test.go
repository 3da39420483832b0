package completion_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/chat"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/upstream"
)

func amount(t *testing.T, s string) money.Amount {
	t.Helper()
	a, err := money.ParseAmount(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Each event carries its exact cost: uncached prompt tokens at the input
// price, cached ones at the cached price, completion at the output price.
func TestCostsAreExactAndCachedPromptTokensCostLess(t *testing.T) {
	r := newRig(t)
	p := r.price("gpt-test", "0.50", "1.50", "0.25")
	r.provider.answer = answerJSON(`{"choices":[{"message":{"content":"hi"}}],` +
		`"usage":{"prompt_tokens":1000,"completion_tokens":200,"prompt_tokens_details":{"cached_tokens":600}}}`)
	if _, _, err := r.complete(context.Background(), providerBody); err != nil {
		t.Fatal(err)
	}
	ev := r.recorder.all()[0]
	// 400 x 0.50 + 600 x 0.25 + 200 x 1.50 per million = 0.00065 USD.
	if ev.Cost.String() != "0.00065" || ev.PriceID != p.ID || ev.CachedTokens != 600 || ev.PromptTokens != 1000 {
		t.Fatalf("event %+v cost %s", ev, ev.Cost)
	}
}

func mustPrice(t *testing.T, s string) money.Price {
	t.Helper()
	p, err := money.ParsePrice(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Prompt tokens written to the provider's cache and reasoning tokens are
// billed at their own prices, and reserved at the dearer of theirs and
// the input or output price; without those prices they cost what input
// and output cost.
func TestCacheCreationAndReasoningTokensArePricedAsSuch(t *testing.T) {
	usage := `"usage":{"prompt_tokens":1000,"completion_tokens":200,"prompt_tokens_details":{"cached_tokens":600},` +
		`"cache_creation_input_tokens":300,"completion_tokens_details":{"reasoning_tokens":150}}`
	for _, tc := range []struct {
		name                string
		creation, reasoning string
		want                string
	}{
		// 100 x 0.50 + 600 x 0.25 + 300 x 0.625 + 50 x 1.50 + 150 x 3 per million.
		{"own prices", "0.625", "3", "0.0009125"},
		// 400 x 0.50 + 600 x 0.25 + 200 x 1.50 per million, as before.
		{"input and output prices", "", "", "0.00065"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			p := r.price("gpt-test", "0.50", "1.50", "0.25")
			if tc.creation != "" {
				creation, reasoning := mustPrice(t, tc.creation), mustPrice(t, tc.reasoning)
				p.CacheCreationPerMTok, p.ReasoningPerMTok = &creation, &reasoning
				r.prices[len(r.prices)-1] = p
				r.deps.Prices.Replace(r.prices)
			}
			r.provider.answer = answerJSON(`{"choices":[{"message":{"content":"hi"}}],` + usage + `}`)
			if _, _, err := r.complete(context.Background(), providerBody); err != nil {
				t.Fatal(err)
			}
			ev := r.recorder.all()[0]
			if ev.Cost.String() != tc.want || ev.CacheCreationTokens != 300 || ev.ReasoningTokens != 150 || ev.CachedTokens != 600 {
				t.Fatalf("event %+v cost %s, want %s", ev, ev.Cost, tc.want)
			}
		})
	}
	creation, reasoning := mustPrice(t, "0.625"), mustPrice(t, "3")
	p := models.ModelPrice{InputPerMTok: mustPrice(t, "0.50"), OutputPerMTok: mustPrice(t, "1.50"),
		CacheCreationPerMTok: &creation, ReasoningPerMTok: &reasoning}
	// 1,000 x 0.625 + 100 x 3 per million: every token at its dearest.
	if got := metering.WorstCase(p, 1000, 100); got.String() != "0.000925" {
		t.Fatalf("worst case %s, want 0.000925", got)
	}
	// A Claude model's writes may be kept an hour, at twice the input
	// price: 1,000 x 1.00 + 100 x 3 per million.
	p.Model = "claude-sonnet-4-5"
	if got := metering.WorstCase(p, 1000, 100); got.String() != "0.0013" {
		t.Fatalf("a Claude model's worst case %s, want 0.0013", got)
	}
}

// TestAnHoursCacheWritesCostTwiceTheInput: Anthropic bills a prompt cache
// write kept an hour (ttl "1h") at twice the input price, above the five
// minutes' cache-creation price; the hour's part of the writes is billed
// so, and never more than the writes.
func TestAnHoursCacheWritesCostTwiceTheInput(t *testing.T) {
	creation := mustPrice(t, "3.75")
	p := models.ModelPrice{Model: "claude-sonnet-4-5", InputPerMTok: mustPrice(t, "3"), OutputPerMTok: mustPrice(t, "15"), CacheCreationPerMTok: &creation}
	for _, tc := range []struct {
		hour int
		want string
	}{
		// 100 x 3 + 900 x 3.75 + 100 x 15 per million.
		{0, "0.005175"},
		// 100 x 3 + 300 x 3.75 + 600 x 6 + 100 x 15 per million.
		{600, "0.006525"},
		// An hour's writes beyond the writes are the writes: 100 x 3 + 900 x 6 + 100 x 15.
		{5000, "0.0072"},
	} {
		u := chat.Usage{PromptTokens: 1000, CompletionTokens: 100, CacheCreationTokens: 900, CacheCreationHourTokens: tc.hour}
		if got := metering.Cost(p, u); got.String() != tc.want {
			t.Errorf("%d of 900 writes for an hour: cost %s, want %s", tc.hour, got, tc.want)
		}
	}
}

// A stream is billed by the usage chunk the pipeline asks the provider for.
func TestStreamsAreBilled(t *testing.T) {
	r := newRig(t)
	r.price("gpt-test", "2", "4", "1")
	r.provider.answer = func(ctx context.Context, req upstream.Request) (*upstream.Response, error) {
		body := "data: {\"choices\":[{\"delta\":{\"content\":\"hello\"}}]}\n\n" +
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5}}\n\ndata: [DONE]\n\n"
		return &upstream.Response{Status: 200, Header: http.Header{}, KeyID: 1, Attempts: 1,
			Stream: &stream{ctx: ctx, first: strings.NewReader(body), closed: make(chan struct{})}}, nil
	}
	// The provider's stream ends after [DONE]: make the fake end too.
	ctx, cancel := context.WithCancel(context.Background())
	s := newSink()
	s.failAfter, s.onGone = 1, cancel
	req := r.request(`{"model":"gpt-test","stream":true,"messages":[{"role":"user","content":"hello"}]}`)
	if _, err := r.p.Complete(ctx, r.caller, req, s); err != nil {
		t.Fatal(err)
	}
	ev := r.recorder.all()[0]
	if ev.Cost.String() != "0.00004" || ev.CompletionTokens != 5 { // 10 x 2 + 5 x 4 per million
		t.Fatalf("stream billed %s for %+v", ev.Cost, ev)
	}
}

// A response-cache hit costs what the tier says: nothing by default, the
// model's price when the tier bills hits.
func TestCacheHitsCostWhatTheTierSays(t *testing.T) {
	for _, bill := range []bool{false, true} {
		t.Run(fmt.Sprint("bill=", bill), func(t *testing.T) {
			r := newRig(t)
			r.caller.Tier.BillCacheHits = bill
			r.price("gpt-test", "1", "1", "1")
			r.provider.answer = answerJSON(okAnswer(6, 4))
			body := `{"model":"gpt-test","temperature":0,"messages":[{"role":"user","content":"hello"}]}`
			for range 2 {
				if _, _, err := r.complete(context.Background(), body); err != nil {
					t.Fatal(err)
				}
			}
			evs := r.recorder.all()
			want := money.Amount(0)
			if bill {
				want = evs[0].Cost
			}
			if !evs[1].Cached || evs[1].Cost != want || evs[0].Cost.String() != "0.00001" {
				t.Fatalf("miss %s, hit %s (cached %v), want hit %s", evs[0].Cost, evs[1].Cost, evs[1].Cached, want)
			}
		})
	}
}

// A fallback answer is sluice-local's, and costs sluice-local's price.
func TestFallbackAnswersCostTheLocalModelsPrice(t *testing.T) {
	r := newRig(t)
	r.price("gpt-test", "100", "100", "100")
	r.price("sluice-local", "0.10", "0.10", "0.10")
	r.provider.answer = func(context.Context, upstream.Request) (*upstream.Response, error) {
		return nil, upstream.ErrUnavailable
	}
	out, _, err := r.complete(context.Background(), providerBody)
	if err != nil || !out.Fallback {
		t.Fatal(err)
	}
	ev := r.recorder.all()[0]
	want := money.Price(100_000).Cost(int64(ev.PromptTokens + ev.CompletionTokens))
	if ev.Model != "sluice-local" || ev.Cost != want {
		t.Fatalf("fallback billed %s for %+v, want %s", ev.Cost, ev, want)
	}
}

// A hard budget admits a request only if its worst case fits, settles to
// the real cost, and refuses in OpenAI's insufficient_quota shape.
func TestBudgetReservesTheWorstCaseAndSettles(t *testing.T) {
	r := newRig(t)
	r.caller.Tier.Overage = models.OverageBill
	limit := amount(t, "0.001")
	r.caller.Budget = models.Budget{Limit: &limit, HardStop: true}
	r.price("gpt-test", "1", "2", "1")
	r.provider.answer = answerJSON(okAnswer(6, 10))
	ctx := context.Background()
	// Worst case: 9 prompt x 1 + 100 max_tokens x 2 per million = 0.000209.
	// Real cost: 6 x 1 + 10 x 2 = 0.000026. Four fit; budget spent: 0.000104.
	for range 4 {
		if _, _, err := r.complete(ctx, providerBody); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := r.ledger.Balance(ctx, metering.OrgAccount(3), r.clock.Now())
	if b.Spent.String() != "0.000104" || b.Reserved != 0 {
		t.Fatalf("balance %+v", b)
	}
	// A request whose worst case does not fit what is left is refused,
	// before the provider is asked.
	calls := r.provider.callCount()
	big := `{"model":"gpt-test","max_tokens":500,"messages":[{"role":"user","content":"hello"}]}` // worst 0.001009
	_, s, err := r.complete(ctx, big)
	e := apperr.As(err)
	if e.Code != apperr.NoCredit || e.Reason != "insufficient_quota" || e.Message != "this request may cost up to $0.001009 (9 prompt tokens and 500 completion tokens), "+
		"more than is left of the organization's monthly budget ($0.000896 of $0.001 this month); it resets at 2026-12-01T00:00:00Z" {
		t.Fatalf("refusal %+v", e)
	}
	if r.provider.callCount() != calls || s.status != 0 {
		t.Fatal("a refused request must not reach the provider")
	}
	// Its tokens went back to the bucket, and the rejection was counted.
	adj := r.limiter.settlements()
	if last := adj[len(adj)-1]; last.delta != -509 {
		t.Fatalf("tokens refund %+v", last)
	}
	if rej := r.recorder.rejections; len(rej) != 1 || rej[0] != "3/7/gpt-test: budget" {
		t.Fatalf("rejections %v", rej)
	}
}

// Concurrent requests never together pass a hard budget.
func TestBudgetHoldsUnderConcurrency(t *testing.T) {
	r := newRig(t)
	r.caller.Tier.Overage = models.OverageBill
	r.caller.Tier.Capacity, r.caller.Tier.TokensPerMinute = 1000, 1_000_000
	limit := amount(t, "0.000209") // exactly one request's worst case
	r.caller.Budget = models.Budget{Limit: &limit, HardStop: true}
	r.price("gpt-test", "1", "2", "1")
	release := make(chan struct{})
	r.provider.answer = func(ctx context.Context, req upstream.Request) (*upstream.Response, error) {
		<-release // every admitted request is in flight at once
		return answerJSON(okAnswer(6, 10))(ctx, req)
	}
	results := make(chan error, 20)
	for range 20 {
		go func() {
			_, _, err := r.complete(context.Background(), providerBody)
			results <- err
		}()
	}
	admitted, refused := 0, 0
	deadline := time.After(5 * time.Second)
	for range 20 {
		if admitted+refused == 19 {
			close(release)
		}
		select {
		case err := <-results:
			if err == nil {
				admitted++
			} else if apperr.CodeOf(err) == apperr.NoCredit {
				refused++
			} else {
				t.Fatal(err)
			}
		case <-deadline:
			t.Fatalf("stuck: %d admitted, %d refused", admitted, refused)
		}
	}
	if admitted != 1 || refused != 19 {
		t.Fatalf("%d admitted, %d refused; want exactly one admitted", admitted, refused)
	}
}

// A free tier that blocks overage is limited by the month's included
// credit (as prorated for the organization, the caller's IncludedCredit,
// not the tier's figure for a whole month); a soft budget only raises
// alerts.
func TestIncludedCreditBlocksAndSoftBudgetsAlert(t *testing.T) {
	r := newRig(t)
	r.caller.Tier.Overage, r.caller.Tier.IncludedCredit = models.OverageBlock, amount(t, "1")
	r.caller.IncludedCredit = amount(t, "0.00006")
	soft := amount(t, "0.00004")
	r.caller.Budget = models.Budget{Limit: &soft, HardStop: false}
	r.price("gpt-test", "1", "2", "1")
	r.provider.answer = answerJSON(okAnswer(6, 10)) // costs 0.000026
	ctx := context.Background()
	small := `{"model":"gpt-test","max_tokens":10,"messages":[{"role":"user","content":"hello"}]}` // worst 0.000026
	for range 2 {
		if _, _, err := r.complete(ctx, small); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(r.alerts.moves) != "[org 3: 0.00 -> 0.000026 of 0.00004 org 3: 0.000026 -> 0.000052 of 0.00004]" {
		t.Fatalf("alerts heard %v", r.alerts.moves)
	}
	if got := metering.Crossed(soft, 0, amount(t, "0.000026")); fmt.Sprint(got) != "[50]" {
		t.Fatalf("first request crossed %v", got)
	}
	if got := metering.Crossed(soft, amount(t, "0.000026"), amount(t, "0.000052")); fmt.Sprint(got) != "[80 100]" {
		t.Fatalf("second request crossed %v", got)
	}
	// 0.000052 spent of the 0.00006 credit: the next request's worst case
	// does not fit, so it is refused, naming the credit.
	_, _, err := r.complete(ctx, small)
	if e := apperr.As(err); e.Code != apperr.NoCredit || !strings.Contains(e.Message, "the free tier's included credit") {
		t.Fatalf("%+v", e)
	}
}

// Billing periods are calendar months in UTC: a new month starts from
// what the store billed in it (nothing yet).
func TestANewMonthStartsAFreshBalance(t *testing.T) {
	r := newRig(t)
	r.caller.Tier.Overage = models.OverageBill
	limit := amount(t, "0.0003")
	r.caller.Budget = models.Budget{Limit: &limit, HardStop: true}
	r.price("gpt-test", "1", "2", "1")
	r.provider.answer = answerJSON(okAnswer(6, 100)) // costs 0.000206 each
	ctx := context.Background()
	r.clock.Advance(11*time.Hour + 59*time.Minute) // 2026-11-30 23:59 UTC
	if _, _, err := r.complete(ctx, providerBody); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.complete(ctx, providerBody); apperr.CodeOf(err) != apperr.NoCredit {
		t.Fatalf("November is spent: %v", err)
	}
	r.clock.Advance(2 * time.Minute) // 2026-12-01 00:01 UTC
	if _, _, err := r.complete(ctx, providerBody); err != nil {
		t.Fatalf("December: %v", err)
	}
	dec, _ := r.ledger.Balance(ctx, metering.OrgAccount(3), r.clock.Now())
	nov, _ := r.ledger.Balance(ctx, metering.OrgAccount(3), r.clock.Now().AddDate(0, 0, -1))
	if dec.Spent.String() != "0.000206" || nov.Spent.String() != "0.000206" {
		t.Fatalf("nov %+v dec %+v", nov, dec)
	}
}
