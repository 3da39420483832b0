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

// FuzzJSONString: jsonString reads a JSON value as json.Unmarshal into a
// string would, with or without its shortcut.
func FuzzJSONString(f *testing.F) {
	for _, seed := range []string{`"POST"`, `"a\"b"`, `"\u0050OST"`, `1234`, `"é"`, "\"\xff\"", `""`, `"`, `null`, "\"a\tb\""} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) || len(bytes.TrimSpace(raw)) != len(raw) {
			return // checkLine's values are decoded fields: valid JSON, nothing around them
		}
		var want string
		wantOK := json.Unmarshal(raw, &want) == nil
		got, ok := jsonString(raw)
		if ok != wantOK || got != want {
			t.Fatalf("jsonString(%q) = %q, %v; json.Unmarshal: %q, %v", raw, got, ok, want, wantOK)
		}
	})
}

// FuzzEnvelope: a line's fields decode as json.Unmarshal decodes them into
// a struct of four json.RawMessage, on any line that starts an object.
func FuzzEnvelope(f *testing.F) {
	for _, seed := range []string{
		`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}`,
		`{"CUSTOM_ID":"a","custom_id":"b"}`, `{"Custom_Id":1,"method":null}`, `{"body":[1,2]} x`, `{"a":`, `{"custom_id":"\u00e9\ud800"}`,
		"{\"custom_id\":\"\xff\"}", `{"ſ":1,"bodY":{}}`, `{}`, `{"\u0075rl":"u"}`, "{\"k\xff\":1}",
	} {
		f.Add([]byte(seed))
	}
	var l envelope
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) == 0 || raw[0] != '{' {
			return
		}
		var want struct {
			CustomID json.RawMessage `json:"custom_id"`
			Method   json.RawMessage `json:"method"`
			URL      json.RawMessage `json:"url"`
			Body     json.RawMessage `json:"body"`
		}
		wantErr := json.Unmarshal(raw, &want)
		err := l.decode(raw)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("decode(%q): %v; json.Unmarshal: %v", raw, err, wantErr)
		}
		if err != nil {
			return
		}
		for i, pair := range [][2][]byte{{l.CustomID, want.CustomID}, {l.Method, want.Method}, {l.URL, want.URL}, {l.Body, want.Body}} {
			if !bytes.Equal(pair[0], pair[1]) {
				t.Fatalf("decode(%q) field %d = %q, json.Unmarshal %q", raw, i, pair[0], pair[1])
			}
		}
	})
}
