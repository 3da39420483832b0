package upstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/sluicehq/sluice/chat"
	"github.com/sluicehq/sluice/wire"
)

// Anthropic's answers in OpenAI's shape. Usage: prompt_tokens is the
// whole prompt (Anthropic's input_tokens, cache_read_input_tokens and
// cache_creation_input_tokens together), prompt_tokens_details.cached_tokens
// what was read from the prompt cache, and cache_creation_input_tokens,
// top level as LiteLLM writes it, what was written to it: read back into
// chat.Usage and priced as such. A stop at a stop sequence says which in
// the choice's stop_sequence, which OpenAI's shape has no field for.

// openAIUsage is Anthropic's usage in OpenAI's shape.
type openAIUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details,omitempty"`
	CacheCreationInputTokens  int                          `json:"cache_creation_input_tokens"`
	CacheCreationTokenDetails *wire.AnthropicCacheCreation `json:"cache_creation_token_details,omitempty"`
}

// toOpenAIUsage is u in OpenAI's terms. Anthropic's output_tokens
// include the thinking, as OpenAI's completion_tokens include the
// reasoning: completion_tokens are output_tokens, and the thinking, when
// Anthropic says how much of it there was, is their reasoning_tokens
// detail (a part of them, priced as such, never on top).
func toOpenAIUsage(u wire.AnthropicUsage) *openAIUsage {
	o := new(openAIUsage)
	o.fill(u)
	return o
}

// fill sets o to u in OpenAI's terms (toOpenAIUsage).
func (o *openAIUsage) fill(u wire.AnthropicUsage) {
	*o = openAIUsage{PromptTokens: u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens, CompletionTokens: u.OutputTokens,
		CacheCreationInputTokens: u.CacheCreationInputTokens}
	o.PromptTokensDetails.CachedTokens = u.CacheReadInputTokens
	o.CacheCreationTokenDetails = u.CacheCreation
	if d := u.OutputTokensDetails; d != nil {
		o.CompletionTokensDetails = &struct {
			ReasoningTokens int `json:"reasoning_tokens"`
		}{ReasoningTokens: min(max(0, d.ThinkingTokens), max(0, u.OutputTokens))}
	}
	o.TotalTokens = o.PromptTokens + o.CompletionTokens
}

// anthropicFinish is OpenAI's finish_reason for Anthropic's stop_reason.
func anthropicFinish(stop string) string {
	switch stop {
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "tool_use":
		return "tool_calls"
	case "refusal":
		return "content_filter"
	}
	return "stop" // end_turn, stop_sequence, pause_turn
}

type openAIToolCall struct {
	Index    *int   `json:"index,omitempty"` // in a stream's deltas
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type openAIMessage struct {
	Role      string           `json:"role,omitempty"`
	Content   *string          `json:"content"`
	ToolCalls []openAIToolCall `json:"tool_calls,omitempty"`
	// The thinking (anthropic_thinking.go).
	ReasoningContent *string               `json:"reasoning_content,omitempty"`
	ThinkingBlocks   []wire.AnthropicBlock `json:"thinking_blocks,omitempty"`
}

type openAIChoice struct {
	Index        int            `json:"index"`
	Message      *openAIMessage `json:"message,omitempty"`
	Delta        *openAIMessage `json:"delta,omitempty"`
	FinishReason *string        `json:"finish_reason"`
	StopSequence *string        `json:"stop_sequence,omitempty"`
}

type openAICompletion struct {
	ID      string         `json:"id"`
	Object  string         `json:"object"`
	Created int64          `json:"created"`
	Model   string         `json:"model"`
	Choices []openAIChoice `json:"choices"`
	Usage   *openAIUsage   `json:"usage,omitempty"`
}

// answer translates a whole message into a chat completion: its text
// blocks as the content, its tool_use blocks as tool calls, its thinking
// as reasoning_content and thinking_blocks.
func (f anthropicFormat) answer(_ Request, body []byte) ([]byte, error) {
	var m wire.AnthropicMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	if m.Type != "message" {
		return nil, fmt.Errorf("anthropic: an answer of type %q, not a message", m.Type)
	}
	msg := &openAIMessage{Role: "assistant"}
	msg.ReasoningContent, msg.ThinkingBlocks = anthropicThinking(m.Content)
	var text strings.Builder
	hasText := false
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			if b.Text != nil {
				text.WriteString(*b.Text)
				hasText = true
			}
		case "tool_use":
			var call openAIToolCall
			call.ID, call.Type, call.Function.Name = b.ID, "function", b.Name
			call.Function.Arguments = string(b.Input)
			if len(b.Input) == 0 {
				call.Function.Arguments = "{}"
			}
			msg.ToolCalls = append(msg.ToolCalls, call)
		}
	}
	if hasText || len(msg.ToolCalls) == 0 {
		s := text.String()
		msg.Content = &s
	}
	stop := ""
	if m.StopReason != nil {
		stop = *m.StopReason
	}
	finish := anthropicFinish(stop)
	choice := openAIChoice{Message: msg, FinishReason: &finish}
	if stop == "stop_sequence" {
		choice.StopSequence = m.StopSequence
	}
	return json.Marshal(openAICompletion{ID: m.ID, Object: "chat.completion", Created: f.created(), Model: m.Model,
		Choices: []openAIChoice{choice}, Usage: toOpenAIUsage(m.Usage)})
}

// readNative reads a whole message answering a client that spoke
// Anthropic's Messages API, left as Anthropic wrote it: the text blocks
// are the reply, and the usage is read exactly as answer translates it,
// so a message is billed the same whichever way it travels.
func (anthropicFormat) readNative(body []byte) (Completion, error) {
	var m struct {
		Type    string `json:"type"`
		Model   string `json:"model"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		Usage *wire.AnthropicUsage `json:"usage"`
	}
	if err := jsonv2.Unmarshal(body, &m, tolerant); err != nil {
		return Completion{}, err
	}
	if m.Type != "message" {
		return Completion{}, fmt.Errorf("anthropic: an answer of type %q, not a message", m.Type)
	}
	c := Completion{Model: m.Model}
	for _, b := range m.Content {
		if b.Type == "text" {
			c.Reply += b.Text
		}
	}
	if m.Usage != nil {
		c.Usage, c.Reported = anthropicUsage(*m.Usage), true
	}
	return c, nil
}

// anthropicUsage is what the gateway bills of Anthropic's usage: its
// translation's, read back. It builds no translation, so the hot path of
// a native answer allocates none.
func anthropicUsage(u wire.AnthropicUsage) chat.Usage {
	var o openAIUsage
	o.fill(u)
	return o.read()
}

// read is u as the gateway reads a chat completion's usage.
func (u *openAIUsage) read() chat.Usage {
	w := wireUsage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, CacheCreationInputTokens: u.CacheCreationInputTokens,
		CacheCreationTokenDetails: u.CacheCreationTokenDetails}
	w.PromptTokensDetails = &struct {
		CachedTokens int `json:"cached_tokens"`
	}{u.PromptTokensDetails.CachedTokens}
	if d := u.CompletionTokensDetails; d != nil {
		w.CompletionTokensDetails = &struct {
			ReasoningTokens int `json:"reasoning_tokens"`
		}{d.ReasoningTokens}
	}
	return w.usage()
}

// failure translates Anthropic's error body into OpenAI's, keeping its
// type (invalid_request_error, overloaded_error, …) as type and code.
func (anthropicFormat) failure(status int, body []byte) []byte {
	var e wire.AnthropicError
	var out wire.OpenAIError
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		out.Error.Message, out.Error.Type, out.Error.Code = e.Error.Message, e.Error.Type, e.Error.Type
	} else {
		out.Error.Message = "the provider answered " + http.StatusText(status)
		out.Error.Type, out.Error.Code = "api_error", "api_error"
	}
	b, _ := json.Marshal(out)
	return b
}

// addUsageDelta adds a message_delta's usage to a stream's, which began
// as message_start's: the counts are cumulative, the input ones there only
// when restated.
func addUsageDelta(u, d *wire.AnthropicUsage) {
	u.OutputTokens = d.OutputTokens
	if d.OutputTokensDetails != nil {
		u.OutputTokensDetails = d.OutputTokensDetails
	}
	if d.InputTokens > 0 || d.CacheReadInputTokens > 0 || d.CacheCreationInputTokens > 0 {
		u.InputTokens, u.CacheReadInputTokens, u.CacheCreationInputTokens = d.InputTokens, d.CacheReadInputTokens, d.CacheCreationInputTokens
		if d.CacheCreation != nil {
			u.CacheCreation = d.CacheCreation
		}
	}
}

// streamNative passes Anthropic's events on as they came, to a client
// that speaks them (Request.Native), reading only their names to tell how
// the stream ends: as stream does, an error event or an end before
// message_stop is a read error, once the bytes before it are read.
func (anthropicFormat) streamNative(_ Request, body io.ReadCloser) io.ReadCloser {
	return &anthropicPassThrough{body: body}
}

// anthropicPassThrough is an Anthropic event stream read unchanged.
type anthropicPassThrough struct {
	body    io.ReadCloser
	lines   wire.Lines
	failing bool  // an error event has begun
	err     error // set once that event has been read whole
	stopped bool  // message_stop came
}

func (s *anthropicPassThrough) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.body.Read(p)
	s.lines.Feed(p[:n], func(line []byte) bool {
		line = bytes.TrimSuffix(line, []byte("\r"))
		name, ok := bytes.CutPrefix(line, []byte("event:"))
		switch name = bytes.TrimSpace(name); {
		case len(line) == 0 && s.failing: // the error event's end
			s.err = errors.New("anthropic: the stream ended with an error event")
		case !ok:
		case string(name) == "message_stop":
			s.stopped = true
		case string(name) == "error":
			s.failing = true
		}
		return true
	})
	switch {
	case s.err != nil:
		return n, nil // the error event itself is passed on; the next read fails
	case errors.Is(err, io.EOF) && s.failing:
		err = errors.New("anthropic: the stream ended with an error event")
	case errors.Is(err, io.EOF) && !s.stopped:
		err = io.ErrUnexpectedEOF // cut before message_stop
	}
	return n, err
}

func (s *anthropicPassThrough) Close() error { return s.body.Close() }

// stream reads Anthropic's events as OpenAI's chat completion chunks.
func (f anthropicFormat) stream(_ Request, body io.ReadCloser) io.ReadCloser {
	return &anthropicStream{body: body, buf: make([]byte, 16<<10), blocks: map[int]int{}, created: f.created()}
}

// created is an answer's created time, in Unix seconds: Anthropic's
// answers carry none, so it is when the answer arrived.
func (f anthropicFormat) created() int64 {
	if f.now == nil {
		return time.Now().Unix()
	}
	return f.now().Unix()
}

// anthropicStream translates an Anthropic event stream as it is read:
// message_start is the role chunk; text deltas content chunks; a tool_use
// block a tool call and its input_json_deltas its arguments; thinking
// deltas reasoning_content chunks, a thinking block's signature_delta a
// thinking_blocks chunk with the signature, a redacted_thinking block one
// with the block; message_delta
// the finish chunk; message_stop the usage chunk and [DONE]; a ping an SSE
// comment. An error
// event, or a stream that ends before message_stop, is a read error: the
// pipeline ends the client's stream with its error event and the key is
// charged a failure.
type anthropicStream struct {
	body io.ReadCloser
	buf  []byte

	lines   wire.Lines // the stream split into lines
	out     []byte     // translated chunks not yet read
	err     error      // the error to return once out is read
	id      string
	model   string
	created int64
	usage   wire.AnthropicUsage
	blocks  map[int]int // an Anthropic tool_use block's index -> its tool call's
	calls   int
	stopped bool // message_stop came
}

func (s *anthropicStream) Read(p []byte) (int, error) {
	for len(s.out) == 0 && s.err == nil {
		n, err := s.body.Read(s.buf)
		s.feed(s.buf[:n])
		switch {
		case err == nil || s.err != nil: // an error event said more than the end of the body
		case errors.Is(err, io.EOF) && s.stopped:
			s.err = io.EOF
		case errors.Is(err, io.EOF):
			s.err = io.ErrUnexpectedEOF // cut before message_stop
		default:
			s.err = err
		}
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	if len(s.out) == 0 && s.err != nil {
		return n, s.err
	}
	return n, nil
}

func (s *anthropicStream) Close() error { return s.body.Close() }

// feed splits b into lines and translates each whole one.
func (s *anthropicStream) feed(b []byte) {
	if s.err != nil {
		return
	}
	s.lines.Feed(b, func(line []byte) bool {
		s.event(line)
		return s.err == nil
	})
}

// event translates one line: only data lines matter, as each carries its
// event's type.
func (s *anthropicStream) event(line []byte) {
	payload, ok := bytes.CutPrefix(bytes.TrimSuffix(line, []byte("\r")), []byte("data:"))
	if !ok || s.stopped {
		return
	}
	var ev wire.AnthropicEvent
	if json.Unmarshal(bytes.TrimSpace(payload), &ev) != nil {
		return
	}
	switch ev.Type {
	case "message_start":
		if m := ev.Message; m != nil {
			s.id, s.model, s.usage = m.ID, m.Model, m.Usage
		}
		empty := ""
		s.chunk(openAIChoice{Delta: &openAIMessage{Role: "assistant", Content: &empty}}, nil)
	case "content_block_start":
		b := ev.ContentBlock
		if b == nil || ev.Index == nil {
			return
		}
		switch b.Type {
		case "text":
			if b.Text != nil && *b.Text != "" {
				s.chunk(openAIChoice{Delta: &openAIMessage{Content: b.Text}}, nil)
			}
		case "tool_use":
			idx := s.calls
			s.calls++
			s.blocks[*ev.Index] = idx
			call := openAIToolCall{Index: &idx, ID: b.ID, Type: "function"}
			call.Function.Name = b.Name
			s.chunk(openAIChoice{Delta: &openAIMessage{ToolCalls: []openAIToolCall{call}}}, nil)
		case "thinking":
			// Its text and signature come in deltas; a start that
			// carries them is read as those deltas.
			if t := deref(b.Thinking); t != "" {
				s.chunk(openAIChoice{Delta: &openAIMessage{ReasoningContent: &t}}, nil)
			}
			if sig := deref(b.Signature); sig != "" {
				s.signature(sig)
			}
		case "redacted_thinking":
			s.chunk(openAIChoice{Delta: &openAIMessage{ThinkingBlocks: []wire.AnthropicBlock{{Type: "redacted_thinking", Data: b.Data}}}}, nil)
		}
	case "content_block_delta":
		d := ev.Delta
		if d == nil || ev.Index == nil {
			return
		}
		switch d.Type {
		case "text_delta":
			if d.Text != nil {
				s.chunk(openAIChoice{Delta: &openAIMessage{Content: d.Text}}, nil)
			}
		case "thinking_delta":
			if d.Thinking != nil && *d.Thinking != "" {
				s.chunk(openAIChoice{Delta: &openAIMessage{ReasoningContent: d.Thinking}}, nil)
			}
		case "signature_delta":
			if d.Signature != nil && *d.Signature != "" {
				s.signature(*d.Signature)
			}
		case "input_json_delta":
			idx, ok := s.blocks[*ev.Index]
			if !ok || d.PartialJSON == nil || *d.PartialJSON == "" {
				return
			}
			call := openAIToolCall{Index: &idx}
			call.Function.Arguments = *d.PartialJSON
			s.chunk(openAIChoice{Delta: &openAIMessage{ToolCalls: []openAIToolCall{call}}}, nil)
		}
	case "message_delta":
		if u := ev.Usage; u != nil {
			addUsageDelta(&s.usage, u)
		}
		if d := ev.Delta; d != nil && d.StopReason != nil {
			finish := anthropicFinish(*d.StopReason)
			choice := openAIChoice{Delta: &openAIMessage{}, FinishReason: &finish}
			if *d.StopReason == "stop_sequence" {
				choice.StopSequence = d.StopSequence
			}
			s.chunk(choice, nil)
		}
	case "message_stop":
		s.chunk(openAIChoice{}, toOpenAIUsage(s.usage))
		s.out = append(s.out, "data: [DONE]\n\n"...)
		s.stopped = true
	case "ping":
		// Kept as a comment, which every reader of chunks skips: a
		// provider that pings is alive, and the stall timer hears it.
		s.out = append(s.out, ": ping\n\n"...)
	case "error":
		what := "an error event"
		if e := ev.Error; e != nil {
			what = e.Type + ": " + e.Message
		}
		s.err = fmt.Errorf("anthropic: the stream broke off with %s", what)
	}
}

// signature appends the chunk that ends a thinking block: its signature,
// in the block's shape.
func (s *anthropicStream) signature(sig string) {
	empty := ""
	s.chunk(openAIChoice{Delta: &openAIMessage{ThinkingBlocks: []wire.AnthropicBlock{{Type: "thinking", Thinking: &empty, Signature: &sig}}}}, nil)
}

// chunk appends one chat completion chunk: a choice, or (usage set) the
// usage chunk, whose choices are empty.
func (s *anthropicStream) chunk(choice openAIChoice, usage *openAIUsage) {
	c := openAICompletion{ID: s.id, Object: "chat.completion.chunk", Created: s.created, Model: s.model, Choices: []openAIChoice{choice}, Usage: usage}
	if usage != nil {
		c.Choices = []openAIChoice{}
	}
	b, err := json.Marshal(c)
	if err != nil {
		return
	}
	s.out = append(s.out, "data: "...)
	s.out = append(s.out, b...)
	s.out = append(s.out, "\n\n"...)
}
