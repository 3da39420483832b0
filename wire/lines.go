package wire

import "bytes"

// Lines splits an event stream that arrives in pieces of any size into
// its lines, keeping the start of a line whose end has not come for the
// next piece. The translators of one dialect's event stream into another's
// read their input through it.
type Lines struct {
	pending []byte
}

// Feed calls fn with each line p completes, without its line end ("\n"
// or "\r\n"), until fn returns false; what p holds after that line is
// dropped. A line passed to fn is valid only during the call.
func (l *Lines) Feed(p []byte, fn func(line []byte) bool) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.pending = append(l.pending, p...)
			return
		}
		line := p[:i]
		p = p[i+1:]
		if len(l.pending) > 0 {
			line = append(l.pending, line...)
			l.pending = l.pending[:0]
		}
		if !fn(bytes.TrimSuffix(line, []byte("\r"))) {
			return
		}
	}
}

// Rest returns the last line when the stream ended without its line end,
// and forgets it; nil when there is none.
func (l *Lines) Rest() []byte {
	if len(l.pending) == 0 {
		return nil
	}
	rest := bytes.TrimSuffix(l.pending, []byte("\r"))
	l.pending = nil
	return rest
}
