package handlers

import (
	"bytes"
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

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/respcache"
	"github.com/sluicehq/sluice/sessions"
	"github.com/sluicehq/sluice/upstream"
	"github.com/sluicehq/sluice/upstream/local"
)

// UsageRecorder takes usage events off the request path.
type UsageRecorder interface {
	Record(ev models.UsageEvent) error
	// Touch marks a token used by a request that is not metered.
	Touch(tokenID int64, at time.Time) error
}

// Upstream is the pool of provider keys.
type Upstream interface {
	Serves(model string) bool
	Models() []string
	Do(ctx context.Context, req upstream.Request) (*upstream.Response, error)
	// Settle corrects a key's token bucket once the real usage is known.
	Settle(ctx context.Context, keyID, estimate, actual int64) error
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
	upstream         Upstream
	cache            respcache.Cache // nil: no response cache
	cacheTTL         time.Duration
	sessions         sessions.Store // nil: no session namespaces
	sessionBudget    int
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

// maxCompletionTokens bounds max_tokens far above any model's output, so
// estimates (prompt + max_tokens) cannot overflow.
const maxCompletionTokens = 10_000_000

// chatRequest is the part of OpenAI's chat request Sluice reads; unknown
// fields are accepted, as OpenAI's SDKs send many.
type chatRequest struct {
	Model               string        `json:"model"`
	Messages            []chatMessage `json:"messages"`
	MaxTokens           *int          `json:"max_tokens"`
	MaxCompletionTokens *int          `json:"max_completion_tokens"`
	N                   *int          `json:"n"`
	Temperature         *float64      `json:"temperature"`
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
// It also returns the raw body, which is what goes upstream.
func (a *api) readChatRequest(c *gin.Context) (chatRequest, []local.Message, []byte, error) {
	var req chatRequest
	mt, _, err := mime.ParseMediaType(c.GetHeader("Content-Type"))
	if err != nil || mt != "application/json" {
		return req, nil, nil, apperr.Field(apperr.Invalid, "invalid_content_type", "", "Content-Type must be application/json")
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, a.maxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return req, nil, nil, apperr.Field(apperr.TooLarge, "request_too_large", "", "request body is larger than "+strconv.FormatInt(a.maxBodyBytes, 10)+" bytes")
		}
		return req, nil, nil, apperr.Field(apperr.Invalid, "invalid_body", "", "the request body could not be read")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		return req, nil, nil, apperr.Field(apperr.Invalid, "invalid_json", "", "request body is not valid JSON: "+jsonProblem(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, nil, nil, apperr.Field(apperr.Invalid, "invalid_json", "", "request body must be one JSON object")
	}
	isLocal := req.Model == local.ModelID
	switch {
	case req.Model == "":
		return req, nil, nil, apperr.Field(apperr.Invalid, "missing_model", "model", "you must provide a model parameter")
	case !isLocal && (a.upstream == nil || !a.upstream.Serves(req.Model)):
		return req, nil, nil, apperr.Field(apperr.NotFound, "model_not_found", "model", "the model '"+req.Model+"' does not exist or you do not have access to it; GET /v1/models lists yours")
	case len(req.Messages) == 0:
		return req, nil, nil, apperr.Field(apperr.Invalid, "invalid_messages", "messages", "messages must be a non-empty array")
	case req.N != nil && *req.N != 1:
		return req, nil, nil, apperr.Field(apperr.Invalid, "unsupported_n", "n", "only n=1 is supported")
	}
	if req.MaxCompletionTokens == nil {
		req.MaxCompletionTokens = req.MaxTokens
	}
	if m := req.MaxCompletionTokens; m != nil && (*m < 1 || *m > maxCompletionTokens) {
		return req, nil, nil, apperr.Field(apperr.Invalid, "invalid_max_tokens", "max_tokens", "max_tokens must be from 1 to 10000000")
	}
	msgs := make([]local.Message, len(req.Messages))
	for i, m := range req.Messages {
		param := "messages[" + strconv.Itoa(i) + "]"
		switch m.Role {
		case "system", "developer", "user", "assistant", "tool":
		default:
			return req, nil, nil, apperr.Field(apperr.Invalid, "invalid_role", param+".role", "role must be one of system, developer, user, assistant, tool")
		}
		text, err := contentText(m.Content, isLocal)
		if err != nil {
			return req, nil, nil, apperr.Field(apperr.Invalid, "invalid_content", param+".content", err.Error())
		}
		msgs[i] = local.Message{Role: m.Role, Content: text}
	}
	return req, msgs, body, nil
}

// contentText accepts OpenAI's two content forms: a string, or an array of
// parts. The local model reads only text parts; for a provider, other parts
// (images, audio) travel on untouched and only the text counts toward the
// estimate.
func contentText(raw json.RawMessage, textOnly bool) (string, error) {
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
			if !textOnly {
				continue
			}
			return "", errors.New("content part type '" + p.Type + "' is not supported by " + local.ModelID + "; send text parts")
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

type modelOut struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// listModels answers GET /v1/models with the models the caller may use:
// the local model and every model a provider key serves.
func (a *api) listModels(c *gin.Context) {
	models := []modelOut{{ID: local.ModelID, Object: "model", Created: 1767225600, OwnedBy: "sluice"}}
	if a.upstream != nil {
		for _, m := range a.upstream.Models() {
			if m != "*" && m != local.ModelID {
				models = append(models, modelOut{ID: m, Object: "model", Created: 1767225600, OwnedBy: "upstream"})
			}
		}
	}
	c.JSON(http.StatusOK, gin.H{"object": "list", "data": models})
}
