package quota

import (
	"sync"
	"testing"
	"time"
)

func TestLoadIsTheHighestRatio(t *testing.T) {
	cases := []struct {
		name string
		s    LoadSample
		want float64
	}{
		{"in-flight dominates", LoadSample{InFlight: 90, Concurrency: 100, UpstreamRate: 5, UpstreamCapacity: 10, P95: time.Second, LatencyTarget: 2 * time.Second}, 0.9},
		{"upstream dominates", LoadSample{InFlight: 10, Concurrency: 100, UpstreamRate: 9.5, UpstreamCapacity: 10, P95: time.Second, LatencyTarget: 2 * time.Second}, 0.95},
		{"latency dominates", LoadSample{InFlight: 10, Concurrency: 100, UpstreamRate: 1, UpstreamCapacity: 10, P95: 3 * time.Second, LatencyTarget: 2 * time.Second}, 1.5},
		{"zero denominators count as 0", LoadSample{InFlight: 50, UpstreamRate: 7, P95: time.Second}, 0},
		{"only latency configured", LoadSample{InFlight: 50, P95: time.Second, LatencyTarget: 4 * time.Second}, 0.25},
		{"idle", LoadSample{Concurrency: 100, UpstreamCapacity: 10, LatencyTarget: time.Second}, 0},
		{"negative in-flight reads as idle", LoadSample{InFlight: -1, Concurrency: 100}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.s.Load(); got != tc.want {
				t.Fatalf("Load() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestInFlight(t *testing.T) {
	var c InFlight
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			for range 100 {
				c.Inc()
			}
			for range 40 {
				c.Dec()
			}
		})
	}
	wg.Wait()
	if got := c.Value(); got != 600 {
		t.Fatalf("Value() = %d, want 600", got)
	}
}

func TestLatencyWindowP95(t *testing.T) {
	clock := newManualClock()
	w := NewLatencyWindow(100, 0, clock.Now)
	if got := w.P95(); got != 0 {
		t.Fatalf("empty window: P95 %v, want 0", got)
	}
	for i := 100; i >= 1; i-- {
		w.Observe(time.Duration(i) * time.Millisecond)
	}
	if got := w.P95(); got != 95*time.Millisecond {
		t.Fatalf("1..100 ms: P95 %v, want 95ms", got)
	}
	// The ring keeps only the last 100: 100 fast requests replace the rest.
	for range 100 {
		w.Observe(2 * time.Millisecond)
	}
	if got := w.P95(); got != 2*time.Millisecond {
		t.Fatalf("after 100 fast requests: P95 %v, want 2ms", got)
	}
	w.Observe(-time.Second) // a clock step must not wrap into a huge latency
	if got := w.P95(); got != 2*time.Millisecond {
		t.Fatalf("after a negative duration: P95 %v, want 2ms", got)
	}

	one := NewLatencyWindow(0, 0, clock.Now) // size is at least 1
	one.Observe(time.Second)
	if got := one.P95(); got != time.Second {
		t.Fatalf("size-1 window: P95 %v, want 1s", got)
	}
}

// After traffic stops, old slow requests age out instead of holding the load up.
func TestLatencyWindowAgesOut(t *testing.T) {
	clock := newManualClock()
	w := NewLatencyWindow(50, 30*time.Second, clock.Now)
	for range 20 {
		w.Observe(5 * time.Second)
	}
	clock.Advance(20 * time.Second)
	for range 20 {
		w.Observe(100 * time.Millisecond)
	}
	if got := w.P95(); got != 5*time.Second {
		t.Fatalf("both spells in window: P95 %v, want 5s", got)
	}
	clock.Advance(15 * time.Second)
	if got := w.P95(); got != 100*time.Millisecond {
		t.Fatalf("slow spell 35s old: P95 %v, want 100ms", got)
	}
	clock.Advance(time.Minute)
	if got := w.P95(); got != 0 {
		t.Fatalf("nothing recent: P95 %v, want 0", got)
	}
}

func TestLatencyWindowConcurrentAndAllocFree(t *testing.T) {
	w := NewLatencyWindow(256, time.Minute, nil)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				w.Observe(time.Duration(g*1000+i) * time.Microsecond)
				if i%100 == 0 {
					w.P95()
				}
			}
		})
	}
	wg.Wait()
	if w.P95() == 0 {
		t.Fatal("P95 is 0 after 8000 observations")
	}
	if allocs := testing.AllocsPerRun(1000, func() { w.Observe(time.Millisecond) }); allocs != 0 {
		t.Fatalf("Observe allocates %v times per call", allocs)
	}
}
