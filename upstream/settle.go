package upstream

import (
	"context"
	"sync"
	"time"
)

// A request's tokens are charged to its key's tokens bucket at an estimate
// when it is sent (pace) and corrected once its real usage is known. The
// correction is not on the request's path: it is queued here and sent to
// the limiter by Run, one Adjust per key for whatever accumulated meanwhile.
// With the shared (Redis) limiter that is one round trip fewer per request,
// and under load one per key per round trip instead of one per request.
//
// How long a correction waits depends on what it is worth. One that has
// grown to 1/settleShare of the key's burst is sent at once (within
// settleApart of the last flush): for a key paced near its limit, where a
// request's correction is a good part of the bucket, that is every one. The
// rest wait up to settleWithin for others to join them: on a key far from
// its limit they move nothing that matters, and one round trip every
// settleWithin instead of every settleApart is what a node at 1,000
// requests a second saves (about 90 of 160 Redis calls a second).
//
// A correction is counted in the bucket's units when it is queued; if the
// key's learned rate crosses a power of ten in the units (above 10 million
// a second, see limits.go) before the flush, it lands in the new units.
//
// The price is that other nodes see a correction later: a large one a
// round trip later, which there errs by one request's estimate at most
// while it is on its way; a small one up to settleWithin later, when all of
// them together are less than 1/settleShare of the burst. An attempt that
// generated nothing is refunded at once instead (refund).

// settlements are the corrections waiting for Run.
type settlements struct {
	mu      sync.Mutex
	pending []*keyEntry   // keys whose keyHealth.unsettled may be non-zero
	queued  chan struct{} // a key was queued
	large   chan struct{} // a key's correction is worth sending now
}

// Settlement timing; see above.
const (
	settleShare  = 16
	settleApart  = 10 * time.Millisecond  // the least time between two flushes
	settleWithin = 100 * time.Millisecond // the most a small correction waits
)

// Settle corrects a key's tokens bucket once the real usage of a request is
// known: the bucket was charged estimate tokens at admission, and is charged
// or refunded the difference, so pacing follows real usage. It does nothing
// for an unknown key or a key whose tokens are not paced.
//
// The correction reaches the limiter from Run, soon after (Flush sends it
// now). A limiter failure is the pool's to report: it is counted in
// PacingErrors and logged when it starts, so Settle returns nil (the error
// result remains for the callers' interface).
func (p *Pool) Settle(_ context.Context, keyID, estimate, actual int64) error {
	for _, e := range p.keys.Load().entries {
		if e.key.ID == keyID {
			p.settle(e, estimate, actual)
			return nil
		}
	}
	return nil
}

// settle is Settle for a known key.
func (p *Pool) settle(e *keyEntry, estimate, actual int64) {
	e.h.mu.Lock()
	b, ok := e.tokenBucket(estimate)
	e.h.mu.Unlock()
	if !ok {
		return
	}
	delta := b.units(actual) - b.weight
	if delta == 0 {
		return
	}
	pending := e.h.unsettled.Add(delta)
	if abs(pending) >= max(1, b.params.Capacity/settleShare) {
		signal(p.settlements.large)
	}
	// Queued only when the key had nothing pending: otherwise it is in the
	// queue already (or being flushed, and Flush sends what it finds).
	if pending != delta {
		return
	}
	p.settlements.mu.Lock()
	p.settlements.pending = append(p.settlements.pending, e)
	p.settlements.mu.Unlock()
	signal(p.settlements.queued)
}

// signal wakes whoever waits on c (buffered, one place), if nobody has yet.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// refund gives the tokens of an attempt that generated nothing back at
// once, not queued: the next attempt, maybe on this key and at once, must
// find them there. A failure is off the fast path, so the round trip is
// affordable there.
func (p *Pool) refund(ctx context.Context, e *keyEntry, estimate int64) {
	e.h.mu.Lock()
	b, ok := e.tokenBucket(estimate)
	e.h.mu.Unlock()
	if !ok {
		return
	}
	if err := p.opts.Limiter.Adjust(ctx, b.key, b.params, -b.weight); err != nil {
		if ctx.Err() == nil {
			p.limiterFailed(e, "refunding tokens", err)
		}
		return
	}
	p.limiterWorks(e)
}

// Run sends queued settlements to the limiter until ctx ends, then sends
// what is left. Every process that serves requests through the pool runs
// it once. Each flush has a context of its own, bounded in time, so the end
// of ctx never cuts one short: a settlement taken from the queue is sent.
func (p *Pool) Run(ctx context.Context) {
	flush := func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		p.Flush(fctx)
		cancel()
	}
	wait := time.NewTimer(settleWithin)
	wait.Stop()
	// pause waits d, or less when woken or when ctx ends.
	pause := func(d time.Duration, woken <-chan struct{}) {
		wait.Reset(d)
		defer wait.Stop()
		select {
		case <-wait.C:
		case <-woken:
		case <-ctx.Done():
		}
	}
	for ctx.Err() == nil {
		select {
		case <-p.settlements.queued:
			// Let small corrections gather; a large one ends the wait.
			pause(settleWithin, p.settlements.large)
			flush()
			pause(settleApart, nil)
		case <-ctx.Done():
		}
	}
	flush()
}

// Flush sends every queued settlement to the limiter now: one Adjust per
// key, for the sum of its corrections.
func (p *Pool) Flush(ctx context.Context) {
	p.settlements.mu.Lock()
	keys := p.settlements.pending
	p.settlements.pending = nil
	p.settlements.mu.Unlock()
	for _, e := range keys {
		delta := e.h.unsettled.Swap(0)
		if delta == 0 {
			continue
		}
		e.h.mu.Lock()
		b, ok := e.tokenBucket(1)
		e.h.mu.Unlock()
		if !ok {
			continue // the key's tokens are no longer paced
		}
		if err := p.opts.Limiter.Adjust(ctx, b.key, b.params, delta); err != nil {
			if ctx.Err() == nil {
				p.limiterFailed(e, "settling tokens", err)
			}
			continue
		}
		p.limiterWorks(e)
	}
}
