package cluster

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Presence counts the nodes that share one Redis. Each node adds itself to
// a sorted set, scored by when it was last seen, every PresenceEvery, and
// counts the members seen within PresenceWindow. The count sizes the share
// of every limit and budget a node keeps while Redis is down (1/N each, so
// that N nodes together allow no more than the whole): a fixed
// SLUICE_EXPECTED_NODES below the nodes really running would let them
// allow more. The scores are the nodes' own clocks, which must agree to
// well within the window.
type Presence struct {
	client redis.UniversalClient
	key    string
	node   string
	now    func() time.Time
}

// Presence timing: a node that stops beating (killed, cut off) is counted
// out within PresenceWindow of its last beat; one that stops gracefully
// leaves at once (Leave).
const (
	PresenceEvery  = 5 * time.Second
	PresenceWindow = 30 * time.Second
)

// NewPresence is node's presence in the sorted set at key; now is the clock
// (nil: time.Now).
func NewPresence(client redis.UniversalClient, key, node string, now func() time.Time) *Presence {
	if now == nil {
		now = time.Now
	}
	return &Presence{client: client, key: key, node: node, now: now}
}

// Beat records the node as present now, forgets the nodes not seen within
// PresenceWindow, and says how many are left, itself included: one round
// trip.
func (p *Presence) Beat(ctx context.Context) (int, error) {
	now := p.now()
	pipe := p.client.TxPipeline()
	pipe.ZAdd(ctx, p.key, redis.Z{Score: float64(now.UnixMilli()), Member: p.node})
	pipe.ZRemRangeByScore(ctx, p.key, "-inf", "("+strconv.FormatInt(now.Add(-PresenceWindow).UnixMilli(), 10))
	n := pipe.ZCard(ctx, p.key)
	pipe.PExpire(ctx, p.key, 2*PresenceWindow) // gone with the last node
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	return int(n.Val()), nil
}

// Run beats at once and then every PresenceEvery until ctx ends, handing
// each count to seen. A beat that fails hands nothing: the last count
// stands, which is what an outage must be sized by.
func (p *Presence) Run(ctx context.Context, seen func(nodes int)) {
	t := time.NewTicker(PresenceEvery)
	defer t.Stop()
	for {
		if n, err := p.Beat(ctx); err == nil {
			seen(n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Leave takes the node out of the count, when it stops: the others count
// one fewer at their next beat.
func (p *Presence) Leave(ctx context.Context) error {
	return p.client.ZRem(ctx, p.key, p.node).Err()
}
