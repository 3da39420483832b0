package quota

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// chargeCounter counts the calls that reach the limiter behind a Prefetch.
type chargeCounter struct {
	Limiter
	charges atomic.Int64
	charged atomic.Int64 // the weights of Allow's charges
}

func (c *chargeCounter) Allow(ctx context.Context, key string, p Params, weight int64) (Decision, error) {
	c.charges.Add(1)
	c.charged.Add(weight)
	return c.Limiter.Allow(ctx, key, p, weight)
}

func (c *chargeCounter) AllowBoth(ctx context.Context, a, b Charge) (Decision, Decision, error) {
	c.charges.Add(1)
	return c.Limiter.AllowBoth(ctx, a, b)
}

func prefetchAllow(t testing.TB, l Limiter, key string, p Params, weight int64) Decision {
	t.Helper()
	d, err := l.Allow(context.Background(), key, p, weight)
	if err != nil {
		t.Fatalf("Allow(%q): %v", key, err)
	}
	return d
}

// TestPrefetchFarFromEmpty: a big bucket is charged for many requests at
// once, in lots that double while they are spent at once, and each
// decision reports the bucket as if every request had been charged on its
// own.
func TestPrefetchFarFromEmpty(t *testing.T) {
	clk := newFakeClock()
	shared := &chargeCounter{Limiter: NewMemory(clk.Now)}
	f := NewPrefetch(shared, clk.Now)
	p := Params{Capacity: 1_000_000, RefillPerSec: 1}
	for i := int64(1); i <= 100; i++ {
		d := prefetchAllow(t, f, "big", p, 1)
		if !d.Allowed || d.Remaining != p.Capacity-i {
			t.Fatalf("request %d: %+v, want allowed with %d left", i, d, p.Capacity-i)
		}
	}
	// Requests 1 (alone), 2 (32), 34 (64) and 98 (128) charge.
	if got := shared.charges.Load(); got != 4 {
		t.Fatalf("%d charges for 100 requests, want 4", got)
	}
}

// TestPrefetchNearEmpty: a bucket below prefetchFloor — every default tier
// — is charged once per request, and admits exactly its capacity.
func TestPrefetchNearEmpty(t *testing.T) {
	clk := newFakeClock()
	shared := &chargeCounter{Limiter: NewMemory(clk.Now)}
	f := NewPrefetch(shared, clk.Now)
	p := Params{Capacity: 200, RefillPerSec: 5} // premium
	admitted := 0
	for range 250 {
		if prefetchAllow(t, f, "premium", p, 1).Allowed {
			admitted++
		}
	}
	if admitted != 200 || shared.charges.Load() != 250 {
		t.Fatalf("admitted %d with %d charges, want 200 with one charge per request (250)", admitted, shared.charges.Load())
	}
}

// TestPrefetchEnds: what a node holds is dropped after prefetchFor, when
// the bucket's Params change, and when the bucket is charged a debt.
func TestPrefetchEnds(t *testing.T) {
	clk := newFakeClock()
	shared := &chargeCounter{Limiter: NewMemory(clk.Now)}
	f := NewPrefetch(shared, clk.Now)
	p := Params{Capacity: 1_000_000, RefillPerSec: 1000}
	prefetchAllow(t, f, "k", p, 1)
	prefetchAllow(t, f, "k", p, 1) // charges 32
	step := func(what string, want int64) {
		t.Helper()
		before := shared.charges.Load()
		prefetchAllow(t, f, "k", p, 1)
		if got := shared.charges.Load() - before; got != want {
			t.Fatalf("%s: %d charges, want %d", what, got, want)
		}
	}
	step("held", 0)
	// After an expiry a request goes alone (what was left then says
	// nothing now), and the next one prefetches again; after a change of
	// Params what is held is dropped and the next charge prefetches anew.
	clk.Advance(prefetchFor)
	step("expired", 1)
	step("sized again", 1)
	step("held again", 0)
	p.RefillPerSec = 500 // the auto-tuner's new refill
	step("new params", 1)
	step("held under the new params", 0)
	if err := f.Adjust(context.Background(), "k", p, 10); err != nil {
		t.Fatal(err)
	}
	step("after a debt", 1)
}

// TestPrefetchBoth: AllowBoth holds both buckets; a request heavier than
// what is held of either is charged.
func TestPrefetchBoth(t *testing.T) {
	clk := newFakeClock()
	shared := &chargeCounter{Limiter: NewMemory(clk.Now)}
	f := NewPrefetch(shared, clk.Now)
	req := Charge{Key: "r", Params: Params{Capacity: 100_000, RefillPerSec: 1000}, Weight: 1}
	tok := Charge{Key: "t", Params: Params{Capacity: 10_000_000, RefillPerSec: 100_000}, Weight: 100}
	both := func() (Decision, Decision) {
		t.Helper()
		da, db, err := f.AllowBoth(context.Background(), req, tok)
		if err != nil || !da.Allowed || !db.Allowed {
			t.Fatalf("AllowBoth: %+v %+v %v", da, db, err)
		}
		return da, db
	}
	both()
	both() // charges 32 of each
	before := shared.charges.Load()
	_, db := both()
	if shared.charges.Load() != before || db.Remaining != tok.Params.Capacity-3*100 {
		t.Fatalf("third request: %d charges, tokens left %d; want held, %d left",
			shared.charges.Load()-before, db.Remaining, tok.Params.Capacity-300)
	}
	tok.Weight = 100 * 40 // more than the 29 requests of 100 still held
	both()
	if shared.charges.Load() != before+1 {
		t.Fatal("a request heavier than what is held was not charged")
	}
}

// TestPrefetchNeverOverAdmits: three nodes, each with its own Prefetch on
// one shared bucket, 16 goroutines each, until the bucket is empty: never
// more admitted than the bucket holds, and at most what the nodes still
// hold fewer.
func TestPrefetchNeverOverAdmits(t *testing.T) {
	clk := newFakeClock()
	shared := NewMemory(clk.Now)
	testPrefetchNeverOverAdmits(t, shared, clk)
}

func TestPrefetchNeverOverAdmitsRedis(t *testing.T) {
	clk := newFakeClock()
	shared, _ := rlSetup(t, clk)
	testPrefetchNeverOverAdmits(t, shared, clk)
}

func testPrefetchNeverOverAdmits(t *testing.T, shared Limiter, clk *fakeClock) {
	const capacity = 5000
	p := Params{Capacity: capacity, RefillPerSec: 0.001}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 3 {
		node := NewPrefetch(shared, clk.Now)
		for range 16 {
			wg.Go(func() {
				for {
					d, err := node.Allow(context.Background(), "k", p, 1)
					if err != nil {
						t.Error(err)
						return
					}
					if !d.Allowed {
						return
					}
					admitted.Add(1)
				}
			})
		}
	}
	wg.Wait()
	got := admitted.Load()
	if got > capacity || got < capacity-3*prefetchMax {
		t.Fatalf("admitted %d of a bucket of %d, want between %d and %d", got, capacity, capacity-3*prefetchMax, capacity)
	}
}

// TestPrefetchRoundTrips: on the Redis limiter, 1,000 requests a second on
// a big bucket cost a round trip per quarter second once the lots have
// grown (1, then lots of 32, 64, 128 and 256 each), not one per request.
func TestPrefetchRoundTrips(t *testing.T) {
	counter := newRLCounter()
	clk := newFakeClock()
	shared, _ := rlSetup(t, clk, counter)
	f := NewPrefetch(shared, clk.Now)
	p := Params{Capacity: 1_000_000, RefillPerSec: 1_000_000}
	for range 2000 {
		if !prefetchAllow(t, f, "k", p, 1).Allowed {
			t.Fatal("refused")
		}
		clk.Advance(time.Millisecond)
	}
	// 1 + 32 + 64 + 128 = 225 requests in 4 charges, the other 1,775 in
	// lots of 256.
	if n, want := rlTotal(counter.counts()), 4+(2000-225+255)/256; n != want {
		t.Fatalf("%d round trips for 2,000 requests at 1,000/s (%v), want %d", n, counter.counts(), want)
	}
}

// TestPrefetchLotsFollowDemand: a slow client on a big bucket is charged
// about what it spends, not a lot it leaves to expire every second: its
// lots shrink to what it spends before they expire, and grow again when it
// speeds up.
func TestPrefetchLotsFollowDemand(t *testing.T) {
	clk := newFakeClock()
	shared := &chargeCounter{Limiter: NewMemory(clk.Now)}
	f := NewPrefetch(shared, clk.Now)
	p := Params{Capacity: 1_000_000, RefillPerSec: 1_000}
	admitted := int64(0)
	run := func(requests int, every time.Duration) {
		for range requests {
			if prefetchAllow(t, f, "k", p, 1).Allowed {
				admitted++
			}
			clk.Advance(every)
		}
	}
	run(600, 100*time.Millisecond) // 10 a second for a minute
	// The first lot (32) expires with 22 unspent, the next (16) with 6;
	// from then on lots of 8 are spent before they expire, and the last
	// one is still held (7) when the minute ends.
	if unspent := shared.charged.Load() - admitted; unspent > 40 {
		t.Fatalf("at 10 requests a second for a minute, %d of %d charged went unspent, want at most 40", unspent, shared.charged.Load())
	}
	before := shared.charges.Load()
	run(2000, time.Millisecond) // then 1,000 a second
	if n := shared.charges.Load() - before; n > 20 {
		t.Fatalf("%d charges for 2,000 requests at 1,000/s after a slow minute, want the lots grown back (at most 20)", n)
	}
}

// TestPrefetchForgetsIdleBuckets: entries of buckets no longer used are
// swept once expired, so the node holds the busy buckets, not every big
// bucket it ever served.
func TestPrefetchForgetsIdleBuckets(t *testing.T) {
	clk := newFakeClock()
	f := NewPrefetch(NewMemory(clk.Now), clk.Now)
	p := Params{Capacity: 1_000_000, RefillPerSec: 1}
	entries := func() (n int) {
		for i := range f.shards {
			n += len(f.shards[i].m)
		}
		return n
	}
	const keys = 20_000
	for i := range keys {
		prefetchAllow(t, f, "old:"+strconv.Itoa(i), p, 1)
	}
	if got := entries(); got != keys {
		t.Fatalf("%d entries after %d big buckets, want one each", got, keys)
	}
	clk.Advance(prefetchFor)
	for i := range keys {
		prefetchAllow(t, f, "new:"+strconv.Itoa(i), p, 1)
	}
	if got := entries(); got >= keys+numShards*prefetchSweep {
		t.Fatalf("%d entries: the expired ones were not swept", got)
	}
}

// TestPrefetchAfterCapacityDrops: a tier cut from a big bucket to a small
// one is charged one request at a time at once, never refused as heavier
// than the bucket.
func TestPrefetchAfterCapacityDrops(t *testing.T) {
	clk := newFakeClock()
	f := NewPrefetch(NewMemory(clk.Now), clk.Now)
	big := Params{Capacity: 100_000, RefillPerSec: 1}
	prefetchAllow(t, f, "k", big, 1)
	prefetchAllow(t, f, "k", big, 1) // holds 31
	small := Params{Capacity: 20, RefillPerSec: 1}
	for i := range 3 {
		if _, err := f.Allow(context.Background(), "k", small, 1); err != nil {
			t.Fatalf("request %d after the cut: %v", i, err)
		}
	}
}

// TestPrefetchDebtDuringACharge: a debt that lands while a charge for many
// is on its way leaves the node holding nothing: it stops at once.
func TestPrefetchDebtDuringACharge(t *testing.T) {
	clk := newFakeClock()
	shared := &debtDuringCharge{Limiter: NewMemory(clk.Now)}
	f := NewPrefetch(shared, clk.Now)
	shared.f = f
	p := Params{Capacity: 100_000, RefillPerSec: 1}
	prefetchAllow(t, f, "k", p, 1) // sizes
	shared.armed = true
	prefetchAllow(t, f, "k", p, 1) // charges 32; a drain lands meanwhile
	if h := f.shard("k").m["k"]; h != nil && h.a > 0 {
		t.Fatalf("holds %d requests after a debt during the charge, want none", h.a)
	}
}

// debtDuringCharge charges a debt to the bucket (as a drain after a 429
// would) inside the next Allow, once armed.
type debtDuringCharge struct {
	Limiter
	f     *Prefetch
	armed bool
}

func (d *debtDuringCharge) Allow(ctx context.Context, key string, p Params, weight int64) (Decision, error) {
	dec, err := d.Limiter.Allow(ctx, key, p, weight)
	if d.armed {
		d.armed = false
		_ = d.f.Adjust(ctx, key, p, p.Capacity)
	}
	return dec, err
}

// TestPrefetchWaitsForACharge: a request that finds the node short while
// a charge for many is on its way waits for it and takes its share, rather
// than make a round trip of its own.
func TestPrefetchWaitsForACharge(t *testing.T) {
	clk := newFakeClock()
	shared := &chargeCounter{Limiter: NewMemory(clk.Now)}
	f := NewPrefetch(shared, clk.Now)
	p := Params{Capacity: 1_000_000, RefillPerSec: 1}
	prefetchAllow(t, f, "k", p, 1) // sizes
	sh := f.shard("k")
	landed := make(chan struct{})
	sh.mu.Lock()
	sh.m["k"].landed = landed // as if another request's charge for many were on its way
	sh.mu.Unlock()
	before := shared.charges.Load()
	done := make(chan Decision)
	go func() { done <- prefetchAllow(t, f, "k", p, 1) }()
	select {
	case d := <-done:
		t.Fatalf("admitted (%+v) while the charge was on its way, want it waiting", d)
	case <-time.After(50 * time.Millisecond):
	}
	sh.mu.Lock() // the charge lands: 31 held
	sh.m["k"].a, sh.m["k"].landed = 31, nil
	sh.mu.Unlock()
	close(landed)
	if d := <-done; !d.Allowed || shared.charges.Load() != before {
		t.Fatalf("%+v after %d charges of its own, want admitted from the landed charge", d, shared.charges.Load()-before)
	}
}

// chargeLog records the weight of each Allow that reaches the limiter.
type chargeLog struct {
	Limiter
	mu      sync.Mutex
	weights []int64
}

func (c *chargeLog) Allow(ctx context.Context, key string, p Params, weight int64) (Decision, error) {
	c.mu.Lock()
	c.weights = append(c.weights, weight)
	c.mu.Unlock()
	return c.Limiter.Allow(ctx, key, p, weight)
}

// TestPrefetchTakesAShareAtMost: however fast the node spends its lots, a
// charge never takes more than 1/prefetchShare of what the bucket had left,
// so a bucket of 2,000 is not held back by lots of prefetchMax.
func TestPrefetchTakesAShareAtMost(t *testing.T) {
	clk := newFakeClock()
	shared := &chargeLog{Limiter: NewMemory(clk.Now)}
	f := NewPrefetch(shared, clk.Now)
	p := Params{Capacity: 2000, RefillPerSec: 0.001}
	for range 1000 {
		prefetchAllow(t, f, "k", p, 1) // no time passes: every lot is spent at once
	}
	left := p.Capacity
	for i, w := range shared.weights {
		if w > 1 && w > left/prefetchShare {
			t.Fatalf("charge %d took %d with %d left, more than 1/%d (%v)", i, w, left, prefetchShare, shared.weights)
		}
		left -= w
	}
	if len(shared.weights) < 3 || slices.Max(shared.weights) < 64 {
		t.Fatalf("charges %v: the lots did not grow", shared.weights)
	}
}
