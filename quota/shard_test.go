package quota

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestConcurrentOneKey(t *testing.T) {
	tests := []struct {
		p     Params
		calls int // per goroutine
	}{
		{free, 20},
		{premium, 20},
		// Many admissions rather than mostly rejections, so that a lost
		// update between load and store would show as extra admissions.
		{Params{Capacity: 200000, RefillPerSec: 1}, 2000},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.p.Capacity), func(t *testing.T) {
			clk := newFakeClock() // frozen: no refill during the test
			m := NewMemory(clk.Now)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 200 {
				wg.Go(func() {
					<-start
					for range tt.calls {
						d, err := m.Allow(context.Background(), "hot", tt.p, 1)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							admitted.Add(1)
						}
					}
				})
			}
			close(start)
			wg.Wait()
			if got := admitted.Load(); got != tt.p.Capacity {
				t.Fatalf("admitted %d, want exactly %d", got, tt.p.Capacity)
			}
		})
	}
}

// TestConcurrentAllowBoth charges two buckets from 200 goroutines on a frozen
// clock. Neither bucket may admit more than it holds, and once the refunds
// of the pairs rejected by the second bucket are in, each must hold exactly
// its capacity minus the admitted pairs' charges: a lost or doubled refund
// would show.
func TestConcurrentAllowBoth(t *testing.T) {
	rate := Params{Capacity: 150, RefillPerSec: 1}
	tokens := Params{Capacity: 700, RefillPerSec: 1}
	tests := []struct {
		name string
		a, b Charge
		want int64 // pairs admitted
	}{
		// The tokens bucket runs out first: 100 pairs, and every later
		// pair is refunded its rate token.
		{"second bucket limits", Charge{"rate", rate, 1}, Charge{"tpm", tokens, 7}, 100},
		// The rate bucket runs out first: the tokens bucket never rejects.
		{"first bucket limits", Charge{"rate", rate, 1}, Charge{"tpm", tokens, 4}, 150},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			m := NewMemory(clk.Now)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 200 {
				wg.Go(func() {
					<-start
					for range 10 {
						da, db, err := m.AllowBoth(context.Background(), tt.a, tt.b)
						if err != nil {
							t.Error(err)
							return
						}
						if da.Allowed != db.Allowed {
							t.Errorf("one bucket admitted, the other not: %+v %+v", da, db)
						}
						if da.Allowed {
							admitted.Add(1)
						}
					}
				})
			}
			close(start)
			wg.Wait()
			n := admitted.Load()
			if n != tt.want {
				t.Fatalf("admitted %d pairs, want %d", n, tt.want)
			}
			if got, want := drain(t, m, tt.a.Key, tt.a.Params), tt.a.Params.Capacity-n*tt.a.Weight; got != want {
				t.Errorf("bucket %s has %d tokens left, want %d", tt.a.Key, got, want)
			}
			if got, want := drain(t, m, tt.b.Key, tt.b.Params), tt.b.Params.Capacity-n*tt.b.Weight; got != want {
				t.Errorf("bucket %s has %d tokens left, want %d", tt.b.Key, got, want)
			}
		})
	}
}

// TestSweepRacesAdmission lets sweeps retire buckets while other goroutines
// are spending from them, mainly for -race. Each phase freezes the clock with
// every hot bucket full (so sweepable) and sends each hot key many requests
// weighing its whole capacity: exactly one per key may pass. The interleaving
// that would let a second one through (spending on a bucket already swept) is
// rare here, so TestSweptBucketIsRetried pins it down deterministically.
func TestSweepRacesAdmission(t *testing.T) {
	clk := newFakeClock()
	m := NewMemory(clk.Now)
	hotParams := Params{Capacity: 3, RefillPerSec: 1}
	const phases, hotKeys, spenders, inserters, insertsPer = 30, 16, 16, 4, 1000
	for phase := range phases {
		clk.Advance(time.Minute) // every bucket is full again, hence sweepable
		var admitted [hotKeys]atomic.Int64
		var wg sync.WaitGroup
		for range spenders {
			wg.Go(func() {
				for k := range hotKeys {
					if allow(t, m, fmt.Sprintf("hot-%d", k), hotParams, 3).Allowed {
						admitted[k].Add(1)
					}
				}
			})
		}
		for i := range inserters {
			wg.Go(func() { // new keys make shards grow, which triggers sweeps
				for j := range insertsPer {
					allow(t, m, fmt.Sprintf("new-%d-%d-%d", phase, i, j), free, 1)
				}
			})
		}
		stop := make(chan struct{})
		swept := make(chan struct{})
		go func() { // and explicit sweeps of every shard, all the time
			defer close(swept)
			for {
				select {
				case <-stop:
					return
				default:
					m.sweepAll()
				}
			}
		}()
		wg.Wait()
		close(stop)
		<-swept
		for k := range admitted {
			if n := admitted[k].Load(); n != 1 {
				t.Fatalf("phase %d key hot-%d: admitted %d requests of full weight, want 1", phase, k, n)
			}
		}
	}
}

func TestSweepDropsOnlyFullBuckets(t *testing.T) {
	clk := newFakeClock()
	m := NewMemory(clk.Now)
	const n = 10000
	for i := range n {
		allow(t, m, fmt.Sprintf("idle-%d", i), free, 1)
	}
	drain(t, m, "busy", free)     // owes 60s
	clk.Advance(30 * time.Second) // idle keys (2s owed) are full again

	// Inserting new keys triggers sweeps in every shard.
	for i := range n {
		allow(t, m, fmt.Sprintf("new-%d", i), free, 1)
	}
	if got, _ := tableStats(m); got >= 2*n {
		t.Fatalf("%d buckets after sweeps, want fewer than %d", got, 2*n)
	}
	// "busy" still owes 30s, so 15 of its 30 tokens are back; had a
	// sweep dropped it, all 30 would be.
	if got := drain(t, m, "busy", free); got != 15 {
		t.Fatalf("busy key admitted %d, want 15", got)
	}
}

// TestSweptBucketIsRetried plays a request that looked its key up, lock-free,
// just before a sweep retired the bucket: its spend must fail and its retry
// find a fresh bucket in the new table, so the tokens it spends are visible
// to every later request.
func TestSweptBucketIsRetried(t *testing.T) {
	clk := newFakeClock()
	m := NewMemory(clk.Now)
	allow(t, m, "k", free, 1)
	clk.Advance(time.Minute) // full again, hence sweepable
	now := clk.Now().UnixNano()
	sh, h := m.shard("k")
	held := sh.find(h, "k") // as a request that has looked the key up
	staleTable := sh.table.Load()
	m.sweepAll()

	s, err := newShape(free, 30)
	if err != nil {
		t.Fatal(err)
	}
	// spendKey never spends from a retired bucket: its TAT can no
	// longer be CASed from a real time.
	if tat := held.tat.Load(); tat != retired {
		t.Fatalf("swept bucket has TAT %d, want retired", tat)
	}
	if sh.find(h, "k") != nil {
		t.Fatal("swept bucket is still in the current table")
	}
	if sh.table.Load() == staleTable {
		t.Fatal("sweep did not publish a new table")
	}
	// The retry path of spendKey: the stale table still leads to the
	// retired bucket, so the key is looked up again under the lock.
	if d := m.spendKey("k", now, s, 30); !d.Allowed {
		t.Fatalf("retry after sweep got %+v, want admitted", d)
	}
	if n := drain(t, m, "k", free); n != 0 {
		t.Fatalf("after spending the whole burst, admitted %d, want 0", n)
	}
	if got := sh.find(h, "k"); got == nil || got == held || got.tat.Load() == retired {
		t.Fatalf("current table holds %p, want a live bucket other than the retired %p", got, held)
	}
}

// TestConcurrentFirstUse sends the first requests for a key from many
// goroutines at once: they race to insert it, and exactly one bucket must
// result, or each copy would grant its own burst.
func TestConcurrentFirstUse(t *testing.T) {
	clk := newFakeClock()
	m := NewMemory(clk.Now)
	const keys, goroutines = 50, 200
	var admitted [keys]atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range goroutines {
		wg.Go(func() {
			<-start
			for k := range keys {
				if allow(t, m, fmt.Sprintf("first-%d", k), free, free.Capacity).Allowed {
					admitted[k].Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	for k := range admitted {
		if n := admitted[k].Load(); n != 1 {
			t.Fatalf("key first-%d: admitted %d requests of full weight, want 1", k, n)
		}
	}
	if got, _ := tableStats(m); got != keys {
		t.Fatalf("%d buckets, want %d", got, keys)
	}
}

// TestIdleKeysAreEvicted sends a stream of distinct keys, each used once and
// idle a few seconds later, as a crawl of many tokens would: the tables must
// stay proportional to the keys active at once, not to all keys ever seen.
func TestIdleKeysAreEvicted(t *testing.T) {
	clk := newFakeClock()
	m := NewMemory(clk.Now)
	const rounds, perRound = 100, 2000
	maxBuckets, maxSlots := 0, 0
	for r := range rounds {
		for i := range perRound {
			allow(t, m, fmt.Sprintf("tok:%d:%d", r, i), free, 1)
		}
		buckets, slots := tableStats(m)
		maxBuckets, maxSlots = max(maxBuckets, buckets), max(maxSlots, slots)
		clk.Advance(3 * time.Second) // each bucket owed 2s: all idle now
	}
	// A shard sweeps when 3/4 full and then is under 1/2 full, so it holds
	// at most about 3x the keys active since its last sweep.
	if maxBuckets > 4*perRound {
		t.Errorf("up to %d buckets for %d keys active at once (%d seen), want at most %d", maxBuckets, perRound, rounds*perRound, 4*perRound)
	}
	if maxSlots > 8*perRound+numShards*minSlots {
		t.Errorf("up to %d slots for %d keys active at once, want at most %d", maxSlots, perRound, 8*perRound+numShards*minSlots)
	}
	t.Logf("%d distinct keys, %d active at once: at most %d buckets in %d slots", rounds*perRound, perRound, maxBuckets, maxSlots)

	m.sweepAll()
	if buckets, slots := tableStats(m); buckets != 0 || slots != numShards*minSlots {
		t.Fatalf("after sweeping idle keys: %d buckets in %d slots, want 0 in %d", buckets, slots, numShards*minSlots)
	}
}

func TestShardsSpreadKeys(t *testing.T) {
	m := NewMemory(nil)
	var counts [numShards]int
	const n = numShards * 1000
	for i := range n {
		_, h := m.shard(fmt.Sprintf("tok:%d", i))
		counts[h>>(64-shardBits)]++
	}
	for i, c := range counts {
		if c < 800 || c > 1200 {
			t.Fatalf("shard %d holds %d of %d keys, want about 1000", i, c, n)
		}
	}
}

// tableStats counts the buckets and slots in m's current tables.
func tableStats(m *Memory) (buckets, slots int) {
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		if t := sh.table.Load(); t != nil {
			buckets += sh.count
			slots += len(t.slots)
		}
		sh.mu.Unlock()
	}
	return buckets, slots
}
