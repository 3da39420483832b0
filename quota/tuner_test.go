package quota

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// tierStore stands in for the tiers table and tuning_events: Apply moves the
// effective refills the way the gateway's apply callback will.
type tierStore struct {
	mu     sync.Mutex
	tiers  []TunedTier
	events []TuningEvent
}

func defaultTunedTiers() *tierStore {
	return &tierStore{tiers: []TunedTier{
		{Name: "free", Configured: 0.5, Floor: 0.3, Effective: 0.5, Autotune: true},
		{Name: "premium", Configured: 5, Floor: 5, Effective: 5, Autotune: false},
	}}
}

func (s *tierStore) Tiers(context.Context) ([]TunedTier, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]TunedTier(nil), s.tiers...), nil
}

func (s *tierStore) Apply(_ context.Context, events []TuningEvent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range events {
		for i := range s.tiers {
			if s.tiers[i].Name == e.Tier {
				s.tiers[i].Effective = e.To
			}
		}
	}
	s.events = append(s.events, events...)
	return nil
}

func (s *tierStore) effective(name string) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, tt := range s.tiers {
		if tt.Name == name {
			return tt.Effective
		}
	}
	return -1
}

func (s *tierStore) eventCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.events)
}

// observe feeds one sample and applies what the tuner decides.
func observe(tu *Tuner, store *tierStore, clock *manualClock, load float64) []TuningEvent {
	tiers, _ := store.Tiers(context.Background())
	events := tu.Observe(load, tiers, clock.Now())
	store.Apply(context.Background(), events)
	clock.Advance(5 * time.Second)
	return events
}

func TestTunerWalksFreeRefillDownAndBack(t *testing.T) {
	clock := newManualClock()
	store := defaultTunedTiers()
	tu := NewTuner(DefaultTunerConfig())

	// Two loaded samples are not yet sustained load.
	for i := range 2 {
		if ev := observe(tu, store, clock, 0.9); ev != nil {
			t.Fatalf("loaded sample %d: events %+v, want none before 3", i+1, ev)
		}
	}
	at := clock.Now()
	ev := observe(tu, store, clock, 0.95)
	want := TuningEvent{At: at, Tier: "free", From: 0.5, To: 0.3, Load: 0.95}
	if len(ev) != 1 || ev[0] != want {
		t.Fatalf("3rd loaded sample: events %+v, want exactly %+v", ev, want)
	}
	if got := store.effective("free"); got != 0.3 {
		t.Fatalf("free refill %v after the cut, want exactly 0.3", got)
	}

	// At the floor, continued load changes nothing.
	for range 9 {
		if ev := observe(tu, store, clock, 1.2); ev != nil {
			t.Fatalf("at the floor: events %+v, want none", ev)
		}
	}

	// Calm: each 6 samples restore 10% of the configured 0.5.
	for _, wantTo := range []float64{0.35, 0.4, 0.45, 0.5} {
		from := store.effective("free")
		for i := range 5 {
			if ev := observe(tu, store, clock, 0.2); ev != nil {
				t.Fatalf("calm sample %d towards %v: events %+v, want none before 6", i+1, wantTo, ev)
			}
		}
		ev := observe(tu, store, clock, 0.5) // the low mark itself is calm
		if len(ev) != 1 || ev[0].Tier != "free" || ev[0].From != from || ev[0].To != wantTo || ev[0].Load != 0.5 {
			t.Fatalf("6th calm sample: events %+v, want free %v -> %v at load 0.5", ev, from, wantTo)
		}
	}

	// Restored: further calm changes nothing.
	for range 18 {
		if ev := observe(tu, store, clock, 0); ev != nil {
			t.Fatalf("back at the configured rate: events %+v, want none", ev)
		}
	}
	if got := store.effective("free"); got != 0.5 {
		t.Fatalf("free refill %v, want exactly 0.5", got)
	}
	if got := store.effective("premium"); got != 5 {
		t.Fatalf("premium refill %v, want 5: autotune off must never change", got)
	}
	if n := store.eventCount(); n != 5 {
		t.Fatalf("%d events recorded, want 5 (one cut, four restores)", n)
	}
	for i, e := range store.events {
		if e.Tier != "free" || e.At.IsZero() || (i > 0 && !e.At.After(store.events[i-1].At)) {
			t.Fatalf("event %d: %+v: want a free-tier event with a later time than the one before", i, e)
		}
	}
}

// The next cut needs a fresh run of loaded samples; a floor below the first cut
// lets the rate fall in steps.
func TestTunerCutsStepwiseToTheFloor(t *testing.T) {
	clock := newManualClock()
	store := &tierStore{tiers: []TunedTier{{Name: "free", Configured: 0.5, Floor: 0.1, Effective: 0.5, Autotune: true}}}
	tu := NewTuner(DefaultTunerConfig())
	var got []float64
	for range 15 {
		for _, e := range observe(tu, store, clock, 0.85) {
			got = append(got, e.To)
		}
	}
	want := []float64{0.3, 0.18, 0.108, 0.1}
	if len(got) != len(want) {
		t.Fatalf("cuts %v, want %v (one per 3 loaded samples, floor 0.1)", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("cuts %v, want %v", got, want)
		}
	}
}

func TestTunerMidRangeBreaksRuns(t *testing.T) {
	clock := newManualClock()
	store := defaultTunedTiers()
	tu := NewTuner(DefaultTunerConfig())
	for _, load := range []float64{0.9, 0.9, 0.6, 0.9, 0.9, 0.7, 0.8, 0.8, 0.79} {
		if ev := observe(tu, store, clock, load); ev != nil {
			t.Fatalf("load %v: events %+v; no run of 3 was unbroken", load, ev)
		}
	}
	store.tiers[0].Effective = 0.3
	for _, load := range []float64{0.1, 0.1, 0.1, 0.1, 0.1, 0.51, 0.1, 0.1, 0.1, 0.1, 0.1, 0.9} {
		if ev := observe(tu, store, clock, load); ev != nil {
			t.Fatalf("load %v: events %+v; no run of 6 calm was unbroken", load, ev)
		}
	}
}

func TestTunerTierEdgeCases(t *testing.T) {
	tiers := []TunedTier{
		{Name: "untuned", Configured: 0.5, Floor: 0.3, Effective: 0, Autotune: true},     // effective unset: taken as configured
		{Name: "floor-above", Configured: 1, Floor: 2, Effective: 1, Autotune: true},     // floor capped at configured: cannot cut
		{Name: "no-floor", Configured: 1, Floor: 0, Effective: 0.000001, Autotune: true}, // never cut to zero
		{Name: "below-floor", Configured: 1, Floor: 0.5, Effective: 0.4, Autotune: true}, // a cut never raises
		{Name: "premium", Configured: 5, Floor: 1, Effective: 5, Autotune: false},        // never touched
		{Name: "unconfigured", Configured: 0, Floor: 0, Effective: 0, Autotune: true},    // ignored
	}
	tu := NewTuner(TunerConfig{High: 0.8, Low: 0.5, HighSamples: 1, LowSamples: 1, Cut: 0.6, Step: 0.1})
	ev := tu.Observe(1, tiers, time.Unix(0, 0))
	if len(ev) != 1 || ev[0].Tier != "untuned" || ev[0].From != 0.5 || ev[0].To != 0.3 {
		t.Fatalf("cut: events %+v, want only untuned 0.5 -> 0.3", ev)
	}
	ev = tu.Observe(0, tiers, time.Unix(0, 0))
	if len(ev) != 2 || ev[0].Tier != "no-floor" || ev[1].Tier != "below-floor" || ev[1].To != 0.5 {
		t.Fatalf("restore: events %+v, want no-floor and below-floor (0.4 -> 0.5)", ev)
	}
}

func TestTunerConfig(t *testing.T) {
	if err := DefaultTunerConfig().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	bad := []TunerConfig{
		{High: 0.5, Low: 0.5, HighSamples: 3, LowSamples: 6, Cut: 0.6, Step: 0.1},
		{High: 0.8, Low: 0.5, HighSamples: 0, LowSamples: 6, Cut: 0.6, Step: 0.1},
		{High: 0.8, Low: 0.5, HighSamples: 3, LowSamples: 6, Cut: 1, Step: 0.1},
		{High: 0.8, Low: 0.5, HighSamples: 3, LowSamples: 6, Cut: 0.6, Step: 0},
	}
	for _, c := range bad {
		if c.Validate() == nil {
			t.Errorf("Validate(%+v) = nil, want an error", c)
		}
	}
	if tu := NewTuner(TunerConfig{}); tu.cfg != DefaultTunerConfig() {
		t.Fatalf("NewTuner(zero) uses %+v, want the defaults", tu.cfg)
	}
	if _, err := NewTunerLoop(TunerRunConfig{}); err == nil {
		t.Fatal("NewTunerLoop without callbacks: want an error")
	}
}

// fakeLeader leads while its flag is set.
type fakeLeader struct{ on atomic.Bool }

func (l *fakeLeader) Lead(context.Context) (bool, error) { return l.on.Load(), nil }

// tunerNode is one gateway node's tuner loop over the shared tier store.
type tunerNode struct {
	loop *TunerLoop
	load atomic.Value // float64
}

func newTunerNode(t *testing.T, leader Leader, store *tierStore, clock *manualClock) *tunerNode {
	t.Helper()
	n := &tunerNode{}
	n.load.Store(0.0)
	loop, err := NewTunerLoop(TunerRunConfig{
		Leader: leader,
		Sample: func(context.Context) (LoadSample, error) {
			// load as in-flight requests against a concurrency of 100.
			l := n.load.Load().(float64)
			return LoadSample{InFlight: int(l * 100), Concurrency: 100}, nil
		},
		Tiers: store.Tiers,
		Apply: store.Apply,
		Now:   clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	n.loop = loop
	return n
}

func (n *tunerNode) step(t *testing.T, load float64) []TuningEvent {
	t.Helper()
	n.load.Store(load)
	ev, err := n.loop.Step(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestTunerLoopOnlyLeaderDecides(t *testing.T) {
	clock := newManualClock()
	store := defaultTunedTiers()
	leadA, leadB := &fakeLeader{}, &fakeLeader{}
	leadA.on.Store(true)
	a := newTunerNode(t, leadA, store, clock)
	b := newTunerNode(t, leadB, store, clock)

	var fromA, fromB int
	for range 3 {
		fromA += len(a.step(t, 0.9))
		fromB += len(b.step(t, 0.9))
		clock.Advance(5 * time.Second)
	}
	if fromA != 1 || fromB != 0 {
		t.Fatalf("events from leader %d, from follower %d; want 1 and 0", fromA, fromB)
	}
	if got := store.effective("free"); got != 0.3 {
		t.Fatalf("free refill %v, want 0.3", got)
	}

	// Leadership moves to B in the middle of a calm run: A's run is dropped,
	// and B starts counting from its own first sample as leader.
	for range 4 {
		a.step(t, 0.1)
	}
	leadA.on.Store(false)
	leadB.on.Store(true)
	for i := range 5 {
		if ev := a.step(t, 0.1); ev != nil {
			t.Fatalf("former leader decided: %+v", ev)
		}
		if ev := b.step(t, 0.1); ev != nil {
			t.Fatalf("new leader's calm sample %d: events %+v, want none before 6", i+1, ev)
		}
	}
	if ev := b.step(t, 0.1); len(ev) != 1 || ev[0].From != 0.3 || ev[0].To != 0.35 {
		t.Fatalf("new leader's 6th calm sample: events %+v, want free 0.3 -> 0.35", ev)
	}
	if got := store.effective("premium"); got != 5 {
		t.Fatalf("premium refill %v, want 5", got)
	}
}

func TestTunerLoopErrors(t *testing.T) {
	clock := newManualClock()
	store := defaultTunedTiers()
	var failSample, failApply atomic.Bool
	loop, err := NewTunerLoop(TunerRunConfig{
		Sample: func(context.Context) (LoadSample, error) {
			if failSample.Load() {
				return LoadSample{}, errors.New("metrics unavailable")
			}
			return LoadSample{InFlight: 90, Concurrency: 100}, nil
		},
		Tiers: store.Tiers,
		Apply: func(ctx context.Context, ev []TuningEvent) error {
			if failApply.Load() {
				return errors.New("database down")
			}
			return store.Apply(ctx, ev)
		},
		Now: clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	step := func() ([]TuningEvent, error) { return loop.Step(ctx) }

	step()
	step()
	failSample.Store(true)
	if _, err := step(); err == nil {
		t.Fatal("failed sample: want an error")
	}
	failSample.Store(false)
	for i := range 2 {
		if ev, _ := step(); ev != nil {
			t.Fatalf("sample %d after a failed one: events %+v; the failure must break the run", i+1, ev)
		}
	}
	failApply.Store(true)
	if ev, err := step(); err == nil || ev != nil {
		t.Fatalf("failed apply: events %+v, err %v; want an error and no events", ev, err)
	}
	if got := store.effective("free"); got != 0.5 {
		t.Fatalf("free refill %v after a failed apply, want 0.5", got)
	}
}

func TestRunTunerStopsWithContext(t *testing.T) {
	store := defaultTunedTiers()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunTuner(ctx, TunerRunConfig{
			Interval: time.Millisecond,
			Sample: func(context.Context) (LoadSample, error) {
				return LoadSample{InFlight: 100, Concurrency: 100}, nil
			},
			Tiers: store.Tiers,
			Apply: func(ctx context.Context, ev []TuningEvent) error {
				defer cancel() // stop after the first decision
				return store.Apply(ctx, ev)
			},
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunTuner: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunTuner did not stop after its context ended")
	}
	if got := store.effective("free"); got != 0.3 {
		t.Fatalf("free refill %v, want 0.3 after the first decision", got)
	}
}

func TestRedisLeaseRenewAndTakeover(t *testing.T) {
	c, prefix := windowRedis(t)
	ctx := context.Background()
	key := prefix + "tuner-lease"
	a := NewRedisLease(c, key, "node-a", 10*time.Second)
	b := NewRedisLease(c, key, "node-b", 10*time.Second)
	lead := func(l *RedisLease) bool {
		t.Helper()
		ok, err := l.Lead(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	if !lead(a) {
		t.Fatal("a free lease was not acquired")
	}
	if lead(b) {
		t.Fatal("b leads while a holds the lease")
	}
	c.PExpire(ctx, key, 500*time.Millisecond)
	if !lead(a) {
		t.Fatal("a could not renew its own lease")
	}
	if ttl := c.PTTL(ctx, key).Val(); ttl < 9*time.Second {
		t.Fatalf("lease TTL %v after renewal, want about 10s", ttl)
	}

	// a stops renewing; expire the lease now instead of waiting for it.
	c.PExpireAt(ctx, key, time.Unix(1, 0))
	if !lead(b) {
		t.Fatal("b did not take over an expired lease")
	}
	if lead(a) {
		t.Fatal("a still leads after b took over")
	}
	if got := c.Get(ctx, key).Val(); got != "node-b" {
		t.Fatalf("lease holder %q, want node-b", got)
	}

	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !lead(b) {
		t.Fatal("a's Release dropped b's lease")
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !lead(a) {
		t.Fatal("a could not take the lease b released")
	}
}

func TestTunerLoopRedisLeaseTwoNodes(t *testing.T) {
	c, prefix := windowRedis(t)
	ctx := context.Background()
	key := prefix + "tuner-lease"
	clock := newManualClock()
	store := defaultTunedTiers()
	a := newTunerNode(t, NewRedisLease(c, key, "node-a", 15*time.Second), store, clock)
	b := newTunerNode(t, NewRedisLease(c, key, "node-b", 15*time.Second), store, clock)

	var fromA, fromB int
	for range 6 {
		fromA += len(a.step(t, 0.9))
		fromB += len(b.step(t, 0.9))
	}
	if fromA != 1 || fromB != 0 {
		t.Fatalf("events from a (leader) %d, from b %d; want 1 and 0", fromA, fromB)
	}

	// a dies: its lease runs out and b takes over the calm phase.
	c.PExpireAt(ctx, key, time.Unix(1, 0))
	var events []TuningEvent
	for range 6 {
		events = append(events, b.step(t, 0.2)...)
	}
	if len(events) != 1 || events[0].From != 0.3 || events[0].To != 0.35 {
		t.Fatalf("b after takeover: events %+v, want free 0.3 -> 0.35", events)
	}
	if ev := a.step(t, 0.2); ev != nil {
		t.Fatalf("a decided after losing the lease: %+v", ev)
	}
	if got := store.effective("premium"); got != 5 {
		t.Fatalf("premium refill %v, want 5", got)
	}
}
