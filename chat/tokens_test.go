package chat

import (
	"strings"
	"testing"
)

func TestCountTokens(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"", 0},
		{"   \t\n", 0},
		{"a", 1},
		{"abcd", 1},
		{"abcde", 2},
		{"hello world", 4},          // ceil(5/4) + ceil(5/4)
		{"12345678", 2},             // digits join the run
		{"hello, world!", 6},        // 2 + "," + 2 + "!"
		{"春联", 2},                   // one per Han character
		{"上联：天增岁月人增寿", 10},          // full-width colon is punctuation
		{"写一副couplet", 5},           // 3 Han + ceil(7/4)
		{"a couplet 关于福", 6},        // 1 + 2 + 3 Han + 0 spaces
		{"café", 2},                 // "caf" then é counts 1
		{"😀", 1},                    // symbols count 1
		{"\xff\xfe", 2},             // each invalid byte counts 1
		{"ひらがな한국어", 7},              // other CJK scripts: 1 per character
		{"well-being", 4},           // 1 + "-" + 2
		{"\u3000春\u3000", 1},        // ideographic space is whitespace
		{strings.Repeat("x", 9), 3}, // ceil(9/4)
	}
	for _, tt := range tests {
		if got := CountTokens(tt.in); got != tt.want {
			t.Errorf("CountTokens(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		in      string
		max     int
		want    string
		wantCut bool
	}{
		{"abcdefgh", 1, "abcd", true},
		{"abcdefgh", 2, "abcdefgh", false},
		{"hello world", 2, "hello", true}, // trailing space dropped
		{"春联好", 2, "春联", true},
		{"a,b", 2, "a,", true},
		{"", 1, "", false},
		{"abc", 0, "abc", false},
	}
	for _, tt := range tests {
		got, cut := Truncate(tt.in, tt.max)
		if got != tt.want || cut != tt.wantCut {
			t.Errorf("Truncate(%q, %d) = %q, %v; want %q, %v", tt.in, tt.max, got, cut, tt.want, tt.wantCut)
		}
	}
}

func TestPromptTokensCountsEachMessageWithItsOverhead(t *testing.T) {
	msgs := []Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "写春联"}}
	if got := PromptTokens(msgs); got != (3+4)+(3+4) { // "be brief" = 1 + ceil(5/4)
		t.Fatalf("PromptTokens = %d, want 14", got)
	}
	if u := (Usage{PromptTokens: 14, CompletionTokens: 2}); u.Total() != 16 {
		t.Fatalf("Total of %+v = %d", u, u.Total())
	}
	if !(Message{Role: "developer"}).IsSystem() || (Message{Role: "user"}).IsSystem() {
		t.Fatal("IsSystem")
	}
}

// FuzzCountTokensBytes: the byte counter is the string counter, rune by
// rune rules and all.
func FuzzCountTokensBytes(f *testing.F) {
	for _, s := range []string{"", "hello, world!", "写一副couplet", "\xff\xfe", "a\u3000b", "café 😀"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var want tokenCounter
		for _, r := range s {
			want.add(r)
		}
		if got := CountTokensBytes([]byte(s)); got != want.total || CountTokens(s) != want.total {
			t.Fatalf("%q: bytes %d, string %d, rune by rune %d", s, got, CountTokens(s), want.total)
		}
	})
}
