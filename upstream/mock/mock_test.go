package mock

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/wire"
)

const chatBody = `{"model":"gpt-test","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"write a spring couplet about good fortune and long life please"}]}`

// do sends one request to h and returns the recorded answer.
func do(t *testing.T, h http.Handler, method, path, key, body string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// errorOf decodes an OpenAI error body.
func errorOf(t *testing.T, rec *httptest.ResponseRecorder) wire.OpenAIError {
	t.Helper()
	var e wire.OpenAIError
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
		t.Fatalf("error body %q: %v", rec.Body.String(), err)
	}
	return e
}

func TestAuth(t *testing.T) {
	s := New(Config{Keys: map[string]float64{"sk-a": 0}})
	tests := []struct {
		name, method, path, auth string
		status                   int
		code, message            string
	}{
		{"no key", "POST", "/v1/chat/completions", "", 401, "invalid_api_key", "You didn't provide an API key."},
		{"unknown key", "POST", "/v1/chat/completions", "Bearer sk-b", 401, "invalid_api_key", "Incorrect API key provided."},
		{"not bearer", "POST", "/v1/chat/completions", "sk-a", 401, "invalid_api_key", "Incorrect API key provided."},
		{"good key", "POST", "/v1/chat/completions", "Bearer sk-a", 200, "", ""},
		{"models without key", "GET", "/v1/models", "", 401, "invalid_api_key", "You didn't provide an API key."},
		{"models", "GET", "/v1/models", "Bearer sk-a", 200, "", ""},
		{"stats need no key", "GET", "/_stats", "", 200, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(chatBody))
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			if tt.code == "" {
				return
			}
			e := errorOf(t, rec)
			if e.Error.Code != tt.code || e.Error.Type != "invalid_request_error" || e.Error.Message != tt.message {
				t.Errorf("error %+v, want code %s message %q", e.Error, tt.code, tt.message)
			}
		})
	}
	st := s.Stats()
	if st.Total.Requests != 4 || st.Keys["sk-a"].Requests != 1 || st.Keys["sk-a"].OK != 1 {
		t.Errorf("stats %+v: want 4 chat requests in total, 1 (ok) for sk-a", st)
	}
}

func TestBucket(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := t0
	s := New(Config{Keys: map[string]float64{"sk-a": 2, "sk-b": 2}, Now: func() time.Time { return now }})
	steps := []struct {
		at                               time.Duration
		key                              string
		status                           int
		remaining, reset, retry, retryMs string // "" = header absent
	}{
		{0, "sk-a", 200, "1", "500ms", "", ""},
		{0, "sk-a", 200, "0", "1s", "", ""},
		{0, "sk-a", 429, "0", "1s", "1", "500"},
		{0, "sk-b", 200, "1", "500ms", "", ""}, // keys have their own buckets
		{250 * time.Millisecond, "sk-a", 429, "0", "750ms", "1", "250"},
		{500 * time.Millisecond, "sk-a", 200, "0", "1s", "", ""},
		{3 * time.Second, "sk-a", 200, "1", "500ms", "", ""}, // refilled, never above the burst
		{3 * time.Second, "sk-a", 200, "0", "1s", "", ""},
		{3 * time.Second, "sk-a", 429, "0", "1s", "1", "500"},
	}
	for i, st := range steps {
		now = t0.Add(st.at)
		rec := do(t, s, "POST", "/v1/chat/completions", st.key, chatBody)
		h := rec.Header()
		got := []string{h.Get("x-ratelimit-limit-requests"), h.Get("x-ratelimit-remaining-requests"),
			h.Get("x-ratelimit-reset-requests"), h.Get("Retry-After"), h.Get("retry-after-ms")}
		want := []string{"120", st.remaining, st.reset, st.retry, st.retryMs}
		if rec.Code != st.status || strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("step %d (%s at +%s): status %d headers %q, want %d %q", i, st.key, st.at, rec.Code, got, st.status, want)
		}
		if rec.Code == 429 {
			e := errorOf(t, rec)
			if e.Error.Type != "rate_limit_exceeded" || e.Error.Code != "rate_limit_exceeded" || e.Error.Message == "" {
				t.Fatalf("step %d: error %+v", i, e.Error)
			}
		}
	}
	st := s.Stats()
	if got := st.Keys["sk-a"]; got != (Counts{Requests: 8, OK: 5, Status429: 3}) {
		t.Errorf("sk-a counts %+v", got)
	}
	if got := st.Total; got != (Counts{Requests: 9, OK: 6, Status429: 3}) {
		t.Errorf("total counts %+v", got)
	}
}

// TestBurst: a key at 25/s (1,500 RPM as its header says) with Burst 5
// takes 5 requests at once, not 25, and its headers describe that short
// window: what is left of the 5, and when they are all back.
func TestBurst(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := t0
	s := New(Config{Keys: map[string]float64{"sk-a": 25}, Burst: 5, Now: func() time.Time { return now }})
	for i := range 5 {
		rec := do(t, s, "POST", "/v1/chat/completions", "sk-a", chatBody)
		h := rec.Header()
		if rec.Code != 200 || h.Get("x-ratelimit-limit-requests") != "1500" || h.Get("x-ratelimit-remaining-requests") != strconv.Itoa(4-i) ||
			h.Get("x-ratelimit-reset-requests") != (time.Duration(i+1)*40*time.Millisecond).String() {
			t.Fatalf("request %d: %d %v", i, rec.Code, h)
		}
	}
	rec := do(t, s, "POST", "/v1/chat/completions", "sk-a", chatBody)
	if rec.Code != 429 || rec.Header().Get("retry-after-ms") != "40" || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("sixth request at once: %d %v, want 429 for 40 ms", rec.Code, rec.Header())
	}
	now = t0.Add(40 * time.Millisecond)
	if rec := do(t, s, "POST", "/v1/chat/completions", "sk-a", chatBody); rec.Code != 200 {
		t.Fatalf("after one refill: %d", rec.Code)
	}
}

// TestOmitLimitHeaders: a provider that does not say its limits still says
// when to retry.
func TestOmitLimitHeaders(t *testing.T) {
	now := time.Unix(1000, 0)
	s := New(Config{Keys: map[string]float64{"sk-a": 1}, OmitLimitHeaders: true, Now: func() time.Time { return now }})
	rec := do(t, s, "POST", "/v1/chat/completions", "sk-a", chatBody)
	if rec.Code != 200 || rec.Header().Get("x-ratelimit-remaining-requests") != "" {
		t.Fatalf("first: %d %v", rec.Code, rec.Header())
	}
	rec = do(t, s, "POST", "/v1/chat/completions", "sk-a", chatBody)
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "1" || rec.Header().Get("x-ratelimit-limit-requests") != "" {
		t.Fatalf("second: %d %v", rec.Code, rec.Header())
	}
}

func TestBucketFractionalRate(t *testing.T) {
	now := time.Unix(1000, 0)
	s := New(Config{Keys: map[string]float64{"sk-a": 0.5}, Now: func() time.Time { return now }})
	if rec := do(t, s, "POST", "/v1/chat/completions", "sk-a", chatBody); rec.Code != 200 {
		t.Fatalf("first request: %d", rec.Code)
	}
	rec := do(t, s, "POST", "/v1/chat/completions", "sk-a", chatBody)
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "2" || rec.Header().Get("x-ratelimit-limit-requests") != "30" {
		t.Fatalf("second request: %d %v", rec.Code, rec.Header())
	}
}

func TestLatency(t *testing.T) {
	s := New(Config{Keys: map[string]float64{"sk-a": 0}, Latency: 30 * time.Millisecond})
	start := time.Now()
	if rec := do(t, s, "POST", "/v1/chat/completions", "sk-a", chatBody); rec.Code != 200 {
		t.Fatalf("status %d", rec.Code)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("answered after %s, want >= 30ms", d)
	}

	// Jitter stays within Latency ± Jitter and repeats with the seed.
	cfg := Config{Latency: 20 * time.Millisecond, Jitter: 10 * time.Millisecond, Seed: 7}
	a, b := New(cfg), New(cfg)
	lo, hi := time.Hour, time.Duration(0)
	for range 1000 {
		d := a.delay()
		if d != b.delay() {
			t.Fatal("same seed, different jitter")
		}
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo < 10*time.Millisecond || hi > 30*time.Millisecond || hi-lo < 15*time.Millisecond {
		t.Errorf("delays in [%s, %s], want spread over [10ms, 30ms]", lo, hi)
	}
}

func TestFailureRate(t *testing.T) {
	count := func() int64 {
		s := New(Config{Keys: map[string]float64{"sk-a": 0}, FailureRate: 0.2, Seed: 42})
		for range 1000 {
			rec := do(t, s, "POST", "/v1/chat/completions", "sk-a", chatBody)
			if rec.Code == 500 {
				if e := errorOf(t, rec); e.Error.Type != "server_error" {
					t.Fatalf("500 body %s", rec.Body)
				}
			} else if rec.Code != 200 {
				t.Fatalf("status %d", rec.Code)
			}
		}
		st := s.Stats().Keys["sk-a"]
		if st.OK+st.Status5xx != 1000 {
			t.Fatalf("counts %+v", st)
		}
		return st.Status5xx
	}
	n := count()
	if n < 160 || n > 240 {
		t.Errorf("%d of 1000 failed, want about 200", n)
	}
	if again := count(); again != n {
		t.Errorf("same seed gave %d then %d failures", n, again)
	}
}

func TestCompletion(t *testing.T) {
	s := New(Config{Keys: map[string]float64{"sk-a": 0}})
	// Prompts billed as OpenAI's cookbook counts: 3 to prime the reply, and
	// 3 a message plus its role and text; an image by address is taken as
	// 1024 × 1024 (85 + 4 tiles × 170).
	tests := []struct {
		name, body, content string
		prompt              int
	}{
		{"string content", chatBody, "mock reply to: write a spring couplet about good fortun",
			3 + 3 + Tokens("system") + Tokens("be brief") + 3 + Tokens("user") + Tokens("write a spring couplet about good fortune and long life please")},
		{"parts content", `{"model":"gpt-test","messages":[{"role":"user","content":[{"type":"text","text":"hello there"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"friend"}]}]}`,
			"mock reply to: hello there friend", 3 + 3 + Tokens("user") + Tokens("hello there") + 765 + Tokens("friend")},
		{"no user message", `{"model":"gpt-test","messages":[]}`, "mock reply to: ", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := do(t, s, "POST", "/v1/chat/completions", "sk-a", tt.body)
			var got struct {
				Object, Model string
				Choices       []struct {
					Message      struct{ Role, Content string }
					FinishReason string `json:"finish_reason"`
				}
				Usage usage
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 {
				t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
			}
			if got.Object != "chat.completion" || got.Model != "gpt-test" || len(got.Choices) != 1 ||
				got.Choices[0].Message.Role != "assistant" || got.Choices[0].Message.Content != tt.content ||
				got.Choices[0].FinishReason != "stop" {
				t.Fatalf("answer %+v", got)
			}
			completion := Tokens(tt.content)
			if got.Usage != (usage{tt.prompt, completion, tt.prompt + completion}) {
				t.Errorf("usage %+v, want prompt %d completion %d", got.Usage, tt.prompt, completion)
			}
		})
	}
	if rec := do(t, s, "POST", "/v1/chat/completions", "sk-a", `{"model":`); rec.Code != 400 {
		t.Errorf("bad JSON: %d", rec.Code)
	}
	if rec := do(t, s, "GET", "/v1/chat/completions", "sk-a", ""); rec.Code != 405 {
		t.Errorf("GET chat: %d", rec.Code)
	}
}

// TestChatCallsATool: offered tools, the mock calls the chosen one (the
// named tool_choice, else the first) with {"text": the start of the last
// user message}, whole and streamed, billed as the call's name and
// arguments; "none", or a last message that is a tool's result, gets text.
func TestChatCallsATool(t *testing.T) {
	s := New(Config{Keys: map[string]float64{"sk-a": 0}})
	const ask = "write a spring couplet about good fortune and long life please"
	tools := `"tools":[{"type":"function","function":{"name":"lookup"}},{"type":"function","function":{"name":"other"}}]`
	user := `{"role":"user","content":"` + ask + `"}`
	args := `{"text":"` + ask[:40] + `"}`
	type call struct {
		ID       string
		Function struct{ Name, Arguments string }
	}
	answer := func(extra, msgs string) (string, []call, string, usage) {
		t.Helper()
		rec := do(t, s, "POST", "/v1/chat/completions", "sk-a", `{"model":"m","messages":[`+msgs+`],`+tools+extra+`}`)
		var got struct {
			Choices []struct {
				Message struct {
					Content   *string
					ToolCalls []call `json:"tool_calls"`
				}
				FinishReason string `json:"finish_reason"`
			}
			Usage usage
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 || len(got.Choices) != 1 {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		c := got.Choices[0]
		content := ""
		if c.Message.Content != nil {
			content = *c.Message.Content
		}
		return content, c.Message.ToolCalls, c.FinishReason, got.Usage
	}
	for _, tc := range []struct{ name, extra, tool string }{
		{"the first", "", "lookup"},
		{"the chosen", `,"tool_choice":{"type":"function","function":{"name":"other"}}`, "other"},
	} {
		content, calls, finish, u := answer(tc.extra, user)
		if content != "" || finish != "tool_calls" || len(calls) != 1 || calls[0].Function.Name != tc.tool ||
			calls[0].Function.Arguments != args || calls[0].ID == "" || u.CompletionTokens != Tokens(tc.tool+args) {
			t.Errorf("%s: %q %+v %s %+v", tc.name, content, calls, finish, u)
		}
	}
	if content, calls, finish, _ := answer(`,"tool_choice":"none"`, user); len(calls) != 0 || finish != "stop" || content != "mock reply to: "+ask[:40] {
		t.Errorf("tool_choice none: %q %+v %s", content, calls, finish)
	}
	result := user + `,{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"lookup","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"c1","content":"found"}`
	if content, calls, finish, _ := answer("", result); len(calls) != 0 || finish != "stop" || content != "mock reply to: "+ask[:40] {
		t.Errorf("after the result: %q %+v %s", content, calls, finish)
	}

	rec := do(t, s, "POST", "/v1/chat/completions", "sk-a", `{"model":"m","stream":true,"messages":[`+user+`],`+tools+`}`)
	var streamed []string
	for _, data := range events(t, rec.Body) {
		if data == "[DONE]" {
			continue
		}
		var c chunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		for _, ch := range c.Choices {
			for _, tc := range ch.Delta.ToolCalls {
				streamed = append(streamed, tc.Function.Name+tc.Function.Arguments)
			}
			if ch.FinishReason != nil {
				streamed = append(streamed, *ch.FinishReason)
			}
		}
	}
	if strings.Join(streamed, " ") != "lookup"+args+" tool_calls" {
		t.Errorf("streamed %v", streamed)
	}
}

// events reads an SSE body into its data payloads, checking the framing.
func events(t *testing.T, body io.Reader) []string {
	t.Helper()
	var data []string
	sc := bufio.NewScanner(body)
	blank := true
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			blank = true
			continue
		}
		payload, ok := strings.CutPrefix(line, "data: ")
		if !ok || !blank {
			t.Fatalf("line %q: want one \"data: \" line per event", line)
		}
		blank = false
		data = append(data, payload)
	}
	return data
}

func TestStream(t *testing.T) {
	srv := httptest.NewServer(New(Config{Keys: map[string]float64{"sk-a": 0}, StreamChunks: 3, ChunkDelay: time.Millisecond}))
	defer srv.Close()
	for _, includeUsage := range []bool{true, false} {
		body := strings.Replace(chatBody, `{"model"`, `{"stream":true,"stream_options":{"include_usage":`+map[bool]string{true: "true", false: "false"}[includeUsage]+`},"model"`, 1)
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-a")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
			t.Fatalf("status %d content type %q", resp.StatusCode, ct)
		}
		data := events(t, resp.Body)
		resp.Body.Close()
		if len(data) == 0 || data[len(data)-1] != "[DONE]" {
			t.Fatalf("events %q: want [DONE] last", data)
		}
		var chunks []chunk
		for _, d := range data[:len(data)-1] {
			var c chunk
			if err := json.Unmarshal([]byte(d), &c); err != nil {
				t.Fatalf("event %q: %v", d, err)
			}
			if c.Object != "chat.completion.chunk" || c.Model != "gpt-test" || (len(chunks) > 0 && c.ID != chunks[0].ID) {
				t.Fatalf("chunk %+v", c)
			}
			chunks = append(chunks, c)
		}
		want := 1 + 3 + 1 // role, content deltas, finish
		if includeUsage {
			want++
		}
		if len(chunks) != want {
			t.Fatalf("%d chunks, want %d: %q", len(chunks), want, data)
		}
		if chunks[0].Choices[0].Delta.Role != "assistant" {
			t.Errorf("first chunk %+v: want the role", chunks[0])
		}
		var content strings.Builder
		for _, c := range chunks[1:4] {
			if c.Choices[0].Delta.Content == nil || c.Choices[0].FinishReason != nil {
				t.Fatalf("content chunk %+v", c)
			}
			content.WriteString(*c.Choices[0].Delta.Content)
		}
		if content.String() != "mock reply to: write a spring couplet about good fortun" {
			t.Errorf("streamed content %q", content.String())
		}
		if fr := chunks[4].Choices[0].FinishReason; fr == nil || *fr != "stop" {
			t.Errorf("finish chunk %+v", chunks[4])
		}
		if includeUsage {
			u := chunks[5]
			prompt := 3 + 3 + Tokens("system") + Tokens("be brief") + 3 + Tokens("user") + Tokens("write a spring couplet about good fortune and long life please")
			completion := Tokens(content.String())
			if len(u.Choices) != 0 || u.Usage == nil || *u.Usage != (usage{prompt, completion, prompt + completion}) {
				t.Errorf("usage chunk %q", data[5])
			}
		}
	}
}

func TestPathPrefix(t *testing.T) {
	s := New(Config{Keys: map[string]float64{"sk-a": 0}})
	tests := []struct {
		method, path string
		status       int
	}{
		{"POST", "/v1/chat/completions", 200},
		{"POST", "/chat/completions", 200},
		{"POST", "/x/openai/v1/chat/completions", 200},
		{"POST", "/v1/chat/completions/", 200},
		{"GET", "/v1/models", 200},
		{"GET", "/proxy/v1/models/", 200},
		{"GET", "/mock/_stats", 200},
		{"POST", "/v1/embeddings", 400}, // a route now: a chat body is no embeddings request
		{"POST", "/v1/embeddingsx", 404},
		{"POST", "/v1/completions", 404},
		{"POST", "/v1/chat/completionsx", 404},
	}
	for _, tt := range tests {
		if rec := do(t, s, tt.method, tt.path, "sk-a", chatBody); rec.Code != tt.status {
			t.Errorf("%s %s: %d, want %d: %s", tt.method, tt.path, rec.Code, tt.status, rec.Body)
		}
	}
}

// TestAzureDeployments: under an Azure OpenAI deployment's path the mock
// serves chat completions, whole and streamed, with the key in api-key
// and the api-version required, as Azure does; Bearer is not its key.
func TestAzureDeployments(t *testing.T) {
	s := New(Config{Keys: map[string]float64{"sk-a": 0}})
	const path = "/openai/deployments/gpt-4o-mini/chat/completions"
	tests := []struct {
		name, path string
		hdr        []string
		status     int
		message    string
	}{
		{"api-key", path + "?api-version=2024-10-21", []string{"api-key", "sk-a"}, 200, ""},
		{"no api-version", path, []string{"api-key", "sk-a"}, 404, "Resource not found"},
		{"unknown key", path + "?api-version=2024-10-21", []string{"api-key", "sk-b"}, 401, "Access denied due to invalid subscription key"},
		{"bearer", path + "?api-version=2024-10-21", []string{"Authorization", "Bearer sk-a"}, 401, "Access denied due to invalid subscription key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := do(t, s, "POST", tt.path, "", chatBody, tt.hdr...)
			if rec.Code != tt.status {
				t.Fatalf("%d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			if tt.message != "" {
				if e := errorOf(t, rec); !strings.Contains(e.Error.Message, tt.message) {
					t.Fatalf("error %+v, want %q", e.Error, tt.message)
				}
				return
			}
			var c struct {
				Choices []struct {
					Message struct{ Content string }
				}
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &c); err != nil || len(c.Choices) != 1 ||
				c.Choices[0].Message.Content != "mock reply to: "+"write a spring couplet about good fortune and long life please"[:40] {
				t.Fatalf("answer %s", rec.Body)
			}
		})
	}
	stream := strings.Replace(chatBody, "{", `{"stream":true,`, 1)
	rec := do(t, s, "POST", path+"?api-version=2024-10-21", "", stream, "api-key", "sk-a")
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") ||
		!strings.HasSuffix(rec.Body.String(), "data: [DONE]\n\n") {
		t.Fatalf("stream %d %v: %s", rec.Code, rec.Header(), rec.Body)
	}
}

func TestHooks(t *testing.T) {
	now := time.Unix(1000, 0)
	s := New(Config{Keys: map[string]float64{"sk-a": 1}, Now: func() time.Time { return now }})
	tests := []struct {
		name       string
		hdr        []string
		status     int
		typ, code  string
		retryAfter string
	}{
		{"503", []string{"X-Mock-Status", "503"}, 503, "server_error", "service_unavailable", ""},
		{"429 with Retry-After", []string{"X-Mock-Status", "429", "X-Mock-Retry-After", "3600"}, 429, "rate_limit_exceeded", "rate_limit_exceeded", "3600"},
		{"429 without Retry-After", []string{"X-Mock-Status", "429"}, 429, "rate_limit_exceeded", "rate_limit_exceeded", ""},
		{"401", []string{"X-Mock-Status", "401"}, 401, "invalid_request_error", "invalid_api_key", ""},
		{"bad status", []string{"X-Mock-Status", "200"}, 400, "invalid_request_error", "bad_request", ""},
		{"bad stall", []string{"X-Mock-Stall", "forever"}, 400, "invalid_request_error", "bad_request", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := do(t, s, "POST", "/v1/chat/completions", "sk-a", chatBody, tt.hdr...)
			e := errorOf(t, rec)
			if rec.Code != tt.status || e.Error.Type != tt.typ || e.Error.Code != tt.code || rec.Header().Get("Retry-After") != tt.retryAfter {
				t.Errorf("%d %+v Retry-After %q", rec.Code, e.Error, rec.Header().Get("Retry-After"))
			}
		})
	}
	// Hooks take nothing from the bucket: its one request is still there.
	if rec := do(t, s, "POST", "/v1/chat/completions", "sk-a", chatBody); rec.Code != 200 {
		t.Errorf("after hooks: %d", rec.Code)
	}
	if got := s.Stats().Keys["sk-a"]; got != (Counts{Requests: 7, OK: 1, Status429: 2, Status5xx: 1}) {
		t.Errorf("counts %+v", got)
	}
}

func TestStall(t *testing.T) {
	s := New(Config{Keys: map[string]float64{"sk-a": 0}})
	returned := make(chan struct{}, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.ServeHTTP(w, r)
		returned <- struct{}{}
	}))
	defer srv.Close()
	for _, body := range []string{strings.Replace(chatBody, `{"model"`, `{"stream":true,"model"`, 1), chatBody} {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-a")
		req.Header.Set("X-Mock-Stall", "after-first-chunk")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if strings.Contains(body, "stream") {
			line, err := bufio.NewReader(resp.Body).ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "data: {") || !strings.Contains(line, `"role":"assistant"`) {
				t.Fatalf("first line %q, %v", line, err)
			}
		}
		select {
		case <-returned:
			t.Fatal("handler returned while the client was still there")
		case <-time.After(50 * time.Millisecond):
		}
		cancel()
		resp.Body.Close()
		select {
		case <-returned:
		case <-time.After(5 * time.Second):
			t.Fatal("handler still blocked after the client went away")
		}
	}
}

func TestStatsEndpoint(t *testing.T) {
	s := New(Config{Keys: map[string]float64{"sk-a": 1, "sk-b": 0}, Now: func() time.Time { return time.Unix(0, 0) }})
	do(t, s, "POST", "/v1/chat/completions", "sk-a", chatBody)
	do(t, s, "POST", "/v1/chat/completions", "sk-a", chatBody)
	do(t, s, "POST", "/v1/chat/completions", "sk-b", chatBody, "X-Mock-Status", "502")
	rec := do(t, s, "GET", "/_stats", "", "")
	var got Stats
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := Stats{Total: Counts{3, 1, 1, 1}, Keys: map[string]Counts{"sk-a": {2, 1, 1, 0}, "sk-b": {1, 0, 0, 1}}}
	if got.Total != want.Total || got.Keys["sk-a"] != want.Keys["sk-a"] || got.Keys["sk-b"] != want.Keys["sk-b"] {
		t.Errorf("stats %+v, want %+v", got, want)
	}
}

// TestBillsLikeAProvider: an answer runs as long as it is asked to, stops
// at the request's bound, and the whole body's tools count; words mode
// counts words.
func TestBillsLikeAProvider(t *testing.T) {
	s := New(Config{Keys: map[string]float64{"sk-a": 0}})
	answer := func(body string, hdr map[string]string) (string, usage, string) {
		t.Helper()
		rec := doWith(t, s, "POST", "/v1/chat/completions", "sk-a", body, hdr)
		var got struct {
			Choices []struct {
				Message      struct{ Content string }
				FinishReason string `json:"finish_reason"`
			}
			Usage usage
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		return got.Choices[0].Message.Content, got.Usage, got.Choices[0].FinishReason
	}
	const msgs = `"messages":[{"role":"user","content":"go on"}]`
	long := map[string]string{"X-Mock-Answer-Tokens": "20000"}
	if content, u, finish := answer(`{"model":"m",`+msgs+`}`, long); u.CompletionTokens != 20000 || finish != "stop" || Tokens(content) != 20000 {
		t.Errorf("unbounded: %d tokens (%d counted), finish %q; want 20000, stop", u.CompletionTokens, Tokens(content), finish)
	}
	for _, field := range []string{"max_tokens", "max_completion_tokens"} {
		if content, u, finish := answer(`{"model":"m","`+field+`":100,`+msgs+`}`, long); u.CompletionTokens != 100 || finish != "length" || Tokens(content) > 100 {
			t.Errorf("%s 100: %d tokens, finish %q", field, u.CompletionTokens, finish)
		}
	}
	_, plain, _ := answer(`{"model":"m",`+msgs+`}`, nil)
	tools := `"tools":[{"type":"function","function":{"name":"get_weather","description":"The weather in a city.","parameters":{"type":"object","properties":{"city":{"type":"string","description":"A city"},"unit":{"type":"string","enum":["c","f"]}}}}}]`
	_, withTools, _ := answer(`{"model":"m",`+msgs+`,`+tools+`}`, nil)
	const funcInit, propInit, propKey, enumInit, enumItem, funcEnd = 7, 3, 3, -3, 3, 12 // the cookbook's, for gpt-4o
	want := funcInit + Tokens("get_weather:The weather in a city") + propInit +
		propKey + Tokens("city:string:A city") +
		propKey + enumInit + enumItem + Tokens("c") + enumItem + Tokens("f") + Tokens("unit:string:") + funcEnd
	if got := withTools.PromptTokens - plain.PromptTokens; got != want {
		t.Errorf("tools billed %d prompt tokens, want the cookbook's %d", got, want)
	}
	words := New(Config{Keys: map[string]float64{"sk-a": 0}, Billing: BillWords})
	rec := doWith(t, words, "POST", "/v1/chat/completions", "sk-a", `{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"one two three"}]}`, map[string]string{"X-Mock-Answer-Tokens": "50"})
	if !strings.Contains(rec.Body.String(), `"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}`) || !strings.Contains(rec.Body.String(), `"content":"mock reply"`) {
		t.Errorf("words: %s", rec.Body)
	}
	if rec := doWith(t, s, "POST", "/v1/chat/completions", "sk-a", `{"model":"m",`+msgs+`}`, map[string]string{"X-Mock-Answer-Tokens": "x"}); rec.Code != 400 ||
		!strings.Contains(rec.Body.String(), "X-Mock-Answer-Tokens must be a whole number") {
		t.Errorf("bad hook: %d %s", rec.Code, rec.Body)
	}
}

// doWith is do with headers from a map.
func doWith(t *testing.T, h http.Handler, method, path, key, body string, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	var kv []string
	for k, v := range hdr {
		kv = append(kv, k, v)
	}
	return do(t, h, method, path, key, body, kv...)
}

// Embeddings answer in OpenAI's shape: a unit vector per input, of the
// size asked for, the same in base64 as in floats, and usage counting
// texts with the tokenizer and token arrays by their length.
func TestEmbeddings(t *testing.T) {
	s := New(Config{Keys: map[string]float64{"sk-a": 0}})
	type answer struct {
		Object string `json:"object"`
		Model  string `json:"model"`
		Data   []struct {
			Object    string          `json:"object"`
			Index     int             `json:"index"`
			Embedding json.RawMessage `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			TotalTokens  int `json:"total_tokens"`
		} `json:"usage"`
	}
	read := func(body string) answer {
		t.Helper()
		rec := do(t, s, "POST", "/v1/embeddings", "sk-a", body)
		var a answer
		if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil || rec.Code != 200 {
			t.Fatalf("%s: %d %s", body, rec.Code, rec.Body)
		}
		return a
	}
	floats := read(`{"model":"text-embedding-3-small","input":["the river","the sea"],"dimensions":5}`)
	want := Tokens("the river") + Tokens("the sea")
	if floats.Object != "list" || floats.Model != "text-embedding-3-small" || len(floats.Data) != 2 || floats.Data[1].Index != 1 ||
		floats.Usage.PromptTokens != want || floats.Usage.TotalTokens != want {
		t.Fatalf("answer %+v, want %d tokens", floats, want)
	}
	var v []float32
	if err := json.Unmarshal(floats.Data[0].Embedding, &v); err != nil || len(v) != 5 {
		t.Fatalf("vector %s", floats.Data[0].Embedding)
	}
	var norm float64
	for _, x := range v {
		norm += float64(x) * float64(x)
	}
	if math.Abs(norm-1) > 1e-5 {
		t.Fatalf("length² %v", norm)
	}
	b64 := read(`{"model":"text-embedding-3-small","input":["the river","the sea"],"dimensions":5,"encoding_format":"base64"}`)
	var s64 string
	_ = json.Unmarshal(b64.Data[0].Embedding, &s64)
	raw, _ := base64.StdEncoding.DecodeString(s64)
	for i := range v {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])); got != v[i] || len(raw) != 20 {
			t.Fatalf("base64 %q is not the floats %v", s64, v)
		}
	}
	if tokens := read(`{"model":"m","input":[[1,2,3],[4]]}`); tokens.Usage.PromptTokens != 4 || len(tokens.Data) != 2 {
		t.Fatalf("token arrays: %+v", tokens)
	}
	if rec := do(t, s, "POST", "/v1/embeddings", "sk-a", `{"model":"m","input":"a","encoding_format":"hex"}`); rec.Code != 400 ||
		errorOf(t, rec).Error.Message != "'hex' is not one of ['float', 'base64'] - 'encoding_format'" {
		t.Fatalf("hex: %d %s", rec.Code, rec.Body)
	}
	if st := s.Stats().Total; st.Requests != 4 || st.OK != 3 {
		t.Fatalf("stats %+v", st)
	}
}
