package handlers

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/upstream"
)

// brokenLimiter fails the way a bug would: not an outage (the degrading
// limiter turns those into local limits), an unexpected error.
type brokenLimiter struct{ quota.Limiter }

var errLimiterBug = errors.New("lua: attempt to index a nil value (secret detail)")

func (brokenLimiter) Allow(context.Context, string, quota.Params, int64) (quota.Decision, error) {
	return quota.Decision{}, errLimiterBug
}

func (brokenLimiter) AllowBoth(context.Context, quota.Charge, quota.Charge) (quota.Decision, quota.Decision, error) {
	return quota.Decision{}, quota.Decision{}, errLimiterBug
}

func (brokenLimiter) AllowAll(context.Context, []quota.Charge) ([]quota.Decision, error) {
	return nil, errLimiterBug
}

// Server-side failures say what failed, in their own code, unless they are
// internal (a bug): then the message is generic and the cause stays in the
// log. Each is logged exactly once, with the request id.
func TestServerErrorsSayWhatFailedAndAreLoggedOnce(t *testing.T) {
	g := newGenEnv(t, testdb.SQLite(t))
	admin := g.login("admin@example.com", "admin-password")
	key, _ := g.apiToken(g.signup("a@example.com", "A"))
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close() // connection refused from now on
	huge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"choices":[{"message":{"content":"`))
		w.Write([]byte(strings.Repeat("x", 17<<20))) // over the 16 MiB a whole answer may be
		w.Write([]byte(`"}}]}`))
	}))
	defer huge.Close()
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // then the server sees the client leave
		select {                    // never answers in time
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer silent.Close()
	slowPool := upstream.NewPool(upstream.PoolOptions{Log: discardLog(), AnswerTimeout: 50 * time.Millisecond, Budget: 300 * time.Millisecond,
		BaseBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	slowPool.SetKeys([]upstream.Key{{ID: 98, Name: "silent", BaseURL: silent.URL + "/v1", Secret: "sk-silent-key", Models: []string{"slow-model"}}})
	g.addKey(t, admin, "dead", dead.URL+"/v1", "sk-dead-key")
	// The test env's pool has a short budget; reading 16 MiB needs longer.
	hugePool := upstream.NewPool(upstream.PoolOptions{Log: discardLog()})
	hugePool.SetKeys([]upstream.Key{{ID: 99, Name: "huge", BaseURL: huge.URL + "/v1", Secret: "sk-huge-key", Models: []string{"big-model"}}})
	if w := g.do(request{method: "PUT", path: "/api/admin/tiers/free", bearer: admin, body: `{"upstream_fallback":"error"}`}); w.Code != 200 {
		t.Fatalf("tier: %d %s", w.Code, w.Body.String())
	}
	logs := g.captureLogs()

	cases := []struct {
		name       string
		setup      func()
		req        request
		status     int
		code       string
		message    string // "%rid" stands for the request's id
		retryAfter bool
	}{
		{"every provider unavailable", nil,
			request{method: "POST", path: "/v1/chat/completions", bearer: key, body: gptBody},
			503, "upstream_unavailable", "every provider for 'gpt-4o-mini' is unavailable right now; retry later", true},
		{"an unusable provider answer", func() { g.pipe.Providers = hugePool },
			request{method: "POST", path: "/v1/chat/completions", bearer: key, body: `{"model":"big-model","messages":[{"role":"user","content":"hi"}]}`},
			502, "upstream_error", "the provider's answer could not be used; retry later", false},
		{"no provider answering in time", func() { g.pipe.Providers = slowPool },
			request{method: "POST", path: "/v1/chat/completions", bearer: key, body: `{"model":"slow-model","messages":[{"role":"user","content":"hi"}]}`},
			504, "upstream_timeout", "no provider for 'slow-model' answered in time; retry later", true},
		{"the conversation store down", func() { g.pipe.Conversations, g.deps.Conversations = brokenConversations{}, brokenConversations{} },
			request{method: "POST", path: "/v1/chat/completions", bearer: key, body: chatBody, header: map[string]string{"X-Sluice-Session": "s1"}},
			503, "session_store_unavailable", "the session store is unavailable right now; retry, or send the request without X-Sluice-Session", false},
		{"reading a conversation with the store down", nil,
			request{method: "GET", path: "/v1/sessions/s1", bearer: key},
			503, "session_store_unavailable", "the session store is unavailable right now; retry, or send the request without X-Sluice-Session", false},
		{"a bug", func() { g.pipe.Limiter = brokenLimiter{} },
			request{method: "POST", path: "/v1/chat/completions", bearer: key, body: chatBody},
			500, "internal", "internal error; quote request id %rid when reporting it", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup()
				g.rebuild()
			}
			w := g.do(tc.req)
			rid := w.Header().Get("X-Request-Id")
			m := decode(t, w)["error"].(map[string]any)
			want := strings.ReplaceAll(tc.message, "%rid", rid)
			if w.Code != tc.status || m["code"] != tc.code || m["message"] != want || m["type"] != "server_error" {
				t.Fatalf("%d %v, want %d %s %q", w.Code, m, tc.status, tc.code, want)
			}
			if got := w.Header().Get("Retry-After") != ""; got != tc.retryAfter {
				t.Fatalf("Retry-After %q", w.Header().Get("Retry-After"))
			}
			// One line says what failed; the access log's line is the other.
			var failures, access int
			for line := range strings.Lines(logs.String()) {
				switch {
				case !strings.Contains(line, rid):
				case strings.Contains(line, "msg=request "):
					access++
				default:
					failures++
				}
			}
			if failures != 1 || access != 1 {
				t.Fatalf("request %s: %d failure lines and %d access lines, want one each:\n%s", rid, failures, access, logs.String())
			}
			if strings.Contains(w.Body.String(), "secret detail") {
				t.Fatal("an internal cause reached the client")
			}
		})
	}
	if !strings.Contains(logs.String(), "secret detail") {
		t.Fatal("the internal error's cause must be in the log")
	}
}

func TestRequestIDsAreUniqueAndOrderedByTime(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	seen := map[string]bool{}
	prev := ""
	for i := range 1000 {
		id := newRequestID(t0.Add(time.Duration(i) * time.Millisecond))
		if len(id) != 30 || !strings.HasPrefix(id, "req_") || seen[id] || id <= prev {
			t.Fatalf("id %d: %q after %q", i, id, prev)
		}
		seen[id], prev = true, id
	}
	if a, b := newRequestID(t0), newRequestID(t0); a == b || a[:14] != b[:14] {
		t.Fatalf("same millisecond: %q %q", a, b)
	}
}
