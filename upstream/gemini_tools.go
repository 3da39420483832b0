package upstream

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
)

// OpenAI's tools and tool_choice, translated to Gemini's function
// declarations and function calling config; and the tool call ids that
// carry Gemini's thought signatures.

// thoughtSignatureMark separates a tool call id from the thought
// signature it carries.
const thoughtSignatureMark = "__ts_"

// toolCallID names the i-th tool call of an answer: "call_", the
// answer's id base and i, then the call's thought signature, if Gemini
// sent one, in URL-safe base64 (ids stay [A-Za-z0-9_-], as every dialect
// accepts). Gemini 3 refuses a conversation whose function calls come
// back without their signatures, and a client keeps only the id.
func toolCallID(base string, i int, signature string) string {
	id := fmt.Sprintf("call_%s_%d", base, i)
	if signature == "" {
		return id
	}
	if b, err := base64.StdEncoding.DecodeString(signature); err == nil {
		return id + thoughtSignatureMark + base64.RawURLEncoding.EncodeToString(b)
	}
	return id
}

// thoughtSignatureOf is the signature a tool call id made by toolCallID
// carries, as Gemini sent it; "" for any other id.
func thoughtSignatureOf(id string) string {
	_, enc, ok := strings.Cut(id, thoughtSignatureMark)
	if !ok || !strings.HasPrefix(id, "call_") {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return ""
	}
	return base64.StdEncoding.EncodeToString(b)
}

// toolSettings gathers tools and tool_choice, which are translated
// together.
type toolSettings struct {
	decls  []geminiFunctionDeclaration
	strict bool // a function asked for strict arguments
	choice json.RawMessage
}

// readTools reads tools: function tools, their parameters given to Gemini
// as JSON Schema unchanged (parametersJsonSchema takes JSON Schema
// itself, additionalProperties and $ref included; what Gemini cannot use
// it refuses with its own 400).
func (t *toolSettings) readTools(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var tools []struct {
		Type     string `json:"type"`
		Function *struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
			Strict      bool            `json:"strict"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &tools) != nil {
		return invalidField("tools", "tools must be an array of tools")
	}
	for i, tool := range tools {
		if tool.Type != "function" || tool.Function == nil {
			return unsupported(fmt.Sprintf("tools[%d].type", i), "Gemini keys take function tools only; tools["+fmt.Sprint(i)+"] is '"+tool.Type+"'")
		}
		if tool.Function.Name == "" {
			return invalidField(fmt.Sprintf("tools[%d].function.name", i), "a function tool needs a name")
		}
		d := geminiFunctionDeclaration{Name: tool.Function.Name, Description: tool.Function.Description}
		if declaresParameters(tool.Function.Parameters) {
			d.ParametersJSONSchema = tool.Function.Parameters
		}
		t.decls = append(t.decls, d)
		t.strict = t.strict || tool.Function.Strict
	}
	return nil
}

// declaresParameters says whether a parameters schema declares any: a
// function without parameters is declared without a schema, as Google's
// SDKs do, rather than with an object of no properties.
func declaresParameters(raw json.RawMessage) bool {
	if isNull(raw) {
		return false
	}
	var schema map[string]json.RawMessage
	if json.Unmarshal(raw, &schema) != nil {
		return true // not an object: Gemini's to judge
	}
	for k, v := range schema {
		v = bytes.TrimSpace(v)
		switch k {
		case "type", "$schema", "title", "description":
		case "properties":
			if string(bytes.Join(bytes.Fields(v), nil)) != "{}" {
				return true
			}
		case "required":
			if string(bytes.Join(bytes.Fields(v), nil)) != "[]" {
				return true
			}
		case "additionalProperties":
			if string(v) != "false" && string(v) != "true" {
				return true
			}
		default:
			return true
		}
	}
	return false
}

// gemini translates the tools and tool_choice: none, auto and required
// are Gemini's NONE, AUTO and ANY; a named function (or allowed_tools) is
// ANY limited to those names. strict arguments with the model choosing
// are Gemini's VALIDATED mode (function calls held to their schema); ANY
// holds them to it already.
func (t *toolSettings) gemini() ([]geminiTool, *geminiToolConfig, error) {
	mode, allowed, err := toolChoice(t.choice)
	if err != nil {
		return nil, nil, err
	}
	if len(t.decls) == 0 {
		if mode == "" || mode == "NONE" {
			return nil, nil, nil
		}
		return nil, nil, invalidField("tool_choice", "tool_choice needs tools")
	}
	for _, name := range allowed {
		if !declared(t.decls, name) {
			return nil, nil, invalidField("tool_choice", "tool_choice names '"+name+"', which is not among the tools")
		}
	}
	if t.strict && (mode == "" || mode == "AUTO") {
		mode = "VALIDATED"
	}
	tools := []geminiTool{{FunctionDeclarations: t.decls}}
	if mode == "" {
		return tools, nil, nil
	}
	return tools, &geminiToolConfig{FunctionCallingConfig: geminiFunctionCallingConfig{Mode: mode, AllowedFunctionNames: allowed}}, nil
}

func declared(decls []geminiFunctionDeclaration, name string) bool {
	for _, d := range decls {
		if d.Name == name {
			return true
		}
	}
	return false
}

// toolChoice reads tool_choice as Gemini's mode and allowed names; mode
// "" when unset.
func toolChoice(raw json.RawMessage) (string, []string, error) {
	if isNull(raw) {
		return "", nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "none":
			return "NONE", nil, nil
		case "auto":
			return "AUTO", nil, nil
		case "required":
			return "ANY", nil, nil
		}
		return "", nil, invalidField("tool_choice", "tool_choice must be none, auto, required or a function")
	}
	type named struct {
		Type     string `json:"type"`
		Function *struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	var c struct {
		named
		AllowedTools *struct {
			Mode  string  `json:"mode"`
			Tools []named `json:"tools"`
		} `json:"allowed_tools"`
	}
	if json.Unmarshal(raw, &c) != nil {
		return "", nil, invalidField("tool_choice", "tool_choice must be none, auto, required or a function")
	}
	switch {
	case c.Type == "function" && c.Function != nil && c.Function.Name != "":
		return "ANY", []string{c.Function.Name}, nil
	case c.Type == "allowed_tools" && c.AllowedTools != nil:
		var names []string
		for i, t := range c.AllowedTools.Tools {
			if t.Type != "function" || t.Function == nil || t.Function.Name == "" {
				return "", nil, unsupported(fmt.Sprintf("tool_choice.allowed_tools.tools[%d]", i), "Gemini keys allow function tools only")
			}
			names = append(names, t.Function.Name)
		}
		switch c.AllowedTools.Mode {
		case "required":
			return "ANY", names, nil
		case "auto", "":
			return "VALIDATED", names, nil
		}
		return "", nil, invalidField("tool_choice.allowed_tools.mode", "allowed_tools mode must be auto or required")
	}
	return "", nil, unsupported("tool_choice.type", "tool_choice type '"+c.Type+"' is not supported by Gemini keys")
}
