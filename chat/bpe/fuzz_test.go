package bpe

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// FuzzCountMatchesTiktoken compares both encodings with tiktoken-go on
// arbitrary strings, invalid UTF-8 included, and on the same bytes read as
// indices into alphabet, which makes the strings the pre-tokenizers find
// hardest far likelier than random bytes do. Failing inputs the fuzzer found
// are kept under testdata/fuzz/FuzzCountMatchesTiktoken.
func FuzzCountMatchesTiktoken(f *testing.F) {
	for _, s := range cases {
		f.Add(s)
	}
	encs := encodings(f)
	f.Fuzz(func(t *testing.T, s string) {
		for _, in := range []string{s, fromAlphabet(s)} {
			for _, e := range encs {
				checkCount(t, e.enc.Name(), "CountString", in, e.enc.CountString(in), refCount(t, e.ref, in))
			}
		}
	})
}

// alphabet has a few characters of each class the pre-tokenizers tell
// apart: Lu, Ll, Lt, Lm, Lo, marks, digits and other numbers, the letters of
// contractions (U+017F ſ among them), spaces of several kinds, line breaks, the
// punctuation they treat specially, DEL, and an invalid byte.
var alphabet = []string{
	"A", "Z", "a", "z", "s", "t", "r", "e", "v", "m", "l", "d", "S", "T", "R", "E", "L", "D",
	"'", "\u017f", "\u00c9", "\u00e9", "\u01c5", "\u02b0", "\u30fc", "\u4e2d", "\u3042", "\ud55c",
	"\u0301", "\u0308", "\u0903", "0", "7", "\u0663", "\u00bd", "\u00b2", "\u216b",
	" ", " ", " ", "\t", "\n", "\r", "\u00a0", "\u3000", "\u2028", "\u0085", "\v",
	".", ",", "/", "(", "-", "!", "\U0001F600", "\u200d", "\x7f", "\x1f", "\xff",
}

// fromAlphabet maps each byte of s to a string of alphabet.
func fromAlphabet(s string) string {
	var b strings.Builder
	for i := range len(s) {
		b.WriteString(alphabet[int(s[i])%len(alphabet)])
	}
	return b.String()
}

// TestRandomAlphabetMatchesTiktoken is the fuzz test's second half on random
// strings over alphabet, so that every run covers it without fuzzing.
func TestRandomAlphabetMatchesTiktoken(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	encs := encodings(t)
	buf := make([]byte, 40)
	for range 5000 {
		for i := range buf {
			buf[i] = byte(rng.IntN(256))
		}
		in := fromAlphabet(string(buf[:1+rng.IntN(len(buf))]))
		for _, e := range encs {
			checkCount(t, e.enc.Name(), "CountString", in, e.enc.CountString(in), refCount(t, e.ref, in))
		}
	}
}

// TestCorpusMatchesTiktoken compares counts on a few hundred KB of generated
// text that mixes everything in cases, string by string and in total.
func TestCorpusMatchesTiktoken(t *testing.T) {
	docs := corpus(400)
	all := strings.Join(docs, "")
	if len(all) < 300<<10 {
		t.Fatalf("corpus is only %d bytes", len(all))
	}
	for _, e := range encodings(t) {
		t.Run(e.enc.Name(), func(t *testing.T) {
			sum := 0
			for _, d := range docs {
				want := refCount(t, e.ref, d)
				checkCount(t, e.enc.Name(), "CountString", d, e.enc.CountString(d), want)
				sum += want
			}
			got, want := e.enc.CountString(all), refCount(t, e.ref, all)
			checkCount(t, e.enc.Name(), "CountString of the whole corpus", all, got, want)
			t.Logf("%d documents, %d bytes: %d tokens (%d counted one by one)", len(docs), len(all), got, sum)
		})
	}
}

// corpus returns n pseudo-random documents, the same on every run, each a
// mix of prose, code, CJK, emoji, numbers, whitespace and the odd cases.
func corpus(n int) []string {
	rng := rand.New(rand.NewPCG(1, 2))
	fragments := append([]string{
		prose, goCode, pythonCode, jsCode, chinese, japanese, korean, jsonDoc,
		"SGVsbG8sIHdvcmxkISBUaGlzIGlzIGJhc2U2NCBlbmNvZGVkIHRleHQu",
		"\u00a0", "\u2028", "\u3000", "\u0085", "\r\n", "\t", "    ", "\n\n", "  \n",
		"DON'T", "you'Re", "I'LL", "1234567", "3.14", "<|endoftext|>", "😀👍🏽", "e\u0301",
	}, cases...)
	words := strings.Fields(prose + " " + chinese + " " + goCode)
	docs := make([]string, n)
	for i := range docs {
		var b strings.Builder
		for b.Len() < 1000 {
			switch rng.IntN(4) {
			case 0:
				f := fragments[rng.IntN(len(fragments))]
				b.WriteString(f[:rng.IntN(len(f)+1)])
			case 1:
				b.WriteString(fragments[rng.IntN(len(fragments))])
			case 2:
				b.WriteString(words[rng.IntN(len(words))])
				b.WriteString([]string{" ", "  ", "\n", "\t", "", ". ", ", ", "_", "'s "}[rng.IntN(9)])
			default:
				fmt.Fprintf(&b, "%d%s", rng.IntN(1e7), []string{" ", ",", "/", "-", "\n"}[rng.IntN(5)])
			}
		}
		docs[i] = b.String()
	}
	return docs
}

// Sample texts for the corpus and the benchmarks.
const (
	prose = `It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, it was the season of Darkness, it was the spring of hope, it was the winter of despair. We had everything before us, we had nothing before us; we were all going direct to Heaven, we were all going direct the other way. In short, the period was so far like the present period, that some of its noisiest authorities insisted on its being received, for good or for evil, in the superlative degree of comparison only. There were a king with a large jaw and a queen with a plain face, on the throne of England; there were a king with a large jaw and a queen with a fair face, on the throne of France. It was clearer than crystal to the lords of the State preserves of loaves and fishes, that things in general were settled for ever.
`
	goCode = `// Count returns the number of tokens in text.
func (e *Encoding) Count(text []byte) int {
	total := 0
	for p := 0; p < len(text); {
		end := e.split(e.classes, text, p)
		if end < 0 {
			p++
			continue
		}
		total += e.ranks.countPiece(text[p:end])
		p = end
	}
	return total
}

type rankTable struct {
	slots []slot
	shift uint
	arena []byte   // every token's bytes
	off   []uint32 // offsets into arena
}
`
	pythonCode = `import json
from dataclasses import dataclass


@dataclass
class Request:
    model: str
    max_tokens: int = 1024

    def to_json(self) -> str:
        return json.dumps({"model": self.model, "max_tokens": self.max_tokens})


def handler(event, context):
    for record in event.get("Records", []):
        if record["eventName"] != "INSERT":
            continue
        print(f"new item: {record['dynamodb']['Keys']}")
    return {"statusCode": 200}
`
	jsCode = `export async function fetchUser(id) {
  const res = await fetch(` + "`/api/users/${encodeURIComponent(id)}`" + `, {
    headers: { Accept: "application/json" },
  });
  if (!res.ok) throw new Error(` + "`HTTP ${res.status}`" + `);
  return (await res.json())?.user ?? null;
}
`
	chinese  = `自然语言处理是计算机科学领域与人工智能领域中的一个重要方向。它研究能实现人与计算机之间用自然语言进行有效通信的各种理论和方法。自然语言处理是一门融语言学、计算机科学、数学于一体的科学。因此，这一领域的研究将涉及自然语言，即人们日常使用的语言，所以它与语言学的研究有着密切的联系，但又有重要的区别。`
	japanese = `吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。何でも薄暗いじめじめした所でニャーニャー泣いていた事だけは記憶している。`
	korean   = `대한민국은 동아시아의 한반도 남부에 위치한 국가이다. 수도는 서울특별시이다.`
	jsonDoc  = `{"id":"chatcmpl-123","object":"chat.completion","created":1677652288,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there, how may I assist you today?"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}`
)
