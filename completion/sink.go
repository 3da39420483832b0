package completion

import (
	"errors"
	"net/http"
)

// ErrUnreadableAnswer is a NativeSink's word that a provider's answer was
// not what its dialect writes, and the client was answered with an error.
var ErrUnreadableAnswer = errors.New("completion: the provider's answer could not be read")

// Sink is where the pipeline writes an answer: headers first, then either
// one whole body or a stream. Over HTTP it is the response; for a queued
// job it keeps the answer to store.
type Sink interface {
	// Header is the answer's header map (rate limits, X-Cache, fallback
	// markers); changes after Send or StartStream are not seen.
	Header() http.Header
	// Send writes a whole answer.
	Send(status int, contentType string, body []byte) error
	// StartStream begins a server-sent event stream with status.
	StartStream(status int) error
	// Write sends stream bytes and flushes them to the client at once. An
	// error means the client is gone.
	Write(p []byte) (int, error)
}

// A NativeSink is a Sink that also writes a provider's own answer to a
// request's Native body: the answer as the provider wrote it but for its
// id and model, which the sink makes the gateway's.
type NativeSink interface {
	Sink
	// SendNative writes a whole answer; ErrUnreadableAnswer says it
	// could not be relabelled and the client was sent the dialect's error
	// instead.
	SendNative(status int, body []byte) error
	// StartNativeStream begins a stream whose Writes are the provider's
	// own events; the sink ends one cut short (no final event) with its
	// dialect's error.
	StartNativeStream(status int) error
}
