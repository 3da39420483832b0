package signing

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
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

// FallbackNonces remembers every nonce in Local (this node) and in Shared
// (Redis), so signed requests keep being served while Shared is down:
//   - a nonce this node has seen is a replay whatever Shared says, so a
//     replay sent to the same node is caught through an outage;
//   - the nonces claimed while Shared was down are handed to it once it
//     answers again (SET NX, with what is left of their window), so a
//     replay of one of them sent to any node after the outage is caught.
//
// What remains: during the outage, a replay sent to another node (which
// never saw the nonce) passes.
type FallbackNonces struct {
	shared  Nonces
	local   Nonces
	timeout time.Duration // budget for one shared claim
	now     func() time.Time

	waiting atomic.Bool // pending is not empty: what a claim reads, without the lock
	mu      sync.Mutex
	pending []pendingNonce // claimed while shared was down
	handing bool           // a hand-back is running
}

type pendingNonce struct {
	key   nonceKey
	until time.Time
}

var _ Nonces = (*FallbackNonces)(nil)

// NewFallbackNonces claims in shared within timeout for each call, and
// always in local; now is the clock (time.Now when nil).
func NewFallbackNonces(shared, local Nonces, timeout time.Duration, now func() time.Time) *FallbackNonces {
	if now == nil {
		now = time.Now
	}
	return &FallbackNonces{shared: shared, local: local, timeout: timeout, now: now}
}

// Claim implements Nonces.
func (f *FallbackNonces) Claim(ctx context.Context, tokenID int64, nonce string, ttl time.Duration) (bool, error) {
	if fresh, err := f.local.Claim(ctx, tokenID, nonce, ttl); err != nil || !fresh {
		return fresh, err
	}
	sctx, cancel := context.WithTimeout(ctx, f.timeout)
	fresh, err := f.shared.Claim(sctx, tokenID, nonce, ttl)
	cancel()
	if err != nil {
		f.mu.Lock()
		f.pending = append(f.pending, pendingNonce{nonceKey{tokenID, nonce}, f.now().Add(ttl)})
		f.waiting.Store(true)
		f.mu.Unlock()
		return true, nil // this node remembers it
	}
	if f.waiting.Load() { // the common case, nothing to hand back, takes no lock
		f.handBack()
	}
	return fresh, nil
}

// handBack hands the nonces claimed during an outage to shared, in the
// background, once shared answers again.
func (f *FallbackNonces) handBack() {
	f.mu.Lock()
	if f.handing || len(f.pending) == 0 {
		f.mu.Unlock()
		return
	}
	pending := f.pending
	f.pending, f.handing = nil, true
	f.waiting.Store(false)
	f.mu.Unlock()
	go func() {
		var failed []pendingNonce
		for _, p := range pending {
			left := p.until.Sub(f.now())
			if left <= 0 {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
			_, err := f.shared.Claim(ctx, p.key.token, p.key.nonce, left)
			cancel()
			if err != nil {
				failed = append(failed, p)
			}
		}
		f.mu.Lock()
		f.pending = append(f.pending, failed...) // down again: the next answer retries them
		f.handing = false
		f.waiting.Store(len(f.pending) > 0)
		f.mu.Unlock()
	}()
}
