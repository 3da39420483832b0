package quota

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
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

// BenchmarkTimeNow is the cost of the default clock alone, which
// BenchmarkMemoryAllowOneKey pays on top of the fixed-clock figure.
func BenchmarkTimeNow(b *testing.B) {
	var sum int64
	for b.Loop() {
		sum += time.Now().UnixNano()
	}
	runtime.KeepAlive(sum)
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
	benchmarkParallel(b, NewMemory(nil))
}

func benchmarkParallel(b *testing.B, m *Memory) {
	const n = 100_000
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

// BenchmarkMemoryAllowParallel100kKeysFixedClock is the parallel benchmark
// without time.Now, which otherwise takes most of each call.
func BenchmarkMemoryAllowParallel100kKeysFixedClock(b *testing.B) {
	benchmarkParallel(b, NewMemory(newFakeClock().Now))
}

// BenchmarkMemoryAllowBothFixedClock charges a request's rate bucket and its
// tokens-per-minute bucket, as the /v1 API does for a generation request.
func BenchmarkMemoryAllowBothFixedClock(b *testing.B) {
	m := NewMemory(newFakeClock().Now)
	ctx := context.Background()
	rate := Charge{Key: "tok:123", Params: benchParams, Weight: 1}
	tpm := Charge{Key: "tok:123:tpm", Params: benchParams, Weight: 500}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := m.AllowBoth(ctx, rate, tpm); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemory1MIdleKeys measures the heap that 1M buckets take (keys of
// 20 bytes, like "tok_00000000000f4240"), and what is left once they have
// all refilled and been evicted. Its ns/op is the whole measurement (2M new
// keys and four garbage collections), not one call; its B/op and allocs/op
// include building the keys.
//
//   - MB-1M-keys: live heap holding 1M buckets.
//   - MB-swept: after the clock passes their refill and every shard sweeps.
//   - MB-1M-replaced: instead of an explicit sweep, 1M new keys arrive after
//     the first 1M went idle; the sweeps that inserts trigger must keep the
//     heap near that of 1M keys, not 2M.
func BenchmarkMemory1MIdleKeys(b *testing.B) {
	const n = 1_000_000
	var withKeys, swept, replaced float64
	for b.Loop() {
		base := liveHeap()
		clk := newFakeClock()
		m := NewMemory(clk.Now)
		addKeys(b, m, 0, n)
		withKeys = liveHeap() - base

		clk.Advance(time.Minute) // every bucket is full again
		addKeys(b, m, n, 2*n)
		replaced = liveHeap() - base

		clk.Advance(time.Minute)
		m.sweepAll()
		swept = liveHeap() - base
		runtime.KeepAlive(m)
	}
	b.ReportMetric(withKeys/1e6, "MB-1M-keys")
	b.ReportMetric(withKeys/n, "B/key")
	b.ReportMetric(replaced/1e6, "MB-1M-replaced")
	b.ReportMetric(swept/1e6, "MB-swept")
}

// addKeys spends one token from each of the keys numbered [from, to).
func addKeys(b *testing.B, m *Memory, from, to int) {
	ctx := context.Background()
	buf := []byte("tok_")
	for i := from; i < to; i++ {
		key := string(fmt.Appendf(buf[:4], "%016x", i))
		if _, err := m.Allow(ctx, key, free, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// liveHeap returns the bytes of heap still reachable after a full collection.
func liveHeap() float64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc)
}
