// Package quota decides whether a request may proceed: per-key token buckets
// implemented as GCRA, with no HTTP and no database, so it can be tested and
// reused on its own.
//
// GCRA (generic cell rate algorithm) keeps a single number per key, the
// theoretical arrival time (TAT): the instant at which the bucket would be
// full again. Admission is one comparison and, when admitted, one
// compare-and-swap, which is what keeps the hot path lock-free in memory and a
// single round trip in Redis.
package quota

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Params are a bucket's shape: Capacity tokens of burst, refilled at RefillPerSec.
// They travel with every call rather than living in the limiter, so a tier
// change takes effect on the next request without resetting anyone's bucket.
type Params struct {
	Capacity     int64
	RefillPerSec float64
}

// Decision is the outcome of one Allow call, carrying what a caller needs to
// fill the rate-limit headers of its response.
type Decision struct {
	Allowed    bool
	Limit      int64         // = Capacity
	Remaining  int64         // whole tokens left after this call (0..Capacity)
	RetryAfter time.Duration // when rejected: wait until `weight` tokens are available; 0 when allowed
	ResetAfter time.Duration // time until the bucket is full again
}

// Limiter admits or rejects weighted requests against a per-key bucket.
// Backends (in-process, Redis) implement it so callers never learn where the
// state lives.
type Limiter interface {
	// Allow spends weight tokens from key's bucket if they are all there.
	Allow(ctx context.Context, key string, p Params, weight int64) (Decision, error)
	// AllowBoth charges two buckets (a request's rate bucket and its
	// tokens-per-minute bucket) together: both are charged or neither is,
	// so a request rejected by one bucket costs nothing in the other.
	AllowBoth(ctx context.Context, a, b Charge) (Decision, Decision, error)
	// AllowAll charges every bucket of cs together, all or none, as
	// AllowBoth does two (a request's organization buckets and its
	// token's own). The keys must differ. The decisions are in cs's order;
	// when the charge is refused none says Allowed, and RetryAfter is set
	// on each bucket that could not have taken its charge. It is one round
	// trip to a shared backend, and never prefetched.
	AllowAll(ctx context.Context, cs []Charge) ([]Decision, error)
	// Adjust settles a bucket after the fact without an admission decision:
	// delta > 0 takes more tokens (a debt, bounded at one bucket's worth
	// below empty), delta < 0 gives tokens back (never beyond full).
	Adjust(ctx context.Context, key string, p Params, delta int64) error
}

// Charge is what a request costs from one bucket.
type Charge struct {
	Key    string
	Params Params
	Weight int64
}

// ErrInvalidParams is returned when Params or the weight cannot describe a
// bucket (capacity < 1, refill <= 0 or unrepresentable, weight < 1); it points
// at a misconfigured tier or caller, never at the end user.
var ErrInvalidParams = errors.New("quota: invalid bucket params")

// ErrWeightExceedsCapacity is returned when a single request weighs more than
// the bucket can ever hold: waiting would never help, so it is an error rather
// than a rejection with a RetryAfter.
var ErrWeightExceedsCapacity = errors.New("quota: weight exceeds bucket capacity")

// maxTau bounds the burst window (Capacity / RefillPerSec) at about 73 years.
// TATs are unix nanoseconds; with tau this small, now + 2*tau (the largest
// value ever computed) cannot overflow int64 before the year 2170.
const maxTau = int64(1) << 61

// shape is Params converted to GCRA's integer form.
type shape struct {
	limit    int64 // Capacity, reported back as Decision.Limit
	interval int64 // T: nanoseconds to refill one token
	tau      int64 // burst tolerance: T * Capacity
}

// newShape validates p and weight and converts them to integer nanoseconds.
//
// T is 1e9/RefillPerSec rounded to the nearest nanosecond. Integer T keeps the
// arithmetic exact and identical in every backend; the price is a relative
// rate error of at most 0.5ns/T. That error only accumulates while a bucket
// stays saturated (a full bucket resets it), and reaches one token only after
// 2*T tokens (T in ns) of uninterrupted saturation: never in practice for rates
// up to a few thousand per second, and not at all when 1e9/RefillPerSec is a
// whole number, as it is for the default tiers (T = 2s and 200ms).
func newShape(p Params, weight int64) (shape, error) {
	if p.Capacity < 1 {
		return shape{}, fmt.Errorf("%w: capacity %d is below 1", ErrInvalidParams, p.Capacity)
	}
	// Written as !(x > 0) so that NaN is rejected too.
	if !(p.RefillPerSec > 0) {
		return shape{}, fmt.Errorf("%w: refill %v per second is not positive", ErrInvalidParams, p.RefillPerSec)
	}
	if weight < 1 {
		return shape{}, fmt.Errorf("%w: weight %d is below 1", ErrInvalidParams, weight)
	}
	// Checked in float before converting, because converting an out-of-range
	// float to int64 is implementation-defined.
	t := math.Round(1e9 / p.RefillPerSec)
	if t < 1 || t > float64(maxTau) {
		return shape{}, fmt.Errorf("%w: refill %v per second is not representable in nanoseconds", ErrInvalidParams, p.RefillPerSec)
	}
	interval := int64(t)
	if p.Capacity > maxTau/interval {
		return shape{}, fmt.Errorf("%w: burst window of %d tokens at %v per second is too long", ErrInvalidParams, p.Capacity, p.RefillPerSec)
	}
	if weight > p.Capacity {
		return shape{}, fmt.Errorf("%w: weight %d, capacity %d", ErrWeightExceedsCapacity, weight, p.Capacity)
	}
	return shape{limit: p.Capacity, interval: interval, tau: interval * p.Capacity}, nil
}

// gcra applies one request of the given weight to a bucket whose state is tat,
// at instant now (both unix nanoseconds). It returns the decision and the TAT
// to store; when the request is rejected the TAT is returned unchanged, so a
// rejection never costs tokens. It is pure so that every backend shares the
// same arithmetic and the tests can reason about it directly.
func gcra(tat, now int64, s shape, weight int64) (Decision, int64) {
	// A TAT in the past means the bucket has been full since then; the idle
	// time is not banked beyond Capacity.
	base := max(tat, now)
	next := base + weight*s.interval
	if wait := next - now - s.tau; wait > 0 {
		return Decision{
			Limit: s.limit,
			// Negative when the capacity was lowered below what is already
			// in use; nothing is left in that case.
			Remaining:  max(0, (s.tau-(base-now))/s.interval),
			RetryAfter: time.Duration(wait),
			ResetAfter: time.Duration(base - now),
		}, tat
	}
	return admitted(s, next, now), next
}

// admitted is gcra's decision for a request it admits, which leaves the TAT
// at next. Memory.Allow's fast path builds its decision with it too.
func admitted(s shape, next, now int64) Decision {
	return Decision{
		Allowed:    true,
		Limit:      s.limit,
		Remaining:  (s.tau - (next - now)) / s.interval,
		ResetAfter: time.Duration(next - now),
	}
}

// uncharged turns the decision for a request that gcra admitted into the
// decision for the same request not charged: Allowed false, the bucket as it
// was before the charge, and no RetryAfter of its own (the other bucket's
// decision carries it). Both backends use it, so their AllowBoth answers agree.
func uncharged(d Decision, s shape, weight int64) Decision {
	if d.Allowed {
		d.Allowed = false
		d.Remaining += weight
		d.ResetAfter -= time.Duration(weight * s.interval)
	}
	return d
}

// adjust moves a TAT by delta tokens: a refund never makes the bucket fuller
// than full (a TAT before now means full), and a debt never reaches more than
// one burst window beyond what a full spend would (now + 2*tau), so a wrong
// estimate cannot lock a key out for longer than twice its burst window.
func adjust(tat, now int64, s shape, delta int64) int64 {
	base := max(tat, now)
	// Clamp the shift before multiplying: a huge delta would overflow, and
	// anything beyond 2^62 ns is clamped below anyway.
	limit := (int64(1) << 62) / s.interval
	next := base + min(max(delta, -limit), limit)*s.interval
	if delta < 0 {
		return max(next, now)
	}
	return min(next, now+2*s.tau)
}

// pairShapes validates both charges of an AllowBoth before anything is
// charged, so a bad second charge never leaves the first one spent.
func pairShapes(a, b Charge) (shape, shape, error) {
	sa, err := newShape(a.Params, a.Weight)
	if err != nil {
		return shape{}, shape{}, err
	}
	sb, err := newShape(b.Params, b.Weight)
	return sa, sb, err
}

// shapeForAdjust validates p for Adjust, where any delta is allowed.
func shapeForAdjust(p Params) (shape, error) { return newShape(p, 1) }

// ErrSameKey is returned by AllowAll for a key charged twice in one call.
var ErrSameKey = errors.New("quota: one bucket charged twice in one call")

// chargeShapes validates every charge of an AllowAll before anything is
// charged, so a bad charge never leaves others spent.
func chargeShapes(cs []Charge) ([]shape, error) {
	ss := make([]shape, len(cs))
	for i, c := range cs {
		for _, prev := range cs[:i] {
			if prev.Key == c.Key {
				return nil, fmt.Errorf("%w: %q", ErrSameKey, c.Key)
			}
		}
		s, err := newShape(c.Params, c.Weight)
		if err != nil {
			return nil, err
		}
		ss[i] = s
	}
	return ss, nil
}

// decideAll is AllowAll's decision from the buckets' TATs before the call,
// as Memory.AllowAll makes it step by step: each bucket is charged in
// turn; at the first that refuses, those before it are reported uncharged
// and those after it as they stand. It reports whether all were charged.
// Both backends use it, so their answers agree.
func decideAll(now int64, tats []int64, ss []shape, cs []Charge) ([]Decision, bool) {
	ds := make([]Decision, len(cs))
	for i := range cs {
		ds[i], _ = gcra(tats[i], now, ss[i], cs[i].Weight)
		if ds[i].Allowed {
			continue
		}
		for j := range i {
			ds[j] = uncharged(ds[j], ss[j], cs[j].Weight)
		}
		for j := i + 1; j < len(cs); j++ {
			d, _ := gcra(tats[j], now, ss[j], cs[j].Weight)
			ds[j] = uncharged(d, ss[j], cs[j].Weight)
		}
		return ds, false
	}
	return ds, true
}
