package upstream

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// pieces reads b in the pieces cut at offsets, one piece a Read.
type pieces struct {
	parts [][]byte
	err   error // after the last piece; io.EOF when nil
}

func cut(b []byte, offsets ...int) *pieces {
	p := &pieces{}
	last := 0
	for _, o := range offsets {
		p.parts = append(p.parts, b[last:o])
		last = o
	}
	p.parts = append(p.parts, b[last:])
	return p
}

func (p *pieces) Read(b []byte) (int, error) {
	for len(p.parts) > 0 && len(p.parts[0]) == 0 {
		p.parts = p.parts[1:]
	}
	if len(p.parts) == 0 {
		if p.err != nil {
			return 0, p.err
		}
		return 0, io.EOF
	}
	n := copy(b, p.parts[0])
	p.parts[0] = p.parts[0][n:]
	return n, nil
}

func (p *pieces) Close() error { return nil }

// translate reads a whole translated stream.
func translate(t *testing.T, r io.ReadCloser) (string, error) {
	t.Helper()
	s := newGeminiStream(Request{Model: "gemini-2.5-flash"}, r, "B", 7)
	out, err := io.ReadAll(s)
	return string(out), err
}

// geminiEvents is a stream as Gemini sends it: CRLF line ends, running
// usage in every event, text and a function call with its signature in
// the last, which also finishes.
const geminiEvents = "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Hel\"}]},\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":5,\"totalTokenCount\":5}}\r\n\r\n" +
	"data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"lo \\u003c3\"},{\"functionCall\":{\"name\":\"f\",\"args\":{\"a\":1}},\"thoughtSignature\":\"+//+\"}]}," +
	"\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":5,\"candidatesTokenCount\":3,\"thoughtsTokenCount\":2,\"totalTokenCount\":10}}\r\n\r\n"

const chunkHead = `data: {"id":"chatcmpl-B","object":"chat.completion.chunk","created":7,"model":"gemini-2.5-flash","choices":`

var wantChunks = chunkHead + `[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n" +
	chunkHead + `[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}` + "\n\n" +
	chunkHead + `[{"index":0,"delta":{"content":"lo <3"},"finish_reason":null}]}` + "\n\n" +
	chunkHead + `[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_B_0__ts_-__-","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":null}]}` + "\n\n" +
	chunkHead + `[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\n" +
	chunkHead + `[],"usage":{"prompt_tokens":5,"completion_tokens":5,"total_tokens":10,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":2}}}` + "\n\n" +
	"data: [DONE]\n\n"

// Gemini's events read as OpenAI's chunks: role, content deltas, tool
// call deltas, the finish, the usage of the last usageMetadata, [DONE];
// the same chunks however the provider's bytes are split, with CRLF or
// LF line ends.
func TestGeminiStreamTranslation(t *testing.T) {
	in := []byte(geminiEvents)
	got, err := translate(t, cut(in))
	if err != nil || got != wantChunks {
		t.Fatalf("err %v, got\n%s\nwant\n%s", err, got, wantChunks)
	}
	for i := range in {
		if got, err := translate(t, cut(in, i)); err != nil || got != wantChunks {
			t.Fatalf("split at %d: err %v, got\n%s", i, err, got)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var offsets []int
		for o := rng.IntN(8); o < len(in); o += 1 + rng.IntN(40) {
			offsets = append(offsets, o)
		}
		if got, err := translate(t, cut(in, offsets...)); err != nil || got != wantChunks {
			t.Fatalf("split at %v: err %v, got\n%s", offsets, err, got)
		}
	}
	if got, err := translate(t, io.NopCloser(iotest.OneByteReader(bytes.NewReader(in)))); err != nil || got != wantChunks {
		t.Fatalf("byte by byte: err %v, got\n%s", err, got)
	}
	lf := []byte(strings.ReplaceAll(geminiEvents, "\r\n", "\n"))
	if got, err := translate(t, cut(lf, 100)); err != nil || got != wantChunks {
		t.Fatalf("LF line ends: err %v, got\n%s", err, got)
	}
	noBlank := []byte(strings.TrimSuffix(geminiEvents, "\r\n\r\n"))
	if got, err := translate(t, cut(noBlank)); err != nil || got != wantChunks {
		t.Fatalf("last event without its blank line: err %v, got\n%s", err, got)
	}
}

// The translated stream reads as the pipeline reads a provider's: the
// tap finds the finish, the text and arguments delivered, and the usage.
func TestGeminiStreamFeedsTheUsageTap(t *testing.T) {
	tap := NewUsageTap(newGeminiStream(Request{Model: "m"}, cut([]byte(geminiEvents), 50), "B", 7))
	if _, err := io.ReadAll(tap); err != nil {
		t.Fatal(err)
	}
	u, final := tap.Usage()
	if !final || u.PromptTokens != 5 || u.CompletionTokens != 5 || u.ReasoningTokens != 2 || !tap.Finished() || tap.Delivered() != `Hello <3{"a":1}` {
		t.Fatalf("usage %+v final %v finished %v delivered %q", u, final, tap.Finished(), tap.Delivered())
	}
}

// A stream that ends without a finishReason ends without one, and without
// usageMetadata has no usage chunk: the gateway counts it itself, nothing
// is made up. A blocked prompt ends with content_filter; Gemini's error
// event reads as OpenAI's; a broken stream returns its break after what
// came before it, without [DONE].
func TestGeminiStreamEnds(t *testing.T) {
	t.Run("no finish, no usage", func(t *testing.T) {
		got, err := translate(t, cut([]byte("data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"partial\"}]}}]}\n\n")))
		want := chunkHead + `[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n" +
			chunkHead + `[{"index":0,"delta":{"content":"partial"},"finish_reason":null}]}` + "\n\n" + "data: [DONE]\n\n"
		if err != nil || got != want {
			t.Fatalf("err %v, got\n%s", err, got)
		}
	})
	t.Run("blocked prompt", func(t *testing.T) {
		got, err := translate(t, cut([]byte(`data: {"promptFeedback":{"blockReason":"PROHIBITED_CONTENT"},"usageMetadata":{"promptTokenCount":4,"totalTokenCount":4}}`+"\r\n\r\n")))
		want := chunkHead + `[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n" +
			chunkHead + `[{"index":0,"delta":{},"finish_reason":"content_filter"}]}` + "\n\n" +
			chunkHead + `[],"usage":{"prompt_tokens":4,"completion_tokens":0,"total_tokens":4,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}` + "\n\n" +
			"data: [DONE]\n\n"
		if err != nil || got != want {
			t.Fatalf("err %v, got\n%s", err, got)
		}
	})
	t.Run("error event", func(t *testing.T) {
		got, _ := translate(t, cut([]byte(`data: {"error":{"code":500,"message":"An internal error has occurred.","status":"INTERNAL"}}`+"\n\n")))
		want := `data: {"error":{"message":"An internal error has occurred.","type":"server_error","param":null,"code":"internal"}}` + "\n\n" + "data: [DONE]\n\n"
		if got != want {
			t.Fatalf("got\n%s", got)
		}
	})
	t.Run("broken", func(t *testing.T) {
		broken := errors.New("connection reset")
		p := cut([]byte(geminiEvents[:strings.Index(geminiEvents, "\r\n\r\n")+4] + `data: {"candi`))
		p.err = broken
		got, err := translate(t, p)
		if !errors.Is(err, broken) || !strings.Contains(got, `"content":"Hel"`) || strings.Contains(got, "[DONE]") {
			t.Fatalf("err %v, got\n%s", err, got)
		}
	})
	t.Run("an event beyond bounds", func(t *testing.T) {
		huge := &pieces{parts: [][]byte{[]byte("data: {"), bytes.Repeat([]byte("x"), maxStreamEvent)}}
		if _, err := translate(t, huge); err == nil || !strings.Contains(err.Error(), "an event over") {
			t.Fatalf("err %v", err)
		}
	})
}

// Each event is passed on as it arrives: the first chunk reads before the
// provider has sent the rest.
func TestGeminiStreamDoesNotWaitForTheAnswer(t *testing.T) {
	pr, pw := io.Pipe()
	first, rest, _ := strings.Cut(geminiEvents, "\r\n\r\n")
	go func() {
		_, _ = io.WriteString(pw, first+"\r\n\r\n")
		// The rest is written only once the first event has been read.
	}()
	s := newGeminiStream(Request{Model: "m"}, pr, "B", 7)
	got := make(chan string, 1)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 64)
		for !strings.Contains(b.String(), `"content":"Hel"`) {
			n, err := s.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		got <- b.String()
	}()
	select {
	case out := <-got:
		if !strings.Contains(out, `"content":"Hel"`) {
			t.Fatalf("got %s", out)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first event was held back until the stream ended")
	}
	go func() {
		_, _ = io.WriteString(pw, rest)
		pw.Close()
	}()
	if tail, err := io.ReadAll(s); err != nil || !strings.HasSuffix(string(tail), "data: [DONE]\n\n") {
		t.Fatalf("tail %q, %v", tail, err)
	}
}

// A Read makes one read of the provider: bytes that complete no event
// return nothing yet, so the stall timer, which runs while a Read waits,
// times the provider's silence, not how long its events are.
func TestGeminiStreamReadsTheProviderOnceARead(t *testing.T) {
	body := cut([]byte(geminiEvents), 10, 20)
	s := newGeminiStream(Request{Model: "m"}, body, "B", 7)
	buf := make([]byte, 4096)
	for i := range 2 {
		if n, err := s.Read(buf); n != 0 || err != nil {
			t.Fatalf("read %d: %d bytes, %v; want nothing before the first event is whole", i, n, err)
		}
	}
	if n, err := s.Read(buf); n == 0 || err != nil || !strings.Contains(string(buf[:n]), `"role":"assistant"`) {
		t.Fatalf("third read: %q, %v", buf[:n], err)
	}
}
