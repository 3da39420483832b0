// Package gcfloor keeps the garbage collector's heap goal from falling
// below a floor. With Go's default (GOGC=100) the goal is twice the live
// heap, and Sluice's live heap is small (about 6 MiB on the embedded
// default): at 1,000 requests a second the collector ran every 0.4 s, and
// the requests caught in a cycle made the p99 (docs/BENCHMARKS.md). A floor
// spaces the cycles out on a small heap and changes nothing on a large one:
// the goal is max(floor, 2 × live). GOMEMLIMIT, when set, still bounds it.
package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// Percent is the GOGC percentage that puts the heap goal at
// max(floor, 2 × live) for a live heap of live bytes.
func Percent(live, floor uint64) int {
	// Go's heap minimum, 4 MiB scaled by GOGC, is a goal of its own: on a
	// live heap under 4 MiB (0 before the first cycle) a GOGC computed
	// from it would put the goal far past the floor (1 MiB gave 6300%, a
	// 252 MiB goal), so such a heap counts as 4 MiB: goal floor - 4 MiB.
	live = max(live, heapMinimum)
	if floor <= 2*live {
		return 100
	}
	return int((floor - live) * 100 / live)
}

// heapMinimum is Go's defaultHeapMinimum: the goal is at least
// heapMinimum × GOGC/100.
const heapMinimum = 4 << 20

// Apply sets the GC percentage for the live heap now and returns the one
// it replaced. Called after each collection (Follow), it follows the live
// heap as it grows or shrinks.
func Apply(floor uint64) (was int) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	return debug.SetGCPercent(Percent(sample[0].Value.Uint64(), floor))
}

// Follow applies floor now and again after every collection, until the
// returned stop is called. The live heap a cycle leaves is what the next
// goal grows from: a percentage left from a smaller heap (before the first
// cycle, or on a ticker's second-old reading) would put the goal many
// times past the floor while the heap grows.
func Follow(floor uint64) (stop func()) {
	var stopped atomic.Bool
	Apply(floor)
	afterEachCycle(func() bool {
		if stopped.Load() {
			return false
		}
		Apply(floor)
		return true
	})
	return func() { stopped.Store(true) }
}

// cycleSentinel is garbage whose finalizer says a collection has run.
type cycleSentinel struct{ _ *int }

// afterEachCycle calls fn (on the finalizer goroutine) after each
// collection for as long as it returns true.
func afterEachCycle(fn func() bool) {
	runtime.SetFinalizer(&cycleSentinel{}, func(*cycleSentinel) {
		if fn() {
			afterEachCycle(fn)
		}
	})
}
