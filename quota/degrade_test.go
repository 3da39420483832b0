package quota

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/faultproxy"
)

// Shared limiter health, as switchLimiter plays it.
const (
	sharedUp       = iota // answers from its Memory
	sharedDown            // fails at once, like a refused connection
	sharedHung            // answers nothing until ctx ends, like a dead peer
	sharedBadInput        // rejects the params, as a backend with stricter rules might
)

// switchLimiter is a shared Limiter whose health the test sets.
type switchLimiter struct {
	up    Limiter
	mode  atomic.Int32
	calls atomic.Int64
}

var errSharedDown = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

func (s *switchLimiter) fail(ctx context.Context) error {
	s.calls.Add(1)
	switch s.mode.Load() {
	case sharedDown:
		return errSharedDown
	case sharedHung:
		<-ctx.Done()
		return ctx.Err()
	case sharedBadInput:
		return fmt.Errorf("shared: %w", ErrInvalidParams)
	}
	return nil
}

func (s *switchLimiter) Allow(ctx context.Context, key string, p Params, weight int64) (Decision, error) {
	if err := s.fail(ctx); err != nil {
		return Decision{}, err
	}
	return s.up.Allow(ctx, key, p, weight)
}

func (s *switchLimiter) AllowBoth(ctx context.Context, a, b Charge) (Decision, Decision, error) {
	if err := s.fail(ctx); err != nil {
		return Decision{}, Decision{}, err
	}
	return s.up.AllowBoth(ctx, a, b)
}

func (s *switchLimiter) AllowAll(ctx context.Context, cs []Charge) ([]Decision, error) {
	if err := s.fail(ctx); err != nil {
		return nil, err
	}
	return s.up.AllowAll(ctx, cs)
}

func (s *switchLimiter) Adjust(ctx context.Context, key string, p Params, delta int64) error {
	if err := s.fail(ctx); err != nil {
		return err
	}
	return s.up.Adjust(ctx, key, p, delta)
}

// dgLog collects a Degrading's log lines and state changes.
type dgLog struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changes []bool
}

func (l *dgLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *dgLog) onChange(degraded bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.changes = append(l.changes, degraded)
}

func (l *dgLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.buf.String()
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

func (l *dgLog) stateChanges() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprint(l.changes)
}

// options returns DegradingOptions that report to l.
func (l *dgLog) options(opts DegradingOptions) DegradingOptions {
	opts.Logger = slog.New(slog.NewTextHandler(l, nil))
	opts.OnStateChange = l.onChange
	return opts
}

// dgExpect checks a Degrading's state and what it has logged so far.
func dgExpect(t *testing.T, d *Degrading, l *dgLog, state string, logged ...string) {
	t.Helper()
	if got := d.State(); got != state {
		t.Fatalf("State() = %q, want %q", got, state)
	}
	if got := d.Degraded(); got != (state == "degraded") {
		t.Fatalf("Degraded() = %v in state %q", got, state)
	}
	lines := l.lines()
	if len(lines) != len(logged) {
		t.Fatalf("logged %d lines, want %d:\n%s", len(lines), len(logged), strings.Join(lines, "\n"))
	}
	var changes []bool
	for i, want := range logged {
		if !strings.Contains(lines[i], want) {
			t.Fatalf("log line %d is %q, want it to contain %q", i, lines[i], want)
		}
		changes = append(changes, strings.Contains(want, "unavailable"))
	}
	if got, want := l.stateChanges(), fmt.Sprint(changes); got != want {
		t.Fatalf("OnStateChange got %s, want %s", got, want)
	}
}

const (
	logDown = `level=WARN msg="shared limiter unavailable; using local limits at 1/3 share"`
	logBack = `level=INFO msg="shared limiter back"`
)

// newTestDegrading is NewDegrading with reconciliation run synchronously, by
// the request whose shared answer starts it, so that tests see its effect
// at once.
func newTestDegrading(shared Limiter, local *Memory, opts DegradingOptions) *Degrading {
	d := NewDegrading(shared, local, opts)
	d.spawn = func(f func()) { f() }
	return d
}

func TestDegradingFallsBackAndRecovers(t *testing.T) {
	clk := newFakeClock()
	shared := &switchLimiter{up: NewMemory(clk.Now)}
	var log dgLog
	d := newTestDegrading(shared, NewMemory(clk.Now), log.options(DegradingOptions{Share: 3, ProbeInterval: time.Second, Now: clk.Now}))

	// Healthy: the shared limiter decides everything.
	if n := rlDrain(t, d, "tok:1", free); n != 30 {
		t.Fatalf("shared: admitted %d, want 30", n)
	}
	if got := shared.calls.Load(); got != 31 {
		t.Fatalf("shared: %d shared calls for 31 requests", got)
	}
	dgExpect(t, d, &log, "shared")

	// Down: served locally at a third of the bucket, after three failed
	// calls in a row (the first two are each decided locally too).
	shared.mode.Store(sharedDown)
	shared.calls.Store(0)
	if n := rlDrain(t, d, "tok:2", free); n != 10 {
		t.Fatalf("degraded: admitted %d, want 10 (30 at 1/3 share)", n)
	}
	if got := shared.calls.Load(); got != 3 {
		t.Fatalf("degraded: %d shared calls, want only the three that failed", got)
	}
	if got := d.Fallbacks(); got != 11 {
		t.Fatalf("Fallbacks() = %d, want 11", got)
	}
	dgExpect(t, d, &log, "degraded", logDown)
	// The local share refills at a third of the rate: one token in 6s.
	d2 := rlAllow(t, d, "tok:2", free, 1)
	if d2.Allowed || d2.Limit != 10 || d2.RetryAfter != 6*time.Second {
		t.Fatalf("degraded: got %+v, want rejected with Limit 10 and RetryAfter 6s", d2)
	}

	// The breaker: one probe per second, however many requests.
	shared.calls.Store(0)
	for range 12 {
		clk.Advance(500 * time.Millisecond)
		for range 50 {
			rlAllow(t, d, "tok:3", free, 1)
		}
	}
	if got := shared.calls.Load(); got != 6 {
		t.Fatalf("6s degraded: %d shared calls, want 6 probes", got)
	}
	if n := rlDrain(t, d, "tok:2", free); n != 1 {
		t.Fatalf("degraded, 6s later: admitted %d, want 1", n)
	}
	dgExpect(t, d, &log, "degraded", logDown)

	// Back: the next probe closes the breaker and shared limits apply, with
	// the shared state as Redis kept it (tok:1 has refilled 3 tokens in 7s)
	// and charged with what this node admitted locally.
	shared.mode.Store(sharedUp)
	if d1 := rlAllow(t, d, "tok:3", free, 1); d1.Allowed {
		t.Fatalf("before the next probe: got %+v from the local share, want rejected (tok:3 is spent)", d1)
	}
	clk.Advance(time.Second)
	if n := rlDrain(t, d, "tok:1", free); n != 3 {
		t.Fatalf("back: tok:1 admitted %d, want the 3 refilled in Redis", n)
	}
	dgExpect(t, d, &log, "shared", logDown, logBack)
	// tok:2 owes the 2 requests decided locally before the breaker opened,
	// and 9 tokens of local advance during the outage (8 admitted at once,
	// one more 6s later): 11 of its shared 30. tok:3 owes 9: 10 admitted,
	// less the 1.08 its local share refilled in 6.5s, rounded up.
	if got := d.Reconciled(); got != 11+9 {
		t.Fatalf("Reconciled() = %d, want 20", got)
	}
	if n := rlDrain(t, d, "tok:2", free); n != 19 {
		t.Fatalf("back: tok:2 admitted %d, want its shared bucket of 30 less the 11 owed", n)
	}
	if n := rlDrain(t, d, "tok:3", free); n != 21 {
		t.Fatalf("back: tok:3 admitted %d, want its shared bucket of 30 less the 9 owed", n)
	}
	if want := uint64(11 + 1 + 600 + 2 + 1); d.Fallbacks() != want {
		t.Fatalf("Fallbacks() = %d, want %d", d.Fallbacks(), want)
	}
}

func TestDegradingLocalShare(t *testing.T) {
	tests := []struct {
		share      int
		p          Params
		weight     int64
		want       Params
		wantWeight int64
	}{
		{0, free, 5, free, 5},
		{1, free, 5, free, 5},
		{3, free, 5, Params{Capacity: 10, RefillPerSec: 0.5 / 3}, 5},
		{3, Params{Capacity: 31, RefillPerSec: 1}, 1, Params{Capacity: 11, RefillPerSec: 1.0 / 3}, 1},
		{4, Params{Capacity: 1, RefillPerSec: 1}, 1, Params{Capacity: 1, RefillPerSec: 0.25}, 1},
		{1000, free, 1, Params{Capacity: 1, RefillPerSec: 0.0005}, 1},
		// Heavier than the share but not than the bucket: takes the share.
		{3, free, 20, Params{Capacity: 10, RefillPerSec: 0.5 / 3}, 10},
		// A third of this refill is not representable: the whole bucket.
		{3, Params{Capacity: 1, RefillPerSec: 1e-9}, 1, Params{Capacity: 1, RefillPerSec: 1e-9}, 1},
	}
	for _, tt := range tests {
		d := NewDegrading(nil, nil, DegradingOptions{Share: tt.share})
		if p, w := d.localShare(tt.p, tt.weight); p != tt.want || w != tt.wantWeight {
			t.Errorf("share %d of %+v weight %d: got %+v weight %d, want %+v weight %d", tt.share, tt.p, tt.weight, p, w, tt.want, tt.wantWeight)
		}
	}
}

// The share in force is the nodes last seen when more than the expected
// count, and never less than it: 30 at 0.5/s on 1 expected node that has
// seen 3 keeps 10 at 0.5/3; seen 1 again, all 30.
func TestDegradingShareFollowsTheNodesSeen(t *testing.T) {
	d := NewDegrading(nil, nil, DegradingOptions{Share: 1})
	for _, tt := range []struct {
		seen, share int
		want        Params
	}{
		{3, 3, Params{Capacity: 10, RefillPerSec: 0.5 / 3}},
		{1, 1, free},
		{0, 1, free}, // no count is no node: the expected share
	} {
		d.ObserveNodes(tt.seen)
		if p, _ := d.localShare(free, 1); d.Share() != tt.share || p != tt.want {
			t.Errorf("seen %d: share %d, local %+v; want %d, %+v", tt.seen, d.Share(), p, tt.share, tt.want)
		}
	}
	d = NewDegrading(nil, nil, DegradingOptions{Share: 4})
	if d.ObserveNodes(2); d.Share() != 4 {
		t.Errorf("4 expected, 2 seen: share %d, want the expected 4", d.Share())
	}
}

func TestDegradingAllowBothAndAdjust(t *testing.T) {
	clk := newFakeClock()
	shared := &switchLimiter{up: NewMemory(clk.Now)}
	shared.mode.Store(sharedDown)
	var log dgLog
	d := newTestDegrading(shared, NewMemory(clk.Now), log.options(DegradingOptions{Share: 3, FailuresToDegrade: 1, Now: clk.Now}))
	ctx := context.Background()
	tpm := Params{Capacity: 150, RefillPerSec: 150.0 / 60} // 50 per node

	pair := func(tokens int64) (Decision, Decision) {
		t.Helper()
		da, db, err := d.AllowBoth(ctx, Charge{"tok:1", free, 1}, Charge{"tok:1|tpm", tpm, tokens})
		if err != nil {
			t.Fatal(err)
		}
		return da, db
	}
	if da, db := pair(30); !da.Allowed || !db.Allowed || da.Limit != 10 || db.Limit != 50 || db.Remaining != 20 {
		t.Fatalf("first pair: got %+v %+v, want both admitted from 10 and 50", da, db)
	}
	dgExpect(t, d, &log, "degraded", logDown)
	if da, db := pair(30); da.Allowed || db.Allowed || da.Remaining != 9 {
		t.Fatalf("second pair: got %+v %+v, want both rejected, requests bucket uncharged", da, db)
	}
	// The first request used 10 tokens, not 30: give 20 back locally.
	if err := d.Adjust(ctx, "tok:1|tpm", tpm, -20); err != nil {
		t.Fatal(err)
	}
	if da, db := pair(30); !da.Allowed || !db.Allowed || db.Remaining != 10 {
		t.Fatalf("after the refund: got %+v %+v, want both admitted, 10 tokens left", da, db)
	}
	if got := shared.calls.Load(); got != 1 {
		t.Fatalf("%d shared calls, want 1", got)
	}
	if got := d.Fallbacks(); got != 3 {
		t.Fatalf("Fallbacks() = %d, want 3 (Adjust is not a request)", got)
	}

	// Adjust can be the call that finds the shared limiter down, too.
	d = newTestDegrading(shared, NewMemory(clk.Now), DegradingOptions{Share: 3, FailuresToDegrade: 1, Now: clk.Now})
	if err := d.Adjust(ctx, "tok:1", free, 5); err != nil || d.State() != "degraded" {
		t.Fatalf("Adjust while down: %v, state %q; want served locally and degraded", err, d.State())
	}
	if n := rlDrain(t, d, "tok:1", free); n != 5 {
		t.Fatalf("after a local debt of 5: admitted %d, want 5 of 10", n)
	}
}

func TestDegradingParamsErrorsAreNotOutages(t *testing.T) {
	clk := newFakeClock()
	shared := &switchLimiter{up: NewMemory(clk.Now)}
	var log dgLog
	d := NewDegrading(shared, nil, log.options(DegradingOptions{Share: 3, Now: clk.Now}))
	ctx := context.Background()

	// Checked before any shared call.
	if _, err := d.Allow(ctx, "tok:1", free, 31); !errors.Is(err, ErrWeightExceedsCapacity) {
		t.Fatalf("Allow: got %v, want ErrWeightExceedsCapacity", err)
	}
	if _, _, err := d.AllowBoth(ctx, Charge{"tok:1", free, 1}, Charge{"tok:1|tpm", Params{}, 1}); !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("AllowBoth: got %v, want ErrInvalidParams", err)
	}
	if err := d.Adjust(ctx, "tok:1", Params{Capacity: 1}, 1); !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("Adjust: got %v, want ErrInvalidParams", err)
	}
	if got := shared.calls.Load(); got != 0 {
		t.Fatalf("%d shared calls for invalid params, want 0", got)
	}
	// Returned as they are when the shared limiter is the one to object.
	shared.mode.Store(sharedBadInput)
	if _, err := d.Allow(ctx, "tok:1", free, 1); !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("Allow: got %v, want the shared limiter's ErrInvalidParams", err)
	}
	dgExpect(t, d, &log, "shared")
	if got := d.Fallbacks(); got != 0 {
		t.Fatalf("Fallbacks() = %d, want 0", got)
	}
}

func TestDegradingTimeout(t *testing.T) {
	clk := newFakeClock()
	shared := &switchLimiter{up: NewMemory(clk.Now)}
	shared.mode.Store(sharedHung)
	var log dgLog
	d := newTestDegrading(shared, nil, log.options(DegradingOptions{Share: 3, Timeout: 20 * time.Millisecond, FailuresToDegrade: 1, Now: clk.Now}))

	start := time.Now()
	dec := rlAllow(t, d, "tok:1", free, 1)
	if elapsed := time.Since(start); elapsed < 20*time.Millisecond || elapsed > 2*time.Second {
		t.Fatalf("a hung shared limiter held the request for %v, want about 20ms", elapsed)
	}
	if !dec.Allowed || dec.Limit != 10 {
		t.Fatalf("got %+v, want admitted from the local share of 10", dec)
	}
	dgExpect(t, d, &log, "degraded", logDown)
	// Until the next probe, requests do not wait at all.
	start = time.Now()
	rlAllow(t, d, "tok:1", free, 1)
	if elapsed := time.Since(start); elapsed > 10*time.Millisecond {
		t.Fatalf("degraded request took %v", elapsed)
	}
}

func TestDegradingCallerGivesUp(t *testing.T) {
	shared := &switchLimiter{up: NewMemory(nil)}
	shared.mode.Store(sharedHung)
	var log dgLog
	d := NewDegrading(shared, nil, log.options(DegradingOptions{Share: 3, Timeout: time.Minute}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	dec, err := d.Allow(ctx, "tok:1", free, 1)
	if err != nil || !dec.Allowed {
		t.Fatalf("got %+v, %v; want a local decision", dec, err)
	}
	// The caller's deadline says nothing about the shared limiter.
	dgExpect(t, d, &log, "shared")
}

// TestDegradingConcurrentTransitions has many requests fail, and later
// succeed, at once: each transition is still logged and reported once.
func TestDegradingConcurrentTransitions(t *testing.T) {
	clk := newFakeClock()
	shared := &switchLimiter{up: NewMemory(clk.Now)}
	var log dgLog
	d := NewDegrading(shared, NewMemory(clk.Now), log.options(DegradingOptions{Share: 3, Now: clk.Now}))
	p := Params{Capacity: 10_000, RefillPerSec: 1}
	hammer := func() {
		rlHammer(t, []Limiter{d}, 100, 20, func(l Limiter) (bool, error) {
			dec, err := l.Allow(context.Background(), "tok:1", p, 1)
			return dec.Allowed, err
		})
	}
	shared.mode.Store(sharedDown)
	hammer()
	dgExpect(t, d, &log, "degraded", logDown)
	shared.mode.Store(sharedUp)
	clk.Advance(time.Second)
	shared.calls.Store(0)
	hammer()
	dgExpect(t, d, &log, "shared", logDown, logBack)
	if got := shared.calls.Load(); got < 1 {
		t.Fatalf("%d shared calls after recovery", got)
	}
}

// dgRedisNode is one gateway instance behind the proxy: its own client,
// Redis limiter and Degrading.
type dgRedisNode struct {
	d       *Degrading
	counter *rlCounter
	log     *dgLog
}

func newDGRedisNode(t *testing.T, opt redis.Options, addr, prefix string, clk *fakeClock, opts DegradingOptions) dgRedisNode {
	t.Helper()
	opt.Addr = addr
	n := dgRedisNode{counter: newRLCounter(), log: &dgLog{}}
	c := rlClient(t, &opt, n.counter)
	opts.Now = clk.Now
	n.d = newTestDegrading(NewRedis(c, prefix, WithRedisClock(clk.Now)), NewMemory(clk.Now), n.log.options(opts))
	return n
}

// evalshas returns how many script calls the node sent since the last call.
func (n dgRedisNode) evalshas() int {
	c := n.counter.counts()
	return c["evalsha"] + c["eval"]
}

// TestDegradingRedisOutage runs two gateway nodes against the real Redis
// through a proxy, cuts the connection, and brings it back.
func TestDegradingRedisOutage(t *testing.T) {
	opt := rlOptions(t)
	prefix := rlPrefix(t, rlClient(t, opt))
	proxy := faultproxy.Start(t, opt.Addr)
	clk := newFakeClock()
	opts := DegradingOptions{Share: 2, Timeout: 500 * time.Millisecond}
	a := newDGRedisNode(t, *opt, proxy.Addr(), prefix, clk, opts)
	b := newDGRedisNode(t, *opt, proxy.Addr(), prefix, clk, opts)
	const down = `msg="shared limiter unavailable; using local limits at 1/2 share"`

	// Shared: one bucket for both nodes.
	if n := rlDrain(t, a.d, "tok:1", free); n != 30 {
		t.Fatalf("shared: node a admitted %d, want 30", n)
	}
	if n := rlDrain(t, b.d, "tok:1", free); n != 0 {
		t.Fatalf("shared: node b admitted %d after a drained the bucket, want 0", n)
	}
	a.evalshas()
	b.evalshas()

	// Redis gone: each node serves its half, having tried Redis three times.
	proxy.Set(faultproxy.Refuse)
	for _, n := range []dgRedisNode{a, b} {
		if got := rlDrain(t, n.d, "tok:2", free); got != 15 {
			t.Fatalf("degraded: a node admitted %d, want 15 (half of 30)", got)
		}
		dgExpect(t, n.d, n.log, "degraded", down)
		if got := n.evalshas(); got != 3 {
			t.Fatalf("degraded: a node sent %d scripts for 16 requests, want the first three", got)
		}
	}

	// One probe per interval while Redis stays away.
	clk.Advance(time.Second)
	for range 20 {
		rlAllow(t, a.d, "tok:2", free, 1)
	}
	if got := a.evalshas(); got != 1 {
		t.Fatalf("degraded, one interval later: %d scripts sent, want 1 probe", got)
	}
	dgExpect(t, a.d, a.log, "degraded", down)

	// Redis back: the next probe of each node restores the shared limits,
	// and the shared state is as Redis kept it: tok:1 has refilled one token
	// in 2s, which only one of the nodes gets.
	proxy.Set(faultproxy.Up)
	clk.Advance(time.Second)
	if n := rlDrain(t, a.d, "tok:1", free); n != 1 {
		t.Fatalf("back: node a admitted %d from tok:1, want 1", n)
	}
	if n := rlDrain(t, b.d, "tok:1", free); n != 0 {
		t.Fatalf("back: node b admitted %d from tok:1, want 0", n)
	}
	for _, n := range []dgRedisNode{a, b} {
		dgExpect(t, n.d, n.log, "shared", down, logBack)
	}
	if n := rlDrain(t, b.d, "tok:3", free); n != 30 {
		t.Fatalf("back: node b admitted %d from tok:3, want 30", n)
	}
	if n := rlDrain(t, a.d, "tok:3", free); n != 0 {
		t.Fatalf("back: node a admitted %d from tok:3 after b, want 0", n)
	}
}

// TestDegradingRedisBlackhole has Redis stop answering without hanging up:
// the first three requests wait for the timeout, the rest do not wait.
func TestDegradingRedisBlackhole(t *testing.T) {
	opt := rlOptions(t)
	prefix := rlPrefix(t, rlClient(t, opt))
	proxy := faultproxy.Start(t, opt.Addr)
	clk := newFakeClock()
	n := newDGRedisNode(t, *opt, proxy.Addr(), prefix, clk, DegradingOptions{Share: 3, Timeout: 100 * time.Millisecond})
	rlAllow(t, n.d, "tok:1", free, 1)
	dgExpect(t, n.d, n.log, "shared")

	proxy.Set(faultproxy.Blackhole)
	for i := range 3 {
		dgExpect(t, n.d, n.log, "shared")
		start := time.Now()
		dec := rlAllow(t, n.d, "tok:1", free, 1)
		if elapsed := time.Since(start); elapsed < 100*time.Millisecond || elapsed > 2*time.Second {
			t.Fatalf("blackholed Redis held request %d for %v, want about 100ms", i+1, elapsed)
		}
		// The local share starts where Redis left tok:1: one token spent.
		if !dec.Allowed || dec.Limit != 10 || dec.Remaining != 8-int64(i) {
			t.Fatalf("got %+v, want admitted from the local share of 10, %d left", dec, 8-i)
		}
	}
	dgExpect(t, n.d, n.log, "degraded", logDown)
	start := time.Now()
	if got := rlDrain(t, n.d, "tok:1", free); got != 6 {
		t.Fatalf("degraded: admitted %d more, want 6", got)
	}
	if elapsed := time.Since(start); elapsed > 50*time.Millisecond {
		t.Fatalf("10 degraded requests took %v", elapsed)
	}
}

// TestDegradingClosedPort starts with no Redis at all (nothing listens on
// the port): requests are served at the local share from the first one.
func TestDegradingClosedPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	// One dial attempt, so that the error is the refusal, not the timeout.
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1})
	defer c.Close()
	var log dgLog
	d := NewDegrading(NewRedis(c, "sluicetest:quota:"), nil, log.options(DegradingOptions{Share: 3, Timeout: time.Second}))
	if n := rlDrain(t, d, "tok:1", free); n != 10 {
		t.Fatalf("admitted %d, want 10 (30 at 1/3 share)", n)
	}
	dgExpect(t, d, &log, "degraded", logDown)
	if !strings.Contains(log.lines()[0], "connection refused") {
		t.Fatalf("log line %q does not say why", log.lines()[0])
	}
}
