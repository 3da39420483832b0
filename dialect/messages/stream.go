package messages

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/sluicehq/sluice/wire"
)

// Stream translates the pipeline's stream of chat completion chunks into
// Anthropic's events as the chunks arrive, whatever pieces they arrive
// in: nothing of the answer is held back but a line whose end has not
// come. The events are those Anthropic documents, in its order:
// message_start, ping, then per content block content_block_start,
// content_block_delta (thinking_delta and signature_delta, text_delta,
// input_json_delta) and content_block_stop, then message_delta
// (stop_reason, usage) and message_stop; a stream that breaks ends with
// an error event. A thinking block opens with the first reasoning text
// (or signature) and ends with its signature, which Anthropic sends last,
// or when anything else begins.
//
// A Stream is for one goroutine.
type Stream struct {
	id, model string
	estimate  int              // message_start's input_tokens: the prompt's estimate
	count     func(string) int // counts delivered text when no usage comes; nil: none

	lines   wire.Lines // the stream split into lines
	out     []byte
	started bool
	done    bool // message_stop or an error event was written

	open      int         // the open block's index; -1 when none
	openKind  string      // the open block's type: text, tool_use or thinking
	next      int         // the next block's index
	tools     map[int]int // a chat tool call's index -> its block's index
	finish    string
	finished  bool
	stopSeq   *string
	usage     *chatUsage
	delivered strings.Builder
}

// NewStream returns the translator of one answer: its message id, model
// and the prompt's estimate, which message_start reports as input_tokens
// until message_delta says what was billed. count, when set, counts the
// delivered text of a stream that carries no usage.
func NewStream(id, model string, estimate int, count func(string) int) *Stream {
	return &Stream{id: id, model: model, estimate: estimate, count: count, open: -1, tools: map[int]int{}}
}

// Start is the stream's first events: message_start and a ping.
func (s *Stream) Start() []byte {
	s.out = s.out[:0]
	if s.started {
		return nil
	}
	s.started = true
	s.event("message_start", wire.AnthropicEvent{Type: "message_start", Message: &wire.AnthropicMessage{
		ID: s.id, Type: "message", Role: "assistant", Model: s.model, Content: []wire.AnthropicBlock{},
		Usage: wire.AnthropicUsage{InputTokens: s.estimate}}})
	s.event("ping", wire.AnthropicEvent{Type: "ping"})
	return s.out
}

// Write translates the next bytes of the chat stream; what it returns is
// valid until the next call.
func (s *Stream) Write(p []byte) []byte {
	s.out = s.out[:0]
	s.lines.Feed(p, func(line []byte) bool {
		s.handle(line)
		return true
	})
	return s.out
}

// End is what ends the stream once the pipeline is done with it: nothing
// when it ended as it should; the close of an answer that finished but
// whose [DONE] never came; an error event for one cut short.
func (s *Stream) End() []byte {
	s.out = s.out[:0]
	if !s.started || s.done {
		return nil
	}
	if rest := s.lines.Rest(); rest != nil {
		s.handle(rest) // a last line without its newline
	}
	if s.done {
		return s.out
	}
	if s.finished {
		s.stop()
		return s.out
	}
	s.fail("api_error", "the answer ended before it was complete")
	return s.out
}

// handle translates one whole line of the chat stream.
func (s *Stream) handle(line []byte) {
	if s.done {
		return
	}
	line = bytes.TrimSuffix(line, []byte("\r"))
	payload, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return // blank separators, comments, event: and id: lines
	}
	payload = bytes.TrimSpace(payload)
	if string(payload) == "[DONE]" {
		s.stop()
		return
	}
	var c struct {
		chatCompletion
		Error *wire.OpenAIErrorDetail `json:"error"`
	}
	if json.Unmarshal(payload, &c) != nil {
		return
	}
	if e := c.Error; e != nil {
		// The pipeline's word that the provider broke off mid-answer.
		typ := "api_error"
		if e.Code == "upstream_stalled" || strings.Contains(e.Type, "overloaded") || strings.Contains(e.Code, "overloaded") {
			typ = "overloaded_error"
		}
		s.fail(typ, e.Message)
		return
	}
	if len(c.Choices) > 0 {
		s.choice(c.Choices[0])
	}
	if c.Usage != nil {
		s.usage = c.Usage
	}
}

// choice translates one chunk's choice.
func (s *Stream) choice(ch chatChoice) {
	d := ch.Delta
	if r := d.ReasoningContent; r != nil && *r != "" {
		s.thinking(*r)
	}
	for _, b := range d.ThinkingBlocks {
		switch b.Type {
		case "thinking":
			// LiteLLM repeats a chunk's reasoning text in its block: the
			// text is taken from the block only when it comes alone.
			if d.ReasoningContent == nil && b.Thinking != nil && *b.Thinking != "" {
				s.thinking(*b.Thinking)
			}
			if b.Signature != nil && *b.Signature != "" {
				s.signature(*b.Signature)
			}
		case "redacted_thinking":
			s.redacted(b.Data)
		}
	}
	if text := contentText(d.Content); text != "" {
		s.text(text)
	}
	if d.Refusal != nil && *d.Refusal != "" {
		s.text(*d.Refusal)
	}
	for _, tc := range d.ToolCalls {
		block, ok := s.tools[tc.Index]
		if !ok {
			s.closeBlock()
			block = s.next
			s.next++
			s.tools[tc.Index] = block
			s.open, s.openKind = block, "tool_use"
			s.event("content_block_start", wire.AnthropicEvent{Type: "content_block_start", Index: &block,
				ContentBlock: &wire.AnthropicBlock{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name, Input: json.RawMessage("{}")}})
		}
		if args := tc.Function.Arguments; args != "" {
			s.delivered.WriteString(args)
			s.event("content_block_delta", wire.AnthropicEvent{Type: "content_block_delta", Index: &block,
				Delta: &wire.AnthropicDelta{Type: "input_json_delta", PartialJSON: &args}})
		}
	}
	if ch.StopSequence != nil {
		s.stopSeq = ch.StopSequence
	}
	if ch.FinishReason != nil && *ch.FinishReason != "" {
		s.finish, s.finished = *ch.FinishReason, true
		s.closeBlock()
	}
}

// text sends text, in the open text block or a new one.
func (s *Stream) text(text string) {
	s.delivered.WriteString(text)
	if s.openKind != "text" {
		empty := ""
		s.startBlock("text", wire.AnthropicBlock{Type: "text", Text: &empty})
	}
	s.event("content_block_delta", wire.AnthropicEvent{Type: "content_block_delta", Index: &s.open,
		Delta: &wire.AnthropicDelta{Type: "text_delta", Text: &text}})
}

// thinking sends reasoning text, in the open thinking block or a new one.
func (s *Stream) thinking(text string) {
	s.delivered.WriteString(text)
	s.openThinking()
	s.event("content_block_delta", wire.AnthropicEvent{Type: "content_block_delta", Index: &s.open,
		Delta: &wire.AnthropicDelta{Type: "thinking_delta", Thinking: &text}})
}

// signature ends a thinking block with its signature (a block whose
// thinking was omitted is its signature alone).
func (s *Stream) signature(sig string) {
	s.openThinking()
	s.event("content_block_delta", wire.AnthropicEvent{Type: "content_block_delta", Index: &s.open,
		Delta: &wire.AnthropicDelta{Type: "signature_delta", Signature: &sig}})
	s.closeBlock()
}

// redacted sends a redacted_thinking block, whole, as Anthropic does.
func (s *Stream) redacted(data string) {
	s.startBlock("redacted_thinking", wire.AnthropicBlock{Type: "redacted_thinking", Data: data})
	s.closeBlock()
}

func (s *Stream) openThinking() {
	if s.openKind != "thinking" {
		s.startBlock("thinking", thinkingBlockOf("", ""))
	}
}

// startBlock closes the open block and starts the next.
func (s *Stream) startBlock(kind string, b wire.AnthropicBlock) {
	s.closeBlock()
	s.open, s.openKind = s.next, kind
	s.next++
	s.event("content_block_start", wire.AnthropicEvent{Type: "content_block_start", Index: &s.open, ContentBlock: &b})
}

func (s *Stream) closeBlock() {
	if s.open < 0 {
		return
	}
	s.event("content_block_stop", wire.AnthropicEvent{Type: "content_block_stop", Index: &s.open})
	s.open, s.openKind = -1, ""
}

// stop ends the answer: message_delta with the stop reason and what was
// billed, then message_stop.
func (s *Stream) stop() {
	s.closeBlock()
	reason := StopReason(s.finish, s.stopSeq)
	delta := struct {
		Type  string                     `json:"type"`
		Delta wire.AnthropicMessageDelta `json:"delta"`
		Usage wire.AnthropicUsage        `json:"usage"`
	}{Type: "message_delta", Delta: wire.AnthropicMessageDelta{StopReason: &reason}}
	if reason == "stop_sequence" {
		delta.Delta.StopSequence = s.stopSeq
	}
	if s.usage != nil {
		delta.Usage = s.usage.usage()
	} else {
		delta.Usage.InputTokens = s.estimate
		if s.count != nil {
			delta.Usage.OutputTokens = s.count(s.delivered.String())
		}
	}
	s.event("message_delta", delta)
	s.event("message_stop", wire.AnthropicEvent{Type: "message_stop"})
	s.done = true
}

// fail ends the stream with an error event.
func (s *Stream) fail(typ, message string) {
	s.event("error", wire.AnthropicEvent{Type: "error", Error: &wire.AnthropicErrorDetail{Type: typ, Message: message}})
	s.done = true
}

// event appends one server-sent event.
func (s *Stream) event(name string, v any) {
	b, err := marshalAnswer(v)
	if err != nil {
		return
	}
	s.out = append(s.out, "event: "...)
	s.out = append(s.out, name...)
	s.out = append(s.out, "\ndata: "...)
	s.out = append(s.out, b...)
	s.out = append(s.out, "\n\n"...)
}
