package quota

import (
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// LoadSample is one reading of how hard the gateway is working, the input of
// the auto-tuner. Each pair is "used vs available"; the gateway fills it from
// an InFlight counter, its upstream admission rate and a LatencyWindow.
type LoadSample struct {
	InFlight, Concurrency          int           // requests in progress vs the configured concurrency
	UpstreamRate, UpstreamCapacity float64       // admitted upstream requests per second vs what the keys allow
	P95, LatencyTarget             time.Duration // recent 95th-percentile latency vs its target
}

// Load is the highest of the three ratios: the gateway is as loaded as its
// most saturated resource. A ratio whose denominator is zero (not configured)
// counts as 0, so an unset target never reads as infinite load.
func (s LoadSample) Load() float64 {
	return max(
		ratio(float64(s.InFlight), float64(s.Concurrency)),
		ratio(s.UpstreamRate, s.UpstreamCapacity),
		ratio(float64(s.P95), float64(s.LatencyTarget)),
	)
}

func ratio(used, available float64) float64 {
	if !(available > 0) || !(used > 0) {
		return 0
	}
	return used / available
}

// InFlight counts requests in progress: Inc when one starts, Dec when it
// ends. Lock-free, for the hot path.
type InFlight struct {
	n atomic.Int64
}

// Inc records a request starting.
func (c *InFlight) Inc() { c.n.Add(1) }

// Dec records a request ending.
func (c *InFlight) Dec() { c.n.Add(-1) }

// Value is the number of requests in progress.
func (c *InFlight) Value() int { return int(c.n.Load()) }

// LatencyWindow keeps the most recent request latencies, for a p95 that
// follows current conditions. It is a fixed ring, so memory is bounded;
// Observe is lock-free and does not allocate, so every request can feed it.
// Observations older than maxAge are ignored: after traffic stops, an old
// slow spell must not keep the load high (and the tuner cutting) forever.
type LatencyWindow struct {
	now   func() time.Time
	epoch time.Time
	age   time.Duration
	next  atomic.Uint64
	slots []atomic.Uint64 // packed: seconds since epoch + 1 (0 = empty) << 32 | microseconds
}

// NewLatencyWindow returns a window of the last size observations (at least
// 1) no older than maxAge (0 = no age limit). now is the clock; nil means
// time.Now.
func NewLatencyWindow(size int, maxAge time.Duration, now func() time.Time) *LatencyWindow {
	if now == nil {
		now = time.Now
	}
	return &LatencyWindow{now: now, epoch: now(), age: maxAge, slots: make([]atomic.Uint64, max(size, 1))}
}

// Observe records one request's latency. Latencies are kept in whole
// microseconds up to about 71 minutes. Concurrent observers may overwrite
// each other's slot when the ring wraps, which only drops a sample.
func (w *LatencyWindow) Observe(d time.Duration) {
	us := uint64(min(max(d.Microseconds(), 0), math.MaxUint32))
	sec := uint64(max(w.now().Sub(w.epoch)/time.Second, 0)) + 1
	i := (w.next.Add(1) - 1) % uint64(len(w.slots))
	w.slots[i].Store(sec<<32 | us)
}

// P95 is the 95th percentile (nearest rank) of the retained observations, or
// 0 when there are none. It copies and sorts the ring: meant for a sampler
// every few seconds, not for every request.
func (w *LatencyWindow) P95() time.Duration {
	var oldest uint64 // in packed seconds; 0 keeps everything
	if w.age > 0 {
		if cut := w.now().Sub(w.epoch) - w.age; cut >= 0 {
			oldest = uint64(cut/time.Second) + 1
		}
	}
	vals := make([]uint64, 0, len(w.slots))
	for i := range w.slots {
		v := w.slots[i].Load()
		if v != 0 && v>>32 >= oldest {
			vals = append(vals, v&math.MaxUint32)
		}
	}
	if len(vals) == 0 {
		return 0
	}
	slices.Sort(vals)
	rank := (len(vals)*95 + 99) / 100 // ceil(0.95 n)
	return time.Duration(vals[rank-1]) * time.Microsecond
}
