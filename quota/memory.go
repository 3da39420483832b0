package quota

import (
	"context"
	"hash/maphash"
	"math"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Keys are spread over numShards independent tables so that inserting a new
// key (which takes its shard's mutex) never stalls inserts into the others.
// A power of two, so the shard index is the top bits of the key's hash.
const (
	shardBits = 6
	numShards = 1 << shardBits
)

// minSlots is the smallest table a shard publishes.
const minSlots = 8

// retired is the TAT of a bucket that a sweep removed from its shard. No
// real clock produces it, and as a time it means "full", like any past TAT.
const retired = math.MinInt64

// Memory is the in-process Limiter. Its buckets live in this process only, so
// N instances enforce N separate limits; it is the embedded default and the
// fallback when shared state is unreachable.
//
// Deciding for a key seen before takes no lock and does not allocate: one
// hash, an atomic load of the shard's table, a probe, and a CAS on the key's
// TAT. Only the first request of a key takes its shard's mutex. Buckets that
// have refilled completely are evicted when their shard needs room for a new
// key, so memory follows the keys active within their burst windows, not
// every key ever seen.
//
// A Memory must not be copied after first use.
type Memory struct {
	now    func() time.Time // nil: the monotonic clock, see nanos
	epoch  time.Time        // when the limiter was made, with its monotonic reading
	unix0  int64            // epoch in unix nanoseconds
	seed   maphash.Seed
	shards [numShards]shard
}

// shard owns the buckets whose keys hash to it. Readers load table without
// a lock; mu serialises the writers (inserts and sweeps), which either fill
// an empty slot of the current table or publish a whole new table.
type shard struct {
	table atomic.Pointer[table]
	mu    sync.Mutex
	count int // buckets in the current table; guarded by mu
	// Keeps the table pointer, read by every Allow, off the cache lines of
	// the neighbouring shards' mutexes, written by their inserts.
	_ [64]byte
}

// table is an open-addressing hash table with linear probing. A slot, once
// filled, never changes, so a reader probing concurrently with an insert
// either sees the new bucket or misses it and takes the locked path; buckets
// leave only when a sweep publishes a new table without them. It is never
// more than 3/4 full, so every probe meets an empty slot eventually.
type table struct {
	mask  uint64 // len(slots)-1
	slots []atomic.Pointer[bucket]
}

// bucket is one key's GCRA state. tat is the theoretical arrival time in
// unix nanoseconds, or retired; zero is a TAT far in the past, i.e. a full
// bucket. hash and key are set before the bucket is published and never
// change.
type bucket struct {
	tat  atomic.Int64
	hash uint64
	key  string
}

var _ Limiter = (*Memory)(nil)

// NewMemory returns an empty in-process limiter. now is the clock, injected so
// tests can move time without sleeping; nil means the real clock.
func NewMemory(now func() time.Time) *Memory {
	epoch := time.Now()
	// A random seed per limiter: keys cannot be chosen to collide.
	return &Memory{now: now, epoch: epoch, unix0: epoch.UnixNano(), seed: maphash.MakeSeed()}
}

// nanos is the current time in unix nanoseconds. The real clock is read as
// the monotonic time since the limiter was made: one clock read instead of
// time.Now's two (wall and monotonic), which halves the cost of the clock on
// VMs where reading it is slow, and a step of the wall clock (NTP, an
// operator) neither refills nor freezes every bucket at once.
func (m *Memory) nanos() int64 {
	if m.now == nil {
		return m.unix0 + int64(time.Since(m.epoch))
	}
	return m.now().UnixNano()
}

// Allow spends weight tokens from key's bucket if they are all available, and
// otherwise spends nothing and says how long to wait. ctx is unused: nothing
// here waits.
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
	// The common case inline: a key seen before, admitted at the first
	// CAS. It is gcra's admitting branch, written so that no Decision is
	// copied on the way out: a Decision has too many fields for the
	// compiler to keep in registers, and its copies through the stack stall
	// the CPU (stores forwarded to wider loads). Rejections, new keys,
	// retired buckets and lost CASes take spendKey.
	now := m.nanos()
	sh, h := m.shard(key)
	if b := sh.find(h, key); b != nil {
		if tat := b.tat.Load(); tat != retired {
			next := max(tat, now) + weight*s.interval
			if next-now <= s.tau && b.tat.CompareAndSwap(tat, next) {
				return admitted(s, next, now), nil
			}
		}
	}
	return m.spendKey(key, now, s, weight), nil
}

// AllowBoth charges a then b; if b rejects, a's charge is given back, so the
// pair is all-or-nothing in what it leaves behind. Between the two steps
// another request may briefly see a's tokens spent, which can only make it
// stricter, never admit more than the buckets hold.
//
// When the pair is rejected both decisions say Allowed false and describe
// their bucket as the request left it (uncharged); RetryAfter is set on each
// bucket that could not have taken its charge, so the wait before retrying
// is the larger of the two. The Redis backend answers alike (decideBoth).
func (m *Memory) AllowBoth(ctx context.Context, a, b Charge) (Decision, Decision, error) {
	sa, sb, err := pairShapes(a, b)
	if err != nil {
		return Decision{}, Decision{}, err
	}
	now := m.nanos()
	da := m.spendKey(a.Key, now, sa, a.Weight)
	if !da.Allowed {
		return da, m.peek(b.Key, now, sb, b.Weight), nil
	}
	db := m.spendKey(b.Key, now, sb, b.Weight)
	if !db.Allowed {
		m.adjustKey(a.Key, now, sa, -a.Weight)
		da = uncharged(da, sa, a.Weight)
	}
	return da, db, nil
}

// AllowAll charges each bucket of cs in turn; at the first that refuses,
// the charges before it are given back, so the call is all-or-nothing in
// what it leaves behind (between the steps another request may briefly see
// a charge that is given back, which can only make it stricter). The
// decisions are decideAll's, which the Redis backend answers too.
func (m *Memory) AllowAll(ctx context.Context, cs []Charge) ([]Decision, error) {
	ss, err := chargeShapes(cs)
	if err != nil {
		return nil, err
	}
	now := m.nanos()
	ds := make([]Decision, len(cs))
	for i, c := range cs {
		ds[i] = m.spendKey(c.Key, now, ss[i], c.Weight)
		if ds[i].Allowed {
			continue
		}
		for j := range i {
			m.adjustKey(cs[j].Key, now, ss[j], -cs[j].Weight)
			ds[j] = uncharged(ds[j], ss[j], cs[j].Weight)
		}
		for j := i + 1; j < len(cs); j++ {
			ds[j] = m.peek(cs[j].Key, now, ss[j], cs[j].Weight)
		}
		break
	}
	return ds, nil
}

// Adjust settles key's bucket by delta tokens.
func (m *Memory) Adjust(ctx context.Context, key string, p Params, delta int64) error {
	s, err := shapeForAdjust(p)
	if err != nil || delta == 0 {
		return err
	}
	m.adjustKey(key, m.nanos(), s, delta)
	return nil
}

// spendKey runs GCRA on key's bucket. A bucket that a sweep retired after
// find returned it is never spent from: the key is looked up again, under the
// shard's mutex, so the tokens land in the bucket every later request sees.
func (m *Memory) spendKey(key string, now int64, s shape, weight int64) Decision {
	sh, h := m.shard(key)
	b := sh.find(h, key)
	for {
		if b == nil {
			b = sh.findOrInsert(h, key, now)
		}
		tat := b.tat.Load()
		if tat == retired {
			b = nil
			continue
		}
		d, next := gcra(tat, now, s, weight)
		// A failed CAS means another request changed the TAT between our
		// load and store: recompute against the new value.
		if !d.Allowed || b.tat.CompareAndSwap(tat, next) {
			return d
		}
	}
}

// peek reports key's bucket as it stands, for a request of weight that is
// not charged: never Allowed, and with a RetryAfter only if the bucket would
// have rejected it too. It creates no bucket; a missing or retired one is
// full.
func (m *Memory) peek(key string, now int64, s shape, weight int64) Decision {
	sh, h := m.shard(key)
	var tat int64
	if b := sh.find(h, key); b != nil {
		tat = b.tat.Load()
	}
	d, _ := gcra(tat, now, s, weight)
	return uncharged(d, s, weight)
}

func (m *Memory) adjustKey(key string, now int64, s shape, delta int64) {
	sh, h := m.shard(key)
	b := sh.find(h, key)
	for {
		if b != nil && b.settle(now, s, delta) {
			return
		}
		if delta < 0 {
			return // b is missing or retired, i.e. full: a refund changes nothing
		}
		b = sh.findOrInsert(h, key, now)
	}
}

// settle moves b's TAT by delta tokens. It reports false, having done
// nothing, if a sweep has retired b, for the caller to look the key up again
// as spendKey does.
func (b *bucket) settle(now int64, s shape, delta int64) bool {
	for {
		tat := b.tat.Load()
		if tat == retired {
			return false
		}
		if b.tat.CompareAndSwap(tat, adjust(tat, now, s, delta)) {
			return true
		}
	}
}

// raise makes key's bucket at least as empty as a bucket that will be full
// again in after: what the shared limiter last said of it. Degrading keeps
// its local buckets this way while Redis answers, so that switching to local
// limits starts from the shared state instead of a fresh burst. GCRA's state
// is a time, so one value serves the local share of a bucket as well as the
// whole: a bucket 3s from full is 3s from full at any share.
func (m *Memory) raise(key string, after time.Duration) {
	if after <= 0 {
		return // full, which a missing bucket already is
	}
	now := m.nanos()
	tat := now + int64(after)
	sh, h := m.shard(key)
	b := sh.find(h, key)
	for {
		if b == nil {
			b = sh.findOrInsert(h, key, now)
		}
		cur := b.tat.Load()
		if cur == retired {
			b = nil
			continue
		}
		if cur >= tat || b.tat.CompareAndSwap(cur, tat) {
			return
		}
	}
}

// tatOf returns key's TAT, 0 (full) for a missing or retired bucket.
func (m *Memory) tatOf(key string) int64 {
	sh, h := m.shard(key)
	if b := sh.find(h, key); b != nil {
		if tat := b.tat.Load(); tat != retired {
			return tat
		}
	}
	return 0
}

// shard returns key's shard and hash.
func (m *Memory) shard(key string) (*shard, uint64) {
	h := maphash.String(m.seed, key)
	return &m.shards[h>>(64-shardBits)], h
}

// find returns key's bucket from the shard's current table without locking,
// or nil. The bucket may have been retired by a concurrent sweep; spendKey
// and settle check.
func (sh *shard) find(h uint64, key string) *bucket {
	t := sh.table.Load()
	if t == nil {
		return nil
	}
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		b := t.slots[i].Load()
		if b == nil || b.hash == h && b.key == key {
			return b
		}
	}
}

// findOrInsert returns key's bucket, creating it (full) if it is missing or
// was retired. Under the mutex the current table holds no retired bucket:
// only sweeps retire, and they publish a table without them before
// unlocking.
func (sh *shard) findOrInsert(h uint64, key string, now int64) *bucket {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if b := sh.find(h, key); b != nil {
		return b // inserted by another request while we waited for the lock
	}
	t := sh.table.Load()
	if t == nil || 4*(sh.count+1) > 3*len(t.slots) {
		t = sh.sweep(now)
	}
	// Cloned so that a key sliced from a large buffer (a request header)
	// does not keep that buffer alive.
	b := &bucket{hash: h, key: strings.Clone(key)}
	t.put(b)
	sh.count++
	return b
}

// sweep retires the buckets that have refilled completely and publishes a
// new table holding the rest, sized so it is at most half full. A full
// bucket behaves exactly like a missing one, so nothing is lost, and the
// shard stays proportional to recently active keys instead of every key ever
// seen. It runs when the table is 3/4 full, i.e. after at least a quarter of
// the table's slots in inserts, so its cost is amortised O(1) per insert.
// The caller holds sh.mu.
func (sh *shard) sweep(now int64) *table {
	old := sh.table.Load()
	live := 0
	if old != nil {
		for i := range old.slots {
			b := old.slots[i].Load()
			if b == nil {
				continue
			}
			// The CAS fails if a concurrent request just spent from this
			// bucket; it is then not idle and stays. Once it succeeds no
			// request can change b (spendKey and settle see retired and
			// look the key up again, under this mutex, so in the new
			// table).
			if tat := b.tat.Load(); tat > now || !b.tat.CompareAndSwap(tat, retired) {
				live++
			}
		}
	}
	n := max(minSlots, 1<<bits.Len(uint(2*live+1)))
	t := &table{mask: uint64(n - 1), slots: make([]atomic.Pointer[bucket], n)}
	if old != nil {
		for i := range old.slots {
			if b := old.slots[i].Load(); b != nil && b.tat.Load() != retired {
				t.put(b)
			}
		}
	}
	sh.table.Store(t)
	sh.count = live
	return t
}

// put stores b in t's first free slot for its hash. The caller holds the
// shard's mutex (or t is not published yet), and b's key is not in t.
func (t *table) put(b *bucket) {
	for i := b.hash & t.mask; ; i = (i + 1) & t.mask {
		if t.slots[i].Load() == nil {
			t.slots[i].Store(b)
			return
		}
	}
}

// sweepAll sweeps every shard at the current time. Sweeps otherwise run only
// when a shard needs room for a new key; this lets tests and benchmarks
// measure what eviction leaves behind.
func (m *Memory) sweepAll() {
	now := m.nanos()
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		if sh.table.Load() != nil {
			sh.sweep(now)
		}
		sh.mu.Unlock()
	}
}
