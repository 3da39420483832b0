package completion

import (
	"hash/maphash"
	"sync"

	"github.com/sluicehq/sluice/quota"
)

// countCache remembers what long texts counted, by a hash of their JSON:
// a coding agent sends the same conversation again with one more turn,
// and its tools and system prompt with every request, so most of a long
// prompt is text the node has counted seconds before. A count is only a
// few bytes; the text is never kept.
//
// The key is a 64-bit maphash (seeded at random per process) of the
// tokenizer's name and the JSON bytes, checked against the length too, so
// a collision, which would give a text another's count, cannot be
// aimed at from outside. The cache holds two generations of at most
// countCacheGen entries per shard: when the newer fills up, the older is
// dropped, so it never holds more than 2 × countCacheGen × countShards
// entries (about 4 MB) and what is used stays.
type countCache struct {
	seed   maphash.Seed
	shards [countShards]countShard
}

const (
	countShards   = 16
	countCacheGen = 4096
	// countCacheMin is the shortest JSON worth a cache entry: below it,
	// counting costs about what hashing and a lookup do.
	countCacheMin = 256
)

type countShard struct {
	mu       sync.Mutex
	new, old map[uint64]counted
}

// counted is what a text counted: its length (to check the key), its
// tokens, and its shape for the value rules (zero for JSON that is not
// message text).
type counted struct {
	length int
	tokens int
	shape  quota.TextShape
}

func newCountCache() *countCache { return &countCache{seed: maphash.MakeSeed()} }

// key hashes a text's JSON for the tokenizer named enc.
func (c *countCache) key(enc string, raw []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(c.seed)
	h.WriteString(enc)
	h.WriteByte(0)
	h.Write(raw)
	return h.Sum64()
}

func (c *countCache) get(key uint64, length int) (counted, bool) {
	sh := &c.shards[key%countShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	v, ok := sh.new[key]
	if !ok {
		if v, ok = sh.old[key]; ok {
			sh.put(key, v) // still in use: keep it past the next turnover
		}
	}
	return v, ok && v.length == length
}

func (c *countCache) put(key uint64, v counted) {
	sh := &c.shards[key%countShards]
	sh.mu.Lock()
	sh.put(key, v)
	sh.mu.Unlock()
}

func (sh *countShard) put(key uint64, v counted) {
	if len(sh.new) >= countCacheGen {
		sh.old, sh.new = sh.new, nil
	}
	if sh.new == nil {
		sh.new = make(map[uint64]counted, countCacheGen/4)
	}
	sh.new[key] = v
}
