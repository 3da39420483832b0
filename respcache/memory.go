package respcache

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/ristretto/v2"
)

// entry is what Memory stores: the answer plus its expiry on the injected
// clock. Ristretto's own TTL runs on the real clock, so it only reclaims
// memory; expires is what decides whether an entry is still served.
type entry struct {
	value   []byte
	expires time.Time
}

// Memory is an in-process Cache bounded by total value size, used when no
// Redis is configured. It is a ristretto cache, so when full it keeps the
// answers asked for most often rather than simply the newest ones.
//
// Admission is best effort: Set returns once the entry has been offered to
// the cache, but ristretto may drop it under write contention or refuse it
// in favour of more popular entries when full. A value larger than the whole
// cache is never kept.
type Memory struct {
	cache    *ristretto.Cache[string, entry]
	maxBytes int64
	now      func() time.Time
}

// NewMemory returns a Memory holding at most maxBytes of values. now is the
// clock used for expiry (time.Now when nil); tests pass a fake one to expire
// entries without sleeping. Call Close when done to stop its goroutines.
func NewMemory(maxBytes int64, now func() time.Time) (*Memory, error) {
	if maxBytes <= 0 {
		return nil, errors.New("respcache: memory cache size must be positive")
	}
	if now == nil {
		now = time.Now
	}
	// Ristretto wants about ten frequency counters per entry it may hold;
	// assume answers of about a kilobyte, within sane bounds.
	counters := min(max(maxBytes/100, 1000), 10_000_000)
	c, err := ristretto.NewCache(&ristretto.Config[string, entry]{
		NumCounters: counters,
		MaxCost:     maxBytes,
		BufferItems: 64,
		// Cost is the value size alone, so maxBytes means what it says.
		IgnoreInternalCost: true,
	})
	if err != nil {
		return nil, fmt.Errorf("respcache: new memory cache: %w", err)
	}
	return &Memory{cache: c, maxBytes: maxBytes, now: now}, nil
}

// Get returns a copy of the value under key, unless it is missing or has
// expired on the injected clock.
func (m *Memory) Get(_ context.Context, key string) ([]byte, bool, error) {
	e, ok := m.cache.Get(key)
	if !ok {
		return nil, false, nil
	}
	if !m.now().Before(e.expires) {
		m.cache.Del(key)
		return nil, false, nil
	}
	return append([]byte(nil), e.value...), true, nil
}

// Set stores a copy of value under key for ttl and waits until ristretto has
// processed it, so a Get that follows sees it if it was admitted.
func (m *Memory) Set(_ context.Context, key string, value []byte, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("respcache: ttl must be positive, got %v", ttl)
	}
	if int64(len(value)) > m.maxBytes {
		// It could only be stored by evicting everything and would still be
		// refused; not caching it is the documented outcome.
		return nil
	}
	e := entry{value: append([]byte(nil), value...), expires: m.now().Add(ttl)}
	if m.cache.SetWithTTL(key, e, int64(len(value)), ttl) {
		m.cache.Wait()
	}
	return nil
}

// Close stops the cache's background goroutines and frees its memory.
func (m *Memory) Close() {
	m.cache.Close()
}
