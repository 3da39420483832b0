// Package apperr holds Sluice's one error type: a code that decides the HTTP
// status, a message that is safe to show, and the wrapped cause that is only
// ever logged. It imports nothing of ours so every package may use it.
package apperr

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Code classifies an error for callers and for the HTTP mapping.
type Code string

// The codes every layer speaks.
const (
	Invalid       Code = "invalid"            // malformed input: 400
	Unprocessable Code = "unprocessable"      // well-formed but unacceptable input: 422
	TooLarge      Code = "too_large"          // request body over the limit: 413
	Unauthorized  Code = "unauthorized"       // no or bad credentials: 401
	Forbidden     Code = "forbidden"          // authenticated but not allowed: 403
	NotFound      Code = "not_found"          // absent, or belongs to another tenant: 404
	NotAllowed    Code = "method_not_allowed" // the route exists, the method does not: 405
	Conflict      Code = "conflict"           // unique constraint and the like: 409
	RateLimited   Code = "rate_limited"       // over a limit: 429
	Frozen        Code = "frozen"             // token frozen for abuse: 429
	NoCredit      Code = "insufficient_quota" // budget or included credit spent; retrying will not help: 429
	Unavailable   Code = "unavailable"        // dependency down: 503
	BadUpstream   Code = "bad_upstream"       // a provider answered something unusable: 502
	Timeout       Code = "timeout"            // the providers did not answer in time: 504
	Internal      Code = "internal"           // a bug or an unexpected failure: 500
)

// Error is the one error type. Message is shown to users, except for
// Internal errors, whose message is generic; Cause is never shown.
type Error struct {
	Code    Code
	Reason  string // machine-readable detail, e.g. "invalid_api_key"; optional
	Param   string // the request field at fault, e.g. "messages"; optional
	Message string
	Cause   error
	// RetryAfter is how long the client should wait before trying again
	// (a limit, a freeze, an unavailable provider); 0 when waiting would
	// not help or is not known.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Cause)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Cause }

// New returns an error with a code and a user-safe message.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// WithReason returns an error with a code, a machine-readable reason and a message.
func WithReason(code Code, reason, message string) *Error {
	return &Error{Code: code, Reason: reason, Message: message}
}

// Field returns an error about one request field.
func Field(code Code, reason, param, message string) *Error {
	return &Error{Code: code, Reason: reason, Param: param, Message: message}
}

// Wrap marks cause as an internal failure; the message shown is generic and
// where says, for the logs, what was being done.
func Wrap(cause error, where string) *Error {
	return &Error{Code: Internal, Message: "internal error", Cause: fmt.Errorf("%s: %w", where, cause)}
}

// As returns err as *Error; anything else becomes an internal error.
func As(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: Internal, Message: "internal error", Cause: err}
}

// CodeOf returns the code of err, Internal for foreign errors and "" for nil.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	return As(err).Code
}

// Status maps a code to its HTTP status. It is the one mapping shared by the
// JSON API and the browser pages.
func Status(code Code) int {
	switch code {
	case Invalid:
		return http.StatusBadRequest
	case Unprocessable:
		return http.StatusUnprocessableEntity
	case TooLarge:
		return http.StatusRequestEntityTooLarge
	case Unauthorized:
		return http.StatusUnauthorized
	case Forbidden:
		return http.StatusForbidden
	case NotFound:
		return http.StatusNotFound
	case NotAllowed:
		return http.StatusMethodNotAllowed
	case Conflict:
		return http.StatusConflict
	case RateLimited, Frozen, NoCredit:
		return http.StatusTooManyRequests
	case Unavailable:
		return http.StatusServiceUnavailable
	case BadUpstream:
		return http.StatusBadGateway
	case Timeout:
		return http.StatusGatewayTimeout
	default:
		return http.StatusInternalServerError
	}
}
