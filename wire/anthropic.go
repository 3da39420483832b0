package wire

import "encoding/json"

// Anthropic's Messages API, as its documentation describes it: what the
// gateway's /v1/messages answers, what an Anthropic provider key is sent
// and answers, and what the mock's Anthropic speaker says. Fields whose
// shape varies (a content that is a string or blocks, a tool's input) are
// kept as raw JSON for the party that reads them to decide.

// AnthropicVersion is the API version Sluice speaks to Anthropic: the one
// whose wire format this file describes.
const AnthropicVersion = "2023-06-01"

// AnthropicRequest is a Messages request body as a provider is sent it.
type AnthropicRequest struct {
	Model         string               `json:"model"`
	MaxTokens     int64                `json:"max_tokens"`
	System        []AnthropicBlock     `json:"system,omitempty"`
	Messages      []AnthropicTurn      `json:"messages"`
	Temperature   *float64             `json:"temperature,omitempty"`
	TopP          *float64             `json:"top_p,omitempty"`
	TopK          *int64               `json:"top_k,omitempty"`
	StopSequences []string             `json:"stop_sequences,omitempty"`
	Stream        bool                 `json:"stream,omitempty"`
	Metadata      *AnthropicMetadata   `json:"metadata,omitempty"`
	Tools         []AnthropicTool      `json:"tools,omitempty"`
	ToolChoice    *AnthropicToolChoice `json:"tool_choice,omitempty"`
	// Thinking is the extended thinking asked for ({"type":"enabled",
	// "budget_tokens":N}, {"type":"adaptive"}, {"type":"disabled"}, with
	// an optional display), as the client wrote it: Anthropic validates
	// it, and a reshaped copy could drop a field it would read.
	Thinking json.RawMessage `json:"thinking,omitempty"`
	// ContextManagement is the beta context_management object, as
	// written.
	ContextManagement json.RawMessage `json:"context_management,omitempty"`
	// OutputConfig is how much effort the answer gets.
	OutputConfig *AnthropicOutputConfig `json:"output_config,omitempty"`
}

// AnthropicOutputConfig is a request's output_config: its effort (low,
// medium, high, xhigh or max; Anthropic's default is high) and the format
// of a structured answer ({"type":"json_schema","schema":{…}}).
type AnthropicOutputConfig struct {
	Effort string          `json:"effort,omitempty"`
	Format json.RawMessage `json:"format,omitempty"`
}

// AnthropicTurn is one message of a conversation: role user or assistant,
// content a string or an array of blocks.
type AnthropicTurn struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// AnthropicMetadata is the request's metadata: an id for the end user.
type AnthropicMetadata struct {
	UserID string `json:"user_id,omitempty"`
}

// AnthropicTool is a client tool: a name, what it is for and its input's
// JSON schema. Type is "" or "custom"; Anthropic's server tools have
// other types.
type AnthropicTool struct {
	Type         string          `json:"type,omitempty"`
	Name         string          `json:"name"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema"`
	CacheControl json.RawMessage `json:"cache_control,omitempty"`
}

// AnthropicToolChoice is how the model may use tools: auto, any, tool
// (Name) or none.
type AnthropicToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use,omitempty"`
}

// AnthropicBlock is one content block, of any type Sluice carries: text,
// image, tool_use, tool_result, thinking and redacted_thinking.
//
// The chat form carries thinking blocks as LiteLLM does: an assistant
// message's (and a whole answer's) "thinking_blocks" are these blocks,
// thinking (Thinking, Signature) and redacted_thinking (Data), in their
// order, and "reasoning_content" is their thinking text joined; a stream's
// delta has its thinking text in reasoning_content and, once a block is
// done, the block's signature (or a redacted block whole) in
// thinking_blocks.
type AnthropicBlock struct {
	Type string `json:"type"`
	// Text is a text block's text; a pointer so that an empty text is
	// still written (a stream's content_block_start has "text": "").
	Text      *string          `json:"text,omitempty"`
	Source    *AnthropicSource `json:"source,omitempty"`      // image
	ID        string           `json:"id,omitempty"`          // tool_use
	Name      string           `json:"name,omitempty"`        // tool_use
	Input     json.RawMessage  `json:"input,omitempty"`       // tool_use: a JSON object
	ToolUseID string           `json:"tool_use_id,omitempty"` // tool_result
	// Content is a tool_result's content: a string or text and image
	// blocks.
	Content      json.RawMessage `json:"content,omitempty"`
	IsError      bool            `json:"is_error,omitempty"` // tool_result
	CacheControl json.RawMessage `json:"cache_control,omitempty"`
	// Thinking and Signature are a thinking block's text and the opaque
	// signature Anthropic checks when the block comes back; pointers, so
	// a stream's content_block_start writes both empty.
	Thinking  *string `json:"thinking,omitempty"`
	Signature *string `json:"signature,omitempty"`
	Data      string  `json:"data,omitempty"` // redacted_thinking: encrypted, opaque
}

// AnthropicSource is where an image block's image is: inline (type
// base64, MediaType and Data), by address (type url, URL) or uploaded to
// Anthropic's Files API (type file, FileID), which Sluice does not carry.
type AnthropicSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
	FileID    string `json:"file_id,omitempty"`
}

// AnthropicMessage is a whole answer: the message object.
type AnthropicMessage struct {
	ID           string           `json:"id"`
	Type         string           `json:"type"` // "message"
	Role         string           `json:"role"` // "assistant"
	Model        string           `json:"model"`
	Content      []AnthropicBlock `json:"content"`
	StopReason   *string          `json:"stop_reason"`
	StopSequence *string          `json:"stop_sequence"`
	Usage        AnthropicUsage   `json:"usage"`
}

// AnthropicUsage is what an answer used. InputTokens are the prompt
// tokens neither read from nor written to the prompt cache: the whole
// prompt is the sum of the three input counts.
type AnthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	// CacheCreation splits the cache writes by how long they are kept:
	// an hour's are billed at twice the input price, five minutes' at
	// 1.25 times.
	CacheCreation *AnthropicCacheCreation `json:"cache_creation,omitempty"`
	// OutputTokens include the thinking, which is billed as output.
	OutputTokens int `json:"output_tokens"`
	// OutputTokensDetails, when Anthropic sends it, says how many of the
	// output tokens were thinking.
	OutputTokensDetails *AnthropicOutputDetails `json:"output_tokens_details,omitempty"`
}

// AnthropicCacheCreation is the prompt cache written, by how long it is
// kept.
type AnthropicCacheCreation struct {
	Ephemeral5mInputTokens int `json:"ephemeral_5m_input_tokens"`
	Ephemeral1hInputTokens int `json:"ephemeral_1h_input_tokens"`
}

// AnthropicOutputDetails is the part of the output that was thinking.
type AnthropicOutputDetails struct {
	ThinkingTokens int `json:"thinking_tokens"`
}

// AnthropicEvent is one server-sent event of a streamed answer, of any
// type: message_start (Message), content_block_start (Index,
// ContentBlock), content_block_delta (Index, Delta), content_block_stop
// (Index), message_delta (Delta, Usage), message_stop, ping and error
// (Error). Written, each type carries only its own fields.
type AnthropicEvent struct {
	Type         string                `json:"type"`
	Message      *AnthropicMessage     `json:"message,omitempty"`
	Index        *int                  `json:"index,omitempty"`
	ContentBlock *AnthropicBlock       `json:"content_block,omitempty"`
	Delta        *AnthropicDelta       `json:"delta,omitempty"`
	Usage        *AnthropicUsage       `json:"usage,omitempty"`
	Error        *AnthropicErrorDetail `json:"error,omitempty"`
}

// AnthropicDelta is a content_block_delta's delta (text_delta: Text;
// input_json_delta: PartialJSON; thinking_delta: Thinking;
// signature_delta: Signature) or a message_delta's (StopReason,
// StopSequence).
type AnthropicDelta struct {
	Type        string  `json:"type,omitempty"`
	Text        *string `json:"text,omitempty"`
	PartialJSON *string `json:"partial_json,omitempty"`
	Thinking    *string `json:"thinking,omitempty"`
	Signature   *string `json:"signature,omitempty"`
	// A message_delta always carries both, null when there is none.
	StopReason   *string `json:"stop_reason,omitempty"`
	StopSequence *string `json:"stop_sequence,omitempty"`
}

// AnthropicMessageDelta is the delta of a message_delta event as written:
// both fields always present, null when unset.
type AnthropicMessageDelta struct {
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
}

// AnthropicError is Anthropic's error body.
type AnthropicError struct {
	Type      string               `json:"type"` // "error"
	Error     AnthropicErrorDetail `json:"error"`
	RequestID string               `json:"request_id,omitempty"`
}

// AnthropicErrorDetail is the error inside an AnthropicError: its type
// (invalid_request_error, authentication_error, permission_error,
// not_found_error, request_too_large, rate_limit_error, billing_error,
// api_error, timeout_error, overloaded_error) and message.
type AnthropicErrorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}
