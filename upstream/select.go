package upstream

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/quota"
)

// Pacing: each key has a requests bucket and, when its TPM is known
// (configured or said by the provider), a tokens bucket, so the pool sends a
// provider no more than the key's limits and waits (paces) instead of
// collecting 429s. Both live in the shared limiter, so every gateway node
// paces a key together.
//
//   - "upkey:<id>": refill RPM/60 per second, capacity the key's learned
//     burst (limits.go): the provider's own burst less a little slack, one
//     second's worth (RPM/60) when the provider never said, halved on a 429
//     and grown back slowly.
//   - "upkey:<id>|tpm": refill TPM/60 per second, capacity the learned
//     tokens burst but at least the request's own estimate, so a large
//     request is not refused forever: it passes when the bucket is full and
//     then holds the key back for as long as its tokens take to refill.
//     Pool.Settle corrects the estimate afterwards.
//
// RPM and TPM are the lower of the configured limit and the provider's
// x-ratelimit-limit-* header. Both buckets are charged together
// (quota.Limiter.AllowBoth) so a refusal by one costs nothing in the other.
// A dimension with no known limit has no bucket.

// requestBucket is the key's requests bucket now, for one request; ok is
// false when the key's requests are not paced. The caller holds e.h.mu.
func (e *keyEntry) requestBucket() (bucket, bool) {
	d := &e.h.req
	return newBucket(e.reqKey, d.perMinute(), d.capacity(1), 1)
}

// tokenBucket is the key's tokens bucket now, for a request of estimate
// tokens. The caller holds e.h.mu.
func (e *keyEntry) tokenBucket(estimate int64) (bucket, bool) {
	d := &e.h.tok
	pm := d.perMinute()
	return newBucket(e.tpmKey, pm, d.capacity(max(1, pm/60)), max(1, estimate))
}

// admission is what pacing decided for one attempt, kept so that the answer
// can teach the key's bursts.
type admission struct {
	estimate int64
	// reqEmptied and tokEmptied: the attempt was admitted with less than
	// its own weight left in that bucket, so a 2xx shows the provider took
	// a full burst.
	reqEmptied, tokEmptied bool
}

// candidate is a key selection may try.
type candidate struct {
	e     *keyEntry
	tried bool  // already failed for this request: other keys go first
	load  int64 // attempts in flight on the key
}

// acquire picks and claims a key for the next attempt, waiting for the keys'
// buckets (pacing) when every usable key is momentarily empty and the wait
// fits in the budget. It returns ErrUnavailable when every key serving the
// model is open or disabled, or when the wait would not fit.
func (p *Pool) acquire(ctx context.Context, req Request, tried map[int64]bool, deadline time.Time) (*keyEntry, bool, admission, error) {
	for {
		now := p.opts.Now()
		e, probe, adm, wait, err := p.pick(ctx, req, tried, now)
		if err != nil || e != nil {
			return e, probe, adm, err
		}
		remaining := deadline.Sub(now)
		if wait >= remaining {
			return nil, false, admission{}, fmt.Errorf("%w: every key serving %q is paced or resting for %s more, beyond the remaining budget",
				ErrUnavailable, req.Model, wait.Round(time.Millisecond))
		}
		// A little jitter, so requests waiting for the same bucket do not
		// all wake at the same instant.
		d := min(wait+time.Duration(p.opts.Rand()*float64(wait/10)), remaining)
		if err := p.opts.Sleep(ctx, d); err != nil {
			return nil, false, admission{}, err
		}
	}
}

// pick returns a claimed key for req, or else the shortest wait after which a
// key may take it (some key is only paced or resting), or else an error.
//
// Order: keys not yet tried for this request first; then least loaded
// (fewest attempts in flight per unit of weight); among equals, a
// weighted-random order, so idle keys share traffic in proportion to their
// weights. The first key in that order whose buckets admit the request wins.
func (p *Pool) pick(ctx context.Context, req Request, tried map[int64]bool, now time.Time) (*keyEntry, bool, admission, time.Duration, error) {
	var cands []candidate
	serves := false
	var wait time.Duration
	for _, e := range p.keys.Load().entries {
		if !e.serves(req.Model) {
			continue
		}
		serves = true
		ok, cool := e.h.usable(now, req.Estimate)
		switch {
		case ok:
			cands = append(cands, candidate{e: e, tried: tried[e.key.ID], load: e.h.inFlight.Load()})
		case cool > 0:
			wait = minWait(wait, cool)
		}
	}
	if !serves {
		return nil, false, admission{}, 0, ErrNoKey
	}
	if len(cands) == 0 && wait == 0 {
		return nil, false, admission{}, 0, fmt.Errorf("%w: every key serving %q is open or disabled", ErrUnavailable, req.Model)
	}
	order(cands, p.opts.Rand)
	for _, c := range cands {
		ok, probe := c.e.h.claim(now)
		if !ok {
			continue // raced with another request for the probe, or just failed
		}
		adm, paced := p.pace(ctx, c.e, req.Estimate)
		if paced == 0 {
			c.e.h.sending(p.opts.Now(), adm.estimate)
			return c.e, probe, adm, 0, nil
		}
		c.e.h.unclaim(probe, now.Add(paced))
		wait = minWait(wait, paced)
	}
	// Every key was claimed by others or paced; if none gave a wait, try
	// again shortly rather than spinning.
	return nil, false, admission{}, max(wait, time.Millisecond), nil
}

func minWait(cur, d time.Duration) time.Duration {
	if cur == 0 || d < cur {
		return d
	}
	return cur
}

// order sorts candidates by (tried, in flight per weight), then shuffles
// each run of equals by weight.
func order(cands []candidate, rnd func() float64) {
	rank := func(a, b candidate) int {
		if a.tried != b.tried {
			if a.tried {
				return 1
			}
			return -1
		}
		// load/weight compared without division.
		return cmp.Compare(a.load*b.e.weight, b.load*a.e.weight)
	}
	slices.SortStableFunc(cands, rank)
	for i := 0; i < len(cands); {
		j := i + 1
		for j < len(cands) && rank(cands[i], cands[j]) == 0 {
			j++
		}
		weightedShuffle(cands[i:j], rnd)
		i = j
	}
}

// weightedShuffle orders cands so that each position is drawn among the
// rest with probability proportional to weight.
func weightedShuffle(cands []candidate, rnd func() float64) {
	for i := 0; i < len(cands)-1; i++ {
		var total int64
		for _, c := range cands[i:] {
			total += c.e.weight
		}
		x := int64(rnd() * float64(total))
		k := len(cands) - 1
		for j := i; j < len(cands); j++ {
			if x < cands[j].e.weight {
				k = j
				break
			}
			x -= cands[j].e.weight
		}
		cands[i], cands[k] = cands[k], cands[i]
	}
}

// pace charges the key's buckets for one request of estimate tokens. When
// they refuse it returns how long until they would admit it (never 0). A
// limiter error (shared state unreachable) sends the request unpaced:
// pacing protects the provider's limits, and a 429 then still rests the
// key. The error is counted and logged when it starts, not per request.
func (p *Pool) pace(ctx context.Context, e *keyEntry, estimate int64) (admission, time.Duration) {
	adm := admission{estimate: max(1, estimate)}
	e.h.mu.Lock()
	rb, hasReq := e.requestBucket()
	tb, hasTok := e.tokenBucket(estimate)
	e.h.mu.Unlock()
	var da, db quota.Decision
	var err error
	switch {
	case hasReq && hasTok:
		da, db, err = p.opts.Limiter.AllowBoth(ctx,
			quota.Charge{Key: rb.key, Params: rb.params, Weight: rb.weight},
			quota.Charge{Key: tb.key, Params: tb.params, Weight: tb.weight})
	case hasReq:
		da, err = p.opts.Limiter.Allow(ctx, rb.key, rb.params, rb.weight)
		db.Allowed = true
	case hasTok:
		db, err = p.opts.Limiter.Allow(ctx, tb.key, tb.params, tb.weight)
		da.Allowed = true
	default:
		return adm, 0
	}
	if err != nil {
		if ctx.Err() == nil {
			p.limiterFailed(e, "pacing", err)
		}
		return adm, 0 // unpaced; a gone caller's attempt will say so
	}
	p.limiterWorks(e)
	if da.Allowed && db.Allowed {
		adm.reqEmptied = hasReq && da.Remaining < rb.weight
		adm.tokEmptied = hasTok && db.Remaining < tb.weight
		return adm, 0
	}
	return adm, max(da.RetryAfter, db.RetryAfter, time.Millisecond)
}
