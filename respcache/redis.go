package respcache

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a Cache in Redis, used when REDIS_URL is set so every gateway
// replica shares one cache and answers survive a restart. Expiry is Redis's
// own (SET with PX).
type Redis struct {
	client redis.UniversalClient
	prefix string
}

// NewRedis returns a Redis cache storing each key as prefix+key; the prefix
// (for example "sluice:respcache:") keeps the cache's keys apart from other
// data in the same database.
func NewRedis(client redis.UniversalClient, prefix string) *Redis {
	return &Redis{client: client, prefix: prefix}
}

// Get returns the value under key; a missing or expired key is a miss.
func (r *Redis) Get(ctx context.Context, key string) ([]byte, bool, error) {
	v, err := r.client.Get(ctx, r.prefix+key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("respcache: redis get: %w", err)
	}
	return v, true, nil
}

// Set stores value under key, expiring after ttl (millisecond precision).
func (r *Redis) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("respcache: ttl must be positive, got %v", ttl)
	}
	// go-redis sends SET ... PX (or EX for whole seconds), so the key
	// expires on Redis's clock with no second round trip.
	if err := r.client.Set(ctx, r.prefix+key, value, ttl).Err(); err != nil {
		return fmt.Errorf("respcache: redis set: %w", err)
	}
	return nil
}
