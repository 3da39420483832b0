package quota

import (
	"context"
	"errors"
	"fmt"
)

// The breaker of Degrading: what counts as the shared limiter being down,
// when to ask it again, and the two transitions.

// signal is a context cancelled when the breaker next opens: every shared
// call stops waiting on it then.
type signal struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newSignal() *signal {
	ctx, cancel := context.WithCancel(context.Background())
	return &signal{ctx, cancel}
}

// tryShared calls the shared limiter if the breaker lets it, bounded by the
// timeout and by the breaker opening. It reports done when the call's answer
// (or its params error) is the caller's; otherwise the caller decides
// locally.
func (d *Degrading) tryShared(ctx context.Context, call func(context.Context) error) (done bool, err error) {
	probe := d.degraded.Load()
	if probe && !d.claimProbe() {
		return false, nil
	}
	ab := d.abandon.Load()
	sctx, cancel := context.WithTimeout(ctx, d.timeout)
	stop := context.AfterFunc(ab.ctx, cancel)
	err = call(sctx)
	stop()
	cancel()
	switch {
	case err == nil:
		d.answered(probe)
		return true, nil
	case errors.Is(err, ErrInvalidParams) || errors.Is(err, ErrWeightExceedsCapacity):
		return true, err
	case ctx.Err() != nil:
		// The caller gave up or ran out of time, which says nothing about
		// the shared limiter: decide locally, leave the breaker alone.
		return false, nil
	case ab.ctx.Err() != nil:
		// Abandoned because the breaker opened while this call waited.
		return false, nil
	default:
		d.failed(err, probe)
		return false, nil
	}
}

// answered records a successful shared call: failures are no longer in a
// row, a probe closes the breaker, and what local limits admitted can now be
// charged to the shared buckets.
func (d *Degrading) answered(probe bool) {
	if d.failing.Load() != 0 {
		d.failing.Store(0)
	}
	if probe {
		d.recovered()
	}
	if d.owed.pending.Load() {
		d.reconcileSoon()
	}
}

// claimProbe lets one caller per interval through the open breaker.
func (d *Degrading) claimProbe() bool {
	next := d.nextProbe.Load()
	now := d.now().UnixNano()
	return now >= next && d.nextProbe.CompareAndSwap(next, d.probeAfter(now))
}

// probeAfter is when to probe next after a probe or an opening at now: the
// next multiple of the interval on the clock. Every node probes at the same
// instants, so the nodes return to the shared limiter together rather than
// up to an interval apart: a node back early decides from shared buckets
// that the others have not yet charged with what they spent locally.
func (d *Degrading) probeAfter(now int64) int64 {
	iv := int64(d.interval)
	return (now/iv + 1) * iv
}

// failed counts a failed shared call and opens the breaker on the
// FailuresToDegrade-th in a row.
func (d *Degrading) failed(err error, probe bool) {
	d.failures.Add(1)
	if probe {
		d.nextProbe.Store(d.probeAfter(d.now().UnixNano()))
		return
	}
	if d.degraded.Load() {
		return // a call that started before the breaker opened
	}
	if d.failing.Add(1) >= d.threshold {
		d.open(err)
	}
}

// open switches to local limits and abandons the shared calls in flight.
func (d *Degrading) open(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.degraded.Load() {
		return
	}
	now := d.now()
	d.nextProbe.Store(d.probeAfter(now.UnixNano()))
	d.owed.mu.Lock()
	d.epoch++
	d.owed.mu.Unlock()
	d.degraded.Store(true)
	d.outages.Add(1)
	d.since = now
	d.abandon.Swap(newSignal()).cancel()
	d.log.Warn(fmt.Sprintf("shared limiter unavailable; using local limits at 1/%d share", d.share.Load()),
		"nodes", d.share.Load(), "probe_interval", d.interval, "failures_in_a_row", d.failing.Load(), "err", err)
	if d.onChange != nil {
		d.onChange(true)
	}
}

// recovered closes the breaker after a successful probe. What the local
// buckets spent during the outage becomes owed to the shared ones before
// shared answers are copied into them again.
func (d *Degrading) recovered() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.degraded.Load() {
		return
	}
	owed := d.owed.closeOutage(d.epoch, d.local, d.localShare)
	d.failing.Store(0)
	d.degraded.Store(false)
	d.log.Info("shared limiter back", "degraded_for", d.now().Sub(d.since), "fallbacks_total", d.fallbacks.Load(),
		"owed_keys", owed)
	if d.onChange != nil {
		d.onChange(false)
	}
}
