package apperr

import (
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Reply is what a client is told of an error, whatever the dialect or page
// that tells it: the one mapping from an error to what may be shown.
type Reply struct {
	Err     *Error
	Status  int
	Code    string // the reason when there is one, else the code
	Message string // safe to show: an internal error's is replaced
	// RequestID is the request's id, quoted in an internal error's message
	// so a report can be matched to the log line.
	RequestID string
}

// Request is what a reply logs of the request that failed.
type Request struct {
	Method, Route, ID string
}

// Publish returns what may be shown of err. Only internal errors hide their
// message: they are logged here, once, with their cause, which never reaches
// the client. Every other error was written for the client (a 503 says what
// is unavailable); a server-side one that carries a cause (the database
// unreachable) is logged here once with it, and one without was logged
// where it happened.
func Publish(log *slog.Logger, req Request, err error) Reply {
	e := As(err)
	r := Reply{Err: e, Status: Status(e.Code), Code: string(e.Code), Message: e.Message, RequestID: req.ID}
	if e.Reason != "" {
		r.Code = e.Reason
	}
	switch {
	case e.Code == Internal:
		log.Error("request failed", "request_id", req.ID, "method", req.Method, "path", req.Route, "err", err)
		r.Message = "internal error; quote request id " + req.ID + " when reporting it"
	case r.Status >= 500 && e.Cause != nil:
		log.Warn("request failed", "request_id", req.ID, "method", req.Method, "path", req.Route, "code", r.Code, "err", err)
	}
	return r
}

// SetRetryAfter writes the error's Retry-After, if it has one: whole seconds
// rounded up, as HTTP wants, and retry-after-ms, which OpenAI's SDKs prefer.
func (r Reply) SetRetryAfter(h http.Header) {
	if r.Err.RetryAfter <= 0 {
		return
	}
	SetRetryAfter(h, r.Err.RetryAfter)
}

// SetRetryAfter writes wait as Retry-After and retry-after-ms.
func SetRetryAfter(h http.Header, wait time.Duration) {
	wait = max(wait, time.Millisecond)
	h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10))
	h.Set("retry-after-ms", strconv.FormatInt(int64(math.Ceil(float64(wait)/float64(time.Millisecond))), 10))
}
