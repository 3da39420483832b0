package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/upstream/local"
)

// UsageRecorder takes usage events off the request path.
type UsageRecorder interface {
	Record(ev models.UsageEvent) error
}

// Freezer suspends a token that keeps hitting its limits.
type Freezer interface {
	Freeze(ctx context.Context, c accounts.Caller, count int, now time.Time) (models.Freeze, error)
}

// api serves the metered, OpenAI-compatible /v1 endpoints.
type api struct {
	log              *slog.Logger
	dir              *accounts.Directory
	limiter          quota.Limiter
	detector         *quota.Detector
	freezer          Freezer
	scorer           *quota.ValueScorer
	priorityWeights  map[string]int64
	defaultMaxTokens int64
	model            *local.Model
	usage            UsageRecorder
	maxBodyBytes     int64
	now              func() time.Time
}

const callerKey = "sluice.caller"

// authenticateToken resolves the bearer API token; failures are 401s with
// distinct codes.
func (a *api) authenticateToken(c *gin.Context) {
	caller, err := a.dir.Authenticate(c.Request.Context(), bearer(c.Request))
	if err != nil {
		writeOpenAIError(c, a.log, err)
		return
	}
	c.Set(callerKey, caller)
	c.Next()
}

// bearer returns the token of an "Authorization: Bearer …" header, "" when
// there is none.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// chatRequest is the part of OpenAI's chat request Sluice reads; unknown
// fields are accepted, as OpenAI's SDKs send many.
type chatRequest struct {
	Model               string        `json:"model"`
	Messages            []chatMessage `json:"messages"`
	MaxTokens           *int          `json:"max_tokens"`
	MaxCompletionTokens *int          `json:"max_completion_tokens"`
	N                   *int          `json:"n"`
	Stream              bool          `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// readChatRequest decodes and validates a chat request, mapping every kind
// of bad input to a 400 or 413 that says what is wrong.
func (a *api) readChatRequest(c *gin.Context) (chatRequest, []local.Message, error) {
	var req chatRequest
	mt, _, err := mime.ParseMediaType(c.GetHeader("Content-Type"))
	if err != nil || mt != "application/json" {
		return req, nil, apperr.Field(apperr.Invalid, "invalid_content_type", "", "Content-Type must be application/json")
	}
	body := http.MaxBytesReader(c.Writer, c.Request.Body, a.maxBodyBytes)
	dec := json.NewDecoder(body)
	if err := dec.Decode(&req); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return req, nil, apperr.Field(apperr.TooLarge, "request_too_large", "", "request body is larger than "+strconv.FormatInt(a.maxBodyBytes, 10)+" bytes")
		}
		return req, nil, apperr.Field(apperr.Invalid, "invalid_json", "", "request body is not valid JSON: "+jsonProblem(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, nil, apperr.Field(apperr.Invalid, "invalid_json", "", "request body must be one JSON object")
	}
	switch {
	case req.Model == "":
		return req, nil, apperr.Field(apperr.Invalid, "missing_model", "model", "you must provide a model parameter")
	case req.Model != local.ModelID:
		return req, nil, apperr.Field(apperr.NotFound, "model_not_found", "model", "the model '"+req.Model+"' does not exist or you do not have access to it; GET /v1/models lists yours")
	case len(req.Messages) == 0:
		return req, nil, apperr.Field(apperr.Invalid, "invalid_messages", "messages", "messages must be a non-empty array")
	case req.N != nil && *req.N != 1:
		return req, nil, apperr.Field(apperr.Invalid, "unsupported_n", "n", "only n=1 is supported")
	}
	if req.MaxCompletionTokens == nil {
		req.MaxCompletionTokens = req.MaxTokens
	}
	if m := req.MaxCompletionTokens; m != nil && *m < 1 {
		return req, nil, apperr.Field(apperr.Invalid, "invalid_max_tokens", "max_tokens", "max_tokens must be at least 1")
	}
	msgs := make([]local.Message, len(req.Messages))
	for i, m := range req.Messages {
		param := "messages[" + strconv.Itoa(i) + "]"
		switch m.Role {
		case "system", "developer", "user", "assistant", "tool":
		default:
			return req, nil, apperr.Field(apperr.Invalid, "invalid_role", param+".role", "role must be one of system, developer, user, assistant, tool")
		}
		text, err := contentText(m.Content)
		if err != nil {
			return req, nil, apperr.Field(apperr.Invalid, "invalid_content", param+".content", err.Error())
		}
		msgs[i] = local.Message{Role: m.Role, Content: text}
	}
	return req, msgs, nil
}

// contentText accepts OpenAI's two content forms: a string, or an array of
// parts of which Sluice understands the text ones.
func contentText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("content must be a string or an array of content parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", errors.New("content part type '" + p.Type + "' is not supported; send text parts")
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// jsonProblem describes a decoding error without echoing the body.
func jsonProblem(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return "syntax error at byte " + strconv.FormatInt(syn.Offset, 10)
	case errors.As(err, &typ):
		return "field '" + typ.Field + "' must be " + typ.Type.String()
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "body is empty or cut short"
	default:
		return "cannot decode"
	}
}

type chatChoice struct {
	Index        int       `json:"index"`
	Message      *chatOut  `json:"message,omitempty"`
	Delta        *chatOut  `json:"delta,omitempty"`
	FinishReason *string   `json:"finish_reason"`
	Logprobs     *struct{} `json:"logprobs"`
}

type chatOut struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content"`
}

type usageOut struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type chatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *usageOut    `json:"usage,omitempty"`
}

// chatCompletions answers POST /v1/chat/completions: freeze check, body,
// admission against the request and tokens-per-minute buckets, the model,
// then the tokens bucket settled with the real usage.
func (a *api) chatCompletions(c *gin.Context) {
	start := a.now()
	caller := c.MustGet(callerKey).(accounts.Caller)
	if !a.notFrozen(c, caller) {
		return
	}
	req, msgs, err := a.readChatRequest(c)
	if err != nil {
		// Bad requests still cost one request, so a flood of them is limited.
		if a.admitRequests(c, caller, 1) {
			writeOpenAIError(c, a.log, err)
		}
		return
	}
	weight, err := a.weigh(c, caller, msgs)
	if err != nil {
		if a.admitRequests(c, caller, 1) {
			writeOpenAIError(c, a.log, err)
		}
		return
	}
	maxTokens := 0
	if req.MaxCompletionTokens != nil {
		maxTokens = *req.MaxCompletionTokens
	}
	estimate := estimateTokens(msgs, maxTokens, a.defaultMaxTokens)
	if !a.admitChat(c, caller, weight, estimate) {
		return
	}
	reply := a.model.Complete(msgs, maxTokens)
	usage := usageOut{PromptTokens: reply.PromptTokens, CompletionTokens: reply.CompletionTokens, TotalTokens: reply.PromptTokens + reply.CompletionTokens}
	id := "chatcmpl-" + strings.TrimPrefix(requestID(c), "req_")
	if req.Stream {
		includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
		streamReply(c, id, start.Unix(), reply, usage, includeUsage)
	} else {
		finish := reply.FinishReason
		c.JSON(http.StatusOK, chatResponse{
			ID: id, Object: "chat.completion", Created: start.Unix(), Model: local.ModelID,
			Choices: []chatChoice{{Message: &chatOut{Role: "assistant", Content: reply.Content}, FinishReason: &finish}},
			Usage:   &usage,
		})
	}
	a.settleTokens(c, caller, estimate, int64(usage.TotalTokens))
	a.record(c, caller, usage, start)
}

// record enqueues the usage event; the recorder batches it into the database.
func (a *api) record(c *gin.Context, caller accounts.Caller, u usageOut, start time.Time) {
	ev := models.UsageEvent{
		RequestID: requestID(c), OrgID: caller.OrgID, TokenID: caller.TokenID, Model: local.ModelID,
		PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, Status: http.StatusOK,
		LatencyMs: int(a.now().Sub(start) / time.Millisecond), CreatedAt: start.UTC(),
	}
	if err := a.usage.Record(ev); err != nil {
		a.log.Error("usage event not recorded", "request_id", ev.RequestID, "err", err)
	}
}

// streamReply sends the reply as OpenAI's server-sent events: a role chunk,
// content chunks, a finish chunk, optionally a usage chunk, then [DONE].
func streamReply(c *gin.Context, id string, created int64, reply local.Reply, usage usageOut, includeUsage bool) {
	h := c.Writer.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	c.Status(http.StatusOK)
	send := func(ch chatResponse) {
		ch.ID, ch.Object, ch.Created, ch.Model = id, "chat.completion.chunk", created, local.ModelID
		b, _ := json.Marshal(ch)
		c.Writer.WriteString("data: ")
		c.Writer.Write(b)
		c.Writer.WriteString("\n\n")
		c.Writer.Flush()
	}
	send(chatResponse{Choices: []chatChoice{{Delta: &chatOut{Role: "assistant"}}}})
	for _, piece := range chunks(reply.Content, 8) {
		send(chatResponse{Choices: []chatChoice{{Delta: &chatOut{Content: piece}}}})
	}
	finish := reply.FinishReason
	send(chatResponse{Choices: []chatChoice{{Delta: &chatOut{}, FinishReason: &finish}}})
	if includeUsage {
		send(chatResponse{Choices: []chatChoice{}, Usage: &usage})
	}
	c.Writer.WriteString("data: [DONE]\n\n")
	c.Writer.Flush()
}

// chunks splits s into pieces of at most n runes.
func chunks(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		i, count := 0, 0
		for i < len(s) && count < n {
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
			count++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}

type modelOut struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// listModels answers GET /v1/models with the models the caller may use.
func (a *api) listModels(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"object": "list", "data": []modelOut{
		{ID: local.ModelID, Object: "model", Created: 1767225600, OwnedBy: "sluice"},
	}})
}
