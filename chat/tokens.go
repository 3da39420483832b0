package chat

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// asciiCharsPerToken is how many ASCII letters or digits one token covers.
// BPE tokenizers for English average roughly four characters per token, so a
// run of n such characters is billed as ceil(n/4) tokens.
const asciiCharsPerToken = 4

// CountTokens approximates a BPE tokenizer, so that what sluice-local reports,
// what a request is estimated at before admission and what a provider that
// reports no usage is billed are deterministic and close to what a hosted
// model would count, without shipping a vocabulary:
//
//   - each run of ASCII letters and digits (a "word") counts ceil(len/4);
//   - each whitespace rune counts 0;
//   - every other rune counts 1: Han and other CJK characters (which BPE
//     vocabularies rarely merge), punctuation and symbols (ASCII or
//     full-width), other scripts, control characters and each byte of
//     invalid UTF-8.
//
// The count only grows as text is appended, which is what lets a reply be cut
// to a token budget by taking a prefix.
func CountTokens(s string) int { return countTokens(s) }

// CountTokensBytes is CountTokens of text, without converting it.
func CountTokensBytes(text []byte) int { return countTokens(text) }

func countTokens[T ~string | ~[]byte](s T) int {
	total, run := 0, 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			// ASCII: letters and digits make runs, spaces are free, the
			// rest are a token each. Most prompts are mostly ASCII.
			switch asciiClass[b] {
			case asciiAlnum:
				if run%asciiCharsPerToken == 0 {
					total++
				}
				run++
			case asciiSpace:
				run = 0
			default:
				run = 0
				total++
			}
			i++
			continue
		}
		var buf [utf8.UTFMax]byte
		r, size := utf8.DecodeRune(buf[:copy(buf[:], s[i:])])
		run = 0
		if !unicode.IsSpace(r) {
			total++
		}
		i += size
	}
	return total
}

const (
	asciiOther = iota
	asciiAlnum
	asciiSpace
)

// asciiClass is what the counter makes of each ASCII byte, as add does.
var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for b := range utf8.RuneSelf {
		switch r := rune(b); {
		case isASCIIAlnum(r):
			t[b] = asciiAlnum
		case unicode.IsSpace(r):
			t[b] = asciiSpace
		}
	}
	return t
}()

// tokenCounter applies the CountTokens rules one rune at a time, so truncation
// can find the cut point in a single pass instead of recounting each prefix.
type tokenCounter struct {
	total int
	run   int // length of the current run of ASCII letters/digits
}

// add counts r and returns the running total.
func (c *tokenCounter) add(r rune) int {
	if isASCIIAlnum(r) {
		// ceil(run/4) grows by one exactly when a run reaches 1, 5, 9, ...
		if c.run%asciiCharsPerToken == 0 {
			c.total++
		}
		c.run++
		return c.total
	}
	c.run = 0
	if !unicode.IsSpace(r) {
		c.total++
	}
	return c.total
}

func isASCIIAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

// Truncate returns the longest prefix of s, cut on a rune boundary, that
// counts at most maxTokens, and whether anything was cut. maxTokens <= 0 means
// no limit. Trailing whitespace left by the cut is dropped; it costs no tokens.
func Truncate(s string, maxTokens int) (string, bool) {
	if maxTokens <= 0 {
		return s, false
	}
	var c tokenCounter
	for i, r := range s {
		if c.add(r) > maxTokens {
			return strings.TrimRightFunc(s[:i], unicode.IsSpace), true
		}
	}
	return s, false
}
