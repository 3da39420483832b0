package upstream

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"sync/atomic"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/sluicehq/sluice/chat"
	"github.com/sluicehq/sluice/wire"
)

// maxTapLine bounds one SSE line the tap keeps for parsing; a longer line is
// still passed through, just not parsed.
const maxTapLine = 1 << 20

// UsageTap passes an OpenAI-style SSE stream through unchanged while reading
// it on the way: it parses each complete "data: {...}" line, keeps the last
// "usage" object the provider sent (the final chunk, when the request asked
// for stream_options.include_usage), the text delivered so far (delta
// content, legacy text and tool-call arguments) and the reasoning shown
// (reasoning_content, the thinking the provider bills as output). When a
// stream ends early (the client disconnected, the provider stalled) and
// no usage came, the delivered text and reasoning are what is billed,
// counted with chat.CountTokens.
//
// Read is for one goroutine; the other methods may be called from any.
type UsageTap struct {
	r        io.Reader
	messages bool // Anthropic's events, not chat completion chunks

	mu        sync.Mutex
	line      []byte // the current incomplete line
	skipping  bool   // the current line outgrew maxTapLine: ignored to its end
	usage     chat.Usage
	final     bool
	delivered strings.Builder
	reasoning strings.Builder     // not part of the reply: kept apart
	finished  atomic.Bool         // a choice's finish_reason has passed: the answer is whole
	anthropic wire.AnthropicUsage // a Messages stream's usage so far
}

// NewUsageTap returns a tap reading from r.
func NewUsageTap(r io.Reader) *UsageTap { return &UsageTap{r: r} }

// NewMessagesUsageTap returns a tap on a stream of Anthropic's Messages
// events, passed on as they came (Request.Native): the usage is
// message_start's with message_delta's added, read as the translated
// stream's is, and final at message_delta; the answer has finished at its
// stop_reason; text, tool input and thinking deltas are what was
// delivered.
func NewMessagesUsageTap(r io.Reader) *UsageTap { return &UsageTap{r: r, messages: true} }

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
func (t *UsageTap) Usage() (u chat.Usage, final bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.usage, t.final
}

// Finished says whether the answer has finished (a finish_reason has
// passed): what may still come is the usage chunk.
func (t *UsageTap) Finished() bool { return t.finished.Load() }

// Delivered is the generated text that has passed through so far.
func (t *UsageTap) Delivered() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.delivered.String()
}

// Reasoning is the reasoning text that has passed through so far.
func (t *UsageTap) Reasoning() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reasoning.String()
}

// Billed is what to bill for the stream: the provider's count when it sent
// one, else what counted makes of the delivered text and reasoning (the
// prompt's own estimate and the output's count).
func (t *UsageTap) Billed(counted func(delivered string) chat.Usage) chat.Usage {
	if u, final := t.Usage(); final {
		return u
	}
	return counted(t.Reasoning() + t.Delivered())
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
			Content          string `json:"content"`
			Refusal          string `json:"refusal"`
			ReasoningContent string `json:"reasoning_content"`
			ToolCalls        []struct {
				Function struct {
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *wireUsage `json:"usage"`
}

// wireUsage is OpenAI's usage object, in responses and in a stream's final
// chunk.
//
// cache_creation_input_tokens, the prompt tokens written to the provider's
// prompt cache, is not OpenAI's: it is how the Anthropic wire format (and
// LiteLLM) report them in OpenAI's shape.
type wireUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	// CacheCreationTokenDetails splits the cache writes by how long they
	// are kept: Anthropic's cache_creation, where LiteLLM writes it in
	// OpenAI's shape.
	CacheCreationTokenDetails *wire.AnthropicCacheCreation `json:"cache_creation_token_details"`
}

func (w wireUsage) usage() chat.Usage {
	u := chat.Usage{PromptTokens: max(0, w.PromptTokens), CompletionTokens: max(0, w.CompletionTokens)}
	// The parts are part of their wholes; a provider claiming more would
	// bill below zero.
	if d := w.PromptTokensDetails; d != nil {
		u.CachedTokens = min(max(0, d.CachedTokens), u.PromptTokens)
	}
	u.CacheCreationTokens = min(max(0, w.CacheCreationInputTokens), u.PromptTokens-u.CachedTokens)
	if d := w.CacheCreationTokenDetails; d != nil {
		u.CacheCreationHourTokens = min(max(0, d.Ephemeral1hInputTokens), u.CacheCreationTokens)
	}
	if d := w.CompletionTokensDetails; d != nil {
		u.ReasoningTokens = min(max(0, d.ReasoningTokens), u.CompletionTokens)
	}
	return u
}

// Completion is what the gateway reads of a whole (non-streaming) chat
// completion: the model that answered, the first choice's text and the
// provider's usage, if it reported one.
type Completion struct {
	Model    string
	Reply    string
	Usage    chat.Usage
	Reported bool // Usage came from the provider, not from our count
}

// tolerant reads a provider's JSON as encoding/json would, and faster:
// names matched without regard to case (but not to underscores), invalid
// UTF-8 replaced, a repeated name's last value kept.
var tolerant = jsonv2.JoinOptions(jsonv2.MatchCaseInsensitiveNames(true), jsonv1.MatchCaseSensitiveDelimiter(true),
	jsontext.AllowInvalidUTF8(true), jsontext.AllowDuplicateNames(true))

// ReadCompletion parses a chat completion body as OpenAI-compatible
// providers (and the response cache) return it.
func ReadCompletion(body []byte) (Completion, error) {
	var parsed struct {
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage *wireUsage `json:"usage"`
	}
	if err := jsonv2.Unmarshal(body, &parsed, tolerant); err != nil {
		return Completion{}, err
	}
	c := Completion{Model: parsed.Model}
	if len(parsed.Choices) > 0 {
		c.Reply = parsed.Choices[0].Message.Content
	}
	if parsed.Usage != nil {
		c.Usage, c.Reported = parsed.Usage.usage(), true
	}
	return c, nil
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
	if t.messages {
		t.handleEvent(payload)
		return
	}
	var c sseChunk
	if json.Unmarshal(payload, &c) != nil {
		return
	}
	for _, ch := range c.Choices {
		if ch.FinishReason != "" {
			t.finished.Store(true)
		}
		t.delivered.WriteString(ch.Delta.Content)
		t.delivered.WriteString(ch.Delta.Refusal)
		t.reasoning.WriteString(ch.Delta.ReasoningContent)
		t.delivered.WriteString(ch.Text)
		for _, tc := range ch.Delta.ToolCalls {
			t.delivered.WriteString(tc.Function.Arguments)
		}
	}
	if c.Usage != nil {
		t.usage, t.final = c.Usage.usage(), true
	}
}

// handleEvent reads one Anthropic event's data.
func (t *UsageTap) handleEvent(payload []byte) {
	var ev wire.AnthropicEvent
	if json.Unmarshal(payload, &ev) != nil {
		return
	}
	switch ev.Type {
	case "message_start":
		if m := ev.Message; m != nil {
			t.anthropic = m.Usage
		}
	case "content_block_start":
		if b := ev.ContentBlock; b != nil {
			t.delivered.WriteString(deref(b.Text))
			t.reasoning.WriteString(deref(b.Thinking))
		}
	case "content_block_delta":
		if d := ev.Delta; d != nil {
			t.delivered.WriteString(deref(d.Text))
			t.delivered.WriteString(deref(d.PartialJSON))
			t.reasoning.WriteString(deref(d.Thinking))
		}
	case "message_delta":
		if u := ev.Usage; u != nil {
			addUsageDelta(&t.anthropic, u)
			t.usage, t.final = anthropicUsage(t.anthropic), true
		}
		if d := ev.Delta; d != nil && d.StopReason != nil {
			t.finished.Store(true)
		}
	}
}
