package bpe

import (
	"encoding/binary"
	"math/bits"
)

// noRank is the rank of a byte string that is not a token.
const noRank = ^uint32(0)

// rankTable maps each token's bytes to its rank (its id: BPE merges the pair
// whose merged token has the lowest id first).
//
// It is an open-addressing hash table with linear probing over 8-byte slots,
// at most half full, so that a miss, the common case while merging, ends
// after a probe or two. A slot holds the token's rank and either the token
// itself, if it has at most inlineLen bytes (most lookups: a word with its
// space, and the short pairs merging tries), or 45 bits of its hash, which
// leave a byte comparison in arena for about one probe in 2^45 that is not
// the token. Either way the answer is exact.
type rankTable struct {
	slots []uint64
	shift uint     // 64 - log2(len(slots)): the hash's top bits index slots
	arena []byte   // every token's bytes, in rank order
	off   []uint32 // token r is arena[off[r]:off[r+1]]; missing ranks are empty
	// pair holds the rank of each 2-byte token, indexed by the two bytes as a
	// little-endian uint16: the first round of every merge looks up all of a
	// piece's adjacent byte pairs, and this answers each with one load.
	pair []uint32
	// maxLen is the longest token's length: a longer key is no token, and
	// need not be hashed (long runs of one character merge into ever longer
	// candidates).
	maxLen int
	// scratch is the one thing that changes after the table is built: the
	// merges' scratch for long pieces, shared by all callers.
	scratch scratchList
}

// A slot is rank+1 in its top rankBits (0 marks an empty slot) over a check
// in the 46 bits below: for a token of n <= inlineLen bytes, n<<40 | its
// bytes (little-endian); for a longer one, hashedKey | 45 bits of its hash.
const (
	rankBits  = 18
	checkBits = 64 - rankBits
	checkMask = 1<<checkBits - 1
	hashedKey = 1 << (checkBits - 1)
	inlineLen = 5
)

// newRankTable builds the table from tokens indexed by rank; an empty string
// marks a rank with no token.
func newRankTable(tokens []string) *rankTable {
	if len(tokens) >= 1<<rankBits {
		panic("bpe: too many tokens for a slot's rank")
	}
	t := &rankTable{off: make([]uint32, len(tokens)+1), pair: make([]uint32, 1<<16)}
	size, count := 0, 0
	for _, tok := range tokens {
		size += len(tok)
		if tok != "" {
			count++
		}
	}
	// 8 bytes of slack after the last token let prefixWord load any
	// token's words whole.
	t.arena = make([]byte, 0, size+8)
	nslots := 1
	for nslots < count*2 {
		nslots *= 2
	}
	t.slots = make([]uint64, nslots)
	t.shift = uint(64 - bits.TrailingZeros(uint(nslots)))
	for i := range t.pair {
		t.pair[i] = noRank
	}
	for r, tok := range tokens {
		t.arena = append(t.arena, tok...)
		t.off[r+1] = uint32(len(t.arena))
		if tok == "" {
			continue
		}
		key := t.arena[t.off[r]:t.off[r+1]]
		t.maxLen = max(t.maxLen, len(key))
		if len(key) == 2 {
			t.pair[binary.LittleEndian.Uint16(key)] = uint32(r)
		}
		i, check := t.hash(key, prefixWord(key))
		for t.slots[i] != 0 {
			i = (i + 1) & (len(t.slots) - 1) // tokens are distinct: a map's keys
		}
		t.slots[i] = uint64(r+1)<<checkBits | check
	}
	return t
}

// rank returns the rank of key, or noRank.
func (t *rankTable) rank(key []byte) uint32 {
	if len(key) > t.maxLen {
		return noRank
	}
	w := prefixWord(key)
	i, check := t.hash(key, w)
	for ; ; i = (i + 1) & (len(t.slots) - 1) {
		s := t.slots[i]
		if s == 0 {
			return noRank
		}
		if s&checkMask != check {
			continue
		}
		r := uint32(s>>checkBits) - 1
		if len(key) <= inlineLen || t.is(r, key, w) {
			return r
		}
	}
}

// is reports whether token r is key, whose prefixWord is w, comparing words
// rather than calling the runtime's memequal: these keys are short.
func (t *rankTable) is(r uint32, key []byte, w uint64) bool {
	tok := t.arena[t.off[r]:t.off[r+1]]
	if len(tok) != len(key) || prefixWord(tok) != w {
		return false
	}
	for i := 8; i < len(key); i += 8 {
		if prefixWord(tok[i:]) != prefixWord(key[i:]) {
			return false
		}
	}
	return true
}

// hash returns the first slot and the check of key, whose prefixWord is w.
func (t *rankTable) hash(key []byte, w uint64) (int, uint64) {
	h := mix(w, uint64(len(key)))
	for rest := key[min(8, len(key)):]; len(rest) > 0; rest = rest[min(8, len(rest)):] {
		h = mix(h, prefixWord(rest))
	}
	check := w | uint64(len(key))<<40
	if len(key) > inlineLen {
		check = hashedKey | h&(hashedKey-1)
	}
	return int(h >> t.shift), check
}

// mix is a multiply-fold step in the manner of wyhash: the 128-bit product's
// halves folded together, which spreads every input bit over the top bits.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a^0x2d358dccaa6c78a5, b^0x8bb84b93962eacc9)
	return hi ^ lo
}

// prefixWord returns key's first 8 bytes as a little-endian word, zero-padded.
// When key's capacity allows, it loads 8 bytes at once and masks off those
// past its length.
func prefixWord(key []byte) uint64 {
	if len(key) >= 8 {
		return binary.LittleEndian.Uint64(key)
	}
	if cap(key) >= 8 {
		return binary.LittleEndian.Uint64(key[:8]) & (1<<(8*uint(len(key))) - 1)
	}
	var w uint64
	for i := len(key) - 1; i >= 0; i-- {
		w = w<<8 | uint64(key[i])
	}
	return w
}

// memory returns the bytes the table holds.
func (t *rankTable) memory() int {
	return len(t.slots)*8 + cap(t.arena) + len(t.off)*4 + len(t.pair)*4
}
