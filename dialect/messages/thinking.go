package messages

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/sluicehq/sluice/wire"
)

// Extended thinking and what comes with it, in the chat form. The chat
// completion API has no field for any of it, so each rides as an
// extension of the chat body that an Anthropic key's format reads back
// exactly, and that every other provider's format maps or refuses by name
// (upstream/extensions.go):
//
//   - thinking, Anthropic's object as the client wrote it, as the chat
//     body's thinking (LiteLLM's name and shape);
//   - output_config.format, a JSON schema the answer follows, as the chat
//     body's response_format of type json_schema, strict, as Anthropic's
//     structured outputs always are;
//   - output_config.effort as the chat body's reasoning_effort, the chat
//     API's own knob for how hard a model works; "high", Anthropic's
//     documented default, is left out, as a request without it means the
//     same to Anthropic and lets any other model work at its own default;
//   - context_management, as written;
//   - the anthropic-beta header's values as anthropic_beta;
//   - the thinking and redacted_thinking blocks of an assistant turn,
//     which Anthropic requires back unchanged (with their signatures) when
//     a tool is used while thinking, as that message's thinking_blocks.
//
// A thinking budget is output: Anthropic, OpenAI and Gemini all count the
// thinking in the bound max_tokens sets, and Sluice reserves max_tokens
// whatever the budget, so a budget never lifts a request above what it
// reserves.

// thinkingConfig is the thinking object, read to be checked; what the
// chat form carries is the object as written.
type thinkingConfig struct {
	Type         *string `json:"type"`
	BudgetTokens *int64  `json:"budget_tokens"`
	Display      *string `json:"display"`
}

// outputConfig is output_config, of which Sluice carries the effort.
type outputConfig struct {
	Effort *string        `json:"effort"`
	Format jsontext.Value `json:"format"`
}

// chatResponseFormat is the chat body's response_format for a JSON schema.
type chatResponseFormat struct {
	Type       string         `json:"type"` // "json_schema"
	JSONSchema chatJSONSchema `json:"json_schema"`
}

type chatJSONSchema struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
	Strict bool            `json:"strict"`
}

// responseFormat reads output_config.format: a JSON schema, the one kind
// Anthropic has.
func responseFormat(raw jsontext.Value) (*chatResponseFormat, error) {
	var f struct {
		Type   *string        `json:"type"`
		Schema jsontext.Value `json:"schema"`
	}
	if err := decodeAt(raw, "output_config.format", &f); err != nil {
		return nil, err
	}
	switch {
	case f.Type == nil:
		return nil, required("output_config.format.type")
	case *f.Type != "json_schema":
		return nil, invalid("invalid_field", "output_config.format.type", "output_config.format.type: Input should be 'json_schema'")
	case len(f.Schema) == 0:
		return nil, required("output_config.format.schema")
	case f.Schema.Kind() != '{':
		return nil, invalid("invalid_field", "output_config.format.schema", "output_config.format.schema: Input should be a valid dictionary")
	}
	return &chatResponseFormat{Type: "json_schema", JSONSchema: chatJSONSchema{Name: "output", Schema: compact(f.Schema), Strict: true}}, nil
}

// minThinkingBudget is the smallest budget Anthropic takes.
const minThinkingBudget = 1024

// extensions are the chat body's extensions one request carries.
type extensions struct {
	thinking          json.RawMessage
	thinkingType      string
	contextManagement json.RawMessage
	effort            string
	format            *chatResponseFormat
}

// readExtensions checks thinking, output_config and context_management
// as Anthropic does where the gateway must read them, and returns what
// the chat form carries of them.
func readExtensions(r *request, opts Options) (extensions, error) {
	var ext extensions
	if len(r.Thinking) > 0 && r.Thinking.Kind() != 'n' {
		var tc thinkingConfig
		if err := decodeAt(r.Thinking, "thinking", &tc); err != nil {
			return ext, err
		}
		if err := checkThinking(tc, r.MaxTokens, opts); err != nil {
			return ext, err
		}
		ext.thinking, ext.thinkingType = compact(r.Thinking), *tc.Type
	}
	if len(r.OutputConfig) > 0 && r.OutputConfig.Kind() != 'n' {
		var oc outputConfig
		if err := decodeAt(r.OutputConfig, "output_config", &oc); err != nil {
			return ext, err
		}
		if len(oc.Format) > 0 && oc.Format.Kind() != 'n' {
			f, err := responseFormat(oc.Format)
			if err != nil {
				return ext, err
			}
			ext.format = f
		}
		if oc.Effort != nil {
			switch e := *oc.Effort; e {
			case "low", "medium", "xhigh", "max":
				ext.effort = e
			case "high": // Anthropic's default: the same as none sent
			default:
				return ext, invalid("invalid_field", "output_config.effort",
					"output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'")
			}
		}
	}
	if len(r.ContextManagement) > 0 && r.ContextManagement.Kind() != 'n' {
		if err := checkContextManagement(r.ContextManagement); err != nil {
			return ext, err
		}
		ext.contextManagement = compact(r.ContextManagement)
	}
	return ext, nil
}

// checkThinking checks a thinking object against Anthropic's rules: a
// type of enabled (with a budget of at least 1,024 tokens, below
// max_tokens unless interleaved thinking lets one budget span a turn's
// several answers), adaptive or disabled, and the display of the first
// two.
func checkThinking(tc thinkingConfig, maxTokens *int64, opts Options) error {
	if tc.Type == nil {
		return required("thinking.type")
	}
	switch *tc.Type {
	case "enabled":
		switch {
		case tc.BudgetTokens == nil:
			return required("thinking.budget_tokens")
		case *tc.BudgetTokens < minThinkingBudget:
			return invalid("invalid_field", "thinking.budget_tokens",
				"thinking.budget_tokens: Input should be greater than or equal to "+strconv.Itoa(minThinkingBudget))
		case maxTokens != nil && *tc.BudgetTokens >= *maxTokens && !interleaved(opts.Betas):
			return invalid("invalid_field", "thinking.budget_tokens",
				"thinking.budget_tokens: must be less than max_tokens ("+strconv.FormatInt(*maxTokens, 10)+"): the thinking is part of the answer max_tokens bounds")
		}
	case "adaptive", "disabled":
		if tc.BudgetTokens != nil {
			return invalid("unknown_field", "thinking.budget_tokens", "thinking.budget_tokens: Extra inputs are not permitted when thinking.type is '"+*tc.Type+"'")
		}
	default:
		return invalid("invalid_field", "thinking.type", "thinking.type: Input should be 'enabled', 'adaptive' or 'disabled'")
	}
	if tc.Display != nil {
		switch {
		case *tc.Type == "disabled":
			return invalid("unknown_field", "thinking.display", "thinking.display: Extra inputs are not permitted when thinking.type is 'disabled'")
		case *tc.Display != "summarized" && *tc.Display != "omitted":
			return invalid("invalid_field", "thinking.display", "thinking.display: Input should be 'summarized' or 'omitted'")
		}
	}
	return nil
}

// interleaved says whether the betas turn on interleaved thinking, under
// which Anthropic lets a budget exceed max_tokens: it then spans the
// answers of a turn's tool calls, each still bounded by its max_tokens.
func interleaved(betas []string) bool {
	for _, b := range betas {
		if strings.HasPrefix(b, "interleaved-thinking-") {
			return true
		}
	}
	return false
}

// checkContextManagement checks that context_management is an object of
// edits, each with a type; which edits a provider can make is its
// format's to say (an Anthropic key makes them all).
func checkContextManagement(raw jsontext.Value) error {
	var cm struct {
		Edits *[]jsontext.Value `json:"edits"`
	}
	if err := decodeAt(raw, "context_management", &cm); err != nil {
		return err
	}
	if cm.Edits == nil {
		return nil
	}
	for i, e := range *cm.Edits {
		path := at("context_management.edits", i)
		typ, err := blockType(e, path)
		if err != nil {
			return err
		}
		if typ == "" {
			return required(path + ".type")
		}
	}
	return nil
}

// thinkingBlock reads a thinking block (its thinking and its signature,
// which may be empty for one a provider other than Anthropic wrote) or a
// redacted_thinking block (its data), to be carried unchanged.
func thinkingBlock(raw jsontext.Value, path, typ string) (wire.AnthropicBlock, error) {
	var b wire.AnthropicBlock
	if err := decodeAt(raw, path, &b); err != nil {
		return b, err
	}
	if f := foreign(b, typ); f != "" {
		if f == "cache_control" {
			return b, unsupported(path+".cache_control", "cache_control cannot be set on '"+typ+"' blocks")
		}
		return b, invalid("unknown_field", path+"."+f, path+"."+f+": Extra inputs are not permitted")
	}
	switch {
	case typ == "thinking" && b.Thinking == nil:
		return b, required(path + ".thinking")
	case typ == "thinking" && b.Signature == nil:
		return b, required(path + ".signature")
	case typ == "redacted_thinking" && b.Data == "":
		return b, required(path + ".data")
	}
	return b, nil
}

// compact is raw without its insignificant space.
func compact(raw []byte) json.RawMessage {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return json.RawMessage(raw)
	}
	return b.Bytes()
}
