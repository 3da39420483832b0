package handlers

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// anthropicError checks an answer in Anthropic's error shape: its status,
// error type and message, and that it carries the request's id.
func anthropicError(t *testing.T, w *httptest.ResponseRecorder, status int, typ, message string) {
	t.Helper()
	var body struct {
		Type  string
		Error struct{ Type, Message string }
		ID    string `json:"request_id"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != status || body.Type != "error" ||
		body.Error.Type != typ || !strings.Contains(body.Error.Message, message) ||
		body.ID == "" || body.ID != w.Header().Get("request-id") {
		t.Fatalf("got %d %s (%v), want %d %s %q", w.Code, w.Body.String(), w.Header(), status, typ, message)
	}
}

// message sends a Messages request with the token as x-api-key, as
// Anthropic's SDKs do.
func (e *env) message(key, body string, hdr map[string]string) *httptest.ResponseRecorder {
	h := map[string]string{"x-api-key": key, "anthropic-version": "2023-06-01"}
	for k, v := range hdr {
		h[k] = v
	}
	return e.do(request{method: "POST", path: "/v1/messages", body: body, header: h})
}

const localMessage = `{"model":"sluice-local","max_tokens":200,"system":"answer briefly","messages":[{"role":"user","content":"写一副关于平安的春联"}]}`

func TestMessagesFromTheLocalModel(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		key, _ := e.apiToken(e.signup("a@example.com", "A"))

		w := e.message(key, localMessage, nil)
		var msg struct {
			ID, Type, Role, Model string
			Content               []struct{ Type, Text string }
			StopReason            string  `json:"stop_reason"`
			StopSequence          *string `json:"stop_sequence"`
			Usage                 map[string]int
		}
		if err := json.Unmarshal(w.Body.Bytes(), &msg); err != nil || w.Code != 200 {
			t.Fatalf("%d %s", w.Code, w.Body.String())
		}
		if !strings.HasPrefix(msg.ID, "msg_") || msg.Type != "message" || msg.Role != "assistant" || msg.Model != "sluice-local" ||
			len(msg.Content) != 1 || msg.Content[0].Type != "text" || msg.Content[0].Text == "" || msg.StopReason != "end_turn" ||
			msg.StopSequence != nil || msg.Usage["input_tokens"] == 0 || msg.Usage["output_tokens"] == 0 {
			t.Fatalf("message %s", w.Body.String())
		}
		if _, ok := msg.Usage["cache_read_input_tokens"]; !ok {
			t.Fatalf("usage without its cache counts: %s", w.Body.String())
		}
		// Rate limits under Anthropic's names, not OpenAI's.
		h := w.Header()
		if h.Get("anthropic-ratelimit-requests-limit") != "30" || h.Get("anthropic-ratelimit-requests-remaining") != "29" ||
			!strings.HasSuffix(h.Get("anthropic-ratelimit-requests-reset"), "Z") || h.Get("x-ratelimit-limit-requests") != "" ||
			h.Get("request-id") == "" {
			t.Fatalf("headers %v", h)
		}

		// Streamed: Anthropic's events, in order, the same text.
		w = e.message(key, strings.Replace(localMessage, `"max_tokens":200`, `"max_tokens":200,"stream":true`, 1), nil)
		if w.Code != 200 || w.Header().Get("Content-Type") != "text/event-stream" {
			t.Fatalf("stream %d %v", w.Code, w.Header())
		}
		names, text, final := sseEvents(t, w.Body.String())
		if len(names) < 7 || names[0] != "message_start" || names[1] != "ping" || names[2] != "content_block_start" ||
			names[len(names)-3] != "content_block_stop" || names[len(names)-2] != "message_delta" || names[len(names)-1] != "message_stop" {
			t.Fatalf("events %v", names)
		}
		if text != msg.Content[0].Text || final.Delta.StopReason != "end_turn" || final.Usage["output_tokens"] != msg.Usage["output_tokens"] ||
			final.Usage["input_tokens"] != msg.Usage["input_tokens"] {
			t.Fatalf("streamed %q %+v, whole %q %v", text, final, msg.Content[0].Text, msg.Usage)
		}
		if strings.Contains(w.Body.String(), "chat.completion") || strings.Contains(w.Body.String(), "[DONE]") {
			t.Fatalf("OpenAI's chunks leaked into the stream: %s", w.Body.String())
		}

		// Authorization: Bearer works too (Claude Code's ANTHROPIC_AUTH_TOKEN).
		if w := e.do(request{method: "POST", path: "/v1/messages", bearer: key, body: localMessage}); w.Code != 200 {
			t.Fatalf("bearer: %d %s", w.Code, w.Body.String())
		}
	})
}

// finalDelta is a message_delta event.
type finalDelta struct {
	Delta struct {
		StopReason string `json:"stop_reason"`
	}
	Usage map[string]int
}

// sseEvents reads a Messages stream: the events' names, the text of its
// text deltas, and its message_delta.
func sseEvents(t *testing.T, stream string) (names []string, text string, final finalDelta) {
	t.Helper()
	for _, raw := range strings.Split(strings.TrimSpace(stream), "\n\n") {
		name, data, ok := strings.Cut(raw, "\ndata: ")
		if !ok {
			t.Fatalf("not an event: %q in %s", raw, stream)
		}
		name = strings.TrimPrefix(name, "event: ")
		names = append(names, name)
		var ev struct {
			Type  string
			Delta struct{ Type, Text string }
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil || ev.Type != name {
			t.Fatalf("event %s: %s", name, data)
		}
		switch name {
		case "content_block_delta":
			text += ev.Delta.Text
		case "message_delta":
			_ = json.Unmarshal([]byte(data), &final)
		}
	}
	return names, text, final
}

func TestMessagesFailInAnthropicsShape(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	admin := e.login("admin@example.com", "admin-password")
	owner := e.signup("a@example.com", "A")
	key, _ := e.apiToken(owner)

	anthropicError(t, e.do(request{method: "POST", path: "/v1/messages", body: localMessage}),
		401, "authentication_error", "no API key: send your Sluice token as 'x-api-key")
	anthropicError(t, e.message("sk_sluice_nonsense", localMessage, nil), 401, "authentication_error", "the API key is malformed")
	anthropicError(t, e.message(strings.Replace(key, key[len(key)-6:len(key)-4], "zz", 1), localMessage, nil),
		401, "authentication_error", "API key")
	anthropicError(t, e.message(key, `{"model":"sluice-local","messages":[{"role":"user","content":"hi"}]}`, nil),
		400, "invalid_request_error", "max_tokens: Field required")
	anthropicError(t, e.message(key, `{"model":"claude-nope","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, nil),
		404, "not_found_error", "the model 'claude-nope' does not exist")
	anthropicError(t, e.message(key, `{"model":"sluice-local","max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"hi"}]}`, nil),
		400, "invalid_request_error", "thinking: sluice-local does not think; omit thinking or use adaptive thinking")
	anthropicError(t, e.message(key, `{"model":"sluice-local","max_tokens":1024,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"hi"}]}`, nil),
		400, "invalid_request_error", "thinking.budget_tokens: must be less than max_tokens (1024)")
	anthropicError(t, e.message(key, `{"model":"sluice-local","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://x.example/a.png"}}]}]}`, nil),
		400, "invalid_request_error", "messages.0.content.0: image blocks are not supported by sluice-local")
	anthropicError(t, e.message(key, "{", nil), 400, "invalid_request_error", "the request body is not valid JSON")
	anthropicError(t, e.message(key, strings.Repeat("x", 5<<10), nil), 413, "request_too_large", "request body is larger than")
	anthropicError(t, e.do(request{method: "GET", path: "/v1/messages", header: map[string]string{"x-api-key": key}}),
		405, "invalid_request_error", "method GET is not supported here")
	// x-api-key is the Messages routes' alone; OpenAI's routes keep Bearer.
	if w := e.do(request{method: "POST", path: "/v1/chat/completions", body: chatBody, header: map[string]string{"x-api-key": key}}); w.Code != 401 || errorCode(t, w) != "missing_api_key" {
		t.Fatalf("x-api-key on chat completions: %d %s", w.Code, w.Body.String())
	}

	// Budget spent: Anthropic's billing_error, not retried.
	for path, body := range map[string]string{
		"/api/admin/prices/sluice-local": `{"input_per_mtok":"1","output_per_mtok":"1"}`,
	} {
		if w := e.do(request{method: "PUT", path: path, bearer: admin, body: body}); w.Code != 200 {
			t.Fatalf("%s: %d %s", path, w.Code, w.Body.String())
		}
	}
	if w := e.do(request{method: "PUT", path: "/api/budget", bearer: owner, body: `{"monthly_limit":"0.0000001","hard_stop":true}`}); w.Code != 200 {
		t.Fatalf("budget: %d %s", w.Code, w.Body.String())
	}
	w := e.message(key, localMessage, nil)
	anthropicError(t, w, 402, "billing_error", "more than is left of the organization's monthly budget")
	if w.Header().Get("x-should-retry") != "false" {
		t.Fatalf("a spent budget must not be retried: %v", w.Header())
	}
	if w := e.do(request{method: "PUT", path: "/api/budget", bearer: owner, body: `{"monthly_limit":null}`}); w.Code != 200 {
		t.Fatalf("budget: %d", w.Code)
	}

	// Rate limited: rate_limit_error with retry-after and Anthropic's headers.
	if w := e.do(request{method: "PUT", path: "/api/admin/tiers/free", bearer: admin, body: `{"capacity":2,"refill_per_sec":0.01,"refill_floor":0.01,"freeze_threshold":0}`}); w.Code != 200 {
		t.Fatalf("tier: %d %s", w.Code, w.Body.String())
	}
	for e.message(key, localMessage, nil).Code == 200 {
	}
	w = e.message(key, localMessage, nil)
	anthropicError(t, w, 429, "rate_limit_error", "rate limit reached for requests on the free tier")
	if w.Header().Get("retry-after") == "" || w.Header().Get("anthropic-ratelimit-requests-remaining") != "0" ||
		w.Header().Get("anthropic-ratelimit-requests-reset") == "" || w.Header().Get("x-ratelimit-remaining-requests") != "" {
		t.Fatalf("429 headers %v", w.Header())
	}
	// Refused at the bucket before the body is judged: still this shape.
	anthropicError(t, e.message(key, `{}`, nil), 429, "rate_limit_error", "rate limit reached")
}

func TestMessagesAreBilledAsTheSameChatCompletion(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		admin := e.login("admin@example.com", "admin-password")
		if w := e.do(request{method: "PUT", path: "/api/admin/prices/sluice-local", bearer: admin,
			body: `{"input_per_mtok":"3","output_per_mtok":"15"}`}); w.Code != 200 {
			t.Fatalf("price: %d %s", w.Code, w.Body.String())
		}
		key, tokenID := e.apiToken(e.signup("a@example.com", "A"))
		chat := e.do(request{method: "POST", path: "/v1/chat/completions", bearer: key,
			body: `{"model":"sluice-local","max_tokens":200,"messages":[{"role":"system","content":"answer briefly"},{"role":"user","content":"写一副关于平安的春联"}]}`})
		msg := e.message(key, localMessage, nil)
		stream := e.message(key, strings.Replace(localMessage, `"max_tokens":200`, `"max_tokens":200,"stream":true`, 1), nil)
		if chat.Code != 200 || msg.Code != 200 || stream.Code != 200 {
			t.Fatalf("%d %d %d", chat.Code, msg.Code, stream.Code)
		}
		var evs []models.UsageEvent
		if err := db.Gorm.Where("token_id = ?", tokenID).Find(&evs).Error; err != nil || len(evs) != 3 {
			t.Fatalf("usage events %d (%v)", len(evs), err)
		}
		dialects := map[string]int{}
		for _, ev := range evs {
			dialects[ev.Dialect]++
			if ev.PromptTokens != evs[0].PromptTokens || ev.CompletionTokens != evs[0].CompletionTokens || ev.Cost != evs[0].Cost ||
				ev.Cost == 0 || ev.Model != "sluice-local" || ev.Status != 200 {
				t.Fatalf("event %+v, another's %+v", ev, evs[0])
			}
		}
		if dialects["chat"] != 1 || dialects["messages"] != 2 {
			t.Fatalf("dialects %v", dialects)
		}
	})
}

func TestCountTokensIsThePipelinesEstimate(t *testing.T) {
	db := testdb.SQLite(t)
	e := newEnv(t, db)
	key, tokenID := e.apiToken(e.signup("a@example.com", "A"))
	const body = `{"model":"sluice-local","system":"answer briefly","messages":[{"role":"user","content":"写一副关于平安的春联"}],
		"tools":[{"name":"weather","description":"the weather","input_schema":{"type":"object"}}]}`
	w := e.do(request{method: "POST", path: "/v1/messages/count_tokens", body: body, header: map[string]string{"x-api-key": key}})
	req, err := e.deps.Pipeline.Parse([]byte(`{"model":"sluice-local","messages":[{"role":"system","content":"answer briefly"},{"role":"user","content":"写一副关于平安的春联"}],
		"tools":[{"type":"function","function":{"name":"weather","description":"the weather","parameters":{"type":"object"}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		InputTokens int64 `json:"input_tokens"`
	}
	if json.Unmarshal(w.Body.Bytes(), &got) != nil || w.Code != 200 || got.InputTokens != req.Prompt.Tokens || got.InputTokens == 0 {
		t.Fatalf("%d %s; the pipeline counts %d", w.Code, w.Body.String(), req.Prompt.Tokens)
	}
	// It costs one request, and nothing is metered.
	if w.Header().Get("anthropic-ratelimit-requests-remaining") != "29" {
		t.Fatalf("headers %v", w.Header())
	}
	var n int64
	if err := db.Gorm.Model(&models.UsageEvent{}).Where("token_id = ?", tokenID).Count(&n).Error; err != nil || n != 0 {
		t.Fatalf("count_tokens was metered: %d events (%v)", n, err)
	}
	anthropicError(t, e.do(request{method: "POST", path: "/v1/messages/count_tokens", body: `{"model":"sluice-local"}`, header: map[string]string{"x-api-key": key}}),
		400, "invalid_request_error", "messages: Field required")
}

func TestMessagesWhenEveryProviderIsDownAreOverloaded(t *testing.T) {
	g := newGenEnv(t, testdb.SQLite(t))
	admin := g.login("admin@example.com", "admin-password")
	key, _ := g.apiToken(g.signup("a@example.com", "A"))
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL + "/v1"
	dead.Close()
	g.addKey(t, admin, "dead", deadURL, "sk-dead-key")
	if w := g.do(request{method: "PUT", path: "/api/admin/tiers/free", bearer: admin, body: `{"upstream_fallback":"error"}`}); w.Code != 200 {
		t.Fatalf("tier: %d %s", w.Code, w.Body.String())
	}
	w := g.message(key, `{"model":"gpt-4o-mini","max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`, nil)
	anthropicError(t, w, 529, "overloaded_error", "every provider for 'gpt-4o-mini' is unavailable right now")
	if w.Header().Get("retry-after") == "" {
		t.Fatalf("529 without retry-after: %v", w.Header())
	}
}

// TestCountTokensCountsTheThinkingOfAToolCycle: the thinking block a
// client sends back with its tool_use (as Anthropic requires while a tool
// is used with thinking) is billed by Anthropic as input, so the estimate
// counts it; one before the last user turn is stripped, and is not.
func TestCountTokensCountsTheThinkingOfAToolCycle(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	key, _ := e.apiToken(e.signup("a@example.com", "A"))
	thinking := strings.Repeat("I should look the weather up before I answer. ", 50)
	body := func(withThinking bool, after string) string {
		assistant := `{"type":"tool_use","id":"toolu_1","name":"weather","input":{}}`
		if withThinking {
			assistant = `{"type":"thinking","thinking":"` + thinking + `","signature":"EqQBCkYIARgC"},` + assistant
		}
		return `{"model":"sluice-local","tools":[{"name":"weather","input_schema":{"type":"object"}}],"messages":[` +
			`{"role":"user","content":"weather?"},{"role":"assistant","content":[` + assistant + `]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"18C"}]}` + after + `]}`
	}
	count := func(b string) int64 {
		t.Helper()
		w := e.do(request{method: "POST", path: "/v1/messages/count_tokens", body: b, header: map[string]string{"x-api-key": key}})
		var got struct {
			InputTokens int64 `json:"input_tokens"`
		}
		if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &got) != nil {
			t.Fatalf("%d %s", w.Code, w.Body.String())
		}
		return got.InputTokens
	}
	words := int64(len(strings.Fields(thinking))) // at least a token a word
	if with, without := count(body(true, "")), count(body(false, "")); with < without+words {
		t.Errorf("the cycle's thinking: %d input tokens, want at least %d + %d", with, without, words)
	}
	const next = `,{"role":"assistant","content":"18C."},{"role":"user","content":"thanks"}`
	if with, without := count(body(true, next)), count(body(false, next)); with != without {
		t.Errorf("thinking before the last user turn: %d input tokens, want %d as without it", with, without)
	}
}
