package messages

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/sluicehq/sluice/wire"
)

// The chat completion the pipeline answers, as far as a message object
// needs it. stop_sequence on a choice and cache_creation_input_tokens in
// the usage are what an Anthropic provider key adds to say what OpenAI's
// shape has no field for.
type chatCompletion struct {
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *chatUsage   `json:"usage"`
}

type chatChoice struct {
	Message      chatAnswer `json:"message"`
	Delta        chatAnswer `json:"delta"`
	FinishReason *string    `json:"finish_reason"`
	StopSequence *string    `json:"stop_sequence"`
}

type chatAnswer struct {
	Content   json.RawMessage  `json:"content"` // a string, text parts, or null
	Refusal   *string          `json:"refusal"`
	ToolCalls []chatAnswerCall `json:"tool_calls"`
	// The thinking (see wire.AnthropicBlock): its text, which DeepSeek,
	// vLLM and LiteLLM write as reasoning_content too, and Anthropic's
	// blocks with their signatures, when the provider was Anthropic.
	ReasoningContent *string               `json:"reasoning_content"`
	ThinkingBlocks   []wire.AnthropicBlock `json:"thinking_blocks"`
}

type chatAnswerCall struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CacheCreationInputTokens  int                          `json:"cache_creation_input_tokens"`
	CacheCreationTokenDetails *wire.AnthropicCacheCreation `json:"cache_creation_token_details"`
}

// usage is OpenAI's usage as Anthropic counts it: prompt_tokens is the
// whole prompt, of which cached_tokens were read from the prompt cache and
// cache_creation_input_tokens written to it; Anthropic's input_tokens are
// the rest.
func (u *chatUsage) usage() wire.AnthropicUsage {
	if u == nil {
		return wire.AnthropicUsage{}
	}
	var read int
	if u.PromptTokensDetails != nil {
		read = max(0, u.PromptTokensDetails.CachedTokens)
	}
	created := max(0, u.CacheCreationInputTokens)
	return wire.AnthropicUsage{
		InputTokens:              max(0, u.PromptTokens-read-created),
		CacheReadInputTokens:     read,
		CacheCreationInputTokens: created,
		CacheCreation:            u.CacheCreationTokenDetails, // by how long the cache is kept, when the provider said
		OutputTokens:             max(0, u.CompletionTokens),
	}
}

// StopReason is Anthropic's stop_reason for a chat finish_reason; a stop
// with a stop sequence an Anthropic key named is "stop_sequence".
func StopReason(finish string, stopSequence *string) string {
	switch finish {
	case "length":
		return "max_tokens"
	case "tool_calls", "function_call":
		return "tool_use"
	case "content_filter":
		return "refusal"
	}
	if stopSequence != nil {
		return "stop_sequence"
	}
	return "end_turn"
}

var errNoChoice = errors.New("messages: the chat completion has no choice")

// FromChat translates a whole chat completion into Anthropic's message
// object, with id and, when the answer names none, model.
func FromChat(body []byte, id, model string) ([]byte, error) {
	var cc chatCompletion
	if err := json.Unmarshal(body, &cc); err != nil {
		return nil, err
	}
	if len(cc.Choices) == 0 {
		return nil, errNoChoice
	}
	ch := cc.Choices[0]
	if cc.Model != "" {
		model = cc.Model
	}
	msg := wire.AnthropicMessage{ID: id, Type: "message", Role: "assistant", Model: model,
		Content: thinkingOf(ch.Message), Usage: cc.Usage.usage()}
	if text := contentText(ch.Message.Content); text != "" {
		msg.Content = append(msg.Content, wire.AnthropicBlock{Type: "text", Text: &text})
	} else if r := ch.Message.Refusal; r != nil && *r != "" {
		msg.Content = append(msg.Content, wire.AnthropicBlock{Type: "text", Text: r})
	}
	for _, call := range ch.Message.ToolCalls {
		msg.Content = append(msg.Content, wire.AnthropicBlock{Type: "tool_use", ID: call.ID, Name: call.Function.Name,
			Input: toolInput(call.Function.Arguments)})
	}
	finish := ""
	if ch.FinishReason != nil {
		finish = *ch.FinishReason
	}
	reason := StopReason(finish, ch.StopSequence)
	msg.StopReason = &reason
	if reason == "stop_sequence" {
		msg.StopSequence = ch.StopSequence
	}
	return marshalAnswer(msg)
}

// thinkingOf is an answer's thinking as the blocks that open a message:
// Anthropic's own, signatures and all, when the answer carries them;
// else its reasoning text as one thinking block whose signature is empty,
// as no one signed it.
func thinkingOf(a chatAnswer) []wire.AnthropicBlock {
	out := []wire.AnthropicBlock{}
	for _, b := range a.ThinkingBlocks {
		switch b.Type {
		case "thinking":
			out = append(out, thinkingBlockOf(deref(b.Thinking), deref(b.Signature)))
		case "redacted_thinking":
			out = append(out, wire.AnthropicBlock{Type: "redacted_thinking", Data: b.Data})
		}
	}
	if len(out) == 0 && a.ReasoningContent != nil && *a.ReasoningContent != "" {
		out = append(out, thinkingBlockOf(*a.ReasoningContent, ""))
	}
	return out
}

// thinkingBlockOf is a thinking block; both fields are always written.
func thinkingBlockOf(thinking, signature string) wire.AnthropicBlock {
	return wire.AnthropicBlock{Type: "thinking", Thinking: &thinking, Signature: &signature}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func marshalAnswer(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// contentText is a chat answer's text: its string, or its text parts
// joined.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var b bytes.Buffer
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// toolInput is a tool call's arguments as a tool_use block's input, which
// must be a JSON object. Arguments that are not one (a model cut short
// mid-call) are kept whole under "arguments" rather than lost.
func toolInput(args string) json.RawMessage {
	trimmed := bytes.TrimSpace([]byte(args))
	if len(trimmed) == 0 {
		return json.RawMessage("{}")
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(trimmed, &obj) == nil && obj != nil {
		var b bytes.Buffer
		if json.Compact(&b, trimmed) == nil {
			return b.Bytes()
		}
	}
	wrapped, _ := json.Marshal(map[string]string{"arguments": args})
	return wrapped
}
