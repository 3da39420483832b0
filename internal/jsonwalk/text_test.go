package jsonwalk

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzAppendText checks the text of every JSON string against
// encoding/json's reading of it, whole and cut at any limit.
func FuzzAppendText(f *testing.F) {
	for _, seed := range []string{`"abc"`, `""`, `"a\"b"`, `"\u00e9\n"`, "\"\xff\"", `"写一副春联"`, `"\\"`, `"a\/b"`,
		`"\ud83d\ude00"`, `"\ud800"`, `"\ud800\u0041"`, `"\udc00\ud800"`, `"\ud800\ud800\udc00"`, "\"tab\there\"", `"\b\f\r\t"`} {
		f.Add([]byte(seed), 3)
	}
	f.Fuzz(func(t *testing.T, raw []byte, limit int) {
		var want string
		if len(raw) < 2 || raw[0] != '"' || json.Unmarshal(raw, &want) != nil {
			return // not one JSON string: the decoder refuses it first
		}
		got := AppendText(nil, raw[1:len(raw)-1], -1)
		if string(got) != want {
			t.Fatalf("AppendText(%q) = %q; encoding/json reads %q", raw, got, want)
		}
		limit = max(limit%64, 0)
		cut := AppendText([]byte("x"), raw[1:len(raw)-1], limit)
		if !bytes.HasPrefix([]byte(want), cut[1:]) || len(cut)-1 < min(limit, len(want)) || !utf8.Valid(cut) {
			t.Fatalf("AppendText(%q, limit %d) = %q: not a valid prefix of %q of at least the limit", raw, limit, cut[1:], want)
		}
	})
}
