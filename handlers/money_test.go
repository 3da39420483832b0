package handlers

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/chat/family"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/upstream/mock"
)

// billingProvider is the mock provider billing as a real one (o200k over
// the whole body), with answers that run to answerTokens when a request
// sets no bound; it keeps every body it was sent.
type billingProvider struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies [][]byte
	billed []int // the prompt tokens it billed, per answer
}

func newBillingProvider(t *testing.T, answerTokens int) *billingProvider {
	bp := &billingProvider{}
	cfg := mock.Config{Keys: map[string]float64{"sk-billing-key": 0}, AnswerTokens: answerTokens}
	if answerTokens > 1000 {
		// Long answers are counted by words (" ok" is one word and one
		// token): tiktoken-go over 20,000 tokens takes longer than the
		// pool's budget under the race detector.
		cfg.Billing = mock.BillWords
	}
	m := mock.New(cfg)
	bp.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		rec := httptest.NewRecorder()
		m.ServeHTTP(rec, r)
		var u struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			}
		}
		_ = json.Unmarshal(rec.Body.Bytes(), &u)
		bp.mu.Lock()
		bp.bodies = append(bp.bodies, b)
		bp.billed = append(bp.billed, u.Usage.PromptTokens)
		bp.mu.Unlock()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(bp.srv.Close)
	return bp
}

func (bp *billingProvider) sent() [][]byte {
	bp.mu.Lock()
	defer bp.mu.Unlock()
	return append([][]byte(nil), bp.bodies...)
}

// moneyEnv is an organization on a tier with tokens_per_minute off (so
// only money limits it), a provider key on the billing mock, and
// gpt-4o-mini priced $1 in / $10 out per million tokens.
func moneyEnv(t *testing.T, db *models.DB, answerTokens int) (*genEnv, *billingProvider, string, string) {
	// 20 requests at once meet a key whose burst is 1 until it answers:
	// under -race on a busy machine they may wait seconds for it, never
	// long enough for a 300 ms budget to send them to the local model.
	g := newGenEnvWithBudget(t, db, 20*time.Second)
	admin := g.login("admin@example.com", "admin-password")
	bp := newBillingProvider(t, answerTokens)
	g.addKey(t, admin, "billing", bp.srv.URL+"/v1", "sk-billing-key")
	for path, body := range map[string]string{
		"/api/admin/tiers/free":         `{"tokens_per_minute":0,"overage":"bill","capacity":1000,"refill_per_sec":1000,"refill_floor":1}`,
		"/api/admin/prices/gpt-4o-mini": `{"input_per_mtok":"1","output_per_mtok":"10"}`,
	} {
		if w := g.do(request{method: "PUT", path: path, bearer: admin, body: body}); w.Code != 200 {
			t.Fatalf("%s: %d %s", path, w.Code, w.Body.String())
		}
	}
	owner := g.signup("a@example.com", "A")
	key, _ := g.apiToken(owner)
	return g, bp, owner, key
}

func setBudget(t *testing.T, g *genEnv, owner, dollars string) {
	t.Helper()
	if w := g.do(request{method: "PUT", path: "/api/budget", bearer: owner, body: `{"monthly_limit":"` + dollars + `","hard_stop":true}`}); w.Code != 200 {
		t.Fatalf("budget: %d %s", w.Code, w.Body.String())
	}
}

func spent(t *testing.T, g *genEnv, owner string) money.Amount {
	t.Helper()
	var b struct{ Spent, Reserved string }
	w := g.do(request{method: "GET", path: "/api/budget", bearer: owner})
	if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil || dollars(t, b.Reserved) != 0 {
		t.Fatalf("budget %s (%v): nothing should be reserved once every request ended", w.Body.String(), err)
	}
	return dollars(t, b.Spent)
}

func dollars(t *testing.T, s string) money.Amount {
	t.Helper()
	a, err := money.ParseAmount(s)
	if err != nil {
		t.Fatalf("amount %q: %v", s, err)
	}
	return a
}

// parallel sends n copies of body at once and returns the answers.
func parallel(g *genEnv, key, body string, n int) []*requestResult {
	out := make([]*requestResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { out[i] = chatWith(g.env, key, body, nil) })
	}
	wg.Wait()
	return out
}

// TestTheProviderIsHeldToWhatWasReserved is a 38x overspend seen from the
// outside: requests without max_tokens against a hard budget, a provider whose
// answers run to 20,000 tokens. Each request now reserves gpt-4o-mini's
// longest answer (16,384 tokens, $0.16384 at $10 a million) and carries it
// to the provider as max_completion_tokens, so six fit a $1 budget, each
// answer stops there, and the budget holds.
func TestTheProviderIsHeldToWhatWasReserved(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		g, bp, owner, key := moneyEnv(t, db, 20_000)
		setBudget(t, g, owner, "1.00")
		const body = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"write me a long story"}]}`
		admitted := 0
		for _, r := range parallel(g, key, body, 20) {
			switch {
			case r.Code == 200 && r.H.Get("X-Sluice-Fallback") != "":
				t.Fatalf("answered by the fallback, not the provider: %s", r.Body)
			case r.Code == 200:
				admitted++
			case r.Code != 429 || r.H.Get("x-should-retry") != "false" || !strings.Contains(r.Body, `"code":"insufficient_quota"`) ||
				!strings.Contains(r.Body, "16384 completion tokens, the model's longest answer, as no max_tokens was sent"):
				t.Fatalf("refusal %d %v %s", r.Code, r.H, r.Body)
			}
		}
		if admitted != 6 {
			t.Errorf("%d admitted, want the 6 whose worst cases fit $1", admitted)
		}
		if s := spent(t, g, owner); s > dollars(t, "1.00") || s < dollars(t, "0.98") {
			t.Fatalf("spent $%s of a $1.00 hard budget, want the 6 answers of 16,384 tokens (about $0.983)", s)
		}
		for _, sent := range bp.sent() {
			var client, got map[string]json.RawMessage
			_ = json.Unmarshal([]byte(body), &client)
			_ = json.Unmarshal(sent, &got)
			if string(got["max_completion_tokens"]) != "16384" {
				t.Fatalf("the provider got %s: no bound, or another", sent)
			}
			delete(got, "max_completion_tokens")
			if a, b := mustJSON(client), mustJSON(got); a != b {
				t.Fatalf("the body changed beyond the bound: %s, from %s", b, a)
			}
		}
	})
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestOnlyTheBoundSluiceReservedIsSent: a client's own max_tokens is kept
// (the body goes byte for byte); without a limit relying on the estimate
// nothing is added; a tokens-per-minute bucket bounds the answer to what
// it can hold; the field follows the family (max_tokens for models that
// are not OpenAI's).
func TestOnlyTheBoundSluiceReservedIsSent(t *testing.T) {
	g, bp, owner, key := moneyEnv(t, testdb.SQLite(t), 0)
	admin := g.login("admin@example.com", "admin-password")
	last := func() string { s := bp.sent(); return string(s[len(s)-1]) }
	send := func(body string) {
		t.Helper()
		if r := chatWith(g.env, key, body, nil); r.Code != 200 {
			t.Fatalf("%s: %d %s", body, r.Code, r.Body)
		}
	}

	unbounded := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	send(unbounded)
	if last() != unbounded {
		t.Errorf("no limit relies on the estimate, yet the body changed: %s", last())
	}
	setBudget(t, g, owner, "5.00")
	own := `{"model":"gpt-4o-mini", "max_tokens": 50, "messages":[{"role":"user","content":"hi"}]}`
	send(own)
	if last() != own {
		t.Errorf("the client's own max_tokens was not kept as written: %s", last())
	}
	if w := g.do(request{method: "PUT", path: "/api/admin/tiers/free", bearer: admin, body: `{"tokens_per_minute":10000,"overage":"bill","capacity":1000,"refill_per_sec":1000,"refill_floor":1}`}); w.Code != 200 {
		t.Fatal(w.Body.String())
	}
	send(unbounded)
	prompt := family.Of("gpt-4o-mini").Counter.Count([]byte("hi")) + 4 + 3
	if want := `"max_completion_tokens":` + strconv.Itoa(10000-prompt-5000) + `}`; !strings.HasSuffix(last(), want) {
		t.Errorf("with a 10,000-token bucket the provider got %s, want it to end %s (half the bucket)", last(), want)
	}
	stream := `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_obfuscation":false},"messages":[{"role":"user","content":"hi"}]}`
	send(stream)
	if got := last(); !strings.Contains(got, `"stream_options":{"include_obfuscation":false,"include_usage":true}`) || !strings.Contains(got, `"max_completion_tokens":`) {
		t.Errorf("a stream's options were not kept with include_usage added: %s", got)
	}
	// A client's max_completion_tokens alone is sent as max_tokens too to
	// a model whose API reads that one (DeepSeek and Ollama ignore the
	// other, and would answer past what was reserved); OpenAI's own read
	// it, and get the body as written.
	if w := g.do(request{method: "POST", path: "/api/admin/upstreams", bearer: admin,
		body: `{"name":"deepseek","base_url":"` + bp.srv.URL + `/v1","api_key":"sk-billing-key","models":["deepseek-chat","prod-reasoner"]}`}); w.Code != 201 {
		t.Fatalf("add key: %d %s", w.Code, w.Body.String())
	}
	deep := `{"model":"deepseek-chat","max_completion_tokens":50,"messages":[{"role":"user","content":"hi"}]}`
	send(deep)
	if want := strings.TrimSuffix(deep, "}") + `,"max_tokens":50}`; last() != want {
		t.Errorf("max_completion_tokens to a DeepSeek model: the provider got %s, want %s", last(), want)
	}
	// A name Sluice cannot tell (an Azure deployment of a reasoning model,
	// which refuses max_tokens) gets the body as written, as OpenAI's own.
	for _, model := range []string{"gpt-4o-mini", "prod-reasoner"} {
		body := `{"model":"` + model + `","max_completion_tokens":50,"messages":[{"role":"user","content":"hi"}]}`
		send(body)
		if last() != body {
			t.Errorf("max_completion_tokens to %s was not kept as written: %s", model, last())
		}
	}
}

// TestTheEstimateCountsWhatTheProviderBills: tools, images and schemas
// are counted, so a hard budget holds against prompts the text alone
// does not show: 40 KB of tools with max_tokens 1 against $0.05, and a
// large inline image. Every reservation is at least what the provider
// billed.
func TestTheEstimateCountsWhatTheProviderBills(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		g, bp, owner, key := moneyEnv(t, db, 0)
		setBudget(t, g, owner, "0.05")
		var tools []string
		for i := 0; len(strings.Join(tools, ",")) < 40<<10; i++ {
			tools = append(tools, `{"type":"function","function":{"name":"tool_`+strconv.Itoa(i)+`","description":"Looks up the record `+
				strconv.Itoa(i)+` in the customer database and returns its fields as JSON.","parameters":{"type":"object","properties":{"id":{"type":"string","description":"The record's id"},"fields":{"type":"array","items":{"type":"string"}}}}}}`)
		}
		body := `{"model":"gpt-4o-mini","max_tokens":1,"tools":[` + strings.Join(tools, ",") + `],"messages":[{"role":"user","content":"look up 7"}]}`
		admitted := 0
		for range 8 {
			if r := chatWith(g.env, key, body, nil); r.Code == 200 {
				admitted++
			} else if r.Code != 429 || !strings.Contains(r.Body, "insufficient_quota") {
				t.Fatalf("%d %s", r.Code, r.Body)
			}
		}
		if s := spent(t, g, owner); admitted == 0 || s > dollars(t, "0.05") {
			t.Fatalf("%d admitted, $%s spent of a $0.05 hard budget", admitted, s)
		}

		var png64 bytes.Buffer
		_ = png.Encode(base64.NewEncoder(base64.StdEncoding, &png64), image.NewGray(image.Rect(0, 0, 2000, 1000)))
		img := `{"model":"gpt-4o-mini","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"what is it?"},` +
			`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + png64.String() + `"}}]}]}`
		setBudget(t, g, owner, "10.00")
		if r := chatWith(g.env, key, img, nil); r.Code != 200 {
			t.Fatalf("image: %d %s", r.Code, r.Body)
		}
		// gpt-4o-mini prices an image at 2,833 + 5,667 a tile: 2000×1000
		// is scaled to 1536×768, 6 tiles, 36,835 tokens, against the
		// mock's 85 + 170 a tile: the reservation is above the bill.
		bp.mu.Lock()
		billed := bp.billed[len(bp.billed)-1]
		bp.mu.Unlock()
		if billed < 85+170*6 {
			t.Fatalf("the mock billed %d for the image prompt", billed)
		}
	})
}

// TestAPartThatCannotBePricedIsRefusedWhenALimitReliesOnIt: an audio part
// passes while nothing relies on the estimate, and is a 400 naming it and
// the limit once a hard budget does.
func TestAPartThatCannotBePricedIsRefusedWhenALimitReliesOnIt(t *testing.T) {
	g, _, owner, key := moneyEnv(t, testdb.SQLite(t), 0)
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":[{"type":"text","text":"what is said?"},` +
		`{"type":"input_audio","input_audio":{"data":"UklGRiQAAABXQVZF","format":"wav"}}]}]}`
	if r := chatWith(g.env, key, body, nil); r.Code != 200 {
		t.Fatalf("without a limit relying on the estimate: %d %s", r.Code, r.Body)
	}
	setBudget(t, g, owner, "5.00")
	r := chatWith(g.env, key, body, nil)
	if r.Code != 400 || !strings.Contains(r.Body, `"code":"unsupported_content"`) || !strings.Contains(r.Body, `"param":"messages[0].content[1]"`) ||
		!strings.Contains(r.Body, `what the input_audio part at messages[0].content[1] will cost cannot be known before the provider answers, and this request's spending limit (the organization's monthly budget) needs that bound`) {
		t.Fatalf("with a hard budget: %d %s", r.Code, r.Body)
	}
}
