package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestRetryAfter3600DoesNotStall(t *testing.T) {
	t.Run("one key: rests capped at MaxBackoff, gives up within the budget", func(t *testing.T) {
		var h hits
		c := newClock()
		var mu sync.Mutex
		var seen []time.Time
		srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
			h.add(r)
			mu.Lock()
			seen = append(seen, c.Now())
			mu.Unlock()
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(429)
		})
		opts := PoolOptions{Now: c.Now, Sleep: c.Sleep, Rand: fixedRand(0.5),
			Budget: 2 * time.Second, MaxBackoff: 500 * time.Millisecond, BaseBackoff: 100 * time.Millisecond}
		p, _ := testPool(t, opts, key(1, srv.URL, "a"))
		start := c.Now()
		_, err := p.Do(context.Background(), chatRequest("m"))
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("err = %v, want ErrUnavailable", err)
		}
		var ae *AttemptError
		if !errors.As(err, &ae) || ae.Status != 429 || ae.KeyID != 1 {
			t.Fatalf("err = %v, want the last AttemptError with status 429", err)
		}
		if spent := c.Now().Sub(start); spent > opts.Budget {
			t.Fatalf("spent %s, beyond the %s budget", spent, opts.Budget)
		}
		for _, d := range c.Sleeps() {
			if d > opts.MaxBackoff {
				t.Fatalf("a wait of %s exceeds MaxBackoff %s (waits %v)", d, opts.MaxBackoff, c.Sleeps())
			}
		}
		if h.total() < 2 {
			t.Fatalf("provider saw %d requests: the key should be retried after its capped rest", h.total())
		}
		for i := 1; i < len(seen); i++ {
			if gap := seen[i].Sub(seen[i-1]); gap < opts.MaxBackoff {
				t.Fatalf("retried after %s: Retry-After (capped at %s) is a floor", gap, opts.MaxBackoff)
			}
		}
		if s := status(t, p, 1); s.State != Cooling || s.LastStatus != 429 || s.Failures != int64(h.total()) {
			t.Fatalf("status %+v, want cooling after 429s", s)
		}
		if e := entry(p, 1); e.h.br.open || e.h.br.samples != 0 {
			t.Fatal("a 429 must not feed the breaker")
		}
	})
	t.Run("real clock: returns within the budget", func(t *testing.T) {
		srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(429)
		})
		p := NewPool(PoolOptions{Budget: 300 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, BaseBackoff: 10 * time.Millisecond})
		p.SetKeys([]Key{key(1, srv.URL, "a")})
		start := time.Now()
		_, err := p.Do(context.Background(), chatRequest("m"))
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("err = %v", err)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("took %s with a 300ms budget", took)
		}
	})
	t.Run("another key answers without waiting for the rest", func(t *testing.T) {
		srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
			if secretOf(r) == "limited" {
				w.Header().Set("retry-after-ms", "3600000")
				w.WriteHeader(429)
				return
			}
			writeOK(w)
		})
		p, c := testPool(t, PoolOptions{Rand: fixedRand(0.4)}, key(1, srv.URL, "limited"), key(2, srv.URL, "free"))
		resp, err := p.Do(context.Background(), chatRequest("m"))
		if err != nil {
			t.Fatal(err)
		}
		if resp.KeyID != 2 || resp.Attempts != 2 {
			t.Fatalf("key %d after %d attempts, want key 2 after 2", resp.KeyID, resp.Attempts)
		}
		if slept := c.Slept(); slept > DefaultBaseBackoff {
			t.Fatalf("waited %s before trying another key; want only the first backoff's jitter", slept)
		}
	})
}

func TestFailoverToAnotherKey(t *testing.T) {
	cases := []struct {
		name string
		fail func(w http.ResponseWriter, r *http.Request)
	}{
		{"500", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }},
		{"502", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(502) }},
		{"connection dropped", func(w http.ResponseWriter, r *http.Request) { panic(http.ErrAbortHandler) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var h hits
			srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
				h.add(r)
				if secretOf(r) == "bad" {
					tc.fail(w, r)
					return
				}
				writeOK(w)
			})
			p, _ := testPool(t, PoolOptions{}, key(1, srv.URL, "bad"), key(2, srv.URL, "good"))
			resp, err := p.Do(context.Background(), chatRequest("m"))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != 200 || resp.Attempts != 2 || resp.KeyID != 2 || string(resp.Body) != okBody {
				t.Fatalf("got status %d, attempts %d, key %d; want 200 after 2 attempts on key 2", resp.Status, resp.Attempts, resp.KeyID)
			}
			if h.get("bad") != 1 || h.get("good") != 1 {
				t.Fatalf("hits bad %d good %d, want 1 and 1", h.get("bad"), h.get("good"))
			}
			if s := status(t, p, 1); s.Failures != 1 || s.Requests != 1 {
				t.Fatalf("failing key status %+v", s)
			}
			if p.Retries() != 1 {
				t.Fatalf("Retries = %d, want 1", p.Retries())
			}
		})
	}
	t.Run("connection refused", func(t *testing.T) {
		dead := httptest.NewServer(http.NotFoundHandler())
		dead.Close()
		good := provider(t, func(w http.ResponseWriter, r *http.Request) { writeOK(w) })
		p, _ := testPool(t, PoolOptions{}, key(1, dead.URL, "dead"), key(2, good.URL, "good"))
		resp, err := p.Do(context.Background(), chatRequest("m"))
		if err != nil || resp.KeyID != 2 || resp.Attempts != 2 {
			t.Fatalf("resp %+v err %v, want key 2 after 2 attempts", resp, err)
		}
	})
}

func TestRetryableStatuses(t *testing.T) {
	for _, code := range []int{408, 409, 429, 500, 502, 503, 504} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			var h hits
			srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
				if h.add(r) == 1 {
					w.WriteHeader(code)
					return
				}
				writeOK(w)
			})
			p, _ := testPool(t, PoolOptions{}, key(1, srv.URL, "a"))
			resp, err := p.Do(context.Background(), chatRequest("m"))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != 200 || resp.Attempts != 2 {
				t.Fatalf("status %d after %d attempts, want 200 after 2", resp.Status, resp.Attempts)
			}
		})
	}
}

func TestClientErrorsAreNotRetried(t *testing.T) {
	for _, code := range []int{400, 404, 413, 422} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			var h hits
			body := `{"error":{"message":"bad request","type":"invalid_request_error"}}`
			srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
				h.add(r)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(code)
				io.WriteString(w, body)
			})
			p, c := testPool(t, PoolOptions{}, key(1, srv.URL, "a"), key(2, srv.URL, "b"))
			resp, err := p.Do(context.Background(), chatRequest("m"))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != code || resp.Attempts != 1 || string(resp.Body) != body || resp.Stream != nil {
				t.Fatalf("got %d after %d attempts, body %q; want %d as is after 1", resp.Status, resp.Attempts, resp.Body, code)
			}
			if h.total() != 1 || len(c.Sleeps()) != 0 {
				t.Fatalf("provider saw %d requests, waits %v; want 1 and none", h.total(), c.Sleeps())
			}
			s := status(t, p, resp.KeyID)
			if s.State != Healthy || s.Failures != 0 || s.LastStatus != code {
				t.Fatalf("status %+v, want healthy with no failure", s)
			}
			if br := entry(p, resp.KeyID).h.br; br.samples != 0 || br.consecutive != 0 {
				t.Fatalf("breaker touched by a client error: %+v", br)
			}
		})
	}
}

func TestAttemptTimeout(t *testing.T) {
	var h hits
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		h.add(r)
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	p := NewPool(PoolOptions{AnswerTimeout: 50 * time.Millisecond, Budget: 400 * time.Millisecond,
		BaseBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	p.SetKeys([]Key{key(1, srv.URL, "a"), key(2, srv.URL, "b")})
	start := time.Now()
	_, err := p.Do(context.Background(), chatRequest("m"))
	took := time.Since(start)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrUnavailable wrapping ErrTimeout", err)
	}
	if h.total() < 2 || h.get("a") == 0 || h.get("b") == 0 {
		t.Fatalf("hits a %d b %d: a timeout is retried, on the other key", h.get("a"), h.get("b"))
	}
	if took > time.Second {
		t.Fatalf("took %s with a 400ms budget", took)
	}
}

// TestAWholeAnswerMayTakeLongerThanAnAttempt: a provider writes a whole
// answer's headers only once it has generated all of it, so the answer
// has AnswerTimeout, not a stream's AttemptTimeout, and the retry budget
// does not cut an attempt it let start: cut, the answer would be billed
// by the provider and lost.
func TestAWholeAnswerMayTakeLongerThanAnAttempt(t *testing.T) {
	var h hits
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		h.add(r)
		// The scenario, not a wait: an answer that takes 300 ms to
		// generate, six attempt timeouts and past the retry budget.
		time.Sleep(300 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"a long story"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`)
	})
	p := NewPool(PoolOptions{AttemptTimeout: 50 * time.Millisecond, Budget: 200 * time.Millisecond, AnswerTimeout: 5 * time.Second})
	p.SetKeys([]Key{key(1, srv.URL, "a"), key(2, srv.URL, "b")})
	resp, err := p.Do(context.Background(), chatRequest("m"))
	if err != nil || resp.Status != 200 || !strings.Contains(string(resp.Body), "a long story") || resp.Attempts != 1 || h.total() != 1 {
		t.Fatalf("%+v %v, %d requests: a whole answer slower than AttemptTimeout is waited for, once", resp, err, h.total())
	}
}

// TestAWholeAnswerStillFailsOverAKeyThatTakesNoRequest: a whole answer
// gets AnswerTimeout only once its request is written; a key whose
// connection never gets that far (a TLS handshake that never ends) is
// given up after AttemptTimeout, and the request goes to another key.
func TestAWholeAnswerStillFailsOverAKeyThatTakesNoRequest(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held sync.WaitGroup
	var conns atomic.Int32
	stop := make(chan struct{})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			held.Go(func() { <-stop; c.Close() }) // accepted, never answered: the handshake hangs
		}
	}()
	t.Cleanup(func() { ln.Close(); close(stop); held.Wait() })
	good := provider(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(150 * time.Millisecond) // the scenario: an answer slower than AttemptTimeout
		writeOK(w)
	})
	// Rand 0: the keys are tried in order, the hanging one first.
	p := NewPool(PoolOptions{AttemptTimeout: 50 * time.Millisecond, Budget: 2 * time.Second, AnswerTimeout: 5 * time.Second,
		BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond, Rand: func() float64 { return 0 }})
	p.SetKeys([]Key{key(1, "https://"+ln.Addr().String(), "a"), key(2, good.URL, "b")})
	for i := range 4 {
		start := time.Now()
		resp, err := p.Do(context.Background(), chatRequest("m"))
		if err != nil || resp.Status != 200 || resp.KeyID != 2 || resp.Attempts != 2 {
			t.Fatalf("request %d: %+v %v, want key 2's answer at the second attempt", i, resp, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("request %d took %v: the hanging key was waited on past AttemptTimeout", i, took)
		}
	}
	if conns.Load() != 4 {
		t.Fatalf("the hanging key was tried %d times, want once a request", conns.Load())
	}
}

func TestUnauthorizedDisablesKey(t *testing.T) {
	for _, code := range []int{401, 403} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			var h hits
			srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
				h.add(r)
				if secretOf(r) == "revoked" {
					w.WriteHeader(code)
					io.WriteString(w, `{"error":{"message":"Incorrect API key provided"}}`)
					return
				}
				writeOK(w)
			})
			p, c := testPool(t, PoolOptions{}, key(1, srv.URL, "revoked"), key(2, srv.URL, "good"))
			resp, err := p.Do(context.Background(), chatRequest("m"))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != 200 || resp.KeyID != 2 || resp.Attempts != 2 {
				t.Fatalf("status %d key %d attempts %d, want 200 from key 2 after 2", resp.Status, resp.KeyID, resp.Attempts)
			}
			if len(c.Sleeps()) != 0 {
				t.Fatalf("waited %v before moving on from a refused key", c.Sleeps())
			}
			select {
			case r := <-p.Refusals():
				if r.KeyID != 1 || !strings.Contains(r.Reason, fmt.Sprint(code)) {
					t.Fatalf("refusal %+v, want key 1 naming %d", r, code)
				}
			default:
				t.Fatal("the refused key was not reported")
			}
			s := status(t, p, 1)
			if s.State != Disabled || !strings.Contains(s.Reason, fmt.Sprint(code)) || s.LastStatus != code {
				t.Fatalf("status %+v, want disabled with the reason", s)
			}
			for range 5 {
				if resp, err := p.Do(context.Background(), chatRequest("m")); err != nil || resp.KeyID != 2 {
					t.Fatalf("resp %v err %v", resp, err)
				}
			}
			if h.get("revoked") != 1 {
				t.Fatalf("disabled key used %d times, want once", h.get("revoked"))
			}
			select {
			case r := <-p.Refusals():
				t.Fatalf("a key was reported refused twice: %+v", r)
			default:
			}
			p.SetKeys([]Key{key(2, srv.URL, "good")})
			if _, err := p.Do(context.Background(), chatRequest("m")); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("every key refused", func(t *testing.T) {
		srv := provider(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(401) })
		p, _ := testPool(t, PoolOptions{}, key(1, srv.URL, "a"), key(2, srv.URL, "b"))
		_, err := p.Do(context.Background(), chatRequest("m"))
		var ae *AttemptError
		if !errors.Is(err, ErrUnavailable) || !errors.As(err, &ae) || ae.Status != 401 {
			t.Fatalf("err = %v, want ErrUnavailable wrapping a 401", err)
		}
	})
}

func TestAllKeysOpen(t *testing.T) {
	var h hits
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		h.add(r)
		w.WriteHeader(500)
	})
	p, _ := testPool(t, PoolOptions{Breaker: BreakerOptions{Failures: 2}}, key(1, srv.URL, "a"), key(2, srv.URL, "b"))
	if _, err := p.Do(context.Background(), chatRequest("m")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
	if h.get("a") != 2 || h.get("b") != 2 {
		t.Fatalf("hits a %d b %d, want 2 each before both breakers open", h.get("a"), h.get("b"))
	}
	for _, id := range []int64{1, 2} {
		if s := status(t, p, id); s.State != Open || !strings.Contains(s.Reason, "consecutive") || s.Until.IsZero() {
			t.Fatalf("key %d: %+v, want open", id, s)
		}
	}
	before := h.total()
	_, err := p.Do(context.Background(), chatRequest("m"))
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "open") {
		t.Fatalf("err = %v, want ErrUnavailable: every key is open", err)
	}
	if h.total() != before {
		t.Fatal("a request was sent while every key was open")
	}
}

func TestBreakerProbe(t *testing.T) {
	var h hits
	var failing atomic.Bool
	failing.Store(true)
	gate := make(chan struct{})
	var gated atomic.Bool
	arrived := make(chan struct{}, 1)
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		h.add(r)
		if gated.Load() {
			arrived <- struct{}{}
			<-gate
		}
		if failing.Load() {
			w.WriteHeader(503)
			return
		}
		writeOK(w)
	})
	opts := PoolOptions{Breaker: BreakerOptions{Failures: 3, CoolDown: 30 * time.Second}, MaxAttempts: 3}
	p, c := testPool(t, opts, key(1, srv.URL, "a"))
	if _, err := p.Do(context.Background(), chatRequest("m")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
	s := status(t, p, 1)
	if s.State != Open || !s.Until.Equal(c.Now().Add(30*time.Second)) {
		t.Fatalf("after 3 failures: %+v, want open for 30s", s)
	}

	c.Advance(29 * time.Second)
	if _, err := p.Do(context.Background(), chatRequest("m")); !errors.Is(err, ErrUnavailable) || h.total() != 3 {
		t.Fatalf("during the cool-down: err %v, hits %d; want ErrUnavailable and no request", err, h.total())
	}

	// After the cool-down a failed probe opens it again.
	c.Advance(time.Second)
	if _, err := p.Do(context.Background(), chatRequest("m")); !errors.Is(err, ErrUnavailable) || h.total() != 4 {
		t.Fatalf("failed probe: err %v, hits %d; want ErrUnavailable after exactly one probe", err, h.total())
	}
	if s := status(t, p, 1); s.State != Open || !strings.Contains(s.Reason, "probe") {
		t.Fatalf("after a failed probe: %+v", s)
	}

	// Next cool-down: one probe in flight, everyone else waits it out.
	c.Advance(30 * time.Second)
	failing.Store(false)
	gated.Store(true)
	probe := make(chan error, 1)
	go func() {
		_, err := p.Do(context.Background(), chatRequest("m"))
		probe <- err
	}()
	<-arrived
	gated.Store(false)
	if _, err := p.Do(context.Background(), chatRequest("m")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("second request during the probe: err %v, want ErrUnavailable", err)
	}
	if s := status(t, p, 1); !strings.Contains(s.Reason, "probe in flight") {
		t.Fatalf("status during the probe: %+v", s)
	}
	close(gate)
	if err := <-probe; err != nil {
		t.Fatalf("probe: %v", err)
	}
	if h.total() != 5 {
		t.Fatalf("hits %d, want 5: only the probe went through", h.total())
	}
	if s := status(t, p, 1); s.State != Healthy {
		t.Fatalf("after a good probe: %+v, want healthy", s)
	}
	if _, err := p.Do(context.Background(), chatRequest("m")); err != nil {
		t.Fatal(err)
	}
}

func TestDegradation(t *testing.T) {
	newSlow := func(t *testing.T, c *clock, plan func(n int) (slow bool, code int)) (*httptest.Server, *hits) {
		var h hits
		srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
			slow, code := plan(h.add(r))
			if slow {
				c.Advance(6 * time.Second)
			}
			if code == 200 {
				writeOK(w)
				return
			}
			w.WriteHeader(code)
		})
		return srv, &h
	}
	opts := func(c *clock) PoolOptions {
		return PoolOptions{Now: c.Now, Sleep: c.Sleep, Budget: time.Minute, MaxAttempts: 5,
			Breaker: BreakerOptions{Failures: 100, CoolDown: 30 * time.Second}}
	}
	t.Run("three slow 5xx in a row", func(t *testing.T) {
		c := newClock()
		srv, h := newSlow(t, c, func(int) (bool, int) { return true, 502 })
		p, _ := testPool(t, opts(c), key(1, srv.URL, "a"))
		_, err := p.Do(context.Background(), chatRequest("m"))
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "degraded") {
			t.Fatalf("err = %v, want ErrUnavailable: degraded", err)
		}
		if h.total() != 3 {
			t.Fatalf("hits %d, want 3: the call stops once the rule trips", h.total())
		}
		if !p.Degraded("m") || p.Degraded("other") {
			t.Fatal("Degraded should be true for m only")
		}
		if _, err := p.Do(context.Background(), chatRequest("m")); !errors.Is(err, ErrUnavailable) || h.total() != 3 {
			t.Fatalf("while degraded: err %v hits %d, want ErrUnavailable with no request", err, h.total())
		}
		c.Advance(30 * time.Second)
		if p.Degraded("m") {
			t.Fatal("still degraded after the cool-down")
		}
	})
	t.Run("fast 5xx do not count", func(t *testing.T) {
		c := newClock()
		srv, h := newSlow(t, c, func(int) (bool, int) { return false, 500 })
		p, _ := testPool(t, opts(c), key(1, srv.URL, "a"))
		if _, err := p.Do(context.Background(), chatRequest("m")); !errors.Is(err, ErrUnavailable) {
			t.Fatal(err)
		}
		if h.total() != 5 || p.Degraded("m") {
			t.Fatalf("hits %d degraded %v, want 5 attempts and not degraded", h.total(), p.Degraded("m"))
		}
	})
	t.Run("a success breaks the streak", func(t *testing.T) {
		c := newClock()
		codes := []int{502, 502, 200, 502, 502, 200}
		srv, _ := newSlow(t, c, func(n int) (bool, int) { return codes[n-1] != 200, codes[n-1] })
		p, _ := testPool(t, opts(c), key(1, srv.URL, "a"))
		for range 2 {
			if _, err := p.Do(context.Background(), chatRequest("m")); err != nil {
				t.Fatal(err)
			}
		}
		if p.Degraded("m") {
			t.Fatal("degraded without three slow failures in a row")
		}
	})
}

func TestSecretsNeverLogged(t *testing.T) {
	const secret = "sk-SECRET-d3adb33f"
	echo := provider(t, func(w http.ResponseWriter, r *http.Request) {
		// A careless provider echoing the key in its error body.
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(503)
		io.WriteString(w, `{"error":"bad key `+r.Header.Get("Authorization")+`"}`)
	})
	refuse := provider(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(401)
		io.WriteString(w, r.Header.Get("Authorization"))
	})
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	log, buf := captureLog()
	keys := []Key{
		key(1, echo.URL, secret+"-1"),
		key(2, refuse.URL, secret+"-2"),
		key(3, dead.URL, secret+"-3"),
		key(4, strings.Replace(dead.URL, "http://", "http://user:"+secret+"-4@", 1)+"/v1?api-key="+secret, secret+"-5"),
	}
	p, _ := testPool(t, PoolOptions{Log: log, Rand: fixedRand(0.3), Breaker: BreakerOptions{Failures: 2}}, keys...)
	_, err := p.Do(context.Background(), chatRequest("m"))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
	out := buf.String()
	if !strings.Contains(out, "upstream retry") || !strings.Contains(out, "request_id=req-1") || !strings.Contains(out, "key=key-") {
		t.Fatalf("retries not logged with request id and key name:\n%s", out)
	}
	for where, text := range map[string]string{"log": out, "error": err.Error(), "status": fmt.Sprintf("%+v", p.Status())} {
		if strings.Contains(text, "SECRET") {
			t.Errorf("the secret leaked into the %s:\n%s", where, text)
		}
	}
}

// A stream's caller that leaves before the headers ends the provider's
// request: nothing was generated, but the provider had the prompt, so Do
// says so (SentError, naming the key) for the caller to bill it.
func TestCallerCancelledBeforeHeaders(t *testing.T) {
	var h hits
	cancelled := make(chan struct{})
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		h.add(r)
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(5 * time.Second):
		}
	})
	p, _ := testPool(t, PoolOptions{}, key(1, srv.URL, "a"), key(2, srv.URL, "b"))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req := chatRequest("m")
	req.Stream = true
	_, err := p.Do(ctx, req)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want the caller's context error", err)
	}
	var sent *SentError
	if !errors.As(err, &sent) || sent.KeyID == 0 || !strings.Contains(err.Error(), "abandoned after it was sent") {
		t.Fatalf("err = %v, want a SentError naming the key that has the prompt", err)
	}
	select {
	case <-cancelled:
	case <-time.After(2 * time.Second):
		t.Fatal("the upstream request was not cancelled")
	}
	if h.total() != 1 {
		t.Fatalf("hits %d: a caller that left is not retried", h.total())
	}
	if s := status(t, p, 1); s.Failures != 0 {
		t.Fatalf("the caller leaving counted against the key: %+v", s)
	}
	// A caller gone before anything was sent is not told the provider has
	// its prompt.
	gone, leave := context.WithCancel(context.Background())
	leave()
	if _, err := p.Do(gone, req); !errors.Is(err, context.Canceled) || errors.As(err, &sent) {
		t.Fatalf("a caller gone before the send: err = %v, want its context error alone", err)
	}
}

// A whole answer's caller that leaves once the provider has the request
// does not end it: the provider answers and bills in full, so the answer
// and its usage are read, for the caller to bill (attemptContext).
func TestCallerGoneBeforeAWholeAnswerIsStillAnswered(t *testing.T) {
	var h hits
	ctx, cancel := context.WithCancel(context.Background())
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		h.add(r)
		cancel() // the caller leaves while the provider works
		// The provider works a moment: an attempt tied to the caller's
		// context would see it end before the answer, not race it.
		time.Sleep(20 * time.Millisecond)
		if r.Context().Err() != nil {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":"done"},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`))
	})
	p, _ := testPool(t, PoolOptions{}, key(1, srv.URL, "a"))
	resp, err := p.Do(ctx, chatRequest("m"))
	if err != nil {
		t.Fatalf("err = %v, want the answer the provider gave after the caller left", err)
	}
	if c, _ := ReadCompletion(resp.Body); resp.Status != 200 || c.Usage.PromptTokens != 7 || c.Usage.CompletionTokens != 3 {
		t.Fatalf("answer %d %s, want the provider's with its usage", resp.Status, resp.Body)
	}
	if h.total() != 1 {
		t.Fatalf("hits %d, want 1", h.total())
	}
}

func TestBackoffAndRetryAfter(t *testing.T) {
	p := NewPool(PoolOptions{Rand: fixedRand(0.999999)})
	prev := time.Duration(0)
	for n := range 100 {
		d := p.backoff(n)
		ceil := DefaultMaxBackoff
		if n < 5 {
			ceil = DefaultBaseBackoff << n
		}
		if d < 0 || d > ceil || d < prev {
			t.Fatalf("backoff(%d) = %s, want in [%s, %s]", n, d, prev, ceil)
		}
		prev = d
	}
	if d := NewPool(PoolOptions{Rand: fixedRand(0)}).backoff(3); d != 0 {
		t.Fatalf("full jitter reaches 0, got %s", d)
	}

	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name   string
		header map[string]string
		want   time.Duration
		ok     bool
	}{
		{"none", nil, 0, false},
		{"seconds", map[string]string{"Retry-After": "3"}, 3 * time.Second, true},
		{"fraction", map[string]string{"Retry-After": "0.5"}, 500 * time.Millisecond, true},
		{"huge", map[string]string{"Retry-After": "1e300"}, maxRetryAfter, true},
		{"ms wins", map[string]string{"Retry-After": "3", "retry-after-ms": "250"}, 250 * time.Millisecond, true},
		{"date", map[string]string{"Retry-After": now.Add(90 * time.Second).Format(http.TimeFormat)}, 90 * time.Second, true},
		{"past date", map[string]string{"Retry-After": now.Add(-time.Hour).Format(http.TimeFormat)}, 0, true},
		{"junk", map[string]string{"Retry-After": "soon"}, 0, false},
		{"negative", map[string]string{"Retry-After": "-5"}, 0, false},
		{"NaN ms falls back", map[string]string{"retry-after-ms": "NaN", "Retry-After": "2"}, 2 * time.Second, true},
	}
	for _, tc := range cases {
		h := http.Header{}
		for k, v := range tc.header {
			h.Set(k, v)
		}
		got, ok := retryAfter(h, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: got %s %v, want %s %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestABudgetIsSharedByTheModelsOfOneRequest: an alias's next model is
// asked within what its first left of the budget, so the budget bounds
// the request however many models it tries; without a shared Budget each
// Do call starts its own.
func TestABudgetIsSharedByTheModelsOfOneRequest(t *testing.T) {
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	for _, shared := range []bool{false, true} {
		ka, kb := key(1, srv.URL, "a"), key(2, srv.URL, "b")
		ka.Models, kb.Models = []string{"model-a"}, []string{"model-b"}
		p, c := testPool(t, PoolOptions{Budget: 10 * time.Second, AttemptTimeout: 8 * time.Second, MaxAttempts: 10}, ka, kb)
		start := c.Now()
		var budget *Budget
		if shared {
			budget = &Budget{}
		}
		for _, model := range []string{"model-a", "model-b"} {
			req := chatRequest(model)
			req.Budget = budget
			if _, err := p.Do(context.Background(), req); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("%s: %v", model, err)
			}
		}
		spent := c.Now().Sub(start)
		switch {
		case shared && spent > 10*time.Second:
			t.Errorf("two models asked with one budget of 10s took %s", spent)
		case !shared && spent <= 10*time.Second:
			t.Errorf("two models asked with a budget each took %s: the test does not tell the two apart", spent)
		}
	}
}
