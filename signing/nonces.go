package signing

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// MemoryNonces remembers nonces in this process: right for one node, and
// the fallback when Redis is down.
type MemoryNonces struct {
	now func() time.Time

	mu        sync.Mutex
	seen      map[nonceKey]time.Time // nonce → when it may be forgotten
	nextSweep time.Time
}

type nonceKey struct {
	token int64
	nonce string
}

var _ Nonces = (*MemoryNonces)(nil)

// NewMemoryNonces returns an empty store reading the time from now
// (time.Now when nil).
func NewMemoryNonces(now func() time.Time) *MemoryNonces {
	if now == nil {
		now = time.Now
	}
	return &MemoryNonces{now: now, seen: make(map[nonceKey]time.Time)}
}

// Claim implements Nonces.
func (m *MemoryNonces) Claim(_ context.Context, tokenID int64, nonce string, ttl time.Duration) (bool, error) {
	now := m.now()
	k := nonceKey{tokenID, nonce}
	m.mu.Lock()
	defer m.mu.Unlock()
	if now.After(m.nextSweep) {
		// Forget expired nonces once per window: the map holds at most two
		// windows of one node's signed requests.
		for k, until := range m.seen {
			if !now.Before(until) {
				delete(m.seen, k)
			}
		}
		m.nextSweep = now.Add(Window)
	}
	if until, ok := m.seen[k]; ok && now.Before(until) {
		return false, nil
	}
	m.seen[k] = now.Add(ttl)
	return true, nil
}

// Len reports how many nonces are remembered, expired ones not yet swept
// included.
func (m *MemoryNonces) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.seen)
}

// RedisNonces remembers nonces in Redis, so a request replayed against
// another node is caught too. Each claim is one SET NX with the TTL; keys are
// prefix+"{"+token+"}:nonce:"+nonce and expire by themselves.
type RedisNonces struct {
	client redis.UniversalClient
	prefix string
}

var _ Nonces = (*RedisNonces)(nil)

// NewRedisNonces returns a store in client under prefix.
func NewRedisNonces(client redis.UniversalClient, prefix string) *RedisNonces {
	return &RedisNonces{client: client, prefix: prefix}
}

// Claim implements Nonces.
func (r *RedisNonces) Claim(ctx context.Context, tokenID int64, nonce string, ttl time.Duration) (bool, error) {
	key := r.prefix + "{" + strconv.FormatInt(tokenID, 10) + "}:nonce:" + nonce
	return r.client.SetNX(ctx, key, 1, ttl).Result()
}

// FallbackNonces claims in Shared and, when that fails (Redis down), in
// Local, so signed requests keep being served during an outage. The price:
// while Shared is down, a nonce is only remembered by the node that saw it,
// so a replay sent to another node within the window would pass.
type FallbackNonces struct {
	Shared  Nonces
	Local   Nonces
	Timeout time.Duration // budget for one shared claim
}

var _ Nonces = FallbackNonces{}

// Claim implements Nonces.
func (f FallbackNonces) Claim(ctx context.Context, tokenID int64, nonce string, ttl time.Duration) (bool, error) {
	sctx, cancel := context.WithTimeout(ctx, f.Timeout)
	fresh, err := f.Shared.Claim(sctx, tokenID, nonce, ttl)
	cancel()
	if err == nil {
		return fresh, nil
	}
	return f.Local.Claim(ctx, tokenID, nonce, ttl)
}
