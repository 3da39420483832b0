package handlers

import (
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
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
