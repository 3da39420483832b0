package quota

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testredis"
)

// adjustment is one Adjust that reached the limiter behind a Prefetch.
type adjustment struct {
	key   string
	p     Params
	delta int64
}

// adjustLog records the Adjusts that reach the limiter behind a Prefetch:
// its give-backs, when the limiter is not a refunder.
type adjustLog struct {
	Limiter
	mu   sync.Mutex
	adjs []adjustment
}

func (l *adjustLog) Adjust(ctx context.Context, key string, p Params, delta int64) error {
	l.mu.Lock()
	l.adjs = append(l.adjs, adjustment{key, p, delta})
	l.mu.Unlock()
	return l.Limiter.Adjust(ctx, key, p, delta)
}

func (l *adjustLog) taken() []adjustment {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.adjs
	l.adjs = nil
	return out
}

// sweepAndSend is one turn of Run at the injected clock's now.
func sweepAndSend(t *testing.T, f *Prefetch) {
	t.Helper()
	f.sweep(f.now())
	if err := f.sendBack(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// left is what the bucket has left, read by charging one unit and giving it
// back.
func left(t *testing.T, l Limiter, key string, p Params) int64 {
	t.Helper()
	d := prefetchAllow(t, l, key, p, 1)
	if !d.Allowed {
		return d.Remaining
	}
	if err := l.Adjust(context.Background(), key, p, -1); err != nil {
		t.Fatal(err)
	}
	return d.Remaining + 1
}

// TestPrefetchGivesBackAnExpiredLot: what is left of a lot when it expires
// goes back to the shared bucket exactly once, whether the sweep finds it
// or a request after the expiry does first, and the bucket then has left
// exactly what was not admitted.
func TestPrefetchGivesBackAnExpiredLot(t *testing.T) {
	for _, first := range []string{"the sweep", "a request"} {
		t.Run(first, func(t *testing.T) {
			clk := newFakeClock()
			mem := NewMemory(clk.Now)
			shared := &adjustLog{Limiter: mem}
			f := NewPrefetch(shared, clk.Now)
			p := Params{Capacity: 10_000, RefillPerSec: 0.001}
			for range 7 {
				prefetchAllow(t, f, "k", p, 1) // 1 alone, then a lot of 32: 26 held
			}
			sweepAndSend(t, f)
			if adjs := shared.taken(); len(adjs) != 0 {
				t.Fatalf("gave back %v before the lot expired", adjs)
			}
			clk.Advance(prefetchFor)
			if first == "a request" {
				prefetchAllow(t, f, "k", p, 1) // charged alone; the entry it replaces owes 26
			}
			sweepAndSend(t, f)
			sweepAndSend(t, f)
			clk.Advance(prefetchFor)
			sweepAndSend(t, f)
			adjs := shared.taken()
			if len(adjs) != 1 || adjs[0] != (adjustment{"k", p, -26}) {
				t.Fatalf("gave back %v, want 26 of k once", adjs)
			}
			admitted := int64(7)
			if first == "a request" {
				admitted++
			}
			if got := left(t, mem, "k", p); got != p.Capacity-admitted || f.GivenBack() != 26 {
				t.Fatalf("the bucket has %d left after %d admitted (%d given back), want %d", got, admitted, f.GivenBack(), p.Capacity-admitted)
			}
		})
	}
}

// TestPrefetchGivesBackOnFlush: a node that stops gives back everything it
// holds, of single buckets and of pairs, and after that charges each
// request on its own.
func TestPrefetchGivesBackOnFlush(t *testing.T) {
	clk := newFakeClock()
	mem := NewMemory(clk.Now)
	shared := &chargeCounter{Limiter: mem}
	f := NewPrefetch(shared, clk.Now)
	p := Params{Capacity: 10_000, RefillPerSec: 0.001}
	tpm := Params{Capacity: 1_000_000, RefillPerSec: 0.001}
	for range 10 {
		prefetchAllow(t, f, "a", p, 1)
		prefetchAllow(t, f, "b", p, 3)
		if _, _, err := f.AllowBoth(context.Background(), Charge{"c", p, 1}, Charge{"c|tpm", tpm, 50}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, b := range []struct {
		key      string
		p        Params
		admitted int64
	}{{"a", p, 10}, {"b", p, 30}, {"c", p, 10}, {"c|tpm", tpm, 500}} {
		if got := left(t, mem, b.key, b.p); got != b.p.Capacity-b.admitted {
			t.Errorf("%s: %d left after the flush, want %d", b.key, got, b.p.Capacity-b.admitted)
		}
	}
	before := shared.charges.Load()
	for range 5 {
		prefetchAllow(t, f, "a", p, 1)
	}
	if n := shared.charges.Load() - before; n != 5 {
		t.Fatalf("%d charges for 5 requests after the flush, want one each", n)
	}
}

// TestPrefetchGivesBackWhatLandsAfterFlush: a charge for many on its way
// when the node flushes gives back its lot as it lands.
func TestPrefetchGivesBackWhatLandsAfterFlush(t *testing.T) {
	clk := newFakeClock()
	mem := NewMemory(clk.Now)
	shared := &heldCharge{Limiter: mem, release: make(chan struct{}), charging: make(chan struct{})}
	f := NewPrefetch(shared, clk.Now)
	p := Params{Capacity: 10_000, RefillPerSec: 0.001}
	prefetchAllow(t, f, "k", p, 1) // sizes
	shared.hold.Store(true)
	done := make(chan error)
	go func() { // charges 32, held up
		d, err := f.Allow(context.Background(), "k", p, 1)
		if err == nil && !d.Allowed {
			t.Errorf("refused: %+v", d)
		}
		done <- err
	}()
	<-shared.charging
	if err := f.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(shared.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := left(t, mem, "k", p); got != p.Capacity-2 {
		t.Fatalf("%d left after 2 admitted and a flush, want %d: the lot that landed after the flush was kept", got, p.Capacity-2)
	}
}

// heldCharge holds up the next charge for many until release, once hold is
// set, saying so on charging.
type heldCharge struct {
	Limiter
	hold     atomic.Bool
	charging chan struct{}
	release  chan struct{}
}

func (h *heldCharge) Allow(ctx context.Context, key string, p Params, weight int64) (Decision, error) {
	if weight > 1 && h.hold.CompareAndSwap(true, false) {
		close(h.charging)
		<-h.release
	}
	return h.Limiter.Allow(ctx, key, p, weight)
}

// TestPrefetchGivesBackUnderTheOldParams: a change of Params gives back
// what was held under the Params it was charged under, which undoes the
// charge's time exactly, not under the new ones (a refill cut to a tenth
// would give back ten times what was charged).
func TestPrefetchGivesBackUnderTheOldParams(t *testing.T) {
	clk := newFakeClock()
	mem, ref := NewMemory(clk.Now), NewMemory(clk.Now)
	shared := &adjustLog{Limiter: mem}
	f := NewPrefetch(shared, clk.Now)
	old := Params{Capacity: 100_000, RefillPerSec: 0.01}
	cut := Params{Capacity: 100_000, RefillPerSec: 0.001}
	for _, p := range []Params{old, old, cut} {
		prefetchAllow(t, f, "k", p, 1) // 1, then 32 under old; a lot of 64 under cut
		prefetchAllow(t, ref, "k", p, 1)
	}
	sweepAndSend(t, f)
	if adjs := shared.taken(); len(adjs) != 1 || adjs[0] != (adjustment{"k", old, -31}) {
		t.Fatalf("gave back %v, want the 31 held under the old Params", adjs)
	}
	if err := f.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if adjs := shared.taken(); len(adjs) != 1 || adjs[0] != (adjustment{"k", cut, -63}) {
		t.Fatalf("the flush gave back %v, want 63 under the new Params", adjs)
	}
	// The bucket is where the three requests alone would have left it.
	if got, want := left(t, mem, "k", cut), left(t, ref, "k", cut); got != want {
		t.Fatalf("%d left, want %d", got, want)
	}
}

// TestPrefetchDebtGivesNothingBack: a debt drops what the node holds of
// the bucket and what it had yet to give back, and a charge for many on
// its way during the debt keeps nothing to give back either.
func TestPrefetchDebtGivesNothingBack(t *testing.T) {
	clk := newFakeClock()
	mem := NewMemory(clk.Now)
	shared := &adjustLog{Limiter: mem}
	f := NewPrefetch(shared, clk.Now)
	p := Params{Capacity: 100_000, RefillPerSec: 0.001}
	prefetchAllow(t, f, "queued", p, 1)
	prefetchAllow(t, f, "queued", p, 1) // holds 31
	clk.Advance(prefetchFor)
	f.sweep(clk.Now()) // 31 to give back
	prefetchAllow(t, f, "held", p, 1)
	prefetchAllow(t, f, "held", p, 1) // holds 31
	for _, k := range []string{"queued", "held"} {
		if err := f.Adjust(context.Background(), k, p, 1000); err != nil {
			t.Fatal(err)
		}
	}
	shared.taken()
	if err := f.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if adjs := shared.taken(); len(adjs) != 0 {
		t.Fatalf("gave back %v after debts on both buckets, want nothing", adjs)
	}

	g := NewPrefetch(&debtDuringCharge{Limiter: shared}, clk.Now)
	g.next.(*debtDuringCharge).f = g
	prefetchAllow(t, g, "k", p, 1)
	g.next.(*debtDuringCharge).armed = true
	prefetchAllow(t, g, "k", p, 1) // charges 32; a drain lands meanwhile
	shared.taken()
	if err := g.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if adjs := shared.taken(); len(adjs) != 0 {
		t.Fatalf("gave back %v of a lot a debt dropped on its way, want nothing", adjs)
	}
}

// TestPrefetchGivesBackExactly: two nodes, each its own Prefetch on one
// shared bucket, 16 goroutines each spending until the bucket stays empty,
// while the clock runs and each node's sweep gives back what expires. No
// more is ever admitted than the bucket holds, and once the nodes have
// flushed, what was admitted and what the bucket has left add up to it
// exactly: nothing was spent twice, given back twice, or lost.
func TestPrefetchGivesBackExactly(t *testing.T) {
	clk := newFakeClock()
	mem := NewMemory(clk.Now)
	testPrefetchGivesBackExactly(t, mem, mem, clk)
}

func TestPrefetchGivesBackExactlyRedis(t *testing.T) {
	clk := newFakeClock()
	shared, _ := rlSetup(t, clk)
	if err := shared.Warm(context.Background(), 4); err != nil {
		t.Fatal(err)
	}
	testPrefetchGivesBackExactly(t, shared, shared, clk)
}

func testPrefetchGivesBackExactly(t *testing.T, shared, reader Limiter, clk *fakeClock) {
	const capacity = 20_000
	// Not a unit refilled however far the clock runs in the test.
	p := Params{Capacity: capacity, RefillPerSec: 0.00001}
	var admitted atomic.Int64
	var workers, sweeper sync.WaitGroup
	stop := make(chan struct{})
	nodes := []*Prefetch{NewPrefetch(shared, clk.Now), NewPrefetch(shared, clk.Now)}
	for _, node := range nodes {
		for range 16 {
			workers.Go(func() {
				refused := 0
				for i := 0; refused < 50; i++ {
					d, err := node.Allow(context.Background(), "k", p, 1)
					if err != nil {
						t.Error(err)
						return
					}
					if !d.Allowed {
						refused++
						continue
					}
					refused = 0
					admitted.Add(1)
					if i%16 == 0 {
						time.Sleep(100 * time.Microsecond) // lots expire unspent meanwhile
					}
				}
			})
		}
	}
	sweeper.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Microsecond):
			}
			clk.Advance(prefetchFor) // what is held now expires
			for _, node := range nodes {
				node.sweep(clk.Now())
				if err := node.sendBack(context.Background()); err != nil {
					t.Error(err)
				}
			}
		}
	})
	workers.Wait()
	close(stop)
	sweeper.Wait()
	given := int64(0)
	for _, node := range nodes {
		if err := node.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		given += node.GivenBack()
	}
	got, rest := admitted.Load(), left(t, reader, "k", p)
	t.Logf("admitted %d, %d left, %d given back", got, rest, given)
	if got > capacity || got+rest != capacity {
		t.Fatalf("admitted %d and %d left of a bucket of %d (%d given back), want them to add up to it", got, rest, capacity, given)
	}
	if given == 0 {
		t.Fatal("nothing was given back: the test did not exercise it")
	}
}

// TestPrefetchGivesNothingBackAfterRedisRestarts: what a node held when
// Redis restarted (and lost every bucket) is not given back to the
// buckets that came after, which would hand it out twice; what it is
// charged after that is given back as before.
func TestPrefetchGivesNothingBackAfterRedisRestarts(t *testing.T) {
	srv := testredis.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	clk := newFakeClock()
	r := NewRedis(c, "restart:", WithRedisClock(clk.Now))
	ctx := context.Background()
	if err := r.Warm(ctx, 1); err != nil {
		t.Fatal(err)
	}
	f := NewPrefetch(r, clk.Now)
	p := Params{Capacity: 10_000, RefillPerSec: 0.001}
	prefetchAllow(t, f, "k", p, 1)
	prefetchAllow(t, f, "k", p, 1) // holds 31
	srv.Kill(t)
	srv.Restart(t)
	// The new server's bucket is full: 100 of it spent elsewhere.
	for deadline := time.Now().Add(5 * time.Second); ; {
		if _, err := r.Allow(ctx, "k", p, 100); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := left(t, r, "k", p); got != p.Capacity-100 || f.GivenBack() != 0 || f.NotGivenBack() != 31 {
		t.Fatalf("%d left after 100 spent since the restart (%d given back, %d not), want %d, 0 and 31: what was held before it went back",
			got, f.GivenBack(), f.NotGivenBack(), p.Capacity-100)
	}
	g := NewPrefetch(r, clk.Now)
	prefetchAllow(t, g, "k", p, 1)
	prefetchAllow(t, g, "k", p, 1) // holds 31
	if err := g.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := left(t, r, "k", p); got != p.Capacity-102 || g.GivenBack() != 31 || g.NotGivenBack() != 0 {
		t.Fatalf("%d left, %d given back, %d not; want %d, 31 and 0", got, g.GivenBack(), g.NotGivenBack(), p.Capacity-102)
	}
}

// failingAdjusts is a limiter whose Adjusts fail, as a give-back to a
// Redis that is down or too slow does.
type failingAdjusts struct{ Limiter }

func (failingAdjusts) Adjust(context.Context, string, Params, int64) error {
	return errors.New("connection refused")
}

// TestPrefetchCountsWhatItCouldNotGiveBack: a give-back that fails is not
// tried again (lost allowance is the safe side), and what it held is
// counted as not given back, for the operator's metric.
func TestPrefetchCountsWhatItCouldNotGiveBack(t *testing.T) {
	clk := newFakeClock()
	f := NewPrefetch(failingAdjusts{NewMemory(clk.Now)}, clk.Now)
	p := Params{Capacity: 10_000, RefillPerSec: 0.001}
	for range 7 {
		prefetchAllow(t, f, "k", p, 1) // 1 alone, then a lot of 32: 26 held
	}
	clk.Advance(prefetchFor)
	f.sweep(f.now())
	err := f.sendBack(context.Background())
	if err == nil || !strings.Contains(err.Error(), "giving back 26") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("sendBack: %v, want the failure of giving back 26", err)
	}
	if f.GivenBack() != 0 || f.NotGivenBack() != 26 {
		t.Fatalf("%d given back, %d not; want 0 and 26", f.GivenBack(), f.NotGivenBack())
	}
	if err := f.sendBack(context.Background()); err != nil || f.NotGivenBack() != 26 {
		t.Fatalf("a second send: %v, %d not given back; want nothing tried again", err, f.NotGivenBack())
	}
}
