package quota

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
)

// The Redis benchmarks need TEST_REDIS_URL, like the tests:
//
//	TEST_REDIS_URL=redis://127.0.0.1:6379/0 go test -run '^$' -bench 'Redis|Degrading' ./quota
//
// roundtrips/op is the number of commands the client sent per call, counted
// by a go-redis hook: one EVALSHA.

// rlBench returns a Redis limiter on the server's clock and its counter,
// with the scripts loaded and the counter at zero.
func rlBench(b *testing.B) (*Redis, *rlCounter) {
	counter := newRLCounter()
	r, _ := rlSetup(b, nil, counter)
	ctx := context.Background()
	if _, _, err := r.AllowBoth(ctx, Charge{"tok:warm", benchParams, 1}, Charge{"tok:warm|tpm", benchParams, 1}); err != nil {
		b.Fatal(err)
	}
	counter.counts()
	return r, counter
}

func rlReportRoundTrips(b *testing.B, counter *rlCounter, calls int) {
	b.ReportMetric(float64(rlTotal(counter.counts()))/float64(calls), "roundtrips/op")
}

func BenchmarkRedisAllow(b *testing.B) {
	r, counter := rlBench(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Allow(ctx, "tok:0123456789abcdef", benchParams, 1); err != nil {
			b.Fatal(err)
		}
	}
	rlReportRoundTrips(b, counter, b.N)
}

func BenchmarkRedisAllowBoth(b *testing.B) {
	r, counter := rlBench(b)
	ctx := context.Background()
	reqs := Charge{"tok:0123456789abcdef", benchParams, 1}
	tokens := Charge{"tok:0123456789abcdef|tpm", benchParams, 300}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := r.AllowBoth(ctx, reqs, tokens); err != nil {
			b.Fatal(err)
		}
	}
	rlReportRoundTrips(b, counter, b.N)
}

// BenchmarkRedisAllowParallel is the shared limiter's throughput: many
// goroutines (as many in-flight requests) over 10k keys. Its ns/op is wall
// time per call, so 1e9/ns-per-op is calls per second for this process.
func BenchmarkRedisAllowParallel(b *testing.B) {
	r, counter := rlBench(b)
	rlBenchParallel(b, r, counter)
}

// BenchmarkDegradingAllowParallel is the same through Degrading, in the
// shared state: the cost of the per-call timeout and breaker check.
func BenchmarkDegradingAllowParallel(b *testing.B) {
	r, counter := rlBench(b)
	d := NewDegrading(r, nil, DegradingOptions{Share: 3})
	rlBenchParallel(b, d, counter)
	if d.Degraded() {
		b.Fatal("degraded during the benchmark")
	}
}

func rlBenchParallel(b *testing.B, l Limiter, counter *rlCounter) {
	const n = 10_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("tok:%016x", i)
	}
	ctx := context.Background()
	var offset, calls atomic.Int64
	// Waiting on the network, not the CPU: more goroutines than cores.
	b.SetParallelism(16)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(offset.Add(n/32)) % n
		for pb.Next() {
			if _, err := l.Allow(ctx, keys[i], benchParams, 1); err != nil {
				b.Error(err)
				return
			}
			calls.Add(1)
			if i++; i == n {
				i = 0
			}
		}
	})
	b.StopTimer()
	rlReportRoundTrips(b, counter, int(calls.Load()))
}
