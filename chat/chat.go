// Package chat is Sluice's chat vocabulary: the message every part of the
// gateway passes around (the local model, the completion pipeline,
// conversation histories, the provider usage parser), the usage a
// completion is billed by, and the one token counter they all agree on.
package chat

// MessageOverheadTokens is counted for every message on top of its content:
// chat models wrap each message in role and separator tokens (OpenAI
// documents about 3-4 per message), so counting content alone would
// under-report.
const MessageOverheadTokens = 4

// Message is one chat message as far as Sluice reads it: its role (system,
// developer, user, assistant, tool) and its text. Non-text parts of a
// provider request travel in the raw body, not here.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// IsSystem reports whether the message sets the conversation's rules
// (OpenAI's "system", or "developer" for newer models).
func (m Message) IsSystem() bool { return m.Role == "system" || m.Role == "developer" }

// Usage is what one completion used, as billed: prompt and completion
// tokens; how many of the prompt tokens the provider served from its own
// prompt cache (billed at the cached price) and wrote to it (billed at the
// cache-creation price); how many of the completion tokens the model spent
// reasoning (billed at the reasoning price).
type Usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	CachedTokens        int `json:"-"` // prompt_tokens_details.cached_tokens; part of PromptTokens
	CacheCreationTokens int `json:"-"` // cache_creation_input_tokens; part of PromptTokens
	// CacheCreationHourTokens are the CacheCreationTokens written to be
	// kept an hour (Anthropic's ttl "1h"): billed at twice the input price.
	CacheCreationHourTokens int `json:"-"`
	ReasoningTokens         int `json:"-"` // completion_tokens_details.reasoning_tokens; part of CompletionTokens
}

// Total is prompt plus completion tokens.
func (u Usage) Total() int { return u.PromptTokens + u.CompletionTokens }

// PromptTokens counts a conversation the way a model is billed for it: each
// message's content plus MessageOverheadTokens.
func PromptTokens(msgs []Message) int {
	n := 0
	for _, m := range msgs {
		n += CountTokens(m.Content) + MessageOverheadTokens
	}
	return n
}
