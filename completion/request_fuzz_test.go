package completion_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/completion"
	"github.com/sluicehq/sluice/upstream"
)

// servesGPT is a provider pool that serves one model and is never called.
type servesGPT struct{}

func (servesGPT) Serves(model string) bool { return model == "gpt-test" }
func (servesGPT) Do(context.Context, upstream.Request) (*upstream.Response, error) {
	panic("Parse must not call a provider")
}
func (servesGPT) Settle(context.Context, int64, int64, int64) error { return nil }

// FuzzParse feeds any body to the chat request parser. It never panics; a
// refusal is always the client's fault (a 4xx with a reason), never an
// internal error; an accepted body is one valid JSON object whose model
// is served, with at least one message of a known role, a max_tokens in
// bounds, text that is valid UTF-8, and the body kept byte for byte (it is
// what a provider gets).
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		`{"model":"sluice-local","messages":[{"role":"user","content":"写一副春联"}]}`,
		`{"model":"gpt-test","max_tokens":5,"max_completion_tokens":9,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"},{"type":"text","text":"b"}]}]}`,
		`{"model":"gpt-test","messages":[{"role":"system","content":null},{"role":"tool","content":"x"}],"n":1,"temperature":0}`,
		`{"model":"sluice-local","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`,
		`{"model":"gpt-test","max_tokens":10000001,"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"gpt-test","max_tokens":-1,"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"gpt-test","messages":[{"role":"user","content":"\ud800\udfff\xff"}]}`,
		`{"model":"nope","messages":[]}`,
		`{} {}`, `{`, `[]`, `null`, ``, `"x"`, `{"model":1}`,
		`{"model":"gpt-test","messages":[{"role":"user","content":7}]}`,
		`{"model":"gpt-test","messages":[{"role":"user","content":"x"}],"model":"sluice-local"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Add([]byte("{\"model\":\"gpt-test\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}")) // not UTF-8
	p := completion.New(completion.Deps{Providers: servesGPT{}})
	f.Fuzz(func(t *testing.T, body []byte) {
		in := bytes.Clone(body)
		req, err := p.Parse(body)
		if !bytes.Equal(body, in) {
			t.Fatal("Parse changed the body it was given")
		}
		if err != nil {
			e := apperr.As(err)
			if s := apperr.Status(e.Code); s < 400 || s > 499 || e.Reason == "" || e.Message == "" {
				t.Fatalf("refusal %+v (status %d) is not a client error with a reason and a message", e, s)
			}
			return
		}
		if !json.Valid(body) || !bytes.Equal(req.Body, body) {
			t.Fatalf("accepted %q: valid JSON %v, body kept %v", body, json.Valid(body), bytes.Equal(req.Body, body))
		}
		if req.Model != "sluice-local" && req.Model != "gpt-test" {
			t.Fatalf("accepted model %q, which nobody serves", req.Model)
		}
		if len(req.Messages()) == 0 || req.MaxTokens < 0 || req.MaxTokens > 10_000_000 {
			t.Fatalf("accepted %d messages, max_tokens %d", len(req.Messages()), req.MaxTokens)
		}
		for _, m := range req.Messages() {
			switch m.Role {
			case "system", "developer", "user", "assistant", "tool":
			default:
				t.Fatalf("accepted role %q", m.Role)
			}
			if !utf8.ValidString(m.Content) {
				t.Fatalf("message text %q is not UTF-8", m.Content)
			}
		}
		if req.IncludeUsage && !bytes.Contains(body, []byte("include_usage")) {
			t.Fatal("include_usage set from nowhere")
		}
	})
}
