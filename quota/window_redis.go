package quota

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// MaxFreezeThreshold is the largest rejection count RedisWindow tracks per
// key and minute. Beyond it a key's window stops growing and Add reports
// MaxFreezeThreshold+1, so a flood of rejections cannot grow one Redis key
// without bound. A tier's freeze threshold above it would never fire; tier
// validation should refuse one.
const MaxFreezeThreshold = 1000

// rejectionScript records one rejection in a sorted set scored by the server's
// clock in microseconds, so nodes with skewed clocks still share one window.
// Trim, count, add and expire happen in one atomic step: each caller's count
// includes exactly the rejections before it, which is what lets Detector
// freeze exactly once per crossing.
//
// KEYS[1] window key; ARGV[1] unique member, ARGV[2] window in µs,
// ARGV[3] cap, ARGV[4] key TTL in ms.
var rejectionScript = redis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
local n = redis.call('ZCARD', KEYS[1])
if n < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], now, ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return n + 1
`)

// RedisWindow is the shared RejectionWindow: every node adds to the same
// sorted set per key, so a token's rejections are counted once across the
// cluster. Each Add is one round trip. Keys are prefix+"{"+key+"}:rej"; the
// hash tag keeps them on one slot per key in Redis Cluster, and they expire a
// second after the window, so idle keys cost nothing.
type RedisWindow struct {
	client redis.UniversalClient
	prefix string
	node   string // random per instance: makes members unique across nodes
	seq    atomic.Uint64
}

var _ RejectionWindow = (*RedisWindow)(nil)

// NewRedisWindow returns a window stored in client under prefix.
func NewRedisWindow(client redis.UniversalClient, prefix string) *RedisWindow {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return &RedisWindow{client: client, prefix: prefix, node: hex.EncodeToString(b[:])}
}

// Add records one rejection for key and returns the cluster-wide count for the
// last 60 seconds by the Redis server's clock.
func (w *RedisWindow) Add(ctx context.Context, key string) (int, error) {
	member := w.node + ":" + strconv.FormatUint(w.seq.Add(1), 36)
	n, err := rejectionScript.Run(ctx, w.client, []string{w.key(key)},
		member, windowSeconds*1_000_000, MaxFreezeThreshold, (windowSeconds+1)*1000).Int()
	if err != nil {
		return 0, fmt.Errorf("quota: redis rejection window: %w", err)
	}
	return n, nil
}

func (w *RedisWindow) key(key string) string { return w.prefix + "{" + key + "}:rej" }
