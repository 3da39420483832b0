package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/sluicehq/sluice/apperr"
)

func TestThinkingReachesAnthropicExactly(t *testing.T) {
	for _, tc := range []struct {
		name, chat, want string
		betas            []string
	}{
		{"thinking, context management and the betas as they came; an effort as output_config",
			`{"model":"claude-x","max_tokens":32000,"thinking":{"budget_tokens":31999,"type":"enabled","display":"omitted"},"reasoning_effort":"max",
			  "context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},"anthropic_beta":["interleaved-thinking-2025-05-14","context-management-2025-06-27"],
			  "messages":[{"role":"user","content":"x"}]}`,
			`{"model":"claude-x","max_tokens":32000,"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],
			  "thinking":{"budget_tokens":31999,"type":"enabled","display":"omitted"},"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},
			  "output_config":{"effort":"max"}}`,
			[]string{"interleaved-thinking-2025-05-14", "context-management-2025-06-27"}},
		{"a json_schema response_format is output_config.format, beside the effort",
			`{"model":"m","max_tokens":10,"reasoning_effort":"low","response_format":{"type":"json_schema","json_schema":{"name":"output","strict":true,"schema":{"type":"object"}}},"messages":[{"role":"user","content":"x"}]}`,
			`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"output_config":{"effort":"low","format":{"type":"json_schema","schema":{"type":"object"}}}}`, nil},
		{"an assistant message's thinking blocks open its turn, unchanged, before its text and tool calls",
			`{"model":"m","max_tokens":10,"thinking":{"type":"adaptive"},"messages":[{"role":"user","content":"weather?"},
			  {"role":"assistant","content":[{"type":"text","text":"checking"}],"tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"weather","arguments":"{}"}}],
			   "thinking_blocks":[{"type":"thinking","thinking":"Let me <check>.","signature":"c2ln+/="},{"type":"redacted_thinking","data":"ZW5j"}]},
			  {"role":"tool","tool_call_id":"toolu_1","content":"rain"}]}`,
			`{"model":"m","max_tokens":10,"thinking":{"type":"adaptive"},"messages":[{"role":"user","content":[{"type":"text","text":"weather?"}]},
			  {"role":"assistant","content":[{"type":"thinking","thinking":"Let me <check>.","signature":"c2ln+/="},{"type":"redacted_thinking","data":"ZW5j"},
			   {"type":"text","text":"checking"},{"type":"tool_use","id":"toolu_1","name":"weather","input":{}}]},
			  {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"rain"}]}]}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, betas, err := anthropicRequest([]byte(tc.chat))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(jsonOf(t, string(got)), jsonOf(t, tc.want)) || !reflect.DeepEqual(betas, tc.betas) {
				t.Fatalf("\n got %s %q\nwant %s %q", got, betas, tc.want, tc.betas)
			}
		})
	}
	for _, tc := range []struct{ body, param, message string }{
		{`{"model":"m","reasoning_effort":"none","messages":[{"role":"user","content":"x"}]}`, "reasoning_effort", "reasoning_effort 'none' (use low, medium, high, xhigh or max)"},
		{`{"model":"m","anthropic_beta":["a,b"],"messages":[{"role":"user","content":"x"}]}`, "anthropic_beta[0]", "an anthropic-beta value is a name"},
	} {
		_, _, err := anthropicRequest([]byte(tc.body))
		var e *apperr.Error
		if !errors.As(err, &e) || e.Param != tc.param || !strings.Contains(e.Message, tc.message) {
			t.Errorf("%s: %v, want a 400 naming %s", tc.body, err, tc.param)
		}
	}
}

func TestAnthropicsThinkingComesBackInTheChatForm(t *testing.T) {
	f := anthropicFormat{now: func() time.Time { return time.Unix(1700000000, 0) }}
	got, err := f.answer(Request{}, []byte(`{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[
		{"type":"thinking","thinking":"Rain is likely.","signature":"sig-1"},{"type":"redacted_thinking","data":"ZW5j"},
		{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"weather","input":{"city":"Oslo"}}],
		"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":40,"output_tokens_details":{"thinking_tokens":25}}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"msg_1","object":"chat.completion","created":1700000000,"model":"claude-x","choices":[{"index":0,"message":{"role":"assistant","content":"Checking.",
		"tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Oslo\"}"}}],"reasoning_content":"Rain is likely.",
		"thinking_blocks":[{"type":"thinking","thinking":"Rain is likely.","signature":"sig-1"},{"type":"redacted_thinking","data":"ZW5j"}]},"finish_reason":"tool_calls"}],
		"usage":{"prompt_tokens":10,"completion_tokens":40,"total_tokens":50,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":25},"cache_creation_input_tokens":0}}`
	if !reflect.DeepEqual(jsonOf(t, string(got)), jsonOf(t, want)) {
		t.Fatalf("\n got %s\nwant %s", got, want)
	}
	// Thinking is output: billed within the completion, never on top.
	c, _ := ReadCompletion(got)
	if c.Usage.CompletionTokens != 40 || c.Usage.ReasoningTokens != 25 || c.Reply != "Checking." {
		t.Fatalf("read %+v", c)
	}
}

// thinkingEvents is an Anthropic stream with thinking: a thinking block
// (text in two deltas, then its signature), a redacted one, text, a tool
// call, and the usage with its thinking.
const thinkingEvents = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-x\",\"content\":[],\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n" +
	"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n" +
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Rain is \"}}\n\n" +
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"likely, 雨.\"}}\n\n" +
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"sig/1+=\"}}\n\n" +
	"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
	"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"redacted_thinking\",\"data\":\"ZW5j\"}}\n\n" +
	"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n" +
	"event: ping\ndata: {\"type\":\"ping\"}\n\n" +
	"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"text_delta\",\"text\":\"Checking.\"}}\n\n" +
	"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n" +
	"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":3,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"weather\",\"input\":{}}}\n\n" +
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\n" +
	"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":3}\n\n" +
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":40,\"output_tokens_details\":{\"thinking_tokens\":25}}}\n\n" +
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

func translateAnthropicStream(t *testing.T, r io.Reader) (string, *UsageTap) {
	t.Helper()
	f := anthropicFormat{now: func() time.Time { return time.Unix(1700000000, 0) }}
	tap := NewUsageTap(f.stream(Request{}, io.NopCloser(r)))
	out, err := io.ReadAll(tap)
	if err != nil {
		t.Fatal(err)
	}
	return string(out), tap
}

func TestAnAnthropicThinkingStreamReadsAsChunks(t *testing.T) {
	whole, tap := translateAnthropicStream(t, strings.NewReader(thinkingEvents))
	const head = `{"id":"msg_1","object":"chat.completion.chunk","created":1700000000,"model":"claude-x","choices":[{"index":0,"delta":`
	for _, want := range []string{
		head + `{"content":null,"reasoning_content":"Rain is "},"finish_reason":null}]}`,
		head + `{"content":null,"reasoning_content":"likely, 雨."},"finish_reason":null}]}`,
		head + `{"content":null,"thinking_blocks":[{"type":"thinking","thinking":"","signature":"sig/1+="}]},"finish_reason":null}]}`,
		head + `{"content":null,"thinking_blocks":[{"type":"redacted_thinking","data":"ZW5j"}]},"finish_reason":null}]}`,
		head + `{"content":"Checking."},"finish_reason":null}]}`,
		`"usage":{"prompt_tokens":10,"completion_tokens":40,"total_tokens":50,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":25},"cache_creation_input_tokens":0}`,
	} {
		if !strings.Contains(whole, want) {
			t.Fatalf("no %s in\n%s", want, whole)
		}
	}
	u, final := tap.Usage()
	if !final || u.CompletionTokens != 40 || u.ReasoningTokens != 25 || tap.Reasoning() != "Rain is likely, 雨." || tap.Delivered() != "Checking.{}" {
		t.Fatalf("usage %+v, reasoning %q, delivered %q", u, tap.Reasoning(), tap.Delivered())
	}
	// The same chunks whatever pieces the events arrive in.
	if got, _ := translateAnthropicStream(t, iotest.OneByteReader(strings.NewReader(thinkingEvents))); got != whole {
		t.Fatalf("a byte at a time:\n%s", got)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100 {
		var offsets []int
		for at := 1 + rng.IntN(60); at < len(thinkingEvents); at += 1 + rng.IntN(60) {
			offsets = append(offsets, at)
		}
		if got, _ := translateAnthropicStream(t, cut([]byte(thinkingEvents), offsets...)); got != whole {
			t.Fatalf("split at %v:\n%s", offsets, got)
		}
	}
}

// Through the pool to the mock's Anthropic speaker: thinking asked for is
// thinking answered, signed; the betas reach Anthropic; the thinking
// blocks sent back with a tool's result pass Anthropic's checks only when
// unchanged, and a budget max_tokens does not bound is refused there too.
func TestThinkingRoundTripsThroughAnAnthropicKey(t *testing.T) {
	c := newClock()
	m := newAnthropicMock(t, c.Now, 0)
	p, _ := testPool(t, PoolOptions{Now: c.Now}, anthropicKey(m.url))
	const tools = `"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{"text":{"type":"string"}}}}}]`
	const ask = `{"model":"claude-sonnet-4-5","max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":1024},"anthropic_beta":["interleaved-thinking-2025-05-14"],` + tools
	resp, err := p.Do(context.Background(), messagesRequest(ask+`,"messages":[{"role":"user","content":"find rivers"}]}`, false))
	if err != nil || resp.Status != 200 {
		t.Fatalf("%v %+v", err, resp)
	}
	if got := m.seen[0].Header.Get("anthropic-beta"); got != "interleaved-thinking-2025-05-14" {
		t.Fatalf("anthropic-beta %q", got)
	}
	var answer struct {
		Choices []struct {
			Message json.RawMessage `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(resp.Body, &answer); err != nil {
		t.Fatal(err)
	}
	var msg struct {
		ToolCalls []struct {
			ID string `json:"id"`
		} `json:"tool_calls"`
		ReasoningContent string          `json:"reasoning_content"`
		ThinkingBlocks   json.RawMessage `json:"thinking_blocks"`
	}
	_ = json.Unmarshal(answer.Choices[0].Message, &msg)
	if msg.ReasoningContent != "mock thinking about: find rivers" || len(msg.ToolCalls) != 1 || !bytes.Contains(msg.ThinkingBlocks, []byte(`"signature":"`)) {
		t.Fatalf("answer %s", resp.Body)
	}
	next := func(blocks string) *Response {
		t.Helper()
		body := ask + `,"messages":[{"role":"user","content":"find rivers"},{"role":"assistant","content":null,"thinking_blocks":` + blocks + `,
			"tool_calls":[{"id":"` + msg.ToolCalls[0].ID + `","type":"function","function":{"name":"lookup","arguments":"{\"text\":\"find rivers\"}"}}]},
			{"role":"tool","tool_call_id":"` + msg.ToolCalls[0].ID + `","content":"the Nile"}]}`
		resp, err := p.Do(context.Background(), messagesRequest(body, false))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if resp := next(string(msg.ThinkingBlocks)); resp.Status != 200 || !strings.Contains(string(resp.Body), "mock reply to tool result: the Nile") ||
		!strings.Contains(string(resp.Body), `"reasoning_content":"mock thinking about: the tool result the Nile"`) {
		t.Fatalf("with its thinking sent back: %d %s", resp.Status, resp.Body)
	}
	changed := strings.Replace(string(msg.ThinkingBlocks), "find rivers", "find lakes", 1)
	if resp := next(changed); resp.Status != 400 || !strings.Contains(string(resp.Body), "Invalid `signature` in `thinking` block") {
		t.Fatalf("a changed block: %d %s", resp.Status, resp.Body)
	}
	if resp := next(`[]`); resp.Status != 400 || !strings.Contains(string(resp.Body), "a final `assistant` message must start with a thinking block") {
		t.Fatalf("no thinking sent back: %d %s", resp.Status, resp.Body)
	}
	resp, _ = p.Do(context.Background(), messagesRequest(`{"model":"claude-sonnet-4-5","max_tokens":1024,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"x"}]}`, false))
	if resp.Status != 400 || !strings.Contains(string(resp.Body), "`max_tokens` must be greater than `thinking.budget_tokens`") {
		t.Fatalf("a budget max_tokens does not bound: %d %s", resp.Status, resp.Body)
	}
}
