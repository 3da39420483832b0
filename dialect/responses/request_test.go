package responses

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/apperr"
)

// sameJSON says whether two JSON texts hold the same value.
func sameJSON(t *testing.T, got []byte, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("got is not JSON: %v: %s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want is not JSON: %v: %s", err, want)
	}
	return reflect.DeepEqual(g, w)
}

func TestDecodeTranslatesToChat(t *testing.T) {
	cases := []struct {
		name, body string
		history    []json.RawMessage
		want       string // the chat completions body
	}{
		{"a string input is one user message",
			`{"model":"m","input":"hello"}`, nil,
			`{"model":"m","messages":[{"role":"user","content":"hello"}]}`},
		{"instructions go first, as a system message, before the history",
			`{"model":"m","instructions":"be brief","input":"and now?"}`,
			[]json.RawMessage{json.RawMessage(`{"role":"user","content":"hi"}`), json.RawMessage(`{"role":"assistant","content":"hello"}`)},
			`{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"and now?"}]}`},
		{"messages of every role, parts and images",
			`{"model":"m","input":[
				{"role":"developer","content":"rules"},
				{"type":"message","role":"user","content":[{"type":"input_text","text":"what is this?"},{"type":"input_image","image_url":"https://example.com/a.png","detail":"low"}]},
				{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"a cat","annotations":[],"logprobs":[]}]},
				{"role":"system","content":[{"type":"input_text","text":"sys"}]}]}`, nil,
			`{"model":"m","messages":[
				{"role":"developer","content":"rules"},
				{"role":"user","content":[{"type":"text","text":"what is this?"},{"type":"image_url","image_url":{"url":"https://example.com/a.png","detail":"low"}}]},
				{"role":"assistant","content":[{"type":"text","text":"a cat"}]},
				{"role":"system","content":[{"type":"text","text":"sys"}]}]}`},
		{"function calls join the assistant message before them; outputs are tool messages",
			`{"model":"m","input":[
				{"role":"user","content":"weather in Oslo and Rome?"},
				{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Checking."}]},
				{"type":"function_call","id":"fc_1","call_id":"call_a","name":"weather","arguments":"{\"city\":\"Oslo\"}","status":"completed"},
				{"type":"function_call","call_id":"call_b","name":"weather","arguments":"{\"city\":\"Rome\"}"},
				{"type":"function_call_output","call_id":"call_a","output":"rain"},
				{"type":"function_call_output","call_id":"call_b","output":[{"type":"input_text","text":"sun"}]},
				{"type":"function_call","call_id":"call_c","name":"weather","arguments":"{}"}]}`, nil,
			`{"model":"m","messages":[
				{"role":"user","content":"weather in Oslo and Rome?"},
				{"role":"assistant","content":[{"type":"text","text":"Checking."}],"tool_calls":[
					{"id":"call_a","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Oslo\"}"}},
					{"id":"call_b","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Rome\"}"}}]},
				{"role":"tool","content":"rain","tool_call_id":"call_a"},
				{"role":"tool","content":[{"type":"text","text":"sun"}],"tool_call_id":"call_b"},
				{"role":"assistant","content":null,"tool_calls":[{"id":"call_c","type":"function","function":{"name":"weather","arguments":"{}"}}]}]}`},
		{"function tools in the flat shape become chat's nested one",
			`{"model":"m","input":"hi","tools":[{"type":"function","name":"weather","description":"The weather.","parameters":{"type":"object","properties":{"city":{"type":"string"}}},"strict":true},{"type":"function","name":"now"}],
			  "tool_choice":{"type":"function","name":"weather"},"parallel_tool_calls":false}`, nil,
			`{"model":"m","messages":[{"role":"user","content":"hi"}],
			  "tools":[{"type":"function","function":{"name":"weather","description":"The weather.","parameters":{"type":"object","properties":{"city":{"type":"string"}}},"strict":true}},
			           {"type":"function","function":{"name":"now"}}],
			  "tool_choice":{"type":"function","function":{"name":"weather"}},"parallel_tool_calls":false}`},
		{"a string tool choice passes as it is; parallel_tool_calls goes only with tools",
			`{"model":"m","input":"hi","tool_choice":"none","parallel_tool_calls":true}`, nil,
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"tool_choice":"none"}`},
		{"sampling and the options chat completions has",
			`{"model":"m","input":"hi","max_output_tokens":100,"temperature":0,"top_p":0.5,"user":"u1","safety_identifier":"s1","prompt_cache_key":"k","service_tier":"flex","metadata":{"a":"b"},"store":false,"max_tool_calls":3,"truncation":"disabled","include":[],"background":false}`, nil,
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":100,"temperature":0,"top_p":0.5,"user":"u1","safety_identifier":"s1","prompt_cache_key":"k","service_tier":"flex"}`},
		{"text.format json_schema becomes response_format",
			`{"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"point","schema":{"type":"object","properties":{"x":{"type":"number"}}},"strict":true,"description":"A point."},"verbosity":"low"}}`, nil,
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"verbosity":"low",
			  "response_format":{"type":"json_schema","json_schema":{"name":"point","description":"A point.","schema":{"type":"object","properties":{"x":{"type":"number"}}},"strict":true}}}`},
		{"text.format json_object",
			`{"model":"m","input":"hi","text":{"format":{"type":"json_object"}}}`, nil,
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object"}}`},
		{"text.format text is chat's default",
			`{"model":"m","input":"hi","text":{"format":{"type":"text"}}}`, nil,
			`{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{"reasoning effort",
			`{"model":"m","input":"hi","reasoning":{"effort":"low"}}`, nil,
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"reasoning_effort":"low"}`},
		{"a reasoning summary asks for output chat completions never makes: accepted, not sent",
			`{"model":"m","input":"hi","reasoning":{"effort":"medium","summary":"auto"}}`, nil,
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"reasoning_effort":"medium"}`},
		{"a summary without an effort sends nothing",
			`{"model":"m","input":"hi","reasoning":{"summary":"detailed"}}`, nil,
			`{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{"encrypted reasoning is asked for and none exists: accepted, nothing sent",
			`{"model":"m","input":"hi","include":["reasoning.encrypted_content"],"store":false}`, nil,
			`{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{"client_metadata is the client's telemetry: checked, not sent to the model",
			`{"model":"m","input":"hi","client_metadata":{"x-codex-installation-id":"0b6f"}}`, nil,
			`{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{"a reasoning item that carries nothing is dropped",
			`{"model":"m","input":[{"role":"user","content":"hi"},{"type":"reasoning","summary":[],"encrypted_content":null},{"type":"reasoning","summary":[],"content":[]},
				{"type":"message","role":"assistant","content":[{"type":"output_text","text":"hello"}]}]}`, nil,
			`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"hello"}]}]}`},
		{"a stream always asks for usage",
			`{"model":"m","input":"hi","stream":true}`, nil,
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`},
		{"a continuation may bring no new input",
			`{"model":"m","previous_response_id":"resp_1"}`, []json.RawMessage{json.RawMessage(`{"role":"user","content":"hi"}`)},
			`{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := Decode([]byte(c.body))
			if err != nil {
				t.Fatal(err)
			}
			if got := r.ChatBody(c.history); !sameJSON(t, got, c.want) {
				t.Fatalf("chat body\n got %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestDecodeReadsTheRequestsOwnFields(t *testing.T) {
	r, err := Decode([]byte(`{"model":"m","input":"hi","stream":true,"store":false,"previous_response_id":"resp_9","reasoning":{"effort":"high"},
		"input_extra_check":null}`))
	if err == nil {
		t.Fatalf("an unknown field passed: %+v", r)
	}
	r, err = Decode([]byte(`{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,AAAA"}]}],"stream":true,"store":false,"previous_response_id":"resp_9","reasoning":{"effort":"high"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.Model != "m" || !r.Stream || r.Store || r.PreviousResponseID != "resp_9" || r.ReasoningEffort != "high" || r.FirstImage() != "input[0].content[0]" {
		t.Fatalf("%+v", r)
	}
	r, _ = Decode([]byte(`{"model":"m","input":"hi"}`))
	if !r.Store || r.Stream || r.FirstImage() != "" {
		t.Fatalf("defaults: store %v stream %v", r.Store, r.Stream)
	}
}

func TestDecodeRefusesWhatItCannotCarry(t *testing.T) {
	cases := []struct {
		name, body    string
		reason, param string
		message       string
	}{
		{"unknown field", `{"model":"m","input":"hi","modalities":["text"]}`, "unsupported_parameter", "modalities", "field 'modalities' is not supported"},
		{"hosted tool", `{"model":"m","input":"hi","tools":[{"type":"file_search","vector_store_ids":["vs_1"]}]}`, "unsupported_parameter", "tools[0].type", "tool type 'file_search' is not supported: Sluice runs no hosted tools and carries function and custom tools only"},
		{"web search, as Codex sends it unless told not to", `{"model":"m","input":"hi","tools":[{"type":"function","name":"shell"},{"type":"web_search","external_web_access":false}]}`, "unsupported_parameter", "tools[1].type", `Codex: set web_search = "disabled" in config.toml`},
		{"local shell", `{"model":"m","input":"hi","tools":[{"type":"local_shell"}]}`, "unsupported_parameter", "tools[0].type", "tool type 'local_shell' is not supported"},
		{"unknown field of a function tool", `{"model":"m","input":"hi","tools":[{"type":"function","name":"f","defer_loading":true}]}`, "unsupported_parameter", "tools[0].defer_loading", "field 'tools[0].defer_loading' is not supported"},
		{"built-in tool choice", `{"model":"m","input":"hi","tool_choice":{"type":"web_search_preview"}}`, "unsupported_parameter", "tool_choice", "tool_choice of type 'web_search_preview' is not supported: Sluice carries function and custom tools only"},
		{"image by file id", `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","file_id":"file-1"}]}]}`, "unsupported_parameter", "input[0].content[0].file_id", "images by file_id are not supported"},
		{"a file", `{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_data":"x"}]}]}`, "unsupported_parameter", "input[0].content[0].type", "content part type 'input_file' is not supported"},
		{"encrypted reasoning sent back", `{"model":"m","input":[{"role":"user","content":"hi"},{"type":"reasoning","summary":[],"encrypted_content":"gAAAAB"}]}`, "unsupported_parameter", "input[1].encrypted_content", "encrypted reasoning cannot be carried to chat completions"},
		{"a reasoning summary sent back", `{"model":"m","input":[{"type":"reasoning","summary":[{"type":"summary_text","text":"I looked."}]}]}`, "unsupported_parameter", "input[0].summary", "a reasoning summary cannot be carried"},
		{"reasoning content sent back", `{"model":"m","input":[{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"hmm"}]}]}`, "unsupported_parameter", "input[0].content", "reasoning content cannot be carried"},
		{"reasoning by id", `{"model":"m","input":[{"type":"reasoning","id":"rs_1","summary":[]}]}`, "unsupported_parameter", "input[0].id", "Sluice keeps no reasoning"},
		{"client_metadata not strings", `{"model":"m","input":"hi","client_metadata":{"n":1}}`, "invalid_type", "client_metadata.n", "must be a string"},
		{"a hosted tool's call", `{"model":"m","input":[{"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"x"}}]}`, "unsupported_parameter", "input[0].type", "input item type 'web_search_call' is not supported"},
		{"an item reference", `{"model":"m","input":[{"type":"item_reference","id":"msg_1"}]}`, "unsupported_parameter", "input[0].type", "input item type 'item_reference' is not supported"},
		{"background", `{"model":"m","input":"hi","background":true}`, "unsupported_parameter", "background", "background responses are not supported"},
		{"include of output data Sluice cannot make", `{"model":"m","input":"hi","include":["reasoning.encrypted_content","message.output_text.logprobs"]}`, "unsupported_parameter", "include", "include 'message.output_text.logprobs' is not supported"},
		{"a reasoning summary of no known kind", `{"model":"m","input":"hi","reasoning":{"effort":"low","summary":"verbose"}}`, "invalid_value", "reasoning.summary", "reasoning.summary must be one of auto, concise, detailed"},
		{"reasoning context", `{"model":"m","input":"hi","reasoning":{"context":"all_turns"}}`, "unsupported_parameter", "reasoning.context", "field 'reasoning.context' is not supported"},
		{"truncation auto", `{"model":"m","input":"hi","truncation":"auto"}`, "unsupported_parameter", "truncation", "truncation 'auto' is not supported"},
		{"conversation", `{"model":"m","input":"hi","conversation":"conv_1"}`, "unsupported_parameter", "conversation", "continue a stored response with previous_response_id"},
		{"prompt template", `{"model":"m","input":"hi","prompt":{"id":"pmpt_1"}}`, "unsupported_parameter", "prompt", "prompt templates are not supported"},
		{"top logprobs", `{"model":"m","input":"hi","top_logprobs":3}`, "unsupported_parameter", "top_logprobs", "top_logprobs is not supported"},
		{"obfuscation", `{"model":"m","input":"hi","stream":true,"stream_options":{"include_obfuscation":true}}`, "unsupported_parameter", "stream_options.include_obfuscation", "obfuscation is not supported"},
		{"phase", `{"model":"m","input":[{"role":"assistant","content":"x","phase":"final_answer"}]}`, "unsupported_parameter", "input[0].phase", "phase cannot be carried"},
		{"an image from the assistant", `{"model":"m","input":[{"role":"assistant","content":[{"type":"input_image","image_url":"https://x/a.png"}]}]}`, "invalid_value", "input[0].content[0].type", "images belong to user messages"},
		{"output text from the user", `{"model":"m","input":[{"role":"user","content":[{"type":"output_text","text":"x"}]}]}`, "invalid_value", "input[0].content[0].type", "output_text parts belong to assistant messages"},
		{"an image in a function's output", `{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_image","image_url":"https://x/a.png"}]}]}`, "unsupported_parameter", "input[0].output[0].type", "input_text parts only"},
		{"missing model", `{"input":"hi"}`, "missing_required_parameter", "model", "missing required parameter: 'model'"},
		{"missing input", `{"model":"m"}`, "missing_required_parameter", "input", "missing required parameter: 'input'"},
		{"empty input", `{"model":"m","input":[]}`, "missing_required_parameter", "input", "'input'"},
		{"input a number", `{"model":"m","input":3}`, "invalid_value", "input", "input must be a string or an array of input items"},
		{"a call without its id", `{"model":"m","input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, "missing_required_parameter", "input[0].call_id", "'input[0].call_id'"},
		{"an output without its call id", `{"model":"m","input":[{"type":"function_call_output","output":"x"}]}`, "missing_required_parameter", "input[0].call_id", "'input[0].call_id'"},
		{"a bad role", `{"model":"m","input":[{"role":"wizard","content":"x"}]}`, "invalid_value", "input[0].role", "must be one of user, assistant, system, developer"},
		{"a message without content", `{"model":"m","input":[{"role":"user"}]}`, "missing_required_parameter", "input[0].content", "'input[0].content'"},
		{"an item without type or role", `{"model":"m","input":[{"content":"x"}]}`, "missing_required_parameter", "input[0].type", "'input[0].type'"},
		{"wrong type", `{"model":"m","input":"hi","temperature":"hot"}`, "invalid_type", "temperature", "field 'temperature' must be a number"},
		{"wrong type deep", `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":5}]}]}`, "invalid_type", "input[0].content[0].text", "must be a string"},
		{"max_output_tokens 0", `{"model":"m","input":"hi","max_output_tokens":0}`, "invalid_value", "max_output_tokens", "max_output_tokens must be from 1 to 10000000"},
		{"temperature out of range", `{"model":"m","input":"hi","temperature":3}`, "invalid_value", "temperature", "temperature must be from 0 to 2"},
		{"a field twice", `{"model":"m","input":"hi","input":"ho"}`, "duplicate_field", "input", "field 'input' is given twice"},
		{"metadata not strings", `{"model":"m","input":"hi","metadata":{"a":1}}`, "invalid_type", "metadata.a", "must be a string"},
		{"a schema without a name", `{"model":"m","input":"hi","text":{"format":{"type":"json_schema","schema":{}}}}`, "missing_required_parameter", "text.format.name", "'text.format.name'"},
		{"an unknown format", `{"model":"m","input":"hi","text":{"format":{"type":"yaml"}}}`, "invalid_value", "text.format.type", "text, json_object, json_schema"},
		{"not JSON", `{"model":`, "invalid_json", "", "not valid JSON"},
		{"empty previous_response_id", `{"model":"m","input":"hi","previous_response_id":""}`, "invalid_value", "previous_response_id", "previous_response_id must be the id of a stored response"},
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

func TestParamNamesTheRequestsOwnField(t *testing.T) {
	r, err := Decode([]byte(`{"model":"m","instructions":"x","input":[
		{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"https://x/a.png"}]},
		{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},
		{"type":"function_call_output","call_id":"c","output":"y"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	const history = 2
	for chat, want := range map[string]string{
		"max_tokens":                     "max_output_tokens",
		"model":                          "model",
		"messages":                       "input",
		"messages[0].content":            "instructions",
		"messages[1].content":            "previous_response_id",
		"messages[3].content[1]":         "input[0].content[1]",
		"messages[3].content[1].image_u": "input[0].content[1].image_u",
		"messages[4].tool_calls":         "input[1]",
		"messages[5].content":            "input[2]",
		"messages[9]":                    "input",
	} {
		if got := r.Param(chat, history); got != want {
			t.Errorf("Param(%q) = %q, want %q", chat, got, want)
		}
	}
}
