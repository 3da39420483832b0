package quota

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// numShards spreads keys over independent locks so that creating a bucket for
// a new key never stalls requests for unrelated keys. A power of two, so the
// shard index is a shift of the hash.
const (
	shardBits = 6
	numShards = 1 << shardBits
)

// minSweep is the shard size below which idle buckets are not swept: small
// maps cost nothing worth reclaiming.
const minSweep = 64

// retired is the TAT of a bucket that a sweep removed from its shard. No
// real clock produces it.
const retired = math.MinInt64

// Memory is the in-process Limiter. Its buckets live in this process only, so
// N instances enforce N separate limits; it is the embedded default and the
// fallback when shared state is unreachable.
//
// A Memory must not be copied after first use.
type Memory struct {
	now    func() time.Time
	shards [numShards]shard
}

// shard owns the buckets whose keys hash to it. The mutex guards only the map
// (finding and inserting buckets); admission itself happens on the bucket's
// atomic TAT, outside the lock.
type shard struct {
	mu      sync.RWMutex
	buckets map[string]*bucket
	sweepAt int // map size at which the next insert sweeps idle buckets
	// Keeps each shard's lock off its neighbours' cache lines: every Allow
	// writes the reader count of its shard's RWMutex.
	_ [64]byte
}

// bucket is one key's GCRA state: the theoretical arrival time in unix
// nanoseconds, or retired. Zero is a TAT far in the past, i.e. a full bucket.
type bucket struct {
	tat atomic.Int64
}

var _ Limiter = (*Memory)(nil)

// NewMemory returns an empty in-process limiter. now is the clock, injected so
// tests can move time without sleeping; nil means time.Now.
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now}
}

// Allow spends weight tokens from key's bucket if they are all available, and
// otherwise spends nothing and says how long to wait. For a key seen before it
// takes only a shard read lock and one CAS, and does not allocate. ctx is
// unused: nothing here waits.
//
// The bucket's state is a time, not a token count, so Params may change
// between calls: a larger Capacity is usable at once, and a different refill
// rate keeps the time owed rather than the tokens owed (a bucket that is 60s
// from full stays 60s from full).
func (m *Memory) Allow(ctx context.Context, key string, p Params, weight int64) (Decision, error) {
	s, err := newShape(p, weight)
	if err != nil {
		return Decision{}, err
	}
	now := m.now().UnixNano()
	for {
		if d, ok := m.bucket(key, now).spend(now, s, weight); ok {
			return d, nil
		}
	}
}

// spend runs GCRA on b. It reports false, having done nothing, if a sweep has
// retired b since it was looked up; the caller then looks the key up again
// rather than spend tokens on a bucket nobody will see again.
func (b *bucket) spend(now int64, s shape, weight int64) (Decision, bool) {
	for {
		tat := b.tat.Load()
		if tat == retired {
			return Decision{}, false
		}
		d, next := gcra(tat, now, s, weight)
		// A failed CAS means another request changed the TAT between our
		// load and store; recompute against the new value.
		if !d.Allowed || b.tat.CompareAndSwap(tat, next) {
			return d, true
		}
	}
}

// bucket returns key's bucket, creating it (full) on first use.
func (m *Memory) bucket(key string, now int64) *bucket {
	sh := &m.shards[shardIndex(key)]
	sh.mu.RLock()
	b := sh.buckets[key]
	sh.mu.RUnlock()
	if b != nil {
		return b
	}

	sh.mu.Lock()
	defer sh.mu.Unlock()
	if b = sh.buckets[key]; b != nil {
		return b // inserted by another request while we waited for the lock
	}
	if sh.buckets == nil {
		sh.buckets = make(map[string]*bucket)
	}
	if len(sh.buckets) >= max(sh.sweepAt, minSweep) {
		sh.sweep(now)
	}
	b = new(bucket)
	sh.buckets[key] = b
	return b
}

// sweep drops buckets that have refilled completely. A full bucket behaves
// exactly like a missing one, so nothing is lost, and the map stays
// proportional to recently active keys instead of every key ever seen.
// Sweeping again only once the map has doubled keeps the cost amortised O(1)
// per insert. The caller holds sh.mu for writing.
func (sh *shard) sweep(now int64) {
	for k, b := range sh.buckets {
		// The CAS fails if a concurrent Allow just spent from this bucket;
		// it is then not idle and stays.
		if tat := b.tat.Load(); tat <= now && b.tat.CompareAndSwap(tat, retired) {
			delete(sh.buckets, k)
		}
	}
	sh.sweepAt = 2 * len(sh.buckets)
}

// shardIndex hashes key with 64-bit FNV-1a, inline so that it does not
// allocate. FNV mixes the last bytes of a key poorly into any fixed group of
// bits, and keys often differ only at the end (sequential token ids), so a
// Fibonacci-hashing multiply spreads every bit into the top ones used here.
func shardIndex(key string) uint64 {
	const (
		offset64  = 14695981039346656037
		prime64   = 1099511628211
		fibonacci = 0x9e3779b97f4a7c15 // 2^64 / golden ratio
	)
	h := uint64(offset64)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= prime64
	}
	return (h * fibonacci) >> (64 - shardBits)
}
