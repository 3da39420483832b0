package handlers

import (
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
)

// errorBody is the management API's error shape.
type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// openAIErrorBody is OpenAI's error shape, which the /v1 API speaks so SDKs
// understand our failures as they understand OpenAI's.
type openAIErrorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

// publicError returns what may be shown of err. Only internal errors hide
// their message: they are logged here, once, with their cause, which never
// reaches the client. Every other error was written for the client (a 503
// says what is unavailable); a server-side one that carries a cause (the
// database unreachable) is logged here once with it, and one without was
// logged where it happened. A Retry-After hint becomes the Retry-After
// headers.
func publicError(c *gin.Context, log *slog.Logger, err error) (e *apperr.Error, status int, code, message string) {
	e = apperr.As(err)
	status = apperr.Status(e.Code)
	code = string(e.Code)
	if e.Reason != "" {
		code = e.Reason
	}
	message = e.Message
	switch {
	case e.Code == apperr.Internal:
		rid := requestID(c)
		log.Error("request failed", "request_id", rid, "method", c.Request.Method, "path", c.FullPath(), "err", err)
		message = "internal error; quote request id " + rid + " when reporting it"
	case status >= 500 && e.Cause != nil:
		log.Warn("request failed", "request_id", requestID(c), "method", c.Request.Method, "path", c.FullPath(), "code", code, "err", err)
	}
	if e.RetryAfter > 0 {
		setRetryAfter(c, e.RetryAfter)
	}
	c.Set(errorCodeKey, code)
	return e, status, code, message
}

// writeAPIError answers a management API request with err.
func writeAPIError(c *gin.Context, log *slog.Logger, err error) {
	_, status, code, message := publicError(c, log, err)
	var body errorBody
	body.Error.Code, body.Error.Message = code, message
	c.AbortWithStatusJSON(status, body)
}

// writeOpenAIError answers a /v1 request with err in OpenAI's shape.
func writeOpenAIError(c *gin.Context, log *slog.Logger, err error) {
	e, status, code, message := publicError(c, log, err)
	var body openAIErrorBody
	body.Error.Message, body.Error.Code = message, code
	body.Error.Type = openAIErrorType(status)
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
	c.AbortWithStatusJSON(status, body)
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

// setRetryAfter writes Retry-After (whole seconds, rounded up, as HTTP
// wants) and retry-after-ms (what OpenAI's SDKs prefer).
func setRetryAfter(c *gin.Context, wait time.Duration) {
	wait = max(wait, time.Millisecond)
	h := c.Writer.Header()
	h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10))
	h.Set("retry-after-ms", strconv.FormatInt(int64(math.Ceil(float64(wait)/float64(time.Millisecond))), 10))
}
