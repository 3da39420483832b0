package conversations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/chat"
)

// Redis is a Store in Redis, used when REDIS_URL is set so every gateway
// replica sees the same conversations. Each conversation is one JSON value under
// prefix+"{org:token}:"+id, expiring ttl after its last Save; the braces are
// a Redis Cluster hash tag, so one token's conversations share a slot.
type Redis struct {
	client redis.UniversalClient
	prefix string
	ttl    time.Duration
}

// NewRedis returns a Redis store whose keys start with prefix (for example
// "sluice:session:") and whose conversations expire ttl after their last Save
// (DefaultTTL when ttl <= 0).
func NewRedis(client redis.UniversalClient, prefix string, ttl time.Duration) *Redis {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Redis{client: client, prefix: prefix, ttl: ttl}
}

// key is where a conversation lives. Org and token are integers, so the "}:"
// after them cannot be forged by an id.
func (r *Redis) key(s Scope) string {
	return fmt.Sprintf("%s{%d:%d}:%s", r.prefix, s.OrgID, s.TokenID, s.ID)
}

// Load returns the conversation's history if its key has not expired.
func (r *Redis) Load(ctx context.Context, s Scope) ([]chat.Message, bool, error) {
	if !ValidID(s.ID) {
		return nil, false, ErrInvalidID
	}
	raw, err := r.client.Get(ctx, r.key(s)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("conversations: redis get: %w", err)
	}
	var messages []chat.Message
	if err := json.Unmarshal(raw, &messages); err != nil {
		return nil, false, fmt.Errorf("conversations: decode stored conversation: %w", err)
	}
	return messages, true, nil
}

// Save writes the history and restarts the TTL in one SET with an expiry.
func (r *Redis) Save(ctx context.Context, s Scope, messages []chat.Message) error {
	if !ValidID(s.ID) {
		return ErrInvalidID
	}
	if messages == nil {
		messages = []chat.Message{} // store [] rather than null
	}
	raw, err := json.Marshal(messages)
	if err != nil {
		return fmt.Errorf("conversations: encode conversation: %w", err)
	}
	if err := r.client.Set(ctx, r.key(s), raw, r.ttl).Err(); err != nil {
		return fmt.Errorf("conversations: redis set: %w", err)
	}
	return nil
}

// Delete removes the conversation's key and reports whether it existed.
func (r *Redis) Delete(ctx context.Context, s Scope) (bool, error) {
	if !ValidID(s.ID) {
		return false, ErrInvalidID
	}
	n, err := r.client.Del(ctx, r.key(s)).Result()
	if err != nil {
		return false, fmt.Errorf("conversations: redis del: %w", err)
	}
	return n > 0, nil
}
