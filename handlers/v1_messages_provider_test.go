package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

const claude = "claude-sonnet-4-5"

// claudeEnv is genEnv with an Anthropic key on the mock's Anthropic
// speaker serving claude, priced as Anthropic prices it ($3 in, $15
// out, $0.30 a cache read, $3.75 a cache write, per million tokens).
func claudeEnv(t *testing.T, db *models.DB) (*genEnv, string, int64) {
	g := newGenEnv(t, db)
	admin := g.login("admin@example.com", "admin-password")
	w := g.do(request{method: "POST", path: "/api/admin/upstreams", bearer: admin,
		body: `{"name":"claude","provider":"anthropic","base_url":"` + g.mockURL + `","api_key":"sk-mock-key","models":["` + claude + `"]}`})
	if w.Code != 201 {
		t.Fatalf("add key: %d %s", w.Code, w.Body.String())
	}
	if w := g.do(request{method: "PUT", path: "/api/admin/prices/" + claude, bearer: admin,
		body: `{"input_per_mtok":"3","output_per_mtok":"15","cached_input_per_mtok":"0.3","cache_creation_per_mtok":"3.75"}`}); w.Code != 200 {
		t.Fatalf("price: %d %s", w.Code, w.Body.String())
	}
	key, tokenID := g.apiToken(g.signup("a@example.com", "A"))
	return g, key, tokenID
}

const cachedMessage = `{"model":"` + claude + `","max_tokens":100,"system":[{"type":"text","text":"You are a careful assistant who knows the rivers of the world.","cache_control":{"type":"ephemeral"}}],
	"messages":[{"role":"user","content":"tell me about rivers"}]}`

func TestAMessagesClientReachesAnAnthropicKey(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		g, key, tokenID := claudeEnv(t, db)

		var first struct {
			Model   string
			Content []struct{ Type, Text string }
			Usage   map[string]int
		}
		w := g.message(key, cachedMessage, nil)
		if err := json.Unmarshal(w.Body.Bytes(), &first); err != nil || w.Code != 200 || first.Model != claude ||
			first.Content[0].Text != "mock reply to: tell me about rivers" || first.Usage["cache_creation_input_tokens"] == 0 ||
			first.Usage["cache_read_input_tokens"] != 0 || first.Usage["input_tokens"] == 0 {
			t.Fatalf("%d %s", w.Code, w.Body.String())
		}
		// The same prompt streamed: read from the cache this time, as
		// Anthropic's own message_start says (its events reach the client
		// as it sent them), and the output as its message_delta says.
		w = g.message(key, strings.Replace(cachedMessage, `"max_tokens":100`, `"max_tokens":100,"stream":true`, 1), nil)
		names, text, final := sseEvents(t, w.Body.String())
		start := messageStartUsage(t, w.Body.String())
		if w.Code != 200 || text != first.Content[0].Text || names[len(names)-1] != "message_stop" || final.Delta.StopReason != "end_turn" ||
			start["cache_read_input_tokens"] != first.Usage["cache_creation_input_tokens"] || start["cache_creation_input_tokens"] != 0 ||
			start["input_tokens"] != first.Usage["input_tokens"] || final.Usage["output_tokens"] != first.Usage["output_tokens"] {
			t.Fatalf("stream %d %v %+v %v:\n%s", w.Code, names, final, start, w.Body.String())
		}

		// Billed as Anthropic bills: the cache write at its price, the
		// cache read at the cached price, the rest at the input price.
		var evs []models.UsageEvent
		if err := db.Gorm.Where("token_id = ?", tokenID).Find(&evs).Error; err != nil || len(evs) != 2 {
			t.Fatalf("events %d (%v)", len(evs), err)
		}
		price := func(s string) money.Price {
			p, err := money.ParsePrice(s)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		input, output := int64(first.Usage["input_tokens"]), int64(first.Usage["output_tokens"])
		cache := int64(first.Usage["cache_creation_input_tokens"])
		for _, ev := range evs {
			var want money.Amount
			switch {
			case ev.CacheCreationTokens > 0:
				want = price("3").Cost(input) + price("3.75").Cost(cache) + price("15").Cost(output)
			case ev.CachedTokens > 0:
				want = price("3").Cost(input) + price("0.3").Cost(cache) + price("15").Cost(output)
			}
			if ev.Cost != want || want == 0 || ev.PromptTokens != int(input+cache) || int64(ev.CachedTokens+ev.CacheCreationTokens) != cache ||
				ev.Dialect != "messages" || ev.UpstreamKeyID == nil {
				t.Fatalf("event %+v, want cost %s", ev, want)
			}
		}

		// The provider's refusal reaches the client in Anthropic's shape.
		anthropicError(t, g.message(key, `{"model":"`+claude+`","max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"nope","content":"x"}]}]}`, nil),
			400, "invalid_request_error", "unexpected `tool_use_id` found in `tool_result` blocks: nope")
	})
}

// Anthropic's own Go SDK, pointed at Sluice with a Sluice token, as
// Claude Code and any Anthropic client would be.
func TestAnthropicsSDKThroughSluice(t *testing.T) {
	g, key, _ := claudeEnv(t, testdb.SQLite(t))
	srv := httptest.NewServer(g.h)
	t.Cleanup(srv.Close)
	client := anthropic.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey(key), option.WithMaxRetries(0))
	ctx := context.Background()
	ask := anthropic.MessageNewParams{Model: claude, MaxTokens: 100,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("tell me about rivers"))}}

	msg, err := client.Messages.New(ctx, ask)
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Text != "mock reply to: tell me about rivers" || msg.StopReason != anthropic.StopReasonEndTurn ||
		msg.Usage.InputTokens == 0 || msg.Usage.OutputTokens == 0 || !strings.HasPrefix(msg.ID, "msg_") {
		t.Fatalf("message %s", msg.RawJSON())
	}

	// Streamed, accumulated as the SDK documents.
	stream := client.Messages.NewStreaming(ctx, ask)
	var acc anthropic.Message
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Content) != 1 || acc.Content[0].Text != msg.Content[0].Text || acc.StopReason != anthropic.StopReasonEndTurn ||
		acc.Usage.OutputTokens != msg.Usage.OutputTokens || acc.Usage.InputTokens != msg.Usage.InputTokens {
		t.Fatalf("accumulated %s", acc.RawJSON())
	}

	// A tool_use round trip, streamed: the tool call, then its result.
	tools := []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "lookup", Description: anthropic.String("looks rivers up"),
		InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"text": map[string]any{"type": "string"}}}}}}
	conv := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("find rivers"))}
	stream = client.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: claude, MaxTokens: 100, Tools: tools, Messages: conv})
	var call anthropic.Message
	for stream.Next() {
		if err := call.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if call.StopReason != anthropic.StopReasonToolUse || len(call.Content) != 1 || call.Content[0].Type != "tool_use" ||
		call.Content[0].Name != "lookup" || string(call.Content[0].Input) != `{"text":"find rivers"}` {
		t.Fatalf("tool call %s", call.RawJSON())
	}
	conv = append(conv, call.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(call.Content[0].ID, "the Nile", false)))
	answer, err := client.Messages.New(ctx, anthropic.MessageNewParams{Model: claude, MaxTokens: 100, Tools: tools, Messages: conv})
	if err != nil {
		t.Fatal(err)
	}
	if answer.Content[0].Text != "mock reply to tool result: the Nile" || answer.StopReason != anthropic.StopReasonEndTurn {
		t.Fatalf("after the tool %s", answer.RawJSON())
	}

	// Counting tokens, and the SDK reading Sluice's errors as Anthropic's.
	count, err := client.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: claude,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("tell me about rivers"))}})
	if err != nil || count.InputTokens == 0 {
		t.Fatalf("count %v %v", count, err)
	}
	bad := anthropic.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("sk_sluice_nope"), option.WithMaxRetries(0))
	_, err = bad.Messages.New(ctx, ask)
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || !strings.Contains(apiErr.Error(), "authentication_error") {
		t.Fatalf("bad key: %v", err)
	}
}

// An Anthropic key whose stream breaks off mid-answer: the client has
// what was said, then Anthropic's error event, and pays for what it got.
// messageStartUsage is the usage of a stream's message_start event.
func messageStartUsage(t *testing.T, stream string) map[string]int {
	t.Helper()
	_, data, ok := strings.Cut(stream, "event: message_start\ndata: ")
	if !ok {
		t.Fatalf("no message_start in %s", stream)
	}
	data, _, _ = strings.Cut(data, "\n")
	var ev struct {
		Message struct{ Usage map[string]int }
	}
	if err := json.Unmarshal([]byte(data), &ev); err != nil {
		t.Fatalf("message_start %s: %v", data, err)
	}
	return ev.Message.Usage
}

// TestABrokenProviderStreamEndsWithAnErrorEvent: an Anthropic key's
// stream that fails midway reaches the client with the provider's own
// error event; one that is cut without a word ends with Sluice's, never
// in silence.
func TestABrokenProviderStreamEndsWithAnErrorEvent(t *testing.T) {
	g := newGenEnv(t, testdb.SQLite(t))
	admin := g.login("admin@example.com", "admin-password")
	key, _ := g.apiToken(g.signup("a@example.com", "A"))
	failure := "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
	var ending atomic.Pointer[string] // how the stream ends, set before each request
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n"+
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"+
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"half an ans\"}}\n\n"+
			*ending.Load())
	}))
	t.Cleanup(broken.Close)
	if w := g.do(request{method: "POST", path: "/api/admin/upstreams", bearer: admin,
		body: `{"name":"broken","provider":"anthropic","base_url":"` + broken.URL + `","api_key":"sk-broken-key","models":["` + claude + `"]}`}); w.Code != 201 {
		t.Fatalf("add key: %d %s", w.Code, w.Body.String())
	}
	for _, tc := range []struct{ failure, want string }{
		{failure, `"error":{"type":"overloaded_error","message":"Overloaded"}`},
		{"", `"error":{"type":"overloaded_error","message":"the provider stopped sending; the answer is incomplete"}`},
		{"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":3}}",
			`"error":{"type":"overloaded_error","message":"the provider stopped sending; the answer is incomplete"}`},
	} {
		ending.Store(&tc.failure)
		w := g.message(key, `{"model":"`+claude+`","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
		names, text, _ := sseEvents(t, w.Body.String())
		if w.Code != 200 || text != "half an ans" || names[len(names)-1] != "error" || strings.Count(w.Body.String(), "event: error") != 1 ||
			!strings.Contains(w.Body.String(), tc.want) {
			t.Fatalf("%q: %d %v:\n%s", tc.failure, w.Code, names, w.Body.String())
		}
	}
}
