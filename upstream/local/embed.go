package local

import (
	"math"
	"unicode"
	"unicode/utf8"
)

// sluice-local's embeddings are feature hashing (the "hashing trick"), a
// small model that needs no weights and is honest about what it is: each
// word of the text (letters and digits, lower-cased; a Han, kana or
// Hangul character alone), each pair of neighbouring words and each
// three-character piece of a word is hashed (FNV-1a, fixed, so the same
// text gives the same vector on every node and every release) to one
// dimension and a sign, added there, and the sum scaled to unit length.
// Texts that share words and word pieces point the same way, so cosine
// similarity ranks them sensibly, which is what a test or an offline demo
// of a search index needs; it knows nothing of meaning beyond that.

// Dimensions of sluice-local's vectors.
const (
	DefaultDimensions = 256
	MaxDimensions     = 3072 // as text-embedding-3-large's
)

// Feature weights: a whole word says most, its neighbours and its pieces
// (which catch "river" in "rivers") less.
const (
	wordWeight   = 1.0
	bigramWeight = 0.5
	pieceWeight  = 0.25
)

// EmbedText is the unit-length vector of dims dimensions of text (1 to
// MaxDimensions; outside, DefaultDimensions). Invalid UTF-8 is read as
// U+FFFD. A text with no word at all (spaces, punctuation) is hashed whole,
// so its vector is still a unit vector, and still its own.
func (m *Model) EmbedText(text []byte, dims int) []float32 {
	v := make([]float64, dimensionsOr(dims))
	var word []rune // the current word, lower-cased
	prev, hasPrev, any := uint64(0), false, false
	flush := func() {
		if len(word) == 0 {
			return
		}
		h := hashRunes(fnvOffset, word)
		add(v, h, wordWeight)
		if hasPrev {
			add(v, mix(prev, h), bigramWeight)
		}
		prev, hasPrev, any = h, true, true
		if len(word) > 3 {
			for i := 0; i+3 <= len(word); i++ {
				add(v, hashRunes(fnvOffset^pieceSeed, word[i:i+3]), pieceWeight)
			}
		}
		word = word[:0]
	}
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRune(text[i:])
		i += size
		switch {
		case isIdeograph(r):
			flush()
			word = append(word, r)
			flush()
		case unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			word = append(word, unicode.ToLower(r))
		default:
			flush()
		}
	}
	flush()
	if !any {
		add(v, hashBytes(fnvOffset^wholeSeed, text), wordWeight)
	}
	return unit(v)
}

// EmbedTokens is the unit-length vector of a text sent as token ids: each
// id and each pair of neighbouring ids is a feature, as words are for
// EmbedText. ids is not empty.
func (m *Model) EmbedTokens(ids []int64, dims int) []float32 {
	v := make([]float64, dimensionsOr(dims))
	var prev uint64
	for i, id := range ids {
		h := hashUint(fnvOffset^tokenSeed, uint64(id))
		add(v, h, wordWeight)
		if i > 0 {
			add(v, mix(prev, h), bigramWeight)
		}
		prev = h
	}
	return unit(v)
}

func dimensionsOr(dims int) int {
	if dims < 1 || dims > MaxDimensions {
		return DefaultDimensions
	}
	return dims
}

// isIdeograph says whether r is a word on its own: scripts written
// without spaces, where a character is about what a word is elsewhere.
func isIdeograph(r rune) bool {
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul)
}

// add puts weight w of the feature hashed h in its dimension, with the
// sign its hash gives (so that collisions cancel out on average rather
// than pile up).
func add(v []float64, h uint64, w float64) {
	i := (h >> 1) % uint64(len(v))
	if h&1 == 1 {
		w = -w
	}
	v[i] += w
}

// unit scales v to length 1, as float32s.
func unit(v []float64) []float32 {
	var sum float64
	for _, x := range v {
		sum += x * x
	}
	out := make([]float32, len(v))
	if sum == 0 {
		// Every feature cancelled out (possible, if unlikely): the first
		// dimension, rather than a zero vector no cosine can be taken of.
		out[0] = 1
		return out
	}
	n := math.Sqrt(sum)
	for i, x := range v {
		out[i] = float32(x / n)
	}
	return out
}

// FNV-1a, 64-bit, with seeds that keep the kinds of feature apart.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211

	pieceSeed = 0x9e3779b97f4a7c15
	wholeSeed = 0xc2b2ae3d27d4eb4f
	tokenSeed = 0x165667b19e3779f9
)

func hashRunes(h uint64, rs []rune) uint64 {
	var buf [utf8.UTFMax]byte
	for _, r := range rs {
		n := utf8.EncodeRune(buf[:], r)
		for _, c := range buf[:n] {
			h = (h ^ uint64(c)) * fnvPrime
		}
	}
	return finish(h)
}

func hashBytes(h uint64, b []byte) uint64 {
	for _, c := range b {
		h = (h ^ uint64(c)) * fnvPrime
	}
	return finish(h)
}

func hashUint(h, x uint64) uint64 {
	for range 8 {
		h = (h ^ (x & 0xff)) * fnvPrime
		x >>= 8
	}
	return finish(h)
}

// mix combines two features' hashes into their pair's, in order.
func mix(a, b uint64) uint64 { return finish(a*31 ^ b*fnvPrime) }

// finish spreads FNV's bits (its low bits, which pick the sign and the
// dimension, are its weakest): splitmix64's finaliser.
func finish(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}
