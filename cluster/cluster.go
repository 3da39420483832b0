// Package cluster carries invalidations between gateway nodes: when one node
// revokes a token, changes a tier or freezes a token, the others drop what
// they cached within a moment instead of waiting for a TTL. With Redis it is
// pub/sub; a single node needs no bus at all. Every node also reloads on a
// timer, so a lost message costs at most one reload interval.
package cluster

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// Kind says what changed.
type Kind string

// The kinds of change nodes tell each other about.
const (
	TokenChanged     Kind = "token"     // Hash: the token's SHA-256 (hex); revoked
	OrgChanged       Kind = "org"       // ID: the organization; moved to another tier
	TiersChanged     Kind = "tiers"     // a tier's settings or the tuner's refill
	FreezesChanged   Kind = "freezes"   // a token frozen or a freeze lifted
	UpstreamsChanged Kind = "upstreams" // a provider key added, deleted or disabled
	PricesChanged    Kind = "prices"    // a model's price set
	AliasesChanged   Kind = "aliases"   // a model alias created, changed or deleted

	// Subscribed is not a change: Listen reports it once, locally, when
	// the subscription is in place (or could not be made yet, Redis being
	// down: it keeps trying in the background), so a node can wait for it
	// before it serves; an invalidation published before then is missed.
	Subscribed Kind = "subscribed"
)

// Event is one invalidation.
type Event struct {
	Kind Kind   `json:"kind"`
	ID   int64  `json:"id,omitempty"`
	Hash string `json:"hash,omitempty"`
}

// Bus publishes invalidations to the other nodes.
type Bus interface {
	Publish(ctx context.Context, e Event) error
}

// None is the bus of a single node: nothing to tell.
type None struct{}

// Publish does nothing.
func (None) Publish(context.Context, Event) error { return nil }

// Redis is a Bus over Redis pub/sub.
type Redis struct {
	client  redis.UniversalClient
	channel string
	log     *slog.Logger
}

// NewRedis returns a bus on channel.
func NewRedis(client redis.UniversalClient, channel string, log *slog.Logger) *Redis {
	return &Redis{client: client, channel: channel, log: log}
}

// Publish sends e to every subscribed node, this one included. A failure is
// logged here, since callers go on regardless: the change is already stored
// and the other nodes' periodic reload will find it.
func (r *Redis) Publish(ctx context.Context, e Event) error {
	b, _ := json.Marshal(e)
	err := r.client.Publish(ctx, r.channel, b).Err()
	if err != nil {
		r.log.Warn("invalidation bus: publish failed; other nodes catch up on their next reload", "kind", e.Kind, "err", err)
	}
	return err
}

// Listen calls apply for each event until ctx ends. go-redis resubscribes
// by itself after an outage; messages sent meanwhile are lost, which the
// nodes' periodic reload covers.
func (r *Redis) Listen(ctx context.Context, apply func(Event)) {
	sub := r.client.Subscribe(ctx, r.channel)
	go func() {
		<-ctx.Done()
		sub.Close() // ends the range below
	}()
	// The first reply is the subscription's confirmation.
	if _, err := sub.Receive(ctx); err != nil {
		r.log.Warn("invalidation bus: not subscribed yet; retrying in the background", "err", err)
	}
	apply(Event{Kind: Subscribed})
	for msg := range sub.Channel() {
		var e Event
		if err := json.Unmarshal([]byte(msg.Payload), &e); err != nil {
			r.log.Warn("invalidation bus: bad message ignored", "err", err)
			continue
		}
		apply(e)
	}
}
