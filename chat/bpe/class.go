package bpe

import (
	"sync"
	"unicode"
	"unicode/utf8"
)

// Character classes the two pre-tokenizers test, one bit each. Each is defined
// exactly as the reference matcher (tiktoken-go's regexp2 code generated from
// the patterns) tests it, which is not always what the pattern says: see cP.
const (
	cU = 1 << iota // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]: o200k's "upper" letters
	cW             // [\p{Ll}\p{Lm}\p{Lo}\p{M}]: o200k's "lower" letters
	cL             // \p{L}
	cN             // \p{N}
	cS             // \s, which regexp2 defines as unicode.IsSpace
	cM             // \p{M}
	// cP is [^\r\n\p{L}\p{N}], the optional character before a word.
	// tiktoken-go's generated matcher tests ASCII with a bitmap that leaves
	// out DEL (0x7F), so to it DEL matches nothing and costs no token; the
	// pattern, and OpenAI's own tiktoken, make it punctuation like any
	// control character, and so does this table: a character the count
	// skipped would be a prompt the reservation does not see.
	cP
	cQ // [^\s\p{L}\p{N}], punctuation and symbols
)

// tableRunes is how many runes classTable covers: the Basic Multilingual Plane
// and the Supplementary Multilingual Plane, where emoji live. Runes above it
// (rare CJK extensions and private use) are classified by classOf.
const tableRunes = 0x20000

// classTable holds the class bits of every rune below tableRunes.
type classTable [tableRunes]uint8

// classes is built on first use and shared, like the encodings; it is never
// written afterwards.
var classes = sync.OnceValue(buildClasses)

// buildClasses sets the bits from the Unicode range tables rather than by
// testing every rune with unicode.Is, which would take tens of milliseconds.
// TestClassTable checks the result against classOf for every rune.
func buildClasses() *classTable {
	t := new(classTable)
	set := func(rt *unicode.RangeTable, bit uint8) {
		for _, r := range rt.R16 {
			for c := uint32(r.Lo); c <= uint32(r.Hi); c += uint32(r.Stride) {
				t[c] |= bit
			}
		}
		for _, r := range rt.R32 {
			for c := r.Lo; c <= r.Hi && c < tableRunes; c += r.Stride {
				t[c] |= bit
			}
		}
	}
	for _, rt := range []*unicode.RangeTable{unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M} {
		set(rt, cU)
	}
	for _, rt := range []*unicode.RangeTable{unicode.Ll, unicode.Lm, unicode.Lo, unicode.M} {
		set(rt, cW)
	}
	set(unicode.L, cL)
	set(unicode.N, cN)
	set(unicode.M, cM)
	// unicode.IsSpace is White_Space above Latin-1 and the same set below it.
	set(unicode.White_Space, cS)
	for r := range rune(tableRunes) {
		t[r] |= derived(r, t[r])
	}
	return t
}

// classOf computes the class bits of r the way the reference matcher does.
func classOf(r rune) uint8 {
	var c uint8
	if unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M) {
		c |= cU
	}
	if unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M) {
		c |= cW
	}
	if unicode.Is(unicode.L, r) {
		c |= cL
	}
	if unicode.Is(unicode.N, r) {
		c |= cN
	}
	if unicode.IsSpace(r) {
		c |= cS
	}
	if unicode.Is(unicode.M, r) {
		c |= cM
	}
	return c | derived(r, c)
}

// derived returns cP and cQ for r, given its other bits.
func derived(r rune, c uint8) uint8 {
	var d uint8
	if c&(cL|cN) == 0 && r != '\r' && r != '\n' {
		d |= cP
	}
	if c&(cS|cL|cN) == 0 {
		d |= cQ
	}
	return d
}

// classAt returns the class bits of the rune that starts at text[i], and its
// length in bytes. The reference matcher sees its input as []rune(text), so
// each byte that is not part of valid UTF-8 is one U+FFFD to it.
func (t *classTable) classAt(text []byte, i int) (uint8, int) {
	if b := text[i]; b < utf8.RuneSelf {
		return t[b], 1 // small enough to be inlined: the ASCII fast path
	}
	return t.classOfRune(text[i:])
}

// classOfRune is classAt for a rune that is not ASCII, at the start of s.
func (t *classTable) classOfRune(s []byte) (uint8, int) {
	r, n := utf8.DecodeRune(s)
	if r < tableRunes {
		return t[r], n // an invalid byte is (utf8.RuneError, 1)
	}
	return classOf(r), n
}
