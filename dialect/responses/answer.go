package responses

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Meta is what a Response says that the model's answer does not.
type Meta struct {
	ID        string // resp_…
	CreatedAt time.Time
	Now       func() time.Time // when it completed
}

// Response is the Responses API's Response object.
type Response struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"`
	CreatedAt          int64              `json:"created_at"`
	Status             string             `json:"status"` // in_progress, completed, incomplete, failed
	Background         bool               `json:"background"`
	CompletedAt        *int64             `json:"completed_at"`
	Error              *ResponseError     `json:"error"`
	IncompleteDetails  *IncompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	MaxOutputTokens    *int64             `json:"max_output_tokens"`
	MaxToolCalls       *int64             `json:"max_tool_calls"`
	Model              string             `json:"model"`
	Output             []OutputItem       `json:"output"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	PromptCacheKey     *string            `json:"prompt_cache_key"`
	Reasoning          reasoningEcho      `json:"reasoning"`
	SafetyIdentifier   *string            `json:"safety_identifier"`
	ServiceTier        string             `json:"service_tier"`
	Store              bool               `json:"store"`
	Temperature        float64            `json:"temperature"`
	Text               json.RawMessage    `json:"text"`
	ToolChoice         json.RawMessage    `json:"tool_choice"`
	Tools              json.RawMessage    `json:"tools"`
	TopLogprobs        int                `json:"top_logprobs"`
	TopP               float64            `json:"top_p"`
	Truncation         string             `json:"truncation"`
	Usage              *Usage             `json:"usage"`
	User               *string            `json:"user"`
	Metadata           json.RawMessage    `json:"metadata"`
}

// ResponseError is why a response failed.
type ResponseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// IncompleteDetails is why a response is incomplete: max_output_tokens
// or content_filter.
type IncompleteDetails struct {
	Reason string `json:"reason"`
}

// Usage is a response's usage in the Responses API's terms.
type Usage struct {
	InputTokens        int64 `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int64 `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int64 `json:"total_tokens"`
}

// NewUsage is the usage of input and output tokens, cached of the input
// read from a provider's cache.
func NewUsage(input, output, cached int64) Usage {
	u := Usage{InputTokens: input, OutputTokens: output, TotalTokens: input + output}
	u.InputTokensDetails.CachedTokens = cached
	return u
}

// OutputItem is an item of a Response's output: the assistant's message,
// one function call, or one call of a custom tool.
type OutputItem struct {
	Type    string // "message", "function_call" or "custom_tool_call"
	ID      string
	Status  string        // in_progress, completed, incomplete
	Content []ContentPart // a message's
	// A call's. A custom tool's call keeps the chat arguments it came as
	// (not written: its Input is their text), so a stored conversation
	// repeats to the model what the model said.
	CallID, Name, Arguments string
	Input                   string // a custom tool call's
}

// MarshalJSON writes the item with the fields of its type.
func (it OutputItem) MarshalJSON() ([]byte, error) {
	if it.Type == "custom_tool_call" {
		return json.Marshal(struct {
			Type   string `json:"type"`
			ID     string `json:"id"`
			Status string `json:"status"`
			CallID string `json:"call_id"`
			Name   string `json:"name"`
			Input  string `json:"input"`
		}{it.Type, it.ID, it.Status, it.CallID, it.Name, it.Input})
	}
	if it.Type == "function_call" {
		return json.Marshal(struct {
			Type      string `json:"type"`
			ID        string `json:"id"`
			Status    string `json:"status"`
			CallID    string `json:"call_id"`
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		}{it.Type, it.ID, it.Status, it.CallID, it.Name, it.Arguments})
	}
	content := it.Content
	if content == nil {
		content = []ContentPart{}
	}
	return json.Marshal(struct {
		Type    string        `json:"type"`
		ID      string        `json:"id"`
		Status  string        `json:"status"`
		Role    string        `json:"role"`
		Content []ContentPart `json:"content"`
	}{it.Type, it.ID, it.Status, "assistant", content})
}

// ContentPart is a part of the assistant's message: output_text or refusal.
type ContentPart struct {
	Type    string
	Text    string // output_text's
	Refusal string // refusal's
}

// MarshalJSON writes the part with the fields of its type.
func (p ContentPart) MarshalJSON() ([]byte, error) {
	if p.Type == "refusal" {
		return json.Marshal(struct {
			Type    string `json:"type"`
			Refusal string `json:"refusal"`
		}{p.Type, p.Refusal})
	}
	return json.Marshal(struct {
		Type        string     `json:"type"`
		Text        string     `json:"text"`
		Annotations []struct{} `json:"annotations"`
		Logprobs    []struct{} `json:"logprobs"`
	}{p.Type, p.Text, []struct{}{}, []struct{}{}})
}

// skeleton is the Response of the request before any output: in progress.
func (r *Request) skeleton(meta Meta) Response {
	e := r.echo
	return Response{
		ID: meta.ID, Object: "response", CreatedAt: meta.CreatedAt.Unix(), Status: "in_progress",
		Instructions: e.Instructions, MaxOutputTokens: e.MaxOutputTokens, MaxToolCalls: e.MaxToolCalls,
		Model: r.Model, Output: []OutputItem{}, ParallelToolCalls: e.ParallelToolCalls,
		PreviousResponseID: e.PreviousResponseID, PromptCacheKey: e.PromptCacheKey, Reasoning: e.Reasoning,
		SafetyIdentifier: e.SafetyIdentifier, ServiceTier: e.ServiceTier, Store: r.Store,
		Temperature: e.Temperature, Text: e.Text, ToolChoice: e.ToolChoice, Tools: e.Tools, TopP: e.TopP,
		Truncation: "disabled", User: e.User, Metadata: e.Metadata,
	}
}

// outcome is the status a finish reason gives a response, and why it is
// incomplete.
func outcome(finish string) (string, *IncompleteDetails) {
	switch finish {
	case "length":
		return "incomplete", &IncompleteDetails{Reason: "max_output_tokens"}
	case "content_filter":
		return "incomplete", &IncompleteDetails{Reason: "content_filter"}
	}
	return "completed", nil
}

// ids makes the ids of a response's output items from its own.
type ids struct {
	base     string
	messages int
}

func newIDs(responseID string) *ids { return &ids{base: strings.TrimPrefix(responseID, "resp_")} }

func (d *ids) message() string {
	d.messages++
	if d.messages == 1 {
		return "msg_" + d.base
	}
	return "msg_" + d.base + "_" + strconv.Itoa(d.messages)
}

func (d *ids) call(index int) string { return "fc_" + d.base + "_" + strconv.Itoa(index) }

func (d *ids) customCall(index int) string { return "ctc_" + d.base + "_" + strconv.Itoa(index) }

// chatUsage is a chat completion's usage.
type chatUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	TotalTokens         int64 `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

func (u *chatUsage) usage() *Usage {
	if u == nil {
		return nil
	}
	out := Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
	if out.TotalTokens == 0 {
		out.TotalTokens = u.PromptTokens + u.CompletionTokens
	}
	if d := u.PromptTokensDetails; d != nil {
		out.InputTokensDetails.CachedTokens = d.CachedTokens
	}
	if d := u.CompletionTokensDetails; d != nil {
		out.OutputTokensDetails.ReasoningTokens = d.ReasoningTokens
	}
	return &out
}

// ErrUnreadable is a chat completion that is not one.
var ErrUnreadable = errors.New("responses: the chat completion cannot be read")

// Response is the Response object of a chat completion answering the
// request.
func (r *Request) Response(meta Meta, completion []byte) (Response, error) {
	var cc struct {
		Choices []struct {
			Message struct {
				Content   json.RawMessage `json:"content"`
				Refusal   *string         `json:"refusal"`
				ToolCalls []struct {
					ID       string       `json:"id"`
					Function chatFunction `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage *chatUsage `json:"usage"`
	}
	if err := json.Unmarshal(completion, &cc); err != nil || len(cc.Choices) == 0 {
		return Response{}, ErrUnreadable
	}
	ch := cc.Choices[0]
	resp := r.skeleton(meta)
	status, details := outcome(ch.FinishReason)
	itemStatus := status
	id := newIDs(meta.ID)
	text, hasText := contentText(ch.Message.Content)
	refusal := ch.Message.Refusal != nil && *ch.Message.Refusal != ""
	if hasText || refusal || len(ch.Message.ToolCalls) == 0 {
		msg := OutputItem{Type: "message", ID: id.message(), Status: itemStatus}
		if hasText || !refusal {
			msg.Content = append(msg.Content, ContentPart{Type: "output_text", Text: text})
		}
		if refusal {
			msg.Content = append(msg.Content, ContentPart{Type: "refusal", Refusal: *ch.Message.Refusal})
		}
		resp.Output = append(resp.Output, msg)
	}
	for i, tc := range ch.Message.ToolCalls {
		resp.Output = append(resp.Output, r.callItem(id, i, itemStatus, tc.ID, tc.Function))
	}
	end(&resp, meta, status, details, cc.Usage.usage())
	return resp, nil
}

// end ends a response with its status and usage.
func end(resp *Response, meta Meta, status string, details *IncompleteDetails, usage *Usage) {
	resp.Status, resp.IncompleteDetails, resp.Usage = status, details, usage
	at := meta.Now().Unix()
	resp.CompletedAt = &at
}

// contentText is a message content's text: the string, or its text parts
// joined; false when it has none.
func contentText(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, s != ""
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return "", false
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), b.Len() > 0
}

// Conversation is what a stored response keeps for a continuation: the
// chat messages of history (the conversation it continued), its input,
// and the assistant's answer with its tool calls, as one JSON array.
func (r *Request) Conversation(history []json.RawMessage, resp Response) []byte {
	msgs := make([]json.RawMessage, 0, len(history)+len(r.input)+1)
	msgs = append(append(msgs, history...), r.Input()...)
	a, _ := json.Marshal(assistantOf(resp))
	b, _ := json.Marshal(append(msgs, a))
	return b
}

// assistantOf is a response's output as one chat assistant message.
func assistantOf(resp Response) chatMessage {
	m := chatMessage{Role: "assistant"}
	var text strings.Builder
	hasText := false
	for _, it := range resp.Output {
		switch it.Type {
		case "message":
			for _, p := range it.Content {
				if p.Type == "refusal" {
					m.Refusal += p.Refusal
				} else {
					text.WriteString(p.Text)
					hasText = true
				}
			}
		case "function_call", "custom_tool_call":
			m.ToolCalls = append(m.ToolCalls, chatToolCall{ID: it.CallID, Type: "function",
				Function: chatFunction{Name: it.Name, Arguments: it.Arguments}})
		}
	}
	if hasText || len(m.ToolCalls) == 0 {
		m.Content = text.String()
	}
	return m
}
