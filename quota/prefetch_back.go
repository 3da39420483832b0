package quota

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// What a Prefetch gives back: the lots that expired unspent, found by Run's
// sweep; the entries keep replaces; and all it holds when the node stops
// (Flush).

// refunder is a Limiter that gives back what a Prefetch was charged for
// and did not spend, and can tell that what was charged may have been lost
// since: Redis after a restart, a failover or SCRIPT FLUSH, where every
// bucket is full again. Degrading passes it through to the shared limiter.
type refunder interface {
	// refundState changes whenever the limiter finds that what was charged
	// to it before may have been lost. A Prefetch reads it before each
	// charge for many.
	refundState() uint64
	// refund gives back units of key's bucket charged under p while the
	// state was state, or returns errStale, changing nothing, if the state
	// has changed since.
	refund(ctx context.Context, key string, p Params, units int64, state uint64) error
}

// errStale is a refunder's answer to a give-back of units charged before it
// found it had lost its state: they are not given back.
var errStale = errors.New("quota: not given back: charged before the shared limiter lost its state")

// backKey is one give-back call: a bucket, the Params its units were
// charged under, and the shared limiter's state then.
type backKey struct {
	key   string
	p     Params
	state uint64
}

// givingBack is what a Prefetch has taken out of what it holds and not yet
// given back, per backKey.
type givingBack struct {
	mu   sync.Mutex
	owed map[backKey]int64
	some atomic.Bool // owed is not empty: a debt need not take mu when it is
}

// owe moves what h holds into the queue, both buckets of a pair, and marks
// the lot as not spent in full. The caller holds h's shard's lock, so that
// no unit is both spent and given back, or given back twice.
func (g *givingBack) owe(key string, h *prefetched) {
	if h.a <= 0 && h.b <= 0 {
		return
	}
	g.mu.Lock()
	if g.owed == nil {
		g.owed = make(map[backKey]int64)
	}
	if h.a > 0 {
		g.owed[backKey{key, h.pa, h.state}] += h.a
	}
	if h.b > 0 {
		g.owed[backKey{h.pair, h.pb, h.state}] += h.b
	}
	g.some.Store(true)
	g.mu.Unlock()
	h.a, h.b, h.unspent = 0, 0, true
}

// forget drops what was to be given back of key's bucket (a debt).
func (g *givingBack) forget(key string) {
	if !g.some.Load() {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for k := range g.owed {
		if k.key == key {
			delete(g.owed, k)
		}
	}
	g.some.Store(len(g.owed) > 0)
}

// take empties the queue.
func (g *givingBack) take() map[backKey]int64 {
	if !g.some.Load() {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	owed := g.owed
	g.owed = nil
	g.some.Store(false)
	return owed
}

// holds notes that an entry holding units expires at until.
func (sh *prefetchShard) holds(until time.Time) {
	if sh.expires.IsZero() || until.Before(sh.expires) {
		sh.expires = until
	}
}

// state is the shared limiter's state (see refunder), 0 if it has none.
func (f *Prefetch) state() uint64 {
	if f.refunds == nil {
		return 0
	}
	return f.refunds.refundState()
}

// giveBackIfStopped gives back what h holds after Flush, reporting whether
// there was any. The caller holds the shard's lock.
func (f *Prefetch) giveBackIfStopped(key string, h *prefetched) bool {
	if !f.stopped.Load() || h.a <= 0 && h.b <= 0 {
		return false
	}
	f.back.owe(key, h)
	return true
}

// Run gives back what is left of the lots that expire, every
// prefetchSweepEvery until ctx ends: start it with the node's workers.
// Flush gives back the rest when the node stops.
func (f *Prefetch) Run(ctx context.Context) {
	t := time.NewTicker(prefetchSweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.sweep(f.now())
		// Not cut short by ctx: a give-back under way lands or fails on the
		// limiter's own deadline (Degrading's), it is not lost halfway.
		_ = f.sendBack(context.WithoutCancel(ctx))
	}
}

// sweep takes what is left of the lots expired at now into the queue.
func (f *Prefetch) sweep(now time.Time) {
	for i := range f.shards {
		sh := &f.shards[i]
		sh.mu.Lock()
		if !sh.expires.IsZero() && !now.Before(sh.expires) {
			var next time.Time
			for k, h := range sh.m {
				switch {
				case h.a <= 0 && h.b <= 0:
				case !now.Before(h.until):
					f.back.owe(k, h)
				case next.IsZero() || h.until.Before(next):
					next = h.until
				}
			}
			sh.expires = next
		}
		sh.mu.Unlock()
	}
}

// Flush stops prefetching and gives back all the node holds: call it when
// the node stops, after its last request. From then on each request is
// charged on its own, and what a charge for many still on its way brings
// is given back when it lands. It returns what could not be given back.
func (f *Prefetch) Flush(ctx context.Context) error {
	f.stopped.Store(true)
	for i := range f.shards {
		sh := &f.shards[i]
		sh.mu.Lock()
		for k, h := range sh.m {
			f.back.owe(k, h)
		}
		sh.expires = time.Time{}
		sh.mu.Unlock()
	}
	return f.sendBack(ctx)
}

// GivenBack is how many units the node has given back to the shared
// buckets since it started (for a metric).
func (f *Prefetch) GivenBack() int64 { return f.given.Load() }

// NotGivenBack is how many units the node was charged for in advance, did
// not spend, and could not give back since it started: the call failed or
// came late, or the shared limiter had lost its state since the charge
// (for a metric). Each is allowance lost to the cluster, the safe side.
func (f *Prefetch) NotGivenBack() int64 { return f.lost.Load() }

// sendBack gives back what is queued, one call per bucket and Params.
// What fails is not tried again: lost allowance is the safe side.
func (f *Prefetch) sendBack(ctx context.Context) error {
	var errs []error
	for k, units := range f.back.take() {
		var err error
		if f.refunds != nil {
			err = f.refunds.refund(ctx, k.key, k.p, units, k.state)
		} else {
			err = f.next.Adjust(ctx, k.key, k.p, -units)
		}
		if err == nil {
			f.given.Add(units)
			continue
		}
		f.lost.Add(units)
		if !errors.Is(err, errStale) {
			errs = append(errs, fmt.Errorf("quota: giving back %d of %q: %w", units, k.key, err))
		}
	}
	return errors.Join(errs...)
}

var (
	_ refunder = (*Redis)(nil)
	_ refunder = (*Degrading)(nil)
)
