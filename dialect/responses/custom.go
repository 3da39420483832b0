package responses

import (
	"encoding/json"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Custom tools ("type": "custom", OpenAI's freeform tools, such as Codex's
// apply_patch) take plain text where function tools take JSON arguments.
// Chat completions as providers speak it knows function tools only, so a
// custom tool travels as a function tool of one required string
// parameter, customParam, and a call of it comes back as a
// custom_tool_call item whose input is that parameter's text. LiteLLM
// bridges them the same way (its parameter is "content"). A grammar the
// tool's text must follow goes in the function's description: the model
// reads it, but no provider enforces it as OpenAI's does, which the
// README says.
const customParam = "input"

// customParameters is the JSON schema of every custom tool's function.
var customParameters = json.RawMessage(`{"type":"object","properties":{"` + customParam +
	`":{"type":"string","description":"The tool's input: plain text, not JSON."}},"required":["` + customParam + `"],"additionalProperties":false}`)

// readCustomTool translates a custom tool into the function tool that
// carries it, and notes its name, so that calls of it are answered as
// custom_tool_call items.
func (r *Request) readCustomTool(raw jsontext.Value, param string) (json.RawMessage, error) {
	var t struct {
		Type        string         `json:"type"`
		Name        string         `json:"name"`
		Description *string        `json:"description"`
		Format      jsontext.Value `json:"format"`
	}
	if err := decode(raw, param, &t); err != nil {
		return nil, err
	}
	if t.Name == "" {
		return nil, missing(param + ".name")
	}
	description := deref(t.Description)
	if isSet(t.Format) {
		var f struct {
			Type       string  `json:"type"`
			Syntax     *string `json:"syntax"`
			Definition *string `json:"definition"`
		}
		if err := decode(t.Format, param+".format", &f); err != nil {
			return nil, err
		}
		switch f.Type {
		case "text":
			if f.Syntax != nil || f.Definition != nil {
				return nil, invalid(param+".format", "a text format has no syntax or definition; use type 'grammar' for those")
			}
		case "grammar":
			switch {
			case f.Syntax == nil:
				return nil, missing(param + ".format.syntax")
			case *f.Syntax != "lark" && *f.Syntax != "regex":
				return nil, invalid(param+".format.syntax", param+".format.syntax must be lark or regex")
			case f.Definition == nil || *f.Definition == "":
				return nil, missing(param + ".format.definition")
			}
			if description != "" {
				description += "\n\n"
			}
			description += "The " + customParam + " parameter is text in this " + *f.Syntax + " grammar:\n" + *f.Definition
		case "":
			return nil, missing(param + ".format.type")
		default:
			return nil, invalid(param+".format.type", param+".format.type must be text or grammar")
		}
	}
	if r.custom == nil {
		r.custom = map[string]bool{}
	}
	r.custom[t.Name] = true
	fn := struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters"`
	}{t.Name, description, customParameters}
	b, _ := json.Marshal(struct {
		Type     string `json:"type"`
		Function any    `json:"function"`
	}{"function", fn})
	return b, nil
}

// readCustomToolCall translates a custom_tool_call item (an earlier
// answer's, sent back) into the function call its tool was asked as.
func (r *Request) readCustomToolCall(raw jsontext.Value, param string) error {
	var cc struct {
		Type   string  `json:"type"`
		ID     string  `json:"id"`
		Status string  `json:"status"`
		CallID *string `json:"call_id"`
		Name   *string `json:"name"`
		Input  *string `json:"input"`
	}
	if err := decode(raw, param, &cc); err != nil {
		return err
	}
	switch {
	case cc.CallID == nil || *cc.CallID == "":
		return missing(param + ".call_id")
	case cc.Name == nil || *cc.Name == "":
		return missing(param + ".name")
	case cc.Input == nil:
		return missing(param + ".input")
	}
	args, _ := json.Marshal(map[string]string{customParam: *cc.Input})
	r.addCall(chatToolCall{ID: *cc.CallID, Type: "function", Function: chatFunction{Name: *cc.Name, Arguments: string(args)}}, param)
	return nil
}

// customInput is the text of a custom tool's call from its function
// arguments: the customParam string. Arguments that are not an object
// holding one pass as they are, so the client sees exactly what the
// model wrote (and a tool such as apply_patch says it cannot read it).
func customInput(arguments string) string {
	var a map[string]jsontext.Value
	if jsonv2.Unmarshal([]byte(arguments), &a) != nil {
		return arguments
	}
	var s string
	if v, ok := a[customParam]; !ok || jsonv2.Unmarshal(v, &s) != nil {
		return arguments
	}
	return s
}

// callItem is the output item of a chat tool call: a custom_tool_call
// when it calls one of the request's custom tools, else a function_call.
func (r *Request) callItem(d *ids, index int, status, callID string, fn chatFunction) OutputItem {
	if r.custom[fn.Name] {
		return OutputItem{Type: "custom_tool_call", ID: d.customCall(index), Status: status, CallID: callID, Name: fn.Name,
			Arguments: fn.Arguments, Input: customInput(fn.Arguments)}
	}
	return OutputItem{Type: "function_call", ID: d.call(index), Status: status, CallID: callID, Name: fn.Name, Arguments: fn.Arguments}
}
