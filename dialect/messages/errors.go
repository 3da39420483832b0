package messages

import (
	"encoding/json"
	"net/http"

	"github.com/sluicehq/sluice/wire"
)

// StatusOverloaded is Anthropic's status for an API too busy to answer,
// which its SDKs retry: what Sluice's 503 ("every provider unavailable")
// is in this dialect.
const StatusOverloaded = 529

// Status is the status a Sluice status is answered with in this dialect:
// 503 is Anthropic's 529; every other status is kept.
func Status(status int) int {
	if status == http.StatusServiceUnavailable {
		return StatusOverloaded
	}
	return status
}

// ErrorType is Anthropic's error type for a status of this dialect, as
// Anthropic's errors page lists them; other 4xx are invalid_request_error
// and other 5xx api_error, as Anthropic says it answers them.
func ErrorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case StatusOverloaded, http.StatusServiceUnavailable:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// ErrorBody is Anthropic's error body.
func ErrorBody(typ, message, requestID string) []byte {
	b, _ := marshalAnswer(wire.AnthropicError{Type: "error", Error: wire.AnthropicErrorDetail{Type: typ, Message: message},
		RequestID: requestID})
	return b
}

// FromChatError translates a provider's refusal, an OpenAI error body
// passed on with its status, into this dialect's status and body. A body
// that is not OpenAI's shape is described by its status.
func FromChatError(status int, body []byte, requestID string) (int, []byte) {
	var e wire.OpenAIError
	msg := ""
	if json.Unmarshal(body, &e) == nil {
		msg = e.Error.Message
	}
	if msg == "" {
		msg = "the provider answered " + http.StatusText(status)
	}
	status = Status(status)
	return status, ErrorBody(ErrorType(status), msg, requestID)
}
