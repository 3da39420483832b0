package quota

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// This file holds the anomaly side of admission: counting a token's
// rejections in a sliding minute, deciding when that count should freeze the
// token, the in-memory set of frozen tokens consulted on every request, and
// the extra weight charged for low-value requests. Persisting and auditing a
// freeze is the caller's job; nothing here touches a database.

// RejectionWindow counts rejections per key over a sliding one-minute window.
// The in-process MemoryWindow serves a single node; RedisWindow shares the
// count between nodes so that a token spreading its requests over a cluster is
// still counted once.
type RejectionWindow interface {
	// Add records one rejection for key and returns how many rejections key
	// has had in the last minute, this one included. Each call's count is
	// atomic with its own increment, so concurrent callers see distinct
	// values while the window is filling.
	Add(ctx context.Context, key string) (int, error)
}

// windowSeconds is the width of the rejection window: one bucket per second.
const windowSeconds = 60

// minStripeSweep is the map size below which idle entries are not swept:
// small maps cost nothing worth reclaiming.
const minStripeSweep = 64

// windowStripes spreads keys over independent locks so that rejections of
// unrelated tokens never wait for each other.
const windowStripes = 32

// MemoryWindow is the in-process RejectionWindow. Each key keeps one counter
// per second for the last 60 seconds (about 256 bytes, however hard it is
// hammered), so the window slides with one-second resolution: a count covers
// the current second and the 59 before it. Keys with nothing left in their window are
// evicted as the map grows, so memory follows recently rejected keys, not
// every key ever rejected. Safe for concurrent use.
type MemoryWindow struct {
	now     func() time.Time
	stripes [windowStripes]windowStripe
}

type windowStripe struct {
	mu      sync.Mutex
	keys    map[string]*secondCounts
	sweepAt int // map size at which the next insert sweeps idle keys
}

// secondCounts is one key's window: n[s%60] holds the rejections of unix
// second s for the 60 seconds up to last.
type secondCounts struct {
	last  int64 // unix second of the newest bucket
	total int
	n     [windowSeconds]uint32
}

var _ RejectionWindow = (*MemoryWindow)(nil)

// NewMemoryWindow returns an empty window. now is the clock, injected so tests
// can move time without sleeping; nil means time.Now.
func NewMemoryWindow(now func() time.Time) *MemoryWindow {
	if now == nil {
		now = time.Now
	}
	return &MemoryWindow{now: now}
}

// Add records one rejection for key. It never fails; ctx is unused.
func (w *MemoryWindow) Add(ctx context.Context, key string) (int, error) {
	sec := w.now().Unix()
	st := &w.stripes[stripeOf(key, windowStripes)]
	st.mu.Lock()
	defer st.mu.Unlock()
	c := st.keys[key]
	if c == nil {
		if st.keys == nil {
			st.keys = make(map[string]*secondCounts)
		}
		if len(st.keys) >= max(st.sweepAt, minStripeSweep) {
			st.sweep(sec)
		}
		c = &secondCounts{last: sec}
		st.keys[key] = c
	}
	c.advance(sec)
	c.n[secondIndex(c.last)]++
	c.total++
	return c.total, nil
}

// advance moves the window's head to sec, forgetting the seconds that slid
// out. A clock that stepped backwards leaves the head where it is, so such a
// rejection is counted in the newest second rather than lost.
func (c *secondCounts) advance(sec int64) {
	switch {
	case sec <= c.last:
		return
	case sec-c.last >= windowSeconds:
		c.n = [windowSeconds]uint32{}
		c.total = 0
	default:
		for s := c.last + 1; s <= sec; s++ {
			i := secondIndex(s)
			c.total -= int(c.n[i])
			c.n[i] = 0
		}
	}
	c.last = sec
}

// sweep drops keys whose whole window has expired: such a key counts the same
// as a missing one. Sweeping again only once the map has doubled keeps the
// cost amortised O(1) per insert. The caller holds st.mu.
func (st *windowStripe) sweep(sec int64) {
	for k, c := range st.keys {
		if sec-c.last >= windowSeconds {
			delete(st.keys, k)
		}
	}
	st.sweepAt = 2 * len(st.keys)
}

func secondIndex(sec int64) int {
	i := int(sec % windowSeconds)
	if i < 0 {
		i += windowSeconds
	}
	return i
}

// Detector turns rejections into freeze decisions.
type Detector struct {
	w RejectionWindow
}

// NewDetector returns a detector counting in w: a MemoryWindow for a single
// node, a RedisWindow when several nodes must agree.
func NewDetector(w RejectionWindow) *Detector { return &Detector{w: w} }

// Rejected records one rejection for key and reports whether it should freeze
// the token. freeze is true exactly when this rejection brings the count to
// threshold: counts grow by one per call and each call sees its own count, so
// even with many concurrent callers on many nodes one crossing yields one
// freeze (and one audit entry), not one per rejection beyond the threshold.
// threshold <= 0 never freezes; the rejection is still counted.
//
// Callers should report only rate-limit rejections of tokens that are not
// frozen: requests refused because the token is already frozen are not new
// evidence, and counting them would re-freeze it as soon as it is lifted.
func (d *Detector) Rejected(ctx context.Context, key string, threshold int) (count int, freeze bool, err error) {
	count, err = d.w.Add(ctx, key)
	if err != nil {
		return 0, false, fmt.Errorf("quota: count rejection: %w", err)
	}
	return count, threshold > 0 && count == threshold, nil
}

// Freeze is a token's suspension as the hot path needs it: who and until when.
// The durable record (count, from, who lifted it) lives in the database.
type Freeze struct {
	TokenID int64
	Until   time.Time
	Reason  string
}

// FreezeSet is the in-memory set of frozen tokens consulted on every request.
// Reads are lock-free and do not allocate: the set is an immutable map behind
// an atomic pointer, and writers (rare: a new freeze, an admin lift, a reload)
// copy it. Expired freezes read as not frozen without anyone having to remove
// them, which is how freezes lift by themselves on every node at the same time.
type FreezeSet struct {
	now func() time.Time
	mu  sync.Mutex // serialises writers
	m   atomic.Pointer[map[int64]Freeze]
}

// NewFreezeSet returns an empty set. now is the clock that decides expiry;
// nil means time.Now.
func NewFreezeSet(now func() time.Time) *FreezeSet {
	if now == nil {
		now = time.Now
	}
	return &FreezeSet{now: now}
}

// Frozen reports the freeze in force for tokenID, if any.
func (s *FreezeSet) Frozen(tokenID int64) (Freeze, bool) {
	p := s.m.Load()
	if p == nil {
		return Freeze{}, false
	}
	f, ok := (*p)[tokenID]
	if !ok || !s.now().Before(f.Until) {
		return Freeze{}, false
	}
	return f, true
}

// Active counts the freezes in force now, for operators.
func (s *FreezeSet) Active() int {
	p := s.m.Load()
	if p == nil {
		return 0
	}
	now, n := s.now(), 0
	for _, f := range *p {
		if now.Before(f.Until) {
			n++
		}
	}
	return n
}

// Put records f, replacing any freeze of the same token (so an admin may also
// shorten or extend one). A freeze whose Until has passed is dropped.
func (s *FreezeSet) Put(f Freeze) {
	s.update(func(m map[int64]Freeze) { m[f.TokenID] = f })
}

// Replace swaps the whole set for fs, the active freezes as the database has
// them; the periodic reload that makes freezes and lifts made on other nodes
// visible here. A freeze Put after fs was read and before Replace is dropped
// until the next reload, so persist a freeze before Putting it.
func (s *FreezeSet) Replace(fs []Freeze) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	m := make(map[int64]Freeze, len(fs))
	for _, f := range fs {
		if now.Before(f.Until) {
			m[f.TokenID] = f
		}
	}
	s.m.Store(&m)
}

// update copies the live freezes, applies change and publishes the result.
func (s *FreezeSet) update(change func(map[int64]Freeze)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var old map[int64]Freeze
	if p := s.m.Load(); p != nil {
		old = *p
	}
	m := make(map[int64]Freeze, len(old)+1)
	for id, f := range old {
		if now.Before(f.Until) {
			m[id] = f
		}
	}
	change(m)
	for id, f := range m {
		if !now.Before(f.Until) {
			delete(m, id)
		}
	}
	s.m.Store(&m)
}

// stripeOf hashes key with 32-bit FNV-1a onto one of n stripes (n a power of
// two), inline so that it does not allocate.
func stripeOf(key string, n uint32) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return h & (n - 1)
}
