package quota

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Degrading is the Limiter a gateway uses when it has shared state: it asks
// the shared limiter (Redis) while that answers, and when it errors or times
// out it keeps serving from an in-process Memory at a per-node share of every
// bucket, so losing Redis degrades to per-node limits, never to no limits and
// never to an outage.
//
// A failed call opens a breaker: while it is open the shared limiter is left
// alone except for one probe per ProbeInterval, a real request sent to it as
// usual; the first probe that succeeds closes the breaker and shared limits
// apply again. Each transition is logged once and reported to OnStateChange.
//
// Errors about the request itself (ErrInvalidParams,
// ErrWeightExceedsCapacity) are returned as they are, from either backend:
// they are not outages. Degrading fails open only from shared to local
// limits; it has nothing to do with authentication, which must never fail
// open.
type Degrading struct {
	shared   Limiter
	local    *Memory
	share    int64
	timeout  time.Duration
	interval time.Duration
	now      func() time.Time
	log      *slog.Logger
	onChange func(degraded bool)

	degraded  atomic.Bool
	nextProbe atomic.Int64 // unix ns; while degraded, no probe before it
	fallbacks atomic.Uint64

	mu    sync.Mutex // serialises transitions, so callbacks arrive in order
	since time.Time  // when the current outage began; guarded by mu
}

var _ Limiter = (*Degrading)(nil)

// DegradingOptions configure NewDegrading. The zero value is usable.
type DegradingOptions struct {
	// Share is the number of gateway instances expected to share the limits
	// (SLUICE_EXPECTED_NODES). While degraded each instance allows 1/Share of
	// every bucket: Capacity/Share rounded up, and RefillPerSec/Share. Values
	// below 1 mean 1.
	Share int
	// Timeout bounds each call to the shared limiter; 0 means 50ms. The
	// shared limiter must honour ctx deadlines (see NewRedis).
	Timeout time.Duration
	// ProbeInterval is how often, while degraded, one request tries the
	// shared limiter again; 0 means 1s.
	ProbeInterval time.Duration
	// Now is the clock for probe scheduling; nil means time.Now.
	Now func() time.Time
	// Logger gets one line per transition; nil discards them.
	Logger *slog.Logger
	// OnStateChange, if set, is called after each transition with the new
	// state (true: degraded), in order, e.g. to set a metrics gauge. It must
	// be quick and must not call back into the Degrading.
	OnStateChange func(degraded bool)
}

// Defaults for DegradingOptions.
const (
	DefaultSharedTimeout = 50 * time.Millisecond
	DefaultProbeInterval = time.Second
)

// NewDegrading wraps shared with local as its fallback. A nil local means a
// new Memory on opts.Now.
func NewDegrading(shared Limiter, local *Memory, opts DegradingOptions) *Degrading {
	d := &Degrading{
		shared:   shared,
		local:    local,
		share:    int64(max(opts.Share, 1)),
		timeout:  opts.Timeout,
		interval: opts.ProbeInterval,
		now:      opts.Now,
		log:      opts.Logger,
		onChange: opts.OnStateChange,
	}
	if d.timeout <= 0 {
		d.timeout = DefaultSharedTimeout
	}
	if d.interval <= 0 {
		d.interval = DefaultProbeInterval
	}
	if d.now == nil {
		d.now = time.Now
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if d.local == nil {
		d.local = NewMemory(opts.Now)
	}
	return d
}

// LimiterStatus says where a node's bucket state lives, for admins: "local"
// (in process, no Redis), "shared" (Redis) or "degraded" (Redis configured
// but unreachable: local shares of each limit), and the node count those
// shares assume.
type LimiterStatus struct {
	Mode  string `json:"mode"`
	Nodes int    `json:"expected_nodes"`
}

// State is "shared" while the shared limiter decides and "degraded" while
// local limits do.
func (d *Degrading) State() string {
	if d.degraded.Load() {
		return "degraded"
	}
	return "shared"
}

// Degraded reports whether local limits are in force.
func (d *Degrading) Degraded() bool { return d.degraded.Load() }

// Fallbacks is how many Allow and AllowBoth calls local limits have decided,
// since the start.
func (d *Degrading) Fallbacks() uint64 { return d.fallbacks.Load() }

// Allow decides with the shared limiter, or with the local share of p.
func (d *Degrading) Allow(ctx context.Context, key string, p Params, weight int64) (Decision, error) {
	if _, err := newShape(p, weight); err != nil {
		return Decision{}, err
	}
	var dec Decision
	if done, err := d.tryShared(ctx, func(ctx context.Context) (err error) {
		dec, err = d.shared.Allow(ctx, key, p, weight)
		return err
	}); done {
		return dec, err
	}
	d.fallbacks.Add(1)
	lp, lw := d.localShare(p, weight)
	return d.local.Allow(ctx, key, lp, lw)
}

// AllowBoth decides with the shared limiter, or with the local shares of
// both buckets.
func (d *Degrading) AllowBoth(ctx context.Context, a, b Charge) (Decision, Decision, error) {
	if _, err := newShape(a.Params, a.Weight); err != nil {
		return Decision{}, Decision{}, err
	}
	if _, err := newShape(b.Params, b.Weight); err != nil {
		return Decision{}, Decision{}, err
	}
	var da, db Decision
	if done, err := d.tryShared(ctx, func(ctx context.Context) (err error) {
		da, db, err = d.shared.AllowBoth(ctx, a, b)
		return err
	}); done {
		return da, db, err
	}
	d.fallbacks.Add(1)
	a.Params, a.Weight = d.localShare(a.Params, a.Weight)
	b.Params, b.Weight = d.localShare(b.Params, b.Weight)
	return d.local.AllowBoth(ctx, a, b)
}

// Adjust settles the bucket where decisions are currently made.
func (d *Degrading) Adjust(ctx context.Context, key string, p Params, delta int64) error {
	if _, err := shapeForAdjust(p); err != nil || delta == 0 {
		return err
	}
	if done, err := d.tryShared(ctx, func(ctx context.Context) error {
		return d.shared.Adjust(ctx, key, p, delta)
	}); done {
		return err
	}
	lp, _ := d.localShare(p, 1)
	return d.local.Adjust(ctx, key, lp, delta)
}

// tryShared calls the shared limiter if the breaker lets it, bounded by the
// timeout. It reports done when the call's answer (or its params error) is
// the caller's; otherwise the caller decides locally.
func (d *Degrading) tryShared(ctx context.Context, call func(context.Context) error) (done bool, err error) {
	probe := d.degraded.Load()
	if probe && !d.claimProbe() {
		return false, nil
	}
	sctx, cancel := context.WithTimeout(ctx, d.timeout)
	err = call(sctx)
	cancel()
	switch {
	case err == nil:
		if probe {
			d.recovered()
		}
		return true, nil
	case errors.Is(err, ErrInvalidParams) || errors.Is(err, ErrWeightExceedsCapacity):
		return true, err
	case ctx.Err() != nil:
		// The caller gave up or ran out of time, which says nothing about
		// the shared limiter: decide locally, leave the breaker alone.
		return false, nil
	default:
		d.failed(err)
		return false, nil
	}
}

// claimProbe lets one caller per interval through the open breaker.
func (d *Degrading) claimProbe() bool {
	next := d.nextProbe.Load()
	now := d.now().UnixNano()
	return now >= next && d.nextProbe.CompareAndSwap(next, now+int64(d.interval))
}

// failed opens the breaker (or keeps it open) after a shared call failed.
func (d *Degrading) failed(err error) {
	now := d.now()
	d.nextProbe.Store(now.UnixNano() + int64(d.interval))
	if d.degraded.Load() {
		return // a failed probe, or a call that started before the breaker opened
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.degraded.Load() {
		return
	}
	d.degraded.Store(true)
	d.since = now
	d.log.Warn(fmt.Sprintf("shared limiter unavailable; using local limits at 1/%d share", d.share),
		"expected_nodes", d.share, "probe_interval", d.interval, "err", err)
	if d.onChange != nil {
		d.onChange(true)
	}
}

// recovered closes the breaker after a successful probe.
func (d *Degrading) recovered() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.degraded.Load() {
		return
	}
	d.degraded.Store(false)
	d.log.Info("shared limiter back", "degraded_for", d.now().Sub(d.since), "fallbacks_total", d.fallbacks.Load())
	if d.onChange != nil {
		d.onChange(false)
	}
}

// localShare is this node's share of a bucket while degraded, and the weight
// to charge against it. A request heavier than the share (but no heavier than
// the whole bucket, which newShape has checked) is charged the whole share, so
// it is admitted when this node's bucket is full rather than failing with
// ErrWeightExceedsCapacity. If the share cannot be represented (a refill too
// slow once divided), the whole bucket is used instead.
func (d *Degrading) localShare(p Params, weight int64) (Params, int64) {
	if d.share == 1 {
		return p, weight
	}
	lp := Params{
		Capacity:     p.Capacity/d.share + min(p.Capacity%d.share, 1),
		RefillPerSec: p.RefillPerSec / float64(d.share),
	}
	if _, err := newShape(lp, 1); err != nil {
		return p, weight
	}
	return lp, min(weight, lp.Capacity)
}
