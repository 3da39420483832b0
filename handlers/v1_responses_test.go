package handlers

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

func (e *env) respond(key, body string) *httptest.ResponseRecorder {
	e.t.Helper()
	return e.do(request{method: "POST", path: "/v1/responses", bearer: key, body: body})
}

// response is what the tests read of a Response object.
type response struct {
	ID                 string  `json:"id"`
	Object             string  `json:"object"`
	Status             string  `json:"status"`
	Model              string  `json:"model"`
	PreviousResponseID *string `json:"previous_response_id"`
	Store              bool    `json:"store"`
	Output             []struct {
		Type    string `json:"type"`
		ID      string `json:"id"`
		Role    string `json:"role"`
		Status  string `json:"status"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
	Usage *struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
}

func (r response) text() string {
	var b strings.Builder
	for _, o := range r.Output {
		for _, c := range o.Content {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

func decodeResponse(t *testing.T, w *httptest.ResponseRecorder) response {
	t.Helper()
	var r response
	if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &r) != nil {
		t.Fatalf("not a response: %d %s", w.Code, w.Body.String())
	}
	return r
}

// sseEvent is one event of a Responses stream.
type sseEvent struct {
	Type string
	Data map[string]any
	Raw  string
}

func readEvents(t *testing.T, body string) []sseEvent {
	t.Helper()
	var out []sseEvent
	for _, block := range strings.Split(strings.TrimSpace(body), "\n\n") {
		name, data, _ := strings.Cut(block, "\n")
		var m map[string]any
		if err := json.Unmarshal([]byte(strings.TrimPrefix(data, "data: ")), &m); err != nil {
			t.Fatalf("event data is not JSON: %q", block)
		}
		if m["type"] != strings.TrimPrefix(name, "event: ") || m["sequence_number"] != float64(len(out)) {
			t.Fatalf("event %d: %q", len(out), block)
		}
		out = append(out, sseEvent{m["type"].(string), m, strings.TrimPrefix(data, "data: ")})
	}
	return out
}

// usageOf is the usage event of the request that got w.
func usageOf(t *testing.T, db *models.DB, w *httptest.ResponseRecorder) models.UsageEvent {
	t.Helper()
	var ev models.UsageEvent
	id := w.Header().Get("X-Request-Id")
	if err := db.Gorm.Where("request_id = ?", id).First(&ev).Error; err != nil {
		t.Fatalf("usage event of %s: %v", id, err)
	}
	return ev
}

func TestResponsesFromTheLocalModel(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		key, _ := e.apiToken(e.signup("a@example.com", "A"))
		w := e.respond(key, `{"model":"sluice-local","instructions":"Answer briefly.","input":"写一副春联"}`)
		r := decodeResponse(t, w)
		if !strings.HasPrefix(r.ID, "resp_") || r.Object != "response" || r.Status != "completed" || r.Model != "sluice-local" || !r.Store {
			t.Fatalf("response: %s", w.Body.String())
		}
		if len(r.Output) != 1 || r.Output[0].Type != "message" || !strings.HasPrefix(r.Output[0].ID, "msg_") || r.Output[0].Role != "assistant" ||
			!strings.Contains(r.text(), "上联") || r.Output[0].Content[0].Type != "output_text" {
			t.Fatalf("output: %s", w.Body.String())
		}
		if r.Usage == nil || r.Usage.InputTokens == 0 || r.Usage.OutputTokens == 0 || r.Usage.TotalTokens != r.Usage.InputTokens+r.Usage.OutputTokens {
			t.Fatalf("usage: %s", w.Body.String())
		}
		for _, h := range []string{"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "X-Request-Id"} {
			if w.Header().Get(h) == "" {
				t.Errorf("header %s missing", h)
			}
		}

		// Streamed: the documented events, and the same answer.
		w = e.respond(key, `{"model":"sluice-local","instructions":"Answer briefly.","input":"写一副春联","stream":true}`)
		if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
			t.Fatalf("stream: %d %v", w.Code, w.Header())
		}
		evs := readEvents(t, w.Body.String())
		var kinds []string
		var deltas strings.Builder
		for _, ev := range evs {
			if len(kinds) == 0 || kinds[len(kinds)-1] != ev.Type {
				kinds = append(kinds, ev.Type)
			}
			if ev.Type == "response.output_text.delta" {
				deltas.WriteString(ev.Data["delta"].(string))
			}
		}
		want := "response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta " +
			"response.output_text.done response.content_part.done response.output_item.done response.completed"
		if strings.Join(kinds, " ") != want {
			t.Fatalf("events %v", kinds)
		}
		var last struct {
			Response response `json:"response"`
		}
		_ = json.Unmarshal([]byte(evs[len(evs)-1].Raw), &last)
		if last.Response.text() != r.text() || deltas.String() != r.text() || last.Response.Usage == nil || *last.Response.Usage != *r.Usage {
			t.Fatalf("streamed %q (deltas %q) usage %+v; answered %q usage %+v", last.Response.text(), deltas.String(), last.Response.Usage, r.text(), r.Usage)
		}

		// Cut by max_output_tokens: incomplete, saying why.
		r = decodeResponse(t, e.respond(key, `{"model":"sluice-local","input":"写一副春联","max_output_tokens":3}`))
		if r.Status != "incomplete" || r.IncompleteDetails == nil || r.IncompleteDetails.Reason != "max_output_tokens" || r.Usage.OutputTokens != 3 {
			t.Fatalf("cut: %+v", r)
		}
		// What the local model cannot take is refused by name.
		expectError(t, e.respond(key, `{"model":"sluice-local","input":[{"role":"user","content":[{"type":"input_image","image_url":"https://example.com/a.png"}]}]}`),
			400, "invalid_content", "input_image parts are not supported by sluice-local")
		expectError(t, e.respond(key, `{"model":"sluice-local","input":"hi","reasoning":{"effort":"low"}}`),
			400, "unsupported_parameter", "sluice-local does not reason")
		expectError(t, e.respond(key, `{"model":"sluice-local","input":"hi","tools":[{"type":"web_search"}]}`),
			400, "unsupported_parameter", "tool type 'web_search' is not supported")
		w = e.respond(key, `{"model":"sluice-local","input":"hi","max_output_tokens":0}`)
		if !strings.Contains(w.Body.String(), `"param":"max_output_tokens"`) || w.Header().Get("x-ratelimit-remaining-requests") == "" {
			t.Fatalf("a bad request is refused in OpenAI's shape, and costs a request: %d %s %v", w.Code, w.Body.String(), w.Header())
		}
		expectError(t, e.respond(key, `{"model":"gpt-9","input":"hi"}`), 404, "model_not_found", "the model 'gpt-9' does not exist")
	})
}

// TestResponsesAreBilledAsChatCompletions: a Responses request costs what
// the chat completion of the same content costs, streamed or not.
func TestResponsesAreBilledAsChatCompletions(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		admin := e.login("admin@example.com", "admin-password")
		if w := e.do(request{method: "PUT", path: "/api/admin/prices/sluice-local", bearer: admin,
			body: `{"input_per_mtok":"1.5","output_per_mtok":"3"}`}); w.Code != 200 {
			t.Fatalf("price: %d %s", w.Code, w.Body.String())
		}
		key, _ := e.apiToken(e.signup("a@example.com", "A"))
		chat := e.do(request{method: "POST", path: "/v1/chat/completions", bearer: key,
			body: `{"model":"sluice-local","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"写一副关于平安的春联"}]}`})
		if chat.Code != 200 {
			t.Fatalf("chat: %d %s", chat.Code, chat.Body.String())
		}
		want := usageOf(t, db, chat)
		if want.Cost == 0 {
			t.Fatal("the chat completion cost nothing: the comparison would prove nothing")
		}
		for _, stream := range []string{"false", "true"} {
			w := e.respond(key, `{"model":"sluice-local","instructions":"Be brief.","input":[{"role":"user","content":[{"type":"input_text","text":"写一副关于平安的春联"}]}],"stream":`+stream+`}`)
			if w.Code != 200 {
				t.Fatalf("stream %s: %d %s", stream, w.Code, w.Body.String())
			}
			got := usageOf(t, db, w)
			if got.PromptTokens != want.PromptTokens || got.CompletionTokens != want.CompletionTokens || got.Cost != want.Cost || got.Model != want.Model || got.Status != 200 {
				t.Fatalf("stream %s billed %+v, the chat completion %+v", stream, got, want)
			}
			if got.Dialect != "responses" || want.Dialect != "chat" {
				t.Fatalf("dialects recorded: %q for the response, %q for the chat completion", got.Dialect, want.Dialect)
			}
		}
	})
}

// TestResponsesContinue: a stored response is continued by
// previous_response_id, its conversation in front of the new input, where
// the estimate and the bill see it; store: false keeps nothing.
func TestResponsesContinue(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		e.deps.MaxBodyBytes = 64 << 10
		e.rebuild()
		admin := e.login("admin@example.com", "admin-password")
		key, _ := e.apiToken(e.signup("a@example.com", "A"))
		long := strings.Repeat("长", 300) // 300 tokens as the local model counts

		first := e.respond(key, `{"model":"sluice-local","input":"`+long+`","max_output_tokens":16}`)
		r1 := decodeResponse(t, first)
		fresh := decodeResponse(t, e.respond(key, `{"model":"sluice-local","input":"`+long+`","max_output_tokens":16,"store":false}`))
		second := e.respond(key, `{"model":"sluice-local","input":"`+long+`","max_output_tokens":16,"previous_response_id":"`+r1.ID+`"}`)
		r2 := decodeResponse(t, second)
		if r2.PreviousResponseID == nil || *r2.PreviousResponseID != r1.ID {
			t.Fatalf("previous_response_id not echoed: %s", second.Body.String())
		}
		// The bill: the first exchange, then the new input.
		const assistantOverhead = 4 // a message's overhead, as the local model counts
		if want := r1.Usage.InputTokens + r1.Usage.OutputTokens + assistantOverhead + fresh.Usage.InputTokens; r2.Usage.InputTokens != want {
			t.Fatalf("the continuation's input is %d tokens, want the first exchange (%d + %d + %d) and the new input (%d)",
				r2.Usage.InputTokens, r1.Usage.InputTokens, r1.Usage.OutputTokens, assistantOverhead, fresh.Usage.InputTokens)
		}
		if got := usageOf(t, db, second); got.PromptTokens != r2.Usage.InputTokens {
			t.Fatalf("billed %d prompt tokens, answered %d", got.PromptTokens, r2.Usage.InputTokens)
		}

		// The estimate: a tokens-per-minute limit the new input fits and
		// the conversation does not refuses the continuation alone.
		if w := e.do(request{method: "PUT", path: "/api/admin/tiers/free", bearer: admin, body: `{"tokens_per_minute":500}`}); w.Code != 200 {
			t.Fatalf("tier: %d %s", w.Code, w.Body.String())
		}
		e.clock.Advance(time.Minute)
		if w := e.respond(key, `{"model":"sluice-local","input":"`+long+`","max_output_tokens":16,"store":false}`); w.Code != 200 {
			t.Fatalf("the new input alone: %d %s", w.Code, w.Body.String())
		}
		e.clock.Advance(time.Minute)
		w := e.respond(key, `{"model":"sluice-local","input":"`+long+`","max_output_tokens":16,"previous_response_id":"`+r1.ID+`"}`)
		expectError(t, w, 400, "request_exceeds_limit", "more than the free tier's 500 tokens per minute")
		if !strings.Contains(w.Body.String(), `"param":"max_output_tokens"`) || !strings.Contains(w.Body.String(), "lower max_output_tokens") {
			t.Fatalf("the refusal speaks of max_tokens: %s", w.Body.String())
		}
		if w := e.do(request{method: "PUT", path: "/api/admin/tiers/free", bearer: admin, body: `{"tokens_per_minute":0}`}); w.Code != 200 {
			t.Fatalf("tier: %d %s", w.Code, w.Body.String())
		}

		// A chain of continuations: each carries the whole conversation.
		r3 := decodeResponse(t, e.respond(key, `{"model":"sluice-local","input":"and then?","previous_response_id":"`+r2.ID+`"}`))
		if r3.Usage.InputTokens <= r2.Usage.InputTokens+r2.Usage.OutputTokens {
			t.Fatalf("the third turn's input (%d) lacks the second exchange (%d + %d)", r3.Usage.InputTokens, r2.Usage.InputTokens, r2.Usage.OutputTokens)
		}
		// store: false keeps nothing to continue or read.
		expectError(t, e.respond(key, `{"model":"sluice-local","input":"hi","previous_response_id":"`+fresh.ID+`"}`),
			400, "previous_response_not_found", "Previous response with id '"+fresh.ID+"' not found")
		expectError(t, e.do(request{method: "GET", path: "/v1/responses/" + fresh.ID, bearer: key}), 404, "response_not_found", "Response with id '"+fresh.ID+"' not found.")
		w = e.respond(key, `{"model":"sluice-local","input":"hi","previous_response_id":"resp_nope"}`)
		if w.Code != 400 || !strings.Contains(w.Body.String(), `"param":"previous_response_id"`) || !strings.Contains(w.Body.String(), `"type":"invalid_request_error"`) {
			t.Fatalf("unknown previous response: %d %s", w.Code, w.Body.String())
		}

		// A chain may grow only as far as a request body may.
		e.deps.MaxBodyBytes = 2 << 10
		e.rebuild()
		expectError(t, e.respond(key, `{"model":"sluice-local","input":"hi","previous_response_id":"`+r3.ID+`"}`),
			400, "conversation_too_large", "more than the 2048 a request may be")
	})
}

// TestResponsesContinueAStream: a streamed response is stored before its
// last event, and continued like any other.
func TestResponsesContinueAStream(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	key, _ := e.apiToken(e.signup("a@example.com", "A"))
	w := e.respond(key, `{"model":"sluice-local","input":"写一副春联","stream":true}`)
	evs := readEvents(t, w.Body.String())
	id := evs[0].Data["response"].(map[string]any)["id"].(string)
	stored := decodeResponse(t, e.do(request{method: "GET", path: "/v1/responses/" + id, bearer: key}))
	if stored.Status != "completed" || !strings.Contains(stored.text(), "上联") || stored.Usage == nil {
		t.Fatalf("stored: %+v", stored)
	}
	next := decodeResponse(t, e.respond(key, `{"model":"sluice-local","input":"再来一副","previous_response_id":"`+id+`"}`))
	if next.Usage.InputTokens <= stored.Usage.InputTokens+stored.Usage.OutputTokens {
		t.Fatalf("the continuation of a stream lacks it: %d tokens", next.Usage.InputTokens)
	}
}

// TestResponsesAreTheOrganizations: reading, continuing and deleting a
// stored response are its organization's alone; anyone else hears 404,
// as for an id that never was.
func TestResponsesAreTheOrganizations(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		owner := e.signup("a@example.com", "A")
		key, _ := e.apiToken(owner)
		colleague, _ := e.apiToken(owner) // another token of the same organization
		other, _ := e.apiToken(e.signup("b@example.com", "B"))
		w := e.respond(key, `{"model":"sluice-local","input":"hi","metadata":{"ticket":"42"}}`)
		r := decodeResponse(t, w)

		got := e.do(request{method: "GET", path: "/v1/responses/" + r.ID, bearer: colleague})
		if got.Code != 200 || got.Body.String() != w.Body.String() || got.Header().Get("x-ratelimit-remaining-requests") == "" {
			t.Fatalf("GET: %d %s\nanswered %s", got.Code, got.Body.String(), w.Body.String())
		}
		expectError(t, e.do(request{method: "GET", path: "/v1/responses/" + r.ID, bearer: other}), 404, "response_not_found", "Response with id '"+r.ID+"' not found.")
		expectError(t, e.respond(other, `{"model":"sluice-local","input":"hi","previous_response_id":"`+r.ID+`"}`),
			400, "previous_response_not_found", "Previous response with id '"+r.ID+"' not found")
		expectError(t, e.do(request{method: "DELETE", path: "/v1/responses/" + r.ID, bearer: other}), 404, "response_not_found", "not found")
		expectError(t, e.do(request{method: "GET", path: "/v1/responses/" + r.ID + "?stream=true", bearer: key}), 400, "unsupported_parameter", "cannot be replayed as a stream")

		del := e.do(request{method: "DELETE", path: "/v1/responses/" + r.ID, bearer: key})
		if del.Code != 200 || !strings.Contains(del.Body.String(), `"object":"response.deleted"`) || !strings.Contains(del.Body.String(), `"deleted":true`) {
			t.Fatalf("DELETE: %d %s", del.Code, del.Body.String())
		}
		expectError(t, e.do(request{method: "GET", path: "/v1/responses/" + r.ID, bearer: key}), 404, "response_not_found", "not found")
		expectError(t, e.do(request{method: "DELETE", path: "/v1/responses/" + r.ID, bearer: key}), 404, "response_not_found", "not found")
		expectError(t, e.do(request{method: "GET", path: "/v1/responses/" + r.ID}), 401, "missing_api_key", "")
	})
}

// TestResponsesExpire: a stored response is kept SLUICE_RESPONSE_RETENTION,
// then gone to readers at once, and its row deleted by the sweep.
func TestResponsesExpire(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		key, _ := e.apiToken(e.signup("a@example.com", "A"))
		r := decodeResponse(t, e.respond(key, `{"model":"sluice-local","input":"hi"}`))
		e.clock.Advance(defaults(t).ResponseRetention - time.Second)
		if w := e.do(request{method: "GET", path: "/v1/responses/" + r.ID, bearer: key}); w.Code != 200 {
			t.Fatalf("within its retention: %d %s", w.Code, w.Body.String())
		}
		e.clock.Advance(time.Second)
		expectError(t, e.do(request{method: "GET", path: "/v1/responses/" + r.ID, bearer: key}), 404, "response_not_found", "not found")
		expectError(t, e.respond(key, `{"model":"sluice-local","input":"hi","previous_response_id":"`+r.ID+`"}`),
			400, "previous_response_not_found", "not found")
		if n, err := e.store.DeleteExpiredResponses(context.Background(), e.clock.Now()); err != nil || n != 1 {
			t.Fatalf("the sweep deleted %d (%v), want the expired one", n, err)
		}
	})
}

// TestAContinuationPaysBeforeItsHistoryIsRead: previous_response_id
// makes Sluice read a stored conversation, so the request pays its one
// request first: a tenant over its limit, or a frozen token, is refused
// before the read (an unknown id is not even looked up), and an admitted
// continuation costs one request, not two.
func TestAContinuationPaysBeforeItsHistoryIsRead(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		key, _ := e.apiToken(e.signup("a@example.com", "A"))
		var reads atomic.Int32 // of stored responses
		err := db.Gorm.Callback().Query().After("gorm:query").Register("test:stored_response_reads", func(tx *gorm.DB) {
			if tx.Statement.Table == "stored_responses" {
				reads.Add(1)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		remaining := func(w *httptest.ResponseRecorder) int {
			n, err := strconv.Atoi(w.Header().Get("x-ratelimit-remaining-requests"))
			if err != nil {
				t.Fatalf("no x-ratelimit-remaining-requests: %d %v %s", w.Code, w.Header(), w.Body.String())
			}
			return n
		}
		first := e.respond(key, `{"model":"sluice-local","input":"write a couplet","max_output_tokens":8}`)
		r1 := decodeResponse(t, first)
		next := e.respond(key, `{"model":"sluice-local","input":"another","max_output_tokens":8,"previous_response_id":"`+r1.ID+`"}`)
		decodeResponse(t, next)
		if remaining(first)-remaining(next) != 1 {
			t.Fatalf("a continuation cost %d requests, want 1", remaining(first)-remaining(next))
		}
		unknown := `{"model":"sluice-local","input":"hi","previous_response_id":"resp_nope"}`
		w := e.respond(key, unknown)
		expectError(t, w, 400, "previous_response_not_found", "Previous response with id 'resp_nope' not found")
		if remaining(next)-remaining(w) != 1 || reads.Load() != 2 {
			t.Fatalf("a continuation of an unknown response cost %d requests, want 1; stored responses read %d times, want 2",
				remaining(next)-remaining(w), reads.Load())
		}

		// Over its limit: refused before the read, as any request is.
		for w.Code != 429 {
			w = e.respond(key, `{"model":"sluice-local","input":"write a couplet","max_output_tokens":8}`)
		}
		w = e.respond(key, unknown)
		expectError(t, w, 429, "rate_limit_exceeded", "rate limit reached for requests on the free tier (limit 30, remaining 0)")
		if reads.Load() != 2 {
			t.Fatalf("over its limit, a continuation read a stored response (%d reads, want 2)", reads.Load())
		}

		// Frozen (20 refusals in a minute): refused as frozen first.
		for errorCode(t, w) != "token_frozen" {
			w = e.respond(key, `{"model":"sluice-local","input":"write a couplet","max_output_tokens":8}`)
		}
		e.clock.Advance(time.Minute) // the bucket is full again; the freeze holds
		expectError(t, e.respond(key, unknown), 429, "token_frozen", "this API key is frozen until")
		if reads.Load() != 2 {
			t.Fatalf("frozen, a continuation read a stored response (%d reads, want 2)", reads.Load())
		}
	})
}

// TestResponsesRefusedInOpenAIsShape: a rate limit or a spent budget
// refuses a Responses request as it refuses a chat completion.
func TestResponsesRefusedInOpenAIsShape(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		var admin string
		owner := e.signup("a@example.com", "A")
		key, _ := e.apiToken(owner)
		var refused *httptest.ResponseRecorder
		for range 40 {
			if w := e.respond(key, `{"model":"sluice-local","input":"write a couplet","max_output_tokens":8}`); w.Code != 200 {
				refused = w
				break
			}
		}
		if refused == nil || refused.Code != 429 || refused.Header().Get("Retry-After") == "" || refused.Header().Get("retry-after-ms") == "" ||
			refused.Header().Get("x-ratelimit-remaining-requests") != "0" ||
			!strings.Contains(refused.Body.String(), `"type":"rate_limit_exceeded"`) ||
			!strings.Contains(refused.Body.String(), "rate limit reached for requests on the free tier (limit 30, remaining 0)") {
			t.Fatalf("rate limited: %+v", refused)
		}
		e.clock.Advance(time.Hour) // the bucket refills; the sessions expire
		admin, owner = e.login("admin@example.com", "admin-password"), e.login("a@example.com", "password123")
		if w := e.do(request{method: "PUT", path: "/api/admin/prices/sluice-local", bearer: admin,
			body: `{"input_per_mtok":"1.5","output_per_mtok":"3"}`}); w.Code != 200 {
			t.Fatalf("price: %d %s", w.Code, w.Body.String())
		}
		if w := e.do(request{method: "PUT", path: "/api/budget", bearer: owner, body: `{"monthly_limit":"0.0001","hard_stop":true}`}); w.Code != 200 {
			t.Fatalf("budget: %d %s", w.Code, w.Body.String())
		}
		w := e.respond(key, `{"model":"sluice-local","input":"write a couplet"}`)
		if w.Code != 429 || w.Header().Get("x-should-retry") != "false" ||
			!strings.Contains(w.Body.String(), `"type":"insufficient_quota","param":null,"code":"insufficient_quota"`) ||
			!strings.Contains(w.Body.String(), "more than is left of the organization's monthly budget") {
			t.Fatalf("over budget: %d %v %s", w.Code, w.Header(), w.Body.String())
		}
	})
}

func TestResponsesRefuseWhatTheyCannotCarry(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	key, _ := e.apiToken(e.signup("a@example.com", "A"))
	for body, want := range map[string]string{
		`{"model":"sluice-local","input":"hi","background":true}`:                                                     "background",
		`{"model":"sluice-local","input":"hi","include":["file_search_call.results"]}`:                                "include",
		`{"model":"sluice-local","input":"hi","tools":[{"type":"file_search","vector_store_ids":["vs_1"]}]}`:          "tools[0].type",
		`{"model":"sluice-local","input":[{"role":"user","content":[{"type":"input_image","file_id":"file-1"}]}]}`:    "input[0].content[0].file_id",
		`{"model":"sluice-local","input":"hi","service":"x"}`:                                                         "service",
		`{"model":"sluice-local","input":"hi","service_tier":"priority"}`:                                             "service_tier",
		`{"model":"sluice-local","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}","x":1}]}`: "input[0].x",
	} {
		w := e.respond(key, body)
		if w.Code != 400 || !strings.Contains(w.Body.String(), `"param":`+strconv.Quote(want)) || !strings.Contains(w.Body.String(), `"type":"invalid_request_error"`) {
			t.Errorf("%s: %d %s, want a 400 naming %s", body, w.Code, w.Body.String(), want)
		}
	}
}

// scriptedProvider answers every request with the next of its answers and
// keeps the bodies it was sent.
type scriptedProvider struct {
	mu      sync.Mutex
	answers []func(w http.ResponseWriter)
	bodies  []string
}

func (p *scriptedProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	p.bodies = append(p.bodies, string(b))
	answer := p.answers[0]
	p.answers = p.answers[1:]
	p.mu.Unlock()
	answer(w)
}

func (p *scriptedProvider) last() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bodies[len(p.bodies)-1]
}

func jsonAnswer(status int, body string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// sseAnswer streams chunks, then [DONE] unless cut.
func sseAnswer(cut bool, chunks ...string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range chunks {
			io.WriteString(w, "data: "+c+"\n\n")
			w.(http.Flusher).Flush()
		}
		if cut {
			panic(http.ErrAbortHandler) // the connection breaks mid-stream
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}
}

// TestResponsesThroughAProvider: function tools and their calls travel
// to a provider as chat completions and come back as Responses output,
// whole and streamed; a provider's refusal passes on in OpenAI's shape;
// a stream that breaks ends failed.
func TestResponsesThroughAProvider(t *testing.T) {
	db := testdb.SQLite(t)
	g := newGenEnv(t, db)
	p := &scriptedProvider{}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	g.addKey(t, g.login("admin@example.com", "admin-password"), "scripted", srv.URL+"/v1", "sk-scripted-key")
	key, _ := g.apiToken(g.signup("a@example.com", "A"))
	const tools = `"tools":[{"type":"function","name":"weather","description":"The weather in a city.","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}]`

	p.answers = append(p.answers, jsonAnswer(200, `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,
		"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_9","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Oslo\"}"}}]},
		"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":60,"completion_tokens":12,"total_tokens":72,"prompt_tokens_details":{"cached_tokens":10}}}`))
	w := g.respond(key, `{"model":"gpt-4o-mini","input":"Weather in Oslo?",`+tools+`,"tool_choice":"required"}`)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"type":"function_call"`) || !strings.Contains(w.Body.String(), `"call_id":"call_9"`) ||
		!strings.Contains(w.Body.String(), `"arguments":"{\"city\":\"Oslo\"}"`) || !strings.Contains(w.Body.String(), `"input_tokens_details":{"cached_tokens":10}`) {
		t.Fatalf("a function call: %d %s", w.Code, w.Body.String())
	}
	if sent := p.last(); !strings.Contains(sent, `"tools":[{"type":"function","function":{"name":"weather","description":"The weather in a city.","parameters"`) ||
		!strings.Contains(sent, `"tool_choice":"required"`) || !strings.Contains(sent, `"messages":[{"role":"user","content":"Weather in Oslo?"}]`) {
		t.Fatalf("the provider was sent %s", sent)
	}
	first := decodeResponse(t, w)

	// The call's output, continuing the response: the provider sees the
	// whole exchange, the call and its output as chat messages.
	p.answers = append(p.answers, sseAnswer(false,
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":"Rain"},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"content":" in Oslo."},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":80,"completion_tokens":4,"total_tokens":84}}`))
	w = g.respond(key, `{"model":"gpt-4o-mini","stream":true,`+tools+`,"previous_response_id":"`+first.ID+`","input":[{"type":"function_call_output","call_id":"call_9","output":"rain"}]}`)
	evs := readEvents(t, w.Body.String())
	last := evs[len(evs)-1]
	if last.Type != "response.completed" || !strings.Contains(last.Raw, `"text":"Rain in Oslo."`) || !strings.Contains(last.Raw, `"input_tokens":80`) {
		t.Fatalf("the streamed answer: %s", w.Body.String())
	}
	sent := p.last()
	if !strings.Contains(sent, `{"role":"assistant","content":null,"tool_calls":[{"id":"call_9","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Oslo\"}"}}]},{"role":"tool","content":"rain","tool_call_id":"call_9"}`) ||
		!strings.Contains(sent, `"stream_options":{"include_usage":true}`) {
		t.Fatalf("the continuation sent %s", sent)
	}
	if got := usageOf(t, db, w); got.PromptTokens != 80 || got.CompletionTokens != 4 {
		t.Fatalf("billed %+v, the provider reported 80 + 4", got)
	}

	// Streamed function calls.
	p.answers = append(p.answers, sseAnswer(false,
		`{"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"weather","arguments":""}}]},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Rome\"}"}}]},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":60,"completion_tokens":9,"total_tokens":69}}`))
	w = g.respond(key, `{"model":"gpt-4o-mini","stream":true,"store":false,`+tools+`,"input":"Weather in Rome?"}`)
	evs = readEvents(t, w.Body.String())
	var kinds []string
	for _, ev := range evs {
		kinds = append(kinds, ev.Type)
	}
	want := "response.created response.in_progress response.output_item.added response.function_call_arguments.delta response.function_call_arguments.delta " +
		"response.function_call_arguments.done response.output_item.done response.completed"
	if strings.Join(kinds, " ") != want || evs[5].Data["arguments"] != `{"city":"Rome"}` {
		t.Fatalf("streamed call: %v\n%s", kinds, w.Body.String())
	}

	// The provider's refusal of the request passes on, in OpenAI's shape.
	p.answers = append(p.answers, jsonAnswer(400, `{"error":{"message":"Invalid schema for function 'weather'.","type":"invalid_request_error","param":"tools[0].function.parameters","code":"invalid_function_parameters"}}`))
	w = g.respond(key, `{"model":"gpt-4o-mini",`+tools+`,"input":"x"}`)
	if w.Code != 400 || !strings.Contains(w.Body.String(), `"code":"invalid_function_parameters"`) || !strings.Contains(w.Body.String(), "Invalid schema for function") {
		t.Fatalf("a provider's refusal: %d %s", w.Code, w.Body.String())
	}

	// A stream that breaks ends failed, with what had come, and is not stored.
	p.answers = append(p.answers, sseAnswer(true, `{"choices":[{"index":0,"delta":{"role":"assistant","content":"Half an"},"finish_reason":null}]}`))
	w = g.respond(key, `{"model":"gpt-4o-mini","stream":true,"input":"x"}`)
	evs = readEvents(t, w.Body.String())
	last = evs[len(evs)-1]
	if last.Type != "response.failed" || !strings.Contains(last.Raw, `"text":"Half an"`) || !strings.Contains(last.Raw, `"error":{"code":"server_error"`) {
		t.Fatalf("a broken stream: %s", w.Body.String())
	}
	id := evs[0].Data["response"].(map[string]any)["id"].(string)
	expectError(t, g.do(request{method: "GET", path: "/v1/responses/" + id, bearer: key}), 404, "response_not_found", "not found")
}

// TestAResponseNotStoredIsStillAnswered: a failed insert is logged; the
// answer goes out all the same.
func TestAResponseNotStoredIsStillAnswered(t *testing.T) {
	db := testdb.SQLite(t)
	e := newEnv(t, db)
	logs := e.captureLogs()
	key, _ := e.apiToken(e.signup("a@example.com", "A"))
	if err := db.Gorm.Exec("DROP TABLE stored_responses").Error; err != nil {
		t.Fatal(err)
	}
	for _, stream := range []string{"false", "true"} {
		w := e.respond(key, `{"model":"sluice-local","input":"hi","stream":`+stream+`}`)
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"status":"completed"`) {
			t.Fatalf("stream %s: %d %s", stream, w.Code, w.Body.String())
		}
	}
	if n := strings.Count(logs.String(), "storing a response failed"); n != 2 {
		t.Fatalf("logged %d failed stores, want 2:\n%s", n, logs.String())
	}
}

// storedAtWrite is a response writer that notes, when the answer's body
// (or a stream's last event) is written, whether its response is stored.
type storedAtWrite struct {
	*httptest.ResponseRecorder
	check  func(body []byte) bool // the write to look at
	stored func() bool
	seen   []bool
}

func (w *storedAtWrite) Write(p []byte) (int, error) {
	if w.check(p) {
		w.seen = append(w.seen, w.stored())
	}
	return w.ResponseRecorder.Write(p)
}

// TestAResponseIsStoredBeforeItsAnswer: a client that continues a
// response the moment its answer (or its stream's last event) arrives
// finds it stored.
func TestAResponseIsStoredBeforeItsAnswer(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	key, _ := e.apiToken(e.signup("a@example.com", "A"))
	u, _ := e.store.UserByEmail(context.Background(), "a@example.com")
	for _, c := range []struct {
		stream string
		last   func([]byte) bool
	}{
		{"false", func(p []byte) bool { return strings.Contains(string(p), `"object":"response"`) }},
		{"true", func(p []byte) bool { return strings.Contains(string(p), "event: response.completed") }},
	} {
		req := httptest.NewRequest("POST", "/v1/responses", strings.NewReader(`{"model":"sluice-local","input":"hi","stream":`+c.stream+`}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		w := &storedAtWrite{ResponseRecorder: httptest.NewRecorder(), check: c.last}
		w.stored = func() bool {
			id := "resp_" + strings.TrimPrefix(w.Header().Get("X-Request-Id"), "req_")
			_, err := e.store.StoredResponse(context.Background(), u.LastOrgID, id, e.clock.Now())
			return err == nil
		}
		e.h.ServeHTTP(w, req)
		if w.Code != 200 || len(w.seen) != 1 || !w.seen[0] {
			t.Fatalf("stream %s: %d, stored when the answer was written: %v\n%s", c.stream, w.Code, w.seen, w.Body.String())
		}
	}
}
