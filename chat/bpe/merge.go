package bpe

import (
	"encoding/binary"
	"math/bits"
	"sync"
)

// Pieces up to scanPiece bytes are merged by mergeScan, whose linear scans
// cost less than mergeTree's bookkeeping on so few parts; up to stackPiece
// bytes, mergeTree's scratch is on the stack, beyond in a pool.
const (
	scanPiece  = 32
	stackPiece = 256
)

// countPiece returns how many tokens the piece is: one if it is a token
// (tiktoken checks that first, and BPE would not always get there), else as
// many as byte-pair merging leaves.
//
// The merge is tiktoken's: the piece starts as single bytes, and the
// adjacent pair whose merged bytes are the lowest-ranked token is merged, the
// leftmost on a tie, until no adjacent pair is a token. Both implementations
// below keep the parts as a linked list, a part named by the offset of its
// first byte, and give each part a key, rank<<shift | offset, for merging it
// with the next part (the maximum if that is no token): the lowest key is then
// both the pair to merge and, on a tie of ranks, the leftmost.
func (t *rankTable) countPiece(piece []byte) int {
	switch {
	case len(piece) == 1:
		return 1 // every byte is a token (TestVocabulary)
	case len(piece) == 2:
		if t.pair[binary.LittleEndian.Uint16(piece)] != noRank {
			return 1
		}
		return 2
	case t.rank(piece) != noRank:
		return 1
	case len(piece) <= scanPiece:
		return t.mergeScan(piece)
	default:
		return t.mergeLong(piece)
	}
}

// mergeLong gives mergeTree its scratch: on the stack up to stackPiece
// bytes, else from a pool.
func (t *rankTable) mergeLong(piece []byte) int {
	if len(piece) <= stackPiece {
		var next, prev [stackPiece]int32
		var tree [2 * stackPiece]uint64
		return t.mergeTree(piece, next[:], prev[:], tree[:])
	}
	s := t.scratch.get()
	defer t.scratch.put(s)
	if n := len(piece); len(s.next) < n {
		s.next = make([]int32, n)
		s.prev = make([]int32, n)
		s.tree = make([]uint64, 2<<bits.Len(uint(n)))
	}
	return t.mergeTree(piece, s.next, s.prev, s.tree)
}

// mergeScan merges a piece of at most scanPiece bytes, finding the lowest key
// with a linear scan (branch-free: a min over 32 values), and returns how many
// parts are left.
func (t *rankTable) mergeScan(piece []byte) int {
	const noKey = ^uint32(0)
	key := func(r uint32, i int) uint32 {
		if r == noRank {
			return noKey
		}
		return r<<8 | uint32(i) // ranks have 18 bits, offsets 5
	}
	var keys [scanPiece]uint32
	var next, prev [scanPiece]uint8
	n := len(piece)
	for i := range n {
		next[i], prev[i] = uint8(i+1), uint8(i-1)
		keys[i] = noKey
		if i+1 < n {
			keys[i] = key(t.pair[binary.LittleEndian.Uint16(piece[i:])], i)
		}
	}
	parts := n
	for {
		best := keys[0]
		for _, k := range keys[1 : n-1] {
			best = min(best, k)
		}
		if best == noKey {
			return parts
		}
		// Merge part i with the next one, j; k is the part after. Then key
		// the merged part with k, and the part before it with the merged.
		i := int(best & 0xff)
		j := int(next[i])
		k := int(next[j])
		next[i] = uint8(k)
		keys[j] = noKey
		parts--
		if k < n {
			prev[k] = uint8(i)
			keys[i] = key(t.rank(piece[i:next[k]]), i)
		} else {
			keys[i] = noKey
		}
		if i > 0 {
			p := int(prev[i])
			keys[p] = key(t.rank(piece[p:k]), p)
		}
	}
}

// mergeScratch is the scratch of mergeTree for pieces too long for the
// stack, and of Count for a piece with invalid UTF-8 replaced.
type mergeScratch struct {
	next, prev []int32
	tree       []uint64
	replaced   []byte
}

// scratchList keeps a few mergeScratch for reuse. It is a locked free list
// rather than a sync.Pool because a pool loses what it holds at each garbage
// collection, and a goroutine that moves to another P does not find what it
// put back: a long piece would allocate now and then. The lock is taken only
// for pieces longer than stackPiece, whose merging costs far more.
type scratchList struct {
	mu   sync.Mutex
	free []*mergeScratch
}

// Scratch kept for reuse is at most for pieces of keepPiece bytes (1.5 MiB
// each) and at most keepScratch of them; a longer piece allocates, which
// costs little beside merging it.
const (
	keepPiece   = 1 << 16
	keepScratch = 8
)

func (l *scratchList) get() *mergeScratch {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.free); n > 0 {
		s := l.free[n-1]
		l.free = l.free[:n-1]
		return s
	}
	return new(mergeScratch)
}

func (l *scratchList) put(s *mergeScratch) {
	if len(s.next) > keepPiece || len(s.replaced) > 3*keepPiece {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.free) < keepScratch {
		l.free = append(l.free, s)
	}
}

// mergeTree merges a piece of n bytes in O(n log n) rather than mergeScan's
// O(n²): the keys are the leaves of a tournament tree, each inner node the
// lowest key below it, so the root is the next merge; a merge changes three
// leaves, each fixed up in at most log n steps. It returns how many parts are
// left.
//
// next and prev need n entries, tree twice the power of two >= n; n < 2^31.
func (t *rankTable) mergeTree(piece []byte, next, prev []int32, tree []uint64) int {
	const noKey = ^uint64(0)
	key := func(r uint32, i int32) uint64 {
		return uint64(r)<<32 | uint64(i) // >= noRank<<32 if no token
	}
	n := int32(len(piece))
	leaves := int32(1) << bits.Len32(uint32(n-1))
	tree = tree[:2*leaves]
	for i := range n {
		next[i], prev[i] = i+1, i-1
		tree[leaves+i] = noKey
		if i+1 < n {
			tree[leaves+i] = key(t.pair[binary.LittleEndian.Uint16(piece[i:])], i)
		}
	}
	for i := leaves + n; i < 2*leaves; i++ {
		tree[i] = noKey
	}
	for k := leaves - 1; k > 0; k-- {
		tree[k] = min(tree[2*k], tree[2*k+1])
	}
	// set puts key x at leaf i and fixes up the lowest keys above it,
	// stopping where one does not change.
	set := func(i int32, x uint64) {
		k := leaves + i
		tree[k] = x
		for k > 1 {
			k /= 2
			m := min(tree[2*k], tree[2*k+1])
			if tree[k] == m {
				return
			}
			tree[k] = m
		}
	}
	parts := int(n)
	for tree[1]>>32 != uint64(noRank) {
		i := int32(tree[1])
		j := next[i]
		k := next[j]
		next[i] = k
		set(j, noKey)
		parts--
		if k < n {
			prev[k] = i
			set(i, key(t.rank(piece[i:next[k]]), i))
		} else {
			set(i, noKey)
		}
		if i > 0 {
			p := prev[i]
			set(p, key(t.rank(piece[p:k]), p))
		}
	}
	return parts
}
