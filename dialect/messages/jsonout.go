package messages

import (
	"bytes"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/jsonwalk"
)

// JSON read and written as the general path's decoder and encoding/json
// read and write it, for the common path (common.go).

// unique says whether every object in the JSON value raw has its names
// once each, as the general path's decoder requires. A name with an
// escape, an object of very many members or a value nested very deep is
// not vouched for.
func (c *common) unique(raw []byte) bool {
	c.u.Reset(raw)
	c.names = c.names[:0]
	return c.uniqueValue(0) && c.u.End()
}

// uniqueValue reads the next value of c.u, checking its objects' names.
func (c *common) uniqueValue(depth int) bool {
	u := &c.u
	switch u.Kind() {
	case '{':
		if depth >= 64 || u.Open() != nil {
			return false
		}
		from := len(c.names)
		for {
			k, err := u.Next()
			if err != nil {
				return false
			}
			if k == '}' {
				break
			}
			name, err := u.Name()
			if err != nil || bytes.IndexByte(name, '\\') >= 0 || len(c.names)-from >= 256 {
				return false
			}
			for _, n := range c.names[from:] {
				if string(n) == string(name) {
					return false
				}
			}
			c.names = append(c.names, name)
			if !c.uniqueValue(depth + 1) {
				return false
			}
		}
		c.names = c.names[:from]
		return u.Close() == nil
	case '[':
		if depth >= 64 || u.Open() != nil {
			return false
		}
		_, ok := elements(u, func(int) bool { return c.uniqueValue(depth + 1) })
		return ok
	}
	_, err := u.Value()
	return err == nil
}

// plain is the text of a string with no escapes (false when it has some).
func (c *common) plain(raw []byte) (string, bool) {
	if bytes.IndexByte(raw, '\\') >= 0 {
		return "", false
	}
	return string(raw[1 : len(raw)-1]), true
}

// unit reads a number from 0 to 1, a sampling parameter's range.
func unit(kind byte, raw []byte) (float64, bool) {
	if kind != '0' {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	return f, err == nil && f >= 0 && f <= 1
}

// count reads a non-negative integer written without sign, fraction or
// exponent, as the general path's decoder reads an int64.
func count(raw []byte) (int64, bool) {
	if len(raw) == 0 || raw[0] < '0' || raw[0] > '9' {
		return 0, false
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return n, err == nil
}

// appendString writes the JSON string raw (quotes included) as
// encoding/json writes its text: as it is, when it has no escapes and no
// U+2028 or U+2029, which it escapes; else decoded and quoted again.
func (c *common) appendString(out, raw []byte) []byte {
	return append(c.appendContents(append(out, '"'), raw), '"')
}

// appendContents is appendString without the quotes.
func (c *common) appendContents(out, raw []byte) []byte {
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && !lineSeparator(inner) {
		return append(out, inner...)
	}
	c.text = jsonwalk.AppendText(c.text[:0], inner, -1)
	return appendEscaped(out, c.text)
}

// lineSeparator says whether b holds U+2028 or U+2029 (E2 80 A8, E2 80 A9).
func lineSeparator(b []byte) bool {
	for {
		i := bytes.IndexByte(b, 0xE2)
		if i < 0 || i+2 >= len(b) {
			return false
		}
		if b[i+1] == 0x80 && b[i+2]&^1 == 0xA8 {
			return true
		}
		b = b[i+1:]
	}
}

// surrogateEscape says whether b may hold an escaped UTF-16 surrogate
// (\uD800 to \uDFFF), which the general path's decoder pairs or refuses.
func surrogateEscape(b []byte) bool {
	for {
		i := bytes.Index(b, []byte(`\u`))
		if i < 0 || i+3 >= len(b) {
			return false
		}
		if (b[i+2] == 'd' || b[i+2] == 'D') && bytes.IndexByte([]byte("89abcdefABCDEF"), b[i+3]) >= 0 {
			return true
		}
		b = b[i+2:]
	}
}

const hexDigits = "0123456789abcdef"

// appendQuoted writes s as encoding/json writes a string without HTML
// escapes.
func appendQuoted[T string | []byte](out []byte, s T) []byte {
	return append(appendEscaped(append(out, '"'), s), '"')
}

// appendEscaped is appendQuoted without the quotes.
func appendEscaped[T string | []byte](out []byte, s T) []byte {
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			out = append(out, s[start:i]...)
			switch b {
			case '\\', '"':
				out = append(out, '\\', b)
			case '\b':
				out = append(out, '\\', 'b')
			case '\f':
				out = append(out, '\\', 'f')
			case '\n':
				out = append(out, '\\', 'n')
			case '\r':
				out = append(out, '\\', 'r')
			case '\t':
				out = append(out, '\\', 't')
			default:
				out = append(out, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune([]byte(s[i:min(len(s), i+utf8.UTFMax)]))
		if r == utf8.RuneError && size == 1 {
			out = append(out, s[start:i]...)
			out = append(out, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			out = append(out, s[start:i]...)
			out = append(out, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(out, s[start:]...)
}

// appendCompact writes the JSON value raw without its insignificant
// space, as encoding/json compacts a RawMessage.
func appendCompact(out, raw []byte) []byte {
	for i := 0; i < len(raw); {
		switch b := raw[i]; b {
		case ' ', '\t', '\r', '\n':
			i++
		case '"':
			j := i + 1
			for {
				j += bytes.IndexByte(raw[j:], '"')
				n := 0
				for k := j - 1; raw[k] == '\\'; k-- {
					n++
				}
				j++
				if n%2 == 0 {
					break
				}
			}
			out = append(out, raw[i:j]...)
			i = j
		default:
			// A run of anything but space and quotes.
			j := i + 1
			for j < len(raw) && raw[j] != '"' && raw[j] != ' ' && raw[j] != '\t' && raw[j] != '\r' && raw[j] != '\n' {
				j++
			}
			out = append(out, raw[i:j]...)
			i = j
		}
	}
	return out
}

// appendFloat writes f as encoding/json writes a float64.
func appendFloat(out []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	out = strconv.AppendFloat(out, f, format, -1, 64)
	if format == 'e' {
		n := len(out)
		if n >= 4 && out[n-4] == 'e' && out[n-3] == '-' && out[n-2] == '0' {
			out[n-2] = out[n-1]
			out = out[:n-1]
		}
	}
	return out
}
