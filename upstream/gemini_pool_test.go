package upstream

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/upstream/mock"
)

// geminiMock serves the mock's Gemini speaker, recording each request's
// URL and key header.
type geminiMock struct {
	*mock.Server
	srv  *httptest.Server
	mu   sync.Mutex
	seen []*http.Request
}

func newGeminiMock(t *testing.T, cfg mock.Config) *geminiMock {
	t.Helper()
	m := &geminiMock{Server: mock.New(cfg)}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.seen = append(m.seen, r.Clone(context.Background()))
		m.mu.Unlock()
		m.ServeHTTP(w, r)
	}))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *geminiMock) last() *http.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seen[len(m.seen)-1]
}

func geminiKey(id int64, base, secret string) Key {
	k := key(id, base, secret)
	k.Provider = KindGemini
	return k
}

func geminiChat(body string, stream bool) Request {
	return Request{Model: "gemini-2.5-flash", Body: []byte(body), Stream: stream, Estimate: 50, ID: "req_01TEST"}
}

const geminiHello = `{"model":"gemini-2.5-flash","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello gemini"}]}`

// Through the pool, a Gemini key answers in OpenAI's format, plain and
// streamed, with the provider's usage; the key travels in x-goog-api-key
// and never in the URL.
func TestGeminiKeyThroughThePool(t *testing.T) {
	m := newGeminiMock(t, mock.Config{Keys: map[string]float64{"AIza-good": 0}})
	p, _ := testPool(t, PoolOptions{}, geminiKey(1, m.srv.URL, "AIza-good"))

	resp, err := p.Do(context.Background(), geminiChat(geminiHello, false))
	if err != nil {
		t.Fatal(err)
	}
	got := m.last()
	if got.URL.Path != "/v1beta/models/gemini-2.5-flash:generateContent" || got.URL.RawQuery != "" ||
		got.Header.Get("x-goog-api-key") != "AIza-good" || got.Header.Get("Authorization") != "" {
		t.Fatalf("called %s with headers %v", got.URL, got.Header)
	}
	c, err := ReadCompletion(resp.Body)
	if err != nil || resp.Status != 200 || c.Reply != "mock reply to: hello gemini" || !c.Reported ||
		c.Usage.PromptTokens == 0 || c.Usage.CompletionTokens != mock.Tokens("mock reply to: hello gemini") {
		t.Fatalf("status %d, read %+v (%v) from %s", resp.Status, c, err, resp.Body)
	}
	var body struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Model   string `json:"model"`
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if json.Unmarshal(resp.Body, &body); body.ID != "chatcmpl-01TEST" || body.Object != "chat.completion" || body.Model != "gemini-2.5-flash" ||
		body.Choices[0].FinishReason != "stop" {
		t.Fatalf("body %s", resp.Body)
	}

	resp, err = p.Do(context.Background(), geminiChat(geminiHello, true))
	if err != nil {
		t.Fatal(err)
	}
	tap := NewUsageTap(resp.Stream)
	all, err := io.ReadAll(tap)
	resp.Stream.Close()
	if got := m.last(); got.URL.Path != "/v1beta/models/gemini-2.5-flash:streamGenerateContent" || got.URL.RawQuery != "alt=sse" {
		t.Fatalf("called %s", got.URL)
	}
	u, final := tap.Usage()
	if err != nil || tap.Delivered() != "mock reply to: hello gemini" || !final || u.PromptTokens != c.Usage.PromptTokens ||
		u.CompletionTokens != c.Usage.CompletionTokens || !tap.Finished() || !strings.HasSuffix(string(all), "data: [DONE]\n\n") {
		t.Fatalf("err %v, delivered %q, usage %+v (final %v), stream\n%s", err, tap.Delivered(), u, final, all)
	}
}

// A conversation with tools: the mock calls the function, the tool's
// result goes back as a function response, and the model answers in
// text.
func TestGeminiToolRoundTrip(t *testing.T) {
	m := newGeminiMock(t, mock.Config{Keys: map[string]float64{"k": 0}})
	p, _ := testPool(t, PoolOptions{}, geminiKey(1, m.srv.URL+"/v1beta", "k"))
	tools := `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`
	resp, err := p.Do(context.Background(), geminiChat(`{"messages":[{"role":"user","content":"weather?"}],`+tools+`}`, false))
	if err != nil {
		t.Fatal(err)
	}
	var first struct {
		Choices []struct {
			Message struct {
				ToolCalls []oaToolCall `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(resp.Body, &first); err != nil || len(first.Choices[0].Message.ToolCalls) != 1 || first.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("answer %s", resp.Body)
	}
	call := first.Choices[0].Message.ToolCalls[0]
	if call.Function.Name != "get_weather" || call.Function.Arguments != `{"text":"weather?"}` || !strings.HasPrefix(call.ID, "call_01TEST_0") {
		t.Fatalf("call %+v", call)
	}
	callJSON, _ := json.Marshal(call)
	second := `{"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":null,"tool_calls":[` + string(callJSON) + `]},
		{"role":"tool","tool_call_id":"` + call.ID + `","content":"sunny"}],` + tools + `}`
	resp, err = p.Do(context.Background(), geminiChat(second, false))
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := ReadCompletion(resp.Body); c.Reply != "mock reply to: weather?" {
		t.Fatalf("answer %s", resp.Body)
	}
}

// A key Gemini refuses (unknown: 400 API_KEY_INVALID; none at all: 403)
// is disabled as an OpenAI key answered 401/403 is, and the request moves
// on to another key at once.
func TestGeminiRefusedKeysAreDisabled(t *testing.T) {
	for _, tc := range []struct{ name, secret string }{{"unknown key", "AIza-wrong"}, {"no key", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			m := newGeminiMock(t, mock.Config{Keys: map[string]float64{"AIza-good": 0}})
			p, c := testPool(t, PoolOptions{}, geminiKey(1, m.srv.URL, tc.secret), geminiKey(2, m.srv.URL, "AIza-good"))
			resp, err := p.Do(context.Background(), geminiChat(geminiHello, false))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != 200 || resp.KeyID != 2 || resp.Attempts != 2 || len(c.Sleeps()) != 0 {
				t.Fatalf("status %d from key %d after %d attempts (waits %v)", resp.Status, resp.KeyID, resp.Attempts, c.Sleeps())
			}
			select {
			case r := <-p.Refusals():
				if r.KeyID != 1 {
					t.Fatalf("refusal %+v", r)
				}
			default:
				t.Fatal("the refused key was not reported")
			}
			if s := status(t, p, 1); s.State != Disabled || !strings.Contains(s.Reason, "refused the key") {
				t.Fatalf("status %+v", s)
			}
		})
	}
}

// A 429 rests the key for Gemini's RetryInfo delay, read from the body
// (Gemini sends no Retry-After): the request is answered by another key,
// the limited key is not asked again before the delay has passed, and is
// after.
func TestGeminiRetryInfoRestsTheKey(t *testing.T) {
	c := newClock()
	m := newGeminiMock(t, mock.Config{Keys: map[string]float64{"limited": 0.2, "free": 0}, Now: c.Now})
	p, _ := testPool(t, PoolOptions{Now: c.Now, Sleep: c.Sleep}, geminiKey(1, m.srv.URL, "limited"), geminiKey(2, m.srv.URL, "free"))
	if resp, err := p.Do(context.Background(), geminiChat(geminiHello, false)); err != nil || resp.KeyID != 1 {
		t.Fatalf("first: %v %v", resp, err)
	}
	limitedAt := c.Now()
	resp, err := p.Do(context.Background(), geminiChat(geminiHello, false))
	if err != nil || resp.KeyID != 2 || resp.Attempts != 2 {
		t.Fatalf("second: %+v %v", resp, err)
	}
	// The mock's bucket holds one request and refills one every 5 s.
	s := status(t, p, 1)
	if s.State != Cooling || s.LastStatus != 429 || !s.Until.Equal(limitedAt.Add(5*time.Second)) {
		t.Fatalf("status %+v, want cooling until %s", s, limitedAt.Add(5*time.Second))
	}
	asked := m.Stats().Keys["limited"].Requests
	c.Advance(4 * time.Second)
	if resp, err := p.Do(context.Background(), geminiChat(geminiHello, false)); err != nil || resp.KeyID != 2 || m.Stats().Keys["limited"].Requests != asked {
		t.Fatalf("during the rest: key %v, err %v, the limited key asked %d times", resp, err, m.Stats().Keys["limited"].Requests-asked)
	}
	c.Advance(time.Second)
	if resp, err := p.Do(context.Background(), geminiChat(geminiHello, false)); err != nil || resp.KeyID != 1 {
		t.Fatalf("after the rest: %+v %v", resp, err)
	}
}

// A Gemini 5xx is retried on another key and counts against the key that
// failed.
func TestGeminiServerErrorsAreRetried(t *testing.T) {
	failing := newGeminiMock(t, mock.Config{Keys: map[string]float64{"a": 0}, FailureRate: 1})
	healthy := newGeminiMock(t, mock.Config{Keys: map[string]float64{"b": 0}})
	p, _ := testPool(t, PoolOptions{}, geminiKey(1, failing.srv.URL, "a"), geminiKey(2, healthy.srv.URL, "b"))
	resp, err := p.Do(context.Background(), geminiChat(geminiHello, true))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Stream.Close()
	if resp.KeyID != 2 || resp.Attempts != 2 {
		t.Fatalf("key %d after %d attempts", resp.KeyID, resp.Attempts)
	}
	if s := status(t, p, 1); s.Failures != 1 || s.LastStatus != 500 {
		t.Fatalf("status %+v", s)
	}
	if got := failing.Stats().Keys["a"].Status5xx; got != 1 {
		t.Fatalf("the failing key answered %d 5xx", got)
	}
}

// Gemini's refusal of the request itself reaches the client as it is, in
// OpenAI's words with Google's message, whole even beyond what the pool
// peeks at; the key stays healthy.
func TestGeminiClientErrorsReachTheClient(t *testing.T) {
	long := strings.Repeat("x", 2*failurePeekBytes)
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(400)
		io.WriteString(w, `{"error":{"code":400,"message":"* GenerateContentRequest.contents: contents is not specified `+long+`","status":"INVALID_ARGUMENT"}}`)
	})
	p, _ := testPool(t, PoolOptions{}, geminiKey(1, srv.URL, "k"))
	resp, err := p.Do(context.Background(), geminiChat(geminiHello, false))
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Error struct{ Message, Type, Code string } `json:"error"`
	}
	if err := json.Unmarshal(resp.Body, &e); err != nil || resp.Status != 400 || e.Error.Type != "invalid_request_error" ||
		e.Error.Message != "* GenerateContentRequest.contents: contents is not specified "+long {
		t.Fatalf("status %d, error %.200s (%v)", resp.Status, resp.Body, err)
	}
	if s := status(t, p, 1); s.State != Healthy {
		t.Fatalf("status %+v", s)
	}
}

// Embeddings on a Gemini key: one batchEmbedContents call, each input a
// request naming the model, dimensions as outputDimensionality; the answer
// is OpenAI's list, the vectors as Gemini wrote them (the mock embeds as
// its OpenAI speaker does, so the two answers must agree), or as base64
// float32s when asked, and the usage Sluice's count, as Gemini reports
// none.
func TestGeminiKeyEmbeds(t *testing.T) {
	m := newGeminiMock(t, mock.Config{Keys: map[string]float64{"AIza-good": 0}})
	openai := httptest.NewServer(mock.New(mock.Config{Keys: map[string]float64{"sk-openai": 0}}))
	t.Cleanup(openai.Close)
	gp, _ := testPool(t, PoolOptions{}, geminiKey(1, m.srv.URL, "AIza-good"))
	op, _ := testPool(t, PoolOptions{}, key(2, openai.URL+"/v1", "sk-openai"))
	embed := func(p *Pool, body string) map[string]any {
		t.Helper()
		resp, err := p.Do(context.Background(), Request{Model: "gemini-embedding-001", Endpoint: Embeddings, Body: []byte(body), Estimate: 11})
		if err != nil || resp.Status != 200 {
			t.Fatalf("%s: %v %+v", body, err, resp)
		}
		var out map[string]any
		if err := json.Unmarshal(resp.Body, &out); err != nil {
			t.Fatalf("%s: %v", resp.Body, err)
		}
		return out
	}
	for _, body := range []string{
		`{"model":"gemini-embedding-001","input":"hello there"}`,
		`{"model":"gemini-embedding-001","input":["hello there","general kenobi"],"dimensions":3}`,
		`{"model":"gemini-embedding-001","input":["hello there","general kenobi"],"encoding_format":"base64"}`,
	} {
		got := embed(gp, body)
		want := embed(op, body)
		if got["object"] != "list" || got["model"] != "gemini-embedding-001" {
			t.Errorf("%s: answered %v", body, got)
		}
		if g, w := mustJSON(t, got["data"]), mustJSON(t, want["data"]); g != w {
			t.Errorf("%s: data\n%s\nwant, as OpenAI's speaker embeds it,\n%s", body, g, w)
		}
		if u := mustJSON(t, got["usage"]); u != `{"prompt_tokens":11,"total_tokens":11}` {
			t.Errorf("%s: usage %s, want Sluice's count of 11", body, u)
		}
	}
	sent := m.last()
	if !strings.HasSuffix(sent.URL.Path, "/v1beta/models/gemini-embedding-001:batchEmbedContents") || sent.Header.Get("x-goog-api-key") != "AIza-good" {
		t.Fatalf("sent to %s with key header %q", sent.URL, sent.Header.Get("x-goog-api-key"))
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// An answer that does not embed every input, or embeds one without
// values, cannot be used.
func TestGeminiEmbeddingsAnswerMustMatchTheInputs(t *testing.T) {
	req := Request{Model: "m", Endpoint: Embeddings, Body: []byte(`{"input":["a","b"]}`)}
	for _, body := range []string{
		`{"embeddings":[{"values":[0.1]}]}`,
		`{"embeddings":[{"values":[0.1]},{}]}`,
		`{"embeddings":[{"values":[0.1]},{"values":"x"}]}`,
	} {
		if out, err := geminiEmbedAnswer(req, []byte(body)); err == nil {
			t.Errorf("%s: translated to %s, want an error", body, out)
		}
	}
}
