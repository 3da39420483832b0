package upstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// OpenAI's messages, translated to Gemini's contents and
// systemInstruction (tools and tool_choice: gemini_tools.go).
//
//   - system and developer messages, wherever they are, become the system
//     instruction, in order (Gemini has one);
//   - user and tool messages are turns of role "user", assistant messages
//     of role "model"; consecutive turns of one role are merged, so the
//     results of parallel tool calls answer their calls in one turn, as
//     Gemini requires;
//   - a tool message's function name is its tool call's, found by id
//     earlier in the conversation (Gemini matches results by name);
//   - a tool call's thought signature, which Gemini 3 requires back with
//     its call, travels in the tool call's id (see toolCallID).
//   - an assistant message's thinking_blocks (Anthropic's signed
//     thinking, from the Messages dialect) are not read: Gemini has no
//     input for another model's reasoning (see extensions.go).

// oaMessage is the part of an OpenAI chat message the translation reads.
type oaMessage struct {
	Role         string          `json:"role"`
	Content      json.RawMessage `json:"content"`
	Refusal      string          `json:"refusal"`
	ToolCalls    []oaToolCall    `json:"tool_calls"`
	ToolCallID   string          `json:"tool_call_id"`
	Audio        json.RawMessage `json:"audio"`
	FunctionCall json.RawMessage `json:"function_call"`
}

// oaToolCall is a tool call, in an assistant message and in answers.
type oaToolCall struct {
	Index    *int   `json:"index,omitempty"` // in stream deltas only
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// oaPart is a content part of a message.
type oaPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Refusal  string `json:"refusal"`
	ImageURL *struct {
		URL string `json:"url"`
	} `json:"image_url"`
	InputAudio *struct {
		Data   string `json:"data"`
		Format string `json:"format"`
	} `json:"input_audio"`
	File *struct {
		FileData string `json:"file_data"`
		FileID   string `json:"file_id"`
	} `json:"file"`
}

// geminiContents translates messages to Gemini's system instruction (nil
// when there is none) and contents.
func geminiContents(raw json.RawMessage) (*geminiContent, []geminiContent, error) {
	var msgs []oaMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return nil, nil, invalidField("messages", "messages must be an array of messages")
	}
	var system geminiContent
	var contents []geminiContent
	calls := make(map[string]string) // tool call id -> function name
	for i, m := range msgs {
		param := fmt.Sprintf("messages[%d]", i)
		if !isNull(m.Audio) {
			return nil, nil, unsupported(param+".audio", "audio in assistant messages is not supported by Gemini keys")
		}
		if !isNull(m.FunctionCall) {
			return nil, nil, unsupported(param+".function_call", "function_call (deprecated) is not translated for Gemini keys: use tool_calls")
		}
		var role string
		var parts []geminiPart
		var err error
		switch m.Role {
		case "system", "developer":
			text, err := contentText(param, m.Content)
			if err != nil {
				return nil, nil, err
			}
			if text != "" {
				system.Parts = append(system.Parts, geminiPart{Text: text})
			}
			continue
		case "user":
			role = "user"
			parts, err = userParts(param, m.Content)
		case "assistant":
			role = "model"
			parts, err = assistantParts(param, m, calls)
		case "tool":
			role = "user"
			parts, err = toolResultParts(param, m, calls)
		default:
			err = invalidField(param+".role", "role must be one of system, developer, user, assistant, tool")
		}
		if err != nil {
			return nil, nil, err
		}
		if len(parts) == 0 {
			continue // an empty message: Gemini refuses a turn without parts
		}
		if n := len(contents); n > 0 && contents[n-1].Role == role {
			contents[n-1].Parts = append(contents[n-1].Parts, parts...)
		} else {
			contents = append(contents, geminiContent{Role: role, Parts: parts})
		}
	}
	if len(system.Parts) == 0 {
		return nil, contents, nil
	}
	return &system, contents, nil
}

// contentParts reads a message's content: nil (null or absent), a string
// (one text part) or an array of parts.
func contentParts(param string, raw json.RawMessage) ([]oaPart, error) {
	if isNull(raw) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []oaPart{{Type: "text", Text: s}}, nil
	}
	var parts []oaPart
	if json.Unmarshal(raw, &parts) != nil {
		return nil, invalidField(param+".content", "content must be a string or an array of content parts")
	}
	return parts, nil
}

// contentText is the text of a content that may hold text only (system,
// developer and tool messages): its text parts joined.
func contentText(param string, raw json.RawMessage) (string, error) {
	parts, err := contentParts(param, raw)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for j, p := range parts {
		if p.Type != "text" {
			return "", unsupported(fmt.Sprintf("%s.content[%d].type", param, j), "a "+p.Type+" part is not supported in this message by Gemini keys: text only")
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// audioMimeTypes are input_audio's formats as Gemini names them.
var audioMimeTypes = map[string]string{"wav": "audio/wav", "mp3": "audio/mp3"}

// userParts translates a user message's content: text, images, audio and
// files given inline.
func userParts(param string, raw json.RawMessage) ([]geminiPart, error) {
	parts, err := contentParts(param, raw)
	if err != nil {
		return nil, err
	}
	out := make([]geminiPart, 0, len(parts))
	for j, p := range parts {
		at := fmt.Sprintf("%s.content[%d]", param, j)
		switch {
		case p.Type == "text":
			if p.Text != "" {
				out = append(out, geminiPart{Text: p.Text})
			}
		case p.Type == "image_url" && p.ImageURL != nil:
			part, err := imagePart(at, p.ImageURL.URL)
			if err != nil {
				return nil, err
			}
			out = append(out, part)
		case p.Type == "input_audio" && p.InputAudio != nil:
			mime, ok := audioMimeTypes[p.InputAudio.Format]
			if !ok {
				return nil, unsupported(at+".input_audio.format", "input_audio format must be wav or mp3")
			}
			out = append(out, geminiPart{InlineData: &geminiBlob{MimeType: mime, Data: p.InputAudio.Data}})
		case p.Type == "file" && p.File != nil:
			if p.File.FileData == "" {
				return nil, unsupported(at+".file.file_id", "Gemini keys take files as file_data (a base64 data: URL), not as OpenAI file ids")
			}
			blob, err := dataURLBlob(at+".file.file_data", p.File.FileData)
			if err != nil {
				return nil, err
			}
			out = append(out, geminiPart{InlineData: blob})
		default:
			return nil, unsupported(at+".type", "a "+p.Type+" part is not supported by Gemini keys")
		}
	}
	return out, nil
}

// assistantParts translates an assistant message: its text (or refusal),
// then its tool calls as function calls.
func assistantParts(param string, m oaMessage, calls map[string]string) ([]geminiPart, error) {
	parts, err := contentParts(param, m.Content)
	if err != nil {
		return nil, err
	}
	var text strings.Builder
	for j, p := range parts {
		switch p.Type {
		case "text":
			text.WriteString(p.Text)
		case "refusal":
			text.WriteString(p.Refusal)
		default:
			return nil, unsupported(fmt.Sprintf("%s.content[%d].type", param, j), "a "+p.Type+" part is not supported in assistant messages")
		}
	}
	text.WriteString(m.Refusal)
	var out []geminiPart
	if text.Len() > 0 {
		out = append(out, geminiPart{Text: text.String()})
	}
	for j, tc := range m.ToolCalls {
		at := fmt.Sprintf("%s.tool_calls[%d]", param, j)
		if tc.Type != "" && tc.Type != "function" {
			return nil, unsupported(at+".type", "Gemini keys take function tool calls only")
		}
		if tc.Function.Name == "" {
			return nil, invalidField(at+".function.name", "a tool call needs its function's name")
		}
		args := json.RawMessage(`{}`)
		if a := strings.TrimSpace(tc.Function.Arguments); a != "" {
			var buf bytes.Buffer
			if json.Compact(&buf, []byte(a)) != nil || buf.Bytes()[0] != '{' {
				return nil, invalidField(at+".function.arguments", "a tool call's arguments must be a JSON object; "+at+" has "+truncate(a, 60))
			}
			args = buf.Bytes()
		}
		if tc.ID != "" {
			calls[tc.ID] = tc.Function.Name
		}
		out = append(out, geminiPart{FunctionCall: &geminiFunctionCall{Name: tc.Function.Name, Args: args}, ThoughtSignature: thoughtSignatureOf(tc.ID)})
	}
	return out, nil
}

// toolResultParts translates a tool message to a function response: a
// JSON object result as it is, anything else as {"content": text}.
func toolResultParts(param string, m oaMessage, calls map[string]string) ([]geminiPart, error) {
	name, ok := calls[m.ToolCallID]
	if !ok {
		return nil, invalidField(param+".tool_call_id", "tool_call_id '"+m.ToolCallID+
			"' matches no tool call of an earlier assistant message; Gemini needs the function's name")
	}
	text, err := contentText(param, m.Content)
	if err != nil {
		return nil, err
	}
	response := json.RawMessage(nil)
	if t := strings.TrimSpace(text); strings.HasPrefix(t, "{") && json.Valid([]byte(t)) {
		response = json.RawMessage(t)
	} else if response, err = marshalJSON(map[string]string{"content": text}); err != nil {
		return nil, err
	}
	return []geminiPart{{FunctionResponse: &geminiFunctionResponse{Name: name, Response: response}}}, nil
}

// truncate shortens s for a message.
func truncate(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
