package upstream

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/sluicehq/sluice/chat"
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
				u, final := tap.Usage()
				if u.PromptTokens != tc.prompt || u.CompletionTokens != tc.completion || final != tc.final {
					t.Fatalf("Usage = %+v, %v; want %d, %d, %v", u, final, tc.prompt, tc.completion, tc.final)
				}
				ours := func(d string) chat.Usage { return chat.Usage{PromptTokens: 7, CompletionTokens: chat.CountTokens(d)} }
				want := chat.Usage{PromptTokens: tc.prompt, CompletionTokens: tc.completion}
				if !tc.final {
					want = ours(tc.delivered)
				}
				if got := tap.Billed(ours); got != want {
					t.Fatalf("Billed = %+v, want %+v", got, want)
				}
			})
		}
	}
}

// A stream cut short that showed reasoning bills it with the text: it is
// output the provider generated, kept apart from the reply.
func TestUsageTapBillsTheReasoningOfACutStream(t *testing.T) {
	in := "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"weigh the rivers \"}}]}\n\n" + chunk1
	tap := NewUsageTap(iotest.OneByteReader(strings.NewReader(in)))
	if _, err := io.ReadAll(tap); err != nil {
		t.Fatal(err)
	}
	ours := func(d string) chat.Usage { return chat.Usage{PromptTokens: 7, CompletionTokens: chat.CountTokens(d)} }
	if tap.Delivered() != "Hello" || tap.Reasoning() != "weigh the rivers " ||
		tap.Billed(ours) != ours("weigh the rivers Hello") {
		t.Fatalf("delivered %q, reasoning %q, billed %+v", tap.Delivered(), tap.Reasoning(), tap.Billed(ours))
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

func TestCachedPromptTokensAreRead(t *testing.T) {
	body := `{"model":"gpt-4o-mini","choices":[{"message":{"content":"hi"}}],` +
		`"usage":{"prompt_tokens":100,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":64}}}`
	c, err := ReadCompletion([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := chat.Usage{PromptTokens: 100, CompletionTokens: 5, CachedTokens: 64}
	if c.Model != "gpt-4o-mini" || c.Reply != "hi" || !c.Reported || c.Usage != want {
		t.Fatalf("ReadCompletion = %+v, want %+v", c, want)
	}
	// A provider claiming more cached tokens than prompt tokens is capped,
	// so the cached price never bills below zero.
	tap := NewUsageTap(strings.NewReader("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":50}}}\n\n"))
	if _, err := io.ReadAll(tap); err != nil {
		t.Fatal(err)
	}
	if u, final := tap.Usage(); !final || u.CachedTokens != 10 || u.PromptTokens != 10 {
		t.Fatalf("stream usage = %+v, %v", u, final)
	}
	if c, err := ReadCompletion([]byte(`{"choices":[]}`)); err != nil || c.Reported {
		t.Fatalf("no usage: %+v %v", c, err)
	}
	if _, err := ReadCompletion([]byte(`not json`)); err == nil {
		t.Fatal("junk must not parse")
	}
}
