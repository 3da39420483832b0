package quota

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
)

// benchParams describe a bucket too deep to run dry and too slow to refill
// completely during a benchmark, so every call takes the admitting CAS path
// (not the cheaper rejection) and no bucket becomes idle enough to be swept.
var benchParams = Params{Capacity: 1_000_000_000, RefillPerSec: 1}

func BenchmarkMemoryAllowOneKey(b *testing.B) {
	benchmarkOneKey(b, NewMemory(nil))
}

// BenchmarkMemoryAllowOneKeyFixedClock leaves out the cost of time.Now, which
// varies a lot between machines (and is slow on some VMs).
func BenchmarkMemoryAllowOneKeyFixedClock(b *testing.B) {
	clk := newFakeClock()
	benchmarkOneKey(b, NewMemory(clk.Now))
}

func benchmarkOneKey(b *testing.B, m *Memory) {
	ctx := context.Background()
	if _, err := m.Allow(ctx, "tok_0123456789abcdef", benchParams, 1); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Allow(ctx, "tok_0123456789abcdef", benchParams, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMemoryAllowParallel100kKeys(b *testing.B) {
	const n = 100_000
	m := NewMemory(nil)
	ctx := context.Background()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("tok_%016x", i)
		if _, err := m.Allow(ctx, keys[i], benchParams, 1); err != nil {
			b.Fatal(err)
		}
	}
	var offset atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		// Each goroutine walks the keys from its own far-apart start.
		i := int(offset.Add(n/16)) % n
		for pb.Next() {
			if _, err := m.Allow(ctx, keys[i], benchParams, 1); err != nil {
				b.Error(err)
				return
			}
			if i++; i == n {
				i = 0
			}
		}
	})
}
