package batches

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/completion"
)

// FuzzReadLines feeds batch input files of any bytes to readLines: it never
// panics, every non-blank line is accounted for once, in order, and a line
// is either a request to queue (a custom_id unique in the file and a body
// that is a JSON object) or a failure naming its line.
func FuzzReadLines(f *testing.F) {
	ok := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"sluice-local","messages":[{"role":"user","content":"hi"}]}}`
	for _, seed := range []string{
		ok + "\n",
		ok + "\n" + ok + "\n", // a duplicate custom_id
		"\xef\xbb\xbf" + ok,   // a byte order mark
		"not json\n\n" + strings.Replace(ok, `"a"`, `"b"`, 1),
		`{"custom_id":7,"method":"POST"}`,
		`{"custom_id":"c","method":"GET","url":"/v1/chat/completions","body":{}}`,
		`{"custom_id":"d","method":"POST","url":"/v1/embeddings","body":{}}`,
		`{"custom_id":"e","method":"POST","url":"/v1/chat/completions","body":[1]}`,
		`{"custom_id":"f","method":"POST","url":"/v1/chat/completions","body":{"model":"sluice-local","messages":[],"stream":true}}`,
		"[]\n{}\n\"\"\r\n   \n",
	} {
		f.Add([]byte(seed))
	}
	p := completion.New(completion.Deps{Log: slog.New(slog.DiscardHandler), Now: time.Now, DefaultMaxTokens: 512})
	f.Fuzz(func(t *testing.T, content []byte) {
		lines := readLines(content, p)
		var nonBlank []int
		for i, raw := range bytes.Split(bytes.TrimPrefix(content, []byte("\xef\xbb\xbf")), []byte("\n")) {
			if len(bytes.TrimSpace(raw)) > 0 {
				nonBlank = append(nonBlank, i+1)
			}
		}
		if len(lines) != len(nonBlank) {
			t.Fatalf("%d lines read from %d non-blank lines", len(lines), len(nonBlank))
		}
		queued := map[string]bool{}
		for i, l := range lines {
			if l.line != nonBlank[i] {
				t.Fatalf("line %d reported as %d", nonBlank[i], l.line)
			}
			if l.failure != nil {
				if l.body != nil || l.failure.Code == "" || !strings.HasPrefix(l.failure.Message, "line ") {
					t.Fatalf("a failed line: %+v", l)
				}
				continue
			}
			if l.customID == "" || len(l.customID) > maxCustomID || queued[l.customID] {
				t.Fatalf("queued custom_id %q (seen before: %v)", l.customID, queued[l.customID])
			}
			queued[l.customID] = true
			var body map[string]json.RawMessage
			if err := json.Unmarshal(l.body, &body); err != nil {
				t.Fatalf("queued body is not a JSON object: %q", l.body)
			}
		}
	})
}
