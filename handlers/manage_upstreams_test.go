package handlers

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/providers"
	"github.com/sluicehq/sluice/secrets"
	"github.com/sluicehq/sluice/upstream"
	"github.com/sluicehq/sluice/upstream/mock"
)

// TestUpstreamRatesAPI: any whole RPM or TPM of 0 or more is accepted,
// however large (1e12 included, in either spelling), and anything else is
// refused with a 422 in the API's error shape that names the field.
func TestUpstreamRatesAPI(t *testing.T) {
	g := newGenEnv(t, testdb.SQLite(t))
	admin := g.login("admin@example.com", "admin-password")
	tests := []struct {
		name, rates string
		status      int
		field       string // named in the error
		rpm, tpm    int64  // stored
	}{
		{"tpm 1e12 written out", `"rpm":100000000,"tpm":1000000000000`, 201, "", 100000000, 1000000000000},
		{"tpm 1e12 in exponent form", `"tpm":1e12`, 201, "", 0, 1000000000000},
		{"largest int64", `"rpm":9223372036854775807,"tpm":9223372036854775807`, 201, "", 9223372036854775807, 9223372036854775807},
		{"unknown (absent, null, 0)", `"rpm":null,"tpm":0`, 201, "", 0, 0},
		{"negative rpm", `"rpm":-1`, 400, "rpm", 0, 0},
		{"fractional tpm", `"tpm":1500.5`, 400, "tpm", 0, 0},
		{"tpm beyond int64", `"tpm":1e19`, 400, "tpm", 0, 0},
		{"tpm as a string", `"tpm":"lots"`, 400, "tpm", 0, 0},
		{"rpm as a bool", `"rpm":true`, 400, "rpm", 0, 0},
		{"huge exponent", `"tpm":1e999999999`, 400, "tpm", 0, 0},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "key-" + itoa(int64(i))
			w := g.do(request{method: "POST", path: "/api/admin/upstreams", bearer: admin,
				body: `{"name":"` + name + `","base_url":"` + g.mockURL + `","api_key":"sk-mock-key",` + tt.rates + `}`})
			if w.Code != tt.status {
				t.Fatalf("%d %s, want %d", w.Code, w.Body.String(), tt.status)
			}
			if tt.status != 201 {
				var body struct {
					Error struct{ Code, Message string } `json:"error"`
				}
				if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
					t.Fatal(err)
				}
				if body.Error.Code != "invalid_"+tt.field || !strings.HasPrefix(body.Error.Message, tt.field+" must be a whole number") {
					t.Fatalf("error %+v, want code invalid_%s and a message naming %s", body.Error, tt.field, tt.field)
				}
				return
			}
			var out struct {
				RPM, TPM int64
				Limits   struct {
					Requests, Tokens struct {
						PerMinute int64 `json:"per_minute"`
					}
				}
			}
			if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
				t.Fatal(err)
			}
			if out.RPM != tt.rpm || out.TPM != tt.tpm || out.Limits.Requests.PerMinute != tt.rpm || out.Limits.Tokens.PerMinute != tt.tpm {
				t.Fatalf("stored %s, want rpm %d tpm %d paced as such", w.Body.String(), tt.rpm, tt.tpm)
			}
		})
	}
}

// TestHugeTPMKeyIsPacedSilently: a key with tpm 1e12 (and rpm
// 1e8) used to log two warnings per request ("pacing failed; sending
// unpaced" and "settling a provider key's tokens failed"). Now every request
// is paced and settled, and nothing is logged at all.
func TestHugeTPMKeyIsPacedSilently(t *testing.T) {
	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g := newGenEnv(t, testdb.SQLite(t))
	// The pool, the provider service and the pipeline log into logs, and
	// the pool paces with the limiter the pipeline uses, as in main.
	pool := upstream.NewPool(upstream.PoolOptions{Limiter: g.limiter, Log: log, AttemptTimeout: 2 * time.Second, AnswerTimeout: 2 * time.Second})
	box, _ := secrets.NewBox(bytes.Repeat([]byte{3}, 32))
	prov := providers.New(g.store, box, pool, cluster.None{}, log)
	g.pipe.Providers, g.pipe.Log = pool, log
	g.deps.Providers, g.deps.PoolStatus, g.deps.Models = prov, pool.Status, pool.Models
	g.rebuild()

	admin := g.login("admin@example.com", "admin-password")
	key, _ := g.apiToken(g.signup("a@example.com", "A"))
	w := g.do(request{method: "POST", path: "/api/admin/upstreams", bearer: admin,
		body: `{"name":"unlimited","base_url":"` + g.mockURL + `","api_key":"sk-mock-key","rpm":100000000,"tpm":1000000000000,"models":["gpt-4o-mini"]}`})
	if w.Code != 201 {
		t.Fatalf("add key: %d %s", w.Code, w.Body.String())
	}
	const n = 20
	for range n {
		w := g.do(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: gptBody})
		if w.Code != 200 || w.Header().Get("x-sluice-fallback") != "" {
			t.Fatalf("chat: %d %v %s", w.Code, w.Header(), w.Body.String())
		}
	}
	if got := g.mock.Stats().Total.OK; got != n {
		t.Fatalf("the provider answered %d requests, want %d", got, n)
	}
	if out := logs.String(); strings.Contains(out, "level=WARN") || strings.Contains(out, "level=ERROR") {
		t.Fatalf("warnings logged for a key with tpm 1e12:\n%s", out)
	}
	if pool.PacingErrors() != 0 {
		t.Fatalf("PacingErrors = %d, want 0", pool.PacingErrors())
	}
	s := pool.Status()[0]
	if s.TokenLimits.PerMinute != 1000000000000 || s.TokenLimits.Burst < 1000000000000/60 || s.RequestLimits.PerMinute != 100000000 {
		t.Fatalf("limits %+v / %+v, want the configured rates paced", s.RequestLimits, s.TokenLimits)
	}
}

// TestUpstreamsAPIShowsLearnedLimits: GET /api/admin/upstreams reports,
// per key, how this node paces it and what the provider's headers last
// said: here a provider enforcing 1,500 RPM as a burst of 5.
func TestUpstreamsAPIShowsLearnedLimits(t *testing.T) {
	g := newGenEnv(t, testdb.SQLite(t))
	srv := httptest.NewServer(mock.New(mock.Config{Keys: map[string]float64{"sk-short-window": 25}, Burst: 5}))
	t.Cleanup(srv.Close)
	admin := g.login("admin@example.com", "admin-password")
	key, _ := g.apiToken(g.signup("a@example.com", "A"))
	w := g.do(request{method: "POST", path: "/api/admin/upstreams", bearer: admin,
		body: `{"name":"short","base_url":"` + srv.URL + `/v1","api_key":"sk-short-window","rpm":1500,"models":["gpt-4o-mini"]}`})
	if w.Code != 201 {
		t.Fatalf("add key: %d %s", w.Code, w.Body.String())
	}
	for range 2 {
		if w := g.do(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: gptBody}); w.Code != 200 {
			t.Fatalf("chat: %d %s", w.Code, w.Body.String())
		}
	}
	w = g.do(request{method: "GET", path: "/api/admin/upstreams", bearer: admin})
	var list struct {
		Data []struct {
			Limits struct {
				Requests struct {
					PerMinute int64 `json:"per_minute"`
					Burst     int64
					Provider  *struct {
						Limit, Remaining, Burst int64
						ResetAt                 time.Time `json:"reset_at"`
						SeenAt                  time.Time `json:"seen_at"`
					}
				}
				Tokens struct {
					PerMinute int64 `json:"per_minute"`
					Provider  *struct{}
				}
			}
		}
	}
	if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil || len(list.Data) != 1 {
		t.Fatalf("list: %v %s", err, w.Body.String())
	}
	l := list.Data[0].Limits
	if r, p := l.Requests, l.Requests.Provider; r.PerMinute != 1500 || r.Burst != 3 || p == nil || p.Limit != 1500 || p.Burst != 5 ||
		p.Remaining > 4 || p.ResetAt.IsZero() || p.SeenAt.IsZero() {
		t.Fatalf("requests limits %s, want paced at 1500/min with a burst of 3 from the provider's burst of 5", w.Body.String())
	}
	if l.Tokens.PerMinute != 0 || l.Tokens.Provider != nil {
		t.Fatalf("tokens limits %+v, want none", l.Tokens)
	}
}

// lockedBuffer is a log sink safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A key names the kind of provider it belongs to (openai when it does
// not); an unknown kind, or a base URL its kind cannot use, is refused in
// the API's error shape saying what to send.
func TestUpstreamProviderKinds(t *testing.T) {
	g := newGenEnv(t, testdb.SQLite(t))
	admin := g.login("admin@example.com", "admin-password")
	for _, tc := range []struct {
		name, fields string
		status       int
		provider     string // stored
		message      string // in the refusal
	}{
		{"default", `"base_url":"https://api.openai.com/v1"`, 201, "openai", ""},
		{"azure deployment", `"provider":"azure","base_url":"https://res.openai.azure.com/openai/deployments/d?api-version=2024-10-21"`, 201, "azure", ""},
		{"azure without api-version", `"provider":"azure","base_url":"https://res.openai.azure.com/openai/deployments/d"`, 422, "", "needs its api-version"},
		{"unknown kind", `"provider":"bedrock","base_url":"https://example.com"`, 422, "", "provider must be one of openai"},
		{"anthropic root", `"provider":"anthropic","base_url":"https://api.anthropic.com"`, 201, "anthropic", ""},
		{"anthropic endpoint", `"provider":"anthropic","base_url":"https://api.anthropic.com/v1/messages"`, 422, "", "is the API root, such as https://api.anthropic.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := g.do(request{method: "POST", path: "/api/admin/upstreams", bearer: admin,
				body: `{"name":"` + strings.ReplaceAll(tc.name, " ", "-") + `","api_key":"sk-mock-key",` + tc.fields + `}`})
			if w.Code != tc.status {
				t.Fatalf("%d %s, want %d", w.Code, w.Body.String(), tc.status)
			}
			var body struct {
				Provider string
				Error    struct{ Message string }
			}
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			if body.Provider != tc.provider || !strings.Contains(body.Error.Message, tc.message) {
				t.Fatalf("answer %s, want provider %q and a message with %q", w.Body.String(), tc.provider, tc.message)
			}
		})
	}
}
