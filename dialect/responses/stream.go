package responses

import (
	"github.com/sluicehq/sluice/wire"

	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// Stream translates a chat completion's event stream, in pieces as they
// come, into the Responses API's: response.created and
// response.in_progress first (Start); then for the assistant's text
// response.output_item.added, response.content_part.added, many
// response.output_text.delta, response.output_text.done,
// response.content_part.done and response.output_item.done; for each
// function call response.output_item.added,
// response.function_call_arguments.delta and .done and
// response.output_item.done; for each call of a custom tool
// response.output_item.added, and once its arguments are whole
// response.custom_tool_call_input.delta (all its input at once: the
// input is a string inside the JSON arguments, whole only at their end),
// .done and response.output_item.done; and last response.completed (or
// response.incomplete, cut by max_output_tokens; or response.failed, the
// provider's stream broken) with the whole response and its usage. Each
// event is "event: <type>\ndata: {…,"sequence_number":N}\n\n".
//
// Nothing is held back beyond the line a piece ends inside: every chunk
// is translated as it arrives. It is not safe for concurrent use.
type Stream struct {
	req  *Request
	meta Meta
	ids  *ids
	resp Response // output and status so far

	seq     int
	lines   wire.Lines // the stream split into lines
	data    []byte     // the data lines of the event being read
	out     []byte     // events to send, returned by the current call
	message *openMessage
	calls   map[int]int // a chat tool call's index -> its output index
	open    []int       // output indexes of function calls not yet done
	finish  string      // the chat's finish_reason, "" until it came
	usage   *Usage
	// waiting: the chat stream is over but reported no usage; the last
	// event waits for Finish and what was billed.
	waiting bool
	ended   bool
}

// openMessage is the assistant's message item while its text arrives.
type openMessage struct {
	index int // output index
	part  *ContentPart
	b     strings.Builder
}

// NewStream returns the translator of the request's answer.
func (r *Request) NewStream(meta Meta) *Stream {
	return &Stream{req: r, meta: meta, ids: newIDs(meta.ID), resp: r.skeleton(meta), calls: map[int]int{}}
}

// Start is the stream's first events: the response created and in progress.
func (s *Stream) Start() []byte {
	s.out = s.out[:0]
	s.emit("response.created", responseEvent{Response: s.resp})
	s.emit("response.in_progress", responseEvent{Response: s.resp})
	return s.out
}

// Ended says whether the last event (completed, incomplete or failed)
// has been made.
func (s *Stream) Ended() bool { return s.ended }

// Response is the response as the stream has made it: whole once Ended.
func (s *Stream) Response() Response { return s.resp }

// Write translates a piece of the chat completion's event stream and
// returns the events it completes; the slice is valid until the next call.
func (s *Stream) Write(p []byte) []byte {
	s.out = s.out[:0]
	if s.ended || s.waiting {
		return s.out
	}
	s.lines.Feed(p, func(line []byte) bool {
		s.readLine(line)
		return !s.ended && !s.waiting
	})
	return s.out
}

// Finish ends a stream that stopped without its end: an answer that
// finished is completed with billed (what the pipeline billed, when the
// stream reported no usage); one cut off fails. It returns the last
// events, nothing when the stream had ended.
func (s *Stream) Finish(billed Usage) []byte {
	s.out = s.out[:0]
	if rest := s.lines.Rest(); rest != nil { // a last line without its new line
		s.readLine(rest)
	}
	if len(s.data) > 0 && !s.ended {
		s.dispatch()
	}
	if s.ended {
		return s.out
	}
	if s.usage == nil {
		s.usage = &billed
	}
	if s.finish == "" {
		s.fail("server_error", "the provider's stream ended before the answer finished")
		return s.out
	}
	s.complete()
	return s.out
}

// readLine reads one line of server-sent events: data lines gather until
// the blank line that ends their event.
func (s *Stream) readLine(line []byte) {
	if len(line) == 0 {
		if len(s.data) > 0 {
			s.dispatch()
		}
		return
	}
	payload, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return // comments, event names, ids: chat streams carry nothing in them
	}
	payload = bytes.TrimPrefix(payload, []byte(" "))
	if len(s.data) > 0 {
		s.data = append(s.data, '\n')
	}
	s.data = append(s.data, payload...)
}

// chatChunk is one event of a chat completion's stream.
type chatChunk struct {
	Choices []struct {
		Delta struct {
			Content   *string `json:"content"`
			Refusal   *string `json:"refusal"`
			ToolCalls []struct {
				Index    int          `json:"index"`
				ID       string       `json:"id"`
				Function chatFunction `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *chatUsage `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// dispatch translates the event whose data has been read.
func (s *Stream) dispatch() {
	data := s.data
	s.data = s.data[:0]
	if string(bytes.TrimSpace(data)) == "[DONE]" {
		if s.usage == nil && s.finish != "" {
			s.waiting = true
			return
		}
		s.complete()
		return
	}
	var ch chatChunk
	if err := json.Unmarshal(data, &ch); err != nil {
		s.fail("server_error", "the provider sent an event that cannot be read")
		return
	}
	if ch.Error != nil {
		s.fail("server_error", ch.Error.Message)
		return
	}
	if ch.Usage != nil {
		s.usage = ch.Usage.usage()
	}
	if len(ch.Choices) == 0 {
		return
	}
	c := ch.Choices[0]
	if d := c.Delta.Content; d != nil && *d != "" {
		s.text("output_text", *d)
	}
	if d := c.Delta.Refusal; d != nil && *d != "" {
		s.text("refusal", *d)
	}
	for _, tc := range c.Delta.ToolCalls {
		s.toolCall(tc.Index, tc.ID, tc.Function)
	}
	if c.FinishReason != nil && *c.FinishReason != "" && s.finish == "" {
		s.finish = *c.FinishReason
		s.closeAll()
	}
}

// text adds a piece of the assistant's text (or refusal), opening its
// message item and content part as needed.
func (s *Stream) text(kind, delta string) {
	m := s.message
	if m == nil {
		m = &openMessage{index: len(s.resp.Output)}
		s.message = m
		s.resp.Output = append(s.resp.Output, OutputItem{Type: "message", ID: s.ids.message(), Status: "in_progress"})
		s.emit("response.output_item.added", itemEvent{OutputIndex: m.index, Item: s.resp.Output[m.index]})
	}
	item := &s.resp.Output[m.index]
	if m.part != nil && m.part.Type != kind {
		s.closePart()
	}
	if m.part == nil {
		m.part = &ContentPart{Type: kind}
		s.emit("response.content_part.added", partEvent{ItemID: item.ID, OutputIndex: m.index,
			ContentIndex: len(item.Content), Part: *m.part})
	}
	m.b.WriteString(delta)
	if kind == "refusal" {
		s.emit("response.refusal.delta", refusalDeltaEvent{ItemID: item.ID, OutputIndex: m.index, ContentIndex: len(item.Content), Delta: delta})
		return
	}
	s.emit("response.output_text.delta", textDeltaEvent{ItemID: item.ID, OutputIndex: m.index, ContentIndex: len(item.Content),
		Delta: delta, Logprobs: noLogprobs})
}

// closePart ends the message's open content part.
func (s *Stream) closePart() {
	m := s.message
	item := &s.resp.Output[m.index]
	part := *m.part
	index := len(item.Content)
	if part.Type == "refusal" {
		part.Refusal = m.b.String()
		s.emit("response.refusal.done", refusalDoneEvent{ItemID: item.ID, OutputIndex: m.index, ContentIndex: index, Refusal: part.Refusal})
	} else {
		part.Text = m.b.String()
		s.emit("response.output_text.done", textDoneEvent{ItemID: item.ID, OutputIndex: m.index, ContentIndex: index,
			Text: part.Text, Logprobs: noLogprobs})
	}
	item.Content = append(item.Content, part)
	s.emit("response.content_part.done", partEvent{ItemID: item.ID, OutputIndex: m.index, ContentIndex: index, Part: part})
	m.part = nil
	m.b.Reset()
}

// closeMessage ends the open message item.
func (s *Stream) closeMessage(status string) {
	m := s.message
	if m == nil {
		return
	}
	if m.part != nil {
		s.closePart()
	}
	item := &s.resp.Output[m.index]
	item.Status = status
	s.emit("response.output_item.done", itemEvent{OutputIndex: m.index, Item: *item})
	s.message = nil
}

// toolCall adds a piece of a function call: the first opens its item.
// The assistant's text before it ends there. Calls stay open until the
// answer finishes, so pieces of parallel calls may come in any order.
func (s *Stream) toolCall(index int, id string, fn chatFunction) {
	out, ok := s.calls[index]
	if !ok {
		s.closeMessage("completed")
		out = len(s.resp.Output)
		s.calls[index] = out
		s.open = append(s.open, out)
		// The first piece names the tool (as every OpenAI-compatible
		// provider sends it), which says whether this is a custom tool's
		// call.
		s.resp.Output = append(s.resp.Output, s.req.callItem(s.ids, index, "in_progress", id, chatFunction{Name: fn.Name}))
		s.emit("response.output_item.added", itemEvent{OutputIndex: out, Item: s.resp.Output[out]})
	} else {
		// The id and name come with the first piece; a provider that
		// sends them later still has them kept.
		item := &s.resp.Output[out]
		if item.CallID == "" {
			item.CallID = id
		}
		if item.Name == "" {
			item.Name = fn.Name
		}
	}
	if fn.Arguments == "" {
		return
	}
	item := &s.resp.Output[out]
	item.Arguments += fn.Arguments
	if item.Type == "custom_tool_call" {
		return // its input is read from the whole arguments, in closeAll
	}
	s.emit("response.function_call_arguments.delta", argsDeltaEvent{ItemID: item.ID, OutputIndex: out, Delta: fn.Arguments})
}

// closeAll ends every open item: the answer has finished (or broken).
func (s *Stream) closeAll() {
	status, _ := outcome(s.finish)
	if s.finish == "" {
		status = "incomplete"
	}
	if s.finish != "" && len(s.resp.Output) == 0 {
		// An empty answer is still a message, as a whole one is.
		s.text("output_text", "")
	}
	s.closeMessage(status)
	for _, out := range s.open {
		item := &s.resp.Output[out]
		item.Status = status
		if item.Type == "custom_tool_call" {
			item.Input = customInput(item.Arguments)
			if item.Input != "" {
				s.emit("response.custom_tool_call_input.delta", argsDeltaEvent{ItemID: item.ID, OutputIndex: out, Delta: item.Input})
			}
			s.emit("response.custom_tool_call_input.done", inputDoneEvent{ItemID: item.ID, OutputIndex: out, Input: item.Input})
		} else {
			s.emit("response.function_call_arguments.done", argsDoneEvent{ItemID: item.ID, OutputIndex: out, Arguments: item.Arguments})
		}
		s.emit("response.output_item.done", itemEvent{OutputIndex: out, Item: *item})
	}
	s.open = s.open[:0]
}

// complete makes the last event: completed, or incomplete.
func (s *Stream) complete() {
	if s.finish == "" {
		s.fail("server_error", "the provider's stream ended before the answer finished")
		return
	}
	status, details := outcome(s.finish)
	end(&s.resp, s.meta, status, details, s.usage)
	s.ended = true
	s.emit("response."+status, responseEvent{Response: s.resp})
}

// fail ends the stream with response.failed: what was made so far, and why.
func (s *Stream) fail(code, message string) {
	s.closeAll()
	end(&s.resp, s.meta, "failed", nil, s.usage)
	s.resp.Error = &ResponseError{Code: code, Message: message}
	s.ended = true
	s.emit("response.failed", responseEvent{Response: s.resp})
}

// The events' bodies; emit adds the type and sequence number.
type (
	responseEvent struct {
		Response Response `json:"response"`
	}
	itemEvent struct {
		OutputIndex int        `json:"output_index"`
		Item        OutputItem `json:"item"`
	}
	partEvent struct {
		ItemID       string      `json:"item_id"`
		OutputIndex  int         `json:"output_index"`
		ContentIndex int         `json:"content_index"`
		Part         ContentPart `json:"part"`
	}
	textDeltaEvent struct {
		ItemID       string     `json:"item_id"`
		OutputIndex  int        `json:"output_index"`
		ContentIndex int        `json:"content_index"`
		Delta        string     `json:"delta"`
		Logprobs     []struct{} `json:"logprobs"`
	}
	textDoneEvent struct {
		ItemID       string     `json:"item_id"`
		OutputIndex  int        `json:"output_index"`
		ContentIndex int        `json:"content_index"`
		Text         string     `json:"text"`
		Logprobs     []struct{} `json:"logprobs"`
	}
	refusalDeltaEvent struct {
		ItemID       string `json:"item_id"`
		OutputIndex  int    `json:"output_index"`
		ContentIndex int    `json:"content_index"`
		Delta        string `json:"delta"`
	}
	refusalDoneEvent struct {
		ItemID       string `json:"item_id"`
		OutputIndex  int    `json:"output_index"`
		ContentIndex int    `json:"content_index"`
		Refusal      string `json:"refusal"`
	}
	argsDeltaEvent struct {
		ItemID      string `json:"item_id"`
		OutputIndex int    `json:"output_index"`
		Delta       string `json:"delta"`
	}
	argsDoneEvent struct {
		ItemID      string `json:"item_id"`
		OutputIndex int    `json:"output_index"`
		Arguments   string `json:"arguments"`
	}
	inputDoneEvent struct {
		ItemID      string `json:"item_id"`
		OutputIndex int    `json:"output_index"`
		Input       string `json:"input"`
	}
)

// noLogprobs is the logprobs of every text event: Sluice asks for none.
var noLogprobs = []struct{}{}

// emit appends one event: its body with the type and sequence number.
func (s *Stream) emit(typ string, body any) {
	b, _ := json.Marshal(body)
	s.out = append(s.out, "event: "...)
	s.out = append(s.out, typ...)
	s.out = append(s.out, "\ndata: {\"type\":\""...)
	s.out = append(s.out, typ...)
	s.out = append(s.out, "\",\"sequence_number\":"...)
	s.out = strconv.AppendInt(s.out, int64(s.seq), 10)
	if len(b) > 2 {
		s.out = append(s.out, ',')
		s.out = append(s.out, b[1:]...)
	} else {
		s.out = append(s.out, '}')
	}
	s.out = append(s.out, "\n\n"...)
	s.seq++
}
