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
		{Params{Capacity: 200000, RefillPerSec: 1}, 4000},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.p.Capacity), func(t *testing.T) {
			clk := newFakeClock() // frozen: no refill during the test
			m := NewMemory(clk.Now)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 100 {
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
		wg.Wait()
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
	total := 0
	for i := range m.shards {
		total += len(m.shards[i].buckets)
	}
	if total >= 2*n {
		t.Fatalf("%d buckets after sweeps, want fewer than %d", total, 2*n)
	}
	// "busy" still owes 30s, so 15 of its 30 tokens are back; had a
	// sweep dropped it, all 30 would be.
	if got := drain(t, m, "busy", free); got != 15 {
		t.Fatalf("busy key admitted %d, want 15", got)
	}
}

func TestSweptBucketIsRetried(t *testing.T) {
	clk := newFakeClock()
	m := NewMemory(clk.Now)
	now := clk.Now().UnixNano()
	held := m.bucket("k", now) // as an Allow that has looked the key up
	sh := &m.shards[shardIndex("k")]
	sh.mu.Lock()
	sh.sweep(now)
	sh.mu.Unlock()

	s, err := newShape(free, 30)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := held.spend(now, s, 30); ok {
		t.Fatalf("spend on a swept bucket returned %+v, want a retry", d)
	}
	if m.bucket("k", now) == held {
		t.Fatal("swept bucket is still in the map")
	}
	if n := drain(t, m, "k", free); n != 30 {
		t.Fatalf("after sweep admitted %d, want 30", n)
	}
}

func TestShardIndexSpreadsKeys(t *testing.T) {
	var counts [numShards]int
	const n = numShards * 1000
	for i := range n {
		counts[shardIndex(fmt.Sprintf("tok_%08x", i))]++
	}
	for i, c := range counts {
		if c < 800 || c > 1200 {
			t.Fatalf("shard %d holds %d of %d keys, want about 1000", i, c, n)
		}
	}
}
