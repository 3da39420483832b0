package handlers

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/dialect/messages"
	"github.com/sluicehq/sluice/wire"
)

// errorBody is the management API's error shape.
type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// publicError returns what may be shown of err (see apperr.Publish), sets
// its Retry-After headers, and notes its code for the access log.
func publicError(c *gin.Context, log *slog.Logger, err error) apperr.Reply {
	r := apperr.Publish(log, apperr.Request{Method: c.Request.Method, Route: c.FullPath(), ID: requestID(c)}, err)
	r.SetRetryAfter(c.Writer.Header())
	c.Set(errorCodeKey, r.Code)
	return r
}

// writeAPIError answers a management API request with err.
func writeAPIError(c *gin.Context, log *slog.Logger, err error) {
	r := publicError(c, log, err)
	var body errorBody
	body.Error.Code, body.Error.Message = r.Code, r.Message
	c.AbortWithStatusJSON(r.Status, body)
}

// writeOpenAIError answers a /v1 request with err in OpenAI's shape.
func writeOpenAIError(c *gin.Context, log *slog.Logger, err error) {
	r := publicError(c, log, err)
	e := r.Err
	var body wire.OpenAIError
	body.Error.Message, body.Error.Code = r.Message, r.Code
	body.Error.Type = openAIErrorType(r.Status)
	if e.Code == apperr.NoCredit {
		// OpenAI's own shape for a spent quota; the SDKs do not retry it,
		// and x-should-retry says so to any client that reads it.
		body.Error.Type = "insufficient_quota"
		c.Header("x-should-retry", "false")
	}
	if e.Param != "" {
		p := e.Param
		body.Error.Param = &p
	}
	c.AbortWithStatusJSON(r.Status, body)
}

func openAIErrorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_exceeded"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

// writeAnthropicError answers a Messages request with err in Anthropic's
// shape, {"type":"error","error":{"type","message"},"request_id"}, with
// the status Anthropic would use: 529 overloaded_error for Sluice's 503,
// 402 billing_error for spent credit (Anthropic's SDKs retry neither, and
// x-should-retry says so), the rest as apperr maps them; retry-after and
// the rate-limit headers (in Anthropic's names, resets as times from now)
// as on any answer.
func writeAnthropicError(c *gin.Context, log *slog.Logger, err error, now time.Time) {
	r := publicError(c, log, err)
	status := messages.Status(r.Status)
	if r.Err.Code == apperr.NoCredit {
		status = http.StatusPaymentRequired
		c.Header("x-should-retry", "false")
	}
	h := c.Writer.Header()
	messages.RateLimitHeaders(h, now)
	h.Set("request-id", r.RequestID)
	c.Abort()
	c.Data(status, "application/json", messages.ErrorBody(messages.ErrorType(status), r.Message, r.RequestID))
}
