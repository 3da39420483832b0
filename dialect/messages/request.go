// Package messages is Anthropic's Messages API as a dialect of the
// gateway: a Messages request translated into the chat completion body the
// pipeline runs, and what the pipeline answers (a chat completion, its
// stream of chunks, an OpenAI error) translated back into Anthropic's
// message object, its events and its errors. It is pure translation: no
// HTTP server, no database.
//
// What the chat form cannot carry is decided here, once:
//
//   - cache_control (on system, text, image and tool_result blocks and on
//     tools) rides on the chat content parts and tools, as LiteLLM writes
//     it; an Anthropic provider key reads it back, an OpenAI-compatible one
//     gets it as written (OpenAI caches prompts by itself);
//   - top_k rides as the chat body's top_k, which vLLM and other
//     OpenAI-compatible servers take; an Anthropic key reads it back;
//   - a tool_result's is_error rides on its tool message as is_error;
//   - extended thinking, context_management, output_config's effort, the
//     thinking blocks of assistant turns and the anthropic-beta header ride
//     as the chat body's thinking, context_management, reasoning_effort,
//     the messages' thinking_blocks and anthropic_beta (thinking.go): an
//     Anthropic key reads each back exactly, every other provider's format
//     maps or refuses it by name;
//   - documents, citations, server tools, MCP servers, containers and
//     service tiers are refused with a 400 naming them: the pipeline
//     cannot carry them to every provider, and dropping them would change
//     the answer without saying so.
package messages

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/wire"
)

// Options shape a translation.
type Options struct {
	// CountOnly reads a count_tokens body: max_tokens is not required and
	// stream is not read.
	CountOnly bool
	// BoundField names the chat field that carries max_tokens for a
	// model (family.Family.BoundField); nil: "max_tokens".
	BoundField func(model string) string
	// Betas are the request's anthropic-beta values, which an Anthropic
	// key is sent as they came.
	Betas []string
}

// Translation is a Messages request as the pipeline runs it.
type Translation struct {
	Chat   []byte // the chat completion body
	Model  string
	Stream bool
	// Origins[i] is where the chat body's messages[i] came from: "system"
	// or "messages.N".
	Origins []string
	// FirstImage is where the first image block is ("messages.0.content.1"),
	// "" when there is none: what a text-only model refuses.
	FirstImage string
	// Thinking is the type of thinking asked for (enabled, adaptive,
	// disabled), "" when none: what a model that cannot think refuses.
	Thinking string
}

// request is a Messages request body: every field the Messages API has
// that Sluice reads, and the ones it refuses by name.
type request struct {
	Model         *string                   `json:"model"`
	MaxTokens     *int64                    `json:"max_tokens"`
	System        jsontext.Value            `json:"system"`
	Messages      *[]turn                   `json:"messages"`
	Temperature   *float64                  `json:"temperature"`
	TopP          *float64                  `json:"top_p"`
	TopK          *int64                    `json:"top_k"`
	StopSequences []string                  `json:"stop_sequences"`
	Stream        *bool                     `json:"stream"`
	Metadata      *metadata                 `json:"metadata"`
	Tools         []jsontext.Value          `json:"tools"`
	ToolChoice    *wire.AnthropicToolChoice `json:"tool_choice"`
	// Carried in the chat form's extensions (thinking.go).
	Thinking          jsontext.Value `json:"thinking"`
	ContextManagement jsontext.Value `json:"context_management"`
	OutputConfig      jsontext.Value `json:"output_config"`

	// What the pipeline cannot carry to every provider: refused by name.
	MCPServers  jsontext.Value `json:"mcp_servers"`
	Container   jsontext.Value `json:"container"`
	ServiceTier jsontext.Value `json:"service_tier"`
}

type metadata struct {
	UserID *string `json:"user_id"`
}

type turn struct {
	Role    *string        `json:"role"`
	Content jsontext.Value `json:"content"`
}

// The chat completion body the translation writes.
type chatRequest struct {
	Model             string              `json:"model"`
	Messages          []chatMessage       `json:"messages"`
	MaxTokens         *int64              `json:"max_tokens,omitempty"`
	MaxCompletion     *int64              `json:"max_completion_tokens,omitempty"`
	Temperature       *float64            `json:"temperature,omitempty"`
	TopP              *float64            `json:"top_p,omitempty"`
	TopK              *int64              `json:"top_k,omitempty"`
	Stop              []string            `json:"stop,omitempty"`
	User              string              `json:"user,omitempty"`
	Stream            bool                `json:"stream,omitempty"`
	StreamOptions     *streamOptions      `json:"stream_options,omitempty"`
	Tools             []chatTool          `json:"tools,omitempty"`
	ToolChoice        any                 `json:"tool_choice,omitempty"`
	ParallelToolCalls *bool               `json:"parallel_tool_calls,omitempty"`
	ResponseFormat    *chatResponseFormat `json:"response_format,omitempty"`
	// The extensions of thinking.go.
	ReasoningEffort   string          `json:"reasoning_effort,omitempty"`
	Thinking          json.RawMessage `json:"thinking,omitempty"`
	ContextManagement json.RawMessage `json:"context_management,omitempty"`
	AnthropicBeta     []string        `json:"anthropic_beta,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatMessage struct {
	Role       string         `json:"role"`
	Content    any            `json:"content"` // a string, []chatPart, or nil
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
	IsError    bool           `json:"is_error,omitempty"` // a tool_result's, for an Anthropic key
	// ThinkingBlocks are an assistant turn's thinking and
	// redacted_thinking blocks, exactly as the client sent them back.
	ThinkingBlocks []wire.AnthropicBlock `json:"thinking_blocks,omitempty"`
}

type chatPart struct {
	Type         string          `json:"type"`
	Text         *string         `json:"text,omitempty"`
	ImageURL     *chatImage      `json:"image_url,omitempty"`
	CacheControl json.RawMessage `json:"cache_control,omitempty"`
}

type chatImage struct {
	URL string `json:"url"`
}

type chatToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type chatTool struct {
	Type         string          `json:"type"`
	Function     chatToolDef     `json:"function"`
	CacheControl json.RawMessage `json:"cache_control,omitempty"`
}

type chatToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

// ToChat translates a Messages request body into the chat completion body
// the pipeline runs, or a 400 that names what is wrong the way Anthropic
// would, or what Sluice does not carry.
func ToChat(body []byte, opts Options) (Translation, error) {
	if tr, ok := translateCommon(body, opts); ok {
		return tr, nil
	}
	return translateGeneral(body, opts)
}

// translateGeneral is ToChat for any body: every field of the request is
// decoded with reflection, and the chat body written with encoding/json.
func translateGeneral(body []byte, opts Options) (Translation, error) {
	var r request
	if err := decodeAt(body, "", &r); err != nil {
		return Translation{}, err
	}
	if err := refuseUncarried(&r); err != nil {
		return Translation{}, err
	}
	ext, err := readExtensions(&r, opts)
	if err != nil {
		return Translation{}, err
	}
	switch {
	case r.Model == nil || *r.Model == "":
		return Translation{}, required("model")
	case r.MaxTokens == nil && !opts.CountOnly:
		return Translation{}, required("max_tokens")
	case r.MaxTokens != nil && *r.MaxTokens < 1:
		return Translation{}, invalid("invalid_field", "max_tokens", "max_tokens: Input should be greater than or equal to 1")
	case r.Messages == nil:
		return Translation{}, required("messages")
	case len(*r.Messages) == 0:
		return Translation{}, invalid("invalid_field", "messages", "messages: at least one message is required")
	}
	if err := inRange("temperature", r.Temperature); err != nil {
		return Translation{}, err
	}
	if err := inRange("top_p", r.TopP); err != nil {
		return Translation{}, err
	}
	if r.TopK != nil && *r.TopK < 0 {
		return Translation{}, invalid("invalid_field", "top_k", "top_k: Input should be greater than or equal to 0")
	}

	t := &translator{}
	if err := t.system(r.System); err != nil {
		return Translation{}, err
	}
	for i, m := range *r.Messages {
		if err := t.turn(at("messages", i), m); err != nil {
			return Translation{}, err
		}
	}
	out := chatRequest{Model: *r.Model, Messages: t.messages, Temperature: r.Temperature, TopP: r.TopP, TopK: r.TopK,
		Stop: r.StopSequences, ResponseFormat: ext.format, ReasoningEffort: ext.effort, Thinking: ext.thinking, ContextManagement: ext.contextManagement,
		AnthropicBeta: opts.Betas}
	if r.MaxTokens != nil {
		field := "max_tokens"
		if opts.BoundField != nil {
			field = opts.BoundField(*r.Model)
		}
		if field == "max_completion_tokens" {
			out.MaxCompletion = r.MaxTokens
		} else {
			out.MaxTokens = r.MaxTokens
		}
	}
	if r.Metadata != nil && r.Metadata.UserID != nil {
		out.User = *r.Metadata.UserID
	}
	stream := !opts.CountOnly && r.Stream != nil && *r.Stream
	if stream {
		// A stream is billed by its usage chunk, and the message_delta
		// event reports it: always asked for.
		out.Stream, out.StreamOptions = true, &streamOptions{IncludeUsage: true}
	}
	for i, raw := range r.Tools {
		tool, err := chatToolOf(raw, at("tools", i))
		if err != nil {
			return Translation{}, err
		}
		out.Tools = append(out.Tools, tool)
	}
	if r.ToolChoice != nil {
		choice, parallel, err := toolChoice(*r.ToolChoice)
		if err != nil {
			return Translation{}, err
		}
		out.ToolChoice, out.ParallelToolCalls = choice, parallel
	}
	chat, err := marshal(out)
	if err != nil {
		return Translation{}, err
	}
	return Translation{Chat: chat, Model: *r.Model, Stream: stream, Origins: t.origins, FirstImage: t.firstImage, Thinking: ext.thinkingType}, nil
}

// refuseUncarried refuses, by name, the features the pipeline cannot
// carry to every provider.
func refuseUncarried(r *request) error {
	for _, f := range []struct {
		name string
		v    jsontext.Value
		why  string
	}{
		{"mcp_servers", r.MCPServers, "MCP servers are not supported through Sluice; call your tools as client tools"},
		{"container", r.Container, "containers are not supported through Sluice"},
		{"service_tier", r.ServiceTier, "Sluice does not choose a provider's service tier; omit service_tier"},
	} {
		if len(f.v) > 0 && f.v.Kind() != 'n' {
			return unsupported(f.name, f.why)
		}
	}
	return nil
}

// inRange checks a sampling parameter against Anthropic's range, 0 to 1.
func inRange(name string, v *float64) error {
	switch {
	case v == nil:
		return nil
	case *v < 0:
		return invalid("invalid_field", name, name+": Input should be greater than or equal to 0")
	case *v > 1:
		return invalid("invalid_field", name, name+": Input should be less than or equal to 1")
	}
	return nil
}

// marshal writes v as JSON without HTML escapes: prompts are full of < and >.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, invalid("invalid_json", "", "the request could not be translated: "+err.Error())
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// translator builds the chat messages of one request.
type translator struct {
	messages   []chatMessage
	origins    []string
	firstImage string
}

func (t *translator) add(origin string, m chatMessage) {
	t.messages = append(t.messages, m)
	t.origins = append(t.origins, origin)
}

// system translates the system prompt: a string, or text blocks (kept as
// parts, so their cache_control stays where it was).
func (t *translator) system(raw jsontext.Value) error {
	switch kind(raw) {
	case 0, 'n':
		return nil
	case '"':
		var s string
		if err := decodeAt(raw, "system", &s); err != nil {
			return err
		}
		t.add("system", chatMessage{Role: "system", Content: s})
		return nil
	case '[':
	default:
		return invalid("invalid_field", "system", "system: Input should be a valid string or a list of text blocks")
	}
	var blocks []jsontext.Value
	if err := decodeAt(raw, "system", &blocks); err != nil {
		return err
	}
	parts := make([]chatPart, 0, len(blocks))
	for i, b := range blocks {
		path := at("system", i)
		typ, err := blockType(b, path)
		if err != nil {
			return err
		}
		if typ != "text" {
			return unsupported(path, "system blocks must be text blocks, not '"+typ+"'")
		}
		p, err := textPart(b, path)
		if err != nil {
			return err
		}
		parts = append(parts, p)
	}
	if len(parts) > 0 {
		t.add("system", chatMessage{Role: "system", Content: parts})
	}
	return nil
}

// turn translates one message. A user message's tool_result blocks become
// tool messages, which chat wants right after the assistant's tool calls,
// and the rest of it a user message after them; an assistant message's
// tool_use blocks become its tool calls.
func (t *translator) turn(path string, m turn) error {
	if m.Role == nil {
		return required(path + ".role")
	}
	role := *m.Role
	if role != "user" && role != "assistant" {
		return invalid("invalid_field", path+".role", path+".role: Input should be 'user' or 'assistant'")
	}
	switch kind(m.Content) {
	case 0:
		return required(path + ".content")
	case '"':
		var s string
		if err := decodeAt(m.Content, path+".content", &s); err != nil {
			return err
		}
		t.add(path, chatMessage{Role: role, Content: s})
		return nil
	case '[':
	default:
		return invalid("invalid_field", path+".content", path+".content: Input should be a valid string or a list of content blocks")
	}
	var blocks []jsontext.Value
	if err := decodeAt(m.Content, path+".content", &blocks); err != nil {
		return err
	}
	var parts []chatPart
	var calls []chatToolCall
	var thinking []wire.AnthropicBlock
	for j, raw := range blocks {
		bp := at(path+".content", j)
		typ, err := blockType(raw, bp)
		if err != nil {
			return err
		}
		switch {
		case typ == "text":
			p, err := textPart(raw, bp)
			if err != nil {
				return err
			}
			parts = append(parts, p)
		case typ == "image" && role == "user":
			p, err := t.imagePart(raw, bp)
			if err != nil {
				return err
			}
			parts = append(parts, p)
		case typ == "tool_use" && role == "assistant":
			call, err := toolCall(raw, bp)
			if err != nil {
				return err
			}
			calls = append(calls, call)
		case typ == "tool_result" && role == "user":
			msg, err := t.toolResult(raw, bp)
			if err != nil {
				return err
			}
			t.add(path, msg)
		case (typ == "thinking" || typ == "redacted_thinking") && role == "assistant":
			if len(parts) > 0 || len(calls) > 0 {
				// The chat form keeps an assistant turn's thinking ahead
				// of its text and tool calls, where Anthropic puts it;
				// moving a block would change what its signature signs.
				return unsupported(bp, "'"+typ+"' blocks must come before an assistant message's text and tool_use blocks")
			}
			b, err := thinkingBlock(raw, bp, typ)
			if err != nil {
				return err
			}
			thinking = append(thinking, b)
		case typ == "":
			return required(bp + ".type")
		default:
			return unsupported(bp, blockRefusal(typ, role))
		}
	}
	switch {
	case len(calls) > 0:
		msg := chatMessage{Role: role, ToolCalls: calls, ThinkingBlocks: thinking}
		if len(parts) > 0 {
			msg.Content = parts
		}
		t.add(path, msg)
	case len(parts) > 0:
		t.add(path, chatMessage{Role: role, Content: parts, ThinkingBlocks: thinking})
	case len(blocks) == 0 || len(thinking) > 0:
		t.add(path, chatMessage{Role: role, Content: "", ThinkingBlocks: thinking})
	}
	return nil
}

// blockRefusal says why a block is not carried.
func blockRefusal(typ, role string) string {
	switch typ {
	case "image", "tool_result":
		return "'" + typ + "' blocks belong in user messages"
	case "tool_use", "thinking", "redacted_thinking":
		return "'" + typ + "' blocks belong in assistant messages"
	case "document", "search_result":
		return "'" + typ + "' blocks are not supported through Sluice; send the text as text blocks"
	}
	if strings.HasPrefix(typ, "server_tool_use") || strings.HasSuffix(typ, "_tool_result") || strings.HasPrefix(typ, "mcp_") {
		return "'" + typ + "' blocks are not supported: Sluice does not run server or MCP tools"
	}
	return "'" + typ + "' blocks are not supported through Sluice; send text, image, tool_use and tool_result blocks"
}

// textPart translates a text block.
func textPart(raw jsontext.Value, path string) (chatPart, error) {
	var b wire.AnthropicBlock
	if err := decodeAt(raw, path, &b); err != nil {
		return chatPart{}, err
	}
	if b.Text == nil {
		return chatPart{}, required(path + ".text")
	}
	if f := foreign(b, "text"); f != "" {
		return chatPart{}, invalid("unknown_field", path+"."+f, path+"."+f+": Extra inputs are not permitted")
	}
	return chatPart{Type: "text", Text: b.Text, CacheControl: b.CacheControl}, nil
}

// imagePart translates an image block: an inline image as a data: URL,
// one by address as its URL.
func (t *translator) imagePart(raw jsontext.Value, path string) (chatPart, error) {
	var b wire.AnthropicBlock
	if err := decodeAt(raw, path, &b); err != nil {
		return chatPart{}, err
	}
	if f := foreign(b, "image"); f != "" {
		return chatPart{}, invalid("unknown_field", path+"."+f, path+"."+f+": Extra inputs are not permitted")
	}
	s := b.Source
	if s == nil {
		return chatPart{}, required(path + ".source")
	}
	var url string
	switch s.Type {
	case "base64":
		switch s.MediaType {
		case "image/jpeg", "image/png", "image/gif", "image/webp":
		case "":
			return chatPart{}, required(path + ".source.media_type")
		default:
			return chatPart{}, invalid("invalid_field", path+".source.media_type",
				path+".source.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'")
		}
		if s.Data == "" {
			return chatPart{}, required(path + ".source.data")
		}
		url = "data:" + s.MediaType + ";base64," + s.Data
	case "url":
		if s.URL == "" {
			return chatPart{}, required(path + ".source.url")
		}
		url = s.URL
	case "":
		return chatPart{}, required(path + ".source.type")
	default:
		return chatPart{}, unsupported(path+".source.type", "image sources of type '"+s.Type+"' are not supported through Sluice; send base64 or url")
	}
	if t.firstImage == "" {
		t.firstImage = path
	}
	return chatPart{Type: "image_url", ImageURL: &chatImage{URL: url}, CacheControl: b.CacheControl}, nil
}

// toolCall translates a tool_use block into a chat tool call.
func toolCall(raw jsontext.Value, path string) (chatToolCall, error) {
	var b wire.AnthropicBlock
	if err := decodeAt(raw, path, &b); err != nil {
		return chatToolCall{}, err
	}
	if f := foreign(b, "tool_use"); f != "" {
		if f == "cache_control" {
			return chatToolCall{}, unsupported(path+".cache_control", "cache_control on tool_use blocks is not carried through Sluice; mark a text block instead")
		}
		return chatToolCall{}, invalid("unknown_field", path+"."+f, path+"."+f+": Extra inputs are not permitted")
	}
	switch {
	case b.ID == "":
		return chatToolCall{}, required(path + ".id")
	case b.Name == "":
		return chatToolCall{}, required(path + ".name")
	case len(b.Input) == 0:
		return chatToolCall{}, required(path + ".input")
	case kind(b.Input) != '{':
		return chatToolCall{}, invalid("invalid_field", path+".input", path+".input: Input should be a valid dictionary")
	}
	var args bytes.Buffer
	if err := json.Compact(&args, b.Input); err != nil {
		return chatToolCall{}, invalid("invalid_field", path+".input", path+".input: Input should be a valid dictionary")
	}
	return chatToolCall{ID: b.ID, Type: "function", Function: chatFunction{Name: b.Name, Arguments: args.String()}}, nil
}

// toolResult translates a tool_result block into a tool message: its
// content a string, or text and image parts.
func (t *translator) toolResult(raw jsontext.Value, path string) (chatMessage, error) {
	var b wire.AnthropicBlock
	if err := decodeAt(raw, path, &b); err != nil {
		return chatMessage{}, err
	}
	if f := foreign(b, "tool_result"); f != "" {
		return chatMessage{}, invalid("unknown_field", path+"."+f, path+"."+f+": Extra inputs are not permitted")
	}
	if b.ToolUseID == "" {
		return chatMessage{}, required(path + ".tool_use_id")
	}
	msg := chatMessage{Role: "tool", ToolCallID: b.ToolUseID, IsError: b.IsError, Content: ""}
	cp := path + ".content"
	switch kind(b.Content) {
	case 0, 'n':
	case '"':
		var s string
		if err := decodeAt(b.Content, cp, &s); err != nil {
			return chatMessage{}, err
		}
		msg.Content = s
	case '[':
		var blocks []jsontext.Value
		if err := decodeAt(b.Content, cp, &blocks); err != nil {
			return chatMessage{}, err
		}
		parts := make([]chatPart, 0, len(blocks))
		for k, inner := range blocks {
			ip := at(cp, k)
			typ, err := blockType(inner, ip)
			if err != nil {
				return chatMessage{}, err
			}
			var p chatPart
			switch typ {
			case "text":
				p, err = textPart(inner, ip)
			case "image":
				p, err = t.imagePart(inner, ip)
			case "":
				err = required(ip + ".type")
			default:
				err = unsupported(ip, "a tool_result's content may hold text and image blocks, not '"+typ+"'")
			}
			if err != nil {
				return chatMessage{}, err
			}
			parts = append(parts, p)
		}
		msg.Content = parts
	default:
		return chatMessage{}, invalid("invalid_field", cp, cp+": Input should be a valid string or a list of content blocks")
	}
	if len(b.CacheControl) > 0 {
		// Kept on the result's last part, where an Anthropic key puts it
		// back on the block.
		parts, _ := msg.Content.([]chatPart)
		if s, ok := msg.Content.(string); ok {
			parts = []chatPart{{Type: "text", Text: &s}}
		}
		if len(parts) == 0 {
			empty := ""
			parts = []chatPart{{Type: "text", Text: &empty}}
		}
		parts[len(parts)-1].CacheControl = b.CacheControl
		msg.Content = parts
	}
	return msg, nil
}

// foreign is the first field of b set that a block of type typ does not
// have ("" when none): the block type is one union, so the strict decode
// alone lets a text block carry a source.
func foreign(b wire.AnthropicBlock, typ string) string {
	has := map[string]bool{
		"text":          b.Text != nil,
		"source":        b.Source != nil,
		"id":            b.ID != "",
		"name":          b.Name != "",
		"input":         len(b.Input) > 0,
		"tool_use_id":   b.ToolUseID != "",
		"content":       len(b.Content) > 0,
		"is_error":      b.IsError,
		"cache_control": len(b.CacheControl) > 0,
		"thinking":      b.Thinking != nil,
		"signature":     b.Signature != nil,
		"data":          b.Data != "",
	}
	own := map[string][]string{
		"text":              {"text", "cache_control"},
		"image":             {"source", "cache_control"},
		"tool_use":          {"id", "name", "input"},
		"tool_result":       {"tool_use_id", "content", "is_error", "cache_control"},
		"thinking":          {"thinking", "signature"},
		"redacted_thinking": {"data"},
	}[typ]
	for _, f := range []string{"text", "source", "id", "name", "input", "tool_use_id", "content", "is_error", "cache_control",
		"thinking", "signature", "data"} {
		if has[f] && !contains(own, f) {
			return f
		}
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// chatToolOf translates a client tool; Anthropic's server tools (typed
// web_search_…, bash_…, text_editor_…) are refused by name.
func chatToolOf(raw jsontext.Value, path string) (chatTool, error) {
	typ, err := blockType(raw, path)
	if err != nil {
		return chatTool{}, err
	}
	if typ != "" && typ != "custom" {
		return chatTool{}, unsupported(path+".type", "server tool '"+typ+"' is not supported: Sluice does not run Anthropic's server tools; define a client tool")
	}
	var tool wire.AnthropicTool
	if err := decodeAt(raw, path, &tool); err != nil {
		return chatTool{}, err
	}
	switch {
	case tool.Name == "":
		return chatTool{}, required(path + ".name")
	case len(tool.InputSchema) == 0:
		return chatTool{}, required(path + ".input_schema")
	case kind(tool.InputSchema) != '{':
		return chatTool{}, invalid("invalid_field", path+".input_schema", path+".input_schema: Input should be a valid dictionary")
	}
	var schema bytes.Buffer
	if err := json.Compact(&schema, tool.InputSchema); err != nil {
		return chatTool{}, invalid("invalid_field", path+".input_schema", path+".input_schema: Input should be a valid dictionary")
	}
	return chatTool{Type: "function", Function: chatToolDef{Name: tool.Name, Description: tool.Description, Parameters: schema.Bytes()},
		CacheControl: tool.CacheControl}, nil
}

// toolChoice translates tool_choice: auto, any (chat's "required"), tool
// (a named function) or none; disable_parallel_tool_use is chat's
// parallel_tool_calls false.
func toolChoice(c wire.AnthropicToolChoice) (any, *bool, error) {
	var parallel *bool
	if c.DisableParallelToolUse {
		f := false
		parallel = &f
	}
	switch c.Type {
	case "auto":
		return "auto", parallel, nil
	case "any":
		return "required", parallel, nil
	case "none":
		return "none", nil, nil
	case "tool":
		if c.Name == "" {
			return nil, nil, required("tool_choice.name")
		}
		return map[string]any{"type": "function", "function": map[string]string{"name": c.Name}}, parallel, nil
	case "":
		return nil, nil, required("tool_choice.type")
	}
	return nil, nil, invalid("invalid_field", "tool_choice.type", "tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'")
}

// Param maps a place in the chat body ("messages[4].content[0]") to the
// place in the Messages request it came from ("messages.2.content").
func (t Translation) Param(chat string) string {
	rest, ok := strings.CutPrefix(chat, "messages[")
	if !ok {
		return chat
	}
	end := strings.IndexByte(rest, ']')
	if end < 0 {
		return chat
	}
	n, err := strconv.Atoi(rest[:end])
	if err != nil || n < 0 || n >= len(t.Origins) {
		return chat
	}
	origin := t.Origins[n]
	if origin != "system" && strings.HasPrefix(rest[end+1:], ".content") {
		return origin + ".content"
	}
	return origin
}

// Reword puts an error the pipeline found in the chat body in the terms
// of the Messages request: its param mapped back, and named at the start
// of its message, as Anthropic's errors are, unless the message names it.
func (t Translation) Reword(err error) error {
	e, ok := err.(*apperr.Error)
	if !ok || e.Param == "" {
		return err
	}
	out := *e
	out.Param = t.Param(e.Param)
	if !strings.Contains(out.Message, out.Param) {
		out.Message = out.Param + ": " + out.Message
	}
	return &out
}
