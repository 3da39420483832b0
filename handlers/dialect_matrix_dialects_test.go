package handlers

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

// The client dialects of the translation matrix (dialect_matrix_test.go):
// how each asks, in its own JSON, and how its answers, streams and errors
// read.

// matrixAsk is one request, in no dialect's terms.
type matrixAsk struct {
	text, image string // the user's text, and a data: URL with it
	system      string // a system prompt marked cacheable
	maxTokens   int    // 0: no bound (200 where the dialect needs one)
	tool        bool   // offer matrixTool
	call        *matrixCall
	result      string // call's result, in the turn after it
	stream      bool
}

// matrixCall is a tool call.
type matrixCall struct{ id, name, args string }

// matrixUsage is an answer's usage: the whole prompt, of it the tokens
// read from and written to the provider's cache, and the completion.
type matrixUsage struct{ input, output, cacheRead, cacheWrite int }

// matrixAnswer is an answer read in its dialect.
type matrixAnswer struct {
	text  string
	stop  string // the dialect's stop reason (Responses: status, and the incomplete reason)
	calls []matrixCall
	usage matrixUsage
}

// matrixTool is the function every tool case offers.
const matrixTool = "lookup"

var matrixSchema = map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}}

type matrixDialect struct {
	name, event, path string
	stops             struct{ text, cut, tool string }
	// carriesCacheControl: the dialect can mark a prompt cacheable;
	// reportsCacheWrites: its usage says what was written to the cache.
	carriesCacheControl, reportsCacheWrites bool
	auth                                    func(token string) map[string]string
	ask                                     func(model string, a matrixAsk) string
	read                                    func(t *testing.T, body string, stream bool) matrixAnswer
	// refused checks a provider's refusal, its message given, in the
	// dialect's error shape.
	refused func(t *testing.T, w *httptest.ResponseRecorder, message string)
}

var matrixDialects = []matrixDialect{
	{name: "chat", event: "chat", path: "/v1/chat/completions", stops: stops("stop", "length", "tool_calls"),
		carriesCacheControl: true, reportsCacheWrites: true, auth: bearerAuth, ask: chatAsk, read: chatRead, refused: openAIRefused},
	{name: "responses", event: "responses", path: "/v1/responses", stops: stops("completed", "incomplete:max_output_tokens", "completed"),
		auth: bearerAuth, ask: responsesAsk, read: responsesRead, refused: openAIRefused},
	{name: "messages", event: "messages", path: "/v1/messages", stops: stops("end_turn", "max_tokens", "tool_use"),
		carriesCacheControl: true, reportsCacheWrites: true, auth: anthropicAuth, ask: messagesAsk, read: messagesRead, refused: anthropicRefused},
}

func stops(text, cut, tool string) (s struct{ text, cut, tool string }) {
	s.text, s.cut, s.tool = text, cut, tool
	return s
}

func bearerAuth(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

func anthropicAuth(token string) map[string]string {
	return map[string]string{"x-api-key": token, "anthropic-version": "2023-06-01"}
}

// dataEvents are the JSON payloads of a stream's "data:" lines, [DONE] left out.
func dataEvents(t *testing.T, body string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(body, "\n") {
		data, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		if !json.Valid([]byte(data)) {
			t.Fatalf("not JSON: %q in\n%s", data, body)
		}
		out = append(out, data)
	}
	return out
}

// Chat completions.

func chatAsk(model string, a matrixAsk) string {
	var msgs []any
	if a.system != "" {
		msgs = append(msgs, map[string]any{"role": "system", "content": []any{
			map[string]any{"type": "text", "text": a.system, "cache_control": map[string]any{"type": "ephemeral"}}}})
	}
	var content any = a.text
	if a.image != "" {
		content = []any{map[string]any{"type": "text", "text": a.text}, map[string]any{"type": "image_url", "image_url": map[string]any{"url": a.image}}}
	}
	msgs = append(msgs, map[string]any{"role": "user", "content": content})
	if a.call != nil {
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": a.call.id, "type": "function",
				"function": map[string]any{"name": a.call.name, "arguments": a.call.args}}}},
			map[string]any{"role": "tool", "tool_call_id": a.call.id, "content": a.result})
	}
	body := map[string]any{"model": model, "messages": msgs}
	if a.maxTokens > 0 {
		body["max_tokens"] = a.maxTokens
	}
	if a.tool {
		body["tools"] = []any{map[string]any{"type": "function", "function": map[string]any{"name": matrixTool, "description": "looks a word up",
			"parameters": matrixSchema}}}
	}
	if a.stream {
		body["stream"], body["stream_options"] = true, map[string]any{"include_usage": true}
	}
	return mustJSON(body)
}

type chatUsageJSON struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
}

func (u chatUsageJSON) usage(t *testing.T) matrixUsage {
	if u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Fatalf("total_tokens %d is not %d + %d", u.TotalTokens, u.PromptTokens, u.CompletionTokens)
	}
	return matrixUsage{input: u.PromptTokens, output: u.CompletionTokens, cacheRead: u.PromptTokensDetails.CachedTokens,
		cacheWrite: u.CacheCreationInputTokens}
}

type chatCallJSON struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func chatRead(t *testing.T, body string, stream bool) matrixAnswer {
	t.Helper()
	type said struct {
		Content   *string        `json:"content"`
		ToolCalls []chatCallJSON `json:"tool_calls"`
	}
	type choice struct {
		Message      said    `json:"message"`
		Delta        said    `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	}
	type completion struct {
		Object  string         `json:"object"`
		Choices []choice       `json:"choices"`
		Usage   *chatUsageJSON `json:"usage"`
	}
	var a matrixAnswer
	if !stream {
		var c completion
		if err := json.Unmarshal([]byte(body), &c); err != nil || c.Object != "chat.completion" || len(c.Choices) != 1 ||
			c.Choices[0].FinishReason == nil || c.Usage == nil {
			t.Fatalf("not a chat completion: %s", body)
		}
		m := c.Choices[0].Message
		if m.Content != nil {
			a.text = *m.Content
		}
		for _, tc := range m.ToolCalls {
			if tc.Type != "function" {
				t.Fatalf("a call of type %q: %s", tc.Type, body)
			}
			a.calls = append(a.calls, matrixCall{tc.ID, tc.Function.Name, tc.Function.Arguments})
		}
		a.stop, a.usage = *c.Choices[0].FinishReason, c.Usage.usage(t)
		return a
	}
	if !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("the stream does not end with [DONE]:\n%s", body)
	}
	var usage *chatUsageJSON
	for _, data := range dataEvents(t, body) {
		var c completion
		if err := json.Unmarshal([]byte(data), &c); err != nil || c.Object != "chat.completion.chunk" {
			t.Fatalf("not a chunk: %s", data)
		}
		if c.Usage != nil {
			usage = c.Usage
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				a.text += *ch.Delta.Content
			}
			for _, tc := range ch.Delta.ToolCalls {
				for len(a.calls) <= tc.Index {
					a.calls = append(a.calls, matrixCall{})
				}
				call := &a.calls[tc.Index]
				call.id += tc.ID
				call.name += tc.Function.Name
				call.args += tc.Function.Arguments
			}
			if ch.FinishReason != nil {
				a.stop = *ch.FinishReason
			}
		}
	}
	if usage == nil {
		t.Fatalf("the stream has no usage chunk:\n%s", body)
	}
	a.usage = usage.usage(t)
	return a
}

// openAIRefused checks OpenAI's error shape: the provider's 400 and its
// message, as an invalid request.
func openAIRefused(t *testing.T, w *httptest.ResponseRecorder, message string) {
	t.Helper()
	var body struct {
		Error *struct{ Message, Type string } `json:"error"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != 400 || body.Error == nil ||
		body.Error.Type != "invalid_request_error" || !strings.Contains(body.Error.Message, message) {
		t.Fatalf("got %d %s, want a 400 invalid_request_error saying %q", w.Code, w.Body.String(), message)
	}
}

// The Responses API.

func responsesAsk(model string, a matrixAsk) string {
	var input any = a.text
	if a.image != "" || a.call != nil {
		var content any = a.text
		if a.image != "" {
			content = []any{map[string]any{"type": "input_text", "text": a.text}, map[string]any{"type": "input_image", "image_url": a.image}}
		}
		items := []any{map[string]any{"role": "user", "content": content}}
		if a.call != nil {
			items = append(items,
				map[string]any{"type": "function_call", "call_id": a.call.id, "name": a.call.name, "arguments": a.call.args},
				map[string]any{"type": "function_call_output", "call_id": a.call.id, "output": a.result})
		}
		input = items
	}
	body := map[string]any{"model": model, "input": input, "store": false}
	if a.system != "" {
		body["instructions"] = a.system
	}
	if a.maxTokens > 0 {
		body["max_output_tokens"] = a.maxTokens
	}
	if a.tool {
		body["tools"] = []any{map[string]any{"type": "function", "name": matrixTool, "description": "looks a word up", "parameters": matrixSchema}}
	}
	if a.stream {
		body["stream"] = true
	}
	return mustJSON(body)
}

type responseJSON struct {
	Object string `json:"object"`
	Status string `json:"status"`
	Output []struct {
		Type    string `json:"type"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"output"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Usage *struct {
		InputTokens        int `json:"input_tokens"`
		InputTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
		OutputTokens int `json:"output_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

func (r responseJSON) answer(t *testing.T, body string) matrixAnswer {
	t.Helper()
	if r.Object != "response" || r.Usage == nil || r.Usage.TotalTokens != r.Usage.InputTokens+r.Usage.OutputTokens {
		t.Fatalf("not a response with its usage: %s", body)
	}
	a := matrixAnswer{stop: r.Status, usage: matrixUsage{input: r.Usage.InputTokens, output: r.Usage.OutputTokens,
		cacheRead: r.Usage.InputTokensDetails.CachedTokens}}
	if r.IncompleteDetails != nil {
		a.stop += ":" + r.IncompleteDetails.Reason
	}
	for _, o := range r.Output {
		switch o.Type {
		case "message":
			for _, c := range o.Content {
				a.text += c.Text
			}
		case "function_call":
			a.calls = append(a.calls, matrixCall{o.CallID, o.Name, o.Arguments})
		default:
			t.Fatalf("an output item of type %q: %s", o.Type, body)
		}
	}
	return a
}

func responsesRead(t *testing.T, body string, stream bool) matrixAnswer {
	t.Helper()
	if !stream {
		var r responseJSON
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("not a response: %s", body)
		}
		return r.answer(t, body)
	}
	evs := readEvents(t, body)
	last := evs[len(evs)-1]
	if last.Type != "response.completed" && last.Type != "response.incomplete" {
		t.Fatalf("the stream ends with %s:\n%s", last.Type, body)
	}
	var final struct {
		Response responseJSON `json:"response"`
	}
	if err := json.Unmarshal([]byte(last.Raw), &final); err != nil {
		t.Fatalf("%s: %v", last.Raw, err)
	}
	a := final.Response.answer(t, last.Raw)
	if "response."+strings.Split(a.stop, ":")[0] != last.Type {
		t.Fatalf("%s with a response %s", last.Type, a.stop)
	}
	var deltas, args strings.Builder
	for _, ev := range evs {
		switch ev.Type {
		case "response.output_text.delta":
			deltas.WriteString(ev.Data["delta"].(string))
		case "response.function_call_arguments.delta":
			args.WriteString(ev.Data["delta"].(string))
		}
	}
	if deltas.String() != a.text || len(a.calls) == 1 && args.String() != a.calls[0].args {
		t.Fatalf("the deltas say %q and %q, the response %+v", deltas.String(), args.String(), a)
	}
	return a
}

// Anthropic's Messages API.

func messagesAsk(model string, a matrixAsk) string {
	var content any = a.text
	if a.image != "" {
		_, data, _ := strings.Cut(a.image, ";base64,")
		content = []any{map[string]any{"type": "text", "text": a.text},
			map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": data}}}
	}
	msgs := []any{map[string]any{"role": "user", "content": content}}
	if a.call != nil {
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": a.call.id, "name": a.call.name,
				"input": json.RawMessage(a.call.args)}}},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": a.call.id, "content": a.result}}})
	}
	body := map[string]any{"model": model, "max_tokens": 200, "messages": msgs}
	if a.system != "" {
		body["system"] = []any{map[string]any{"type": "text", "text": a.system, "cache_control": map[string]any{"type": "ephemeral"}}}
	}
	if a.maxTokens > 0 {
		body["max_tokens"] = a.maxTokens
	}
	if a.tool {
		body["tools"] = []any{map[string]any{"name": matrixTool, "description": "looks a word up", "input_schema": matrixSchema}}
	}
	if a.stream {
		body["stream"] = true
	}
	return mustJSON(body)
}

type anthropicUsageJSON struct {
	InputTokens              *int `json:"input_tokens"`
	OutputTokens             *int `json:"output_tokens"`
	CacheReadInputTokens     *int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *int `json:"cache_creation_input_tokens"`
}

// over is u with what later says.
func (u anthropicUsageJSON) over(later anthropicUsageJSON) anthropicUsageJSON {
	for _, f := range []struct{ to, from **int }{{&u.InputTokens, &later.InputTokens}, {&u.OutputTokens, &later.OutputTokens},
		{&u.CacheReadInputTokens, &later.CacheReadInputTokens}, {&u.CacheCreationInputTokens, &later.CacheCreationInputTokens}} {
		if *f.from != nil {
			*f.to = *f.from
		}
	}
	return u
}

func (u anthropicUsageJSON) usage(t *testing.T, body string) matrixUsage {
	t.Helper()
	if u.InputTokens == nil || u.OutputTokens == nil || u.CacheReadInputTokens == nil || u.CacheCreationInputTokens == nil {
		t.Fatalf("usage without all its counts: %s", body)
	}
	return matrixUsage{input: *u.InputTokens + *u.CacheReadInputTokens + *u.CacheCreationInputTokens, output: *u.OutputTokens,
		cacheRead: *u.CacheReadInputTokens, cacheWrite: *u.CacheCreationInputTokens}
}

type anthropicBlockJSON struct {
	Type  string          `json:"type"`
	Text  string          `json:"text"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

func messagesRead(t *testing.T, body string, stream bool) matrixAnswer {
	t.Helper()
	type message struct {
		Type       string               `json:"type"`
		Content    []anthropicBlockJSON `json:"content"`
		StopReason string               `json:"stop_reason"`
		Usage      anthropicUsageJSON   `json:"usage"`
	}
	var a matrixAnswer
	blocks := func(bs []anthropicBlockJSON) {
		for _, b := range bs {
			switch b.Type {
			case "text":
				a.text += b.Text
			case "tool_use":
				a.calls = append(a.calls, matrixCall{b.ID, b.Name, string(b.Input)})
			default:
				t.Fatalf("a block of type %q: %s", b.Type, body)
			}
		}
	}
	if !stream {
		var m message
		if err := json.Unmarshal([]byte(body), &m); err != nil || m.Type != "message" {
			t.Fatalf("not a message: %s", body)
		}
		blocks(m.Content)
		a.stop, a.usage = m.StopReason, m.Usage.usage(t, body)
		return a
	}
	if names, _, _ := sseEvents(t, body); names[0] != "message_start" || names[len(names)-1] != "message_stop" {
		t.Fatalf("events %v", names)
	}
	var usage anthropicUsageJSON
	var content []anthropicBlockJSON
	for _, data := range dataEvents(t, body) {
		var ev struct {
			Type         string             `json:"type"`
			Index        int                `json:"index"`
			Message      *message           `json:"message"`
			ContentBlock anthropicBlockJSON `json:"content_block"`
			Delta        struct {
				Type        string `json:"type"`
				Text        string `json:"text"`
				PartialJSON string `json:"partial_json"`
				StopReason  string `json:"stop_reason"`
			} `json:"delta"`
			Usage anthropicUsageJSON `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("not an event: %s", data)
		}
		switch ev.Type {
		case "message_start":
			usage = ev.Message.Usage
		case "content_block_start":
			b := ev.ContentBlock
			if b.Type == "tool_use" {
				b.Input = nil // the whole input comes in deltas
			}
			content = append(content, b)
		case "content_block_delta":
			if ev.Index >= len(content) {
				t.Fatalf("a delta of block %d, not started: %s", ev.Index, body)
			}
			b := &content[ev.Index]
			b.Text += ev.Delta.Text
			b.Input = append(b.Input, ev.Delta.PartialJSON...)
		case "message_delta":
			a.stop, usage = ev.Delta.StopReason, usage.over(ev.Usage)
		case "error":
			t.Fatalf("an error event: %s", body)
		}
	}
	for i := range content {
		if content[i].Type == "tool_use" && len(content[i].Input) == 0 {
			content[i].Input = json.RawMessage("{}")
		}
	}
	blocks(content)
	a.usage = usage.usage(t, body)
	return a
}

// anthropicRefused checks Anthropic's error shape: the provider's 400 and
// its message, as an invalid request.
func anthropicRefused(t *testing.T, w *httptest.ResponseRecorder, message string) {
	t.Helper()
	anthropicError(t, w, 400, "invalid_request_error", message)
}
