package upstream

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// breaker is one key's circuit breaker. Closed, it records the outcome of
// each attempt; enough consecutive failures, or a high enough failure share
// over the recent window, open it. Open, it refuses every request until the
// cool-down ends, then lets exactly one request through as a probe: a probe
// that reaches the provider closes it, a probe that fails opens it again.
// It is not safe for concurrent use; keyHealth guards it.
type breaker struct {
	opts        BreakerOptions
	consecutive int
	ring        []bool // recent outcomes, true = failure
	next        int    // ring index of the next outcome
	samples     int    // outcomes in ring
	fails       int    // failures in ring
	open        bool
	until       time.Time // end of the cool-down while open
	probing     bool      // the probe is in flight
	reason      string    // why it opened
}

func newBreaker(o BreakerOptions) breaker {
	return breaker{opts: o, ring: make([]bool, o.Window)}
}

// acquire reports whether a request may use the key at now, and whether
// that request is the probe of an open breaker. A probe must end with
// success, failure or release.
func (b *breaker) acquire(now time.Time) (ok, probe bool) {
	switch {
	case !b.open:
		return true, false
	case b.probing || now.Before(b.until):
		return false, false
	}
	b.probing = true
	return true, true
}

// release gives back a probe that was never sent.
func (b *breaker) release(probe bool) {
	if probe {
		b.probing = false
	}
}

// success records an attempt the provider answered. A probe's answer closes
// the breaker; a late answer to a request sent before it opened does not.
func (b *breaker) success(probe bool) {
	switch {
	case probe:
		*b = newBreaker(b.opts)
	case !b.open:
		b.consecutive = 0
		b.record(false)
	}
}

// failure records a failed attempt and reports whether it opened the
// breaker, and why.
func (b *breaker) failure(now time.Time, what string, probe bool) (opened bool, reason string) {
	switch {
	case probe:
		b.trip(now, "probe failed: "+what)
		return true, b.reason
	case b.open:
		return false, "" // sent before it opened; the cool-down already runs
	}
	b.consecutive++
	b.record(true)
	switch {
	case b.consecutive >= b.opts.Failures:
		b.trip(now, fmt.Sprintf("%d consecutive failures, last: %s", b.consecutive, what))
	case b.samples >= b.opts.MinSamples && float64(b.fails) >= b.opts.ErrorRate*float64(b.samples):
		b.trip(now, fmt.Sprintf("%d of the last %d attempts failed, last: %s", b.fails, b.samples, what))
	default:
		return false, ""
	}
	return true, b.reason
}

func (b *breaker) record(failed bool) {
	if b.samples == len(b.ring) {
		if b.ring[b.next] {
			b.fails--
		}
	} else {
		b.samples++
	}
	b.ring[b.next] = failed
	if failed {
		b.fails++
	}
	b.next = (b.next + 1) % len(b.ring)
}

// trip opens the breaker for a cool-down with a fresh window, so the
// failures that opened it do not count again after the probe closes it.
func (b *breaker) trip(now time.Time, reason string) {
	*b = newBreaker(b.opts)
	b.open, b.until, b.reason = true, now.Add(b.opts.CoolDown), reason
}

// keyHealth is everything the pool learns about a key at run time. It
// outlives a SetKeys that keeps the key, and in-flight requests update it
// even after the key was removed.
type keyHealth struct {
	inFlight atomic.Int64 // attempts sent and not finished (a stream until it is closed)

	mu         sync.Mutex
	br         breaker
	disabled   string    // non-empty: the reason the key is disabled
	coolUntil  time.Time // the provider asked to rest the key (429, Retry-After)
	coolReason string
	pacedUntil time.Time // the key's buckets were empty until then (status only)
	requests   int64
	failures   int64
	lastStatus int

	// What the provider's headers taught this node about the key's limits
	// (limits.go).
	req, tok dim
	// limiterFailing is set while the limiter fails for this key's
	// buckets, so the change is logged once, not every request.
	limiterFailing bool

	// unsettled is the key's tokens-bucket correction (in the bucket's
	// units, > 0 a debt, < 0 a refund) queued for Pool.Flush (settle.go).
	unsettled atomic.Int64
}

func newKeyHealth(o BreakerOptions) *keyHealth {
	return &keyHealth{br: newBreaker(o)}
}

// reset puts the key back in rotation, keeping its counters.
func (h *keyHealth) reset(o BreakerOptions) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.br = newBreaker(o)
	h.disabled, h.coolUntil, h.coolReason, h.pacedUntil = "", time.Time{}, "", time.Time{}
}

// configure sets the key's configured limits; forget also drops what the
// provider said (the key now points at another account).
func (h *keyHealth) configure(rpm, tpm int64, forget bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if forget {
		h.req, h.tok = dim{}, dim{}
	}
	h.req.configured, h.tok.configured = rpm, tpm
}

// usable is the check selection starts with: whether the key could
// take a request of estimate tokens now (ignoring its buckets), and if not,
// whether it is only resting until cool (a wait that may be worth it): a
// rest the provider asked for, or its last answers saying it has not
// refilled enough yet.
func (h *keyHealth) usable(now time.Time, estimate int64) (ok bool, cool time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.disabled != "":
		return false, 0
	case h.br.open && (h.br.probing || now.Before(h.br.until)):
		return false, 0
	case h.coolUntil.After(now):
		return false, h.coolUntil.Sub(now)
	}
	if wait := max(h.req.providerWait(now, 1), h.tok.providerWait(now, max(1, estimate))); wait > 0 {
		if until := now.Add(wait); until.After(h.pacedUntil) {
			h.pacedUntil = until // for the status page
		}
		return false, wait
	}
	return true, 0
}

// claim takes the key for one attempt if it is still usable, taking the
// breaker's probe if the cool-down has ended.
func (h *keyHealth) claim(now time.Time) (ok, probe bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.disabled != "" || h.coolUntil.After(now) {
		return false, false
	}
	return h.br.acquire(now)
}

// unclaim gives the key back when its buckets refused the attempt.
func (h *keyHealth) unclaim(probe bool, pacedUntil time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.br.release(probe)
	if pacedUntil.After(h.pacedUntil) {
		h.pacedUntil = pacedUntil
	}
}

// sent counts an attempt about to go out.
func (h *keyHealth) sent() {
	h.inFlight.Add(1)
	h.mu.Lock()
	h.requests++
	h.mu.Unlock()
}

// abandoned ends an attempt that says nothing about the key: the caller went
// away, or the request could not be built.
func (h *keyHealth) abandoned(probe bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.br.release(probe)
}

// answered records a provider answer that shows the key works: a 2xx, or a
// 4xx about the request itself (recorded neither as success nor failure
// unless it is the probe).
func (h *keyHealth) answered(status int, probe, healthy bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastStatus = status
	if healthy || probe {
		h.br.success(probe)
	}
}

// failed records a failed attempt (5xx, 408, 409, timeout, connection error,
// stall) and rests the key for cool if the provider said so. It reports
// whether the breaker opened, and why.
func (h *keyHealth) failed(now time.Time, status int, what string, probe bool, cool time.Duration) (opened bool, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failures++
	if status != 0 {
		h.lastStatus = status
	}
	if cool > 0 {
		h.rest(now, cool, fmt.Sprintf("provider asked to retry after %s (%s)", cool, what))
	}
	return h.br.failure(now, what, probe)
}

// rateLimited records a 429: the key rests for cool but its breaker is left
// alone (the provider is up, just busy), and a probe that met it closes it.
func (h *keyHealth) rateLimited(now time.Time, cool time.Duration, probe bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failures++
	h.lastStatus = 429
	h.rest(now, cool, fmt.Sprintf("rate limited by the provider (429) for %s", cool))
	if probe {
		h.br.success(true)
	}
}

func (h *keyHealth) rest(now time.Time, cool time.Duration, reason string) {
	if until := now.Add(cool); until.After(h.coolUntil) {
		h.coolUntil, h.coolReason = until, reason
	}
}

// refused records a 401/403; it reports whether this disabled the key (the
// first refusal does, later ones in flight at the same time do not).
func (h *keyHealth) refused(status int, reason string, probe bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failures++
	h.lastStatus = status
	h.br.release(probe)
	if h.disabled != "" {
		return false
	}
	h.disabled = reason
	return true
}

// disable takes the key out of rotation without an attempt (bad config).
func (h *keyHealth) disable(reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.disabled = reason
}

// status is the key's state as admins see it (ID and Name are the caller's).
func (h *keyHealth) status(now time.Time) KeyStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := KeyStatus{State: Healthy, Requests: h.requests, Failures: h.failures, LastStatus: h.lastStatus,
		RequestLimits: h.req.limits(1), TokenLimits: h.tok.limits(max(1, h.tok.perMinute()/60))}
	switch {
	case h.disabled != "":
		s.State, s.Reason = Disabled, h.disabled
	case h.br.open:
		s.State, s.Reason, s.Until = Open, h.br.reason, h.br.until
		switch {
		case h.br.probing:
			s.Reason += "; probe in flight"
		case !now.Before(h.br.until):
			s.Reason += "; cool-down over, the next request is the probe"
		}
	case h.coolUntil.After(now):
		s.State, s.Reason, s.Until = Cooling, h.coolReason, h.coolUntil
	case h.pacedUntil.After(now):
		s.State, s.Reason, s.Until = Cooling, "paced: the key's RPM/TPM buckets, or the provider's, are empty", h.pacedUntil
	}
	return s
}
