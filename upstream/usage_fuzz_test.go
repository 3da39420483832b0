package upstream

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"
	"testing/iotest"

	"github.com/sluicehq/sluice/chat"
)

// chunked reads r in pieces of n bytes, as a network would deliver them.
type chunked struct {
	r io.Reader
	n int
}

func (c chunked) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

// FuzzUsageTap streams any bytes through the tap, as a provider's SSE
// stream would arrive. The tap passes every byte through unchanged, never
// panics, reports usage that bills nothing negative (cached tokens within
// the prompt), and reads the same usage and text however the stream is cut
// into reads; the text it counts is no more than the stream could carry.
func FuzzUsageTap(f *testing.F) {
	chunk := func(content string) string {
		b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"delta": map[string]any{"content": content}}}})
		return "data: " + string(b) + "\n\n"
	}
	for _, seed := range []string{
		chunk("Hello") + chunk(" world") + "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n",
		"data:{\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\r\n\r\ndata:[DONE]\r\n\r\n",
		": keep-alive\nevent: message\nid: 7\ndata: {not json\n\n" + chunk("春联"),
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"arguments\":\"{}\"}}],\"refusal\":\"no\"},\"text\":\"t\"}]}\n\n",
		"data: {\"usage\":{\"prompt_tokens\":-5,\"completion_tokens\":-1,\"prompt_tokens_details\":{\"cached_tokens\":99}}}",
		"data: {\"usage\":{\"prompt_tokens\":1e30}}\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"\xff\"}}]}\n",
		"data: {\"choices\":null,\"usage\":null}\n\n\n\r\n",
		"\n\n\ndata:\ndata: \ndata: {}\n",
	} {
		f.Add([]byte(seed), uint8(1))
		f.Add([]byte(seed), uint8(7))
	}
	f.Fuzz(func(t *testing.T, stream []byte, cut uint8) {
		read := func(r io.Reader) (*UsageTap, []byte) {
			tap := NewUsageTap(r)
			out, err := io.ReadAll(tap)
			if err != nil {
				t.Fatal(err)
			}
			return tap, out
		}
		whole, out := read(bytes.NewReader(stream))
		if !bytes.Equal(out, stream) {
			t.Fatal("the tap changed the stream")
		}
		u, final := whole.Usage()
		if u.PromptTokens < 0 || u.CompletionTokens < 0 || u.CachedTokens < 0 || u.CachedTokens > u.PromptTokens {
			t.Fatalf("usage %+v bills something negative", u)
		}
		if !final && u != (chat.Usage{}) {
			t.Fatalf("usage %+v without a usage chunk", u)
		}
		if d := whole.Delivered(); len(d) > 3*len(stream) {
			t.Fatalf("delivered %d bytes of text from a %d-byte stream", len(d), len(stream))
		}
		for _, r := range []io.Reader{iotest.OneByteReader(bytes.NewReader(stream)), chunked{bytes.NewReader(stream), int(cut%64) + 1}} {
			tap, out := read(r)
			u2, final2 := tap.Usage()
			if !bytes.Equal(out, stream) || u2 != u || final2 != final || tap.Delivered() != whole.Delivered() {
				t.Fatalf("cut into reads of %d bytes the tap read %+v %v %q, whole %+v %v %q", cut%64+1, u2, final2, tap.Delivered(), u, final, whole.Delivered())
			}
		}
	})
}

// FuzzReadCompletion parses any body as a provider's chat completion: it
// never panics, and usage it reports bills nothing negative.
func FuzzReadCompletion(f *testing.F) {
	for _, seed := range []string{
		`{"model":"gpt-4o-mini","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":2}}}`,
		`{"choices":[],"usage":null}`, `{"usage":{"prompt_tokens":-3,"prompt_tokens_details":{"cached_tokens":9}}}`,
		`[]`, `null`, ``, `{"choices":[{"message":{"content":7}}]}`, `{"usage":{"completion_tokens":1e400}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := ReadCompletion(body)
		if err != nil {
			return
		}
		u := c.Usage
		if u.PromptTokens < 0 || u.CompletionTokens < 0 || u.CachedTokens < 0 || u.CachedTokens > u.PromptTokens {
			t.Fatalf("usage %+v bills something negative", u)
		}
		if !c.Reported && u != (chat.Usage{}) {
			t.Fatalf("usage %+v without a usage object", u)
		}
	})
}

// BenchmarkReadCompletion reads a typical provider answer, as every
// non-streaming completion does once.
func BenchmarkReadCompletion(b *testing.B) {
	body := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"The river runs east to the sea; the moon rises over the hills."},"finish_reason":"stop"}],"usage":{"prompt_tokens":23,"completion_tokens":17,"total_tokens":40,"prompt_tokens_details":{"cached_tokens":0}}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ReadCompletion(body); err != nil {
			b.Fatal(err)
		}
	}
}
