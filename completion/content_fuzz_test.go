package completion

import (
	"encoding/json"
	"testing"
)

// FuzzContentText checks the plain-string shortcut against encoding/json:
// every JSON string reads the same either way.
func FuzzContentText(f *testing.F) {
	for _, seed := range []string{`"abc"`, `""`, `"a\"b"`, `"\u00e9\n"`, "\"\xff\"", `"写一副春联"`, `"\\"`, `"a\/b"`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var want string
		if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &want) != nil {
			return // not one JSON string: the decoder refuses it before contentText
		}
		got, err := contentText(raw, false)
		if err != nil || got != want {
			t.Fatalf("contentText(%q) = %q, %v; encoding/json reads %q", raw, got, err, want)
		}
	})
}
