package upstream

import (
	"bytes"
	"encoding/json"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/sluicehq/sluice/apperr"
)

// OpenAI's chat completion request, translated to Gemini's
// generateContent. What Gemini cannot do is refused with a 400 naming the
// field, never dropped: a client that asked for it would otherwise get an
// answer that silently ignored it. Fields that only steer OpenAI's own
// systems (user, safety_identifier, prompt_cache_key) and the streaming
// switches (stream, stream_options: Gemini streams always end with their
// usage) change nothing in an answer and are not sent.

// geminiRequest is generateContent's body.
type geminiRequest struct {
	Contents          []geminiContent         `json:"contents"`
	SystemInstruction *geminiContent          `json:"systemInstruction,omitempty"`
	Tools             []geminiTool            `json:"tools,omitempty"`
	ToolConfig        *geminiToolConfig       `json:"toolConfig,omitempty"`
	GenerationConfig  *geminiGenerationConfig `json:"generationConfig,omitempty"`
}

type geminiContent struct {
	Role  string       `json:"role,omitempty"`
	Parts []geminiPart `json:"parts"`
}

// geminiPart is one part of a content, in requests and answers.
type geminiPart struct {
	Text             string                  `json:"text,omitempty"`
	Thought          bool                    `json:"thought,omitempty"`
	InlineData       *geminiBlob             `json:"inlineData,omitempty"`
	FileData         *geminiFileData         `json:"fileData,omitempty"`
	FunctionCall     *geminiFunctionCall     `json:"functionCall,omitempty"`
	FunctionResponse *geminiFunctionResponse `json:"functionResponse,omitempty"`
	ThoughtSignature string                  `json:"thoughtSignature,omitempty"`
}

type geminiBlob struct {
	MimeType string `json:"mimeType"`
	Data     string `json:"data"`
}

type geminiFileData struct {
	MimeType string `json:"mimeType,omitempty"`
	FileURI  string `json:"fileUri"`
}

type geminiFunctionCall struct {
	Name string          `json:"name"`
	Args json.RawMessage `json:"args,omitempty"`
}

type geminiFunctionResponse struct {
	Name     string          `json:"name"`
	Response json.RawMessage `json:"response"`
}

type geminiTool struct {
	FunctionDeclarations []geminiFunctionDeclaration `json:"functionDeclarations"`
}

type geminiFunctionDeclaration struct {
	Name                 string          `json:"name"`
	Description          string          `json:"description,omitempty"`
	ParametersJSONSchema json.RawMessage `json:"parametersJsonSchema,omitempty"`
}

type geminiToolConfig struct {
	FunctionCallingConfig geminiFunctionCallingConfig `json:"functionCallingConfig"`
}

type geminiFunctionCallingConfig struct {
	Mode                 string   `json:"mode"`
	AllowedFunctionNames []string `json:"allowedFunctionNames,omitempty"`
}

// geminiGenerationConfig holds numbers as the client wrote them: a
// temperature of 0.7 reaches Gemini as 0.7, not as a float's rendering.
type geminiGenerationConfig struct {
	StopSequences      []string              `json:"stopSequences,omitempty"`
	MaxOutputTokens    json.RawMessage       `json:"maxOutputTokens,omitempty"`
	Temperature        json.RawMessage       `json:"temperature,omitempty"`
	TopP               json.RawMessage       `json:"topP,omitempty"`
	PresencePenalty    json.RawMessage       `json:"presencePenalty,omitempty"`
	FrequencyPenalty   json.RawMessage       `json:"frequencyPenalty,omitempty"`
	Seed               json.RawMessage       `json:"seed,omitempty"`
	ResponseMimeType   string                `json:"responseMimeType,omitempty"`
	ResponseJSONSchema json.RawMessage       `json:"responseJsonSchema,omitempty"`
	ThinkingConfig     *geminiThinkingConfig `json:"thinkingConfig,omitempty"`
}

type geminiThinkingConfig struct {
	ThinkingBudget *int   `json:"thinkingBudget,omitempty"`
	ThinkingLevel  string `json:"thinkingLevel,omitempty"`
}

// unsupported is the 400 for a field Gemini cannot honour.
func unsupported(param, message string) error {
	return apperr.Field(apperr.Invalid, "unsupported_feature", param, message)
}

// invalidField is the 400 for a field that is not what OpenAI's API says
// it is.
func invalidField(param, message string) error {
	return apperr.Field(apperr.Invalid, "invalid_value", param, message)
}

// isNull says whether a field is absent or null: both mean "not set".
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// geminiRequestBody translates req's OpenAI chat body to generateContent's.
func geminiRequestBody(req Request) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(req.Body, &fields); err != nil || fields == nil {
		return nil, invalidField("", "the body must be a JSON object")
	}
	var out geminiRequest
	gen := &geminiGenerationConfig{}
	var tc toolSettings
	var thinkingAsked json.RawMessage
	// Sorted, so that of two faults the same one is always named.
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		raw := fields[name]
		var err error
		switch name {
		case "model", "stream", "stream_options", "user", "safety_identifier", "prompt_cache_key":
		case "messages":
			out.SystemInstruction, out.Contents, err = geminiContents(raw)
		case "max_tokens":
			if isNull(fields["max_completion_tokens"]) {
				gen.MaxOutputTokens, err = positiveInt(name, raw)
			}
		case "max_completion_tokens":
			gen.MaxOutputTokens, err = positiveInt(name, raw)
		case "temperature":
			gen.Temperature, err = number(name, raw)
		case "top_p":
			gen.TopP, err = number(name, raw)
		case "presence_penalty":
			gen.PresencePenalty, err = number(name, raw)
		case "frequency_penalty":
			gen.FrequencyPenalty, err = number(name, raw)
		case "seed":
			gen.Seed, err = integer(name, raw)
		case "stop":
			gen.StopSequences, err = stopSequences(raw)
		case "n":
			if !isNull(raw) && string(bytes.TrimSpace(raw)) != "1" {
				err = unsupported(name, "n other than 1 is not supported by Gemini keys: Sluice answers one choice")
			}
		case "response_format":
			err = responseFormat(raw, gen)
		case "reasoning_effort":
			gen.ThinkingConfig, err = thinking(req.Model, raw)
		case "thinking": // Anthropic's, from the Messages dialect: after the loop
			thinkingAsked = raw
		case "context_management": // see extensions.go
			err = inertContextManagement(jsontext.Value(raw))
		case "anthropic_beta": // see extensions.go
		case "tools":
			err = tc.readTools(raw)
		case "tool_choice":
			tc.choice = raw
		case "parallel_tool_calls":
			if string(bytes.TrimSpace(raw)) == "false" {
				err = unsupported(name, "parallel_tool_calls false is not supported by Gemini, which may call several functions in one turn and has no switch to prevent it")
			}
		case "logprobs":
			if !isNull(raw) && string(bytes.TrimSpace(raw)) != "false" {
				err = unsupported(name, "logprobs are not supported by Gemini keys")
			}
		case "store":
			if !isNull(raw) && string(bytes.TrimSpace(raw)) != "false" {
				err = unsupported(name, "store is not supported by Gemini, which keeps no stored completions")
			}
		case "logit_bias", "metadata":
			if !isNull(raw) && string(bytes.TrimSpace(raw)) != "{}" {
				err = unsupported(name, name+" is not supported by Gemini")
			}
		case "service_tier":
			if v := strings.Trim(string(bytes.TrimSpace(raw)), `"`); !isNull(raw) && v != "auto" && v != "default" {
				err = unsupported(name, "service_tier "+v+" is not supported by Gemini keys")
			}
		case "modalities":
			var m []string
			if !isNull(raw) && (json.Unmarshal(raw, &m) != nil || !slices.Equal(m, []string{"text"})) {
				err = unsupported(name, "Gemini keys answer text only: modalities must be [\"text\"]")
			}
		case "functions", "function_call":
			err = unsupported(name, name+" (deprecated) is not translated for Gemini keys: use tools and tool_choice")
		default:
			err = unsupported(name, name+" is not supported by Gemini keys")
		}
		if err != nil {
			return nil, err
		}
	}
	if len(out.Contents) == 0 {
		return nil, invalidField("messages", "messages needs at least one user or assistant message for a Gemini model")
	}
	if cfg, err := geminiThinking(req.Model, thinkingAsked); err != nil {
		return nil, err
	} else if cfg != nil {
		if gen.ThinkingConfig != nil {
			return nil, unsupported("thinking", "thinking.budget_tokens and reasoning_effort both set Gemini's thinking budget: send one")
		}
		gen.ThinkingConfig = cfg
	}
	var err error
	if out.Tools, out.ToolConfig, err = tc.gemini(); err != nil {
		return nil, err
	}
	if gen.MaxOutputTokens != nil || gen.Temperature != nil || gen.TopP != nil || gen.PresencePenalty != nil ||
		gen.FrequencyPenalty != nil || gen.Seed != nil || gen.StopSequences != nil || gen.ResponseMimeType != "" || gen.ThinkingConfig != nil {
		out.GenerationConfig = gen
	}
	return marshalJSON(out)
}

// marshalJSON is json.Marshal without HTML escaping: providers and
// clients read "<" better than "\u003c".
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// number is a JSON number field, as written; nil when unset.
func number(param string, raw json.RawMessage) (json.RawMessage, error) {
	if isNull(raw) {
		return nil, nil
	}
	var n json.Number
	if json.Unmarshal(raw, &n) != nil {
		return nil, invalidField(param, param+" must be a number")
	}
	return json.RawMessage(n.String()), nil
}

// integer is a JSON integer field, as written; nil when unset.
func integer(param string, raw json.RawMessage) (json.RawMessage, error) {
	n, err := number(param, raw)
	if err != nil || n == nil {
		return n, err
	}
	if _, err := json.Number(n).Int64(); err != nil {
		return nil, invalidField(param, param+" must be a whole number")
	}
	return n, nil
}

// positiveInt is a token bound: a whole number from 1 to Gemini's int32.
func positiveInt(param string, raw json.RawMessage) (json.RawMessage, error) {
	n, err := integer(param, raw)
	if err != nil || n == nil {
		return n, err
	}
	if v, _ := json.Number(n).Int64(); v < 1 || v > 1<<31-1 {
		return nil, invalidField(param, param+" must be from 1 to 2147483647")
	}
	return n, nil
}

// stopSequences reads stop: a string or an array of strings.
func stopSequences(raw json.RawMessage) ([]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	if json.Unmarshal(raw, &many) != nil {
		return nil, invalidField("stop", "stop must be a string or an array of strings")
	}
	return many, nil
}

// responseFormat sets JSON mode: json_object asks for JSON, json_schema
// for JSON of that schema, given to Gemini as JSON Schema unchanged
// (responseJsonSchema takes JSON Schema itself; what Gemini cannot use it
// refuses with its own 400, which reaches the client).
func responseFormat(raw json.RawMessage, gen *geminiGenerationConfig) error {
	if isNull(raw) {
		return nil
	}
	var rf struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	if json.Unmarshal(raw, &rf) != nil {
		return invalidField("response_format", "response_format must be an object with a type")
	}
	switch rf.Type {
	case "text":
	case "json_object":
		gen.ResponseMimeType = "application/json"
	case "json_schema":
		gen.ResponseMimeType = "application/json"
		if rf.JSONSchema != nil && !isNull(rf.JSONSchema.Schema) {
			gen.ResponseJSONSchema = rf.JSONSchema.Schema
		}
	default:
		return unsupported("response_format.type", "response_format type '"+rf.Type+"' is not supported by Gemini keys")
	}
	return nil
}

// thinkingBudgets are Gemini 2.x's thinking budgets for OpenAI's
// reasoning efforts, as Google's own OpenAI compatibility maps them.
var thinkingBudgets = map[string]int{"none": 0, "minimal": 0, "low": 1024, "medium": 8192, "high": 24576}

// thinking translates reasoning_effort: a thinking budget for Gemini 2.x
// models, a thinking level for later ones (which cannot turn thinking
// off).
func thinking(model string, raw json.RawMessage) (*geminiThinkingConfig, error) {
	if isNull(raw) {
		return nil, nil
	}
	var effort string
	if json.Unmarshal(raw, &effort) != nil {
		return nil, invalidField("reasoning_effort", "reasoning_effort must be a string")
	}
	if strings.HasPrefix(strings.TrimPrefix(model, "models/"), "gemini-2") {
		b, ok := thinkingBudgets[effort]
		if !ok {
			return nil, unsupported("reasoning_effort", "reasoning_effort '"+effort+"' is not supported by "+model+": use none, minimal, low, medium or high")
		}
		return &geminiThinkingConfig{ThinkingBudget: &b}, nil
	}
	switch effort {
	case "minimal", "low", "medium", "high":
		return &geminiThinkingConfig{ThinkingLevel: effort}, nil
	}
	return nil, unsupported("reasoning_effort", "reasoning_effort '"+effort+"' is not supported by "+model+": use minimal, low, medium or high")
}

// geminiThinking translates Anthropic's thinking object: an enabled
// budget is Gemini's thinking budget, exactly (Gemini 3 still takes one,
// for compatibility, beside its levels); adaptive thinking is Gemini
// 2's dynamic budget (-1), and Gemini 3's default; disabled is what a
// request without thinking asks.
func geminiThinking(model string, raw json.RawMessage) (*geminiThinkingConfig, error) {
	if isNull(raw) {
		return nil, nil
	}
	t, err := readThinking(raw)
	if err != nil {
		return nil, err
	}
	switch t.Type {
	case "enabled":
		if t.BudgetTokens == nil {
			return nil, invalidField("thinking.budget_tokens", "thinking.budget_tokens is required when thinking is enabled")
		}
		b := *t.BudgetTokens
		return &geminiThinkingConfig{ThinkingBudget: &b}, nil
	case "adaptive":
		if strings.HasPrefix(strings.TrimPrefix(model, "models/"), "gemini-2") {
			dynamic := -1
			return &geminiThinkingConfig{ThinkingBudget: &dynamic}, nil
		}
	}
	return nil, nil
}

// imageMimeTypes are the types of images sent by address, by extension:
// Gemini is told what it fetches.
var imageMimeTypes = map[string]string{".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
	".webp": "image/webp", ".gif": "image/gif", ".heic": "image/heic", ".heif": "image/heif"}

// dataURLBlob reads a base64 data: URL as Gemini's inline data.
func dataURLBlob(param, u string) (*geminiBlob, error) {
	meta, data, ok := strings.Cut(strings.TrimPrefix(u, "data:"), ",")
	mime, isBase64 := strings.CutSuffix(meta, ";base64")
	if !ok || !isBase64 || mime == "" || data == "" {
		return nil, invalidField(param, param+" must be a base64 data: URL (data:image/png;base64,...)")
	}
	return &geminiBlob{MimeType: mime, Data: data}, nil
}

// imagePart translates an image_url part: a data: URL goes inline; an
// https address is fetched by Gemini itself (it takes public and signed
// https URLs as file data); anything else is refused. Either must be an
// image, as the part says: Gemini reads whatever type it is given (a
// PDF's every page, a video's every second), while the estimate, and so
// every limit, counts an image_url as one image.
func imagePart(param, u string) (geminiPart, error) {
	at := param + ".image_url.url"
	switch {
	case strings.HasPrefix(u, "data:"):
		blob, err := dataURLBlob(at, u)
		if err == nil && !strings.HasPrefix(strings.ToLower(blob.MimeType), "image/") {
			return geminiPart{}, unsupported(at, "an image_url part must carry an image; "+param+" is "+blob.MimeType+
				" (send a document as a file part)")
		}
		return geminiPart{InlineData: blob}, err
	case strings.HasPrefix(strings.ToLower(u), "https://"):
		file := &geminiFileData{FileURI: u}
		if parsed, err := url.Parse(u); err == nil {
			file.MimeType = imageMimeTypes[strings.ToLower(path.Ext(parsed.Path))]
		}
		if file.MimeType == "" {
			return geminiPart{}, unsupported(at, "Gemini is sent an image by address only when its path ends in an image's extension "+
				"(.png, .jpg, .jpeg, .webp, .gif, .heic, .heif), so that it is read as an image; send "+param+" as a data: URL")
		}
		return geminiPart{FileData: file}, nil
	}
	return geminiPart{}, unsupported(at, "Gemini takes images as data: URLs or https addresses; "+param+" is neither")
}
