package handlers

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testdb"
)

// codexTurn is a request body as OpenAI's Codex CLI (codex-rs) sends it to
// a provider with wire_api = "responses", fields in the order its
// ResponsesApiRequest serialises them: the base instructions, the
// conversation so far as input items (developer and user context, a
// shell_command call and its output, an earlier apply_patch call of the
// freeform tool and its output, the new user message), function tools and
// the custom apply_patch tool with its lark grammar, and the reasoning,
// include, store, stream, prompt_cache_key, text and client_metadata a
// reasoning model gets.
const codexTurn = `{
 "model": "gpt-4o-mini",
 "instructions": "You are Codex, based on GPT-5. You are running as a coding agent in the Codex CLI on a user's computer.",
 "input": [
  {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions instructions>Filesystem sandboxing: workspace-write.</permissions instructions>"}]},
  {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context>\n  <cwd>/work/demo</cwd>\n  <shell>bash</shell>\n</environment_context>"}]},
  {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Add a README saying what main.go does."}]},
  {"type": "function_call", "name": "shell_command", "arguments": "{\"command\":\"cat main.go\",\"workdir\":\"/work/demo\"}", "call_id": "call_sh1"},
  {"type": "function_call_output", "call_id": "call_sh1", "output": "Exit code: 0\nWall time: 0.1 seconds\nOutput:\npackage main\n\nfunc main() { println(\"hi\") }\n"},
  {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It prints hi. Writing the README."}]},
  {"type": "custom_tool_call", "status": "completed", "call_id": "call_ap1", "name": "apply_patch", "input": "*** Begin Patch\n*** Add File: NOTES.md\n+draft\n*** End Patch\n"},
  {"type": "custom_tool_call_output", "call_id": "call_ap1", "output": "Exit code: 0\nWall time: 0 seconds\nOutput:\nSuccess. Updated the following files:\nA NOTES.md\n"},
  {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Now the README, please; drop NOTES.md."}]}
 ],
 "tools": [
  {"type": "function", "name": "shell_command", "description": "Runs a shell command and returns its output.", "strict": false,
   "parameters": {"type": "object", "properties": {"command": {"type": "string", "description": "The shell script to execute in the user's default shell"},
    "workdir": {"type": "string", "description": "The working directory to execute the command in"}, "timeout_ms": {"type": "number", "description": "The timeout for the command in milliseconds"}},
    "required": ["command"], "additionalProperties": false}},
  {"type": "function", "name": "update_plan", "description": "Updates the task plan.", "strict": false,
   "parameters": {"type": "object", "properties": {"explanation": {"type": "string"}, "plan": {"type": "array", "items": {"type": "object",
    "properties": {"step": {"type": "string"}, "status": {"type": "string"}}, "required": ["step", "status"], "additionalProperties": false}}}, "required": ["plan"], "additionalProperties": false}},
  {"type": "custom", "name": "apply_patch", "description": "Use the ` + "`apply_patch`" + ` tool to edit files. This is a FREEFORM tool, so do not wrap the patch in JSON.",
   "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch hunk+ end_patch\nbegin_patch: \"*** Begin Patch\" LF\nend_patch: \"*** End Patch\" LF?\nhunk: add_hunk | delete_hunk | update_hunk\nadd_hunk: \"*** Add File: \" filename LF add_line+\ndelete_hunk: \"*** Delete File: \" filename LF\nupdate_hunk: \"*** Update File: \" filename LF change?\nfilename: /(.+)/\nadd_line: \"+\" /(.*)/ LF -> line\n%import common.LF"}}
 ],
 "tool_choice": "auto",
 "parallel_tool_calls": false,
 "reasoning": {"effort": "medium", "summary": "auto"},
 "store": false,
 "stream": true,
 "include": ["reasoning.encrypted_content"],
 "prompt_cache_key": "0199a8d2-4c1e-7e52-b6a3-5f0c9b7e2d11",
 "text": {"verbosity": "low"},
 "client_metadata": {"x-codex-installation-id": "5d7f2f8e-2b1c-4f61-9c55-0a8e6d3b9f40"}
}`

// codexHeaders are the headers Codex adds to a Responses request.
var codexHeaders = map[string]string{"OpenAI-Beta": "responses=experimental", "session_id": "0199a8d2-4c1e-7e52-b6a3-5f0c9b7e2d11",
	"originator": "codex_cli_rs", "Accept": "text/event-stream", "User-Agent": "codex_cli_rs/0.63.0 (Linux 6.8; x86_64)"}

// TestCodexCLIThroughSluice replays a turn of OpenAI's Codex CLI against
// a provider: the request is taken whole (nothing Codex sends is refused
// or dropped unsaid), the provider gets it as a chat completion (apply_patch
// a function of one string, reasoning.effort as reasoning_effort, the
// prompt cache key), and the stream has what Codex's reader requires:
// response.created, text deltas, each item in response.output_item.done
// (a call of apply_patch as a custom_tool_call with the patch as its
// input), and response.completed with the response id and usage. Codex's
// next turn sends that call back, and the provider sees the same call.
func TestCodexCLIThroughSluice(t *testing.T) {
	db := testdb.SQLite(t)
	g := newGenEnv(t, db)
	p := &scriptedProvider{}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	g.addKey(t, g.login("admin@example.com", "admin-password"), "scripted", srv.URL+"/v1", "sk-scripted-key")
	key, _ := g.apiToken(g.signup("a@example.com", "A"))

	const patch = "*** Begin Patch\n*** Add File: README.md\n+# demo\n+main.go prints \"hi\".\n*** Delete File: NOTES.md\n*** End Patch\n"
	args, _ := json.Marshal(map[string]string{"input": patch})
	half := len(args) / 2
	piece := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	p.answers = append(p.answers, sseAnswer(false,
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":"Writing"},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"content":" the README."},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_ap2","type":"function","function":{"name":"apply_patch","arguments":""}}]},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":`+piece(string(args[:half]))+`}}]},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":`+piece(string(args[half:]))+`}}]},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":900,"completion_tokens":60,"total_tokens":960,"prompt_tokens_details":{"cached_tokens":512},"completion_tokens_details":{"reasoning_tokens":20}}}`))
	w := g.do(request{method: "POST", path: "/v1/responses", bearer: key, body: codexTurn, header: codexHeaders})
	if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
		t.Fatalf("Codex's turn: %d %s", w.Code, w.Body.String())
	}

	// What the provider was sent.
	var sent struct {
		Messages []struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Function struct{ Name, Arguments string }
			} `json:"tool_calls"`
		} `json:"messages"`
		Tools []struct {
			Type     string `json:"type"`
			Function struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
		ReasoningEffort   string `json:"reasoning_effort"`
		PromptCacheKey    string `json:"prompt_cache_key"`
		Verbosity         string `json:"verbosity"`
		ParallelToolCalls *bool  `json:"parallel_tool_calls"`
		ToolChoice        string `json:"tool_choice"`
	}
	body := p.last()
	if err := json.Unmarshal([]byte(body), &sent); err != nil {
		t.Fatalf("the provider got %s: %v", body, err)
	}
	var roles []string
	for _, m := range sent.Messages {
		roles = append(roles, m.Role)
	}
	if strings.Join(roles, " ") != "system developer user user assistant tool assistant tool user" {
		t.Fatalf("messages %v: %s", roles, body)
	}
	earlier := sent.Messages[6]
	if len(earlier.ToolCalls) != 1 || earlier.ToolCalls[0].ID != "call_ap1" || earlier.ToolCalls[0].Function.Name != "apply_patch" ||
		earlier.ToolCalls[0].Function.Arguments != `{"input":"*** Begin Patch\n*** Add File: NOTES.md\n+draft\n*** End Patch\n"}` ||
		sent.Messages[7].ToolCallID != "call_ap1" || sent.Messages[4].ToolCalls[0].Function.Name != "shell_command" {
		t.Fatalf("the earlier calls: %s", body)
	}
	if len(sent.Tools) != 3 || sent.Tools[2].Type != "function" || sent.Tools[2].Function.Name != "apply_patch" ||
		!strings.Contains(sent.Tools[2].Function.Description, "This is a FREEFORM tool") ||
		!strings.Contains(sent.Tools[2].Function.Description, "text in this lark grammar:\nstart: begin_patch hunk+ end_patch") ||
		!strings.Contains(string(sent.Tools[2].Function.Parameters), `"required":["input"]`) {
		t.Fatalf("the tools: %s", body)
	}
	if sent.ReasoningEffort != "medium" || sent.PromptCacheKey != "0199a8d2-4c1e-7e52-b6a3-5f0c9b7e2d11" || sent.Verbosity != "low" ||
		sent.ParallelToolCalls == nil || *sent.ParallelToolCalls || sent.ToolChoice != "auto" {
		t.Fatalf("the options: %s", body)
	}
	for _, field := range []string{`"client_metadata"`, `"include"`, `"reasoning"`, `"store"`, `"summary"`, "x-codex-installation-id"} {
		if strings.Contains(body, field) {
			t.Errorf("the provider was sent %s, which chat completions has not: %s", field, body)
		}
	}

	// What Codex reads of the stream: every event's type and data; the
	// items of output_item.done; response.completed's id and usage.
	evs := readEvents(t, w.Body.String())
	var types []string
	var text strings.Builder
	var done []map[string]any
	for _, ev := range evs {
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Data["delta"].(string))
		case "response.output_item.done":
			done = append(done, ev.Data["item"].(map[string]any))
		}
	}
	if types[0] != "response.created" || evs[0].Data["response"] == nil || types[len(types)-1] != "response.completed" || text.String() != "Writing the README." {
		t.Fatalf("events %v, text %q", types, text.String())
	}
	if len(done) != 2 || done[0]["type"] != "message" || done[0]["role"] != "assistant" {
		t.Fatalf("items done: %v", done)
	}
	call := done[1]
	if call["type"] != "custom_tool_call" || call["call_id"] != "call_ap2" || call["name"] != "apply_patch" || call["input"] != patch || call["status"] != "completed" {
		t.Fatalf("the apply_patch call Codex runs: %v", call)
	}
	var completed struct {
		Response struct {
			ID    string `json:"id"`
			Usage *struct {
				InputTokens        *int64 `json:"input_tokens"`
				InputTokensDetails *struct {
					CachedTokens *int64 `json:"cached_tokens"`
				} `json:"input_tokens_details"`
				OutputTokens        *int64 `json:"output_tokens"`
				OutputTokensDetails *struct {
					ReasoningTokens *int64 `json:"reasoning_tokens"`
				} `json:"output_tokens_details"`
				TotalTokens *int64 `json:"total_tokens"`
			} `json:"usage"`
			Output []struct {
				Type string `json:"type"`
			} `json:"output"`
		} `json:"response"`
	}
	_ = json.Unmarshal([]byte(evs[len(evs)-1].Raw), &completed)
	u := completed.Response.Usage
	if !strings.HasPrefix(completed.Response.ID, "resp_") || u == nil || u.InputTokens == nil || *u.InputTokens != 900 || u.OutputTokens == nil || *u.OutputTokens != 60 ||
		u.TotalTokens == nil || *u.TotalTokens != 960 || u.InputTokensDetails == nil || u.InputTokensDetails.CachedTokens == nil || *u.InputTokensDetails.CachedTokens != 512 ||
		u.OutputTokensDetails == nil || u.OutputTokensDetails.ReasoningTokens == nil || *u.OutputTokensDetails.ReasoningTokens != 20 {
		t.Fatalf("response.completed, as Codex's ResponseCompleted reads it: %s", evs[len(evs)-1].Raw)
	}
	for _, o := range completed.Response.Output {
		if o.Type == "reasoning" {
			t.Fatalf("a reasoning item, which chat completions cannot have made: %s", evs[len(evs)-1].Raw)
		}
	}
	if got := usageOf(t, db, w); got.PromptTokens != 900 || got.CompletionTokens != 60 || got.Dialect != "responses" {
		t.Fatalf("billed %+v, the provider reported 900 + 60", got)
	}
	// store: false, as Codex sends it: nothing kept.
	expectError(t, g.do(request{method: "GET", path: "/v1/responses/" + completed.Response.ID, bearer: key}), 404, "response_not_found", "not found")

	// Codex's next turn sends the call back, with its output.
	var next map[string]any
	_ = json.Unmarshal([]byte(codexTurn), &next)
	next["input"] = append(next["input"].([]any), done[0], call,
		map[string]any{"type": "custom_tool_call_output", "call_id": "call_ap2", "output": "Success. Updated the following files:\nA README.md\nD NOTES.md\n"})
	nextBody, _ := json.Marshal(next)
	p.answers = append(p.answers, sseAnswer(false,
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":"Done."},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":2,"total_tokens":1002}}`))
	w = g.do(request{method: "POST", path: "/v1/responses", bearer: key, body: string(nextBody), header: codexHeaders})
	if evs := readEvents(t, w.Body.String()); w.Code != 200 || evs[len(evs)-1].Type != "response.completed" {
		t.Fatalf("the next turn: %d %s", w.Code, w.Body.String())
	}
	if sent := p.last(); !strings.Contains(sent, `{"role":"assistant","content":[{"type":"text","text":"Writing the README."}],"tool_calls":[{"id":"call_ap2","type":"function","function":{"name":"apply_patch","arguments":`+piece(string(args))+`}}]},`+
		`{"role":"tool","content":"Success. Updated the following files:\nA README.md\nD NOTES.md\n","tool_call_id":"call_ap2"}`) {
		t.Fatalf("the next turn sent %s", sent)
	}

	// Codex's default web search, which Sluice cannot run: refused,
	// saying which setting turns it off.
	var withSearch map[string]any
	_ = json.Unmarshal([]byte(codexTurn), &withSearch)
	withSearch["tools"] = append(withSearch["tools"].([]any), map[string]any{"type": "web_search", "external_web_access": false})
	searchBody, _ := json.Marshal(withSearch)
	w = g.do(request{method: "POST", path: "/v1/responses", bearer: key, body: string(searchBody), header: codexHeaders})
	expectError(t, w, 400, "unsupported_parameter", `tool type 'web_search' is not supported: Sluice runs no hosted tools`)
	if !strings.Contains(w.Body.String(), `"param":"tools[3].type"`) || !strings.Contains(w.Body.String(), `web_search = \"disabled\"`) {
		t.Fatalf("the refusal of web_search: %s", w.Body.String())
	}
}
