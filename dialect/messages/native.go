package messages

import (
	"bytes"

	"github.com/sluicehq/sluice/wire"
)

// NativeStream passes an Anthropic key's own events to a Messages client,
// as Anthropic wrote them but for message_start's message, whose id and
// model become the gateway's (as a translated stream's are). It reads the
// events' names only, to end a stream cut short (no message_stop, no
// error event) with an error event, as Stream does.
type NativeStream struct {
	id, model string
	lines     wire.Lines
	out       []byte
	event     string // the name of the event being read
	open      bool   // an event's lines have passed, not yet its blank line
	relabeled bool   // message_start's message has been relabelled
	done      bool   // message_stop or an error event passed
}

// NewNativeStream is the stream of a message the gateway calls id, of the
// model the client asked for.
func NewNativeStream(id, model string) *NativeStream {
	return &NativeStream{id: id, model: model}
}

// Write passes on the whole lines of p; what it returns is valid until the
// next call.
func (s *NativeStream) Write(p []byte) []byte {
	s.out = s.out[:0]
	s.lines.Feed(p, func(line []byte) bool {
		s.line(line)
		return true
	})
	return s.out
}

// End is what ends the stream: a last line held for its line end, the
// end of an event left open, and unless message_stop or an error event
// passed, an error event.
func (s *NativeStream) End() []byte {
	s.out = s.out[:0]
	if rest := s.lines.Rest(); len(rest) > 0 {
		s.line(rest)
	}
	if s.open {
		s.out = append(s.out, '\n')
		s.open = false
	}
	if !s.done {
		b, _ := marshalAnswer(wire.AnthropicEvent{Type: "error", Error: &wire.AnthropicErrorDetail{Type: "overloaded_error",
			Message: "the provider stopped sending; the answer is incomplete"}})
		s.out = append(s.out, "event: error\ndata: "...)
		s.out = append(s.out, b...)
		s.out = append(s.out, "\n\n"...)
		s.done = true
	}
	return s.out
}

// line passes one line, relabelling message_start's data.
func (s *NativeStream) line(line []byte) {
	switch {
	case len(line) == 0:
		s.event, s.open = "", false
	case bytes.HasPrefix(line, []byte("event:")):
		s.event, s.open = string(bytes.TrimSpace(line[len("event:"):])), true
	case bytes.HasPrefix(line, []byte("data:")):
		s.open = true
		switch s.event {
		case "message_stop", "error":
			s.done = true
		case "message_start":
			if relabeled, ok := s.relabel(line[len("data:"):]); ok && !s.relabeled {
				s.relabeled = true
				s.out = append(s.out, "data: "...)
				s.out = append(s.out, relabeled...)
				s.out = append(s.out, '\n')
				return
			}
		}
	default:
		s.open = true
	}
	s.out = append(s.out, line...)
	s.out = append(s.out, '\n')
}

// relabel is message_start's data with its message's id and model the
// gateway's.
func (s *NativeStream) relabel(data []byte) ([]byte, bool) {
	data = bytes.TrimSpace(data)
	msg, at, ok, err := wire.Member(data, "message")
	if err != nil || !ok {
		return nil, false
	}
	relabeled, err := wire.SetMembers(msg, []string{"id", "model"}, []string{s.id, s.model})
	if err != nil {
		return nil, false
	}
	out := make([]byte, 0, len(data)+len(s.id)+len(s.model))
	out = append(out, data[:at]...)
	out = append(out, relabeled...)
	return append(out, data[at+len(msg):]...), true
}
