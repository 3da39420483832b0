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
