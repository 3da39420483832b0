package mock

import (
	"math"
	"sync"
	"time"
)

// bucket is one key's request bucket: it holds size requests (max(1, rps)
// when size <= 0) and refills at rps per second. It is kept as a
// theoretical arrival time (the moment the bucket would be full again),
// which makes every answer an exact number of nanoseconds, so tests can
// check headers to the millisecond.
type bucket struct {
	mu       sync.Mutex
	interval time.Duration // time to refill one request
	capacity time.Duration // burst * interval: time to refill from empty
	rpm      int64         // the limit as providers state it, per minute
	full     time.Time     // when the bucket is full again; zero = full now
}

// decision is one take from a bucket, with what the x-ratelimit-* and
// Retry-After headers report.
type decision struct {
	ok         bool
	limit      int64         // requests per minute
	remaining  int64         // whole requests left in the bucket
	reset      time.Duration // until the bucket is full again
	retryAfter time.Duration // until one request is allowed; only when !ok
}

func newBucket(rps float64, size int) *bucket {
	burst := max(1, rps)
	if size > 0 {
		burst = float64(size)
	}
	interval := max(time.Duration(math.Round(float64(time.Second)/rps)), 1)
	return &bucket{
		interval: interval,
		capacity: time.Duration(math.Round(burst * float64(interval))),
		rpm:      int64(math.Round(rps * 60)),
	}
}

// take removes one request from the bucket at now if it holds one.
func (b *bucket) take(now time.Time) decision {
	b.mu.Lock()
	defer b.mu.Unlock()
	full := b.full
	if full.Before(now) {
		full = now
	}
	next := full.Add(b.interval)
	if over := next.Sub(now) - b.capacity; over > 0 {
		return decision{limit: b.rpm, remaining: b.left(full.Sub(now)), reset: full.Sub(now), retryAfter: over}
	}
	b.full = next
	return decision{ok: true, limit: b.rpm, remaining: b.left(next.Sub(now)), reset: next.Sub(now)}
}

// left is how many whole requests the bucket holds when it is full again
// after untilFull.
func (b *bucket) left(untilFull time.Duration) int64 {
	return int64((b.capacity - untilFull) / b.interval)
}
