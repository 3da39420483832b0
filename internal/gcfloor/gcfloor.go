// Package gcfloor keeps the garbage collector's heap goal from falling
// below a floor. With Go's default (GOGC=100) the goal is twice the live
// heap, and Sluice's live heap is small (about 6 MiB on the embedded
// default): at 1,000 requests a second the collector ran every 0.4 s, and
// the requests caught in a cycle made the p99 (docs/BENCHMARKS.md). A floor
// spaces the cycles out on a small heap and changes nothing on a large one:
// the goal is max(floor, 2 × live). GOMEMLIMIT, when set, still bounds it.
package gcfloor

import (
	"runtime/debug"
	"runtime/metrics"
)

// Percent is the GOGC percentage that puts the heap goal at
// max(floor, 2 × live) for a live heap of live bytes.
func Percent(live, floor uint64) int {
	live = max(live, 1<<20) // before the first cycle the live heap reads 0
	if floor <= 2*live {
		return 100
	}
	return int((floor - live) * 100 / live)
}

// Apply sets the GC percentage for the live heap now and returns the one
// it replaced. Called now and then (every second in main), it follows the
// live heap as it grows or shrinks.
func Apply(floor uint64) (was int) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	return debug.SetGCPercent(Percent(sample[0].Value.Uint64(), floor))
}
