package handlers

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

	"github.com/sluicehq/sluice/chat"
	"github.com/sluicehq/sluice/chat/family"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// anthropicRecorder is an Anthropic Messages endpoint, as Anthropic
// documents it, that answers one fixed message and keeps what it was sent.
type anthropicRecorder struct {
	mu      sync.Mutex
	bodies  []string
	headers []http.Header
	answer  string
}

func (a *anthropicRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	a.bodies, a.headers = append(a.bodies, string(body)), append(a.headers, r.Header.Clone())
	a.mu.Unlock()
	if r.URL.Path != "/v1/messages" || r.Header.Get("X-Api-Key") != "sk-native-key" {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	var req struct {
		Model  string
		Stream bool
	}
	_ = json.Unmarshal(body, &req)
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, strings.ReplaceAll(a.answer, "MODEL", req.Model))
}

func (a *anthropicRecorder) last(t *testing.T) (string, http.Header) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.bodies) == 0 {
		t.Fatal("the provider was asked nothing")
	}
	return a.bodies[len(a.bodies)-1], a.headers[len(a.headers)-1]
}

// nativeMessage is an answer with what a translation into the chat form
// and back would lose: a text block's citations, the container, the
// usage's service tier, and the provider's own key order.
const nativeMessage = `{"type":"message","id":"msg_provider_1","role":"assistant","model":"MODEL",` +
	`"content":[{"type":"text","text":"Rivers run to the sea.","citations":[{"type":"char_location","cited_text":"sea","document_index":0,"start_char_index":0,"end_char_index":3}]}],` +
	`"stop_reason":"end_turn","stop_sequence":null,"container":null,` +
	`"usage":{"input_tokens":11,"cache_creation_input_tokens":7,"cache_read_input_tokens":5,"output_tokens":13,"service_tier":"standard"}}`

// TestAMessagesClientIsAnsweredByAnthropicUntranslated: a Messages client
// whose model an Anthropic key serves is sent on as it came (the body
// byte for byte, its anthropic-beta header) and is answered with the
// provider's own message, but for the id and the model, which are the
// gateway's as a translated answer's are; it is billed the provider's
// usage exactly. Through an alias, the only change is the model asked.
// Without the native path the body would be a translation and the
// answer would lose its citations, container and service tier.
func TestAMessagesClientIsAnsweredByAnthropicUntranslated(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		r := newAliasRig(t, db)
		provider := &anthropicRecorder{answer: nativeMessage}
		srv := httptest.NewServer(provider)
		t.Cleanup(srv.Close)
		w := r.do(request{method: "POST", path: "/api/admin/upstreams", bearer: r.admin,
			body: `{"name":"anthropic","provider":"anthropic","base_url":"` + srv.URL + `","api_key":"sk-native-key","models":["claude-native"]}`})
		if w.Code != 201 {
			t.Fatalf("add key: %d %s", w.Code, w.Body.String())
		}
		r.alias(t, `{"name":"fast","targets":[{"model":"claude-native","weight":1}]}`)

		sent := `{"max_tokens":64,  "model":"claude-native","metadata":{"user_id":"u-1"},` +
			`"messages":[{"role":"user","content":[{"type":"text","text":"tell me about rivers","cache_control":{"type":"ephemeral"}}]}]}`
		for _, tc := range []struct{ model, wantSent string }{
			{"claude-native", sent},
			{"fast", sent}, // the alias's model in place of "fast"
		} {
			body := strings.Replace(sent, `"model":"claude-native"`, `"model":"`+tc.model+`"`, 1)
			w := r.do(request{method: "POST", path: "/v1/messages", bearer: r.key, body: body,
				header: map[string]string{"anthropic-beta": "interleaved-thinking-2025-05-14"}})
			if w.Code != 200 {
				t.Fatalf("%s: %d %s", tc.model, w.Code, w.Body.String())
			}
			got, header := provider.last(t)
			if got != tc.wantSent {
				t.Errorf("%s: the provider was sent\n%s\nnot the client's body\n%s", tc.model, got, tc.wantSent)
			}
			if b := header.Get("Anthropic-Beta"); b != "interleaved-thinking-2025-05-14" {
				t.Errorf("%s: anthropic-beta %q", tc.model, b)
			}
			requestID := w.Header().Get("X-Request-Id")
			want := strings.NewReplacer(`"id":"msg_provider_1"`, `"id":"msg_`+strings.TrimPrefix(requestID, "req_")+`"`,
				`"model":"MODEL"`, `"model":"`+tc.model+`"`).Replace(nativeMessage)
			if w.Body.String() != want {
				t.Errorf("%s: the client got\n%s\nnot the provider's message relabelled\n%s", tc.model, w.Body.String(), want)
			}
			if m := w.Header().Get("X-Sluice-Model"); m != "claude-native" {
				t.Errorf("%s: X-Sluice-Model %q", tc.model, m)
			}
			evs := r.events(t, requestID)
			if len(evs) != 1 {
				t.Fatalf("%s: %d usage events", tc.model, len(evs))
			}
			// The whole prompt is the three input counts; the cache's
			// parts are priced as such.
			if u, want := billedUsage(evs[0]), (chat.Usage{PromptTokens: 23, CompletionTokens: 13, CachedTokens: 5, CacheCreationTokens: 7}); u != want {
				t.Errorf("%s: billed %+v, want %+v", tc.model, u, want)
			}
		}

		// A stream, too, is sent as it came and passed back as Anthropic
		// wrote it, but for message_start's id and model.
		provider.answer = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_provider_2\",\"model\":\"MODEL\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2,\"server_tool_use\":{}}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
		streamed := strings.Replace(sent, `"max_tokens":64,`, `"max_tokens":64,"stream":true,`, 1)
		w = r.do(request{method: "POST", path: "/v1/messages", bearer: r.key, body: streamed})
		if got, _ := provider.last(t); got != streamed {
			t.Errorf("a stream was sent %s", got)
		}
		want := strings.NewReplacer(`"id":"msg_provider_2"`, `"id":"msg_`+strings.TrimPrefix(w.Header().Get("X-Request-Id"), "req_")+`"`,
			`"model":"MODEL"`, `"model":"claude-native"`).Replace(provider.answer)
		if w.Code != 200 || w.Body.String() != want {
			t.Errorf("the stream reached the client as %d\n%s\nnot\n%s", w.Code, w.Body.String(), want)
		}
	})
}

// TestANativeStreamLeftByItsClientIsBilled: a Messages client streaming
// from an Anthropic key that hangs up mid-answer is billed the prompt's
// estimate and what was delivered, by the model's count; one that hangs up
// after message_delta (the answer and its usage whole) is billed
// Anthropic's own usage, though message_stop never reached it.
func TestANativeStreamLeftByItsClientIsBilled(t *testing.T) {
	const start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-native\",\"content\":[],\"usage\":{\"input_tokens\":50000,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"one two three\"}}\n\n"
	const delta = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":90}}\n\n"
	for _, tt := range []struct {
		name, sent, until string
		prompt, answer    int64 // what is billed; -1: the prompt's estimate, the delivered text's count
	}{
		{"mid-answer", start, `"one two three"`, -1, -1},
		{"after message_delta", start + delta, `"stop_reason":"end_turn"`, 50000, 90},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := newGenEnv(t, testdb.SQLite(t))
			admin := g.login("admin@example.com", "admin-password")
			key, _ := g.apiToken(g.signup("a@example.com", "A"))
			provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, tt.sent)
				w.(http.Flusher).Flush()
				<-r.Context().Done() // message_stop never comes: the gateway hangs up
			}))
			defer provider.Close()
			if w := g.do(request{method: "POST", path: "/api/admin/upstreams", bearer: admin,
				body: `{"name":"anthropic","provider":"anthropic","base_url":"` + provider.URL + `","api_key":"sk-native-key","models":["claude-native"]}`}); w.Code != 201 {
				t.Fatalf("add key: %d %s", w.Code, w.Body.String())
			}
			g.pipe.UsageGrace = 50 * time.Millisecond
			g.rebuild()
			gateway := httptest.NewServer(g.h)
			defer gateway.Close()

			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "POST", gateway.URL+"/v1/messages",
				strings.NewReader(`{"model":"claude-native","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"count to three"}]}`))
			req.Header.Set("x-api-key", key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var read []byte
			buf := make([]byte, 512)
			for !strings.Contains(string(read), tt.until) {
				n, err := resp.Body.Read(buf)
				read = append(read, buf[:n]...)
				if err != nil {
					t.Fatalf("the stream ended early: %q %v", read, err)
				}
			}
			cancel()
			resp.Body.Close()
			var u models.UsageTotals
			deadline := time.Now().Add(5 * time.Second)
			for u.Requests == 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
				u, _ = g.store.UsageSince(context.Background(), orgOf(t, g.env, "a@example.com"), time.Now().Add(-time.Hour))
			}
			prompt := tt.prompt
			if prompt < 0 {
				var count struct {
					InputTokens int64 `json:"input_tokens"`
				}
				w := g.do(request{method: "POST", path: "/v1/messages/count_tokens", bearer: key,
					body: `{"model":"claude-native","messages":[{"role":"user","content":"count to three"}]}`})
				if err := json.Unmarshal(w.Body.Bytes(), &count); err != nil || count.InputTokens == 0 {
					t.Fatalf("count_tokens %d %s", w.Code, w.Body.String())
				}
				prompt = count.InputTokens
			}
			answer := tt.answer
			if answer < 0 {
				answer = int64(family.Of("claude-native").Counter.Count([]byte("one two three")))
			}
			if u.Requests != 1 || u.PromptTokens != prompt || u.CompletionTokens != answer {
				t.Fatalf("billed %+v, want %d prompt and %d completion tokens", u, prompt, answer)
			}
		})
	}
}

// TestANativeAnswerThatIsNotAMessageIsAGatewayError: an Anthropic key
// that answers 200 with what is not a message (not JSON, or another
// object) gives the Messages client Anthropic's api_error with a 502,
// and bills nothing. The answer is relabelled and read after the pool has
// returned it, so this is the sink's check, not the pool's.
func TestANativeAnswerThatIsNotAMessageIsAGatewayError(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		r := newAliasRig(t, db)
		provider := &anthropicRecorder{}
		srv := httptest.NewServer(provider)
		t.Cleanup(srv.Close)
		if w := r.do(request{method: "POST", path: "/api/admin/upstreams", bearer: r.admin,
			body: `{"name":"anthropic","provider":"anthropic","base_url":"` + srv.URL + `","api_key":"sk-native-key","models":["claude-native"]}`}); w.Code != 201 {
			t.Fatalf("add key: %d %s", w.Code, w.Body.String())
		}
		for _, answer := range []string{`not json at all`, `{"type":"error","error":{"type":"api_error","message":"upstream proxy trouble"}}`, `[1,2]`} {
			provider.answer = answer
			w := r.do(request{method: "POST", path: "/v1/messages", bearer: r.key,
				body: `{"model":"claude-native","max_tokens":64,"messages":[{"role":"user","content":"hello"}]}`})
			if w.Code != http.StatusBadGateway || !strings.Contains(w.Body.String(), `"type":"error","error":{"type":"api_error","message":"the provider's answer could not be read; retry later"`) {
				t.Errorf("%s: the client got %d %s", answer, w.Code, w.Body.String())
			}
			id := w.Header().Get("X-Request-Id")
			if id == "" {
				t.Fatalf("%s: no request id to find its usage by", answer)
			}
			evs := r.events(t, id)
			if len(evs) > 1 {
				t.Errorf("%s: %d usage events", answer, len(evs))
			}
			for _, ev := range evs {
				if u := billedUsage(ev); u != (chat.Usage{}) || ev.Cost != 0 {
					t.Errorf("%s: billed %+v, cost %v", answer, u, ev.Cost)
				}
			}
		}
	})
}
