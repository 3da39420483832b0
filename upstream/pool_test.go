package upstream

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestNoKeyServesModel(t *testing.T) {
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) { writeOK(w) })
	k := key(1, srv.URL, "a")
	k.Models = []string{"gpt-4o"}
	p, _ := testPool(t, PoolOptions{}, k)
	if _, err := p.Do(context.Background(), chatRequest("claude")); !errors.Is(err, ErrNoKey) {
		t.Fatalf("err = %v, want ErrNoKey", err)
	}
	if p.Serves("claude") || !p.Serves("gpt-4o") {
		t.Fatal("Serves disagrees with the key's models")
	}
	empty := NewPool(PoolOptions{})
	if _, err := empty.Do(context.Background(), chatRequest("gpt-4o")); !errors.Is(err, ErrNoKey) {
		t.Fatalf("no keys: err = %v, want ErrNoKey", err)
	}
}

func TestModels(t *testing.T) {
	a := key(1, "http://a.test/v1", "a")
	a.Models = []string{"gpt-4o", "gpt-4o-mini"}
	b := key(2, "http://b.test/v1", "b")
	b.Models = []string{"gpt-4o"}
	c := key(3, "http://c.test/v1", "c") // any model
	p, _ := testPool(t, PoolOptions{}, a, b)
	if got, want := p.Models(), []string{"gpt-4o", "gpt-4o-mini"}; !slices.Equal(got, want) {
		t.Fatalf("Models = %v, want %v", got, want)
	}
	p.SetKeys([]Key{a, b, c})
	if got, want := p.Models(), []string{"*", "gpt-4o", "gpt-4o-mini"}; !slices.Equal(got, want) {
		t.Fatalf("Models = %v, want %v", got, want)
	}
	if !p.Serves("anything") {
		t.Fatal("a key with no model list serves any model")
	}
}

func TestBaseURLJoin(t *testing.T) {
	var mu sync.Mutex
	var got *http.Request
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Clone(context.Background())
		mu.Unlock()
		writeOK(w)
	})
	cases := []struct {
		name, base, wantPath, wantQuery string
	}{
		{"root", srv.URL, "/chat/completions", ""},
		{"root slash", srv.URL + "/", "/chat/completions", ""},
		{"v1", srv.URL + "/v1", "/v1/chat/completions", ""},
		{"prefix", srv.URL + "/openai/v1", "/openai/v1/chat/completions", ""},
		{"prefix slash", srv.URL + "/openai/v1/", "/openai/v1/chat/completions", ""},
		{"query kept", srv.URL + "/openai/v1?api-version=2024-10-21", "/openai/v1/chat/completions", "api-version=2024-10-21"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := testPool(t, PoolOptions{}, key(1, tc.base, "sk-test"))
			resp, err := p.Do(context.Background(), chatRequest("gpt-4o"))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != 200 || string(resp.Body) != okBody {
				t.Fatalf("status %d body %q", resp.Status, resp.Body)
			}
			mu.Lock()
			defer mu.Unlock()
			if got.Method != http.MethodPost || got.URL.Path != tc.wantPath || got.URL.RawQuery != tc.wantQuery {
				t.Fatalf("sent %s %s?%s, want POST %s?%s", got.Method, got.URL.Path, got.URL.RawQuery, tc.wantPath, tc.wantQuery)
			}
			for h, want := range map[string]string{"Authorization": "Bearer sk-test", "Content-Type": "application/json", "Accept": "application/json"} {
				if v := got.Header.Get(h); v != want {
					t.Errorf("%s = %q, want %q", h, v, want)
				}
			}
		})
	}
	for _, bad := range []string{"", "ftp://x.test/v1", "not a url", "/v1"} {
		p, _ := testPool(t, PoolOptions{}, key(1, bad, "sk-test"))
		if s := status(t, p, 1); s.State != Disabled {
			t.Errorf("base URL %q: state %s, want disabled", bad, s.State)
		}
		if _, err := p.Do(context.Background(), chatRequest("m")); !errors.Is(err, ErrUnavailable) {
			t.Errorf("base URL %q: err = %v, want ErrUnavailable", bad, err)
		}
	}
}

func TestWeightedSelection(t *testing.T) {
	var h hits
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		h.add(r)
		writeOK(w)
	})
	rng := rand.New(rand.NewPCG(1, 2))
	var mu sync.Mutex
	rnd := func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return rng.Float64()
	}
	light, heavy := key(1, srv.URL, "light"), key(2, srv.URL, "heavy")
	heavy.Weight = 3
	p, _ := testPool(t, PoolOptions{Rand: rnd}, light, heavy)
	const n = 1000
	for range n {
		if _, err := p.Do(context.Background(), chatRequest("m")); err != nil {
			t.Fatal(err)
		}
	}
	share := float64(h.get("light")) / n
	if share < 0.18 || share > 0.32 {
		t.Fatalf("weight 1 of 4 got %.3f of the traffic (light %d, heavy %d), want about 0.25", share, h.get("light"), h.get("heavy"))
	}
}

func TestLeastLoadedFirst(t *testing.T) {
	var h hits
	release := make(chan struct{})
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		h.add(r)
		if r.Header.Get("Accept") == "text/event-stream" {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		writeOK(w)
	})
	p, _ := testPool(t, PoolOptions{}, key(1, srv.URL, "a"), key(2, srv.URL, "b"))
	req := chatRequest("m")
	req.Stream = true
	stream, err := p.Do(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if stream.KeyID != 1 {
		t.Fatalf("stream went to key %d; Rand 0 picks the first of equals", stream.KeyID)
	}
	resp, err := p.Do(context.Background(), chatRequest("m"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.KeyID != 2 {
		t.Fatalf("with key 1 busy, request went to key %d, want the idle key 2", resp.KeyID)
	}
	close(release)
	stream.Stream.Close()
	if n := entry(p, 1).h.inFlight.Load(); n != 0 {
		t.Fatalf("in flight after Close = %d, want 0", n)
	}
	resp, err = p.Do(context.Background(), chatRequest("m"))
	if err != nil || resp.KeyID != 1 {
		t.Fatalf("after the stream closed: key %v, err %v; want key 1 again", resp, err)
	}
}

func TestPacing(t *testing.T) {
	cases := []struct {
		name     string
		rpm, tpm int64
		estimate int64
		gap      time.Duration // one request's worth of refill
	}{
		{"RPM 60: one request per second", 60, 0, 20, time.Second},
		{"TPM 600: ten tokens per second, estimate 10", 0, 600, 10, time.Second},
		{"RPM 120 and TPM 1200, estimate 40: tokens bind", 120, 1200, 40, 2 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newClock()
			var mu sync.Mutex
			var seen []time.Time
			srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				seen = append(seen, c.Now())
				mu.Unlock()
				writeOK(w)
			})
			k := key(1, srv.URL, "a")
			k.RPM, k.TPM = tc.rpm, tc.tpm
			p, _ := testPool(t, PoolOptions{Now: c.Now, Sleep: c.Sleep}, k)
			req := chatRequest("m")
			req.Estimate = tc.estimate
			for range 3 {
				resp, err := p.Do(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				if resp.Attempts != 1 {
					t.Fatalf("Attempts = %d: pacing waits, it does not retry", resp.Attempts)
				}
			}
			if len(seen) != 3 {
				t.Fatalf("provider saw %d requests, want 3", len(seen))
			}
			for i := 1; i < len(seen); i++ {
				if gap := seen[i].Sub(seen[i-1]); gap < tc.gap {
					t.Fatalf("requests %d and %d were %s apart, want at least %s (the key's bucket)", i-1, i, gap, tc.gap)
				}
			}
			sleeps := c.Sleeps()
			if len(sleeps) != 2 {
				t.Fatalf("waits = %v, want two (the burst is spread)", sleeps)
			}
			for _, d := range sleeps {
				if d < tc.gap || d > tc.gap+tc.gap/10 {
					t.Fatalf("wait %s, want %s plus at most 10%% jitter", d, tc.gap)
				}
			}
			if s := status(t, p, 1); s.State != Cooling && s.State != Healthy {
				t.Fatalf("state %s", s.State)
			}
		})
	}
}

func TestPacingBeyondBudget(t *testing.T) {
	var h hits
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		h.add(r)
		writeOK(w)
	})
	k := key(1, srv.URL, "a")
	k.RPM = 1 // one request a minute
	p, c := testPool(t, PoolOptions{Budget: 10 * time.Second}, k)
	if _, err := p.Do(context.Background(), chatRequest("m")); err != nil {
		t.Fatal(err)
	}
	_, err := p.Do(context.Background(), chatRequest("m"))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable: a minute's wait does not fit a 10s budget", err)
	}
	if h.total() != 1 || len(c.Sleeps()) != 0 {
		t.Fatalf("provider saw %d requests, waits %v; want 1 and none", h.total(), c.Sleeps())
	}
	if s := status(t, p, 1); s.State != Cooling {
		t.Fatalf("state %s, want cooling", s.State)
	}
}

func TestSetKeysKeepsHealth(t *testing.T) {
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) })
	a, b := key(1, srv.URL, "a"), key(2, srv.URL, "b")
	p, _ := testPool(t, PoolOptions{Breaker: BreakerOptions{Failures: 1}, MaxAttempts: 1}, a)
	if _, err := p.Do(context.Background(), chatRequest("m")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
	if s := status(t, p, 1); s.State != Open {
		t.Fatalf("state %s, want open", s.State)
	}
	a.Weight, a.Name = 5, "renamed"
	p.SetKeys([]Key{a, b})
	if s := status(t, p, 1); s.State != Open || s.Requests != 1 || s.Name != "renamed" {
		t.Fatalf("after SetKeys with the same secret: %+v, want still open with its counters", s)
	}
	if s := status(t, p, 2); s.State != Healthy {
		t.Fatalf("new key: %+v", s)
	}
	a.Secret = "rotated"
	p.SetKeys([]Key{a})
	if s := status(t, p, 1); s.State != Healthy || s.Requests != 1 {
		t.Fatalf("after rotating the secret: %+v, want healthy with its counters", s)
	}
	if len(p.Status()) != 1 {
		t.Fatal("removed key still listed")
	}
}

func TestConcurrentDo(t *testing.T) {
	var h hits
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		if h.add(r)%3 == 0 {
			w.WriteHeader(503)
			return
		}
		writeOK(w)
	})
	rng := rand.New(rand.NewPCG(3, 4))
	var mu sync.Mutex
	p, _ := testPool(t, PoolOptions{Rand: func() float64 { mu.Lock(); defer mu.Unlock(); return rng.Float64() }},
		key(1, srv.URL, "a"), key(2, srv.URL, "b"), key(3, srv.URL, "c"))
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 40 {
		wg.Go(func() {
			if _, err := p.Do(context.Background(), chatRequest("m")); err != nil {
				errs <- err
			}
		})
		wg.Go(func() { _ = p.Status() })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, e := range p.keys.Load().entries {
		if n := e.h.inFlight.Load(); n != 0 {
			t.Errorf("key %d in flight = %d after all calls returned", e.key.ID, n)
		}
	}
}

func TestSettleRefundsTheEstimate(t *testing.T) {
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) { writeOK(w) })
	k := key(1, srv.URL, "a")
	k.TPM = 600 // ten tokens a second
	p, c := testPool(t, PoolOptions{}, k)
	req := chatRequest("m")
	req.Estimate = 10
	if _, err := p.Do(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	// The request used 1 token, not 10: the rest goes back to the bucket.
	if err := p.Settle(context.Background(), 1, 10, 1); err != nil {
		t.Fatal(err)
	}
	p.Flush(context.Background())
	req.Estimate = 9
	if _, err := p.Do(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if len(c.Sleeps()) != 0 {
		t.Fatalf("waited %v: the refund should have made room", c.Sleeps())
	}
	if err := p.Settle(context.Background(), 99, 10, 1); err != nil {
		t.Fatal("unknown key: nothing to settle")
	}
}
