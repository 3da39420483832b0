package bpe

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tiktoken-go/tokenizer"
)

// BenchmarkCount counts prose, code and Chinese of 1, 10 and 100 KB with ours
// and with tiktoken-go's Count, side by side:
//
//	go test ./chat/bpe -run '^$' -bench Count -benchmem -benchtime 200x
func BenchmarkCount(b *testing.B) {
	texts := []struct{ kind, sample string }{
		{"prose", prose},
		{"code", goCode + pythonCode + jsCode + jsonDoc + "\n"},
		{"chinese", chinese + japanese + korean},
		// mixed is the generated corpus: less repetitive, so the rank
		// table's slots are less often in cache.
		{"mixed", strings.Join(corpus(120), "")},
	}
	for _, e := range encodings(b) {
		for _, tt := range texts {
			for _, size := range []int{1 << 10, 10 << 10, 100 << 10} {
				text := strings.Repeat(tt.sample, size/len(tt.sample)+1)[:size]
				text = strings.ToValidUTF8(text, "") // the cut may split a rune
				name := fmt.Sprintf("%s/%s/%dKB", e.enc.Name(), tt.kind, size>>10)
				b.Run(name+"/bpe", func(b *testing.B) {
					b.SetBytes(int64(len(text)))
					b.ReportAllocs()
					e.enc.CountString(text) // a long piece's scratch, once
					for b.Loop() {
						e.enc.CountString(text)
					}
				})
				b.Run(name+"/tiktoken-go", func(b *testing.B) {
					b.SetBytes(int64(len(text)))
					b.ReportAllocs()
					for b.Loop() {
						if _, err := e.ref.Count(text); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// TestLoad reports how long building an encoding takes and what it keeps. The
// shared encodings may have been built already, so it builds fresh ones.
func TestLoad(t *testing.T) {
	for _, tt := range []struct {
		name   tokenizer.Encoding
		nVocab int
	}{{tokenizer.O200kBase, 200019}, {tokenizer.Cl100kBase, 100277}} {
		classes() // shared by both, built once and timed below
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		start := time.Now()
		e := load(tt.name, tt.nVocab)
		took := time.Since(start)
		runtime.GC()
		runtime.ReadMemStats(&after)
		t.Logf("%s: built in %v; rank table %.1f MiB; live heap grew by %.1f MiB (tiktoken-go's own vocabulary map included, the first time)",
			tt.name, took.Round(time.Millisecond), float64(e.ranks.memory())/(1<<20),
			(float64(after.HeapAlloc)-float64(before.HeapAlloc))/(1<<20))
		// A start-up cost, not a hot path: the bound catches a build
		// gone quadratic (tens of seconds), with room for -race beside
		// two other test binaries on two cores, where 1.1 s was seen.
		if took > 5*time.Second {
			t.Errorf("%s took %v to build", tt.name, took)
		}
		runtime.KeepAlive(e)
	}
	start := time.Now()
	buildClasses()
	t.Logf("character classes (shared): built in %v, %d KiB", time.Since(start).Round(time.Microsecond), tableRunes>>10)
}

// TestConcurrentCount counts from several goroutines at once, for the race
// detector.
func TestConcurrentCount(t *testing.T) {
	text := strings.Repeat(prose+goCode+chinese+strings.Repeat("x", 300), 3)
	want := O200kBase().CountString(text)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 20 {
				if got := O200kBase().CountString(text); got != want {
					t.Errorf("got %d, want %d", got, want)
				}
			}
		})
	}
	wg.Wait()
}
