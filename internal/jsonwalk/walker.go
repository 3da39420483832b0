// Package jsonwalk reads JSON in place, without reflection: a walker over
// one document's tokens and the text of its strings as encoding/json reads
// them. The hot path's parsers (the chat completion scan, the Messages
// translation) use it because a request is read on every call.
package jsonwalk

import (
	"bytes"
	"errors"
	"strconv"
)

// Walker reads one JSON document in place, token by token, checking its
// syntax as it goes: what a scanner needs of a decoder and no more. It
// exists for speed: a 100 KB prompt is almost all string contents, and a
// string is crossed here by searching for its next quote and backslash
// (vectorised in the bytes package) instead of byte by byte. Like the
// decoder it replaces, it lets invalid UTF-8 through inside strings (the
// text is made valid where it is read), and leaves repeated names to its
// caller.
type Walker struct {
	b     []byte
	i     int
	stack []frame
	// sep says the separator before the next value (',' or ':') has been
	// read, so that peeking twice reads it once.
	sep bool
}

// frame is an open object or array.
type frame struct {
	object bool
	n      int  // members or elements read so far
	name   bool // in an object: a name has been read, its value is next
}

// maxDepth bounds nesting, so a body of a million '[' is refused, not a
// million frames deep.
const maxDepth = 10000

// SyntaxError is a body that is not JSON, at a byte offset.
type SyntaxError struct {
	Offset int
	what   string
}

func (e *SyntaxError) Error() string {
	return "syntax error at byte " + strconv.Itoa(e.Offset) + ": " + e.what
}

// ErrEnd is the end of the body where a value was wanted.
var ErrEnd = errors.New("unexpected end of JSON")

// Reset starts a walk of b, keeping the stack's room; Reset(nil) lets go
// of the last document.
func (w *Walker) Reset(b []byte) { *w = Walker{b: b, stack: w.stack[:0]} }

// Offset is where the walk is in the document: just after what it read
// last (and, after Kind or Next, after the separator and space before the
// next value).
func (w *Walker) Offset() int { return w.i }

func (w *Walker) fail(what string) error {
	if w.i >= len(w.b) {
		return ErrEnd
	}
	return &SyntaxError{Offset: w.i, what: what}
}

func (w *Walker) space() {
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case ' ', '\t', '\r', '\n':
			w.i++
		default:
			return
		}
	}
}

// Next reads up to the next value or closing delimiter and returns its
// first byte ('"', '{', '[', 'n', 't', 'f', '0' for a number, '}' or ']'),
// or 0 with an error.
func (w *Walker) Next() (byte, error) {
	w.space()
	if len(w.stack) > 0 && !w.sep {
		top := &w.stack[len(w.stack)-1]
		if w.i < len(w.b) && (top.object && !top.name && w.b[w.i] == '}' || !top.object && w.b[w.i] == ']') {
			return w.b[w.i], nil
		}
		switch {
		case top.object && top.name:
			if w.i >= len(w.b) || w.b[w.i] != ':' {
				return 0, w.fail("':' wanted after a name")
			}
			w.i++
		case top.n > 0:
			if w.i >= len(w.b) || w.b[w.i] != ',' {
				return 0, w.fail("',' wanted between values")
			}
			w.i++
		}
		w.sep = true
		w.space()
	}
	if w.i >= len(w.b) {
		return 0, ErrEnd
	}
	c := w.b[w.i]
	switch c {
	case '"', '{', '[', 'n', 't', 'f':
		return c, nil
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return '0', nil
	case '}', ']':
		return 0, w.fail("a value wanted")
	}
	return 0, w.fail("invalid character " + strconv.QuoteRune(rune(c)))
}

// Kind is what the next value is (see Next), 0 when there is none.
func (w *Walker) Kind() byte {
	c, _ := w.Next()
	return c
}

// done records that a value was read at the current level.
func (w *Walker) done(isName bool) {
	w.sep = false
	if len(w.stack) == 0 {
		return
	}
	top := &w.stack[len(w.stack)-1]
	switch {
	case top.object && isName:
		top.name = true
	case top.object:
		top.name = false
		top.n++
	default:
		top.n++
	}
}

// Open reads '{' or '['.
func (w *Walker) Open() error {
	c, err := w.Next()
	if err != nil {
		return err
	}
	if c != '{' && c != '[' {
		return w.fail("an object or array wanted")
	}
	if len(w.stack) >= maxDepth {
		return w.fail("nested too deep")
	}
	w.i++
	w.sep = false
	w.stack = append(w.stack, frame{object: c == '{'})
	return nil
}

// Close reads the '}' or ']' of the innermost container, a value of the
// level it ends in.
func (w *Walker) Close() error {
	if err := w.pop(); err != nil {
		return err
	}
	w.done(false)
	return nil
}

// pop reads the end of the innermost container, counting it nowhere.
func (w *Walker) pop() error {
	c, err := w.Next()
	if err != nil {
		return err
	}
	top := w.stack[len(w.stack)-1]
	if top.object && c != '}' || !top.object && c != ']' {
		return w.fail("the end of the object or array wanted")
	}
	w.i++
	w.stack = w.stack[:len(w.stack)-1]
	w.sep = false
	return nil
}

// Name reads an object member's name: its raw JSON string.
func (w *Walker) Name() ([]byte, error) {
	c, err := w.Next()
	if err != nil {
		return nil, err
	}
	if c != '"' {
		return nil, w.fail("a name wanted")
	}
	v, err := w.str()
	if err == nil {
		w.done(true)
	}
	return v, err
}

// Value reads the next value whole, nested ones included, and returns its
// raw bytes.
func (w *Walker) Value() ([]byte, error) {
	c, err := w.Next()
	if err != nil {
		return nil, err
	}
	start := w.i
	switch c {
	case '"':
		_, err = w.str()
	case '0':
		err = w.number()
	case 'n':
		err = w.literal("null")
	case 't':
		err = w.literal("true")
	case 'f':
		err = w.literal("false")
	default:
		err = w.skipContainer()
	}
	if err != nil {
		return nil, err
	}
	w.done(false)
	return w.b[start:w.i], nil
}

// skipContainer reads an object or array whole; the caller counts it.
func (w *Walker) skipContainer() error {
	depth := len(w.stack)
	if err := w.Open(); err != nil {
		return err
	}
	for {
		top := w.stack[len(w.stack)-1]
		c, err := w.Next()
		if err != nil {
			return err
		}
		switch {
		case c == '}' || c == ']':
			if len(w.stack) == depth+1 {
				return w.pop()
			}
			err = w.Close()
		case top.object && !top.name:
			_, err = w.Name()
		case c == '{' || c == '[':
			err = w.Open()
		default:
			_, err = w.Value()
		}
		if err != nil {
			return err
		}
	}
}

// str reads a string at w.i and returns its raw bytes, quotes included.
// Between quotes anything goes but control characters, and a backslash
// must start a valid escape. Each stretch is found with one search for the
// next quote and, inside it, searches for backslashes, so a string is
// crossed about once however many escapes it has.
func (w *Walker) str() ([]byte, error) {
	start := w.i
	w.i++
	for {
		q := bytes.IndexByte(w.b[w.i:], '"')
		if q < 0 {
			w.i = len(w.b)
			return nil, ErrEnd
		}
		q += w.i // the next quote: the end, unless an escape holds it
		for {
			bs := bytes.IndexByte(w.b[w.i:q], '\\')
			if bs < 0 {
				if c := controlAt(w.b[w.i:q]); c >= 0 {
					w.i += c
					return nil, w.fail("control character in a string")
				}
				w.i = q + 1
				return w.b[start:w.i], nil
			}
			if c := controlAt(w.b[w.i : w.i+bs]); c >= 0 {
				w.i += c
				return nil, w.fail("control character in a string")
			}
			w.i += bs
			if err := w.escape(); err != nil {
				return nil, err
			}
			if w.i > q { // the quote was the escape's: look for the next
				break
			}
		}
	}
}

// controlAt is the index of the first byte below 0x20 in b, or -1.
func controlAt(b []byte) int {
	for i, c := range b {
		if c < 0x20 {
			return i
		}
	}
	return -1
}

// escape reads one escape at w.i.
func (w *Walker) escape() error {
	if w.i+1 >= len(w.b) {
		w.i = len(w.b)
		return ErrEnd
	}
	switch w.b[w.i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		w.i += 2
		return nil
	case 'u':
		if _, ok := hex4(w.b[w.i+2:]); ok {
			w.i += 6
			return nil
		}
		if w.i+6 > len(w.b) {
			w.i = len(w.b)
			return ErrEnd
		}
	}
	return w.fail("invalid escape in a string")
}

// number reads a JSON number at w.i.
func (w *Walker) number() error {
	b, i := w.b, w.i
	digits := func() int {
		j := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		return i - j
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		w.i = i
		return w.fail("invalid number")
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			w.i = i
			return w.fail("invalid number")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			w.i = i
			return w.fail("invalid number")
		}
	}
	w.i = i
	return nil
}

func (w *Walker) literal(lit string) error {
	if !bytes.HasPrefix(w.b[w.i:], []byte(lit)) {
		if len(w.b)-w.i < len(lit) && bytes.HasPrefix([]byte(lit), w.b[w.i:]) {
			w.i = len(w.b)
			return ErrEnd
		}
		return w.fail("invalid literal")
	}
	w.i += len(lit)
	return nil
}

// End checks that nothing but whitespace follows the document.
func (w *Walker) End() bool {
	w.space()
	return w.i == len(w.b)
}
