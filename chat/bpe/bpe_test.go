package bpe

import (
	"bytes"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer"
)

// encodings pairs each of ours with tiktoken-go's codec, the reference.
func encodings(t testing.TB) []struct {
	enc *Encoding
	ref tokenizer.Codec
} {
	t.Helper()
	var out []struct {
		enc *Encoding
		ref tokenizer.Codec
	}
	for _, e := range []*Encoding{O200kBase(), Cl100kBase()} {
		ref, err := tokenizer.Get(tokenizer.Encoding(e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, struct {
			enc *Encoding
			ref tokenizer.Codec
		}{e, ref})
	}
	return out
}

// checkCount holds got to the reference's count of s: equal, or, where s
// has DEL (which tiktoken-go skips and the pattern counts), at least it.
func checkCount(t testing.TB, name, what, s string, got, want int) {
	t.Helper()
	if strings.Contains(s, "\x7f") {
		if got < want || got < strings.Count(s, "\x7f") {
			t.Errorf("%s: %s(%.200q) = %d, want at least %d and a token for each DEL", name, what, s, got, want)
		}
		return
	}
	if got != want {
		t.Errorf("%s: %s(%.200q) = %d, want %d", name, what, s, got, want)
	}
}

func refCount(t testing.TB, ref tokenizer.Codec, s string) int {
	t.Helper()
	n, err := ref.Count(s)
	if err != nil {
		t.Fatalf("reference Count(%q): %v", s, err)
	}
	return n
}

// cases covers the pre-tokenizers' alternatives and their backtracking, and
// the kinds of text a prompt holds.
var cases = []string{
	"",
	"a",
	"Hello, world!",
	"The quick brown fox jumps over the lazy dog.",
	"It's a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
	// contractions, in any case
	"don't DON'T Don'T you're you'Re YOU'RE we've WE'VE I'm I'M he'll HE'LL she'd SHE'D it's IT'S can't",
	"'s 't 're 've 'm 'll 'd 'S 'T 'RE 'Ve 'M 'Ll 'D 'x 'lL 'ſ x'ſ 'ſx",
	"rock'n'roll o'clock ''s '''' 'tis",
	// numbers
	"1234567 12 123 1234 3.14159 1,000,000 -42 0x1F 1e10 ١٢٣٤ ½⅓ ²³",
	"In 2024, 87.5% of 1200 users paid $19.99/month.",
	// spaces
	"a  b   c    d",
	"word     \nnext",
	"   leading and trailing   ",
	"line one\r\nline two\r\n\r\n\tindented\n",
	"\n \nx",
	"  \n  \n  x",
	"a\n\n\n\nb",
	" ",
	"  ",
	"\t",
	"\n",
	"\r\n",
	" \n ",
	"\t\t\n\t\t",
	"    \n",
	"x  \r\n  y",
	"\u00a0\u00a0word \u2028line\u2029para\u3000全角\u0085nel\u00a0",
	"\u3000\u3000\u3000",
	"\u2003em\u2009thin\u202fnarrow\u205fmath\u1680ogham",
	"\v\fvertical",
	"\x1c\x1d\x1e\x1f separators",
	// punctuation and symbols
	"Hello!!! What??? ... --- === *** ###",
	"path/to/file.go //comment /* block */ a//b",
	"https://example.com/a/b?c=d&e=f#g",
	"(a) [b] {c} <d> \"e\" 'f' `g`",
	"<|endoftext|> <|endofprompt|><|fim_prefix|>",
	"a\x7fb \x7f \x7f\x7f x\x7f\x7f y \x7f\n",
	"\x00\x01\x02 nul",
	// code
	"func (e *Encoding) Count(text []byte) int {\n\tfor p := 0; p < len(text); {\n\t\tp++\n\t}\n\treturn 0\n}\n",
	"def main():\n    print(\"hi\")\n    if x >= 10:\n        return [i**2 for i in range(x)]\n",
	"const f = async (a, b) => { await fetch(`/api/${a}`); return a ?? b; };\n",
	"#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); }\n",
	"SELECT id, name FROM users WHERE created_at > NOW() - INTERVAL '1 day';",
	"getHTTPResponseCode XMLHttpRequest snake_case_identifier SCREAMING_SNAKE camelCaseIdentifierThatIsVeryLong",
	"thisIsAVeryLongIdentifierNameThatKeepsGoingAndGoingWithoutAnyBreaksAtAllSoThatTheMergeHasToWorkHard",
	// JSON and base64
	`{"model":"gpt-4o","messages":[{"role":"user","content":"Hi!\n"}],"temperature":0.7,"max_tokens":1024}`,
	"SGVsbG8sIHdvcmxkISBUaGlzIGlzIGJhc2U2NCBlbmNvZGVkIHRleHQu+/==",
	// CJK, other scripts, emoji, marks
	"你好，世界！今天天气很好。我们去公园散步吧。",
	"日本語のテキストです。カタカナとひらがな、漢字。",
	"한국어 텍스트입니다. 안녕하세요!",
	"Привет, мир! Ελληνικά. עברית. العربية. हिन्दी। ไทย",
	"ABC中DEF abc中def 中ABC Ab中 ǅungla ǅ Džungla ʰaʰ",
	"emoji 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇺🇸 ❤️ ✨",
	"e\u0301 cafe\u0301 \u0301A \u0301a \u0301\u0301 a\u0301\u0301b A\u0301B \u0301'S",
	"(\u0301 (\u0301A .\u0301 \u0301. \u0308\u0308\u0308X",
	"Zalgo: Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǵ̴̻̘o̝̻̤",
	"mixed English和中文text混合ing，with punctuation。",
	"𝓗𝓮𝓵𝓵𝓸 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𠀀𠀁 \U000F0000",
	// invalid UTF-8
	"\xff",
	"a\xffb",
	"\xed\xa0\x80",
	"\xe4\xbd",
	"abc\x80def \xc0\xaf \xf0\x9f\x98 x",
	" \xff\xfe hello",
	"\xff\xffHello",
	"don\xff't",
	// long runs
	strings.Repeat("a", 300),
	strings.Repeat("ab", 200),
	strings.Repeat(" ", 300),
	strings.Repeat("=", 500),
	strings.Repeat("\n", 200),
	strings.Repeat(" \n", 100),
	strings.Repeat("1", 100),
	strings.Repeat("中", 200),
	strings.Repeat("😀", 100),
	strings.Repeat("Ab", 150),
}

func TestCountMatchesTiktoken(t *testing.T) {
	for _, e := range encodings(t) {
		t.Run(e.enc.Name(), func(t *testing.T) {
			for _, s := range cases {
				want := refCount(t, e.ref, s)
				checkCount(t, e.enc.Name(), "CountString", s, e.enc.CountString(s), want)
				checkCount(t, e.enc.Name(), "Count", s, e.enc.Count([]byte(s)), want)
			}
		})
	}
}

// TestCountSpecificPieces pins down a few counts that show what the
// pre-tokenizers do, independently of the reference.
func TestCountSpecificPieces(t *testing.T) {
	o, c := O200kBase(), Cl100kBase()
	for _, tt := range []struct {
		enc  *Encoding
		in   string
		want int
	}{
		{o, "", 0},
		{o, "\x7f", 1}, // DEL is punctuation, as the pattern says (tiktoken-go: 0)
		{c, "\x7f", 1},
		{o, "\x7f\x7f\x7f\x7f", 4}, // no merge of DEL in the vocabulary
		{o, "\xff", 1},             // U+FFFD is one token
		{o, "hello", 1},
		{o, " world", 1},
	} {
		if got := tt.enc.CountString(tt.in); got != tt.want {
			t.Errorf("%s.CountString(%q) = %d, want %d", tt.enc.Name(), tt.in, got, tt.want)
		}
	}
}

func TestName(t *testing.T) {
	if got := O200kBase().Name(); got != "o200k_base" {
		t.Errorf("O200kBase().Name() = %q", got)
	}
	if got := Cl100kBase().Name(); got != "cl100k_base" {
		t.Errorf("Cl100kBase().Name() = %q", got)
	}
	if a, b := O200kBase(), O200kBase(); a != b {
		t.Error("O200kBase() is not shared")
	}
}

// TestVocabulary checks what countPiece relies on: every byte is a token, and
// the table finds every token at its rank.
func TestVocabulary(t *testing.T) {
	for _, e := range encodings(t) {
		r := e.enc.ranks
		tokens := 0
		for id := range len(r.off) - 1 {
			tok := r.arena[r.off[id]:r.off[id+1]]
			if len(tok) == 0 {
				continue
			}
			tokens++
			if got := r.rank(tok); got != uint32(id) {
				t.Fatalf("%s: rank(%q) = %d, want %d", e.enc.Name(), tok, got, id)
			}
		}
		for b := range 256 {
			if r.rank([]byte{byte(b)}) == noRank {
				t.Errorf("%s: byte %#x is not a token", e.enc.Name(), b)
			}
		}
		want := map[string]int{"o200k_base": 199998, "cl100k_base": 100256}[e.enc.Name()]
		if tokens != want {
			t.Errorf("%s: %d tokens, want %d", e.enc.Name(), tokens, want)
		}
		t.Logf("%s: %d tokens, table %.1f MiB (%d slots)", e.enc.Name(), tokens, float64(r.memory())/(1<<20), len(r.slots))
	}
}

// TestClassTable checks the table built from Unicode's range tables against
// classOf, which asks the unicode package rune by rune, as regexp2 does.
func TestClassTable(t *testing.T) {
	tab := classes()
	for r := range rune(tableRunes) {
		if got, want := tab[r], classOf(r); got != want {
			t.Fatalf("class of %U = %08b, want %08b", r, got, want)
		}
	}
	var b [utf8.UTFMax]byte
	for _, r := range []rune{0x7F, utf8.RuneError, 0x20000, 0x10FFFF} {
		n := utf8.EncodeRune(b[:], r)
		if c, size := tab.classAt(b[:n], 0); c != classOf(r) || size != n {
			t.Errorf("classAt(%U) = %08b, %d", r, c, size)
		}
	}
}

func TestCountAllocatesNothing(t *testing.T) {
	text := []byte(strings.Join(cases, "\n") + strings.Repeat("x", 5000))
	for _, e := range encodings(t) {
		e.enc.Count(text) // the first long piece allocates its scratch
		// The scratch is kept through garbage collections, unlike in a
		// sync.Pool.
		runtime.GC()
		runtime.GC()
		if n := testing.AllocsPerRun(20, func() { e.enc.Count(text) }); n != 0 {
			t.Errorf("%s: Count allocates %v times", e.enc.Name(), n)
		}
	}
}

// naiveMerge is byte-pair merging as plainly as it can be written, to hold
// mergeScan and mergeTree to.
func naiveMerge(t *rankTable, piece []byte) int {
	parts := make([][]byte, len(piece))
	for i := range piece {
		parts[i] = piece[i : i+1]
	}
	for {
		best, at := noRank, -1
		for i := 0; i+1 < len(parts); i++ {
			merged := append(append([]byte(nil), parts[i]...), parts[i+1]...)
			if r := t.rank(merged); r < best {
				best, at = r, i
			}
		}
		if at < 0 {
			return len(parts)
		}
		parts[at] = piece[len(bytes.Join(parts[:at], nil)):][:len(parts[at])+len(parts[at+1])]
		parts = append(parts[:at+1], parts[at+2:]...)
	}
}

// TestMergeMatchesNaive compares the merges, at every length on both sides
// of scanPiece and stackPiece, with naiveMerge.
func TestMergeMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	sources := []string{
		strings.Repeat(prose, 2),
		strings.Repeat(chinese+japanese+korean, 2),
		strings.Repeat(goCode, 2),
		strings.Repeat("ab", 400),
	}
	for _, e := range encodings(t) {
		r := e.enc.ranks
		for _, n := range []int{3, 4, 7, 16, scanPiece - 1, scanPiece, scanPiece + 1, 100, stackPiece, stackPiece + 1, 400} {
			for _, src := range sources {
				for range 2 {
					at := rng.IntN(len(src) - n)
					piece := []byte(src[at : at+n])
					want := naiveMerge(r, piece)
					var got int
					if n <= scanPiece {
						got = r.mergeScan(piece)
						if tree := r.mergeLong(piece); tree != want {
							t.Errorf("%s: mergeLong(%q) = %d, want %d", e.enc.Name(), piece, tree, want)
						}
					} else {
						got = r.mergeLong(piece)
					}
					if got != want {
						t.Errorf("%s: merge(%q) = %d, want %d", e.enc.Name(), piece, got, want)
					}
				}
			}
		}
	}
}
