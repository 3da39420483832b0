package quota

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

var (
	free    = Params{Capacity: 30, RefillPerSec: 0.5}
	premium = Params{Capacity: 200, RefillPerSec: 5}
)

// fakeClock is a clock that moves only when told, so tests never sleep.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func allow(t testing.TB, m *Memory, key string, p Params, weight int64) Decision {
	t.Helper()
	d, err := m.Allow(context.Background(), key, p, weight)
	if err != nil {
		t.Fatalf("Allow(%q, %+v, %d): %v", key, p, weight, err)
	}
	return d
}

// drain admits weight-1 requests until one is rejected and returns how many
// were admitted.
func drain(t testing.TB, m *Memory, key string, p Params) int64 {
	t.Helper()
	var n int64
	for allow(t, m, key, p, 1).Allowed {
		n++
		if n > p.Capacity {
			t.Fatalf("admitted %d at one instant, more than capacity %d", n, p.Capacity)
		}
	}
	return n
}

func TestFreeTierBurst(t *testing.T) {
	clk := newFakeClock()
	m := NewMemory(clk.Now)
	for i := int64(1); i <= 30; i++ {
		d := allow(t, m, "k", free, 1)
		want := Decision{Allowed: true, Limit: 30, Remaining: 30 - i, ResetAfter: time.Duration(i) * 2 * time.Second}
		if d != want {
			t.Fatalf("request %d: got %+v, want %+v", i, d, want)
		}
	}
	d := allow(t, m, "k", free, 1)
	want := Decision{Allowed: false, Limit: 30, Remaining: 0, RetryAfter: 2 * time.Second, ResetAfter: 60 * time.Second}
	if d != want {
		t.Fatalf("31st request: got %+v, want %+v", d, want)
	}

	clk.Advance(2 * time.Second)
	if n := drain(t, m, "k", free); n != 1 {
		t.Fatalf("after 2s admitted %d, want exactly 1", n)
	}
}

func TestPremiumBurst(t *testing.T) {
	clk := newFakeClock()
	m := NewMemory(clk.Now)
	if n := drain(t, m, "k", premium); n != 200 {
		t.Fatalf("burst admitted %d, want 200", n)
	}
	d := allow(t, m, "k", premium, 1)
	if d.Allowed || d.RetryAfter != 200*time.Millisecond || d.ResetAfter != 40*time.Second {
		t.Fatalf("after burst got %+v, want rejected, RetryAfter 200ms, ResetAfter 40s", d)
	}
	clk.Advance(time.Second)
	if n := drain(t, m, "k", premium); n != 5 {
		t.Fatalf("after 1s admitted %d, want 5", n)
	}
}

// TestSustainedRate checks that after the initial burst exactly RefillPerSec
// requests per second get through, over a long simulated run.
func TestSustainedRate(t *testing.T) {
	tests := []struct {
		name     string
		p        Params
		step     time.Duration
		duration time.Duration
		want     int64 // admitted in [0, duration], burst included
	}{
		{"free", free, 100 * time.Millisecond, 1000 * time.Second, 30 + 500},
		{"premium", premium, 50 * time.Millisecond, 1000 * time.Second, 200 + 5000},
		// 1e9/0.3 is not a whole number of nanoseconds, so T is rounded.
		{"free auto-tuned", Params{Capacity: 30, RefillPerSec: 0.3}, 100 * time.Millisecond, 1000 * time.Second, 30 + 300},
		{"fast", Params{Capacity: 10, RefillPerSec: 3000}, time.Millisecond, 100 * time.Second, 10 + 300000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			m := NewMemory(clk.Now)
			admitted := drain(t, m, "k", tt.p)
			for elapsed := time.Duration(0); elapsed < tt.duration; elapsed += tt.step {
				clk.Advance(tt.step)
				admitted += drain(t, m, "k", tt.p)
			}
			if admitted < tt.want || admitted > tt.want+1 {
				t.Fatalf("admitted %d over %v, want %d (+1)", admitted, tt.duration, tt.want)
			}
		})
	}
}

// TestLongRunRate runs buckets at awkward rates (T not a whole number of
// nanoseconds) for 100k simulated seconds, polled at irregular instants with
// random weights, and compares the tokens admitted with the ideal
// Capacity + rate*t: never more (+1 for the rounding of T), and at least
// 0.999 of it, so no refill is lost between polls.
func TestLongRunRate(t *testing.T) {
	tests := []struct {
		name      string
		p         Params
		maxWeight int64
	}{
		{"3/s", Params{Capacity: 10, RefillPerSec: 3}, 1},
		{"0.7/s", Params{Capacity: 5, RefillPerSec: 0.7}, 1},
		{"3/s weights 1-4", Params{Capacity: 10, RefillPerSec: 3}, 4},
		{"0.7/s weights 1-3", Params{Capacity: 5, RefillPerSec: 0.7}, 3},
	}
	const duration = 100_000 * time.Second
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			m := NewMemory(clk.Now)
			rng := rand.New(rand.NewPCG(1, uint64(tt.maxWeight)))
			var admitted int64 // tokens
			for elapsed := time.Duration(0); ; {
				for {
					w := 1 + rng.Int64N(tt.maxWeight)
					if !allow(t, m, "k", tt.p, w).Allowed {
						break
					}
					admitted += w
				}
				if elapsed == duration {
					break
				}
				// Polls under 1s apart never let these buckets fill up, so
				// any shortfall would be refill lost by the limiter.
				step := min(1+time.Duration(rng.Int64N(int64(700*time.Millisecond))), duration-elapsed)
				clk.Advance(step)
				elapsed += step
			}
			ideal := float64(tt.p.Capacity) + tt.p.RefillPerSec*duration.Seconds()
			if float64(admitted) > ideal+1 || float64(admitted) < 0.999*ideal {
				t.Fatalf("admitted %d tokens in %v, want between %.0f and %.1f", admitted, duration, 0.999*ideal, ideal+1)
			}
			t.Logf("admitted %d tokens, ideal %.2f", admitted, ideal)
		})
	}
}

// TestFreeTierOnePerInterval checks the spacing, not just the total: after
// the burst, one request every 2s and never two within one interval.
func TestFreeTierOnePerInterval(t *testing.T) {
	clk := newFakeClock()
	m := NewMemory(clk.Now)
	drain(t, m, "k", free)
	for i := 0; i < 500; i++ {
		clk.Advance(1999 * time.Millisecond)
		if d := allow(t, m, "k", free, 1); d.Allowed || d.RetryAfter != time.Millisecond {
			t.Fatalf("interval %d, 1ms early: got %+v, want rejected with RetryAfter 1ms", i, d)
		}
		clk.Advance(time.Millisecond)
		if n := drain(t, m, "k", free); n != 1 {
			t.Fatalf("interval %d: admitted %d, want 1", i, n)
		}
	}
}

// TestSequences walks one key through a series of calls and checks every
// field of every decision.
func TestSequences(t *testing.T) {
	type step struct {
		advance time.Duration
		p       Params
		weight  int64
		want    Decision
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"weight 5 consumes 5", []step{
			{0, free, 5, Decision{Allowed: true, Limit: 30, Remaining: 25, ResetAfter: 10 * time.Second}},
			{0, free, 1, Decision{Allowed: true, Limit: 30, Remaining: 24, ResetAfter: 12 * time.Second}},
			{0, free, 24, Decision{Allowed: true, Limit: 30, Remaining: 0, ResetAfter: 60 * time.Second}},
		}},
		{"rejected weight consumes nothing", []step{
			{0, free, 28, Decision{Allowed: true, Limit: 30, Remaining: 2, ResetAfter: 56 * time.Second}},
			{0, free, 5, Decision{Limit: 30, Remaining: 2, RetryAfter: 6 * time.Second, ResetAfter: 56 * time.Second}},
			{0, free, 2, Decision{Allowed: true, Limit: 30, Remaining: 0, ResetAfter: 60 * time.Second}},
		}},
		{"rejections do not push back the next allowed time", []step{
			{0, free, 30, Decision{Allowed: true, Limit: 30, ResetAfter: 60 * time.Second}},
			{0, free, 1, Decision{Limit: 30, RetryAfter: 2 * time.Second, ResetAfter: 60 * time.Second}},
			{time.Second, free, 1, Decision{Limit: 30, RetryAfter: time.Second, ResetAfter: 59 * time.Second}},
			{0, free, 1, Decision{Limit: 30, RetryAfter: time.Second, ResetAfter: 59 * time.Second}},
			{time.Second, free, 1, Decision{Allowed: true, Limit: 30, ResetAfter: 60 * time.Second}},
		}},
		{"RetryAfter waits for the whole weight", []step{
			{0, free, 30, Decision{Allowed: true, Limit: 30, ResetAfter: 60 * time.Second}},
			{3 * time.Second, free, 3, Decision{Limit: 30, Remaining: 1, RetryAfter: 3 * time.Second, ResetAfter: 57 * time.Second}},
			{3 * time.Second, free, 3, Decision{Allowed: true, Limit: 30, ResetAfter: 60 * time.Second}},
		}},
		{"partial token is not counted", []step{
			{0, free, 30, Decision{Allowed: true, Limit: 30, ResetAfter: 60 * time.Second}},
			{1500 * time.Millisecond, free, 1, Decision{Limit: 30, RetryAfter: 500 * time.Millisecond, ResetAfter: 58500 * time.Millisecond}},
		}},
		{"idle time is not banked beyond capacity", []step{
			{0, free, 1, Decision{Allowed: true, Limit: 30, Remaining: 29, ResetAfter: 2 * time.Second}},
			{time.Hour, free, 30, Decision{Allowed: true, Limit: 30, ResetAfter: 60 * time.Second}},
			{0, free, 1, Decision{Limit: 30, RetryAfter: 2 * time.Second, ResetAfter: 60 * time.Second}},
		}},
		{"raised capacity applies on the next call", []step{
			{0, free, 30, Decision{Allowed: true, Limit: 30, ResetAfter: 60 * time.Second}},
			{0, free, 1, Decision{Limit: 30, RetryAfter: 2 * time.Second, ResetAfter: 60 * time.Second}},
			{0, Params{Capacity: 60, RefillPerSec: 0.5}, 1, Decision{Allowed: true, Limit: 60, Remaining: 29, ResetAfter: 62 * time.Second}},
		}},
		{"lowered capacity applies on the next call", []step{
			{0, Params{Capacity: 60, RefillPerSec: 0.5}, 40, Decision{Allowed: true, Limit: 60, Remaining: 20, ResetAfter: 80 * time.Second}},
			{0, free, 1, Decision{Limit: 30, Remaining: 0, RetryAfter: 22 * time.Second, ResetAfter: 80 * time.Second}},
		}},
		// The state is time owed, so a new refill rate keeps the wait, not
		// the token count: 60s owed is 20 tokens' worth at 1/3s.
		{"refill change keeps the time owed", []step{
			{0, free, 30, Decision{Allowed: true, Limit: 30, ResetAfter: 60 * time.Second}},
			{0, Params{Capacity: 30, RefillPerSec: 1.0 / 3}, 10, Decision{Allowed: true, Limit: 30, Remaining: 0, ResetAfter: 90 * time.Second}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			m := NewMemory(clk.Now)
			for i, s := range tt.steps {
				clk.Advance(s.advance)
				if got := allow(t, m, "k", s.p, s.weight); got != s.want {
					t.Fatalf("step %d (weight %d, %+v):\n got  %+v\n want %+v", i, s.weight, s.p, got, s.want)
				}
			}
		})
	}
}

func TestInvalid(t *testing.T) {
	tests := []struct {
		name   string
		p      Params
		weight int64
		want   error
	}{
		{"zero capacity", Params{Capacity: 0, RefillPerSec: 1}, 1, ErrInvalidParams},
		{"negative capacity", Params{Capacity: -5, RefillPerSec: 1}, 1, ErrInvalidParams},
		{"zero refill", Params{Capacity: 30, RefillPerSec: 0}, 1, ErrInvalidParams},
		{"negative refill", Params{Capacity: 30, RefillPerSec: -0.5}, 1, ErrInvalidParams},
		{"NaN refill", Params{Capacity: 30, RefillPerSec: math.NaN()}, 1, ErrInvalidParams},
		{"infinite refill", Params{Capacity: 30, RefillPerSec: math.Inf(1)}, 1, ErrInvalidParams},
		{"refill faster than 1/ns", Params{Capacity: 30, RefillPerSec: 1e10}, 1, ErrInvalidParams},
		{"refill too slow to represent", Params{Capacity: 1, RefillPerSec: 1e-12}, 1, ErrInvalidParams},
		{"burst window overflows", Params{Capacity: math.MaxInt64, RefillPerSec: 1}, 1, ErrInvalidParams},
		{"zero weight", free, 0, ErrInvalidParams},
		{"negative weight", free, -1, ErrInvalidParams},
		{"weight above capacity", free, 31, ErrWeightExceedsCapacity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			m := NewMemory(clk.Now)
			d, err := m.Allow(context.Background(), "k", tt.p, tt.weight)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got error %v, want %v", err, tt.want)
			}
			other := ErrInvalidParams
			if tt.want == ErrInvalidParams {
				other = ErrWeightExceedsCapacity
			}
			if errors.Is(err, other) {
				t.Fatalf("error %v also matches %v", err, other)
			}
			if d != (Decision{}) {
				t.Fatalf("got decision %+v with error, want zero", d)
			}
			// Nothing was consumed: the key still has its whole burst.
			if n := drain(t, m, "k", free); n != 30 {
				t.Fatalf("after error, burst admitted %d, want 30", n)
			}
		})
	}
}

func TestKeysAreIndependent(t *testing.T) {
	clk := newFakeClock()
	m := NewMemory(clk.Now)
	if n := drain(t, m, "a", free); n != 30 {
		t.Fatalf("key a admitted %d, want 30", n)
	}
	if n := drain(t, m, "b", free); n != 30 {
		t.Fatalf("key b admitted %d after a was drained, want 30", n)
	}
	if n := drain(t, m, "a", premium); n != 0 {
		t.Fatalf("key a admitted %d after b was drained, want 0", n)
	}
}

func TestGCRARejectionKeepsState(t *testing.T) {
	s, err := newShape(free, 5)
	if err != nil {
		t.Fatal(err)
	}
	const now = int64(1e18)
	tat := now + 58*int64(time.Second) // one token left
	d, next := gcra(tat, now, s, 5)
	if d.Allowed || next != tat {
		t.Fatalf("got %+v and TAT %d, want rejected with TAT unchanged at %d", d, next, tat)
	}
}

func TestAllowDoesNotAllocate(t *testing.T) {
	clk := newFakeClock()
	m := NewMemory(clk.Now)
	ctx := context.Background()
	allow(t, m, "tok_123", free, 1) // create the bucket
	for _, name := range []string{"admitted", "rejected"} {
		allocs := testing.AllocsPerRun(1000, func() {
			clk.Advance(2 * time.Second) // one token refilled per run
			if _, err := m.Allow(ctx, "tok_123", free, 1); err != nil {
				t.Fatal(err)
			}
			if name == "rejected" {
				_, _ = m.Allow(ctx, "tok_123", free, 1)
			}
		})
		if allocs != 0 {
			t.Fatalf("%s: %v allocations per Allow, want 0", name, allocs)
		}
	}
}

// TestRealClockIsUnixTime: the default clock is monotonic but still counts
// unix nanoseconds, as TATs and the Degrading's copies of shared state do.
func TestRealClockIsUnixTime(t *testing.T) {
	m := NewMemory(nil)
	time.Sleep(time.Millisecond)
	before := time.Now().UnixNano()
	got := m.nanos()
	after := time.Now().UnixNano()
	if got < before-int64(time.Millisecond) || got > after+int64(time.Millisecond) {
		t.Fatalf("nanos() = %d, want within a millisecond of [%d, %d]", got, before, after)
	}
}

func TestNilClockUsesTimeNow(t *testing.T) {
	m := NewMemory(nil)
	d := allow(t, m, "k", free, 1)
	if !d.Allowed || d.Remaining != 29 {
		t.Fatalf("got %+v, want admitted with 29 remaining", d)
	}
}
