package messages

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/apperr"
)

// canonical re-encodes a JSON text so two can be compared whatever their
// spacing and key order.
func canonical(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, s)
	}
	return v
}

func TestToChatTranslatesEachFeature(t *testing.T) {
	for _, tc := range []struct {
		name, body, chat string
		opts             Options
	}{
		{"a string prompt and a system string",
			`{"model":"claude-x","max_tokens":100,"system":"be brief","messages":[{"role":"user","content":"hi <b>"}]}`,
			`{"model":"claude-x","max_tokens":100,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi <b>"}]}`, Options{}},
		{"system blocks keep their cache_control",
			`{"model":"m","max_tokens":1,"system":[{"type":"text","text":"a"},{"type":"text","text":"b","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"q"}]}`,
			`{"model":"m","max_tokens":1,"messages":[{"role":"system","content":[{"type":"text","text":"a"},{"type":"text","text":"b","cache_control":{"type":"ephemeral"}}]},{"role":"user","content":"q"}]}`, Options{}},
		{"images inline and by address",
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"what is it"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBOR"}},{"type":"image","source":{"type":"url","url":"https://x.example/a.jpg"}}]}]}`,
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"what is it"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBOR"}},{"type":"image_url","image_url":{"url":"https://x.example/a.jpg"}}]}]}`, Options{}},
		{"tool use and tool results, the user's text after them",
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"weather?"},
			  {"role":"assistant","content":[{"type":"text","text":"checking"},{"type":"tool_use","id":"toolu_1","name":"weather","input":{ "city" : "Oslo" }},{"type":"tool_use","id":"toolu_2","name":"time","input":{}}]},
			  {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"rain"},{"type":"tool_result","tool_use_id":"toolu_2","is_error":true,"content":[{"type":"text","text":"no clock"}]},{"type":"text","text":"and so?"}]}]}`,
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"weather?"},
			  {"role":"assistant","content":[{"type":"text","text":"checking"}],"tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Oslo\"}"}},{"id":"toolu_2","type":"function","function":{"name":"time","arguments":"{}"}}]},
			  {"role":"tool","tool_call_id":"toolu_1","content":"rain"},
			  {"role":"tool","tool_call_id":"toolu_2","is_error":true,"content":[{"type":"text","text":"no clock"}]},
			  {"role":"user","content":[{"type":"text","text":"and so?"}]}]}`, Options{}},
		{"an assistant turn of tool calls alone has no content",
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","cache_control":{"type":"ephemeral"}}]}]}`,
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"t","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"t","content":[{"type":"text","text":"","cache_control":{"type":"ephemeral"}}]}]}`, Options{}},
		{"tools, a named tool choice without parallel calls",
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"weather","description":"the weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}},"cache_control":{"type":"ephemeral"}}],"tool_choice":{"type":"tool","name":"weather","disable_parallel_tool_use":true}}`,
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"weather","description":"the weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}},"cache_control":{"type":"ephemeral"}}],"tool_choice":{"type":"function","function":{"name":"weather"}},"parallel_tool_calls":false}`, Options{}},
		{"tool choice any is chat's required",
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"any"}}`,
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tool_choice":"required"}`, Options{}},
		{"sampling, stops, the user and a stream that asks for usage",
			`{"model":"m","max_tokens":9,"temperature":0.5,"top_p":0.9,"top_k":40,"stop_sequences":["END"],"metadata":{"user_id":"u-1"},"stream":true,"messages":[{"role":"user","content":"x"}]}`,
			`{"model":"m","max_tokens":9,"temperature":0.5,"top_p":0.9,"top_k":40,"stop":["END"],"user":"u-1","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`, Options{}},
		{"the bound in the field the model's family takes",
			`{"model":"gpt-5","max_tokens":9,"messages":[{"role":"user","content":"x"}]}`,
			`{"model":"gpt-5","max_completion_tokens":9,"messages":[{"role":"user","content":"x"}]}`,
			Options{BoundField: func(string) string { return "max_completion_tokens" }}},
		{"thinking, its effort, context management and the betas ride as the chat body's extensions",
			`{"model":"claude-x","max_tokens":32000,"thinking":{ "budget_tokens" : 31999, "type":"enabled"},"output_config":{"effort":"low"},
			  "context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},"messages":[{"role":"user","content":"x"}]}`,
			`{"model":"claude-x","max_tokens":32000,"thinking":{"budget_tokens":31999,"type":"enabled"},"reasoning_effort":"low",
			  "context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},"anthropic_beta":["interleaved-thinking-2025-05-14","context-management-2025-06-27"],
			  "messages":[{"role":"user","content":"x"}]}`,
			Options{Betas: []string{"interleaved-thinking-2025-05-14", "context-management-2025-06-27"}}},
		{"a structured output as a strict json_schema response_format, beside its effort",
			`{"model":"m","max_tokens":5,"output_config":{"effort":"medium","format":{"type":"json_schema","schema":{"type":"object","properties":{"title":{"type":"string"}},"required":["title"],"additionalProperties":false}}},"messages":[{"role":"user","content":"x"}]}`,
			`{"model":"m","max_tokens":5,"reasoning_effort":"medium","response_format":{"type":"json_schema","json_schema":{"name":"output","strict":true,
			  "schema":{"type":"object","properties":{"title":{"type":"string"}},"required":["title"],"additionalProperties":false}}},"messages":[{"role":"user","content":"x"}]}`, Options{}},
		{"adaptive thinking at Anthropic's default effort, which is left out",
			`{"model":"m","max_tokens":5,"thinking":{"type":"adaptive","display":"omitted"},"output_config":{"effort":"high"},"messages":[{"role":"user","content":"x"}]}`,
			`{"model":"m","max_tokens":5,"thinking":{"type":"adaptive","display":"omitted"},"messages":[{"role":"user","content":"x"}]}`, Options{}},
		{"with interleaved thinking a budget may pass max_tokens: it spans a turn's answers",
			`{"model":"m","max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":8000},"messages":[{"role":"user","content":"x"}]}`,
			`{"model":"m","max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":8000},"anthropic_beta":["interleaved-thinking-2025-05-14"],"messages":[{"role":"user","content":"x"}]}`,
			Options{Betas: []string{"interleaved-thinking-2025-05-14"}}},
		{"an assistant turn's thinking blocks, signed and redacted, go back unchanged ahead of its text and tool calls",
			`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"weather?"},
			  {"role":"assistant","content":[{"type":"thinking","thinking":"Let me <check>.","signature":"c2ln+/="},{"type":"redacted_thinking","data":"ZW5j"},{"type":"text","text":"checking"},{"type":"tool_use","id":"toolu_1","name":"weather","input":{}}]},
			  {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"rain"}]},
			  {"role":"assistant","content":[{"type":"thinking","thinking":"","signature":"omitted-sig"}]}]}`,
			`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"weather?"},
			  {"role":"assistant","content":[{"type":"text","text":"checking"}],"tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"weather","arguments":"{}"}}],
			   "thinking_blocks":[{"type":"thinking","thinking":"Let me <check>.","signature":"c2ln+/="},{"type":"redacted_thinking","data":"ZW5j"}]},
			  {"role":"tool","tool_call_id":"toolu_1","content":"rain"},
			  {"role":"assistant","content":"","thinking_blocks":[{"type":"thinking","thinking":"","signature":"omitted-sig"}]}]}`, Options{}},
		{"count_tokens needs no max_tokens and reads no stream",
			`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}]}`, Options{CountOnly: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := ToChat([]byte(tc.body), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := canonical(t, string(tr.Chat)), canonical(t, tc.chat); !reflect.DeepEqual(got, want) {
				t.Fatalf("chat body\n got %s\nwant %s", tr.Chat, tc.chat)
			}
			if strings.Contains(string(tr.Chat), `\u003c`) {
				t.Fatalf("HTML-escaped: %s", tr.Chat)
			}
		})
	}
}

func TestToChatSaysWhereEachMessageCameFrom(t *testing.T) {
	tr, err := ToChat([]byte(`{"model":"m","max_tokens":1,"system":"s","messages":[{"role":"user","content":"a"},
		{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"r"},{"type":"image","source":{"type":"url","url":"https://x"}}]}]}`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"system", "messages.0", "messages.1", "messages.2", "messages.2"}
	if !reflect.DeepEqual(tr.Origins, want) || tr.FirstImage != "messages.2.content.1" {
		t.Fatalf("origins %v, first image %q", tr.Origins, tr.FirstImage)
	}
	if p := tr.Param("messages[4].content[0]"); p != "messages.2.content" {
		t.Fatalf("param %q", p)
	}
}

func TestToChatRefusesWhatItCannotCarry(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"x"}]`
	for _, tc := range []struct{ name, body, param, message string }{
		{"max_tokens is required", `{"model":"m",` + msgs + `}`, "max_tokens", "max_tokens: Field required"},
		{"model is required", `{"max_tokens":5,` + msgs + `}`, "model", "model: Field required"},
		{"messages are required", `{"model":"m","max_tokens":5}`, "messages", "messages: Field required"},
		{"messages may not be empty", `{"model":"m","max_tokens":5,"messages":[]}`, "messages", "messages: at least one message is required"},
		{"max_tokens is at least 1", `{"model":"m","max_tokens":0,` + msgs + `}`, "max_tokens", "max_tokens: Input should be greater than or equal to 1"},
		{"max_tokens is an integer", `{"model":"m","max_tokens":1.5,` + msgs + `}`, "max_tokens", "max_tokens: Input should be a valid integer"},
		{"an unknown field is refused, not dropped", `{"model":"m","max_tokens":5,"frobnicate":1,` + msgs + `}`, "frobnicate", "frobnicate: Extra inputs are not permitted"},
		{"names are case-sensitive", `{"model":"m","MAX_TOKENS":5,` + msgs + `}`, "MAX_TOKENS", "MAX_TOKENS: Extra inputs are not permitted"},
		{"a name given twice", `{"model":"m","max_tokens":5,"max_tokens":6,` + msgs + `}`, "max_tokens", "max_tokens: given twice; send it once"},
		{"a thinking budget below Anthropic's least", `{"model":"m","max_tokens":5000,"thinking":{"type":"enabled","budget_tokens":1000},` + msgs + `}`,
			"thinking.budget_tokens", "thinking.budget_tokens: Input should be greater than or equal to 1024"},
		{"a thinking budget max_tokens does not bound", `{"model":"m","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":2048},` + msgs + `}`,
			"thinking.budget_tokens", "thinking.budget_tokens: must be less than max_tokens (2048)"},
		{"enabled thinking without its budget", `{"model":"m","max_tokens":5,"thinking":{"type":"enabled"},` + msgs + `}`, "thinking.budget_tokens", "thinking.budget_tokens: Field required"},
		{"a budget for adaptive thinking", `{"model":"m","max_tokens":5,"thinking":{"type":"adaptive","budget_tokens":2000},` + msgs + `}`,
			"thinking.budget_tokens", "Extra inputs are not permitted when thinking.type is 'adaptive'"},
		{"a thinking type Anthropic does not have", `{"model":"m","max_tokens":5,"thinking":{"type":"deep"},` + msgs + `}`, "thinking.type", "thinking.type: Input should be 'enabled', 'adaptive' or 'disabled'"},
		{"a display Anthropic does not have", `{"model":"m","max_tokens":5,"thinking":{"type":"adaptive","display":"full"},` + msgs + `}`, "thinking.display", "Input should be 'summarized' or 'omitted'"},
		{"an unknown field of thinking", `{"model":"m","max_tokens":5,"thinking":{"type":"adaptive","depth":3},` + msgs + `}`, "thinking.depth", "thinking.depth: Extra inputs are not permitted"},
		{"an effort Anthropic does not have", `{"model":"m","max_tokens":5,"output_config":{"effort":"minimal"},` + msgs + `}`, "output_config.effort", "Input should be 'low', 'medium', 'high', 'xhigh' or 'max'"},
		{"a structured output of a kind Anthropic does not have", `{"model":"m","max_tokens":5,"output_config":{"format":{"type":"json_object"}},` + msgs + `}`,
			"output_config.format.type", "output_config.format.type: Input should be 'json_schema'"},
		{"a context edit without its type", `{"model":"m","max_tokens":5,"context_management":{"edits":[{"keep":"all"}]},` + msgs + `}`,
			"context_management.edits.0.type", "context_management.edits.0.type: Field required"},
		{"a server tool is named", `{"model":"m","max_tokens":5,"tools":[{"type":"web_search_20250305","name":"web_search"}],` + msgs + `}`, "tools.0.type", "server tool 'web_search_20250305' is not supported"},
		{"a document block is named", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"x"}}]}]}`,
			"messages.0.content.0", "messages.0.content.0: 'document' blocks are not supported"},
		{"a thinking block in a user message", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"thinking","thinking":"hm","signature":"s"}]}]}`,
			"messages.0.content.0", "'thinking' blocks belong in assistant messages"},
		{"a thinking block after the text it came before", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"thinking","thinking":"hm","signature":"s"}]}]}`,
			"messages.1.content.1", "'thinking' blocks must come before an assistant message's text and tool_use blocks"},
		{"a thinking block without its signature", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"thinking","thinking":"hm"}]}]}`,
			"messages.1.content.0.signature", "messages.1.content.0.signature: Field required"},
		{"cache_control on a thinking block", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s","cache_control":{"type":"ephemeral"}}]}]}`,
			"messages.1.content.0.cache_control", "cache_control cannot be set on 'thinking' blocks"},
		{"a redacted block's text", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"redacted_thinking","data":"x","thinking":"y"}]}]}`,
			"messages.1.content.0.thinking", "Extra inputs are not permitted"},
		{"citations on a text block", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"x","citations":[]}]}]}`,
			"messages.0.content.0.citations", "messages.0.content.0.citations: Extra inputs are not permitted"},
		{"a field of another block type", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"x","tool_use_id":"t"}]}]}`,
			"messages.0.content.0.tool_use_id", "Extra inputs are not permitted"},
		{"a role Anthropic does not have", `{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"x"}]}`,
			"messages.0.role", "messages.0.role: Input should be 'user' or 'assistant'"},
		{"a text block without its text", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text"}]}]}`,
			"messages.0.content.0.text", "messages.0.content.0.text: Field required"},
		{"a tool_use in a user message", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}]}`,
			"messages.0.content.0", "'tool_use' blocks belong in assistant messages"},
		{"tool_use input must be an object", `{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":[1]}]}]}`,
			"messages.0.content.0.input", "messages.0.content.0.input: Input should be a valid dictionary"},
		{"an image by file id", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"f"}}]}]}`,
			"messages.0.content.0.source.type", "image sources of type 'file' are not supported"},
		{"an image of a type Anthropic refuses", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/bmp","data":"x"}}]}]}`,
			"messages.0.content.0.source.media_type", "Input should be 'image/jpeg'"},
		{"a temperature above Anthropic's range", `{"model":"m","max_tokens":5,"temperature":1.5,` + msgs + `}`, "temperature", "temperature: Input should be less than or equal to 1"},
		{"a tool choice Anthropic does not have", `{"model":"m","max_tokens":5,"tool_choice":{"type":"maybe"},` + msgs + `}`, "tool_choice.type", "tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'"},
		{"a tool without its schema", `{"model":"m","max_tokens":5,"tools":[{"name":"f"}],` + msgs + `}`, "tools.0.input_schema", "tools.0.input_schema: Field required"},
		{"not JSON", `{"model":`, "", "the request body is not valid JSON"},
		{"an empty body", ``, "", "the request body is not valid JSON: it is empty"},
		{"not an object", `[1]`, "", "the request body must be a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ToChat([]byte(tc.body), Options{})
			e, ok := err.(*apperr.Error)
			if !ok || e.Code != apperr.Invalid {
				t.Fatalf("want a 400, got %v", err)
			}
			if e.Param != tc.param || !strings.Contains(e.Message, tc.message) {
				t.Fatalf("param %q message %q; want %q containing %q", e.Param, e.Message, tc.param, tc.message)
			}
		})
	}
}
