package quota

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// What a Prefetch gives back to the Redis limiter (refunder), and how a
// give-back of what a restarted Redis no longer holds is told apart.

// givesBack is the Redis limiter's side of giving back. A give-back runs
// the adjust script, as a copy of the limiter's own: its text ends in a
// comment unique to the limiter, so no other process ever loads it. Redis
// keeps a loaded script until it restarts, fails over to a replica that
// never loaded it, or is told SCRIPT FLUSH, which are also the ways it
// loses its buckets. So a give-back that finds the script missing
// (NOSCRIPT) knows Redis may have lost what its units were charged to, and
// changes nothing; loads counts the limiter's loads of the script, a
// Prefetch notes it before each charge for many, and a give-back is sent
// only while it is unchanged. Units charged before Redis lost its state are
// never given back to the buckets that came after, which would hand them
// out twice. Each limiter (each gateway process) leaves one such script,
// 3 KB, in Redis's script cache until Redis restarts.
type givesBack struct {
	script *redis.Script
	mu     sync.Mutex // one give-back at a time: its check of loads, its call, and a load after NOSCRIPT
	loads  atomic.Uint64
}

func newGivesBack() *givesBack {
	return &givesBack{script: redis.NewScript(redisTimeLua + adjustLua + "-- the give-backs of limiter " + rand.Text() + "\n")}
}

// refundState is how many times the limiter has loaded its give-back
// script; 0 before the first (see Warm).
func (r *Redis) refundState() uint64 { return r.gives.loads.Load() }

// loadGiveBacks loads the give-back script anew: what was charged before
// is not given back. The caller holds gives.mu.
func (r *Redis) loadGiveBacks(ctx context.Context) error {
	r.gives.loads.Add(1) // first: a load that fails after reaching Redis must not let old units through
	if err := r.gives.script.Load(ctx, r.client).Err(); err != nil {
		return fmt.Errorf("quota: redis: load the give-back script: %w", err)
	}
	return nil
}

// refund gives back units of key's bucket charged under p while the state
// was state, in one round trip (see givesBack); errStale if the state has
// changed since or Redis has lost the script.
func (r *Redis) refund(ctx context.Context, key string, p Params, units int64, state uint64) error {
	s, err := shapeForAdjust(p)
	if err != nil || units <= 0 {
		return err
	}
	g := r.gives
	g.mu.Lock()
	defer g.mu.Unlock()
	switch cur := g.loads.Load(); {
	case cur == 0:
		_ = r.loadGiveBacks(ctx) // never loaded (no Warm): from now on
		return errStale
	case state != cur:
		return errStale
	}
	reply, err := r.client.EvalSha(ctx, g.script.Hash(), []string{r.key(key)}, r.adjustArgs(ctx, s, -units)...).Text()
	switch {
	case redis.HasErrorPrefix(err, "NOSCRIPT"):
		_ = r.loadGiveBacks(ctx) // a failure shows as NOSCRIPT again
		return errStale
	case err != nil:
		return fmt.Errorf("quota: redis give back: %w", err)
	case reply == lateReply:
		return fmt.Errorf("quota: redis give back: %w", ErrLate)
	}
	return nil
}
