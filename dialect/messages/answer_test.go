package messages

import (
	"net/http"
	"reflect"
	"testing"
	"time"
)

func TestFromChatWritesTheMessageObject(t *testing.T) {
	for _, tc := range []struct{ name, chat, want string }{
		{"text, and usage with both cache counts",
			`{"id":"chatcmpl-1","model":"claude-x","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],
			  "usage":{"prompt_tokens":100,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":60},"cache_creation_input_tokens":30}}`,
			`{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"hello"}],"stop_reason":"end_turn","stop_sequence":null,
			  "usage":{"input_tokens":10,"cache_creation_input_tokens":30,"cache_read_input_tokens":60,"output_tokens":7}}`},
		{"cache writes by how long they are kept, when the provider said",
			`{"id":"chatcmpl-1","model":"claude-x","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],
			  "usage":{"prompt_tokens":100,"completion_tokens":7,"cache_creation_input_tokens":30,"cache_creation_token_details":{"ephemeral_5m_input_tokens":10,"ephemeral_1h_input_tokens":20}}}`,
			`{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"hello"}],"stop_reason":"end_turn","stop_sequence":null,
			  "usage":{"input_tokens":70,"cache_creation_input_tokens":30,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":10,"ephemeral_1h_input_tokens":20},"output_tokens":7}}`},
		{"tool calls, the model taken from the request when the answer names none",
			`{"choices":[{"message":{"content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"weather","arguments":"{\"city\": \"Oslo\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":2}}`,
			`{"id":"msg_1","type":"message","role":"assistant","model":"asked","content":[{"type":"tool_use","id":"call_1","name":"weather","input":{"city":"Oslo"}}],"stop_reason":"tool_use","stop_sequence":null,
			  "usage":{"input_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2}}`},
		{"arguments cut short are kept, not lost",
			`{"choices":[{"message":{"tool_calls":[{"id":"c","function":{"name":"f","arguments":"{\"a\":"}}]},"finish_reason":"length"}]}`,
			`{"id":"msg_1","type":"message","role":"assistant","model":"asked","content":[{"type":"tool_use","id":"c","name":"f","input":{"arguments":"{\"a\":"}}],"stop_reason":"max_tokens","stop_sequence":null,
			  "usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}`},
		{"a stop sequence an Anthropic key named",
			`{"model":"m","choices":[{"message":{"content":"a"},"finish_reason":"stop","stop_sequence":"END"}]}`,
			`{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"a"}],"stop_reason":"stop_sequence","stop_sequence":"END",
			  "usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}`},
		{"Anthropic's thinking blocks, signed and redacted, open the message ahead of its text and tool calls",
			`{"model":"m","choices":[{"message":{"content":"rain","reasoning_content":"Let me think.","thinking_blocks":[{"type":"thinking","thinking":"Let me think.","signature":"sig-1"},{"type":"redacted_thinking","data":"ZW5j"}],
			  "tool_calls":[{"id":"t","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":40,"completion_tokens_details":{"reasoning_tokens":30}}}`,
			`{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"thinking","thinking":"Let me think.","signature":"sig-1"},{"type":"redacted_thinking","data":"ZW5j"},
			  {"type":"text","text":"rain"},{"type":"tool_use","id":"t","name":"f","input":{}}],"stop_reason":"tool_use","stop_sequence":null,
			  "usage":{"input_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":40}}`},
		{"another provider's reasoning text is a thinking block no one signed",
			`{"model":"deepseek-reasoner","choices":[{"message":{"content":"4","reasoning_content":"2+2 is 4."},"finish_reason":"stop"}]}`,
			`{"id":"msg_1","type":"message","role":"assistant","model":"deepseek-reasoner","content":[{"type":"thinking","thinking":"2+2 is 4.","signature":""},{"type":"text","text":"4"}],
			  "stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromChat([]byte(tc.chat), "msg_1", "asked")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(canonical(t, string(got)), canonical(t, tc.want)) {
				t.Fatalf("\n got %s\nwant %s", got, tc.want)
			}
		})
	}
	if _, err := FromChat([]byte(`{"choices":[]}`), "msg_1", "m"); err == nil {
		t.Fatal("an answer without a choice must not pass as an empty message")
	}
}

func TestStopReasons(t *testing.T) {
	end := "END"
	for _, tc := range []struct {
		finish string
		seq    *string
		want   string
	}{
		{"stop", nil, "end_turn"}, {"stop", &end, "stop_sequence"}, {"length", nil, "max_tokens"},
		{"tool_calls", nil, "tool_use"}, {"function_call", nil, "tool_use"}, {"content_filter", nil, "refusal"}, {"", nil, "end_turn"},
	} {
		if got := StopReason(tc.finish, tc.seq); got != tc.want {
			t.Errorf("StopReason(%q, %v) = %q, want %q", tc.finish, tc.seq, got, tc.want)
		}
	}
}

func TestErrorsInAnthropicsShape(t *testing.T) {
	for _, tc := range []struct {
		status, want int
		typ          string
	}{
		{400, 400, "invalid_request_error"}, {401, 401, "authentication_error"}, {402, 402, "billing_error"},
		{403, 403, "permission_error"}, {404, 404, "not_found_error"}, {405, 405, "invalid_request_error"},
		{413, 413, "request_too_large"}, {422, 422, "invalid_request_error"}, {429, 429, "rate_limit_error"},
		{500, 500, "api_error"}, {502, 502, "api_error"}, {503, 529, "overloaded_error"}, {504, 504, "timeout_error"},
	} {
		if got := Status(tc.status); got != tc.want || ErrorType(got) != tc.typ {
			t.Errorf("%d: answered %d %s, want %d %s", tc.status, got, ErrorType(got), tc.want, tc.typ)
		}
	}
	status, body := FromChatError(400, []byte(`{"error":{"message":"context too long","type":"invalid_request_error","code":"context_length_exceeded"}}`), "req_1")
	if want := `{"type":"error","error":{"type":"invalid_request_error","message":"context too long"},"request_id":"req_1"}`; status != 400 || string(body) != want {
		t.Fatalf("%d %s", status, body)
	}
	status, body = FromChatError(503, []byte(`<html>busy</html>`), "req_2")
	if want := `{"type":"error","error":{"type":"overloaded_error","message":"the provider answered Service Unavailable"},"request_id":"req_2"}`; status != 529 || string(body) != want {
		t.Fatalf("%d %s", status, body)
	}
}

func TestRateLimitHeadersInAnthropicsNames(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 200e6, time.UTC)
	h := http.Header{}
	h.Set("x-ratelimit-limit-requests", "30")
	h.Set("x-ratelimit-remaining-requests", "29")
	h.Set("x-ratelimit-reset-requests", "1.5s")
	h.Set("x-ratelimit-limit-tokens", "600")
	h.Set("x-ratelimit-remaining-tokens", "100")
	h.Set("x-ratelimit-reset-tokens", "1m0s")
	h.Set("Retry-After", "2")
	RateLimitHeaders(h, now)
	want := http.Header{
		"Anthropic-Ratelimit-Requests-Limit":     {"30"},
		"Anthropic-Ratelimit-Requests-Remaining": {"29"},
		"Anthropic-Ratelimit-Requests-Reset":     {"2026-03-01T12:00:02Z"}, // 1.7 s from the minute, rounded up
		"Anthropic-Ratelimit-Tokens-Limit":       {"600"},
		"Anthropic-Ratelimit-Tokens-Remaining":   {"100"},
		"Anthropic-Ratelimit-Tokens-Reset":       {"2026-03-01T12:01:01Z"},
		"Retry-After":                            {"2"},
	}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("\n got %v\nwant %v", h, want)
	}
}
