package responses

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// readTools translates function tools from the Responses API's flat shape
// ({type, name, description, parameters, strict}) to chat completions'
// nested one, custom tools to the function tools that carry them (see
// custom.go), and the tool choice with them. Hosted tools (web search,
// file search, computer use…) are refused: Sluice runs none.
func (r *Request) readTools(tools []jsontext.Value, choice jsontext.Value) error {
	names := map[string]int{} // a tool's name -> its index
	for i, raw := range tools {
		param := at("tools", i)
		if raw.Kind() != '{' {
			return invalid(param, param+" must be a tool object")
		}
		var head struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		if err := jsonv2.Unmarshal(raw, &head); err != nil {
			return decodeError(err, param)
		}
		if j, ok := names[head.Name]; ok && head.Name != "" && (head.Type == "custom" || r.custom[head.Name]) {
			// A call names its tool; two tools of one name, one of them
			// custom, would leave it unknown which item a call becomes.
			return invalid(param+".name", "tool name '"+head.Name+"' is given twice (tools["+strconv.Itoa(j)+"] has it); a custom tool's name must be its own")
		}
		names[head.Name] = i
		switch head.Type {
		case "function":
		case "custom":
			b, err := r.readCustomTool(raw, param)
			if err != nil {
				return err
			}
			r.chat.Tools = append(r.chat.Tools, b)
			continue
		case "":
			return missing(param + ".type")
		default:
			return unsupported(param+".type", hostedTool(head.Type))
		}
		var t struct {
			Type        string         `json:"type"`
			Name        string         `json:"name"`
			Description *string        `json:"description"`
			Parameters  jsontext.Value `json:"parameters"`
			Strict      *bool          `json:"strict"`
		}
		if err := decode(raw, param, &t); err != nil {
			return err
		}
		if t.Name == "" {
			return missing(param + ".name")
		}
		if isSet(t.Parameters) && t.Parameters.Kind() != '{' {
			return invalid(param+".parameters", param+".parameters must be a JSON schema object")
		}
		fn := struct {
			Name        string          `json:"name"`
			Description *string         `json:"description,omitempty"`
			Parameters  json.RawMessage `json:"parameters,omitempty"`
			Strict      *bool           `json:"strict,omitempty"`
		}{Name: t.Name, Description: t.Description, Strict: t.Strict}
		if isSet(t.Parameters) {
			fn.Parameters = marshalRaw(t.Parameters)
		}
		b, _ := json.Marshal(struct {
			Type     string `json:"type"`
			Function any    `json:"function"`
		}{"function", fn})
		r.chat.Tools = append(r.chat.Tools, b)
	}
	if !isSet(choice) {
		return nil
	}
	switch choice.Kind() {
	case '"':
		var s string
		_ = jsonv2.Unmarshal(choice, &s)
		switch s {
		case "none", "auto", "required":
			r.chat.ToolChoice = marshalRaw(choice)
			return nil
		}
		return invalid("tool_choice", "tool_choice must be none, auto, required or {\"type\": \"function\", \"name\": …}")
	case '{':
		var head struct {
			Type string `json:"type"`
		}
		if err := jsonv2.Unmarshal(choice, &head); err != nil {
			return decodeError(err, "tool_choice")
		}
		if head.Type != "function" && head.Type != "custom" {
			return unsupported("tool_choice", "tool_choice of type '"+head.Type+"' is not supported: Sluice carries function and custom tools only")
		}
		var c struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		if err := decode(choice, "tool_choice", &c); err != nil {
			return err
		}
		if c.Name == "" {
			return missing("tool_choice.name")
		}
		if head.Type == "custom" && !r.custom[c.Name] {
			return invalid("tool_choice.name", "tool_choice names custom tool '"+c.Name+"', which tools does not have")
		}
		// A custom tool is a function tool to chat completions.
		r.chat.ToolChoice, _ = json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": c.Name}})
		return nil
	}
	return invalid("tool_choice", "tool_choice must be a string or an object")
}

// readText translates text.format into response_format, and passes
// text.verbosity on.
func (r *Request) readText(raw jsontext.Value) error {
	if !isSet(raw) {
		return nil
	}
	var text struct {
		Format    jsontext.Value `json:"format"`
		Verbosity *string        `json:"verbosity"`
	}
	if err := decode(raw, "text", &text); err != nil {
		return err
	}
	if v := text.Verbosity; v != nil {
		switch *v {
		case "low", "medium", "high":
			r.chat.Verbosity = *v
		default:
			return invalid("text.verbosity", "text.verbosity must be one of low, medium, high")
		}
	}
	if !isSet(text.Format) {
		return nil
	}
	var f struct {
		Type        string         `json:"type"`
		Name        *string        `json:"name"`
		Schema      jsontext.Value `json:"schema"`
		Description *string        `json:"description"`
		Strict      *bool          `json:"strict"`
	}
	if err := decode(text.Format, "text.format", &f); err != nil {
		return err
	}
	switch f.Type {
	case "text":
		return nil // chat completions' default
	case "json_object":
		r.chat.ResponseFormat = json.RawMessage(`{"type":"json_object"}`)
		return nil
	case "json_schema":
		if f.Name == nil || *f.Name == "" {
			return missing("text.format.name")
		}
		if f.Schema.Kind() != '{' {
			return missing("text.format.schema")
		}
		schema := struct {
			Name        string          `json:"name"`
			Description *string         `json:"description,omitempty"`
			Schema      json.RawMessage `json:"schema"`
			Strict      *bool           `json:"strict,omitempty"`
		}{*f.Name, f.Description, marshalRaw(f.Schema), f.Strict}
		r.chat.ResponseFormat, _ = json.Marshal(map[string]any{"type": "json_schema", "json_schema": schema})
		return nil
	case "":
		return missing("text.format.type")
	}
	return invalid("text.format.type", "text.format.type must be one of text, json_object, json_schema")
}

// hostedTool says why a tool type is refused: it is one OpenAI runs for
// the model, and Sluice runs none. Codex sends web_search unless told not
// to, so its setting is named.
func hostedTool(typ string) string {
	msg := "tool type '" + typ + "' is not supported: Sluice runs no hosted tools and carries function and custom tools only; leave it out"
	if strings.HasPrefix(typ, "web_search") {
		msg += ` (Codex: set web_search = "disabled" in config.toml)`
	}
	return msg
}

// readReasoning passes reasoning.effort on as reasoning_effort, for the
// provider's format to carry or refuse. A summary is accepted and echoed
// but never made: chat completions returns no reasoning items, and OpenAI
// too may answer a summary request with none, so asking changes nothing
// of the answer.
func (r *Request) readReasoning(raw jsontext.Value) error {
	if !isSet(raw) {
		return nil
	}
	var re struct {
		Effort          *string `json:"effort"`
		Summary         *string `json:"summary"`
		GenerateSummary *string `json:"generate_summary"`
	}
	if err := decode(raw, "reasoning", &re); err != nil {
		return err
	}
	for _, s := range []struct {
		param string
		value *string
	}{{"reasoning.summary", re.Summary}, {"reasoning.generate_summary", re.GenerateSummary}} {
		if s.value == nil {
			continue
		}
		switch *s.value {
		case "auto", "concise", "detailed":
			r.echo.Reasoning.Summary = s.value
		default:
			return invalid(s.param, s.param+" must be one of auto, concise, detailed")
		}
	}
	if re.Effort == nil {
		return nil
	}
	switch *re.Effort {
	case "none", "minimal", "low", "medium", "high", "xhigh":
		r.ReasoningEffort, r.chat.ReasoningEffort = *re.Effort, *re.Effort
		r.echo.Reasoning.Effort = re.Effort
		return nil
	}
	return invalid("reasoning.effort", "reasoning.effort must be one of none, minimal, low, medium, high, xhigh")
}

// echo is what the Response object repeats of the request.
type echo struct {
	Instructions       *string
	MaxOutputTokens    *int64
	MaxToolCalls       *int64
	Metadata           json.RawMessage
	ParallelToolCalls  bool
	PreviousResponseID *string
	Reasoning          reasoningEcho
	ServiceTier        string
	Temperature        float64
	TopP               float64
	Text               json.RawMessage
	ToolChoice         json.RawMessage
	Tools              json.RawMessage
	User               *string
	SafetyIdentifier   *string
	PromptCacheKey     *string
}

type reasoningEcho struct {
	Effort  *string `json:"effort"`
	Summary *string `json:"summary"`
}

// Metadata limits, as OpenAI's: 16 pairs, keys to 64 characters, values
// to 512.
const (
	maxMetadataPairs = 16
	maxMetadataKey   = 64
	maxMetadataValue = 512
)

// readEcho keeps what the Response object repeats, and checks metadata,
// which is kept with the response and not sent to the model.
func (r *Request) readEcho(w *wireRequest) error {
	e := &r.echo
	e.Instructions, e.MaxOutputTokens, e.MaxToolCalls = w.Instructions, w.MaxOutputTokens, w.MaxToolCalls
	e.PreviousResponseID, e.User, e.SafetyIdentifier, e.PromptCacheKey = w.PreviousResponseID, w.User, w.SafetyIdentifier, w.PromptCacheKey
	e.ParallelToolCalls = w.ParallelToolCalls == nil || *w.ParallelToolCalls
	if len(r.chat.Tools) > 0 && w.ParallelToolCalls != nil {
		// Chat completions takes parallel_tool_calls only with tools.
		r.chat.ParallelToolCalls = w.ParallelToolCalls
	}
	e.ServiceTier = "default"
	if w.ServiceTier != nil {
		e.ServiceTier = *w.ServiceTier
	}
	e.Temperature, e.TopP = 1, 1 // the defaults a model samples at
	if w.Temperature != nil {
		e.Temperature = *w.Temperature
	}
	if w.TopP != nil {
		e.TopP = *w.TopP
	}
	e.Text = json.RawMessage(`{"format":{"type":"text"}}`)
	if isSet(w.Text) {
		e.Text = marshalRaw(w.Text)
	}
	e.ToolChoice = json.RawMessage(`"auto"`)
	if isSet(w.ToolChoice) {
		e.ToolChoice = marshalRaw(w.ToolChoice)
	}
	e.Tools = json.RawMessage(`[]`)
	if len(w.Tools) > 0 {
		e.Tools, _ = json.Marshal(w.Tools)
	}
	e.Metadata = json.RawMessage(`{}`)
	if !isSet(w.Metadata) {
		return nil
	}
	var md map[string]string
	if err := decode(w.Metadata, "metadata", &md); err != nil {
		return err
	}
	if len(md) > maxMetadataPairs {
		return invalid("metadata", "metadata may hold at most "+strconv.Itoa(maxMetadataPairs)+" pairs")
	}
	for k, v := range md {
		if utf8.RuneCountInString(k) > maxMetadataKey {
			return invalid("metadata", "metadata keys are at most 64 characters")
		}
		if utf8.RuneCountInString(v) > maxMetadataValue {
			return invalid("metadata."+k, "metadata values are at most 512 characters")
		}
	}
	e.Metadata = marshalRaw(w.Metadata)
	return nil
}
