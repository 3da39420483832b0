package upstream

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// Gemini's answers read as OpenAI's chat completions: the text joined,
// function calls as tool calls (ids "call_…", arguments a JSON string),
// the finish reason in OpenAI's words, the usage with thinking billed as
// output and cached and reasoning tokens detailed; a blocked prompt is an
// empty answer ended by content_filter.
func TestGeminiTranslatesAnswers(t *testing.T) {
	req := Request{Model: "gemini-2.5-flash", ID: "req_01ABC"}
	cases := []struct{ name, in, want string }{
		{"text and usage",
			`{"candidates":[{"content":{"role":"model","parts":[{"text":"Hello "},{"text":"world"}]},"finishReason":"STOP","index":0}],
			"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":5,"thoughtsTokenCount":7,"cachedContentTokenCount":4,"toolUsePromptTokenCount":2,"totalTokenCount":24},
			"modelVersion":"gemini-2.5-flash-001","responseId":"r1"}`,
			`{"id":"chatcmpl-01ABC","object":"chat.completion","created":1700000000,"model":"gemini-2.5-flash",
			"choices":[{"index":0,"message":{"role":"assistant","content":"Hello world"},"finish_reason":"stop"}],
			"usage":{"prompt_tokens":12,"completion_tokens":12,"total_tokens":24,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":7}}}`},
		{"function calls",
			`{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{"city": "Paris"}},"thoughtSignature":"+//+"},
			{"functionCall":{"name":"get_time"}}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":2}}`,
			`{"id":"chatcmpl-01ABC","object":"chat.completion","created":1700000000,"model":"gemini-2.5-flash",
			"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[
			{"id":"call_01ABC_0__ts_-__-","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
			{"id":"call_01ABC_1","type":"function","function":{"name":"get_time","arguments":"{}"}}]},"finish_reason":"tool_calls"}],
			"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`},
		{"blocked prompt",
			`{"promptFeedback":{"blockReason":"SAFETY","safetyRatings":[]},"usageMetadata":{"promptTokenCount":8,"totalTokenCount":8}}`,
			`{"id":"chatcmpl-01ABC","object":"chat.completion","created":1700000000,"model":"gemini-2.5-flash",
			"choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"content_filter"}],
			"usage":{"prompt_tokens":8,"completion_tokens":0,"total_tokens":8,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`},
		{"no usage, a thought summary left out",
			`{"candidates":[{"content":{"parts":[{"text":"let me think","thought":true},{"text":"42"}]},"finishReason":"MAX_TOKENS"}]}`,
			`{"id":"chatcmpl-01ABC","object":"chat.completion","created":1700000000,"model":"gemini-2.5-flash",
			"choices":[{"index":0,"message":{"role":"assistant","content":"42"},"finish_reason":"length"}]}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := geminiAnswer(req, []byte(tc.in), geminiIDBase(req), 1700000000)
			if err != nil {
				t.Fatal(err)
			}
			if canonical(t, string(got)) != canonical(t, tc.want) {
				t.Fatalf("got  %s\nwant %s", canonical(t, string(got)), canonical(t, tc.want))
			}
		})
	}
	t.Run("the pipeline reads it", func(t *testing.T) {
		got, _ := geminiAnswer(req, []byte(cases[0].in), "b", 1)
		c, err := ReadCompletion(got)
		if err != nil || c.Reply != "Hello world" || !c.Reported || c.Usage.PromptTokens != 12 || c.Usage.CompletionTokens != 12 ||
			c.Usage.CachedTokens != 4 || c.Usage.ReasoningTokens != 7 {
			t.Fatalf("read %+v, %v", c, err)
		}
	})
	t.Run("not JSON", func(t *testing.T) {
		if _, err := geminiAnswer(req, []byte(`<html>`), "b", 1); err == nil {
			t.Fatal("an unreadable answer was translated")
		}
	})
}

// Every finishReason has OpenAI's word: STOP stop (tool_calls after
// function calls), MAX_TOKENS length, every filter content_filter, the
// rest stop.
func TestGeminiFinishReasons(t *testing.T) {
	for gemini, want := range map[string]string{
		"STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter", "RECITATION": "content_filter",
		"BLOCKLIST": "content_filter", "PROHIBITED_CONTENT": "content_filter", "SPII": "content_filter",
		"IMAGE_SAFETY": "content_filter", "OTHER": "stop", "MALFORMED_FUNCTION_CALL": "stop", "": "",
	} {
		if got := finishReason(gemini, false); got != want {
			t.Errorf("%q: %q, want %q", gemini, got, want)
		}
	}
	if got := finishReason("STOP", true); got != "tool_calls" {
		t.Errorf("STOP after function calls: %q", got)
	}
	if got := finishReason("SAFETY", true); got != "content_filter" {
		t.Errorf("SAFETY after function calls: %q", got)
	}
}

// Gemini's errors read as OpenAI's, with Google's message: type and code
// from Google's status, param null.
func TestGeminiTranslatesFailures(t *testing.T) {
	cases := []struct {
		status          int
		in              string
		message, typ, c string
	}{
		{400, `{"error":{"code":400,"message":"Invalid JSON payload received.","status":"INVALID_ARGUMENT"}}`,
			"Invalid JSON payload received.", "invalid_request_error", "invalid_argument"},
		{404, `{"error":{"code":404,"message":"models/gemini-9 is not found for API version v1beta","status":"NOT_FOUND"}}`,
			"models/gemini-9 is not found for API version v1beta", "invalid_request_error", "model_not_found"},
		{403, `[{"error":{"code":403,"message":"Your API key was reported as leaked.","status":"PERMISSION_DENIED"}}]`,
			"Your API key was reported as leaked.", "permission_error", "permission_denied"},
		{401, `{"error":{"code":401,"message":"Request had invalid authentication credentials.","status":"UNAUTHENTICATED"}}`,
			"Request had invalid authentication credentials.", "authentication_error", "invalid_api_key"},
		{429, `{"error":{"code":429,"message":"You exceeded your current quota.","status":"RESOURCE_EXHAUSTED"}}`,
			"You exceeded your current quota.", "rate_limit_exceeded", "rate_limit_exceeded"},
		{503, `{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}`,
			"The model is overloaded.", "server_error", "unavailable"},
		{500, `<html>oops</html>`, "Gemini answered 500 Internal Server Error", "server_error", "internal_server_error"},
	}
	for _, tc := range cases {
		got := geminiFailure(tc.status, []byte(tc.in))
		var e struct {
			Error struct {
				Message string           `json:"message"`
				Type    string           `json:"type"`
				Param   *json.RawMessage `json:"param"`
				Code    string           `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(got, &e); err != nil || e.Error.Message != tc.message || e.Error.Type != tc.typ || e.Error.Code != tc.c ||
			!strings.Contains(string(got), `"param":null`) {
			t.Errorf("%d %s: %s", tc.status, tc.in, got)
		}
	}
}

// readFailure gives the pool what Gemini puts in error bodies: a 429's
// RetryInfo as retry-after-ms (unless a header already says), an unknown
// key's 400 API_KEY_INVALID as a 401.
func TestGeminiReadsFailureBodies(t *testing.T) {
	retry := func(delay string) string {
		return `{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[]},
		{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"` + delay + `"}]}}`
	}
	cases := []struct {
		name        string
		status      int
		header      http.Header
		body        string
		wantStatus  int
		wantRetryMs string
	}{
		{"whole seconds", 429, http.Header{}, retry("13s"), 429, "13000"},
		{"fractional seconds", 429, http.Header{}, retry("0.250s"), 429, "250"},
		{"a header wins", 429, http.Header{"Retry-After": {"2"}}, retry("13s"), 429, ""},
		{"no RetryInfo", 429, http.Header{}, `{"error":{"code":429,"status":"RESOURCE_EXHAUSTED"}}`, 429, ""},
		{"not JSON", 429, http.Header{}, `rate limited`, 429, ""},
		{"unknown key", 400, http.Header{}, `{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT",
			"details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com"}]}}`, 401, ""},
		{"a bad request", 400, http.Header{}, `{"error":{"code":400,"message":"Invalid value","status":"INVALID_ARGUMENT"}}`, 400, ""},
	}
	for _, tc := range cases {
		got := geminiFormat{}.readFailure(tc.status, tc.header, []byte(tc.body))
		if got != tc.wantStatus || tc.header.Get("retry-after-ms") != tc.wantRetryMs {
			t.Errorf("%s: status %d, retry-after-ms %q; want %d, %q", tc.name, got, tc.header.Get("retry-after-ms"), tc.wantStatus, tc.wantRetryMs)
		}
	}
}
