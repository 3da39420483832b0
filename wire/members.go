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
	at := make([][2]int64, len(names)) // each name's value: start and end offsets; {-1,-1} when absent
	for i := range at {
		at[i] = [2]int64{-1, -1}
	}
	d := jsontext.NewDecoder(bytes.NewReader(obj), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil, errors.New("wire: not a JSON object")
	}
	var end int64
	members := 0
	for {
		if d.PeekKind() == '}' {
			end = d.InputOffset()
			break
		}
		tok, err := d.ReadToken()
		if err != nil {
			return nil, err
		}
		name := tok.String()
		members++
		// The value starts after the name's colon and any space.
		start := d.InputOffset()
		if _, err := d.ReadValue(); err != nil {
			return nil, err
		}
		for i, n := range names {
			if n == name && at[i][0] < 0 {
				at[i] = [2]int64{start, d.InputOffset()}
			}
		}
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
