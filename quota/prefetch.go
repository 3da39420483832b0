package quota

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// Prefetch wraps a shared limiter (one Redis round trip per call) so that a
// bucket far from empty is charged for many requests at once (a lot) and the
// node spends them locally: at high rates, one round trip per many requests
// instead of one each. Near empty — fewer than prefetchFloor units left,
// which is every default tier — each request is charged on its own, as
// without it, so what is admitted there is exact.
//
// A lot follows the node's demand for the bucket. The first is
// prefetchFirst requests; one spent within prefetchGrowWithin of its charge
// doubles the next, up to prefetchMax; one that expires unspent halves it.
// At 1,000 requests a second a lot settles at about a quarter second of
// them (256), four round trips a second; a slow client's lot shrinks to
// what it spends before the lot expires.
//
// What is prefetched was charged to the shared bucket before it is spent, so
// no node admits more than the bucket allows. One charge for many is on its
// way per bucket and node at a time; requests that find the node short
// meanwhile wait for it rather than each make a round trip. A lot is never
// more than 1/prefetchShare of what the bucket had left, so all the nodes
// of a cluster together hold at most nodes × prefetchMax requests' worth of
// a bucket that has prefetchFloor or more left, and no more than
// 1/prefetchShare of it each.
//
// A lot is spent within prefetchFor or given back: what is left of it then
// (or when the bucket's Params or pairing change, since a prefetch holds
// for the Params it was charged under) returns to the shared bucket from
// Run's sweep, every prefetchSweepEvery, one Adjust per bucket and never on
// a request's path; Flush, when the node stops, gives back all it holds.
// So what is neither spent nor given back — the bound on allowance lost to
// prefetching — is, per bucket: what a node held when it died without
// stopping (at most one lot: prefetchMax requests, 1/prefetchShare of what
// the bucket had left), what a debt on it dropped (see below), and
// give-backs that did not land (the shared limiter failing or down, or
// having lost its state since the lot's charge). A unit given back was
// first taken out of what the node holds, under the shard's lock, so it is
// never also spent, and never given back twice; it is given back under the
// Params it was charged under, which undoes exactly the time the charge
// added to the bucket (never filling it beyond full), whatever the Params
// are now. A limiter that can lose its state (Redis, through Degrading)
// refuses give-backs of lots charged before it last found it lost (see
// refunder): after a Redis restart every bucket is full again, and giving
// back what the old one was charged would hand it out twice.
//
// An Adjust that charges a bucket (a debt; a provider key's drain after a
// 429) drops what the node holds of it and what it had yet to give back,
// without giving it back, so the node stops at once and nothing returns to
// a bucket the debt says is overdrawn.
type Prefetch struct {
	next    Limiter
	refunds refunder // next, if it tells stale give-backs apart; nil: Adjust
	now     func() time.Time
	seed    maphash.Seed
	shards  [numShards]prefetchShard
	back    givingBack
	stopped atomic.Bool // Flush: no more lots; what lands is given back at once
	given   atomic.Int64
	lost    atomic.Int64 // queued to go back, and not taken: see sendBack
}

// Prefetch sizing; see Prefetch.
const (
	prefetchFirst      = 32
	prefetchMax        = 512
	prefetchShare      = 16
	prefetchFloor      = 512
	prefetchFor        = time.Second
	prefetchGrowWithin = prefetchFor / 4
	prefetchSweep      = 256
	prefetchSweepEvery = prefetchFor / 4
)

var _ Limiter = (*Prefetch)(nil)

type prefetchShard struct {
	mu sync.Mutex
	// gen is bumped by every debt, so that a single request's charge in
	// flight then leaves no entry to size a lot from (a charge for many
	// checks its own entry: prefetched.dropped).
	gen uint64
	// Only buckets with prefetchFloor or more left at their last charge
	// have an entry; it goes when its bucket is charged below that, or in
	// the sweep of expired entries once the shard holds prefetchSweep.
	m map[string]*prefetched
	// expires is no later than the earliest expiry of an entry holding
	// units; zero when none holds any. Run's sweep skips the shard before.
	expires time.Time
}

// prefetched is what a node holds of one bucket (Allow), or of a pair of
// buckets charged together (AllowBoth; entered under the first key).
type prefetched struct {
	pair   string // AllowBoth's second key; "" for Allow
	pa, pb Params
	a, b   int64     // units held, not yet spent
	until  time.Time // dropped after this
	// What the shared buckets had left after the last charge, net of what
	// is held: bounds the next charge and sizes the decisions' Remaining.
	leftA, leftB int64
	// lot is the size of the next charge, in requests; charged is when
	// the last charge sized by it was made (zero: none yet).
	lot     int64
	charged time.Time
	// landed is closed when the charge for many on its way lands; nil
	// when none is. Requests that find the node short wait for it.
	landed chan struct{}
	// state is the shared limiter's (refunder.refundState) when what is
	// held was charged.
	state uint64
	// unspent: some of a lot was given back, so the next one is halved.
	unspent bool
	// dropped: a debt removed the entry; a charge on its way keeps nothing.
	dropped bool
}

// NewPrefetch wraps next; now is the clock (nil: time.Now).
func NewPrefetch(next Limiter, now func() time.Time) *Prefetch {
	if now == nil {
		now = time.Now
	}
	f := &Prefetch{next: next, now: now, seed: maphash.MakeSeed()}
	f.refunds, _ = next.(refunder)
	return f
}

func (f *Prefetch) shard(key string) *prefetchShard {
	return &f.shards[maphash.String(f.seed, key)>>(64-shardBits)]
}

// Allow admits from what the node holds of key's bucket, or charges the
// shared bucket for this request and, when the bucket is far from empty,
// for the next ones too.
func (f *Prefetch) Allow(ctx context.Context, key string, p Params, weight int64) (Decision, error) {
	d, _, err := f.allow(ctx, Charge{Key: key, Params: p, Weight: weight}, Charge{})
	return d, err
}

// AllowBoth is Allow for two buckets charged together: a prefetch holds
// both, for as long as both have enough left.
func (f *Prefetch) AllowBoth(ctx context.Context, a, b Charge) (Decision, Decision, error) {
	return f.allow(ctx, a, b)
}

// AllowAll passes through: a token's own bucket is charged with its
// organization's on every request, so the organization's lots, which are
// entered under one pairing of keys, are not taken apart for it. (What
// the node holds of a bucket was charged before; charging the shared
// bucket directly admits nothing uncharged.)
func (f *Prefetch) AllowAll(ctx context.Context, cs []Charge) ([]Decision, error) {
	return f.next.AllowAll(ctx, cs)
}

// Adjust passes through; a debt (delta > 0) also drops what the node holds
// of the bucket and what it had yet to give back of it, so that after a
// drain it stops at once. Of a pair charged together, only a debt on the
// first bucket drops it: what is held of the second was charged before, so
// spending it admits nothing uncharged.
func (f *Prefetch) Adjust(ctx context.Context, key string, p Params, delta int64) error {
	if delta > 0 {
		sh := f.shard(key)
		sh.mu.Lock()
		if h := sh.m[key]; h != nil {
			h.dropped = true // a charge in flight keeps nothing (keep)
			delete(sh.m, key)
		}
		sh.gen++
		sh.mu.Unlock()
		f.back.forget(key)
	}
	return f.next.Adjust(ctx, key, p, delta)
}

// allow is Allow (b.Key == "") and AllowBoth.
func (f *Prefetch) allow(ctx context.Context, a, b Charge) (Decision, Decision, error) {
	if a.Weight < 1 || (b.Key != "" && b.Weight < 1) {
		return f.charge(ctx, a, b, 1) // the limiter says what is wrong
	}
	sh := f.shard(a.Key)
	for {
		now := f.now()
		sh.mu.Lock()
		h := sh.m[a.Key]
		if h != nil && (h.pair != b.Key || !now.Before(h.until)) {
			h = nil // another pairing, or expired: nothing to go by
		}
		if h != nil && h.usable(a, b, now) && h.a >= a.Weight && h.b >= b.Weight {
			h.a -= a.Weight
			h.b -= b.Weight
			da, db := held(a, h.leftA+h.a), held(b, h.leftB+h.b)
			sh.mu.Unlock()
			return da, db, nil
		}
		if h != nil && h.landed != nil {
			// A charge for many is on its way: wait for it rather than
			// make a round trip of one's own, then look again.
			landed := h.landed
			sh.mu.Unlock()
			select {
			case <-landed:
				continue
			case <-ctx.Done():
				return Decision{}, Decision{}, ctx.Err()
			}
		}
		// The node's demand sizes the charge and what the bucket had
		// left bounds it, even under other Params (a learned limit moves
		// by a unit now and then); a bucket that shrank below the charge
		// refuses it and the request goes alone.
		n := int64(1)
		if h != nil && !f.stopped.Load() {
			n = min(h.nextLot(now), prefetchSize(h.leftA, a.Weight))
			if b.Key != "" {
				n = min(n, prefetchSize(h.leftB, b.Weight))
			}
		}
		var from *prefetched
		var state uint64
		if n > 1 {
			from, state = h, f.state()
			landed := make(chan struct{})
			h.landed = landed
			defer func() {
				sh.mu.Lock()
				if h.landed == landed {
					h.landed = nil
				}
				sh.mu.Unlock()
				close(landed)
			}()
		}
		sized := sizing{from: from, gen: sh.gen, state: state}
		sh.mu.Unlock()
		return f.chargeAndKeep(ctx, a, b, n, now, sized)
	}
}

// sizing is what keep needs to know of the moment a charge was sized: the
// entry a charge for many was sized from, the shard's generation, and the
// shared limiter's state.
type sizing struct {
	from  *prefetched
	gen   uint64
	state uint64
}

// chargeAndKeep charges n requests' weights, or this request's alone when
// the buckets refuse n, and keeps what is held.
func (f *Prefetch) chargeAndKeep(ctx context.Context, a, b Charge, n int64, now time.Time, sized sizing) (Decision, Decision, error) {
	for {
		da, db, err := f.charge(ctx, a, b, n)
		if n > 1 && (err != nil || !da.Allowed || (b.Key != "" && !db.Allowed)) {
			n = 1 // the bucket shrank or emptied since it was sized: this request alone
			continue
		}
		if err != nil || !da.Allowed || (b.Key != "" && !db.Allowed) {
			return da, db, err
		}
		if f.keep(a, b, n, da.Remaining, db.Remaining, now, sized) {
			// Flushed while the charge was on its way: what it kept goes
			// back now, as nothing else will send it.
			_ = f.sendBack(context.WithoutCancel(ctx))
		}
		return withHeld(da, a, n), withHeld(db, b, n), nil
	}
}

// prefetchSize is the most requests of weight the next charge may take
// when the bucket had left units: one below prefetchFloor, else
// 1/prefetchShare of left.
func prefetchSize(left, weight int64) int64 {
	if left < prefetchFloor {
		return 1
	}
	return max(1, left/(prefetchShare*weight))
}

// nextLot is the size of the next charge by the node's demand: the lot
// doubled when the last one was spent within prefetchGrowWithin, up to
// prefetchMax. The caller holds the shard's lock.
func (h *prefetched) nextLot(now time.Time) int64 {
	if !h.charged.IsZero() && now.Sub(h.charged) < prefetchGrowWithin {
		h.lot = min(2*h.lot, prefetchMax)
	}
	return h.lot
}

// charge takes n requests' weights from the shared buckets.
func (f *Prefetch) charge(ctx context.Context, a, b Charge, n int64) (Decision, Decision, error) {
	a.Weight *= n
	if b.Key == "" {
		d, err := f.next.Allow(ctx, a.Key, a.Params, a.Weight)
		return d, Decision{Allowed: true}, err
	}
	b.Weight *= n
	return f.next.AllowBoth(ctx, a, b)
}

// keep records a charge of n requests, one of them being admitted now, and
// what the buckets had left after it. What is charged adds to what the
// node holds; it starts a new expiry only when less than a request's
// weight was held, so steady traffic cannot keep old allowance alive. What
// an entry it replaces still holds (expired, or of other Params or
// another pairing) is given back. A bucket near empty keeps no entry once
// nothing is held of it; a charge for many that a debt dropped while it
// was in flight keeps nothing, nor does a single request's charge leave an
// entry after a debt in the shard. It reports whether it gave back
// something after Flush, which the caller must then send.
func (f *Prefetch) keep(a, b Charge, n, leftA, leftB int64, now time.Time, sized sizing) (flushed bool) {
	sh := f.shard(a.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sized.from != nil && sized.from.dropped || n == 1 && sh.gen != sized.gen {
		return false
	}
	addA, addB := (n-1)*a.Weight, (n-1)*b.Weight
	old := sh.m[a.Key]
	if old != nil && old.usable(a, b, now) {
		if old.state != sized.state && n > 1 {
			// The shared limiter found it lost its state since what is
			// held was charged: that cannot be given back.
			f.back.owe(a.Key, old)
		}
		if old.a < a.Weight || old.b < b.Weight {
			old.until = now.Add(prefetchFor)
		}
		old.a += addA
		old.b += addB
		if n > 1 {
			old.state = sized.state
			sh.holds(old.until)
		}
		old.leftA, old.leftB = leftA, leftB
		old.charged = now
		return f.giveBackIfStopped(a.Key, old)
	}
	// A lot of the same bucket that expired keeps its size for the next
	// one, halved if some of it went unspent: the node's demand is lower.
	lot := int64(prefetchFirst)
	if old != nil {
		if old.pair == b.Key && old.pa == a.Params && old.pb == b.Params {
			lot = old.lot
			if old.unspent || old.a >= a.Weight || b.Key != "" && old.b >= b.Weight {
				lot = max(1, lot/2)
			}
		}
		f.back.owe(a.Key, old)
	}
	if n == 1 && (leftA < prefetchFloor || b.Key != "" && leftB < prefetchFloor) {
		delete(sh.m, a.Key)
		return false
	}
	if sh.m == nil {
		sh.m = make(map[string]*prefetched)
	}
	if len(sh.m) >= prefetchSweep {
		for k, h := range sh.m {
			if !now.Before(h.until) {
				f.back.owe(k, h)
				delete(sh.m, k)
			}
		}
	}
	h := &prefetched{
		pair: b.Key, pa: a.Params, pb: b.Params,
		a: addA, b: addB,
		until: now.Add(prefetchFor),
		leftA: leftA, leftB: leftB,
		lot:   lot,
		state: sized.state,
	}
	sh.m[a.Key] = h
	if n > 1 {
		sh.holds(h.until)
	}
	return f.giveBackIfStopped(a.Key, h)
}

// usable says whether what is held may be spent by a request of a and b
// now, and sizes its next charge: the same pairing and Params, not expired.
func (h *prefetched) usable(a, b Charge, now time.Time) bool {
	return h.pair == b.Key && h.pa == a.Params && h.pb == b.Params && now.Before(h.until)
}

// held is the decision for a request admitted from a prefetch: the bucket
// as it would be had each request been charged on its own, left units in
// it (refill since the charge not counted).
func held(c Charge, left int64) Decision {
	if c.Key == "" {
		return Decision{Allowed: true}
	}
	return Decision{Allowed: true, Limit: c.Params.Capacity, Remaining: left,
		ResetAfter: time.Duration(float64(c.Params.Capacity-left) / c.Params.RefillPerSec * 1e9)}
}

// withHeld turns the shared bucket's decision for n requests into the
// decision for the one admitted now: the other n-1 are still in the bucket
// as far as this request is concerned.
func withHeld(d Decision, c Charge, n int64) Decision {
	if c.Key == "" || n == 1 {
		return d
	}
	held := (n - 1) * c.Weight
	d.Remaining += held
	d.ResetAfter -= time.Duration(float64(held) / c.Params.RefillPerSec * 1e9)
	return d
}
