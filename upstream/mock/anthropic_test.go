package mock

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/wire"
)

const messagesBody = `{"model":"claude-test","max_tokens":50,"system":[{"type":"text","text":"be brief","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"tell me about rivers"}]}`

// message sends a Messages request the way Anthropic's SDKs do.
func message(t *testing.T, s *Server, key, body string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	return do(t, s, "POST", "/v1/messages", "", body, append([]string{"x-api-key", key, "anthropic-version", "2023-06-01"}, hdr...)...)
}

func anthropicErrorOf(t *testing.T, rec *httptest.ResponseRecorder) wire.AnthropicErrorDetail {
	t.Helper()
	var e wire.AnthropicError
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Type != "error" || !strings.HasPrefix(e.RequestID, "req_mock_") {
		t.Fatalf("error body %q: %v", rec.Body.String(), err)
	}
	return e.Error
}

func TestTheAnthropicSpeakerChecksAsAnthropicDoes(t *testing.T) {
	s := New(Config{Keys: map[string]float64{"sk-a": 0}})
	for _, tc := range []struct {
		name, key, body string
		hdr             []string
		status          int
		typ, message    string
	}{
		{"no key", "", messagesBody, nil, 401, "authentication_error", "invalid x-api-key"},
		{"max_tokens", "sk-a", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, nil, 400, "invalid_request_error", "max_tokens: Field required"},
		{"roles alternate", "sk-a", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"user","content":"y"}]}`, nil, 400, "invalid_request_error", "roles must alternate"},
		{"no empty text", "sk-a", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":""}]}]}`, nil, 400, "invalid_request_error", "text content blocks must be non-empty"},
		{"a tool_use answered", "sk-a", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":"y"}]}`, nil,
			400, "invalid_request_error", "`tool_use` ids were found without `tool_result` blocks immediately after: t1"},
		{"forced overload", "sk-a", messagesBody, []string{"X-Mock-Status", "529"}, 529, "overloaded_error", "forced by X-Mock-Status"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := message(t, s, tc.key, tc.body, tc.hdr...)
			if e := anthropicErrorOf(t, rec); rec.Code != tc.status || e.Type != tc.typ || !strings.Contains(e.Message, tc.message) {
				t.Fatalf("%d %+v", rec.Code, e)
			}
		})
	}
	rec := do(t, s, "POST", "/v1/messages", "", messagesBody, "x-api-key", "sk-a")
	if e := anthropicErrorOf(t, rec); rec.Code != 400 || e.Message != "anthropic-version: header is required" {
		t.Fatalf("no version: %d %+v", rec.Code, e)
	}
}

func TestTheAnthropicSpeakerAnswersAndCaches(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := New(Config{Keys: map[string]float64{"sk-a": 1}, Now: func() time.Time { return now }})
	var first, second wire.AnthropicMessage
	rec := message(t, s, "sk-a", messagesBody)
	if err := json.Unmarshal(rec.Body.Bytes(), &first); err != nil || rec.Code != 200 || first.Type != "message" ||
		*first.Content[0].Text != "mock reply to: tell me about rivers" || *first.StopReason != "end_turn" {
		t.Fatalf("%d %s", rec.Code, rec.Body.String())
	}
	if h := rec.Header(); h.Get("anthropic-ratelimit-requests-limit") != "60" || h.Get("anthropic-ratelimit-requests-remaining") != "0" ||
		h.Get("anthropic-ratelimit-requests-reset") != "2026-01-02T03:04:06.000Z" {
		t.Fatalf("headers %v", h)
	}
	rec = message(t, s, "sk-a", messagesBody)
	if e := anthropicErrorOf(t, rec); rec.Code != 429 || e.Type != "rate_limit_error" || rec.Header().Get("retry-after") != "1" {
		t.Fatalf("429: %d %+v %v", rec.Code, e, rec.Header())
	}
	now = now.Add(time.Second)
	rec = message(t, s, "sk-a", messagesBody)
	if err := json.Unmarshal(rec.Body.Bytes(), &second); err != nil || rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body.String())
	}
	// The system prompt was written to the cache, then read from it.
	u1, u2 := first.Usage, second.Usage
	if u1.CacheCreationInputTokens == 0 || u1.CacheReadInputTokens != 0 || u2.CacheReadInputTokens != u1.CacheCreationInputTokens ||
		u2.CacheCreationInputTokens != 0 || u1.InputTokens != u2.InputTokens || u1.InputTokens == 0 {
		t.Fatalf("usage %+v then %+v", u1, u2)
	}
}

func TestTheAnthropicSpeakerStreamsItsEvents(t *testing.T) {
	s := New(Config{Keys: map[string]float64{"sk-a": 0}, StreamChunks: 2})
	rec := message(t, s, "sk-a", strings.Replace(messagesBody, `"max_tokens":50`, `"max_tokens":50,"stream":true`, 1))
	var names []string
	var text string
	for _, ev := range strings.Split(strings.TrimSpace(rec.Body.String()), "\n\n") {
		name, data, _ := strings.Cut(ev, "\ndata: ")
		var e wire.AnthropicEvent
		if err := json.Unmarshal([]byte(data), &e); err != nil || "event: "+e.Type != name {
			t.Fatalf("event %q", ev)
		}
		names = append(names, e.Type)
		if e.Delta != nil && e.Delta.Text != nil {
			text += *e.Delta.Text
		}
	}
	want := "message_start ping content_block_start content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if strings.Join(names, " ") != want || text != "mock reply to: tell me about rivers" {
		t.Fatalf("%v %q", names, text)
	}
}

func TestTheAnthropicSpeakerThinks(t *testing.T) {
	s := New(Config{Keys: map[string]float64{"sk-a": 0}, StreamChunks: 2})
	const thinking = `{"model":"m","max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"tell me about rivers"}]}`
	var msg wire.AnthropicMessage
	rec := message(t, s, "sk-a", thinking)
	if err := json.Unmarshal(rec.Body.Bytes(), &msg); err != nil || rec.Code != 200 || len(msg.Content) != 2 || msg.Content[0].Type != "thinking" ||
		*msg.Content[0].Thinking != "mock thinking about: tell me about rivers" || *msg.Content[1].Text != "mock reply to: tell me about rivers" {
		t.Fatalf("%d %s", rec.Code, rec.Body.String())
	}
	if text, ok := signedText(*msg.Content[0].Signature); !ok || text != *msg.Content[0].Thinking {
		t.Fatalf("signature %q", *msg.Content[0].Signature)
	}
	// Thinking is output: in output_tokens, and said to be thinking.
	think := Tokens(*msg.Content[0].Thinking)
	if u := msg.Usage; u.OutputTokensDetails == nil || u.OutputTokensDetails.ThinkingTokens != think ||
		u.OutputTokens != think+Tokens(*msg.Content[1].Text) {
		t.Fatalf("usage %+v", u)
	}
	// Omitted, the thinking is empty and the signature still carries it.
	rec = message(t, s, "sk-a", strings.Replace(thinking, `"budget_tokens":1024`, `"budget_tokens":1024,"display":"omitted"`, 1))
	if err := json.Unmarshal(rec.Body.Bytes(), &msg); err != nil || *msg.Content[0].Thinking != "" {
		t.Fatalf("omitted: %s", rec.Body.String())
	}
	if text, _ := signedText(*msg.Content[0].Signature); text != "mock thinking about: tell me about rivers" {
		t.Fatalf("omitted signature %q", *msg.Content[0].Signature)
	}

	// Streamed: the thinking block first, its text in thinking_deltas,
	// its signature last.
	rec = message(t, s, "sk-a", strings.Replace(thinking, `"max_tokens":2000`, `"max_tokens":2000,"stream":true`, 1))
	var names []string
	var thought, sig string
	for _, ev := range strings.Split(strings.TrimSpace(rec.Body.String()), "\n\n") {
		_, data, _ := strings.Cut(ev, "\ndata: ")
		var e wire.AnthropicEvent
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			t.Fatalf("event %q", ev)
		}
		name := e.Type
		if e.Delta != nil && e.Delta.Type != "" {
			name = e.Delta.Type
		}
		if e.ContentBlock != nil {
			name += ":" + e.ContentBlock.Type
		}
		names = append(names, name)
		if e.Delta != nil {
			thought += deref(e.Delta.Thinking)
			sig += deref(e.Delta.Signature)
		}
	}
	want := "message_start ping content_block_start:thinking thinking_delta thinking_delta signature_delta content_block_stop " +
		"content_block_start:text text_delta text_delta content_block_stop message_delta message_stop"
	if strings.Join(names, " ") != want || thought != "mock thinking about: tell me about rivers" || sig != thinkingSignature(thought) {
		t.Fatalf("%v %q %q", names, thought, sig)
	}

	// What Anthropic refuses of thinking.
	for _, tc := range []struct{ body, beta, message string }{
		{strings.Replace(thinking, `"budget_tokens":1024`, `"budget_tokens":1000`, 1), "", "greater than or equal to 1024"},
		{strings.Replace(thinking, `"max_tokens":2000`, `"max_tokens":1024`, 1), "", "`max_tokens` must be greater than `thinking.budget_tokens`"},
		{`{"model":"m","max_tokens":50,"context_management":{"edits":[{"type":"clear_thinking_20251015"}]},"messages":[{"role":"user","content":"x"}]}`,
			"context-management-2025-06-27", "`clear_thinking_20251015` strategy requires `thinking` to be enabled or adaptive"},
		{`{"model":"m","max_tokens":50,"context_management":{"edits":[]},"messages":[{"role":"user","content":"x"}]}`, "", "context_management: Extra inputs are not permitted"},
		{`{"model":"m","max_tokens":50,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"forged"}]},{"role":"user","content":"y"}]}`,
			"", "messages.1.content.0: Invalid `signature` in `thinking` block"},
	} {
		hdr := []string{}
		if tc.beta != "" {
			hdr = []string{"anthropic-beta", tc.beta}
		}
		if e := anthropicErrorOf(t, message(t, s, "sk-a", tc.body, hdr...)); !strings.Contains(e.Message, tc.message) {
			t.Errorf("%s: %+v", tc.body, e)
		}
	}
	// With interleaved thinking a budget may pass max_tokens.
	if rec := message(t, s, "sk-a", strings.Replace(thinking, `"max_tokens":2000`, `"max_tokens":1024`, 1), "anthropic-beta", "interleaved-thinking-2025-05-14"); rec.Code != 200 {
		t.Fatalf("interleaved: %d %s", rec.Code, rec.Body.String())
	}
}
