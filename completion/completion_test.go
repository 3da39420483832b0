package completion_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/chat"
	"github.com/sluicehq/sluice/completion"
	"github.com/sluicehq/sluice/conversations"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/upstream"
)

// providerBody asks a provider for max_tokens 100 with a 9-token prompt
// ("hello" is 2 tokens, plus 4 for the message and 3 for priming the
// reply): the estimate is 109.
const (
	providerBody = `{"model":"gpt-test","max_tokens":100,"messages":[{"role":"user","content":"hello"}]}`
	estimate     = 109
)

func okAnswer(prompt, completion int) string {
	return fmt.Sprintf(`{"id":"x","object":"chat.completion","model":"gpt-test","choices":[{"index":0,"message":{"role":"assistant","content":"hi there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
		prompt, completion, prompt+completion)
}

func TestSettlementMovesTheReservationToTheRealUsage(t *testing.T) {
	cases := []struct {
		name       string
		completion int
		wantDelta  int64 // the tokens bucket's settlement
	}{
		{"a refund when the estimate was high", 10, 16 - estimate},
		{"a debt when the provider ignored max_tokens", 300, 306 - estimate},
		{"nothing when the estimate was exact", 103, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.provider.answer = answerJSON(okAnswer(6, tc.completion))
			out, s, err := r.complete(context.Background(), providerBody)
			if err != nil {
				t.Fatal(err)
			}
			used := int64(6 + tc.completion)
			if out.Status != 200 || out.KeyID != 1 || out.Usage.Total() != int(used) || s.status != 200 {
				t.Fatalf("served %+v, sink %d", out, s.status)
			}
			var want []adjustment
			if tc.wantDelta != 0 {
				want = []adjustment{{key: "org:3|tpm", delta: tc.wantDelta}}
			}
			if got := r.limiter.settlements(); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("tokens bucket settled %+v, want %+v", got, want)
			}
			if got := r.provider.settlements(); len(got) != 1 || got[0] != (keySettlement{1, estimate, used, false}) {
				t.Fatalf("provider key settled %+v, want key 1 from %d to %d", got, estimate, used)
			}
			evs := r.recorder.all()
			if len(evs) != 1 || evs[0].RequestID != "req_aaaaaaaa" || evs[0].CompletionTokens != tc.completion ||
				evs[0].UpstreamKeyID == nil || *evs[0].UpstreamKeyID != 1 || evs[0].Status != 200 {
				t.Fatalf("usage events %+v", evs)
			}
		})
	}
}

func TestNothingDeliveredIsRefundedAndNotBilled(t *testing.T) {
	r := newRig(t)
	r.caller.Tier.UpstreamFallback = "error"
	r.provider.answer = func(context.Context, upstream.Request) (*upstream.Response, error) {
		return nil, fmt.Errorf("%w: every key is open", upstream.ErrUnavailable)
	}
	_, s, err := r.complete(context.Background(), providerBody)
	e := apperr.As(err)
	if e.Code != apperr.Unavailable || e.Reason != "upstream_unavailable" || e.RetryAfter <= 0 ||
		e.Message != "every provider for 'gpt-test' is unavailable right now; retry later" {
		t.Fatalf("err = %+v", e)
	}
	if s.status != 0 || s.String() != "" {
		t.Fatalf("an error must leave the sink unwritten: %d %q", s.status, s.String())
	}
	if got := r.limiter.settlements(); len(got) != 1 || got[0] != (adjustment{key: "org:3|tpm", delta: -estimate}) {
		t.Fatalf("settled %+v, want the whole reservation back", got)
	}
	if len(r.provider.settlements()) != 0 || len(r.recorder.all()) != 0 {
		t.Fatalf("nothing was served: key settled %+v, usage %+v", r.provider.settlements(), r.recorder.all())
	}

	// A provider's 4xx about the request is passed on as it is, and is not
	// billed either.
	r.provider.answer = func(context.Context, upstream.Request) (*upstream.Response, error) {
		return &upstream.Response{Status: 400, Header: http.Header{}, Body: []byte(`{"error":{"message":"no"}}`), KeyID: 1, Attempts: 1}, nil
	}
	out, s, err := r.complete(context.Background(), providerBody)
	if err != nil || out.Status != 400 || s.status != 400 || s.String() != `{"error":{"message":"no"}}` {
		t.Fatalf("4xx: %+v %d %q %v", out, s.status, s.String(), err)
	}
	if len(r.recorder.all()) != 0 || len(r.provider.settlements()) != 0 {
		t.Fatal("a refused request is not billed and the pool has refunded its key")
	}
}

func TestBothBucketsAreChargedOrNeither(t *testing.T) {
	r := newRig(t)
	r.provider.answer = answerJSON(okAnswer(6, 10))
	ctx := context.Background()

	// Empty the request bucket (capacity 10): the next request is refused
	// and its tokens are not reserved.
	for range 10 {
		if _, _, err := r.complete(ctx, providerBody); err != nil {
			t.Fatal(err)
		}
	}
	_, s, err := r.complete(ctx, providerBody)
	if apperr.As(err).Reason != "rate_limit_exceeded" {
		t.Fatalf("err = %v", err)
	}
	// Ten requests used 16 tokens each of the 1000 a minute (the clock
	// stands still): the refused eleventh must not have taken its 106.
	if s.header.Get("x-ratelimit-remaining-requests") != "0" || s.header.Get("x-ratelimit-remaining-tokens") != "840" {
		t.Fatalf("headers %v", s.header)
	}

	// The other way round: a fresh token whose tokens bucket cannot take
	// the request keeps its request bucket whole.
	r = newRig(t)
	r.provider.answer = answerJSON(okAnswer(6, 100))
	r.caller.Tier.TokensPerMinute = 200
	if _, _, err := r.complete(ctx, providerBody); err != nil {
		t.Fatal(err)
	}
	_, s, err = r.complete(ctx, providerBody)
	e := apperr.As(err)
	if e.Reason != "tokens_rate_limit_exceeded" || !strings.Contains(e.Message, "tokens per minute on the free tier") {
		t.Fatalf("err = %+v", e)
	}
	if got := s.header.Get("x-ratelimit-remaining-requests"); got != "9" {
		t.Fatalf("remaining requests %q, want 9: the refused request must not cost one", got)
	}
}

func TestFallbackFollowsTheTier(t *testing.T) {
	down := func(context.Context, upstream.Request) (*upstream.Response, error) {
		return nil, fmt.Errorf("%w: breaker open", upstream.ErrUnavailable)
	}
	r := newRig(t)
	r.provider.answer = down
	out, s, err := r.complete(context.Background(), providerBody)
	if err != nil || !out.Fallback || out.Model != "sluice-local" || s.header.Get("x-sluice-fallback") != "local" ||
		!strings.Contains(s.String(), `"model":"sluice-local"`) {
		t.Fatalf("local fallback: %+v %v %q %v", out, s.header, s.String(), err)
	}
	if evs := r.recorder.all(); len(evs) != 1 || !evs[0].Fallback || evs[0].UpstreamKeyID != nil {
		t.Fatalf("usage %+v", evs)
	}

	r.caller.Tier.UpstreamFallback = "error"
	_, s, err = r.complete(context.Background(), providerBody)
	if apperr.As(err).Reason != "upstream_unavailable" || s.header.Get("x-sluice-fallback") != "" {
		t.Fatalf("error fallback: %v %v", err, s.header)
	}

	// Any other failure is the provider's answer being unusable: a 502
	// whatever the tier says.
	r.provider.answer = func(context.Context, upstream.Request) (*upstream.Response, error) {
		return nil, upstream.ErrTooLarge
	}
	r.caller.Tier.UpstreamFallback = "local"
	_, _, err = r.complete(context.Background(), providerBody)
	if e := apperr.As(err); e.Code != apperr.BadUpstream || e.Message != "the provider's answer could not be used; retry later" {
		t.Fatalf("unusable answer: %+v", e)
	}
}

func TestCacheHitIsMeteredAsCached(t *testing.T) {
	r := newRig(t)
	r.provider.answer = answerJSON(okAnswer(6, 3))
	body := `{"model":"gpt-test","temperature":0,"messages":[{"role":"user","content":"hello"}]}`
	first, s1, err := r.complete(context.Background(), body)
	if err != nil || first.Cached || s1.header.Get("X-Cache") != "MISS" {
		t.Fatalf("first: %+v %v %v", first, s1.header, err)
	}
	second, s2, err := r.complete(context.Background(), body)
	if err != nil || !second.Cached || s2.header.Get("X-Cache") != "HIT" || s2.String() != s1.String() {
		t.Fatalf("second: %+v %v %v", second, s2.header, err)
	}
	if r.provider.callCount() != 1 {
		t.Fatalf("the provider was asked %d times", r.provider.callCount())
	}
	evs := r.recorder.all()
	if len(evs) != 2 || evs[0].Cached || !evs[1].Cached || evs[1].Model != "gpt-test" || evs[1].CompletionTokens != 3 ||
		evs[1].UpstreamKeyID != nil {
		t.Fatalf("usage %+v", evs)
	}
	// A hit settles the tokens bucket by its usage, and no provider key.
	if got := r.provider.settlements(); len(got) != 1 {
		t.Fatalf("key settlements %+v, want only the miss's", got)
	}
}

func TestStreamWithTheClientGoneBillsWhatWasDelivered(t *testing.T) {
	r := newRig(t)
	r.price("gpt-test", "1", "3", "1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var body *stream
	r.provider.answer = func(ctx context.Context, req upstream.Request) (*upstream.Response, error) {
		if !strings.Contains(string(req.Body), `"include_usage":true`) {
			t.Errorf("streams must ask the provider for usage: %s", req.Body)
		}
		body = &stream{ctx: ctx, first: strings.NewReader("data: {\"choices\":[{\"delta\":{\"content\":\"one two three\"}}]}\n\n"), closed: make(chan struct{})}
		return &upstream.Response{Status: 200, Header: http.Header{}, Stream: body, KeyID: 1, Attempts: 1}, nil
	}
	s := newSink()
	s.failAfter, s.onGone = 1, cancel // the client hangs up after the first bytes
	req := r.request(`{"model":"gpt-test","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"hello"}]}`)
	done := make(chan struct{})
	var out struct {
		served any
		err    error
	}
	go func() {
		defer close(done)
		sv, err := r.p.Complete(ctx, r.caller, req, s)
		out.served, out.err = sv, err
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the pipeline did not notice the client leaving")
	}
	if out.err != nil || !s.streamed || !strings.Contains(s.String(), "one two three") {
		t.Fatalf("%v %v %q", out.served, out.err, s.String())
	}
	select {
	case <-body.closed:
	default:
		t.Fatal("the provider stream was not closed")
	}
	want := chat.Usage{PromptTokens: int(req.Prompt.Tokens), CompletionTokens: chat.CountTokens("one two three")} // no usage chunk came: our count
	evs := r.recorder.all()
	if len(evs) != 1 || evs[0].PromptTokens != want.PromptTokens || evs[0].CompletionTokens != want.CompletionTokens {
		t.Fatalf("usage %+v, want %+v", evs, want)
	}
	// And it costs what was delivered: 1.00 in, 3.00 out per million.
	if wantCost := money.Amount(want.PromptTokens*1_000_000 + want.CompletionTokens*3_000_000); evs[0].Cost != wantCost {
		t.Fatalf("cost %s, want %s", evs[0].Cost, wantCost)
	}
	for _, a := range r.limiter.settlements() {
		if a.cancelled {
			t.Fatal("settled on the departed client's context")
		}
	}
	if got := r.provider.settlements(); len(got) != 1 || got[0].cancelled || got[0].actual != int64(want.Total()) {
		t.Fatalf("key settlement %+v", got)
	}
}

// A stream's client that leaves after the provider had its request and
// before a word came back is billed the prompt, which the provider read
// (upstream.SentError), and recorded as a request its client closed; one
// gone before the request was sent is billed nothing.
func TestStreamLeftBeforeItsFirstWordBillsThePrompt(t *testing.T) {
	r := newRig(t)
	r.price("gpt-test", "1", "3", "1")
	const body = `{"model":"gpt-test","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"a long prompt the provider reads before it answers"}]}`
	for _, tt := range []struct {
		name   string
		err    error
		billed bool
	}{
		{"after the send", &upstream.SentError{KeyID: 7, Err: context.Canceled}, true},
		{"before the send", fmt.Errorf("upstream: request abandoned: %w", context.Canceled), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			evsBefore, keysBefore := len(r.recorder.all()), len(r.provider.settlements())
			// The client is gone by the time the pool answers.
			ctx, leave := context.WithCancel(context.Background())
			r.provider.answer = func(context.Context, upstream.Request) (*upstream.Response, error) { leave(); return nil, tt.err }
			req := r.request(body)
			_, err := r.p.Complete(ctx, r.caller, req, newSink())
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want the client's context error", err)
			}
			evs, keys := r.recorder.all()[evsBefore:], r.provider.settlements()[keysBefore:]
			if !tt.billed {
				if len(evs) != 0 || len(keys) != 0 {
					t.Fatalf("nothing was sent, yet usage %+v and key settlements %+v", evs, keys)
				}
				return
			}
			prompt := int(req.Prompt.Tokens)
			if len(evs) != 1 || evs[0].PromptTokens != prompt || evs[0].CompletionTokens != 0 || evs[0].Status != 499 ||
				evs[0].UpstreamKeyID == nil || *evs[0].UpstreamKeyID != 7 {
				t.Fatalf("usage %+v, want one event of the %d prompt tokens, status 499, key 7", evs, prompt)
			}
			if want := money.Amount(prompt * 1_000_000); evs[0].Cost != want { // 1.00 per million in
				t.Fatalf("cost %s, want the prompt's %s", evs[0].Cost, want)
			}
			if len(keys) != 1 || keys[0].actual != int64(prompt) {
				t.Fatalf("key settlements %+v, want the prompt's %d tokens on key 7", keys, prompt)
			}
		})
	}
}

func TestFrozenTokenIsRefusedBeforeAnything(t *testing.T) {
	r := newRig(t)
	r.provider.answer = answerJSON(okAnswer(6, 1))
	ctx := context.Background()
	// Three rejections in a minute freeze the token (threshold 3).
	r.caller.Tier.Capacity = 1
	if _, _, err := r.complete(ctx, providerBody); err != nil {
		t.Fatal(err)
	}
	var err error
	for range 3 {
		_, _, err = r.complete(ctx, providerBody)
	}
	e := apperr.As(err)
	if e.Code != apperr.Frozen || e.RetryAfter != 10*time.Minute || !strings.Contains(e.Message, "this API key is frozen until 2026-11-30T12:10:00Z: too many rejected requests") {
		t.Fatalf("the third rejection must freeze: %+v", e)
	}
	// Frozen: refused without touching a bucket, even after it refilled.
	r.clock.Advance(time.Minute)
	before := len(r.limiter.settlements())
	_, s, err := r.complete(ctx, providerBody)
	if e := apperr.As(err); e.Code != apperr.Frozen || e.RetryAfter != 9*time.Minute {
		t.Fatalf("frozen: %+v", e)
	}
	if s.header.Get("x-ratelimit-remaining-requests") != "" || len(r.limiter.settlements()) != before {
		t.Fatal("a frozen token's request must not reach the buckets")
	}
	if err := r.p.Admit(ctx, r.caller, "req_x", newSink()); apperr.CodeOf(err) != apperr.Frozen {
		t.Fatalf("Admit: %v", err)
	}
}

func TestRequestsRefusedBeforeAdmissionCostOneRequest(t *testing.T) {
	r := newRig(t)
	req := r.request(`{"model":"sluice-local","messages":[{"role":"user","content":"hello"}]}`)
	req.Priority = "urgent"
	s := newSink()
	_, err := r.p.Complete(context.Background(), r.caller, req, s)
	e := apperr.As(err)
	if e.Reason != "invalid_priority" || e.Param != "X-Sluice-Priority" || e.Message != "X-Sluice-Priority must be low, normal or high" {
		t.Fatalf("err = %+v", e)
	}
	if got := s.header.Get("x-ratelimit-remaining-requests"); got != "9" {
		t.Fatalf("remaining %q, want 9", got)
	}
	req.Priority, req.Conversation = "", "bad id!"
	if _, err := r.p.Complete(context.Background(), r.caller, req, newSink()); apperr.As(err).Reason != "invalid_session_id" {
		t.Fatalf("bad conversation id: %v", err)
	}
}

func TestConversationHistoryIsPrependedAndSaved(t *testing.T) {
	r := newRig(t)
	var sent []string
	r.provider.answer = func(ctx context.Context, req upstream.Request) (*upstream.Response, error) {
		sent = append(sent, string(req.Body))
		return answerJSON(okAnswer(6, 2))(ctx, req)
	}
	ctx := context.Background()
	for _, q := range []string{"first question", "second question"} {
		req := r.request(`{"model":"gpt-test","messages":[{"role":"user","content":"` + q + `"}]}`)
		req.Conversation = "c1"
		if _, err := r.p.Complete(ctx, r.caller, req, newSink()); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(sent[1], "first question") || !strings.Contains(sent[1], "hi there") || !strings.Contains(sent[1], "second question") {
		t.Fatalf("history not prepended: %s", sent[1])
	}
	stored, ok, err := r.convs.Load(ctx, conversations.Scope{OrgID: 3, TokenID: 7, ID: "c1"})
	if err != nil || !ok || len(stored) != 4 || stored[3].Content != "hi there" {
		t.Fatalf("stored %+v %v %v", stored, ok, err)
	}

	// The store failing is a 503 that says so, and costs one request.
	r.deps.Conversations = failingStore{}
	r.rebuild()
	req := r.request(`{"model":"gpt-test","messages":[{"role":"user","content":"x"}]}`)
	req.Conversation = "c1"
	s := newSink()
	_, err = r.p.Complete(ctx, r.caller, req, s)
	if !errors.Is(err, conversations.ErrStoreUnavailable) || s.header.Get("x-ratelimit-remaining-requests") == "" {
		t.Fatalf("err %v, headers %v", err, s.header)
	}
}

func TestParseSaysWhatIsWrong(t *testing.T) {
	r := newRig(t)
	cases := []struct{ body, reason, param, message string }{
		{`{`, "invalid_json", "", "request body is not valid JSON: body is empty or cut short"},
		{`{} {}`, "invalid_json", "", "request body must be one JSON object"},
		{`[]`, "invalid_json", "", "request body is not valid JSON: the body must be an object"},
		{`{"model":"gpt-test","messages":"hi"}`, "invalid_json", "", "request body is not valid JSON: field 'messages' must be an array"},
		{`{"model":"gpt-test","messages":[{"role":5}]}`, "invalid_json", "", "request body is not valid JSON: field 'messages[0].role' must be a string"},
		{`{"model":"gpt-test","max_tokens":1.5,"messages":[]}`, "invalid_json", "", "request body is not valid JSON: field 'max_tokens' must be an integer"},
		{`{"messages":[]}`, "missing_model", "model", "you must provide a model parameter"},
		{`{"model":"nope","messages":[]}`, "model_not_found", "model", "the model 'nope' does not exist or you do not have access to it; GET /v1/models lists yours"},
		{`{"model":"gpt-test","messages":[]}`, "invalid_messages", "messages", "messages must be a non-empty array"},
		{`{"model":"gpt-test","n":2,"messages":[{"role":"user","content":"x"}]}`, "unsupported_n", "n", "only n=1 is supported"},
		{`{"model":"gpt-test","service_tier":"priority","messages":[{"role":"user","content":"x"}]}`, "unsupported_parameter", "service_tier",
			"service_tier 'priority' is billed above the model's price, which is what Sluice bills; omit it, or send auto, default or flex"},
		{`{"model":"gpt-test","service_tier":7,"messages":[{"role":"user","content":"x"}]}`, "invalid_json", "", "request body is not valid JSON: field 'service_tier' must be a string"},
		{`{"model":"gpt-test","max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, "invalid_max_tokens", "max_tokens", "max_tokens must be from 1 to 10000000"},
		{`{"model":"gpt-test","messages":[{"role":"robot","content":"x"}]}`, "invalid_role", "messages[0].role", "role must be one of system, developer, user, assistant, tool"},
		{`{"model":"sluice-local","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, "invalid_content", "messages[0].content", "content part type 'image_url' is not supported by sluice-local; send text parts"},
		{`{"model":"gpt-test","messages":[{"role":"user","content":7}]}`, "invalid_content", "messages[0].content", "content must be a string or an array of content parts"},
	}
	for _, tc := range cases {
		_, err := r.p.Parse([]byte(tc.body))
		e := apperr.As(err)
		if e.Reason != tc.reason || e.Param != tc.param || e.Message != tc.message {
			t.Errorf("%s: %+v, want %s %s %q", tc.body, e, tc.reason, tc.param, tc.message)
		}
	}
	// Both bounds set: providers differ in which they read, so the larger
	// is reserved, whichever field holds it.
	for body, want := range map[string]int{
		`{"model":"gpt-test","max_tokens":100000,"max_completion_tokens":1,"messages":[{"role":"user","content":"x"}]}`: 100000,
		`{"model":"gpt-test","max_tokens":1,"max_completion_tokens":300,"messages":[{"role":"user","content":"x"}]}`:    300,
	} {
		if req, err := r.p.Parse([]byte(body)); err != nil || req.MaxTokens != want {
			t.Errorf("%s: max tokens %d (%v), want %d", body, req.MaxTokens, err, want)
		}
	}
	if _, err := r.p.Parse([]byte(`{"model":"gpt-test","max_tokens":5,"max_completion_tokens":0,"messages":[{"role":"user","content":"x"}]}`)); apperr.As(err).Param != "max_completion_tokens" {
		t.Errorf("a bad max_completion_tokens beside a good max_tokens: %v", err)
	}
	req, err := r.p.Parse([]byte(`{"model":"gpt-test","max_tokens":5,"max_completion_tokens":9,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"},{"type":"text","text":"b"}]}]}`))
	if err != nil || req.MaxTokens != 9 || !req.Stream || !req.IncludeUsage || req.Messages()[0].Content != "a\nb" {
		t.Fatalf("%+v %v", req, err)
	}
}

type failingStore struct{}

func (failingStore) Load(context.Context, conversations.Scope) ([]chat.Message, bool, error) {
	return nil, false, errors.New("redis: connection refused")
}
func (failingStore) Save(context.Context, conversations.Scope, []chat.Message) error {
	return errors.New("redis: connection refused")
}
func (failingStore) Delete(context.Context, conversations.Scope) (bool, error) {
	return false, errors.New("redis: connection refused")
}

// A job that waits for the tokens bucket looks again within a second: the
// bucket's own wait assumes nothing comes back, while a running request
// gives back most of its reservation when its answer ends.
func TestAJobWaitingForTokensLooksAgainSoon(t *testing.T) {
	r := newRig(t)
	r.caller.Tier.TokensPerMinute = 1000 // 1,000 tokens a minute: a job of 500 waits 30 s for the next
	r.provider.answer = answerJSON(okAnswer(6, 10))
	body := `{"model":"gpt-test","max_tokens":490,"messages":[{"role":"user","content":"hello"}]}`
	job := func() error {
		req := r.request(body)
		req.Queued = true
		_, err := r.p.Complete(context.Background(), r.caller, req, newSink())
		return err
	}
	// The first job is still running (its refund not in): by the bucket
	// alone the next would wait about 30 s.
	r.limiter.holdRefunds = true
	if err := job(); err != nil {
		t.Fatal(err)
	}
	e := apperr.As(job())
	if e.Reason != completion.ErrWait || e.RetryAfter <= 0 || e.RetryAfter > time.Second {
		t.Fatalf("a job waiting for the tokens bucket: %+v, want to look again within a second", e)
	}
}

// Jobs use only what live traffic leaves: with a burst of 10, queued
// requests stop at half of it and wait (without a rejection or a freeze),
// and live requests still find the other half.
func TestQueuedRequestsLeaveHalfTheBurstToLiveTraffic(t *testing.T) {
	r := newRig(t)
	r.caller.Tier.FreezeThreshold = 1 // any counted rejection would freeze
	r.provider.answer = answerJSON(okAnswer(6, 10))
	ctx := context.Background()
	queued := func() error {
		req := r.request(providerBody)
		req.Queued = true
		_, err := r.p.Complete(ctx, r.caller, req, newSink())
		return err
	}
	for i := range 5 {
		if err := queued(); err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
	}
	err := queued()
	e := apperr.As(err)
	if e.Reason != completion.ErrWait || e.RetryAfter <= 0 || e.RetryAfter > time.Second {
		t.Fatalf("the sixth job must wait about a refill: %+v", e)
	}
	for i := range 5 {
		if _, _, err := r.complete(ctx, providerBody); err != nil {
			t.Fatalf("live request %d after the jobs: %v", i, err)
		}
	}
	if len(r.recorder.rejections) != 0 {
		t.Fatalf("a waiting job is not a rejection: %v", r.recorder.rejections)
	}
	// A second later one token has refilled: one more job fits.
	r.clock.Advance(time.Second)
	if err := queued(); err == nil {
		t.Fatal("the live half is spent: the refill goes to live traffic first")
	}
	r.clock.Advance(5 * time.Second)
	if err := queued(); err != nil {
		t.Fatalf("after the bucket refilled past half: %v", err)
	}
}

// countingStore counts the histories read.
type countingStore struct {
	conversations.Store
	loads atomic.Int32
}

func (s *countingStore) Load(ctx context.Context, sc conversations.Scope) ([]chat.Message, bool, error) {
	s.loads.Add(1)
	return s.Store.Load(ctx, sc)
}

// TestAHistoryIsPaidForBeforeItIsRead: reading a stored conversation costs
// a request before it is read, so a frozen token or a tenant over its
// limit is refused without one; admitted, the request costs its weight
// once; refused after the read (its tokens), it keeps the one request.
func TestAHistoryIsPaidForBeforeItIsRead(t *testing.T) {
	ctx := context.Background()
	fresh := func() (*rig, *countingStore) {
		r := newRig(t)
		r.provider.answer = answerJSON(okAnswer(6, 10))
		store := &countingStore{Store: r.convs}
		r.deps.Conversations = store
		r.rebuild()
		return r, store
	}
	continued := func(r *rig) (*sink, error) {
		req := r.request(providerBody)
		req.Conversation = "c1"
		s := newSink()
		_, err := r.p.Complete(ctx, r.caller, req, s)
		return s, err
	}

	r, store := fresh()
	r.freezes.Put(quota.Freeze{TokenID: r.caller.TokenID, Until: r.clock.Now().Add(time.Minute), Reason: "too many 429s"})
	if _, err := continued(r); apperr.CodeOf(err) != apperr.Frozen || store.loads.Load() != 0 {
		t.Fatalf("frozen: %v, histories read %d, want none", err, store.loads.Load())
	}

	r, store = fresh()
	for range 10 {
		if _, _, err := r.complete(ctx, providerBody); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := continued(r); apperr.As(err).Reason != "rate_limit_exceeded" || store.loads.Load() != 0 {
		t.Fatalf("over its limit: %v, histories read %d, want none", err, store.loads.Load())
	}

	r, store = fresh()
	s, err := continued(r)
	if err != nil || store.loads.Load() != 1 {
		t.Fatalf("admitted: %v, histories read %d", err, store.loads.Load())
	}
	if got := s.header.Get("x-ratelimit-remaining-requests"); got != "9" || s.header.Get("x-ratelimit-remaining-tokens") == "" {
		t.Fatalf("admitted: remaining requests %q (want 9: one request, paid once), headers %v", got, s.header)
	}

	// A tokens bucket the first request leaves too little of (as in
	// TestBothBucketsAreChargedOrNeither): the next is refused after its
	// history was read, and keeps the one request the read cost.
	r, store = fresh()
	r.provider.answer = answerJSON(okAnswer(6, 100))
	r.caller.Tier.TokensPerMinute = 200
	if _, _, err := r.complete(ctx, providerBody); err != nil {
		t.Fatal(err)
	}
	s, err = continued(r)
	if apperr.As(err).Reason != "tokens_rate_limit_exceeded" {
		t.Fatalf("refused for its tokens: %v", err)
	}
	if got := s.header.Get("x-ratelimit-remaining-requests"); got != "8" || store.loads.Load() != 1 {
		t.Fatalf("refused for its tokens: remaining requests %q (want 8: the first request's and the read's), histories read %d", got, store.loads.Load())
	}
}
