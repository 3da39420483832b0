package wire

import (
	"bytes"
	"errors"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
)

// SetMember is the JSON object obj with its top-level member name set to
// the string value, in place where obj has it (its first occurrence),
// else added at the end. Nothing else of obj changes, byte for byte.
func SetMember(obj []byte, name, value string) ([]byte, error) {
	return SetMembers(obj, []string{name}, []string{value})
}

// SetMembers is SetMember for several members at once: names[i] is set to
// the string values[i].
func SetMembers(obj []byte, names, values []string) ([]byte, error) {
	return setMembers(obj, names, values, "")
}

// ErrNotOfType is SetMembersOfType's answer for an object of another
// type, or of none.
var ErrNotOfType = errors.New("wire: not an object of the type wanted")

// SetMembersOfType is SetMembers for an object whose "type" member must
// be the string typ (ErrNotOfType when it is not), as an answer is
// checked before it is relabelled: one read of obj does both.
func SetMembersOfType(obj []byte, typ string, names, values []string) ([]byte, error) {
	return setMembers(obj, names, values, typ)
}

// setMembers is SetMembers, checking the type first when typ is not "".
func setMembers(obj []byte, names, values []string, typ string) ([]byte, error) {
	// On the stack for the usual one or two names, and the type.
	var nameRoom [3]string
	var room [3][2]int64
	find := names
	if typ != "" {
		find = append(nameRoom[:0], names...)
		find = append(find, "type")
	}
	var at [][2]int64
	if len(find) <= len(room) {
		at = room[:len(find)]
	} else {
		at = make([][2]int64, len(find))
	}
	end, members, err := findMembers(obj, find, at)
	if err != nil {
		return nil, err
	}
	if typ != "" {
		t := at[len(names)]
		if t[0] < 0 || !isString(bytes.TrimLeft(obj[t[0]:t[1]], " \t\r\n:"), typ) {
			return nil, ErrNotOfType
		}
		at = at[:len(names)]
	}
	out := make([]byte, 0, len(obj)+32)
	pos := int64(0)
	// Replace in the order the members appear.
	for {
		next := -1
		for i := range at {
			if at[i][0] >= pos && (next < 0 || at[i][0] < at[next][0]) {
				next = i
			}
		}
		if next < 0 {
			break
		}
		out = append(out, obj[pos:at[next][0]]...)
		out = appendValue(out, obj[at[next][0]:at[next][1]], values[next])
		pos = at[next][1]
	}
	out = append(out, obj[pos:end]...)
	for i := range at {
		if at[i][0] < 0 {
			if members > 0 {
				out = append(out, ',')
			}
			members++
			out, _ = jsontext.AppendQuote(out, names[i])
			out, _ = jsontext.AppendQuote(append(out, ':'), values[i])
		}
	}
	return append(out, obj[end:]...), nil
}

// isString says whether the JSON value raw is the string s, written
// without escapes (as every provider writes a type).
func isString(raw []byte, s string) bool {
	return len(raw) == len(s)+2 && raw[0] == '"' && raw[len(raw)-1] == '"' && string(raw[1:len(raw)-1]) == s
}

// appendValue appends value as a JSON string where old was, keeping the
// space that came before old's first byte.
func appendValue(out, old []byte, value string) []byte {
	trimmed := bytes.TrimLeft(old, " \t\r\n:")
	out = append(out, old[:len(old)-len(trimmed)]...)
	q, _ := jsontext.AppendQuote(out, value)
	return q
}

// Member is the value of obj's top-level member name (its first
// occurrence), as it is written in obj, and where it starts; ok is false
// when obj has no such member.
func Member(obj []byte, name string) (value []byte, start int, ok bool, err error) {
	var at [1][2]int64
	_, _, err = findMembers(obj, []string{name}, at[:])
	if err != nil || at[0][0] < 0 {
		return nil, 0, false, err
	}
	v := obj[at[0][0]:at[0][1]]
	trimmed := bytes.TrimLeft(v, " \t\r\n:")
	return trimmed, int(at[0][1]) - len(trimmed), true, nil
}

// findMembers reads the top level of the object obj: where each of names'
// values is written (from just after its name; {-1, -1} when absent),
// where the closing brace is, and how many members there are. It runs on
// every answer relabelled, so it reads obj in place with a pooled
// decoder and compares names as written, unescaping only a name that has
// escapes: it allocates nothing. at, one per name, is filled in.
func findMembers(obj []byte, names []string, at [][2]int64) (end int64, members int, err error) {
	for i := range at {
		at[i] = [2]int64{-1, -1}
	}
	s := memberScans.Get().(*memberScan)
	defer s.put()
	s.buf = *bytes.NewBuffer(obj) // read in place: the decoder aliases a bytes.Buffer's bytes
	s.dec.Reset(&s.buf, memberScanOptions...)
	d := &s.dec
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '{' {
		return 0, 0, errors.New("wire: not a JSON object")
	}
	for d.PeekKind() != '}' {
		raw, err := d.ReadValue() // the name, quoted as written
		if err != nil {
			return 0, 0, err
		}
		name := raw[1 : len(raw)-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			if s.name, err = jsontext.AppendUnquote(s.name[:0], raw); err != nil {
				return 0, 0, err
			}
			name = s.name
		}
		members++
		start := d.InputOffset() // the value follows the name's colon and any space
		for i, n := range names {
			if at[i][0] < 0 && string(name) == n {
				at[i][0] = start
			}
		}
		if _, err := d.ReadValue(); err != nil {
			return 0, 0, err
		}
		for i := range at {
			if at[i][0] == start {
				at[i][1] = d.InputOffset()
			}
		}
	}
	// Just after the last member: what follows is space and the brace.
	end = d.InputOffset()
	if _, err := d.ReadToken(); err != nil {
		return 0, 0, err
	}
	return end, members, nil
}

// memberScan is findMembers' decoder and buffers, kept for reuse.
type memberScan struct {
	dec  jsontext.Decoder
	buf  bytes.Buffer
	name []byte // an escaped name, unescaped
}

var (
	memberScans       = sync.Pool{New: func() any { return new(memberScan) }}
	memberScanOptions = []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}
)

// put returns s to the pool holding nothing of the object it read.
func (s *memberScan) put() {
	s.buf = bytes.Buffer{}
	s.dec.Reset(&s.buf)
	memberScans.Put(s)
}
