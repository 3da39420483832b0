package upstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// geminiStream reads Gemini's event stream (streamGenerateContent with
// alt=sse: each event "data: {GenerateContentResponse}") as OpenAI's chat
// completion chunks, event by event as they arrive, never the whole
// answer at once:
//
//   - a first chunk with delta.role "assistant";
//   - a content delta per event with text, a tool_calls delta per
//     function call (index, id, type, name and the whole arguments:
//     Gemini sends a call whole);
//   - a chunk with the finish_reason when Gemini gives one;
//   - at the end, a usage chunk (choices empty) from the last
//     usageMetadata seen (Gemini's counts are running totals), then
//     "data: [DONE]".
//
// A stream that ends without a finishReason ends without one here too,
// and one without usageMetadata has no usage chunk, so the gateway counts
// the answer itself rather than billing a made-up usage. The provider's
// bytes may be split anywhere; lines end in LF or CRLF. A stream that
// breaks returns the break, after what came before it.
type geminiStream struct {
	body    io.ReadCloser
	id      string
	base    string
	created int64
	model   string

	buf     []byte // what the body gave, in one read
	line    []byte // the start of a line whose end has not come
	data    []byte // the data of the event being read
	out     bytes.Buffer
	started bool // the role chunk is out
	calls   int  // tool calls sent
	ended   bool // a finish_reason is out
	usage   *geminiUsage
	err     error // the body's end: io.EOF or its failure, once out is drained
}

// maxStreamEvent bounds one event's data: a larger one is the provider's
// failure, not something to keep reading into memory.
const maxStreamEvent = MaxResponseBytes

func newGeminiStream(req Request, body io.ReadCloser, base string, created int64) *geminiStream {
	return &geminiStream{body: body, id: "chatcmpl-" + base, base: base, created: created, model: req.Model, buf: make([]byte, 32<<10)}
}

// Read returns translated chunks; it reads the provider only when none
// are waiting, and once a call: bytes that complete no event yet return
// 0 and no error, so the pool's stall timer, which runs while a Read
// waits, measures the provider's silence and not the size of its events.
func (s *geminiStream) Read(p []byte) (int, error) {
	if s.out.Len() == 0 {
		if s.err != nil {
			return 0, s.err
		}
		n, err := s.body.Read(s.buf)
		if lerr := s.lines(s.buf[:n]); lerr != nil {
			err = lerr
		}
		if err != nil {
			s.end(err)
		}
		if s.out.Len() == 0 {
			return 0, s.err
		}
	}
	return s.out.Read(p)
}

func (s *geminiStream) Close() error { return s.body.Close() }

// lines splits what the body gave into lines, completing the pending one
// first, and reads each.
func (s *geminiStream) lines(b []byte) error {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return s.keep(b)
		}
		if err := s.keep(b[:i]); err != nil {
			return err
		}
		b = b[i+1:]
		line := bytes.TrimSuffix(s.line, []byte("\r"))
		s.line = s.line[:0]
		s.field(line)
	}
	return nil
}

// keep adds to the current line, within bounds.
func (s *geminiStream) keep(b []byte) error {
	if len(s.line)+len(b) > maxStreamEvent {
		return fmt.Errorf("gemini stream: an event over %d bytes", maxStreamEvent)
	}
	s.line = append(s.line, b...)
	return nil
}

// field reads one line of the event stream: data lines are gathered, a
// blank line ends the event; other fields (event:, id:, comments) say
// nothing Sluice uses.
func (s *geminiStream) field(line []byte) {
	if len(line) == 0 {
		s.dispatch()
		return
	}
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return
	}
	data = bytes.TrimPrefix(data, []byte(" "))
	if len(s.data) > 0 {
		s.data = append(s.data, '\n')
	}
	s.data = append(s.data, data...)
}

// end finishes the stream when the body ends: a last event without its
// blank line, the usage chunk and [DONE] on a clean end; a failure is
// returned as it is, once what came before it is read.
func (s *geminiStream) end(err error) {
	if len(s.line) > 0 {
		line := bytes.TrimSuffix(s.line, []byte("\r"))
		s.line = s.line[:0]
		s.field(line)
	}
	if !errors.Is(err, io.EOF) {
		s.err = err
		return
	}
	s.dispatch()
	if s.usage != nil {
		s.chunk(nil, s.usage.openAI())
	}
	s.out.WriteString("data: [DONE]\n\n")
	s.err = io.EOF
}

// oaChunk is a chat.completion.chunk.
type oaChunk struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Choices []oaChunkChoice `json:"choices"`
	Usage   *oaUsage        `json:"usage,omitempty"`
}

type oaChunkChoice struct {
	Index int `json:"index"`
	Delta struct {
		Role      string       `json:"role,omitempty"`
		Content   *string      `json:"content,omitempty"`
		ToolCalls []oaToolCall `json:"tool_calls,omitempty"`
	} `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

// chunk writes one chunk event: choice as its only choice, or none (the
// usage chunk).
func (s *geminiStream) chunk(choice *oaChunkChoice, usage *oaUsage) {
	c := oaChunk{ID: s.id, Object: "chat.completion.chunk", Created: s.created, Model: s.model, Choices: []oaChunkChoice{}, Usage: usage}
	if choice != nil {
		c.Choices = append(c.Choices, *choice)
	}
	b, _ := marshalJSON(c) // plain structs and strings: cannot fail
	s.event(b)
}

func (s *geminiStream) event(payload []byte) {
	s.out.WriteString("data: ")
	s.out.Write(payload)
	s.out.WriteString("\n\n")
}

// dispatch translates the event gathered so far.
func (s *geminiStream) dispatch() {
	data := bytes.TrimSpace(s.data)
	s.data = s.data[:0]
	if len(data) == 0 {
		return
	}
	var g geminiResponse
	if json.Unmarshal(data, &g) != nil {
		return // not an answer: nothing to pass on
	}
	if g.Error != nil {
		// Gemini's failure mid-stream, in OpenAI's words: the client's SDK
		// raises it.
		whole, _ := json.Marshal(struct {
			Error *geminiError `json:"error"`
		}{g.Error})
		s.event(geminiFailure(g.Error.Code, whole))
		return
	}
	if g.UsageMetadata != nil {
		s.usage = g.UsageMetadata
	}
	if !s.started {
		s.started = true
		role := oaChunkChoice{}
		role.Delta.Role = "assistant"
		empty := ""
		role.Delta.Content = &empty
		s.chunk(&role, nil)
	}
	if len(g.Candidates) == 0 {
		if g.PromptFeedback != nil && g.PromptFeedback.BlockReason != "" {
			s.finish("content_filter")
		}
		return
	}
	cand := g.Candidates[0]
	var text bytes.Buffer
	flush := func() {
		if text.Len() == 0 {
			return
		}
		content := oaChunkChoice{}
		t := text.String()
		content.Delta.Content = &t
		s.chunk(&content, nil)
		text.Reset()
	}
	for _, p := range cand.Content.Parts {
		switch {
		case p.Thought:
		case p.FunctionCall != nil:
			flush()
			tc := toolCall(p, s.base, s.calls)
			i := s.calls
			tc.Index = &i
			s.calls++
			call := oaChunkChoice{}
			call.Delta.ToolCalls = []oaToolCall{tc}
			s.chunk(&call, nil)
		default:
			text.WriteString(p.Text)
		}
	}
	flush()
	if r := finishReason(cand.FinishReason, s.calls > 0); r != "" {
		s.finish(r)
	}
}

// finish writes the finish chunk, once.
func (s *geminiStream) finish(reason string) {
	if s.ended {
		return
	}
	s.ended = true
	c := oaChunkChoice{FinishReason: &reason}
	s.chunk(&c, nil)
}
