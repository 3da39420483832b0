package upstream

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/apperr"
)

// What an OpenAI-compatible key is sent of the chat form's Anthropic
// extensions: a thinking budget as reasoning_effort by its band, the rest
// left out where it changes nothing, the other members as written.
func TestAnthropicExtensionsAtAnOpenAICompatibleKey(t *testing.T) {
	const user = `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct{ name, in, want string }{
		{"a budget below 4,096 is low", `{"model":"o3",` + user + `,"thinking":{"type":"enabled","budget_tokens":1024}}`,
			`{"model":"o3",` + user + `,"reasoning_effort":"low"}`},
		{"below 16,384 medium", `{"model":"o3","thinking":{"type":"enabled","budget_tokens":16383},` + user + `}`,
			`{"model":"o3",` + user + `,"reasoning_effort":"medium"}`},
		{"else high", `{"thinking":{"type":"enabled","budget_tokens":31999},"model":"o3",` + user + `}`,
			`{"model":"o3",` + user + `,"reasoning_effort":"high"}`},
		{"the client's own effort is the effort", `{"model":"o3","reasoning_effort":"low","thinking":{"type":"enabled","budget_tokens":31999},` + user + `}`,
			`{"model":"o3","reasoning_effort":"low",` + user + `}`},
		{"a name the pipeline does not read may come twice", `{"model":"o3","x":1,"x":2,` + user + `,"thinking":{"type":"enabled","budget_tokens":5000}}`,
			`{"model":"o3","x":1,"x":2,` + user + `,"reasoning_effort":"medium"}`},
		{"adaptive thinking is the model's own choice", `{"model":"o3","thinking":{"type":"adaptive"},` + user + `}`, `{"model":"o3",` + user + `}`},
		{"disabled thinking is no thinking asked", `{"model":"o3","thinking":{"type":"disabled"},` + user + `}`, `{"model":"o3",` + user + `}`},
		{"betas, clear_thinking edits and the thinking blocks of history are left out; the rest as written",
			`{"model":"o3", "anthropic_beta":["interleaved-thinking-2025-05-14"],"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},
			  "messages":[{"role":"user","content":"a <b>"},{"role":"assistant", "content":[{"type":"text","text":"c"}],"thinking_blocks":[{"type":"thinking","thinking":"t","signature":"s"}],"tool_calls":[{"id":"x","type":"function","function":{"name":"f","arguments":"{}"}}]},
			  {"role":"tool","tool_call_id":"x","content":"r"}],"stream":true}`,
			`{"model":"o3","messages":[{"role":"user","content":"a <b>"},{"role":"assistant", "content":[{"type":"text","text":"c"}],"tool_calls":[{"id":"x","type":"function","function":{"name":"f","arguments":"{}"}}]},
			  {"role":"tool","tool_call_id":"x","content":"r"}],"stream":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := openAIChatBody([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if compactJSON(t, string(got)) != compactJSON(t, tc.want) {
				t.Fatalf("\n got %s\nwant %s", got, tc.want)
			}
		})
	}

	// A body with no extension is sent as it is, the very bytes, even
	// when its text names one.
	for _, body := range []string{`{"model":"gpt-4o","messages":[{"role":"user","content":"say \"thinking\""}]}`, `{"model":"gpt-4o",` + user + `}`} {
		got, err := openAIChatBody([]byte(body))
		if err != nil || string(got) != body {
			t.Fatalf("%s became %s (%v)", body, got, err)
		}
	}

	// An edit Anthropic makes to the prompt is refused, named.
	_, err := openAIChatBody([]byte(`{"model":"o3",` + user + `,"context_management":{"edits":[{"type":"clear_thinking_20251015"},{"type":"clear_tool_uses_20250919"}]}}`))
	var e *apperr.Error
	if !errors.As(err, &e) || e.Param != "context_management.edits[1].type" || !strings.Contains(e.Message, "'clear_tool_uses_20250919' is made by Anthropic's API alone") {
		t.Fatalf("clear_tool_uses: %v", err)
	}

	// On the wire, to OpenAI's and Azure's APIs alike.
	for _, f := range []wireFormat{openAIFormat{}, azureFormat{}} {
		hreq, err := f.newRequest(context.Background(), &Key{Secret: "s"}, mustURL(t, "https://api.example/v1/openai/deployments/d?api-version=1"),
			Request{Model: "o3", Body: []byte(`{"model":"o3","anthropic_beta":["x"],"thinking":{"type":"enabled","budget_tokens":2000},` + user + `}`)})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(hreq.Body)
		if want := `{"model":"o3",` + user + `,"reasoning_effort":"low"}`; string(b) != want {
			t.Fatalf("%T sent %s", f, b)
		}
	}
}

// compactJSON is a JSON text without insignificant space, keys in their
// order: bodies are compared as written.
func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var out strings.Builder
	inString, escaped := false, false
	for _, r := range s {
		switch {
		case inString:
			out.WriteRune(r)
			switch {
			case escaped:
				escaped = false
			case r == '\\':
				escaped = true
			case r == '"':
				inString = false
			}
		case r == '"':
			inString = true
			out.WriteRune(r)
		case r == ' ' || r == '\n' || r == '\t' || r == '\r':
		default:
			out.WriteRune(r)
		}
	}
	return out.String()
}

// What a Gemini key is sent of them: the budget itself, adaptive
// thinking as Gemini 2's dynamic budget, the rest left out or refused.
func TestAnthropicExtensionsAtAGeminiKey(t *testing.T) {
	const user = `"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yes","thinking_blocks":[{"type":"thinking","thinking":"t","signature":"s"}]},{"role":"user","content":"so?"}]`
	const contents = `{"contents":[{"role":"user","parts":[{"text":"hi"}]},{"role":"model","parts":[{"text":"yes"}]},{"role":"user","parts":[{"text":"so?"}]}]`
	for _, tc := range []struct{ name, model, in, want string }{
		{"an enabled budget, exactly", "gemini-2.5-pro", `{` + user + `,"thinking":{"type":"enabled","budget_tokens":31999},"anthropic_beta":["interleaved-thinking-2025-05-14"]}`,
			contents + `,"generationConfig":{"thinkingConfig":{"thinkingBudget":31999}}}`},
		{"Gemini 3 takes a budget too", "gemini-3-pro-preview", `{` + user + `,"thinking":{"type":"enabled","budget_tokens":2048}}`,
			contents + `,"generationConfig":{"thinkingConfig":{"thinkingBudget":2048}}}`},
		{"adaptive is Gemini 2's dynamic thinking", "gemini-2.5-flash", `{` + user + `,"thinking":{"type":"adaptive"},"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]}}`,
			contents + `,"generationConfig":{"thinkingConfig":{"thinkingBudget":-1}}}`},
		{"and Gemini 3's default", "gemini-3-pro-preview", `{` + user + `,"thinking":{"type":"adaptive"}}`, contents + `}`},
		{"disabled is no thinking asked", "gemini-2.5-flash", `{` + user + `,"thinking":{"type":"disabled"}}`, contents + `}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := geminiBody(t, tc.model, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if canonical(t, got) != canonical(t, tc.want) {
				t.Fatalf("got  %s\nwant %s", canonical(t, got), canonical(t, tc.want))
			}
		})
	}
	for _, tc := range []struct{ in, param, message string }{
		{`{` + user + `,"thinking":{"type":"enabled","budget_tokens":2048},"reasoning_effort":"low"}`, "thinking", "thinking.budget_tokens and reasoning_effort both set"},
		{`{` + user + `,"context_management":{"edits":[{"type":"compact_20260112"}]}}`, "context_management.edits[0].type", "'compact_20260112' is made by Anthropic's API alone"},
	} {
		_, err := geminiBody(t, "gemini-2.5-flash", tc.in)
		var e *apperr.Error
		if !errors.As(err, &e) || e.Param != tc.param || !strings.Contains(e.Message, tc.message) {
			t.Errorf("%s: %v, want a 400 naming %s", tc.in, err, tc.param)
		}
	}
}
