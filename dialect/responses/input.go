package responses

import (
	"encoding/json"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// chatMessage is one chat completions message.
type chatMessage struct {
	Role       string         `json:"role"`
	Content    any            `json:"content"` // a string, []chatPart, or nil (an assistant's tool calls alone)
	Refusal    string         `json:"refusal,omitempty"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type chatPart struct {
	Type     string   `json:"type"`
	Text     *string  `json:"text,omitempty"`
	Refusal  *string  `json:"refusal,omitempty"`
	ImageURL *chatURL `json:"image_url,omitempty"`
}

type chatURL struct {
	URL    string `json:"url"`
	Detail string `json:"detail,omitempty"`
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

// readInput translates input: a string (one user message) or an array of
// items.
func (r *Request) readInput(raw jsontext.Value) error {
	switch {
	case !isSet(raw):
		return nil
	case raw.Kind() == '"':
		var s string
		if err := decode(raw, "input", &s); err != nil {
			return err
		}
		r.add(chatMessage{Role: "user", Content: s}, source{param: "input"})
		return nil
	case raw.Kind() != '[':
		return invalid("input", "input must be a string or an array of input items")
	}
	var items []jsontext.Value
	if err := decode(raw, "input", &items); err != nil {
		return err
	}
	for i, item := range items {
		if err := r.readItem(item, at("input", i)); err != nil {
			return err
		}
	}
	return nil
}

func (r *Request) add(m chatMessage, s source) {
	r.input = append(r.input, m)
	r.sources = append(r.sources, s)
}

// readItem translates one input item.
func (r *Request) readItem(raw jsontext.Value, param string) error {
	if raw.Kind() != '{' {
		return invalid(param, param+" must be an input item object")
	}
	var head struct {
		Type string `json:"type"`
		Role string `json:"role"`
	}
	// Only the type and role here; the item's own decode is strict.
	if err := jsonv2.Unmarshal(raw, &head); err != nil {
		return decodeError(err, param)
	}
	switch head.Type {
	case "message":
		return r.readMessage(raw, param)
	case "":
		if head.Role == "" {
			return missing(param + ".type")
		}
		return r.readMessage(raw, param)
	case "function_call":
		return r.readFunctionCall(raw, param)
	case "function_call_output", "custom_tool_call_output":
		return r.readFunctionOutput(raw, param)
	case "custom_tool_call":
		return r.readCustomToolCall(raw, param)
	case "reasoning":
		return readReasoningItem(raw, param)
	}
	return unsupported(param+".type", "input item type '"+head.Type+"' is not supported: Sluice carries messages, function_call, function_call_output, custom_tool_call and custom_tool_call_output items")
}

// readMessage translates a message item.
func (r *Request) readMessage(raw jsontext.Value, param string) error {
	var m struct {
		Type    string         `json:"type"`
		Role    string         `json:"role"`
		Content jsontext.Value `json:"content"`
		// An earlier answer's output item sent back carries these; they
		// say nothing to the model.
		ID     string         `json:"id"`
		Status string         `json:"status"`
		Phase  jsontext.Value `json:"phase"`
	}
	if err := decode(raw, param, &m); err != nil {
		return err
	}
	switch m.Role {
	case "user", "assistant", "system", "developer":
	case "":
		return missing(param + ".role")
	default:
		return invalid(param+".role", param+".role must be one of user, assistant, system, developer")
	}
	if isSet(m.Phase) {
		return unsupported(param+".phase", "an assistant message's phase cannot be carried to chat completions; leave it out")
	}
	msg := chatMessage{Role: m.Role}
	switch m.Content.Kind() {
	case '"':
		var s string
		if err := decode(m.Content, param+".content", &s); err != nil {
			return err
		}
		msg.Content = s
	case '[':
		var parts []jsontext.Value
		if err := decode(m.Content, param+".content", &parts); err != nil {
			return err
		}
		out := make([]chatPart, 0, len(parts))
		for j, p := range parts {
			cp, err := r.readPart(p, at(param+".content", j), m.Role)
			if err != nil {
				return err
			}
			out = append(out, cp)
		}
		msg.Content = out
	case 0:
		return missing(param + ".content")
	default:
		return invalid(param+".content", param+".content must be a string or an array of content parts")
	}
	r.add(msg, source{param: param, parts: true})
	return nil
}

// readPart translates one content part of a message of role.
func (r *Request) readPart(raw jsontext.Value, param, role string) (chatPart, error) {
	if raw.Kind() != '{' {
		return chatPart{}, invalid(param, param+" must be a content part object")
	}
	var head struct {
		Type string `json:"type"`
	}
	if err := jsonv2.Unmarshal(raw, &head); err != nil {
		return chatPart{}, decodeError(err, param)
	}
	assistant := role == "assistant"
	switch head.Type {
	case "input_text", "output_text":
		var p struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
			// An earlier answer's text sent back carries these; they
			// describe it and say nothing to the model.
			Annotations jsontext.Value `json:"annotations"`
			Logprobs    jsontext.Value `json:"logprobs"`
		}
		if err := decode(raw, param, &p); err != nil {
			return chatPart{}, err
		}
		if head.Type == "output_text" && !assistant {
			return chatPart{}, invalid(param+".type", "output_text parts belong to assistant messages; a "+role+" message sends input_text")
		}
		if head.Type == "input_text" && (isSet(p.Annotations) || isSet(p.Logprobs)) {
			return chatPart{}, unsupported(param, "an input_text part has only type and text")
		}
		if p.Text == nil {
			return chatPart{}, missing(param + ".text")
		}
		return chatPart{Type: "text", Text: p.Text}, nil
	case "refusal":
		var p struct {
			Type    string  `json:"type"`
			Refusal *string `json:"refusal"`
		}
		if err := decode(raw, param, &p); err != nil {
			return chatPart{}, err
		}
		if !assistant {
			return chatPart{}, invalid(param+".type", "refusal parts belong to assistant messages")
		}
		if p.Refusal == nil {
			return chatPart{}, missing(param + ".refusal")
		}
		return chatPart{Type: "refusal", Refusal: p.Refusal}, nil
	case "input_image":
		var p struct {
			Type     string  `json:"type"`
			ImageURL *string `json:"image_url"`
			FileID   *string `json:"file_id"`
			Detail   *string `json:"detail"`
		}
		if err := decode(raw, param, &p); err != nil {
			return chatPart{}, err
		}
		switch {
		case p.FileID != nil:
			return chatPart{}, unsupported(param+".file_id", "images by file_id are not supported: Sluice keeps no files for them; send image_url (an https or data: URL)")
		case role != "user":
			return chatPart{}, invalid(param+".type", "images belong to user messages; a "+role+" message cannot carry one")
		case p.ImageURL == nil || *p.ImageURL == "":
			return chatPart{}, missing(param + ".image_url")
		}
		img := &chatURL{URL: *p.ImageURL}
		if p.Detail != nil {
			switch *p.Detail {
			case "auto", "low", "high":
				img.Detail = *p.Detail
			default:
				return chatPart{}, invalid(param+".detail", param+".detail must be one of auto, low, high")
			}
		}
		r.images = append(r.images, param)
		return chatPart{Type: "image_url", ImageURL: img}, nil
	case "":
		return chatPart{}, missing(param + ".type")
	}
	return chatPart{}, unsupported(param+".type", "content part type '"+head.Type+"' is not supported: Sluice carries input_text, input_image (by image_url), output_text and refusal parts")
}

// readFunctionCall translates a function_call item: a tool call of the
// assistant message before it when that is the last message (so parallel
// calls, and an answer's text and calls, stay one chat message, as chat
// completions requires), else a message of its own.
func (r *Request) readFunctionCall(raw jsontext.Value, param string) error {
	var fc struct {
		Type      string  `json:"type"`
		ID        string  `json:"id"`
		Status    string  `json:"status"`
		CallID    *string `json:"call_id"`
		Name      *string `json:"name"`
		Arguments *string `json:"arguments"`
	}
	if err := decode(raw, param, &fc); err != nil {
		return err
	}
	switch {
	case fc.CallID == nil || *fc.CallID == "":
		return missing(param + ".call_id")
	case fc.Name == nil || *fc.Name == "":
		return missing(param + ".name")
	case fc.Arguments == nil:
		return missing(param + ".arguments")
	}
	r.addCall(chatToolCall{ID: *fc.CallID, Type: "function", Function: chatFunction{Name: *fc.Name, Arguments: *fc.Arguments}}, param)
	return nil
}

// addCall adds a tool call made of the input item at param.
func (r *Request) addCall(call chatToolCall, param string) {
	if n := len(r.input); n > 0 && r.input[n-1].Role == "assistant" {
		r.input[n-1].ToolCalls = append(r.input[n-1].ToolCalls, call)
		return
	}
	r.add(chatMessage{Role: "assistant", ToolCalls: []chatToolCall{call}}, source{param: param})
}

// readFunctionOutput translates a function_call_output or
// custom_tool_call_output item into a tool message: chat completions
// answers a function call and a custom tool's call (a function call
// there) alike.
func (r *Request) readFunctionOutput(raw jsontext.Value, param string) error {
	var fo struct {
		Type   string         `json:"type"`
		ID     string         `json:"id"`
		Status string         `json:"status"`
		CallID *string        `json:"call_id"`
		Output jsontext.Value `json:"output"`
		// Codex names the tool of a custom_tool_call_output; the call id
		// says the same, so it is read and not sent.
		Name jsontext.Value `json:"name"`
	}
	if err := decode(raw, param, &fo); err != nil {
		return err
	}
	if isSet(fo.Name) && fo.Type != "custom_tool_call_output" {
		return unsupported(param+".name", "field '"+param+".name' is not supported: Sluice's Responses API runs on chat completions, which cannot carry it")
	}
	if fo.CallID == nil || *fo.CallID == "" {
		return missing(param + ".call_id")
	}
	msg := chatMessage{Role: "tool", ToolCallID: *fo.CallID}
	switch fo.Output.Kind() {
	case '"':
		var s string
		if err := decode(fo.Output, param+".output", &s); err != nil {
			return err
		}
		msg.Content = s
	case '[':
		var parts []jsontext.Value
		if err := decode(fo.Output, param+".output", &parts); err != nil {
			return err
		}
		out := make([]chatPart, 0, len(parts))
		for j, p := range parts {
			pp := at(param+".output", j)
			var head struct {
				Type string `json:"type"`
			}
			if err := jsonv2.Unmarshal(p, &head); err != nil {
				return decodeError(err, pp)
			}
			if head.Type != "input_text" {
				return unsupported(pp+".type", "a function call's output may carry input_text parts only here, not '"+head.Type+"'")
			}
			var t struct {
				Type string  `json:"type"`
				Text *string `json:"text"`
			}
			if err := decode(p, pp, &t); err != nil {
				return err
			}
			if t.Text == nil {
				return missing(pp + ".text")
			}
			out = append(out, chatPart{Type: "text", Text: t.Text})
		}
		msg.Content = out
	case 0:
		return missing(param + ".output")
	default:
		return invalid(param+".output", param+".output must be a string or an array of input_text parts")
	}
	r.add(msg, source{param: param})
	return nil
}

// readReasoningItem reads a reasoning item sent back. Sluice never
// returns one (chat completions has no reasoning items), so one here was
// made by another provider: its encrypted content only that provider can
// read, its id only that provider can look up, and its summary is text
// the model did not see as such. Those are refused, naming the field,
// since dropping them would change what the model is told. An item with
// none of them (a summary-less, content-less item without id, as a
// client that strips null fields sends) carries nothing and is dropped.
func readReasoningItem(raw jsontext.Value, param string) error {
	var it struct {
		Type             string           `json:"type"`
		ID               *string          `json:"id"`
		Status           string           `json:"status"`
		Summary          []jsontext.Value `json:"summary"`
		Content          []jsontext.Value `json:"content"`
		EncryptedContent *string          `json:"encrypted_content"`
	}
	if err := decode(raw, param, &it); err != nil {
		return err
	}
	switch {
	case it.EncryptedContent != nil && *it.EncryptedContent != "":
		return unsupported(param+".encrypted_content", "encrypted reasoning cannot be carried to chat completions: only the provider that made it can read it (Sluice returns none); leave reasoning items out")
	case len(it.Summary) > 0:
		return unsupported(param+".summary", "a reasoning summary cannot be carried to chat completions; leave reasoning items out, or send the summary as a message")
	case len(it.Content) > 0:
		return unsupported(param+".content", "reasoning content cannot be carried to chat completions; leave reasoning items out, or send it as a message")
	case it.ID != nil && *it.ID != "":
		return unsupported(param+".id", "a reasoning item by id cannot be carried to chat completions: Sluice keeps no reasoning; leave reasoning items out")
	}
	return nil
}

// marshalRaw re-encodes a raw value read from the request, compact.
func marshalRaw(v jsontext.Value) json.RawMessage {
	b, _ := json.Marshal(json.RawMessage(v))
	return b
}
