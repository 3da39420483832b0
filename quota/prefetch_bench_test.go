package quota

import (
	"context"
	"testing"
)

// prefetchBenchParams is a bucket no benchmark runs dry on a fixed clock.
var prefetchBenchParams = Params{Capacity: 1_000_000_000_000, RefillPerSec: 1000}

// BenchmarkPrefetchAllowOneKey is a big bucket's request through a
// Prefetch on Memory with a fixed clock: almost every call is spent from
// what the node holds, one in a lot (up to prefetchMax) charges.
func BenchmarkPrefetchAllowOneKey(b *testing.B) {
	clk := newFakeClock()
	f := NewPrefetch(NewMemory(clk.Now), clk.Now)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d, err := f.Allow(ctx, "org:42", prefetchBenchParams, 1); err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
}

// BenchmarkPrefetchAllowBothParallel is AllowBoth of a request bucket and
// a tokens bucket from every core, on 64 organizations.
func BenchmarkPrefetchAllowBothParallel(b *testing.B) {
	clk := newFakeClock()
	f := NewPrefetch(NewMemory(clk.Now), clk.Now)
	ctx := context.Background()
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = "org:" + string(rune('A'+i))
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			k := keys[i%len(keys)]
			i++
			da, db, err := f.AllowBoth(ctx, Charge{Key: k, Params: prefetchBenchParams, Weight: 1},
				Charge{Key: k + "|tpm", Params: prefetchBenchParams, Weight: 100})
			if err != nil || !da.Allowed || !db.Allowed {
				b.Fatal(da, db, err)
			}
		}
	})
}
