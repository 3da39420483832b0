package jsonwalk

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
)

// AppendText appends the text of a JSON string's contents (the bytes
// between its quotes, already checked by the decoder) to dst, as
// encoding/json reads it: escapes decoded, invalid UTF-8 and lone
// surrogates replaced with U+FFFD. It stops once dst has grown by limit
// bytes or more (limit < 0: no limit), which is how a text's first
// characters are read without the rest.
func AppendText(dst, raw []byte, limit int) []byte {
	start := len(dst)
	for len(raw) > 0 && (limit < 0 || len(dst)-start < limit) {
		// Copy the run up to the next escape; most of a text is one run.
		i := bytes.IndexByte(raw, '\\')
		if i < 0 {
			i = len(raw)
		}
		if room := limit - (len(dst) - start); limit >= 0 && i > room {
			// Only what the limit asks for, to the end of its last rune.
			for i = room; i < len(raw) && !utf8.RuneStart(raw[i]); i++ {
			}
		}
		if i > 0 {
			dst = appendValid(dst, raw[:i])
			raw = raw[i:]
			continue
		}
		if len(raw) < 2 {
			return dst // cut short: not from the decoder
		}
		switch c := raw[1]; c {
		case '"', '\\', '/':
			dst, raw = append(dst, c), raw[2:]
		case 'b':
			dst, raw = append(dst, '\b'), raw[2:]
		case 'f':
			dst, raw = append(dst, '\f'), raw[2:]
		case 'n':
			dst, raw = append(dst, '\n'), raw[2:]
		case 'r':
			dst, raw = append(dst, '\r'), raw[2:]
		case 't':
			dst, raw = append(dst, '\t'), raw[2:]
		case 'u':
			r, ok := hex4(raw[2:])
			if !ok {
				return dst
			}
			raw = raw[6:]
			if utf16.IsSurrogate(r) {
				// A pair is one character; a lone half is not one.
				if r2, ok := hex4(raw[min(2, len(raw)):]); ok && len(raw) >= 6 && raw[0] == '\\' && raw[1] == 'u' {
					if c := utf16.DecodeRune(r, r2); c != utf8.RuneError {
						dst, raw = utf8.AppendRune(dst, c), raw[6:]
						continue
					}
				}
				r = utf8.RuneError
			}
			dst = utf8.AppendRune(dst, r)
		default:
			return dst
		}
	}
	return dst
}

// appendValid appends b, each invalid UTF-8 byte as U+FFFD.
func appendValid(dst, b []byte) []byte {
	if utf8.Valid(b) {
		return append(dst, b...)
	}
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			dst = utf8.AppendRune(dst, utf8.RuneError)
		} else {
			dst = append(dst, b[:size]...)
		}
		b = b[size:]
	}
	return dst
}

// hex4 reads the four hex digits of a \u escape.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
