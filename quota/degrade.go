package quota

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Degrading is the Limiter a gateway uses when it has shared state: it asks
// the shared limiter (Redis) while that answers, and when it does not it
// keeps serving from an in-process Memory at a per-node share of every
// bucket, so losing Redis degrades to per-node limits, never to no limits and
// never to an outage.
//
// # What counts as down
//
// A call fails when it errors or runs past Timeout. One failed call is not an
// outage (a node at full CPU, a connection reset, a slow dial): that request
// alone is decided from the node's local share. Failures in a row
// (FailuresToDegrade, with no answer between them) are: the breaker opens,
// the calls still waiting for the shared limiter are abandoned at once, and
// from then on the shared limiter is left alone except for one probe per
// ProbeInterval, a real request sent to it as usual. The first probe that
// succeeds closes the breaker and shared limits apply again. Each transition
// is logged once and reported to OnStateChange; single failures are only
// counted (Failures, Fallbacks).
//
// # Switching without a second burst
//
// Every answer from the shared limiter is copied into the local bucket of
// the same key (its time until full; see Memory.raise), so local limits
// start where the shared bucket was rather than full. What local limits
// admit is owed to the shared bucket: once the shared limiter answers again,
// it is charged to the shared bucket in the background (Adjust), so the
// shared bucket does not hand out again what the nodes spent without it.
// (The Redis limiter sends each call's deadline, so a call that a frozen
// server runs after it was abandoned changes nothing: see ErrLate.)
//
// Errors about the request itself (ErrInvalidParams,
// ErrWeightExceedsCapacity) are returned as they are, from either backend:
// they are not outages. Degrading fails open only from shared to local
// limits; it has nothing to do with authentication, which must never fail
// open.
type Degrading struct {
	shared    Limiter
	local     *Memory
	expected  int64        // DegradingOptions.Share: the least share
	share     atomic.Int64 // the share in force: max(expected, the nodes last seen)
	timeout   time.Duration
	interval  time.Duration
	threshold int32
	now       func() time.Time
	log       *slog.Logger
	onChange  func(degraded bool)
	spawn     func(func()) // runs a reconciliation; a goroutine unless a test says otherwise

	degraded   atomic.Bool
	failing    atomic.Int32 // shared calls failed in a row
	nextProbe  atomic.Int64 // unix ns; while degraded, no probe before it
	fallbacks  atomic.Uint64
	failures   atomic.Uint64
	reconciled atomic.Int64           // tokens charged to shared buckets for local decisions
	outages    atomic.Uint64          // switches to local limits
	abandon    atomic.Pointer[signal] // cancelled when the breaker opens
	owed       owedLedger

	mu    sync.Mutex // serialises transitions, so callbacks arrive in order
	since time.Time  // when the current outage began; guarded by mu
	epoch uint64     // outages so far; guarded by mu, read under owed.mu
}

var _ Limiter = (*Degrading)(nil)

// DegradingOptions configure NewDegrading. The zero value is usable.
type DegradingOptions struct {
	// Share is the number of gateway instances expected to share the limits
	// (SLUICE_EXPECTED_NODES). While degraded each instance allows 1/Share of
	// every bucket: Capacity/Share rounded up, and RefillPerSec/Share. Values
	// below 1 mean 1.
	Share int
	// Timeout bounds each call to the shared limiter; 0 means
	// DefaultSharedTimeout. The shared limiter must honour ctx deadlines
	// (see NewRedis).
	Timeout time.Duration
	// FailuresToDegrade is how many shared calls must fail in a row, with
	// no answer between them, before the node switches to local limits; 0
	// means DefaultFailuresToDegrade.
	FailuresToDegrade int
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
	DefaultSharedTimeout     = 500 * time.Millisecond
	DefaultFailuresToDegrade = 3
	// A quarter second, not a second: after a restart, go-redis refuses new
	// connections until its own dialer, retrying once a second, gets one;
	// probing once a second as well put a node's return up to 3 s after
	// the restart (TestFaultRedisKilled, once in four CI runs).
	DefaultProbeInterval = 250 * time.Millisecond
)

// NewDegrading wraps shared with local as its fallback. A nil local means a
// new Memory on opts.Now.
func NewDegrading(shared Limiter, local *Memory, opts DegradingOptions) *Degrading {
	d := &Degrading{
		shared:    shared,
		local:     local,
		expected:  int64(max(opts.Share, 1)),
		timeout:   opts.Timeout,
		interval:  opts.ProbeInterval,
		threshold: int32(min(max(opts.FailuresToDegrade, 0), 1000)),
		now:       opts.Now,
		log:       opts.Logger,
		onChange:  opts.OnStateChange,
		spawn:     func(f func()) { go f() },
	}
	d.share.Store(d.expected)
	if d.timeout <= 0 {
		d.timeout = DefaultSharedTimeout
	}
	if d.interval <= 0 {
		d.interval = DefaultProbeInterval
	}
	if d.threshold == 0 {
		d.threshold = DefaultFailuresToDegrade
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
	d.abandon.Store(newSignal())
	return d
}

// LimiterStatus says where a node's bucket state lives, for admins: "local"
// (in process, no Redis), "shared" (Redis) or "degraded" (Redis configured
// but unreachable: local shares of each limit), and the node count those
// shares assume (SLUICE_EXPECTED_NODES, or the nodes seen lately when more).
type LimiterStatus struct {
	Mode  string `json:"mode"`
	Nodes int    `json:"nodes"`
}

// ObserveNodes tells the limiter how many nodes were last seen sharing the
// limits (cluster.Presence): while degraded each keeps 1/n of every limit,
// so that together they allow no more than the whole, and never more than
// 1/Share (SLUICE_EXPECTED_NODES, the least). It is only learnt while
// Redis answers, so an outage keeps the count from before it.
func (d *Degrading) ObserveNodes(n int) { d.share.Store(max(d.expected, int64(n))) }

// Share is the n of the 1/n of every limit the node keeps while degraded.
func (d *Degrading) Share() int { return int(d.share.Load()) }

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
// since the start: while degraded, and single requests whose shared call
// failed.
func (d *Degrading) Fallbacks() uint64 { return d.fallbacks.Load() }

// Failures is how many shared calls have failed (errors and timeouts, probes
// included), since the start.
func (d *Degrading) Failures() uint64 { return d.failures.Load() }

// Outages is how many times the node has switched to local limits, since
// the start.
func (d *Degrading) Outages() uint64 { return d.outages.Load() }

// Reconciled is how many tokens local decisions have been charged to the
// shared buckets after the fact, since the start.
func (d *Degrading) Reconciled() int64 { return d.reconciled.Load() }

// Unavailable switches to local limits at once, as FailuresToDegrade failed
// calls would: for a node that found the shared limiter unreachable before
// serving anything (see Redis.Warm), so its first requests do not each wait
// for a timeout.
func (d *Degrading) Unavailable(err error) { d.open(err) }

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
		if err == nil {
			d.mirror(key, dec)
		}
		return dec, err
	}
	d.fallbacks.Add(1)
	outage := d.beforeLocal(key, p)
	lp, lw := d.localShare(p, weight)
	dec, err := d.local.Allow(ctx, key, lp, lw)
	if err == nil && dec.Allowed && !outage {
		d.owed.add(key, p, weight)
	}
	return dec, err
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
		if err == nil {
			d.mirror(a.Key, da)
			d.mirror(b.Key, db)
		}
		return da, db, err
	}
	d.fallbacks.Add(1)
	outage := d.beforeLocal(a.Key, a.Params)
	d.beforeLocal(b.Key, b.Params)
	la, lb := a, b
	la.Params, la.Weight = d.localShare(a.Params, a.Weight)
	lb.Params, lb.Weight = d.localShare(b.Params, b.Weight)
	da, db, err := d.local.AllowBoth(ctx, la, lb)
	if err == nil && da.Allowed && db.Allowed && !outage {
		d.owed.add(a.Key, a.Params, a.Weight)
		d.owed.add(b.Key, b.Params, b.Weight)
	}
	return da, db, err
}

// AllowAll decides with the shared limiter, or with the local shares of
// every bucket.
func (d *Degrading) AllowAll(ctx context.Context, cs []Charge) ([]Decision, error) {
	if _, err := chargeShapes(cs); err != nil {
		return nil, err
	}
	var ds []Decision
	if done, err := d.tryShared(ctx, func(ctx context.Context) (err error) {
		ds, err = d.shared.AllowAll(ctx, cs)
		return err
	}); done {
		if err == nil {
			for i, c := range cs {
				d.mirror(c.Key, ds[i])
			}
		}
		return ds, err
	}
	d.fallbacks.Add(1)
	local := make([]Charge, len(cs))
	outage := false
	for i, c := range cs {
		if d.beforeLocal(c.Key, c.Params) {
			outage = true
		}
		local[i] = c
		local[i].Params, local[i].Weight = d.localShare(c.Params, c.Weight)
	}
	ds, err := d.local.AllowAll(ctx, local)
	if err == nil && !outage && ds[0].Allowed { // all or none were charged
		for _, c := range cs {
			d.owed.add(c.Key, c.Params, c.Weight)
		}
	}
	return ds, err
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
	outage := d.beforeLocal(key, p)
	lp, _ := d.localShare(p, 1)
	if err := d.local.Adjust(ctx, key, lp, delta); err != nil {
		return err
	}
	if !outage {
		d.owed.add(key, p, delta)
	}
	return nil
}

// mirror copies a shared answer into the local bucket of the same key, so
// that local limits, if they take over, start from it. Answers that arrive
// while degraded (calls that started before the breaker opened) are left out:
// the local buckets are deciding then.
func (d *Degrading) mirror(key string, dec Decision) {
	if !d.degraded.Load() {
		d.local.raise(key, dec.ResetAfter)
	}
}

// beforeLocal prepares a local decision for key and reports whether it is
// made during an outage; if so the key's local state is noted once per
// outage, so that what it spends can be told apart when the outage ends.
func (d *Degrading) beforeLocal(key string, p Params) (outage bool) {
	if !d.degraded.Load() {
		return false
	}
	d.owed.noteOutage(key, p, d)
	return true
}

// localShare is this node's share of a bucket while degraded, and the weight
// to charge against it. A request heavier than the share (but no heavier than
// the whole bucket, which newShape has checked) is charged the whole share, so
// it is admitted when this node's bucket is full rather than failing with
// ErrWeightExceedsCapacity. If the share cannot be represented (a refill too
// slow once divided), the whole bucket is used instead.
func (d *Degrading) localShare(p Params, weight int64) (Params, int64) {
	share := d.share.Load()
	if share == 1 {
		return p, weight
	}
	lp := Params{
		Capacity:     p.Capacity/share + min(p.Capacity%share, 1),
		RefillPerSec: p.RefillPerSec / float64(share),
	}
	if _, err := newShape(lp, 1); err != nil {
		return p, weight
	}
	return lp, min(weight, lp.Capacity)
}

// refundState is the shared limiter's, if it tells stale give-backs apart
// (see refunder); 0 otherwise.
func (d *Degrading) refundState() uint64 {
	if r, ok := d.shared.(refunder); ok {
		return r.refundState()
	}
	return 0
}

// errNotGivenBack is Degrading's answer to a give-back the shared limiter
// did not take: it is down, or the call failed.
var errNotGivenBack = errors.New("quota: the shared limiter did not answer; nothing was given back")

// refund gives back to the shared bucket what a Prefetch was charged for
// and did not spend. Unlike Adjust it never falls back to the local bucket
// nor owes anything: units given back during an outage or by a call that
// failed are lost, the safe side (a give-back owed and charged later could
// land after Redis lost its state).
func (d *Degrading) refund(ctx context.Context, key string, p Params, units int64, state uint64) error {
	if _, err := shapeForAdjust(p); err != nil || units <= 0 {
		return err
	}
	if state != d.refundState() {
		return errStale
	}
	if d.degraded.Load() {
		return errNotGivenBack
	}
	r, _ := d.shared.(refunder)
	var stale bool
	done, err := d.tryShared(ctx, func(ctx context.Context) error {
		if r == nil {
			return d.shared.Adjust(ctx, key, p, -units)
		}
		err := r.refund(ctx, key, p, units, state)
		if errors.Is(err, errStale) {
			stale = true // Redis answered: not a failure of the shared limiter
			return nil
		}
		return err
	})
	switch {
	case !done && err == nil:
		return errNotGivenBack
	case stale:
		return errStale
	}
	return err
}
