package upstream

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/quota"
)

// Pacing: each key has a requests bucket and, when its TPM is known, a
// tokens bucket, so the pool sends a provider no more than the key's limits
// and waits (paces) instead of collecting 429s.
//
//   - "upkey:<id>": capacity max(1, RPM/60), refill RPM/60 per second. One
//     second's worth of burst: a provider enforcing RPM over shorter windows
//     never sees a burst it would refuse.
//   - "upkey:<id>|tpm": capacity max(TPM/60, estimate), refill TPM/60 per
//     second. One second's worth of tokens, but at least the request's own
//     estimate, so a large request is not refused forever: it passes when
//     the bucket is full and then holds the key back for as long as its
//     tokens take to refill. Pool.Settle corrects the estimate afterwards.
//
// Both are charged together (quota.Limiter.AllowBoth) so a refusal by one
// costs nothing in the other. A key with RPM 0 has no requests bucket and a
// key with TPM 0 no tokens bucket.
func rpmParams(rpm int64) quota.Params {
	return quota.Params{Capacity: max(1, rpm/60), RefillPerSec: float64(rpm) / 60}
}

func tpmParams(tpm, weight int64) quota.Params {
	return quota.Params{Capacity: max(tpm/60, weight), RefillPerSec: float64(tpm) / 60}
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
func (p *Pool) acquire(ctx context.Context, req Request, tried map[int64]bool, deadline time.Time) (*keyEntry, bool, error) {
	for {
		now := p.opts.Now()
		e, probe, wait, err := p.pick(ctx, req, tried, now)
		if err != nil || e != nil {
			return e, probe, err
		}
		remaining := deadline.Sub(now)
		if wait >= remaining {
			return nil, false, fmt.Errorf("%w: every key serving %q is paced or resting for %s more, beyond the remaining budget",
				ErrUnavailable, req.Model, wait.Round(time.Millisecond))
		}
		// A little jitter, so requests waiting for the same bucket do not
		// all wake at the same instant.
		d := min(wait+time.Duration(p.opts.Rand()*float64(wait/10)), remaining)
		if err := p.opts.Sleep(ctx, d); err != nil {
			return nil, false, err
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
func (p *Pool) pick(ctx context.Context, req Request, tried map[int64]bool, now time.Time) (*keyEntry, bool, time.Duration, error) {
	var cands []candidate
	serves := false
	var wait time.Duration
	for _, e := range p.keys.Load().entries {
		if !e.serves(req.Model) {
			continue
		}
		serves = true
		ok, cool := e.h.usable(now)
		switch {
		case ok:
			cands = append(cands, candidate{e: e, tried: tried[e.key.ID], load: e.h.inFlight.Load()})
		case cool > 0:
			wait = minWait(wait, cool)
		}
	}
	if !serves {
		return nil, false, 0, ErrNoKey
	}
	if len(cands) == 0 && wait == 0 {
		return nil, false, 0, fmt.Errorf("%w: every key serving %q is open or disabled", ErrUnavailable, req.Model)
	}
	order(cands, p.opts.Rand)
	for _, c := range cands {
		ok, probe := c.e.h.claim(now)
		if !ok {
			continue // raced with another request for the probe, or just failed
		}
		admitted, paced := p.pace(ctx, c.e, req.Estimate)
		if admitted {
			return c.e, probe, 0, nil
		}
		c.e.h.unclaim(probe, now.Add(paced))
		wait = minWait(wait, paced)
	}
	// Every key was claimed by others or paced; if none gave a wait, try
	// again shortly rather than spinning.
	return nil, false, max(wait, time.Millisecond), nil
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
// they refuse it returns how long until they would admit it. A limiter error
// (shared state unreachable) sends the request unpaced: pacing protects the
// provider's limits, and a 429 then still rests the key.
func (p *Pool) pace(ctx context.Context, e *keyEntry, estimate int64) (bool, time.Duration) {
	k := e.key
	w := max(1, estimate)
	var da, db quota.Decision
	var err error
	switch {
	case k.RPM > 0 && k.TPM > 0:
		da, db, err = p.opts.Limiter.AllowBoth(ctx,
			quota.Charge{Key: e.reqKey, Params: rpmParams(k.RPM), Weight: 1},
			quota.Charge{Key: e.tpmKey, Params: tpmParams(k.TPM, w), Weight: w})
	case k.RPM > 0:
		da, err = p.opts.Limiter.Allow(ctx, e.reqKey, rpmParams(k.RPM), 1)
		db.Allowed = true
	case k.TPM > 0:
		db, err = p.opts.Limiter.Allow(ctx, e.tpmKey, tpmParams(k.TPM, w), w)
		da.Allowed = true
	default:
		return true, 0
	}
	if err != nil {
		if ctx.Err() != nil {
			return true, 0 // the caller is gone; the attempt will say so
		}
		p.opts.Log.Warn("upstream key pacing failed; sending unpaced",
			"key", k.Name, "key_id", k.ID, "error", err)
		return true, 0
	}
	if da.Allowed && db.Allowed {
		return true, 0
	}
	return false, max(da.RetryAfter, db.RetryAfter, time.Millisecond)
}
