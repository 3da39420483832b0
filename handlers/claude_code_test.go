package handlers

import (
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// claudeCodeTurn is a request body as Claude Code sends it to
// {ANTHROPIC_BASE_URL}/v1/messages?beta=true, fields as it writes them:
// the system prompt as text blocks with cache_control, the user's turn as
// text blocks (a system reminder, then the prompt, marked for the cache),
// its tools (input schemas with $schema and additionalProperties), the
// session in metadata.user_id, max_tokens 32000 with a thinking budget of
// 31999, context_management keeping all thinking, and stream. MESSAGES
// and MODEL are replaced per turn.
const claudeCodeTurn = `{
 "model": "MODEL",
 "messages": MESSAGES,
 "system": [
  {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.", "cache_control": {"type": "ephemeral"}},
  {"type": "text", "text": "\nYou are an interactive CLI tool that helps users with software engineering tasks.\n<env>\nWorking directory: /work/demo\nPlatform: linux\n</env>", "cache_control": {"type": "ephemeral"}}
 ],
 "tools": [
  {"name": "Bash", "description": "Executes a given bash command in a persistent shell session.",
   "input_schema": {"type": "object", "properties": {"command": {"type": "string", "description": "The command to execute"},
    "timeout": {"type": "number", "description": "Optional timeout in milliseconds (max 600000)"},
    "description": {"type": "string", "description": "Clear, concise description of what this command does in 5-10 words"}},
    "required": ["command"], "additionalProperties": false, "$schema": "http://json-schema.org/draft-07/schema#"}},
  {"name": "Read", "description": "Reads a file from the local filesystem.",
   "input_schema": {"type": "object", "properties": {"file_path": {"type": "string", "description": "The absolute path to the file to read"},
    "offset": {"type": "number"}, "limit": {"type": "number"}}, "required": ["file_path"], "additionalProperties": false, "$schema": "http://json-schema.org/draft-07/schema#"}}
 ],
 "metadata": {"user_id": "user_5403497702fc957635738355ee9dbbc6e7aa51c76c8afff8c7f1a9ed4956977e_account__session_c92d09e6-c024-46be-bc8e-064e7cdabad6"},
 "max_tokens": 32000,
 "thinking": {"budget_tokens": 31999, "type": "enabled"},
 "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
 "stream": true
}`

// claudeCodeFirst is the user's first turn.
const claudeCodeFirst = `[{"role": "user", "content": [
  {"type": "text", "text": "<system-reminder>\nThis is a reminder that your todo list is currently empty. DO NOT mention this to the user explicitly.\n</system-reminder>"},
  {"type": "text", "text": "what does main.go print?", "cache_control": {"type": "ephemeral"}}]}]`

// claudeCodeHeaders are the headers Claude Code sends with its token in
// ANTHROPIC_AUTH_TOKEN (a Bearer token).
func claudeCodeHeaders(key string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + key, "anthropic-version": "2023-06-01",
		"anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,fine-grained-tool-streaming-2025-05-14",
		"anthropic-dangerous-direct-browser-access": "true", "x-app": "cli", "User-Agent": "claude-cli/2.0.31 (external, cli)",
		"x-stainless-lang": "js", "x-stainless-retry-count": "0", "Accept": "application/json"}
}

func claudeCodeBody(model, messages string) string {
	return strings.Replace(strings.Replace(claudeCodeTurn, "MODEL", model, 1), "MESSAGES", messages, 1)
}

func (g *genEnv) claudeCode(body string, hdr map[string]string) *httptest.ResponseRecorder {
	return g.do(request{method: "POST", path: "/v1/messages?beta=true", body: body, header: hdr})
}

// accumulate reads a Messages stream as Anthropic's Go SDK does, event by
// event into one message, and the events' names, with a delta's type
// after its event's (content_block_delta:thinking_delta) and a start's
// block type (content_block_start:thinking).
func accumulate(t *testing.T, stream string) (anthropic.Message, []string) {
	t.Helper()
	var msg anthropic.Message
	var names []string
	for _, raw := range strings.Split(strings.TrimSpace(stream), "\n\n") {
		name, data, ok := strings.Cut(raw, "\ndata: ")
		if !ok {
			t.Fatalf("not an event: %q", raw)
		}
		var ev anthropic.MessageStreamEventUnion
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		name = strings.TrimPrefix(name, "event: ")
		switch ev.Type {
		case "content_block_start":
			name += ":" + ev.ContentBlock.Type
		case "content_block_delta":
			name += ":" + ev.Delta.Type
		}
		names = append(names, name)
		if ev.Type == "error" {
			t.Fatalf("an error event: %s", data)
		}
		if err := msg.Accumulate(ev); err != nil {
			t.Fatalf("the SDK cannot accumulate %s: %v", data, err)
		}
	}
	return msg, names
}

// TestClaudeCodeThinksThroughAnAnthropicKey replays two turns of Claude
// Code with extended thinking on, to an Anthropic key on the mock: the
// request is taken whole; the stream has what the SDK needs, the thinking
// block with its signature before the tool call; the next turn sends the
// thinking block back with the tool's result, and Anthropic (which checks
// the signature, and refuses context_management without its beta) answers
// it; the thinking is billed as output, once; and the reservation is the
// prompt and max_tokens, which bound the thinking.
func TestClaudeCodeThinksThroughAnAnthropicKey(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		g, key, _ := claudeEnv(t, db)
		admin := g.login("admin@example.com", "admin-password")
		if w := g.do(request{method: "PUT", path: "/api/admin/tiers/free", bearer: admin, body: `{"tokens_per_minute":1000000}`}); w.Code != 200 {
			t.Fatalf("tier: %d %s", w.Code, w.Body.String())
		}
		hdr := claudeCodeHeaders(key)
		first := claudeCodeBody(claude, claudeCodeFirst)
		count := g.do(request{method: "POST", path: "/v1/messages/count_tokens?beta=true", body: first, header: hdr})
		var counted struct {
			InputTokens int64 `json:"input_tokens"`
		}
		if err := json.Unmarshal(count.Body.Bytes(), &counted); err != nil || count.Code != 200 || counted.InputTokens == 0 {
			t.Fatalf("count_tokens: %d %s", count.Code, count.Body.String())
		}

		w := g.claudeCode(first, hdr)
		if w.Code != 200 || w.Header().Get("Content-Type") != "text/event-stream" {
			t.Fatalf("Claude Code's turn: %d %s", w.Code, w.Body.String())
		}
		// What was reserved: the prompt and max_tokens, in which Anthropic
		// counts the thinking; the budget adds nothing to it.
		if got := w.Header().Get("anthropic-ratelimit-tokens-remaining"); got != strconv.FormatInt(1000000-counted.InputTokens-32000, 10) {
			t.Fatalf("tokens remaining %s after a prompt of %d and max_tokens 32000", got, counted.InputTokens)
		}
		msg, names := accumulate(t, w.Body.String())
		want := "message_start ping content_block_start:thinking content_block_delta:thinking_delta content_block_delta:thinking_delta content_block_delta:thinking_delta " +
			"content_block_delta:signature_delta content_block_stop content_block_start:tool_use content_block_delta:input_json_delta content_block_delta:input_json_delta " +
			"content_block_stop message_delta message_stop"
		if strings.Join(names, " ") != want {
			t.Fatalf("events %v:\n%s", names, w.Body.String())
		}
		if len(msg.Content) != 2 || msg.Content[0].Type != "thinking" || msg.Content[0].Thinking != "mock thinking about: what does main.go print?" ||
			msg.Content[0].Signature == "" || msg.Content[1].Type != "tool_use" || msg.Content[1].Name != "Bash" || msg.StopReason != anthropic.StopReasonToolUse {
			t.Fatalf("the message Claude Code reads: %s", msg.RawJSON())
		}
		firstUsage := usageOf(t, db, w)

		// The next turn: the assistant's message as the SDK makes it a
		// parameter (thinking block and signature included), then the
		// tool's result.
		assistant, _ := json.Marshal(msg.ToParam())
		result, _ := json.Marshal(anthropic.NewUserMessage(anthropic.NewToolResultBlock(msg.Content[1].ID, "hi", false)))
		second := claudeCodeBody(claude, strings.TrimSuffix(claudeCodeFirst, "]")+","+string(assistant)+","+string(result)+"]")
		w = g.claudeCode(second, hdr)
		next, _ := accumulate(t, w.Body.String())
		if w.Code != 200 || len(next.Content) != 2 || next.Content[0].Type != "thinking" || next.Content[1].Text != "mock reply to tool result: hi" ||
			next.StopReason != anthropic.StopReasonEndTurn {
			t.Fatalf("the turn after the tool: %d %s", w.Code, w.Body.String())
		}
		// Changed on its way, the block would not pass Anthropic.
		forged := strings.Replace(second, `"thinking":"mock thinking about: what does main.go print?"`, `"thinking":"mock thinking about: what does main.go say?"`, 1)
		if forged == second {
			t.Fatal("the thinking block was not sent back")
		}
		anthropicError(t, g.claudeCode(forged, hdr), 400, "invalid_request_error", "Invalid `signature` in `thinking` block")
		// The betas reach Anthropic: without them it refuses context_management.
		delete(hdr, "anthropic-beta")
		anthropicError(t, g.claudeCode(first, hdr), 400, "invalid_request_error", "context_management: Extra inputs are not permitted")

		// Billed as Anthropic bills: the thinking within the output tokens
		// (the reasoning part of them, priced as output), never on top.
		secondUsage := usageOf(t, db, w)
		for _, ev := range []models.UsageEvent{firstUsage, secondUsage} {
			price := func(s string) money.Price {
				p, _ := money.ParsePrice(s)
				return p
			}
			fresh := int64(ev.PromptTokens - ev.CachedTokens - ev.CacheCreationTokens)
			cost := price("3").Cost(fresh) + price("0.3").Cost(int64(ev.CachedTokens)) + price("3.75").Cost(int64(ev.CacheCreationTokens)) +
				price("15").Cost(int64(ev.CompletionTokens))
			if ev.ReasoningTokens == 0 || ev.ReasoningTokens >= ev.CompletionTokens || ev.CompletionTokens > 32000 || ev.Cost != cost || ev.Dialect != "messages" {
				t.Fatalf("billed %+v, want cost %s", ev, cost)
			}
		}
		if int64(firstUsage.CompletionTokens) != msg.Usage.OutputTokens || int64(secondUsage.CompletionTokens) != next.Usage.OutputTokens {
			t.Fatalf("billed %d and %d output tokens, the client was told %d and %d", firstUsage.CompletionTokens, secondUsage.CompletionTokens,
				msg.Usage.OutputTokens, next.Usage.OutputTokens)
		}
	})
}

// TestClaudeCodeThroughAnOpenAICompatibleModel replays the same turns to
// an OpenAI-compatible provider: it is sent a chat completion with the
// thinking budget as reasoning_effort and none of Anthropic's own fields;
// its reasoning comes back as a thinking block no one signed, which the
// next turn sends back and Sluice leaves out, as the provider has no
// input for it.
func TestClaudeCodeThroughAnOpenAICompatibleModel(t *testing.T) {
	db := testdb.SQLite(t)
	g := newGenEnv(t, db)
	p := &scriptedProvider{}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	admin := g.login("admin@example.com", "admin-password")
	g.addKey(t, admin, "scripted", srv.URL+"/v1", "sk-scripted-key")
	key, _ := g.apiToken(g.signup("a@example.com", "A"))
	hdr := claudeCodeHeaders(key)
	// The free tier's 20,000 tokens a minute hold no 32,000-token answer:
	// the thinking is part of what max_tokens reserves.
	anthropicError(t, g.claudeCode(claudeCodeBody("gpt-4o-mini", claudeCodeFirst), hdr), 400, "invalid_request_error",
		"its prompt and max_tokens), more than the free tier's 20000 tokens per minute")
	if w := g.do(request{method: "PUT", path: "/api/admin/tiers/free", bearer: admin, body: `{"tokens_per_minute":1000000}`}); w.Code != 200 {
		t.Fatalf("tier: %d %s", w.Code, w.Body.String())
	}

	p.answers = append(p.answers, sseAnswer(false,
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":"The user asks about "},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"reasoning_content":"main.go."},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"Read","arguments":"{\"file_path\":\"/work/demo/main.go\"}"}}]},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":700,"completion_tokens":40,"completion_tokens_details":{"reasoning_tokens":12}}}`))
	w := g.claudeCode(claudeCodeBody("gpt-4o-mini", claudeCodeFirst), hdr)
	msg, _ := accumulate(t, w.Body.String())
	if w.Code != 200 || len(msg.Content) != 2 || msg.Content[0].Type != "thinking" || msg.Content[0].Thinking != "The user asks about main.go." ||
		msg.Content[0].Signature != "" || msg.Content[1].Name != "Read" || msg.StopReason != anthropic.StopReasonToolUse {
		t.Fatalf("%d %s", w.Code, w.Body.String())
	}
	var sent map[string]json.RawMessage
	if err := json.Unmarshal([]byte(p.last()), &sent); err != nil {
		t.Fatal(err)
	}
	if string(sent["reasoning_effort"]) != `"high"` || string(sent["user"]) != `"user_5403497702fc957635738355ee9dbbc6e7aa51c76c8afff8c7f1a9ed4956977e_account__session_c92d09e6-c024-46be-bc8e-064e7cdabad6"` {
		t.Fatalf("the provider was sent %s", p.last())
	}
	for _, field := range []string{"thinking", "context_management", "anthropic_beta", "metadata", "system"} {
		if _, ok := sent[field]; ok {
			t.Errorf("the provider was sent %s, which chat completions has not: %s", field, p.last())
		}
	}
	if got := usageOf(t, db, w); got.PromptTokens != 700 || got.CompletionTokens != 40 || got.ReasoningTokens != 12 {
		t.Fatalf("billed %+v", got)
	}

	// The next turn sends the unsigned thinking block back; the provider
	// gets the conversation without it.
	assistant, _ := json.Marshal(msg.ToParam())
	result, _ := json.Marshal(anthropic.NewUserMessage(anthropic.NewToolResultBlock("call_1", "package main", false)))
	p.answers = append(p.answers, sseAnswer(false,
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":"It prints hi."},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":760,"completion_tokens":5}}`))
	w = g.claudeCode(claudeCodeBody("gpt-4o-mini", strings.TrimSuffix(claudeCodeFirst, "]")+","+string(assistant)+","+string(result)+"]"), hdr)
	if next, _ := accumulate(t, w.Body.String()); w.Code != 200 || next.Content[0].Text != "It prints hi." {
		t.Fatalf("the next turn: %d %s", w.Code, w.Body.String())
	}
	if body := p.last(); strings.Contains(body, "thinking") || !strings.Contains(body, `"tool_calls":[{"id":"call_1","type":"function","function":{"name":"Read"`) ||
		!strings.Contains(body, `{"role":"tool","content":[{"type":"text","text":"package main"}],"tool_call_id":"call_1"}`) {
		t.Fatalf("the next turn sent %s", body)
	}

	// Newer Claude Code asks an unknown model for adaptive thinking at
	// Anthropic's default effort: the model's own default, nothing sent.
	p.answers = append(p.answers, sseAnswer(false, `{"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}`))
	adaptive := strings.Replace(claudeCodeBody("gpt-4o-mini", claudeCodeFirst), `"thinking": {"budget_tokens": 31999, "type": "enabled"}`,
		`"thinking": {"type": "adaptive"}, "output_config": {"effort": "high"}`, 1)
	if w := g.claudeCode(adaptive, hdr); w.Code != 200 || strings.Contains(p.last(), "reasoning_effort") || strings.Contains(p.last(), "thinking") {
		t.Fatalf("adaptive: %d %s; sent %s", w.Code, w.Body.String(), p.last())
	}
}
