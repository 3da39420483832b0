package upstream

import (
	"context"
	"fmt"
	"github.com/sluicehq/sluice/internal/testsync"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a fake clock whose Sleep advances time instead of waiting, and
// records every wait.
type clock struct {
	mu     sync.Mutex
	t      time.Time
	sleeps []time.Duration
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func (c *clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.t = c.t.Add(d)
	return nil
}

func (c *clock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

func (c *clock) Slept() time.Duration {
	var total time.Duration
	for _, d := range c.Sleeps() {
		total += d
	}
	return total
}

// fixedRand always returns v: with 0, selection takes keys in their order
// and backoffs are zero.
func fixedRand(v float64) func() float64 { return func() float64 { return v } }

// hits counts requests per key secret.
type hits struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *hits) add(r *http.Request) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = make(map[string]int)
	}
	s := secretOf(r)
	h.n[s]++
	return h.n[s]
}

func (h *hits) get(secret string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[secret]
}

func (h *hits) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := 0
	for _, n := range h.n {
		t += n
	}
	return t
}

func secretOf(r *http.Request) string {
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
}

// provider starts an httptest upstream with handler, closed at cleanup. The
// request body is read first, as a real provider would: only then does the
// server notice a client that hangs up.
func provider(t *testing.T, handler http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		handler(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

const okBody = `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`

func writeOK(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, okBody)
}

func key(id int64, base, secret string) Key {
	return Key{ID: id, Name: fmt.Sprintf("key-%d", id), BaseURL: base, Secret: secret, Weight: 1}
}

// testPool builds a pool on a fake clock with Rand 0 unless opts says
// otherwise.
func testPool(t *testing.T, opts PoolOptions, keys ...Key) (*Pool, *clock) {
	t.Helper()
	c := newClock()
	if opts.Now == nil {
		opts.Now = c.Now
	}
	if opts.Sleep == nil {
		opts.Sleep = c.Sleep
	}
	if opts.Rand == nil {
		opts.Rand = fixedRand(0)
	}
	p := NewPool(opts)
	p.SetKeys(keys)
	return p, c
}

func chatRequest(model string) Request {
	return Request{Model: model, Body: []byte(`{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`), Estimate: 20, ID: "req-1"}
}

func status(t *testing.T, p *Pool, id int64) KeyStatus {
	t.Helper()
	for _, s := range p.Status() {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("no status for key %d", id)
	return KeyStatus{}
}

func entry(p *Pool, id int64) *keyEntry {
	for _, e := range p.keys.Load().entries {
		if e.key.ID == id {
			return e
		}
	}
	return nil
}

func captureLog() (*slog.Logger, *testsync.Buffer) {
	buf := &testsync.Buffer{}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}
