package upstream

import (
	"encoding/json"
	"strconv"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/wire"
)

// Extended thinking to and from an Anthropic key. The request's thinking,
// context_management and an assistant turn's thinking_blocks go to
// Anthropic exactly as the chat form carries them (Anthropic checks a
// block's signature, and validates the rest itself); the answer's
// thinking and redacted_thinking blocks come back as the chat message's
// reasoning_content (their text) and thinking_blocks (the blocks, each
// with its signature), and in a stream as reasoning_content deltas, then
// the block's signature (or a redacted block) in a thinking_blocks delta.

// rawIfSet is raw, or nil when it is absent or null.
func rawIfSet(raw json.RawMessage) json.RawMessage {
	if !set(raw) {
		return nil
	}
	return raw
}

// thinkingBlocks are an assistant turn's thinking blocks as Anthropic is
// sent them back: unchanged, of the two types it has.
func thinkingBlocks(blocks []wire.AnthropicBlock) []wire.AnthropicBlock {
	out := make([]wire.AnthropicBlock, 0, len(blocks))
	for _, b := range blocks {
		switch b.Type {
		case "thinking":
			thinking, signature := deref(b.Thinking), deref(b.Signature)
			out = append(out, wire.AnthropicBlock{Type: "thinking", Thinking: &thinking, Signature: &signature})
		case "redacted_thinking":
			out = append(out, wire.AnthropicBlock{Type: "redacted_thinking", Data: b.Data})
		}
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// anthropicEffort is reasoning_effort as Anthropic's output_config.effort:
// the same names, and max, which only Anthropic has. OpenAI's none and
// minimal have no equivalent.
func anthropicEffort(raw json.RawMessage) (string, error) {
	if !set(raw) {
		return "", nil
	}
	var effort string
	if json.Unmarshal(raw, &effort) != nil {
		return "", apperr.Field(apperr.Invalid, "invalid_value", "reasoning_effort", "reasoning_effort must be a string")
	}
	switch effort {
	case "low", "medium", "high", "xhigh", "max":
		return effort, nil
	}
	return "", unsupportedByAnthropic("reasoning_effort", "reasoning_effort '"+effort+"' (use low, medium, high, xhigh or max)")
}

// anthropicFormatOf is a json_schema response_format as Anthropic's
// output_config.format, which always holds the answer to its schema (as
// OpenAI's strict does); nil for none, or text.
func anthropicFormatOf(raw json.RawMessage) (json.RawMessage, error) {
	if !set(raw) || formatType(raw) != "json_schema" {
		return nil, nil
	}
	var rf struct {
		JSONSchema struct {
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	if json.Unmarshal(raw, &rf) != nil || !set(rf.JSONSchema.Schema) {
		return nil, apperr.Field(apperr.Invalid, "invalid_value", "response_format.json_schema.schema", "a json_schema response_format needs its schema")
	}
	return json.Marshal(struct {
		Type   string          `json:"type"`
		Schema json.RawMessage `json:"schema"`
	}{"json_schema", rf.JSONSchema.Schema})
}

// anthropicBetas checks the anthropic-beta values a request carries:
// names, as Anthropic's are ("interleaved-thinking-2025-05-14"), so
// nothing but them reaches the header.
func anthropicBetas(betas []string) ([]string, error) {
	for i, b := range betas {
		ok := b != ""
		for _, r := range b {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
				ok = false
			}
		}
		if !ok {
			return nil, apperr.Field(apperr.Invalid, "invalid_value", "anthropic_beta["+strconv.Itoa(i)+"]",
				"an anthropic-beta value is a name such as interleaved-thinking-2025-05-14")
		}
	}
	return betas, nil
}

// anthropicThinking is an answer's thinking in the chat form: its
// thinking text joined (nil when it has none) and its blocks.
func anthropicThinking(content []wire.AnthropicBlock) (*string, []wire.AnthropicBlock) {
	var text string
	var blocks []wire.AnthropicBlock
	hasText := false
	for _, b := range content {
		switch b.Type {
		case "thinking":
			text += deref(b.Thinking)
			hasText = true
		case "redacted_thinking":
		default:
			continue
		}
		blocks = append(blocks, b)
	}
	if !hasText {
		return nil, thinkingBlocks(blocks)
	}
	return &text, thinkingBlocks(blocks)
}
