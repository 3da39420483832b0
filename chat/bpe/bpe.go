// Package bpe counts the tokens OpenAI's o200k_base and cl100k_base
// tokenizers make of a text, exactly, fast and without allocating, so that
// the gateway can reserve what a provider will bill for a prompt before it
// forwards the request.
//
// The counts are those of github.com/tiktoken-go/tokenizer's Count, which is
// correct but too slow for the hot path (about 12 MB/s, and garbage in
// proportion); that module is only where the vocabularies are read from, and
// the reference the tests hold us to. Its pre-tokenizer regexps are replaced
// by hand-written scanners (split.go) and its map by a compact hash table
// (table.go).
//
// Where tiktoken-go's generated regexp code departs from the patterns, and
// so from OpenAI's own tiktoken, the count follows whichever gives more: it
// follows tiktoken-go in splitting "\n \nx" as "\n", " \n", "x" (a token
// more than the pattern's "\n \n", "x"; split.go says why), and the
// pattern in counting DEL (0x7F) as punctuation, which tiktoken-go's code
// skips as if it were not there. So the count is never below what a
// provider bills, and above tiktoken-go's only where DEL occurs.
package bpe

import (
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/tiktoken-go/tokenizer"
)

// Encoding is one BPE vocabulary with its pre-tokenizer. It is safe for
// concurrent use: all of it is immutable once built but the scratch kept for
// merging long pieces, which is behind a lock.
type Encoding struct {
	name    string
	o200k   bool // which pre-tokenizer: splitO200k, else splitCl100k
	classes *classTable
	ranks   *rankTable
}

// O200kBase returns the encoding of GPT-4o, GPT-4.1, GPT-5 and the o-series.
// It is built on first use (about 200,000 tokens read from tiktoken-go), then
// shared.
func O200kBase() *Encoding { return o200kBase() }

// Cl100kBase returns the encoding of GPT-4 and GPT-3.5 Turbo, built on first
// use, then shared.
func Cl100kBase() *Encoding { return cl100kBase() }

var (
	o200kBase  = sync.OnceValue(func() *Encoding { return load(tokenizer.O200kBase, 200019) })
	cl100kBase = sync.OnceValue(func() *Encoding { return load(tokenizer.Cl100kBase, 100277) })
)

// Name returns the encoding's name as tiktoken spells it: "o200k_base" or
// "cl100k_base".
func (e *Encoding) Name() string { return e.name }

// Count returns how many tokens tiktoken-go's Count makes of text: the same
// pre-tokenization into pieces, and for each piece one token if it is in the
// vocabulary, else as many as byte-pair merging leaves. Special tokens such as
// <|endoftext|> are plain text to it, as to tiktoken-go's Count.
//
// Invalid UTF-8 is counted as tiktoken-go counts it: its regexp engine works
// on []rune(text), where each byte that is not part of valid UTF-8 becomes
// U+FFFD, and the pieces it returns are re-encoded from those runes. So each
// such byte counts as if it were the three bytes of U+FFFD ("\xff" is one
// token, "\xed\xa0\x80", a UTF-16 surrogate, is three U+FFFD in one piece).
//
// Count does not allocate: its scratch is on the stack, except for pieces
// longer than 256 bytes (long runs of one character, a clause of CJK text),
// whose scratch is kept for reuse once allocated, up to pieces of 64 KiB.
func (e *Encoding) Count(text []byte) int {
	valid := utf8.Valid(text)
	total := 0
	for p := 0; p < len(text); {
		var end int
		if e.o200k {
			end = splitO200k(e.classes, text, p)
		} else {
			end = splitCl100k(e.classes, text, p)
		}
		if end < 0 {
			// No alternative matches here, which no character should
			// allow: count it as a token of its own rather than none.
			_, n := e.classes.classAt(text, p)
			p += n
			total++
			continue
		}
		piece := text[p:end]
		if valid {
			total += e.ranks.countPiece(piece)
		} else {
			total += e.countInvalid(piece)
		}
		p = end
	}
	return total
}

// CountString is Count for a string, without copying it.
func (e *Encoding) CountString(text string) int {
	// Count only reads text, so it may see the string's bytes.
	return e.Count(unsafe.Slice(unsafe.StringData(text), len(text)))
}

// countInvalid counts a piece of text that is not all valid UTF-8 after
// replacing each invalid byte with U+FFFD, as tiktoken-go does.
func (e *Encoding) countInvalid(piece []byte) int {
	if utf8.Valid(piece) {
		return e.ranks.countPiece(piece)
	}
	s := e.ranks.scratch.get()
	defer e.ranks.scratch.put(s)
	b := s.replaced[:0]
	for len(piece) > 0 {
		r, n := utf8.DecodeRune(piece)
		if r == utf8.RuneError && n == 1 {
			b = append(b, "\uFFFD"...)
		} else {
			b = append(b, piece[:n]...)
		}
		piece = piece[n:]
	}
	s.replaced = b
	return e.ranks.countPiece(b)
}
