package upstream

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/sluicehq/sluice/upstream/local"
)

func TestUsageTap(t *testing.T) {
	cases := []struct {
		name       string
		in         string
		delivered  string
		prompt     int
		completion int
		final      bool
	}{
		{"usage in the last chunk", chunk1 + chunk2 + usage + done, "Hello world", 9, 2, true},
		{"cut off before usage", chunk1 + chunk2, "Hello world", 0, 0, false},
		{"CRLF and no space after data:", strings.ReplaceAll("data:{\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n", "\n", "\r\n") + "data:[DONE]\r\n\r\n", "a", 0, 0, false},
		{"comments, events and junk ignored", ": keep-alive\nevent: message\nid: 7\ndata: {not json\n\n" + chunk1, "Hello", 0, 0, false},
		{"tool-call arguments and refusals count", "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"arguments\":\"{\\\"q\\\":1}\"}}]}}]}\n\ndata: {\"choices\":[{\"delta\":{\"refusal\":\"no\"}}]}\n\n", `{"q":1}no`, 0, 0, false},
		{"legacy text completions", "data: {\"choices\":[{\"text\":\"abc\"}]}\n\n", "abc", 0, 0, false},
		{"null usage then real usage", "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"usage\":null}\n\n" + usage, "x", 9, 2, true},
		{"last line without newline", "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":4}}", "", 1, 4, true},
		{"CJK content", "data: {\"choices\":[{\"delta\":{\"content\":\"春联\"}}]}\n\n", "春联", 0, 0, false},
	}
	readers := map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"half":     iotest.HalfReader,
	}
	for _, tc := range cases {
		for rname, wrap := range readers {
			t.Run(tc.name+"/"+rname, func(t *testing.T) {
				tap := NewUsageTap(wrap(strings.NewReader(tc.in)))
				out, err := io.ReadAll(tap)
				if err != nil {
					t.Fatal(err)
				}
				if string(out) != tc.in {
					t.Fatalf("tap changed the bytes: %q", out)
				}
				if tap.Delivered() != tc.delivered {
					t.Fatalf("Delivered = %q, want %q", tap.Delivered(), tc.delivered)
				}
				p, c, final := tap.Usage()
				if p != tc.prompt || c != tc.completion || final != tc.final {
					t.Fatalf("Usage = %d, %d, %v; want %d, %d, %v", p, c, final, tc.prompt, tc.completion, tc.final)
				}
				want := tc.completion
				if !tc.final {
					want = local.CountTokens(tc.delivered)
				}
				if got := tap.CompletionTokens(); got != want {
					t.Fatalf("CompletionTokens = %d, want %d", got, want)
				}
			})
		}
	}
}

func TestUsageTapSkipsOverlongLines(t *testing.T) {
	long := "data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("x", maxTapLine) + "\"}}]}\n\n"
	in := long + chunk1
	tap := NewUsageTap(iotest.HalfReader(strings.NewReader(in)))
	out, err := io.ReadAll(tap)
	if err != nil || !bytes.Equal(out, []byte(in)) {
		t.Fatalf("passthrough broken: %v", err)
	}
	if tap.Delivered() != "Hello" {
		t.Fatalf("Delivered = %.20q..., want only the parsable line", tap.Delivered())
	}
}
