package handlers

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/upstream"
	"github.com/sluicehq/sluice/upstream/mock"
)

// benchEnv is a stack whose free tier never runs dry, so the benchmark
// measures the request path (auth cache hit, bucket, model, JSON, usage
// enqueue) and not rejections.
func benchEnv(b *testing.B) (*env, string) {
	e := newEnv(b, testdb.SQLite(b))
	key, _ := e.apiToken(e.signup("bench@example.com", "Bench"))
	admin, err := e.store.UserByEmail(b.Context(), "admin@example.com")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := e.acc.UpdateTier(b.Context(), admin, "free", models.TierSettings{Capacity: 1_000_000, RefillPerSec: 1_000_000}); err != nil {
		b.Fatal(err)
	}
	e.pipe.Recorder, e.deps.TokenUse, e.deps.MaxBodyBytes = nopRecorder{}, nopRecorder{}, 1<<20
	e.pipe.Scorer = quota.NewValueScorer(quota.DefaultValueRules(), e.clock.Now) // as in production
	e.rebuild()
	return e, key
}

type nopRecorder struct{}

func (nopRecorder) Record(models.UsageEvent) error { return nil }

func (nopRecorder) Touch(int64, time.Time) error { return nil }

func (nopRecorder) Reject(int64, int64, string, string, time.Time) {}

func BenchmarkChatCompletion(b *testing.B) {
	e, key := benchEnv(b)
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(chatBody))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("%d %s", w.Code, w.Body.String())
		}
	}
}

func BenchmarkModels(b *testing.B) {
	e, key := benchEnv(b)
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest("GET", "/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("%d", w.Code)
		}
	}
}

// BenchmarkChatUpstream is one provider-bound chat completion through the
// gateway in process, against a zero-latency mock provider: what Sluice
// adds to a proxied request, minus the network.
func BenchmarkChatUpstream(b *testing.B) {
	e, key := benchEnv(b)
	m := mock.New(mock.Config{Keys: map[string]float64{"sk-bench-key": 0}})
	srv := httptest.NewServer(m)
	defer srv.Close()
	pool := upstream.NewPool(upstream.PoolOptions{Log: discardLog()})
	pool.SetKeys([]upstream.Key{{ID: 1, Name: "bench", BaseURL: srv.URL + "/v1", Secret: "sk-bench-key", Weight: 1}})
	e.pipe.Providers, e.deps.Models = pool, pool.Models
	e.rebuild()
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello there, how are you"}]}`
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("%d %s", w.Code, w.Body.String())
		}
	}
}
