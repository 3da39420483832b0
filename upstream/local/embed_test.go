package local

import (
	"math"
	"slices"
	"testing"
)

func norm(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

func cosine(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s / norm(a) / norm(b)
}

// Vectors are unit length at every size asked for, the default size
// without one, and the same for the same input every time.
func TestEmbeddingsAreDeterministicUnitVectors(t *testing.T) {
	m, err := New()
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"the river runs to the sea", "写一副关于平安的春联", "   ", "!!!", "\xff\xfe", "a"} {
		for _, dims := range []int{0, 1, 2, 256, 1536, MaxDimensions} {
			v := m.EmbedText([]byte(text), dims)
			want := dims
			if dims == 0 {
				want = DefaultDimensions
			}
			if len(v) != want {
				t.Fatalf("%q at %d: %d dimensions", text, dims, len(v))
			}
			if n := norm(v); math.Abs(n-1) > 1e-5 {
				t.Fatalf("%q at %d: length %v", text, dims, n)
			}
			if again := m.EmbedText([]byte(text), dims); !slices.Equal(v, again) {
				t.Fatalf("%q at %d: another vector the second time", text, dims)
			}
		}
	}
	tokens := m.EmbedTokens([]int64{1, 2, 3, 100000}, 64)
	if len(tokens) != 64 || math.Abs(norm(tokens)-1) > 1e-5 || !slices.Equal(tokens, m.EmbedTokens([]int64{1, 2, 3, 100000}, 64)) {
		t.Fatalf("token vector %v", tokens)
	}
	if slices.Equal(tokens, m.EmbedTokens([]int64{3, 2, 1, 100000}, 64)) {
		t.Fatal("token order is lost")
	}
}

// The vectors are a model, not noise: texts that share words are closer
// than texts that do not, case and punctuation aside; and two texts with
// no word differ.
func TestEmbeddingsRankSharedWordsCloser(t *testing.T) {
	m, _ := New()
	e := func(s string) []float32 { return m.EmbedText([]byte(s), DefaultDimensions) }
	query := e("rivers and the sea")
	near, far := e("The river flows into the sea."), e("quarterly invoice totals for March")
	if cn, cf := cosine(query, near), cosine(query, far); cn <= cf || cn < 0.3 {
		t.Fatalf("cosine to a related text %.3f, to an unrelated one %.3f", cn, cf)
	}
	if c := cosine(e("Hello, World!"), e("hello world")); c < 0.999 {
		t.Fatalf("case and punctuation changed the vector: cosine %.4f", c)
	}
	if slices.Equal(e("!!!"), e("???")) {
		t.Fatal("two texts without words got one vector")
	}
	if c := cosine(e("平安春联"), e("春联")); c < 0.5 {
		t.Fatalf("Han characters are not words: cosine %.3f", c)
	}
}
