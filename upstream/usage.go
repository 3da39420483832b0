package upstream

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/upstream/local"
)

// maxTapLine bounds one SSE line the tap keeps for parsing; a longer line is
// still passed through, just not parsed.
const maxTapLine = 1 << 20

// UsageTap passes an OpenAI-style SSE stream through unchanged while reading
// it on the way: it parses each complete "data: {...}" line, keeps the last
// "usage" object the provider sent (the final chunk, when the request asked
// for stream_options.include_usage) and the text delivered so far (delta
// content, legacy text and tool-call arguments). When a stream ends early
// (the client disconnected, the provider stalled) and no usage came, the
// delivered text is what is billed, counted with local.CountTokens.
//
// Read is for one goroutine; the other methods may be called from any.
type UsageTap struct {
	r io.Reader

	mu         sync.Mutex
	line       []byte // the current incomplete line
	skipping   bool   // the current line outgrew maxTapLine: ignored to its end
	prompt     int
	completion int
	final      bool
	delivered  strings.Builder
}

// NewUsageTap returns a tap reading from r.
func NewUsageTap(r io.Reader) *UsageTap { return &UsageTap{r: r} }

// Read reads from the underlying stream, unchanged.
func (t *UsageTap) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 || err != nil {
		t.mu.Lock()
		t.scan(p[:n])
		if err != nil && len(t.line) > 0 && !t.skipping {
			t.handle(t.line) // a last line without its newline
			t.line = t.line[:0]
		}
		t.mu.Unlock()
	}
	return n, err
}

// Usage is the provider's own count, if it sent one (final true); otherwise
// zeros and false.
func (t *UsageTap) Usage() (prompt, completion int, final bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.prompt, t.completion, t.final
}

// Delivered is the generated text that has passed through so far.
func (t *UsageTap) Delivered() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.delivered.String()
}

// CompletionTokens is what to bill for the completion: the provider's count
// when it sent one, else the delivered text counted with local.CountTokens.
func (t *UsageTap) CompletionTokens() int {
	if _, c, final := t.Usage(); final {
		return c
	}
	return local.CountTokens(t.Delivered())
}

// scan splits b into lines, completing the pending one first.
func (t *UsageTap) scan(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if !t.skipping && len(t.line)+len(b) <= maxTapLine {
				t.line = append(t.line, b...)
			} else {
				t.skipping, t.line = true, t.line[:0]
			}
			return
		}
		seg := b[:i]
		b = b[i+1:]
		switch {
		case t.skipping:
			t.skipping = false
		case len(t.line) == 0:
			t.handle(seg)
		case len(t.line)+len(seg) <= maxTapLine:
			t.line = append(t.line, seg...)
			t.handle(t.line)
		}
		t.line = t.line[:0]
	}
}

// sseChunk is the part of a chat completion chunk the tap reads.
type sseChunk struct {
	Choices []struct {
		Delta struct {
			Content   string `json:"content"`
			Refusal   string `json:"refusal"`
			ToolCalls []struct {
				Function struct {
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		Text string `json:"text"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

// handle parses one complete line.
func (t *UsageTap) handle(line []byte) {
	line = bytes.TrimSuffix(line, []byte("\r"))
	payload, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return // event:, id:, comments, blank separators
	}
	payload = bytes.TrimSpace(payload)
	if len(payload) == 0 || payload[0] != '{' {
		return // [DONE]
	}
	var c sseChunk
	if json.Unmarshal(payload, &c) != nil {
		return
	}
	for _, ch := range c.Choices {
		t.delivered.WriteString(ch.Delta.Content)
		t.delivered.WriteString(ch.Delta.Refusal)
		t.delivered.WriteString(ch.Text)
		for _, tc := range ch.Delta.ToolCalls {
			t.delivered.WriteString(tc.Function.Arguments)
		}
	}
	if c.Usage != nil {
		t.prompt, t.completion, t.final = c.Usage.PromptTokens, c.Usage.CompletionTokens, true
	}
}
