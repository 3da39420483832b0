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
	scanPiece  = 16
	stackPiece = 128
)

// countPiece returns how many tokens the piece is: one if it is a token
// (tiktoken checks that first, and BPE would not always get there), else as
// many as byte-pair merging leaves.
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
	case len(piece) <= stackPiece:
		var next [stackPiece + 1]int32
		var prev [stackPiece]int32
		var tree [2 * stackPiece]uint32
		return t.mergeTree(piece, next[:], prev[:], tree[:])
	default:
		s := scratchPool.Get().(*mergeScratch)
		defer scratchPool.Put(s)
		n := len(piece)
		if len(s.next) <= n {
			s.next = make([]int32, n+1)
			s.prev = make([]int32, n)
			s.tree = make([]uint32, 2<<bits.Len(uint(n)))
		}
		return t.mergeTree(piece, s.next, s.prev, s.tree)
	}
}

// mergeScan is tiktoken's byte-pair merge: the piece starts as single bytes,
// and the adjacent pair whose merged bytes are the lowest-ranked token is
// merged, the leftmost on a tie, until no adjacent pair is a token. It returns
// how many parts are left.
func (t *rankTable) mergeScan(piece []byte) int {
	// Part i is piece[start[i]:start[i+1]]; rank[i] is the rank of parts i
	// and i+1 merged, noRank past the last pair. m is the number of parts.
	var start [scanPiece + 1]uint8
	var rank [scanPiece]uint32
	m := len(piece)
	for i := range m {
		start[i] = uint8(i)
	}
	start[m] = uint8(m)
	for i := 0; i+1 < m; i++ {
		rank[i] = t.pair[binary.LittleEndian.Uint16(piece[i:])]
	}
	rank[m-1] = noRank
	for m > 1 {
		best, i := noRank, 0
		for j, r := range rank[:m-1] {
			if r < best {
				best, i = r, j
			}
		}
		if best == noRank {
			break
		}
		// Merge parts i and i+1, then rank the pairs the merged part now
		// forms with its neighbours.
		if i+2 < m {
			rank[i] = t.rank(piece[start[i]:start[i+3]])
		} else {
			rank[i] = noRank
		}
		if i > 0 {
			rank[i-1] = t.rank(piece[start[i-1]:start[i+2]])
		}
		copy(start[i+1:m], start[i+2:m+1])
		copy(rank[i+1:m-1], rank[i+2:m])
		m--
	}
	return m
}

// mergeScratch is the scratch of mergeTree for pieces too long for the stack.
type mergeScratch struct {
	next, prev []int32
	tree       []uint32
}

var scratchPool = sync.Pool{New: func() any { return new(mergeScratch) }}

// mergeTree returns what mergeScan does, in O(n log n) rather than O(n²),
// for pieces of n bytes: the parts are a linked list (a part is named by the
// offset of its first byte), and the ranks of their pairs the leaves of a
// tournament tree, each inner node the lowest rank below it. The root is the
// rank to merge next and the leftmost leaf holding it is where; a merge then
// changes three leaves, each fixed up in at most log n steps.
//
// next needs n+1 entries, prev n and tree twice the power of two >= n.
func (t *rankTable) mergeTree(piece []byte, next, prev []int32, tree []uint32) int {
	n := int32(len(piece))
	leaves := int32(1) << bits.Len32(uint32(n-1)) // >= n
	tree = tree[:2*leaves]
	for i := range n {
		next[i], prev[i] = i+1, i-1
		tree[leaves+i] = noRank
		if i+1 < n {
			tree[leaves+i] = t.pair[binary.LittleEndian.Uint16(piece[i:])]
		}
	}
	for i := leaves + n; i < 2*leaves; i++ {
		tree[i] = noRank
	}
	for k := leaves - 1; k > 0; k-- {
		tree[k] = min(tree[2*k], tree[2*k+1])
	}
	// set puts rank r at leaf i and fixes up the lowest ranks above it,
	// stopping where one does not change.
	set := func(i int32, r uint32) {
		k := leaves + i
		tree[k] = r
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
	for tree[1] != noRank {
		k := int32(1)
		for k < leaves {
			k *= 2
			if tree[k] != tree[k/2] {
				k++ // the left subtree does not hold the lowest rank
			}
		}
		// Merge part i with the next one, j; k is the part after.
		i := k - leaves
		j := next[i]
		k = next[j]
		next[i] = k
		if k < n {
			prev[k] = i
		}
		set(j, noRank)
		parts--
		if k < n {
			set(i, t.rank(piece[i:next[k]]))
		} else {
			set(i, noRank)
		}
		if i > 0 {
			p := prev[i]
			set(p, t.rank(piece[p:k]))
		}
	}
	return parts
}
