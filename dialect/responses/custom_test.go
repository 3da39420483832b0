package responses

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/apperr"
)

// The function a custom tool travels as, but for its description.
const customParams = `"parameters":{"type":"object","properties":{"input":{"type":"string","description":"The tool's input: plain text, not JSON."}},"required":["input"],"additionalProperties":false}`

func TestCustomToolsTravelAsFunctions(t *testing.T) {
	cases := []struct{ name, body, want string }{
		{"a grammar goes in the description, for the model to read",
			`{"model":"m","input":"fix it","tools":[{"type":"custom","name":"apply_patch","description":"Edit files.","format":{"type":"grammar","syntax":"lark","definition":"start: begin_patch hunk+ end_patch"}}]}`,
			`{"model":"m","messages":[{"role":"user","content":"fix it"}],"tools":[{"type":"function","function":{"name":"apply_patch",
			  "description":"Edit files.\n\nThe input parameter is text in this lark grammar:\nstart: begin_patch hunk+ end_patch",` + customParams + `}}]}`},
		{"free text, with or without a format",
			`{"model":"m","input":"hi","tools":[{"type":"custom","name":"note","format":{"type":"text"}},{"type":"custom","name":"say","description":"Say it."}]}`,
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"note",` + customParams + `}},
			  {"type":"function","function":{"name":"say","description":"Say it.",` + customParams + `}}]}`},
		{"a regex grammar without a description",
			`{"model":"m","input":"hi","tools":[{"type":"custom","name":"date","format":{"type":"grammar","syntax":"regex","definition":"\\d{4}-\\d{2}-\\d{2}"}}]}`,
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"date",
			  "description":"The input parameter is text in this regex grammar:\n\\d{4}-\\d{2}-\\d{2}",` + customParams + `}}]}`},
		{"a custom tool choice is the function's",
			`{"model":"m","input":"hi","tools":[{"type":"custom","name":"apply_patch"}],"tool_choice":{"type":"custom","name":"apply_patch"},"parallel_tool_calls":false}`,
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"apply_patch",` + customParams + `}}],
			  "tool_choice":{"type":"function","function":{"name":"apply_patch"}},"parallel_tool_calls":false}`},
		{"a custom tool's call sent back is the function call it was; its output a tool message",
			`{"model":"m","input":[{"role":"user","content":"fix it"},
				{"type":"function_call","call_id":"call_1","name":"shell","arguments":"{\"command\":[\"ls\"]}"},
				{"type":"custom_tool_call","id":"ctc_1","status":"completed","call_id":"call_2","name":"apply_patch","input":"*** Begin Patch\n*** End Patch"},
				{"type":"function_call_output","call_id":"call_1","output":"a.go"},
				{"type":"custom_tool_call_output","call_id":"call_2","name":"apply_patch","output":"Success."},
				{"type":"custom_tool_call_output","call_id":"call_3","output":[{"type":"input_text","text":"Done."}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":"fix it"},
				{"role":"assistant","content":null,"tool_calls":[
					{"id":"call_1","type":"function","function":{"name":"shell","arguments":"{\"command\":[\"ls\"]}"}},
					{"id":"call_2","type":"function","function":{"name":"apply_patch","arguments":"{\"input\":\"*** Begin Patch\\n*** End Patch\"}"}}]},
				{"role":"tool","content":"a.go","tool_call_id":"call_1"},
				{"role":"tool","content":"Success.","tool_call_id":"call_2"},
				{"role":"tool","content":[{"type":"text","text":"Done."}],"tool_call_id":"call_3"}]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := mustDecode(t, c.body).ChatBody(nil); !sameJSON(t, got, c.want) {
				t.Fatalf("chat body\n got %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestCustomToolsRefused(t *testing.T) {
	cases := []struct{ name, body, reason, param, message string }{
		{"without a name", `{"model":"m","input":"hi","tools":[{"type":"custom"}]}`, "missing_required_parameter", "tools[0].name", "'tools[0].name'"},
		{"a grammar without its definition", `{"model":"m","input":"hi","tools":[{"type":"custom","name":"p","format":{"type":"grammar","syntax":"lark"}}]}`,
			"missing_required_parameter", "tools[0].format.definition", "'tools[0].format.definition'"},
		{"a grammar of no known syntax", `{"model":"m","input":"hi","tools":[{"type":"custom","name":"p","format":{"type":"grammar","syntax":"ebnf","definition":"x"}}]}`,
			"invalid_value", "tools[0].format.syntax", "must be lark or regex"},
		{"a format of no known type", `{"model":"m","input":"hi","tools":[{"type":"custom","name":"p","format":{"type":"json"}}]}`,
			"invalid_value", "tools[0].format.type", "must be text or grammar"},
		{"an unknown field", `{"model":"m","input":"hi","tools":[{"type":"custom","name":"p","defer_loading":true}]}`,
			"unsupported_parameter", "tools[0].defer_loading", "field 'tools[0].defer_loading' is not supported"},
		{"a name a function has too", `{"model":"m","input":"hi","tools":[{"type":"function","name":"apply_patch"},{"type":"custom","name":"apply_patch"}]}`,
			"invalid_value", "tools[1].name", "tool name 'apply_patch' is given twice (tools[0] has it)"},
		{"a custom tool choice of no such tool", `{"model":"m","input":"hi","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"custom","name":"f"}}`,
			"invalid_value", "tool_choice.name", "tool_choice names custom tool 'f', which tools does not have"},
		{"a call without its input", `{"model":"m","input":[{"type":"custom_tool_call","call_id":"c","name":"p"}]}`,
			"missing_required_parameter", "input[0].input", "'input[0].input'"},
		{"a call of a namespace", `{"model":"m","input":[{"type":"custom_tool_call","call_id":"c","name":"p","namespace":"mcp","input":"x"}]}`,
			"unsupported_parameter", "input[0].namespace", "field 'input[0].namespace' is not supported"},
		{"a function's output names no tool", `{"model":"m","input":[{"type":"function_call_output","call_id":"c","name":"f","output":"x"}]}`,
			"unsupported_parameter", "input[0].name", "field 'input[0].name' is not supported"},
		{"an output without its call id", `{"model":"m","input":[{"type":"custom_tool_call_output","output":"x"}]}`,
			"missing_required_parameter", "input[0].call_id", "'input[0].call_id'"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode([]byte(c.body))
			e, ok := err.(*apperr.Error)
			if !ok {
				t.Fatalf("got %v, want an *apperr.Error", err)
			}
			if e.Code != apperr.Invalid || e.Reason != c.reason || e.Param != c.param || !strings.Contains(e.Message, c.message) {
				t.Fatalf("got %s %s param %q: %q\nwant %s param %q: …%q…", e.Code, e.Reason, e.Param, e.Message, c.reason, c.param, c.message)
			}
		})
	}
}

// customReq has a custom tool and a function tool.
const customReq = `{"model":"m","input":"fix it","stream":true,"tools":[{"type":"custom","name":"apply_patch"},{"type":"function","name":"shell"}]}`

func TestCustomToolCallsAnswerAsCustomToolCalls(t *testing.T) {
	cases := []struct{ name, completion, want string }{
		{"the function's input string is the call's input; other calls stay function calls",
			`{"choices":[{"message":{"content":null,"tool_calls":[
				{"id":"call_1","type":"function","function":{"name":"apply_patch","arguments":"{\"input\":\"*** Begin Patch\\n*** End Patch\"}"}},
				{"id":"call_2","type":"function","function":{"name":"shell","arguments":"{\"command\":[\"ls\"]}"}}]},"finish_reason":"tool_calls"}]}`,
			`{"status":"completed","incomplete_details":null,"output":[
				{"type":"custom_tool_call","id":"ctc_abc_0","status":"completed","call_id":"call_1","name":"apply_patch","input":"*** Begin Patch\n*** End Patch"},
				{"type":"function_call","id":"fc_abc_1","status":"completed","call_id":"call_2","name":"shell","arguments":"{\"command\":[\"ls\"]}"}]}`},
		{"arguments not in the function's shape pass as they are",
			`{"choices":[{"message":{"content":null,"tool_calls":[
				{"id":"call_1","type":"function","function":{"name":"apply_patch","arguments":"*** Begin Patch"}},
				{"id":"call_2","type":"function","function":{"name":"apply_patch","arguments":"{\"patch\":\"x\"}"}}]},"finish_reason":"tool_calls"}]}`,
			`{"status":"completed","incomplete_details":null,"output":[
				{"type":"custom_tool_call","id":"ctc_abc_0","status":"completed","call_id":"call_1","name":"apply_patch","input":"*** Begin Patch"},
				{"type":"custom_tool_call","id":"ctc_abc_1","status":"completed","call_id":"call_2","name":"apply_patch","input":"{\"patch\":\"x\"}"}]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, err := mustDecode(t, customReq).Response(testMeta, []byte(c.completion))
			if err != nil {
				t.Fatal(err)
			}
			if got := outputOf(t, resp); !sameJSON(t, []byte(got), c.want) {
				t.Fatalf("\n got %s\nwant %s", got, c.want)
			}
		})
	}

	// Stored, the call is repeated to the model as the model made it.
	r := mustDecode(t, customReq)
	resp, _ := r.Response(testMeta, []byte(`{"choices":[{"message":{"content":null,"tool_calls":[
		{"id":"call_1","type":"function","function":{"name":"apply_patch","arguments":"{\"input\": \"p\"}"}}]},"finish_reason":"tool_calls"}]}`))
	want := `[{"role":"user","content":"fix it"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"apply_patch","arguments":"{\"input\": \"p\"}"}}]}]`
	if got := r.Conversation(nil, resp); !sameJSON(t, got, want) {
		t.Fatalf("conversation\n got %s\nwant %s", got, want)
	}
}

func TestStreamedCustomToolCalls(t *testing.T) {
	chat := sse(delta(`{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"apply_patch","arguments":""}}]}`),
		delta(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"input\":\"*** Begin"}}]}`),
		delta(`{"tool_calls":[{"index":0,"function":{"arguments":" Patch\\n\"}"}}]}`),
		delta(`{"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"shell","arguments":"{}"}}]}`),
		finish("tool_calls"), usageChunk, done)
	s := mustDecode(t, customReq).NewStream(testMeta)
	out := append(append(append([]byte(nil), s.Start()...), s.Write([]byte(chat))...), s.Finish(Usage{})...)
	evs := parseEvents(t, out)
	want := []string{"created", "in_progress", "output_item.added", "output_item.added", "function_call_arguments.delta",
		"custom_tool_call_input.delta", "custom_tool_call_input.done", "output_item.done",
		"function_call_arguments.done", "output_item.done", "completed"}
	if got := types(evs); !slices.Equal(got, want) {
		t.Fatalf("events\n got %v\nwant %v", got, want)
	}
	added, _ := json.Marshal(evs[2].data["item"])
	if !sameJSON(t, added, `{"type":"custom_tool_call","id":"ctc_abc_0","status":"in_progress","call_id":"call_1","name":"apply_patch","input":""}`) {
		t.Fatalf("added: %s", added)
	}
	if d := evs[5].data; d["item_id"] != "ctc_abc_0" || d["output_index"] != 0.0 || d["delta"] != "*** Begin Patch\n" {
		t.Fatalf("input delta: %v", d)
	}
	if d := evs[6].data; d["item_id"] != "ctc_abc_0" || d["input"] != "*** Begin Patch\n" {
		t.Fatalf("input done: %v", d)
	}
	doneItem, _ := json.Marshal(evs[7].data["item"])
	if !sameJSON(t, doneItem, `{"type":"custom_tool_call","id":"ctc_abc_0","status":"completed","call_id":"call_1","name":"apply_patch","input":"*** Begin Patch\n"}`) {
		t.Fatalf("done: %s", doneItem)
	}
	last, _ := json.Marshal(evs[len(evs)-1].data["response"].(map[string]any)["output"])
	if !sameJSON(t, last, `[{"type":"custom_tool_call","id":"ctc_abc_0","status":"completed","call_id":"call_1","name":"apply_patch","input":"*** Begin Patch\n"},
		{"type":"function_call","id":"fc_abc_1","status":"completed","call_id":"call_2","name":"shell","arguments":"{}"}]`) {
		t.Fatalf("completed output: %s", last)
	}
	// However the bytes are cut, the events are the same.
	for i := 1; i < len(chat); i++ {
		s := mustDecode(t, customReq).NewStream(testMeta)
		got := append(append(append([]byte(nil), s.Start()...), s.Write([]byte(chat[:i]))...), s.Write([]byte(chat[i:]))...)
		if got = append(got, s.Finish(Usage{})...); string(got) != string(out) {
			t.Fatalf("split at byte %d: events differ", i)
		}
	}
}
