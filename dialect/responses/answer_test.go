package responses

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

var testMeta = Meta{ID: "resp_abc", CreatedAt: time.Unix(1_700_000_000, 0), Now: func() time.Time { return time.Unix(1_700_000_002, 0) }}

func mustDecode(t *testing.T, body string) *Request {
	t.Helper()
	r, err := Decode([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestResponseOfAChatCompletion(t *testing.T) {
	req := `{"model":"m","instructions":"be kind","input":"hi","max_output_tokens":50,"temperature":0.2,"metadata":{"k":"v"},
		"tools":[{"type":"function","name":"weather","parameters":{"type":"object"}}],"tool_choice":"auto","store":false,"previous_response_id":"resp_prev"}`
	cases := []struct {
		name, completion string
		want             string // the Response object
	}{
		{"text, with usage in the Responses API's terms",
			`{"id":"chatcmpl-1","object":"chat.completion","model":"m-2024","choices":[{"index":0,"message":{"role":"assistant","content":"Hello!"},"finish_reason":"stop"}],
			  "usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":1}}}`,
			`{"id":"resp_abc","object":"response","created_at":1700000000,"status":"completed","background":false,"completed_at":1700000002,
			  "error":null,"incomplete_details":null,"instructions":"be kind","max_output_tokens":50,"max_tool_calls":null,"model":"m",
			  "output":[{"type":"message","id":"msg_abc","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hello!","annotations":[],"logprobs":[]}]}],
			  "parallel_tool_calls":true,"previous_response_id":"resp_prev","prompt_cache_key":null,"reasoning":{"effort":null,"summary":null},
			  "safety_identifier":null,"service_tier":"default","store":false,"temperature":0.2,"text":{"format":{"type":"text"}},"tool_choice":"auto",
			  "tools":[{"type":"function","name":"weather","parameters":{"type":"object"}}],"top_logprobs":0,"top_p":1,"truncation":"disabled",
			  "usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":4},"output_tokens":3,"output_tokens_details":{"reasoning_tokens":1},"total_tokens":15},
			  "user":null,"metadata":{"k":"v"}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, err := mustDecode(t, req).Response(testMeta, []byte(c.completion))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(resp)
			if !sameJSON(t, b, c.want) {
				t.Fatalf("response\n got %s\nwant %s", b, c.want)
			}
		})
	}
}

// outputOf is a response's status, incomplete reason and output items.
func outputOf(t *testing.T, resp Response) string {
	t.Helper()
	b, _ := json.Marshal(struct {
		Status     string             `json:"status"`
		Incomplete *IncompleteDetails `json:"incomplete_details"`
		Output     []OutputItem       `json:"output"`
	}{resp.Status, resp.IncompleteDetails, resp.Output})
	return string(b)
}

func TestResponseOutputItems(t *testing.T) {
	cases := []struct {
		name, completion, want string
	}{
		{"function calls alone: no message",
			`{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[
				{"id":"call_1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Oslo\"}"}},
				{"id":"call_2","type":"function","function":{"name":"time","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
			`{"status":"completed","incomplete_details":null,"output":[
				{"type":"function_call","id":"fc_abc_0","status":"completed","call_id":"call_1","name":"weather","arguments":"{\"city\":\"Oslo\"}"},
				{"type":"function_call","id":"fc_abc_1","status":"completed","call_id":"call_2","name":"time","arguments":"{}"}]}`},
		{"text and a call",
			`{"choices":[{"message":{"content":"Let me look.","tool_calls":[{"id":"call_1","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
			`{"status":"completed","incomplete_details":null,"output":[
				{"type":"message","id":"msg_abc","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Let me look.","annotations":[],"logprobs":[]}]},
				{"type":"function_call","id":"fc_abc_0","status":"completed","call_id":"call_1","name":"f","arguments":"{}"}]}`},
		{"cut by max_output_tokens: incomplete",
			`{"choices":[{"message":{"content":"Once upon"},"finish_reason":"length"}]}`,
			`{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[
				{"type":"message","id":"msg_abc","status":"incomplete","role":"assistant","content":[{"type":"output_text","text":"Once upon","annotations":[],"logprobs":[]}]}]}`},
		{"filtered: incomplete",
			`{"choices":[{"message":{"content":""},"finish_reason":"content_filter"}]}`,
			`{"status":"incomplete","incomplete_details":{"reason":"content_filter"},"output":[
				{"type":"message","id":"msg_abc","status":"incomplete","role":"assistant","content":[{"type":"output_text","text":"","annotations":[],"logprobs":[]}]}]}`},
		{"a refusal",
			`{"choices":[{"message":{"content":null,"refusal":"I can't help with that."},"finish_reason":"stop"}]}`,
			`{"status":"completed","incomplete_details":null,"output":[
				{"type":"message","id":"msg_abc","status":"completed","role":"assistant","content":[{"type":"refusal","refusal":"I can't help with that."}]}]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, err := mustDecode(t, `{"model":"m","input":"hi"}`).Response(testMeta, []byte(c.completion))
			if err != nil {
				t.Fatal(err)
			}
			if got := outputOf(t, resp); !sameJSON(t, []byte(got), c.want) {
				t.Fatalf("\n got %s\nwant %s", got, c.want)
			}
			if resp.Usage != nil {
				t.Errorf("a completion without usage got usage %+v", resp.Usage)
			}
		})
	}
	if _, err := mustDecode(t, `{"model":"m","input":"hi"}`).Response(testMeta, []byte(`{"choices":[]}`)); err != ErrUnreadable {
		t.Fatalf("a completion without choices: %v", err)
	}
}

func TestConversationKeepsInputAndAnswer(t *testing.T) {
	r := mustDecode(t, `{"model":"m","instructions":"not kept","input":[{"role":"user","content":"weather?"}]}`)
	resp, err := r.Response(testMeta, []byte(`{"choices":[{"message":{"content":"Checking.","tool_calls":[{"id":"call_1","function":{"name":"weather","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	history := []json.RawMessage{json.RawMessage(`{"role":"user","content":"hi"}`), json.RawMessage(`{"role":"assistant","content":"hello"}`)}
	got := r.Conversation(history, resp)
	want := `[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"weather?"},
		{"role":"assistant","content":"Checking.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"weather","arguments":"{}"}}]}]`
	if !sameJSON(t, got, want) {
		t.Fatalf("\n got %s\nwant %s", got, want)
	}
	// Continued, the stored conversation comes after the new
	// instructions and before the new input.
	next := mustDecode(t, `{"model":"m","instructions":"new","input":[{"type":"function_call_output","call_id":"call_1","output":"rain"}],"previous_response_id":"resp_abc"}`)
	var stored []json.RawMessage
	if err := json.Unmarshal(got, &stored); err != nil {
		t.Fatal(err)
	}
	body := next.ChatBody(stored)
	if !strings.Contains(string(body), `"messages":[{"role":"system","content":"new"},{"role":"user","content":"hi"}`) ||
		strings.Contains(string(body), "not kept") || !strings.HasSuffix(string(body), `{"role":"tool","content":"rain","tool_call_id":"call_1"}]}`) {
		t.Fatalf("continuation: %s", body)
	}
}

// A reasoning summary asked for is echoed, as OpenAI echoes it, though
// chat completions makes none: the output has no reasoning item.
func TestResponseEchoesTheReasoningAskedFor(t *testing.T) {
	resp, err := mustDecode(t, `{"model":"m","input":"hi","reasoning":{"effort":"high","summary":"auto"},"include":["reasoning.encrypted_content"]}`).
		Response(testMeta, []byte(`{"choices":[{"message":{"content":"Hi."},"finish_reason":"stop"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(resp)
	if !strings.Contains(string(b), `"reasoning":{"effort":"high","summary":"auto"}`) || len(resp.Output) != 1 || resp.Output[0].Type != "message" {
		t.Fatalf("response: %s", b)
	}
}
