package wire

import (
	"slices"
	"testing"
)

// However a stream is cut into pieces, Lines gives the same lines, without
// their "\n" or "\r\n", and the last one without its end from Rest.
func TestLinesAreTheSameHoweverTheStreamIsCut(t *testing.T) {
	const stream = "event: a\r\ndata: {\"x\":1}\n\ndata: [DONE]\nlast"
	want := []string{"event: a", `data: {"x":1}`, "", "data: [DONE]"}
	for cut := 0; cut <= len(stream); cut++ {
		var l Lines
		var got []string
		for _, piece := range []string{stream[:cut], stream[cut:]} {
			l.Feed([]byte(piece), func(line []byte) bool {
				got = append(got, string(line))
				return true
			})
		}
		if !slices.Equal(got, want) || string(l.Rest()) != "last" || l.Rest() != nil {
			t.Fatalf("cut at %d: %q", cut, got)
		}
	}
	// fn's false stops the piece there.
	var l Lines
	n := 0
	l.Feed([]byte("a\nb\nc\n"), func([]byte) bool { n++; return false })
	if n != 1 {
		t.Fatalf("%d lines after a stop", n)
	}
}
