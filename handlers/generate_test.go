package handlers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/chat"
	"github.com/sluicehq/sluice/chat/family"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/conversations"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/providers"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/respcache"
	"github.com/sluicehq/sluice/secrets"
	"github.com/sluicehq/sluice/upstream"
	"github.com/sluicehq/sluice/upstream/mock"
)

// genEnv is env with a provider pool, a response cache and sessions.
type genEnv struct {
	*env
	pool      *upstream.Pool
	providers *providers.Service
	mock      *mock.Server
	mockURL   string
	disabled  <-chan struct{} // a key was disabled and the store updated
}

func newGenEnv(t *testing.T, db *models.DB) *genEnv {
	return newGenEnvWithBudget(t, db, 300*time.Millisecond)
}

// newGenEnvWithBudget is newGenEnv with the pool's retry budget: what a
// request may wait for a key, which many requests at once to a key not yet
// paced (its burst is 1 until its first answer) need more of on a busy
// machine.
func newGenEnvWithBudget(t *testing.T, db *models.DB, budget time.Duration) *genEnv {
	e := newEnv(t, db)
	m := mock.New(mock.Config{Keys: map[string]float64{"sk-mock-key": 0}, StreamChunks: 3})
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	pool := upstream.NewPool(upstream.PoolOptions{AttemptTimeout: 2 * time.Second, AnswerTimeout: 2 * time.Second, Budget: budget,
		MaxBackoff: 5 * time.Millisecond, BaseBackoff: time.Millisecond, StallTimeout: 150 * time.Millisecond, Log: discardLog()})
	box, _ := secrets.NewBox(bytes.Repeat([]byte{4}, 32))
	prov := providers.New(e.store, box, pool, cluster.None{}, discardLog())
	disabled := make(chan struct{}, 10)
	go func() { // as PersistRefusals does, saying when each is stored
		for r := range pool.Refusals() {
			prov.Disable(context.Background(), r.KeyID, r.Reason)
			disabled <- struct{}{}
		}
	}()
	cache, err := respcache.NewMemory(1<<20, e.clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	e.pipe.Providers, e.pipe.Cache, e.pipe.CacheTTL = pool, cache, time.Minute
	e.deps.Providers, e.deps.PoolStatus, e.deps.Models, e.deps.MaxBodyBytes = prov, pool.Status, pool.Models, 1<<20
	e.rebuild()
	return &genEnv{env: e, pool: pool, providers: prov, mock: m, mockURL: srv.URL + "/v1", disabled: disabled}
}

// addKey adds a provider key through the admin API.
func (g *genEnv) addKey(t *testing.T, admin, name, baseURL, secret string) {
	t.Helper()
	w := g.do(request{method: "POST", path: "/api/admin/upstreams", bearer: admin,
		body: `{"name":"` + name + `","base_url":"` + baseURL + `","api_key":"` + secret + `","models":["gpt-4o-mini"]}`})
	if w.Code != 201 {
		t.Fatalf("add key: %d %s", w.Code, w.Body.String())
	}
}

const gptBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"tell me about rivers"}]}`

func TestProviderKeysAdminAPI(t *testing.T) {
	g := newGenEnv(t, testdb.SQLite(t))
	admin := g.login("admin@example.com", "admin-password")
	member := g.signup("m@example.com", "M")
	if w := g.do(request{method: "POST", path: "/api/admin/upstreams", bearer: member, body: `{}`}); w.Code != 403 {
		t.Fatalf("member: %d", w.Code)
	}
	w := g.do(request{method: "POST", path: "/api/admin/upstreams", bearer: admin,
		body: `{"name":"main","base_url":"` + g.mockURL + `","api_key":"sk-mock-key","weight":2,"rpm":600,"models":["gpt-4o-mini"]}`})
	if w.Code != 201 || strings.Contains(w.Body.String(), "sk-mock-key") || !strings.Contains(w.Body.String(), `"api_key_last4":"-key"`) {
		t.Fatalf("create: %d %s", w.Code, w.Body.String())
	}
	if w := g.do(request{method: "POST", path: "/api/admin/upstreams", bearer: admin, body: `{"name":"x","base_url":"ftp://x","api_key":"sk-12345678"}`}); w.Code != 422 {
		t.Fatalf("bad base url: %d", w.Code)
	}
	w = g.do(request{method: "GET", path: "/api/admin/upstreams", bearer: admin})
	if !strings.Contains(w.Body.String(), `"state":"healthy"`) || strings.Contains(w.Body.String(), "sk-mock-key") {
		t.Fatalf("list: %s", w.Body.String())
	}
	page := g.browserLogin(t, "admin@example.com", "admin-password").do("GET", "/admin/upstreams", nil, nil).Body.String()
	if !strings.Contains(page, `data-testid="upstream-row"`) || strings.Contains(page, "sk-mock-key") {
		t.Fatal("the upstreams page must list the key without its secret")
	}
	ks, _ := g.store.UpstreamKeys(context.Background())
	if w := g.do(request{method: "DELETE", path: "/api/admin/upstreams/" + itoa(ks[0].ID), bearer: admin}); w.Code != 200 {
		t.Fatalf("delete: %d", w.Code)
	}
	if g.pool.Serves("gpt-4o-mini") {
		t.Fatal("a deleted key still serves")
	}
}

func TestChatThroughAProvider(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		g := newGenEnv(t, db)
		admin := g.login("admin@example.com", "admin-password")
		member := g.signup("a@example.com", "A")
		key, _ := g.apiToken(member)
		if w := g.do(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: gptBody}); w.Code != 404 || errorCode(t, w) != "model_not_found" {
			t.Fatalf("before any key: %d %s", w.Code, w.Body.String())
		}
		g.addKey(t, admin, "main", g.mockURL, "sk-mock-key")
		w := g.do(request{method: "GET", path: "/v1/models", bearer: key})
		if !strings.Contains(w.Body.String(), `"id":"gpt-4o-mini"`) || !strings.Contains(w.Body.String(), `"id":"sluice-local"`) {
			t.Fatalf("models: %s", w.Body.String())
		}
		w = g.do(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: gptBody})
		if w.Code != 200 || !strings.Contains(w.Body.String(), "mock reply to: tell me about rivers") || w.Header().Get("x-sluice-upstream-attempts") != "1" {
			t.Fatalf("chat: %d %s", w.Code, w.Body.String())
		}
		if g.mock.Stats().Total.OK != 1 {
			t.Fatalf("the provider saw %+v", g.mock.Stats().Total)
		}
		u, _ := g.store.UsageSince(context.Background(), orgOf(t, g.env, "a@example.com"), time.Now().Add(-time.Hour))
		if u.Requests != 1 || u.TotalTokens() == 0 {
			t.Fatalf("usage %+v", u)
		}

		// Streaming: relayed events, billed by the provider's usage chunk,
		// which Sluice asks for and leaves out for a client that did not.
		w = g.do(request{method: "POST", path: "/v1/chat/completions", bearer: key,
			body: `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"stream please"}]}`})
		if w.Code != 200 || !strings.Contains(w.Body.String(), "data: [DONE]") || strings.Contains(w.Body.String(), `"usage"`) ||
			strings.Contains(w.Body.String(), "\n\n\n") {
			t.Fatalf("stream: %d %s", w.Code, w.Body.String())
		}
		before := u
		u, _ = g.store.UsageSince(context.Background(), orgOf(t, g.env, "a@example.com"), time.Now().Add(-time.Hour))
		if want := int64(family.Of("gpt-4o-mini").Counter.Count([]byte("mock reply to: stream please"))); u.Requests != 2 || u.CompletionTokens-before.CompletionTokens != want {
			t.Fatalf("stream not metered by the provider's usage: %+v after %+v, want %d more completion tokens", u, before, want)
		}
		// A client that asks for the usage chunk gets it.
		w = g.do(request{method: "POST", path: "/v1/chat/completions", bearer: key,
			body: `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"stream please"}]}`})
		if w.Code != 200 || strings.Count(w.Body.String(), `"usage":{`) != 1 {
			t.Fatalf("stream with usage: %d %s", w.Code, w.Body.String())
		}
	})
}

func orgOf(t *testing.T, e *env, email string) int64 {
	u, err := e.store.UserByEmail(context.Background(), email)
	if err != nil {
		t.Fatal(err)
	}
	return u.LastOrgID
}

func TestFallbackWhenProvidersAreDown(t *testing.T) {
	g := newGenEnv(t, testdb.SQLite(t))
	admin := g.login("admin@example.com", "admin-password")
	key, _ := g.apiToken(g.signup("a@example.com", "A"))
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL + "/v1"
	dead.Close() // connection refused from now on
	g.addKey(t, admin, "dead", deadURL, "sk-dead-key")

	w := g.do(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: gptBody})
	if w.Code != 200 || w.Header().Get("x-sluice-fallback") != "local" || !strings.Contains(w.Body.String(), `"model":"sluice-local"`) {
		t.Fatalf("fallback: %d %v %s", w.Code, w.Header(), w.Body.String())
	}

	if w := g.do(request{method: "PUT", path: "/api/admin/tiers/free", bearer: admin, body: `{"upstream_fallback":"error"}`}); w.Code != 200 {
		t.Fatalf("tier: %d %s", w.Code, w.Body.String())
	}
	w = g.do(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: gptBody})
	if w.Code != 503 || errorCode(t, w) != "upstream_unavailable" || w.Header().Get("Retry-After") == "" || w.Header().Get("x-sluice-fallback") != "" {
		t.Fatalf("503: %d %v %s", w.Code, w.Header(), w.Body.String())
	}
}

func TestStalledStreamEndsWithAnErrorEvent(t *testing.T) {
	g := newGenEnv(t, testdb.SQLite(t))
	admin := g.login("admin@example.com", "admin-password")
	key, _ := g.apiToken(g.signup("a@example.com", "A"))
	stall := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.Write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"half an ans\"}}]}\n\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done() // then nothing, until the gateway gives up
	}))
	defer stall.Close()
	g.addKey(t, admin, "stall", stall.URL+"/v1", "sk-stall-key")
	start := time.Now()
	w := g.do(request{method: "POST", path: "/v1/chat/completions", bearer: key,
		body: `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`})
	if !strings.Contains(w.Body.String(), "half an ans") || !strings.Contains(w.Body.String(), `"code":"upstream_stalled"`) {
		t.Fatalf("body %s", w.Body.String())
	}
	if time.Since(start) > 3*time.Second {
		t.Fatalf("took %v to give up on a stalled provider", time.Since(start))
	}
}

func TestResponseCache(t *testing.T) {
	db := testdb.SQLite(t)
	g := newGenEnv(t, db)
	keyA, _ := g.apiToken(g.signup("a@example.com", "A"))
	keyB, _ := g.apiToken(g.signup("b@example.com", "B"))
	det := `{"model":"sluice-local","temperature":0,"messages":[{"role":"user","content":"写一副春联"}]}`
	reordered := `{"temperature":0, "messages":[{"content":"写一副春联","role":"user"}],"model":"sluice-local","user":"x"}`
	first := g.do(request{method: "POST", path: "/v1/chat/completions", bearer: keyA, body: det})
	second := g.do(request{method: "POST", path: "/v1/chat/completions", bearer: keyA, body: reordered})
	other := g.do(request{method: "POST", path: "/v1/chat/completions", bearer: keyB, body: det})
	warm := g.do(request{method: "POST", path: "/v1/chat/completions", bearer: keyA, body: chatBody})
	if first.Header().Get("X-Cache") != "MISS" || second.Header().Get("X-Cache") != "HIT" || other.Header().Get("X-Cache") != "MISS" {
		t.Fatalf("X-Cache: %q %q %q", first.Header().Get("X-Cache"), second.Header().Get("X-Cache"), other.Header().Get("X-Cache"))
	}
	if first.Body.String() != second.Body.String() {
		t.Fatal("a hit must return the stored answer")
	}
	if warm.Header().Get("X-Cache") != "" {
		t.Fatal("a non-deterministic request must not touch the cache")
	}
	forced := g.do(request{method: "POST", path: "/v1/chat/completions", bearer: keyA, body: chatBody, header: map[string]string{"X-Sluice-Cache": "on"}})
	if forced.Header().Get("X-Cache") != "MISS" {
		t.Fatal("X-Sluice-Cache: on must cache")
	}
	var cached, all int64
	db.Gorm.Raw("SELECT COUNT(*) FROM usage_events WHERE cached").Scan(&cached)
	db.Gorm.Raw("SELECT COUNT(*) FROM usage_events").Scan(&all)
	if cached != 1 || all != 5 {
		t.Fatalf("metered %d requests, %d as cached; want 5 and 1", all, cached)
	}
}

func TestRefusedKeyIsDisabledAndShown(t *testing.T) {
	g := newGenEnv(t, testdb.SQLite(t))
	admin := g.login("admin@example.com", "admin-password")
	key, _ := g.apiToken(g.signup("a@example.com", "A"))
	g.addKey(t, admin, "revoked-at-provider", g.mockURL, "sk-not-accepted") // the mock answers 401
	w := g.do(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: gptBody})
	if w.Code != 200 || w.Header().Get("x-sluice-fallback") != "local" {
		t.Fatalf("with its only key refused: %d %v", w.Code, w.Header())
	}
	select {
	case <-g.disabled:
	case <-time.After(5 * time.Second):
		t.Fatal("the refused key was never disabled")
	}
	ks, _ := g.store.UpstreamKeys(context.Background())
	if ks[0].DisabledAt == nil || !strings.Contains(ks[0].DisabledReason, "401") {
		t.Fatalf("stored %+v", ks[0])
	}
	page := g.browserLogin(t, "admin@example.com", "admin-password").do("GET", "/admin/upstreams", nil, nil).Body.String()
	if !strings.Contains(page, `data-testid="upstream-alert"`) || strings.Contains(page, "sk-not-accepted") {
		t.Fatal("no alert for the disabled key on the upstreams page")
	}
}

func TestSessionsAreIsolatedAndExpire(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		g := newGenEnv(t, db)
		a := g.signup("a@example.com", "A")
		keyA, _ := g.apiToken(a)
		keyA2, _ := g.apiToken(a) // same org, another token
		keyB, _ := g.apiToken(g.signup("b@example.com", "B"))
		hdr := map[string]string{"X-Sluice-Session": "trip-1"}
		body := func(s string) string {
			return `{"model":"sluice-local","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"` + s + `"}]}`
		}
		first := g.do(request{method: "POST", path: "/v1/chat/completions", bearer: keyA, body: body("first question about tea"), header: hdr})
		second := g.do(request{method: "POST", path: "/v1/chat/completions", bearer: keyA, body: body("second question about tea"), header: hdr})
		p1 := decode(t, first)["usage"].(map[string]any)["prompt_tokens"].(float64)
		p2 := decode(t, second)["usage"].(map[string]any)["prompt_tokens"].(float64)
		if p2 <= p1+5 {
			t.Fatalf("history not prepended: prompt tokens %v then %v", p1, p2)
		}
		w := g.do(request{method: "GET", path: "/v1/sessions/trip-1", bearer: keyA})
		got := w.Body.String()
		if w.Code != 200 || strings.Count(got, `"role":"system"`) != 1 || !strings.Contains(got, "first question") || !strings.Contains(got, "second question") || strings.Count(got, `"role":"assistant"`) != 2 {
			t.Fatalf("session: %d %s", w.Code, got)
		}
		for name, k := range map[string]string{"another token": keyA2, "another org": keyB} {
			if w := g.do(request{method: "GET", path: "/v1/sessions/trip-1", bearer: k}); w.Code != 404 {
				t.Errorf("%s reads the session: %d", name, w.Code)
			}
			if w := g.do(request{method: "DELETE", path: "/v1/sessions/trip-1", bearer: k}); w.Code != 404 {
				t.Errorf("%s deletes the session: %d", name, w.Code)
			}
			// Writing under the same id starts its own session, never extends A's.
			g.do(request{method: "POST", path: "/v1/chat/completions", bearer: k, body: body("intruder"), header: hdr})
		}
		if w := g.do(request{method: "GET", path: "/v1/sessions/trip-1", bearer: keyA}); strings.Contains(w.Body.String(), "intruder") {
			t.Fatal("another token extended the session")
		}
		if w := g.do(request{method: "GET", path: "/v1/sessions/bad%20id", bearer: keyA}); w.Code != 404 {
			t.Fatalf("bad id: %d", w.Code)
		}
		if w := g.do(request{method: "POST", path: "/v1/chat/completions", bearer: keyA, body: body("x"), header: map[string]string{"X-Sluice-Session": "bad id!"}}); w.Code != 400 {
			t.Fatalf("bad session header: %d", w.Code)
		}
		g.clock.Advance(31 * time.Minute)
		if w := g.do(request{method: "GET", path: "/v1/sessions/trip-1", bearer: keyA}); w.Code != 404 {
			t.Fatalf("an idle session outlived its TTL: %d", w.Code)
		}
		g.do(request{method: "POST", path: "/v1/chat/completions", bearer: keyA, body: body("again"), header: hdr})
		if w := g.do(request{method: "DELETE", path: "/v1/sessions/trip-1", bearer: keyA}); w.Code != 200 {
			t.Fatalf("delete: %d", w.Code)
		}
		if w := g.do(request{method: "GET", path: "/v1/sessions/trip-1", bearer: keyA}); w.Code != 404 {
			t.Fatalf("after delete: %d", w.Code)
		}
	})
}

// openStream sends a chat completion to a gateway on ctx, which the
// caller cancels to hang up, and returns the answer as it starts.
func openStream(t *testing.T, ctx context.Context, gateway, key, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", gateway+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// ctxLimiter records whether Adjust ran on a live context.
type ctxLimiter struct {
	*quota.Memory
	mu        sync.Mutex
	adjusts   int
	cancelled int
}

func (l *ctxLimiter) Adjust(ctx context.Context, key string, p quota.Params, delta int64) error {
	l.mu.Lock()
	l.adjusts++
	if ctx.Err() != nil {
		l.cancelled++
	}
	l.mu.Unlock()
	return l.Memory.Adjust(ctx, key, p, delta)
}

func TestClientLeavingMidStreamIsBilledForWhatWasDelivered(t *testing.T) {
	g := newGenEnv(t, testdb.SQLite(t))
	admin := g.login("admin@example.com", "admin-password")
	key, _ := g.apiToken(g.signup("a@example.com", "A"))
	upstreamGone := make(chan struct{})
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"one two three\"}}]}\n\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the gateway must cancel us when its client leaves
		close(upstreamGone)
	}))
	defer provider.Close()
	g.addKey(t, admin, "slow", provider.URL+"/v1", "sk-slow-stream")
	limiter := &ctxLimiter{Memory: quota.NewMemory(g.clock.Now)}
	g.pipe.Limiter = limiter
	g.rebuild()
	gateway := httptest.NewServer(g.h)
	defer gateway.Close()

	ctx, cancel := context.WithCancel(context.Background())
	resp := openStream(t, ctx, gateway.URL, key, `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	first := make([]byte, 64)
	if n, _ := resp.Body.Read(first); !strings.Contains(string(first[:n]), "one two three") {
		t.Fatalf("first bytes %q", first[:n])
	}
	cancel() // the client hangs up mid-stream
	resp.Body.Close()
	select {
	case <-upstreamGone:
	case <-time.After(5 * time.Second):
		t.Fatal("the provider request was not cancelled when the client left")
	}
	deadline := time.Now().Add(5 * time.Second)
	var u models.UsageTotals
	for time.Now().Before(deadline) {
		u, _ = g.store.UsageSince(context.Background(), orgOf(t, g.env, "a@example.com"), time.Now().Add(-time.Hour))
		if u.Requests == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Billed for what was delivered, by our own count with the model's
	// tokenizer (the provider sent no usage).
	if want := int64(family.Of("gpt-4o-mini").Counter.Count([]byte("one two three"))); u.Requests != 1 || u.CompletionTokens != want || want != 3 {
		t.Fatalf("usage %+v, want one request with %d completion tokens", u, want)
	}
	limiter.mu.Lock()
	defer limiter.mu.Unlock()
	if limiter.adjusts == 0 || limiter.cancelled != 0 {
		t.Fatalf("settling ran %d times, %d of them on a cancelled context", limiter.adjusts, limiter.cancelled)
	}
}

// usageOnceBilled is the usage of owner's organization over the last hour,
// once its first request is recorded (settlement follows the answer), or
// what there is after 5 s.
func usageOnceBilled(t *testing.T, g *genEnv, owner string) models.UsageTotals {
	t.Helper()
	var u models.UsageTotals
	for deadline := time.Now().Add(5 * time.Second); u.Requests == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		u, _ = g.store.UsageSince(context.Background(), orgOf(t, g.env, owner), time.Now().Add(-time.Hour))
	}
	return u
}

// TestAWholeAnswerLeftBeforeItCameIsBilledInFull: a client that hangs up
// on a request that is not streamed, once the provider has it, does not
// take the bill with it. The provider answers, and bills, in full whether
// anyone is left to read it; Sluice reads the answer on and bills the
// usage it reports. (Before, the provider's request was cancelled with the
// client's and nothing was billed: a hostile tenant could have any prompt
// answered at the provider for free by hanging up a moment before the
// answer.)
func TestAWholeAnswerLeftBeforeItCameIsBilledInFull(t *testing.T) {
	g := newGenEnv(t, testdb.SQLite(t))
	admin := g.login("admin@example.com", "admin-password")
	key, _ := g.apiToken(g.signup("a@example.com", "A"))
	received, clientGone := make(chan struct{}), make(chan struct{})
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		close(received)
		select { // the answer comes after the client has gone
		case <-clientGone:
		case <-time.After(10 * time.Second):
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"a long answer"},"finish_reason":"stop"}],` +
			`"usage":{"prompt_tokens":50000,"completion_tokens":30000,"total_tokens":80000}}`))
	}))
	defer provider.Close()
	g.addKey(t, admin, "whole", provider.URL+"/v1", "sk-whole-answer")
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			context.AfterFunc(r.Context(), func() { close(clientGone) }) // the gateway has seen its client leave
		}
		g.h.ServeHTTP(w, r)
	}))
	defer gateway.Close()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan string, 1) // what the client got, "" for nothing
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", gateway.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o-mini","max_tokens":16000,"messages":[{"role":"user","content":"write at length"}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- ""
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	}()
	select {
	case <-received:
	case got := <-done:
		t.Fatalf("answered before the provider was asked: %s", got)
	}
	cancel() // the client hangs up while the provider is answering
	if got := <-done; got != "" {
		t.Fatalf("the client got an answer after hanging up: %s", got)
	}
	u := usageOnceBilled(t, g, "a@example.com")
	if u.Requests != 1 || u.PromptTokens != 50_000 || u.CompletionTokens != 30_000 {
		t.Fatalf("billed %+v, want the provider's 50000 prompt and 30000 completion tokens", u)
	}
}

// TestAStreamLeftBeforeItsFirstWordPaysForThePrompt: a client that hangs
// up on a stream once the provider has its request, before a word came
// back, ends the provider's request (nothing more is generated) but not
// the bill for the prompt the provider read: the prompt's estimate is
// billed, on a usage event of status 499. (Before, nothing was billed: a
// tenant could have any prompt read at the provider for free by hanging
// up before the first word.)
func TestAStreamLeftBeforeItsFirstWordPaysForThePrompt(t *testing.T) {
	db := testdb.SQLite(t)
	g := newGenEnv(t, db)
	admin := g.login("admin@example.com", "admin-password")
	key, _ := g.apiToken(g.signup("a@example.com", "A"))
	received, upstreamGone := make(chan struct{}), make(chan struct{})
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		close(received)
		<-r.Context().Done() // no headers until the gateway gives up on us
		close(upstreamGone)
	}))
	defer provider.Close()
	g.addKey(t, admin, "slow-first-word", provider.URL+"/v1", "sk-slow-first-word")
	gateway := httptest.NewServer(g.h)
	defer gateway.Close()

	prompt := strings.Repeat("Summarise the quarterly report in detail. ", 200)
	body := `{"model":"gpt-4o-mini","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"` + prompt + `"}]}`
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", gateway.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	select {
	case <-received:
	case err := <-done:
		t.Fatalf("answered before the provider was asked: %v", err)
	}
	cancel() // the client hangs up before the first word
	if err := <-done; err == nil {
		t.Fatal("the client got an answer after hanging up")
	}
	select {
	case <-upstreamGone:
	case <-time.After(5 * time.Second):
		t.Fatal("the provider request was not cancelled when the client left")
	}
	u := usageOnceBilled(t, g, "a@example.com")
	estimate, err := g.deps.Pipeline.Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if u.Requests != 1 || u.PromptTokens != estimate.Prompt.Tokens || u.CompletionTokens != 0 || estimate.Prompt.Tokens < 1000 {
		t.Fatalf("billed %+v, want the prompt's %d tokens and no completion", u, estimate.Prompt.Tokens)
	}
	var status int
	if err := db.Gorm.Model(&models.UsageEvent{}).Select("status").Scan(&status).Error; err != nil || status != 499 {
		t.Fatalf("the usage event's status %d (%v), want 499: its client closed the request", status, err)
	}
}

// TestAStreamLeftAfterItsLastWordPaysTheProvidersBill: a client that
// hangs up once the answer has finished does not take the usage chunk with
// it: Sluice reads on, within SLUICE_USAGE_GRACE, and bills what the
// provider reports; past the grace it bills its own count.
func TestAStreamLeftAfterItsLastWordPaysTheProvidersBill(t *testing.T) {
	for _, tt := range []struct {
		name           string
		grace          time.Duration
		prompt, answer int64 // what is billed
	}{
		{"within the grace", 5 * time.Second, 50_000, 30_000},
		{"past the grace", 20 * time.Millisecond, -1, 3}, // -1: the prompt's estimate
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := newGenEnv(t, testdb.SQLite(t))
			admin := g.login("admin@example.com", "admin-password")
			key, _ := g.apiToken(g.signup("a@example.com", "A"))
			asked := make(chan bool, 1) // whether the provider was asked for the usage chunk
			provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				asked <- strings.Contains(string(b), `"include_usage":true`)
				w.Header().Set("Content-Type", "text/event-stream")
				w.Write([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"one two three\"},\"finish_reason\":null}]}\n\n" +
					"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"))
				w.(http.Flusher).Flush()
				select { // the usage comes a while after the last word (within the pool's stall timeout)
				case <-time.After(100 * time.Millisecond):
				case <-r.Context().Done():
					return
				}
				w.Write([]byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":50000,\"completion_tokens\":30000,\"total_tokens\":80000}}\n\ndata: [DONE]\n\n"))
			}))
			defer provider.Close()
			g.addKey(t, admin, "late", provider.URL+"/v1", "sk-late-usage")
			g.pipe.UsageGrace = tt.grace
			g.rebuild()
			gateway := httptest.NewServer(g.h)
			defer gateway.Close()

			ctx, cancel := context.WithCancel(context.Background())
			resp := openStream(t, ctx, gateway.URL, key, `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"count to three"}]}`)
			var read []byte
			buf := make([]byte, 512)
			for !strings.Contains(string(read), `"finish_reason":"stop"`) {
				n, err := resp.Body.Read(buf)
				read = append(read, buf[:n]...)
				if err != nil {
					t.Fatalf("the stream ended before its finish: %q %v", read, err)
				}
			}
			cancel() // the client has its answer and hangs up
			resp.Body.Close()
			if !<-asked {
				t.Fatal("the provider was not asked for its usage chunk")
			}
			u := usageOnceBilled(t, g, "a@example.com")
			prompt := tt.prompt
			if prompt < 0 { // the estimate: "count to three" and the framing
				prompt = int64(family.Of("gpt-4o-mini").Counter.Count([]byte("count to three"))) + 4 + 3
			}
			if u.Requests != 1 || u.PromptTokens != prompt || u.CompletionTokens != tt.answer {
				t.Fatalf("billed %+v, want %d prompt and %d completion tokens", u, prompt, tt.answer)
			}
		})
	}
}

func TestRefusedRequestsDoNotDrainAProviderKey(t *testing.T) {
	g := newGenEnv(t, testdb.SQLite(t))
	admin := g.login("admin@example.com", "admin-password")
	key, _ := g.apiToken(g.signup("a@example.com", "A"))
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(string(b), "invalid") {
			w.WriteHeader(400)
			w.Write([]byte(`{"error":{"message":"bad request","type":"invalid_request_error","code":"bad"}}`))
			return
		}
		w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"fine"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`))
	}))
	defer provider.Close()
	w := g.do(request{method: "POST", path: "/api/admin/upstreams", bearer: admin,
		body: `{"name":"small","base_url":"` + provider.URL + `/v1","api_key":"sk-small-key","tpm":600,"models":["gpt-4o-mini"]}`})
	if w.Code != 201 {
		t.Fatalf("add key: %d", w.Code)
	}
	for range 3 {
		w := g.do(request{method: "POST", path: "/v1/chat/completions", bearer: key,
			body: `{"model":"gpt-4o-mini","max_tokens":500,"messages":[{"role":"user","content":"invalid please"}]}`})
		if w.Code != 400 {
			t.Fatalf("refused request: %d %s", w.Code, w.Body.String())
		}
	}
	w = g.do(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: `{"model":"gpt-4o-mini","max_tokens":100,"messages":[{"role":"user","content":"hello"}]}`})
	if w.Code != 200 || w.Header().Get("x-sluice-fallback") != "" || !strings.Contains(w.Body.String(), "fine") {
		t.Fatalf("after refused requests the key should still serve: %d %v %s", w.Code, w.Header(), w.Body.String())
	}
}

func TestSessionKeepsTheNewTurnAsWritten(t *testing.T) {
	g := newGenEnv(t, testdb.SQLite(t))
	admin := g.login("admin@example.com", "admin-password")
	key, _ := g.apiToken(g.signup("a@example.com", "A"))
	var mu sync.Mutex
	var bodies []string
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"a cat"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`))
	}))
	defer provider.Close()
	g.addKey(t, admin, "vision", provider.URL+"/v1", "sk-vision-key")
	hdr := map[string]string{"X-Sluice-Session": "pics"}
	first := `{"model":"gpt-4o-mini","messages":[{"role":"system","content":"describe"},{"role":"user","content":"hello"}]}`
	second := `{"model":"gpt-4o-mini","messages":[{"role":"system","content":"describe"},{"role":"user","content":[{"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":"https://example.com/cat.png","detail":"low"}}]}]}`
	for _, b := range []string{first, second} {
		if w := g.do(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: b, header: hdr}); w.Code != 200 {
			t.Fatalf("%d %s", w.Code, w.Body.String())
		}
	}
	sent := bodies[1]
	if !strings.Contains(sent, `"image_url"`) || !strings.Contains(sent, "cat.png") {
		t.Fatalf("the image part was dropped: %s", sent)
	}
	if !strings.Contains(sent, `"hello"`) || !strings.Contains(sent, `"a cat"`) || strings.Count(sent, `"system"`) != 1 {
		t.Fatalf("history not prepended once: %s", sent)
	}
}

type brokenConversations struct{}

func (brokenConversations) Load(context.Context, conversations.Scope) ([]chat.Message, bool, error) {
	return nil, false, errors.New("redis: connection refused")
}
func (brokenConversations) Save(context.Context, conversations.Scope, []chat.Message) error {
	return errors.New("redis: connection refused")
}
func (brokenConversations) Delete(context.Context, conversations.Scope) (bool, error) {
	return false, errors.New("redis: connection refused")
}

func TestSessionStoreDownIsA503(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	key, _ := e.apiToken(e.signup("a@example.com", "A"))
	e.pipe.Conversations, e.deps.Conversations = brokenConversations{}, brokenConversations{}
	e.rebuild()
	cases := []request{
		{method: "POST", path: "/v1/chat/completions", bearer: key, body: chatBody, header: map[string]string{"X-Sluice-Session": "s1"}},
		{method: "GET", path: "/v1/sessions/s1", bearer: key},
		{method: "DELETE", path: "/v1/sessions/s1", bearer: key},
	}
	for _, r := range cases {
		if w := e.do(r); w.Code != 503 || errorCode(t, w) != "session_store_unavailable" {
			t.Errorf("%s %s: %d %s", r.method, r.path, w.Code, w.Body.String())
		}
	}
	// Without the header the store is not needed at all.
	if w := e.chat(key); w.Code != 200 {
		t.Fatalf("plain request: %d", w.Code)
	}
}

// heldRecorder holds every usage event until released.
type heldRecorder struct {
	nopRecorder
	held chan struct{}
}

func (r heldRecorder) Record(models.UsageEvent) error { <-r.held; return nil }

// The answer leaves before the pipeline's bookkeeping: a client waits for
// nothing after its answer is written, and the early write is whole, with
// its length, not chunked.
func TestTheClientHasItsAnswerBeforeItIsMetered(t *testing.T) {
	g := newGenEnv(t, testdb.SQLite(t))
	key, _ := g.apiToken(g.signup("a@example.com", "A"))
	held := make(chan struct{})
	g.pipe.Recorder = heldRecorder{held: held}
	g.rebuild()
	gateway := httptest.NewServer(g.h)
	defer gateway.Close() // after the release below: it waits for the held handler
	defer close(held)

	got := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest("POST", gateway.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"sluice-local","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- err.Error()
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		switch {
		case err != nil:
			got <- err.Error()
		case resp.StatusCode != http.StatusOK || len(resp.TransferEncoding) != 0 || resp.ContentLength != int64(len(body)):
			got <- fmt.Sprintf("status %d, transfer encoding %v, length %d for %d bytes", resp.StatusCode, resp.TransferEncoding, resp.ContentLength, len(body))
		default:
			got <- string(body)
		}
	}()
	select {
	case body := <-got:
		if !strings.Contains(body, `"chat.completion"`) {
			t.Fatalf("answer %q, want a whole chat completion", body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no answer while its usage event was held: the client waits for the metering")
	}
}
