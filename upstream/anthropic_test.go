package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/upstream/mock"
)

func jsonOf(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, s)
	}
	return v
}

func TestChatIsTranslatedToAMessagesRequest(t *testing.T) {
	for _, tc := range []struct{ name, chat, want string }{
		{"system out of the turns, the default bound, the user into metadata",
			`{"model":"claude-x","messages":[{"role":"system","content":"be brief"},{"role":"developer","content":[{"type":"text","text":"and kind","cache_control":{"type":"ephemeral"}}]},{"role":"user","content":"hi"}],"user":"u-1","temperature":0.2,"top_k":5,"stop":"END"}`,
			`{"model":"claude-x","max_tokens":4096,"system":[{"type":"text","text":"be brief"},{"type":"text","text":"and kind","cache_control":{"type":"ephemeral"}}],
			  "messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"temperature":0.2,"top_k":5,"stop_sequences":["END"],"metadata":{"user_id":"u-1"}}`},
		{"consecutive turns of a role merged, tool messages as the user's tool_result blocks",
			`{"model":"m","max_completion_tokens":100,"messages":[{"role":"user","content":"a"},{"role":"user","content":[{"type":"text","text":"b"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBOR"}},{"type":"image_url","image_url":{"url":"https://x.example/a.jpg"}}]},
			  {"role":"assistant","content":"","tool_calls":[{"id":"t1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Oslo\"}"}},{"id":"t2","type":"function","function":{"name":"time","arguments":""}}]},
			  {"role":"tool","tool_call_id":"t1","content":"rain"},{"role":"tool","tool_call_id":"t2","is_error":true,"content":[{"type":"text","text":"no clock","cache_control":{"type":"ephemeral"}}]},{"role":"user","content":"so?"}]}`,
			`{"model":"m","max_tokens":100,"messages":[
			  {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBOR"}},{"type":"image","source":{"type":"url","url":"https://x.example/a.jpg"}}]},
			  {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"weather","input":{"city":"Oslo"}},{"type":"tool_use","id":"t2","name":"time","input":{}}]},
			  {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"rain"},{"type":"tool_result","tool_use_id":"t2","is_error":true,"content":[{"type":"text","text":"no clock"}],"cache_control":{"type":"ephemeral"}},{"type":"text","text":"so?"}]}]}`},
		{"tools and a named tool choice without parallel calls",
			`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"weather","description":"the weather","parameters":{"type":"object"}},"cache_control":{"type":"ephemeral"}},{"type":"function","function":{"name":"noargs"}}],
			  "tool_choice":{"type":"function","function":{"name":"weather"}},"parallel_tool_calls":false,"stream":true,"stream_options":{"include_usage":true}}`,
			`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"stream":true,
			  "tools":[{"name":"weather","description":"the weather","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}},{"name":"noargs","input_schema":{"type":"object"}}],
			  "tool_choice":{"type":"tool","name":"weather","disable_parallel_tool_use":true}}`},
		{"required is any",
			`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"x"}],"tool_choice":"required","n":1,"frequency_penalty":0,"response_format":{"type":"text"}}`,
			`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"tool_choice":{"type":"any"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := anthropicRequest([]byte(tc.chat))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(jsonOf(t, string(got)), jsonOf(t, tc.want)) {
				t.Fatalf("\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestWhatAnthropicCannotDoIsRefusedByName(t *testing.T) {
	for _, tc := range []struct{ body, param string }{
		{`{"model":"m","n":2,"messages":[{"role":"user","content":"x"}]}`, "n"},
		{`{"model":"m","response_format":{"type":"json_object"},"messages":[{"role":"user","content":"x"}]}`, "response_format"},
		{`{"model":"m","logprobs":true,"messages":[{"role":"user","content":"x"}]}`, "logprobs"},
		{`{"model":"m","presence_penalty":0.5,"messages":[{"role":"user","content":"x"}]}`, "presence_penalty"},
		{`{"model":"m","seed":7,"messages":[{"role":"user","content":"x"}]}`, "seed"},
		{`{"model":"m","reasoning_effort":"minimal","messages":[{"role":"user","content":"x"}]}`, "reasoning_effort"},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"x","format":"wav"}}]}]}`, "messages[0].content[0]"},
		{`{"model":"m","messages":[{"role":"assistant","content":[{"type":"image_url","image_url":{"url":"https://x"}}]}]}`, "messages[0].content[0]"},
		{`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"t","function":{"name":"f","arguments":"[1]"}}]}]}`, "messages[0].tool_calls[0].function.arguments"},
	} {
		_, _, err := anthropicRequest([]byte(tc.body))
		var e *apperr.Error
		if !errors.As(err, &e) || e.Code != apperr.Invalid || e.Param != tc.param {
			t.Errorf("%s: %v, want a 400 naming %s", tc.body, err, tc.param)
		}
	}
	// Embeddings never reach Anthropic.
	_, err := anthropicFormat{}.newRequest(context.Background(), &Key{Secret: "s"}, mustURL(t, "https://api.anthropic.com"), Request{Endpoint: Embeddings, Model: "claude-x"})
	if e := apperr.As(err); e.Code != apperr.Invalid || !strings.Contains(e.Message, "no embeddings API") {
		t.Fatalf("embeddings: %v", err)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := parseBase(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// anthropicMock is the mock's Anthropic speaker on the pool's clock, with
// key sk-ant; seen keeps each request's path, headers and body.
type anthropicMock struct {
	*mock.Server
	url  string
	mu   sync.Mutex
	seen []*http.Request
	body [][]byte
	// before, when set, may answer a request itself (true) before the mock.
	before func(n int, w http.ResponseWriter, r *http.Request) bool
}

func newAnthropicMock(t *testing.T, now func() time.Time, rps float64) *anthropicMock {
	m := &anthropicMock{Server: mock.New(mock.Config{Keys: map[string]float64{"sk-ant": rps}, Now: now, StreamChunks: 3})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		m.mu.Lock()
		m.seen, m.body = append(m.seen, r), append(m.body, b)
		n, before := len(m.seen), m.before
		m.mu.Unlock()
		if before != nil && before(n, w, r) {
			return
		}
		m.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	m.url = srv.URL
	return m
}

func anthropicKey(base string) Key {
	k := key(1, base, "sk-ant")
	k.Provider = KindAnthropic
	return k
}

func messagesRequest(body string, stream bool) Request {
	return Request{Model: "claude-sonnet-4-5", Body: []byte(body), Stream: stream, Estimate: 100, ID: "req-1"}
}

const cachedPrompt = `{"model":"claude-sonnet-4-5","max_tokens":50,"messages":[{"role":"system","content":[{"type":"text","text":"You are a careful assistant who knows rivers well.","cache_control":{"type":"ephemeral"}}]},{"role":"user","content":"tell me about rivers"}]}`

func TestAnAnthropicKeyAnswersInOpenAIsShape(t *testing.T) {
	c := newClock()
	m := newAnthropicMock(t, c.Now, 0)
	p, _ := testPool(t, PoolOptions{Now: c.Now}, anthropicKey(m.url))

	resp, err := p.Do(context.Background(), messagesRequest(cachedPrompt, false))
	if err != nil || resp.Status != 200 {
		t.Fatalf("%v %+v", err, resp)
	}
	got := m.seen[0]
	if got.URL.Path != "/v1/messages" || got.Header.Get("x-api-key") != "sk-ant" || got.Header.Get("anthropic-version") != "2023-06-01" ||
		got.Header.Get("Authorization") != "" {
		t.Fatalf("called %s with %v", got.URL, got.Header)
	}
	var chat struct {
		Object  string
		Choices []struct {
			Message      struct{ Role, Content string }
			FinishReason string `json:"finish_reason"`
		}
	}
	if err := json.Unmarshal(resp.Body, &chat); err != nil || chat.Object != "chat.completion" || len(chat.Choices) != 1 ||
		chat.Choices[0].Message.Content != "mock reply to: tell me about rivers" || chat.Choices[0].FinishReason != "stop" {
		t.Fatalf("answer %s", resp.Body)
	}
	// The first request writes the system prompt to the cache, the second
	// reads it: both reach chat.Usage, within the prompt.
	first, _ := ReadCompletion(resp.Body)
	resp, err = p.Do(context.Background(), messagesRequest(cachedPrompt, false))
	if err != nil {
		t.Fatal(err)
	}
	second, _ := ReadCompletion(resp.Body)
	if u := first.Usage; u.CacheCreationTokens == 0 || u.CachedTokens != 0 || u.PromptTokens <= u.CacheCreationTokens {
		t.Fatalf("first usage %+v", u)
	}
	if u := second.Usage; u.CachedTokens != first.Usage.CacheCreationTokens || u.CacheCreationTokens != 0 || u.PromptTokens != first.Usage.PromptTokens {
		t.Fatalf("second usage %+v, first %+v", u, first.Usage)
	}

	// A stop sequence: stop, and which one.
	resp, _ = p.Do(context.Background(), messagesRequest(`{"model":"claude-sonnet-4-5","max_tokens":50,"stop":["rivers"],"messages":[{"role":"user","content":"tell me about rivers"}]}`, false))
	if !strings.Contains(string(resp.Body), `"finish_reason":"stop","stop_sequence":"rivers"`) {
		t.Fatalf("stop sequence %s", resp.Body)
	}
	// A tool call, then its result.
	tools := `"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{"text":{"type":"string"}}}}}]`
	resp, _ = p.Do(context.Background(), messagesRequest(`{"model":"claude-sonnet-4-5","max_tokens":50,`+tools+`,"messages":[{"role":"user","content":"find rivers"}]}`, false))
	var call struct {
		Choices []struct {
			Message struct {
				Content   *string
				ToolCalls []struct {
					ID       string
					Type     string
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
			FinishReason string `json:"finish_reason"`
		}
	}
	if json.Unmarshal(resp.Body, &call) != nil || call.Choices[0].FinishReason != "tool_calls" || call.Choices[0].Message.Content != nil ||
		len(call.Choices[0].Message.ToolCalls) != 1 || call.Choices[0].Message.ToolCalls[0].Function.Arguments != `{"text":"find rivers"}` {
		t.Fatalf("tool call %s", resp.Body)
	}
	id := call.Choices[0].Message.ToolCalls[0].ID
	resp, _ = p.Do(context.Background(), messagesRequest(`{"model":"claude-sonnet-4-5","max_tokens":50,`+tools+`,"messages":[{"role":"user","content":"find rivers"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"`+id+`","type":"function","function":{"name":"lookup","arguments":"{\"text\":\"find rivers\"}"}}]},
		{"role":"tool","tool_call_id":"`+id+`","content":"the Nile"}]}`, false))
	if resp.Status != 200 || !strings.Contains(string(resp.Body), "mock reply to tool result: the Nile") {
		t.Fatalf("tool result %d %s", resp.Status, resp.Body)
	}

	// Anthropic's refusal of the request itself comes back in OpenAI's
	// error shape, with its words.
	resp, err = p.Do(context.Background(), messagesRequest(`{"model":"claude-sonnet-4-5","max_tokens":50,"messages":[{"role":"tool","tool_call_id":"nope","content":"x"}]}`, false))
	if err != nil || resp.Status != 400 {
		t.Fatalf("refusal %v %+v", err, resp)
	}
	if want := `{"error":{"message":"messages.0.content: unexpected ` + "`tool_use_id`" + ` found in ` + "`tool_result`" + ` blocks: nope","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}`; string(resp.Body) != want {
		t.Fatalf("refusal %s", resp.Body)
	}
}

func TestAnAnthropicStreamReadsAsOpenAIChunks(t *testing.T) {
	c := newClock()
	m := newAnthropicMock(t, c.Now, 0)
	p, _ := testPool(t, PoolOptions{Now: c.Now}, anthropicKey(m.url))
	read := func(body string) (string, *UsageTap) {
		t.Helper()
		resp, err := p.Do(context.Background(), messagesRequest(body, true))
		if err != nil || resp.Stream == nil {
			t.Fatalf("%v %+v", err, resp)
		}
		defer resp.Stream.Close()
		tap := NewUsageTap(resp.Stream)
		b, err := io.ReadAll(tap)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		return string(b), tap
	}
	out, tap := read(strings.Replace(cachedPrompt, `"max_tokens":50`, `"max_tokens":50,"stream":true`, 1))
	if tap.Delivered() != "mock reply to: tell me about rivers" || !tap.Finished() || !strings.HasSuffix(out, "data: [DONE]\n\n") ||
		!strings.Contains(out, `"delta":{"role":"assistant","content":""}`) || !strings.Contains(out, `"finish_reason":"stop"`) {
		t.Fatalf("stream:\n%s", out)
	}
	u, final := tap.Usage()
	if !final || u.CacheCreationTokens == 0 || u.PromptTokens <= u.CacheCreationTokens || u.CompletionTokens == 0 {
		t.Fatalf("usage %+v (final %v) of\n%s", u, final, out)
	}
	// The usage chunk is last before [DONE], its choices empty.
	chunks := strings.Split(strings.TrimSpace(out), "\n\n")
	if last := chunks[len(chunks)-2]; !strings.Contains(last, `"choices":[]`) || !strings.Contains(last, `"usage":{`) {
		t.Fatalf("the usage chunk is not last: %s", last)
	}

	out, tap = read(`{"model":"claude-sonnet-4-5","max_tokens":50,"stream":true,"tools":[{"type":"function","function":{"name":"lookup"}}],"messages":[{"role":"user","content":"find"}]}`)
	if !strings.Contains(out, `"tool_calls":[{"index":0,"id":"toolu_mock_`) || !strings.Contains(out, `"finish_reason":"tool_calls"`) ||
		tap.Delivered() != `{"text":"find"}` {
		t.Fatalf("tool stream:\n%s", out)
	}
}

// A stream that breaks off, with Anthropic's error event or without
// message_stop, is a read error: the pipeline says so to the client and the
// key is charged a failure.
func TestABrokenAnthropicStreamIsAnError(t *testing.T) {
	for _, tc := range []struct{ name, events, want string }{
		{"an error event", "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", "overloaded_error: Overloaded"},
		{"cut before message_stop", "", io.ErrUnexpectedEOF.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n"+
					"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"+
					"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"half\"}}\n\n"+tc.events)
			})
			p, _ := testPool(t, PoolOptions{}, anthropicKey(srv.URL))
			resp, err := p.Do(context.Background(), messagesRequest(`{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"x"}]}`, true))
			if err != nil {
				t.Fatal(err)
			}
			tap := NewUsageTap(resp.Stream)
			_, err = io.ReadAll(tap)
			resp.Stream.Close()
			if err == nil || !strings.Contains(err.Error(), tc.want) || tap.Delivered() != "half" {
				t.Fatalf("err %v, delivered %q", err, tap.Delivered())
			}
			if s := status(t, p, 1); s.Failures != 1 {
				t.Fatalf("the key was not charged: %+v", s)
			}
		})
	}
}

func TestAnthropic529IsRetried(t *testing.T) {
	c := newClock()
	m := newAnthropicMock(t, c.Now, 0)
	m.before = func(n int, w http.ResponseWriter, r *http.Request) bool {
		if n == 1 {
			r.Header.Set("X-Mock-Status", "529")
		}
		return false
	}
	p, _ := testPool(t, PoolOptions{Now: c.Now}, anthropicKey(m.url))
	resp, err := p.Do(context.Background(), messagesRequest(cachedPrompt, false))
	if err != nil || resp.Status != 200 || resp.Attempts != 2 {
		t.Fatalf("%v %+v", err, resp)
	}
	if st := m.Stats().Total; st.Status5xx != 1 || st.OK != 1 {
		t.Fatalf("the provider saw %+v", st)
	}
}

func TestAnthropicsRateLimitHeadersFeedPacing(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h := http.Header{}
	h.Set("anthropic-ratelimit-requests-limit", "50")
	h.Set("anthropic-ratelimit-requests-remaining", "49")
	h.Set("anthropic-ratelimit-requests-reset", "2026-01-02T03:04:06.5Z")
	h.Set("anthropic-ratelimit-input-tokens-limit", "30000")
	h.Set("anthropic-ratelimit-tokens-limit", "38000")
	h.Set("anthropic-ratelimit-tokens-remaining", "37000")
	h.Set("anthropic-ratelimit-tokens-reset", "2026-01-02T03:04:05Z")
	anthropicFormat{}.limits(h, now)
	for name, want := range map[string]string{
		"x-ratelimit-limit-requests": "50", "x-ratelimit-remaining-requests": "49", "x-ratelimit-reset-requests": "1.5s",
		"x-ratelimit-limit-tokens": "38000", "x-ratelimit-remaining-tokens": "37000", "x-ratelimit-reset-tokens": "0s",
	} {
		if got := h.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}

	// Through the pool: the mock's key at 2 a second (120 a minute), what
	// the pool learns of it from Anthropic's headers.
	c := newClock()
	m := newAnthropicMock(t, c.Now, 2)
	p, _ := testPool(t, PoolOptions{Now: c.Now}, anthropicKey(m.url))
	if _, err := p.Do(context.Background(), messagesRequest(cachedPrompt, false)); err != nil {
		t.Fatal(err)
	}
	l := status(t, p, 1).RequestLimits
	if l.Limit != 120 || l.PerMinute != 120 || l.Remaining != 1 || l.ProviderBurst != 2 || !l.Reset.After(c.Now()) {
		t.Fatalf("learned %+v", l)
	}
}

func TestAnthropicBaseURLs(t *testing.T) {
	for _, tc := range []struct{ base, want, err string }{
		{"https://api.anthropic.com", "https://api.anthropic.com/v1/messages", ""},
		{"https://api.anthropic.com/", "https://api.anthropic.com/v1/messages", ""},
		{"https://api.anthropic.com/v1", "https://api.anthropic.com/v1/messages", ""},
		{"https://gateway.example/anthropic", "https://gateway.example/anthropic/v1/messages", ""},
		{"https://api.anthropic.com/v1/messages", "", "the API root"},
	} {
		err := CheckBaseURL(KindAnthropic, tc.base)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want %q", tc.base, err, tc.err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.base, err)
		case messagesURL(mustURL(t, tc.base)) != tc.want:
			t.Errorf("%s: calls %s, want %s", tc.base, messagesURL(mustURL(t, tc.base)), tc.want)
		}
	}
}

// TestANativeMessageIsBilledAsItsTranslation: a message read untranslated
// (readNative) yields the reply and usage its chat translation does, for
// every kind of usage Anthropic reports, so a message is billed the same
// whichever way it travels.
func TestANativeMessageIsBilledAsItsTranslation(t *testing.T) {
	f := anthropicFormat{now: time.Now}
	for _, tc := range []struct {
		usage string
		hour  int // the hour's cache writes billed: a part of the writes, never more
	}{
		{`{"input_tokens":11,"output_tokens":13}`, 0},
		{`{"input_tokens":11,"cache_creation_input_tokens":7,"cache_read_input_tokens":5,"output_tokens":13}`, 0},
		{`{"input_tokens":11,"cache_creation_input_tokens":7,"cache_creation":{"ephemeral_5m_input_tokens":2,"ephemeral_1h_input_tokens":5},"output_tokens":13}`, 5},
		{`{"input_tokens":11,"cache_creation_input_tokens":7,"cache_creation":{"ephemeral_1h_input_tokens":70},"output_tokens":13}`, 7},
		{`{"input_tokens":3,"output_tokens":40,"output_tokens_details":{"thinking_tokens":25}}`, 0},
		{`{"input_tokens":3,"output_tokens":4,"output_tokens_details":{"thinking_tokens":99}}`, 0},
		{`{"input_tokens":-5,"output_tokens":-1,"cache_read_input_tokens":2}`, 0},
	} {
		usage := tc.usage
		body := []byte(`{"type":"message","id":"msg_1","role":"assistant","model":"claude-x","content":[` +
			`{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"Rivers "},{"type":"tool_use","id":"t1","name":"f","input":{}},{"type":"text","text":"run."}],` +
			`"stop_reason":"end_turn","usage":` + usage + `}`)
		native, err := f.readNative(body)
		if err != nil {
			t.Fatal(err)
		}
		chatBody, err := f.answer(Request{}, body)
		if err != nil {
			t.Fatal(err)
		}
		translated, err := ReadCompletion(chatBody)
		if err != nil {
			t.Fatal(err)
		}
		if native.Usage != translated.Usage || !native.Reported || native.Reply != "Rivers run." || native.Reply != translated.Reply {
			t.Errorf("%s: native %+v, translated %+v", usage, native, translated)
		}
		if native.Usage.CacheCreationHourTokens != tc.hour {
			t.Errorf("%s: an hour's cache writes %d, want %d", usage, native.Usage.CacheCreationHourTokens, tc.hour)
		}
	}
	for _, bad := range []string{`{"type":"error","error":{}}`, `[]`, `{"type":"message","usage":7}`} {
		if _, err := f.readNative([]byte(bad)); err == nil {
			t.Errorf("readNative(%s): no error", bad)
		}
	}
}

// TestANativeStreamIsBilledAsItsTranslation: Anthropic's events passed on
// as they came (streamNative, read by a Messages usage tap) bill what the
// same events translated into chunks do, and deliver the same text; the
// bytes pass unchanged; an error event or a cut before message_stop is a
// read error after the bytes before it, as in the translation.
func TestANativeStreamIsBilledAsItsTranslation(t *testing.T) {
	f := anthropicFormat{now: time.Now}
	events := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-x\",\"content\":[],\"usage\":{\"input_tokens\":5,\"cache_read_input_tokens\":3,\"cache_creation_input_tokens\":2,\"cache_creation\":{\"ephemeral_5m_input_tokens\":0,\"ephemeral_1h_input_tokens\":2},\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"hmm\"}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Rivers run\"}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\":1}\"}}\n\n" +
		"event: ping\ndata: {\"type\":\"ping\"}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":17,\"output_tokens_details\":{\"thinking_tokens\":4}}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	read := func(r io.Reader) (string, error) {
		var out bytes.Buffer
		buf := make([]byte, 7) // small reads: events arrive cut anywhere
		for {
			n, err := r.Read(buf)
			out.Write(buf[:n])
			if err != nil {
				return out.String(), err
			}
		}
	}
	translated := NewUsageTap(f.stream(Request{}, io.NopCloser(strings.NewReader(events))))
	if _, err := read(translated); err != io.EOF {
		t.Fatalf("translated: %v", err)
	}
	native := NewMessagesUsageTap(f.streamNative(Request{}, io.NopCloser(strings.NewReader(events))))
	passed, err := read(native)
	if err != io.EOF || passed != events {
		t.Fatalf("native: %v, passed %q", err, passed)
	}
	nu, nfinal := native.Usage()
	tu, tfinal := translated.Usage()
	if !nfinal || !tfinal || nu != tu || nu.PromptTokens != 10 || nu.CachedTokens != 3 || nu.CacheCreationTokens != 2 || nu.CacheCreationHourTokens != 2 || nu.ReasoningTokens != 4 {
		t.Errorf("native usage %+v (%v), translated %+v (%v)", nu, nfinal, tu, tfinal)
	}
	if native.Delivered() != translated.Delivered() || native.Reasoning() != translated.Reasoning() || !native.Finished() {
		t.Errorf("native delivered %q/%q, translated %q/%q", native.Delivered(), native.Reasoning(), translated.Delivered(), translated.Reasoning())
	}

	stop := strings.Index(events, "event: message_stop")
	failure := "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
	for _, tc := range []struct {
		in   string
		want func(error) bool
	}{
		{events[:stop], func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) }},
		{events[:stop] + failure, func(err error) bool { return err != nil && !errors.Is(err, io.EOF) }},
		{events[:stop] + failure[:len(failure)-2], func(err error) bool { return err != nil && !errors.Is(err, io.EOF) }},
	} {
		passed, err := read(f.streamNative(Request{}, io.NopCloser(strings.NewReader(tc.in))))
		if !tc.want(err) || passed != tc.in {
			t.Errorf("%q: %v, passed %q", tc.in[max(0, len(tc.in)-40):], err, passed[max(0, len(passed)-40):])
		}
	}
}
