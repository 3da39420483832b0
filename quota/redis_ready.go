package quota

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// What readies the Redis limiter for load and keeps a stall from charging
// twice: the warm-up, the server's clock, and late calls.

// Warm readies the client for a burst of admissions before the node serves
// any: it reads the server's clock (see ErrLate), loads the scripts (so
// that the first calls are not a NOSCRIPT reply and a second round trip;
// and the give-back script, see givesBack)
// and, on a single-node client, opens conns connections at once, each
// through its handshake, and returns them to the pool idle. A cold pool
// would otherwise dial and handshake inside the first requests' budgets, at
// the moment load arrives.
func (r *Redis) Warm(ctx context.Context, conns int) error {
	if r.now == nil {
		sent := time.Now()
		t, err := r.client.Time(ctx).Result()
		if err != nil {
			return fmt.Errorf("quota: redis warm-up: %w", err)
		}
		r.server.observe(sent, time.Now(), t.UnixNano())
	}
	for _, s := range []*redis.Script{allowScript, adjustScript} {
		if err := s.Load(ctx, r.client).Err(); err != nil {
			return fmt.Errorf("quota: redis warm-up: load script: %w", err)
		}
	}
	r.gives.mu.Lock()
	err := r.loadGiveBacks(ctx)
	r.gives.mu.Unlock()
	if err != nil {
		return fmt.Errorf("quota: redis warm-up: %w", err)
	}
	c, ok := r.client.(*redis.Client)
	if !ok {
		return nil // a cluster or failover client: its pools are per server
	}
	held := make([]*redis.Conn, 0, conns)
	defer func() {
		for _, cn := range held {
			cn.Close() // back to the pool, handshaken
		}
	}()
	for range conns {
		cn := c.Conn() // holds its connection until closed, so each is a new one
		held = append(held, cn)
		if err := cn.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("quota: redis warm-up: connection %d of %d: %w", len(held), conns, err)
		}
	}
	return nil
}

// ErrLate is the answer to a call that reached Redis after its caller's
// deadline: the script changed nothing. A caller that gave up waiting has
// decided without Redis (Degrading decides locally); if a stalled server ran
// the call when it resumed, the shared bucket would be charged for a request
// that had already been decided and charged locally.
var ErrLate = errors.New("quota: redis: the call reached Redis after its deadline and changed nothing")

// lateReply is what the scripts answer instead of running, past the
// deadline.
const lateReply = "late"

// lateSlack is added to every deadline sent to Redis, for the error in the
// estimate of the server's clock: a call the caller may still be waiting for
// is not refused.
const lateSlack = 2 * time.Millisecond

// serverClockWindow is how long a sample of the server's clock counts; a
// step of either clock is learnt within two windows.
const serverClockWindow = 10 * time.Second

// serverClock estimates how far the Redis server's clock (TIME, which the
// scripts use) is ahead of this process's, from the times the allow script
// reports. The server read its clock between the call's send and its reply,
// so each sample is the true offset within half the round trip, and lower
// when this process was slow to send or to read (a busy node); the estimate
// is the highest sample of the last one or two windows. Deadlines computed
// from it are therefore late rather than early: a stalled call may still
// charge within a round trip or so of the deadline, but a call the caller
// is waiting for is never refused.
type serverClock struct {
	mu        sync.Mutex
	known     bool
	windowEnd int64 // local unix ns when cur's window ends
	cur, prev int64 // highest samples of this window and the last
	prevKnown bool
}

// observe records one call: sent and received on this process's clock, the
// server's time (unix ns) in between.
func (c *serverClock) observe(sent, received time.Time, server int64) {
	sample := server - (sent.UnixNano()+received.UnixNano())/2
	now := received.UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !c.known || now >= c.windowEnd+int64(serverClockWindow):
		// The first sample, or none for a whole window: start over.
		c.known, c.prevKnown = true, false
		c.cur, c.windowEnd = sample, now+int64(serverClockWindow)
	case now >= c.windowEnd:
		c.prev, c.prevKnown = c.cur, true
		c.cur, c.windowEnd = sample, c.windowEnd+int64(serverClockWindow)
	default:
		c.cur = max(c.cur, sample)
	}
}

// deadline is ctx's deadline in server time, with lateSlack, if ctx has a
// deadline and the server's clock has been seen.
func (c *serverClock) deadline(ctx context.Context) (int64, bool) {
	d, ok := ctx.Deadline()
	if !ok {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.known {
		return 0, false
	}
	offset := c.cur
	if c.prevKnown {
		offset = max(offset, c.prev)
	}
	return d.UnixNano() + offset + int64(lateSlack), true
}
