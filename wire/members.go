package wire

import (
	"bytes"
	"errors"

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
	at, end, members, err := findMembers(obj, names)
	if err != nil {
		return nil, err
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
	at, _, _, err := findMembers(obj, []string{name})
	if err != nil || at[0][0] < 0 {
		return nil, 0, false, err
	}
	v := obj[at[0][0]:at[0][1]]
	trimmed := bytes.TrimLeft(v, " \t\r\n:")
	return trimmed, int(at[0][1]) - len(trimmed), true, nil
}

// findMembers reads the top level of the object obj: where each of names'
// values is written (from just after its name; {-1, -1} when absent),
// where the closing brace is, and how many members there are.
func findMembers(obj []byte, names []string) (at [][2]int64, end int64, members int, err error) {
	at = make([][2]int64, len(names))
	for i := range at {
		at[i] = [2]int64{-1, -1}
	}
	d := jsontext.NewDecoder(bytes.NewReader(obj), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil, 0, 0, errors.New("wire: not a JSON object")
	}
	for d.PeekKind() != '}' {
		tok, err := d.ReadToken()
		if err != nil {
			return nil, 0, 0, err
		}
		name := tok.String()
		members++
		start := d.InputOffset() // the value follows the name's colon and any space
		if _, err := d.ReadValue(); err != nil {
			return nil, 0, 0, err
		}
		for i, n := range names {
			if n == name && at[i][0] < 0 {
				at[i] = [2]int64{start, d.InputOffset()}
			}
		}
	}
	// Just after the last member: what follows is space and the brace.
	end = d.InputOffset()
	if _, err := d.ReadToken(); err != nil {
		return nil, 0, 0, err
	}
	return at, end, members, nil
}
