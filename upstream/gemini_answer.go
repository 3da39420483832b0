package upstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/wire"
)

// Gemini's answers (GenerateContentResponse), whole or one stream event
// at a time, translated to OpenAI's chat completions.

// geminiResponse is the part of a GenerateContentResponse Sluice reads.
// A stream event that reports a failure carries an error instead.
type geminiResponse struct {
	Candidates []struct {
		Content struct {
			Parts []geminiPart `json:"parts"`
		} `json:"content"`
		FinishReason string `json:"finishReason"`
	} `json:"candidates"`
	PromptFeedback *struct {
		BlockReason string `json:"blockReason"`
	} `json:"promptFeedback"`
	UsageMetadata *geminiUsage `json:"usageMetadata"`
	Error         *geminiError `json:"error"`
}

// geminiUsage is usageMetadata. The prompt count includes the cached
// tokens, as OpenAI's does; thinking is billed as output.
type geminiUsage struct {
	PromptTokenCount        int64 `json:"promptTokenCount"`
	CandidatesTokenCount    int64 `json:"candidatesTokenCount"`
	ThoughtsTokenCount      int64 `json:"thoughtsTokenCount"`
	ToolUsePromptTokenCount int64 `json:"toolUsePromptTokenCount"`
	CachedContentTokenCount int64 `json:"cachedContentTokenCount"`
}

// oaUsage is OpenAI's usage object as Sluice writes it.
type oaUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	TotalTokens         int64 `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

// openAI is u in OpenAI's terms: the prompt with the tool-use prompt
// (what Gemini's own tools read), the completion with the thoughts.
func (u *geminiUsage) openAI() *oaUsage {
	o := &oaUsage{
		PromptTokens:     max(0, u.PromptTokenCount) + max(0, u.ToolUsePromptTokenCount),
		CompletionTokens: max(0, u.CandidatesTokenCount) + max(0, u.ThoughtsTokenCount),
	}
	o.TotalTokens = o.PromptTokens + o.CompletionTokens
	o.PromptTokensDetails.CachedTokens = min(max(0, u.CachedContentTokenCount), o.PromptTokens)
	o.CompletionTokensDetails.ReasoningTokens = max(0, u.ThoughtsTokenCount)
	return o
}

// finishReason is Gemini's finishReason in OpenAI's words: "" while the
// answer goes on. Every reason of a filter (safety, recitation, block
// lists, prohibited content, personal data) is content_filter; the others
// (OTHER, MALFORMED_FUNCTION_CALL, …) end the answer as stop, or
// tool_calls when it called functions.
func finishReason(gemini string, calledTools bool) string {
	switch gemini {
	case "", "FINISH_REASON_UNSPECIFIED":
		return ""
	case "MAX_TOKENS":
		return "length"
	case "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII",
		"IMAGE_SAFETY", "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION":
		return "content_filter"
	}
	if calledTools {
		return "tool_calls"
	}
	return "stop"
}

// oaCompletion is a chat.completion.
type oaCompletion struct {
	ID      string     `json:"id"`
	Object  string     `json:"object"`
	Created int64      `json:"created"`
	Model   string     `json:"model"`
	Choices []oaChoice `json:"choices"`
	Usage   *oaUsage   `json:"usage,omitempty"`
}

type oaChoice struct {
	Index   int `json:"index"`
	Message struct {
		Role      string       `json:"role"`
		Content   *string      `json:"content"`
		ToolCalls []oaToolCall `json:"tool_calls,omitempty"`
	} `json:"message"`
	FinishReason string `json:"finish_reason"`
}

// geminiAnswer translates a whole answer. A prompt Gemini blocked (no
// candidates, a promptFeedback.blockReason) is an empty answer ended by
// content_filter, billed its prompt, as OpenAI reports a filtered answer.
func geminiAnswer(req Request, body []byte, base string, created int64) ([]byte, error) {
	var g geminiResponse
	if err := json.Unmarshal(body, &g); err != nil {
		return nil, fmt.Errorf("gemini answer: %w", err)
	}
	c := oaCompletion{ID: "chatcmpl-" + base, Object: "chat.completion", Created: created, Model: req.Model, Choices: make([]oaChoice, 1)}
	ch := &c.Choices[0]
	ch.Message.Role = "assistant"
	var text strings.Builder
	switch {
	case len(g.Candidates) > 0:
		cand := g.Candidates[0]
		for _, p := range cand.Content.Parts {
			switch {
			case p.Thought:
				// A thought summary: never asked for, not the answer.
			case p.FunctionCall != nil:
				ch.Message.ToolCalls = append(ch.Message.ToolCalls, toolCall(p, base, len(ch.Message.ToolCalls)))
			default:
				text.WriteString(p.Text)
			}
		}
		ch.FinishReason = finishReason(cand.FinishReason, len(ch.Message.ToolCalls) > 0)
		if ch.FinishReason == "" {
			ch.FinishReason = finishReason("STOP", len(ch.Message.ToolCalls) > 0)
		}
	case g.PromptFeedback != nil && g.PromptFeedback.BlockReason != "":
		ch.FinishReason = "content_filter"
	default:
		ch.FinishReason = "stop"
	}
	if content := text.String(); content != "" || len(ch.Message.ToolCalls) == 0 {
		ch.Message.Content = &content
	}
	if g.UsageMetadata != nil {
		c.Usage = g.UsageMetadata.openAI()
	}
	return marshalJSON(c)
}

// toolCall translates a function call part, the i-th of its answer.
func toolCall(p geminiPart, base string, i int) oaToolCall {
	tc := oaToolCall{ID: toolCallID(base, i, p.ThoughtSignature), Type: "function"}
	tc.Function.Name = p.FunctionCall.Name
	tc.Function.Arguments = "{}"
	var args bytes.Buffer
	if len(p.FunctionCall.Args) > 0 && json.Compact(&args, p.FunctionCall.Args) == nil && args.String() != "null" {
		tc.Function.Arguments = args.String()
	}
	return tc
}

// geminiError is Google's error object: {"code", "message", "status",
// "details": [{"@type", ...}]}.
type geminiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Status  string `json:"status"`
	Details []struct {
		Type       string `json:"@type"`
		Reason     string `json:"reason"`     // google.rpc.ErrorInfo
		RetryDelay string `json:"retryDelay"` // google.rpc.RetryInfo, a protobuf Duration: "13s", "0.5s"
	} `json:"details"`
}

// parseGeminiError reads an error body: {"error": {...}}, or the same in
// an array of one, as Google's streaming endpoints also answer.
func parseGeminiError(body []byte) (geminiError, bool) {
	var one struct {
		Error *geminiError `json:"error"`
	}
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '[' {
		var many []json.RawMessage
		if json.Unmarshal(body, &many) != nil || len(many) == 0 {
			return geminiError{}, false
		}
		body = many[0]
	}
	if json.Unmarshal(body, &one) != nil || one.Error == nil {
		return geminiError{}, false
	}
	return *one.Error, true
}

// retryDelay is the RetryInfo's delay in seconds.
func (e geminiError) retryDelay() (float64, bool) {
	for _, d := range e.Details {
		if !strings.HasSuffix(d.Type, "google.rpc.RetryInfo") {
			continue
		}
		s, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(d.RetryDelay), "s"), 64)
		if err == nil && s >= 0 {
			return s, true
		}
	}
	return 0, false
}

func (e geminiError) hasReason(reason string) bool {
	for _, d := range e.Details {
		if d.Reason == reason {
			return true
		}
	}
	return false
}

// geminiErrorKinds are OpenAI's error type and code for Google's
// statuses; others are named by the HTTP status (invalid_request_error
// for 4xx, server_error for 5xx) with Google's status as the code.
var geminiErrorKinds = map[string][2]string{
	"INVALID_ARGUMENT":    {"invalid_request_error", "invalid_argument"},
	"FAILED_PRECONDITION": {"invalid_request_error", "failed_precondition"},
	"OUT_OF_RANGE":        {"invalid_request_error", "out_of_range"},
	"NOT_FOUND":           {"invalid_request_error", "model_not_found"},
	"UNAUTHENTICATED":     {"authentication_error", "invalid_api_key"},
	"PERMISSION_DENIED":   {"permission_error", "permission_denied"},
	"RESOURCE_EXHAUSTED":  {"rate_limit_exceeded", "rate_limit_exceeded"},
}

// geminiFailure translates an error body to OpenAI's, keeping Google's
// message: what the client is shown of Gemini's refusal.
func geminiFailure(status int, body []byte) []byte {
	var e wire.OpenAIError
	ge, ok := parseGeminiError(body)
	e.Error.Message = ge.Message
	if !ok || ge.Message == "" {
		e.Error.Message = fmt.Sprintf("Gemini answered %d %s", status, http.StatusText(status))
	}
	if kind, ok := geminiErrorKinds[ge.Status]; ok {
		e.Error.Type, e.Error.Code = kind[0], kind[1]
	} else {
		e.Error.Type, e.Error.Code = "invalid_request_error", strings.ToLower(ge.Status)
		if status >= 500 {
			e.Error.Type = "server_error"
		}
		if e.Error.Code == "" {
			e.Error.Code = strings.ToLower(strings.ReplaceAll(http.StatusText(status), " ", "_"))
		}
	}
	b, err := marshalJSON(e)
	if err != nil {
		return body
	}
	return b
}
