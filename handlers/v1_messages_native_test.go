package handlers

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/chat"
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

		// A stream is translated still: its body is the chat form's
		// translation, not the client's bytes.
		provider.answer = "event: message_start\ndata: {}\n\n"
		_ = r.do(request{method: "POST", path: "/v1/messages", bearer: r.key, body: strings.Replace(sent, `"max_tokens":64,`, `"max_tokens":64,"stream":true,`, 1)})
		if got, _ := provider.last(t); !strings.Contains(got, `"stream":true`) || strings.Contains(got, `"max_tokens":64,  `) {
			t.Errorf("a stream was sent %s", got)
		}
	})
}
