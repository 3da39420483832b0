// Package upstream sends generation requests to the operator's providers:
// any OpenAI-compatible base URL, through a pool of provider keys that Sluice
// paces with per-key buckets (so providers never see a burst they would
// refuse), retries only what is worth retrying, and stops using a key whose
// breaker is open. The built-in local model lives in upstream/local.
package upstream

import (
	"errors"
	"net/http"
	"time"
)

// Key is one provider key as the pool uses it. Secret is the decrypted API
// key: it is sent to the provider and never logged or returned.
type Key struct {
	ID       int64
	Name     string
	Provider string // the kind of provider (KindOpenAI, KindAnthropic, …); "" is OpenAI's
	BaseURL  string // the provider's API root, e.g. "https://api.openai.com/v1"; a path prefix is kept
	Secret   string
	Weight   int      // share of traffic among healthy keys, >= 1
	RPM      int64    // provider's requests per minute for this key; 0 = unknown (not paced)
	TPM      int64    // provider's tokens per minute; 0 = unknown
	Models   []string // models this key serves; empty = any model
}

// KeyState is a key's health as admins see it.
type KeyState string

// The states of a key.
const (
	Healthy  KeyState = "healthy"  // in rotation
	Cooling  KeyState = "cooling"  // its buckets are empty for now; back in rotation when they refill
	Open     KeyState = "open"     // breaker open after failures; one probe after the cool-down
	Disabled KeyState = "disabled" // the provider refused the key (401/403): an admin must act
)

// KeyStatus is a key's state for the admin pages.
type KeyStatus struct {
	ID         int64
	Name       string
	State      KeyState
	Reason     string    // why it is open or disabled
	Until      time.Time // end of the cool-down while open
	Requests   int64     // sent through this key since start
	Failures   int64     // of which failed
	LastStatus int       // last HTTP status from the provider, 0 for none
	RPM        int64     // the key's configured requests per minute, for the load signal
	Models     []string  // models the key serves; empty = any (shared, read-only)

	// RequestLimits and TokenLimits are the key's limits as this node has
	// learned them from the provider's x-ratelimit-* headers, and how it
	// paces the key now. Each node learns from its own answers.
	RequestLimits, TokenLimits Limits
}

// Limits is one dimension (requests or tokens) of a key's rate limits.
type Limits struct {
	// PerMinute is the rate the key is paced to: the lower of the
	// configured limit and the provider's; 0 = not paced.
	PerMinute int64
	// Burst is the pacing bucket's capacity now: the provider's burst less
	// a little slack (one second's worth when the provider never said),
	// halved on a 429 and grown back slowly. Before the provider's first
	// answer the requests burst is 1.
	Burst int64
	// What the provider said in its last answer carrying the headers; all
	// zero when it never sent them.
	Limit         int64     // x-ratelimit-limit-*, per minute
	Remaining     int64     // x-ratelimit-remaining-*
	Reset         time.Time // when the provider's window is full again (x-ratelimit-reset-*)
	ProviderBurst int64     // the provider's real burst, estimated: remaining + reset × limit/60
	Seen          time.Time // when that answer arrived
	// Shrinks counts the 429s that halved Burst.
	Shrinks int64
}

// Request is one chat completion (or embeddings request) to send
// upstream, in OpenAI's wire format.
type Request struct {
	Endpoint string // ChatCompletions ("" too) or Embeddings
	Model    string
	Body     []byte // the JSON body to send, as the client wrote it (history prepended for sessions)
	Stream   bool
	Estimate int64  // tokens the request may use (prompt + max_tokens), for the keys' TPM buckets
	ID       string // the gateway's request id, for logs
	// Budget is the request's time with the providers when it is asked of
	// more than one model (an alias's fallbacks), shared by their Do
	// calls; nil: PoolOptions.Budget from this Do's start.
	Budget *Budget
	// Native is the client's own body when it spoke a provider's dialect
	// and nothing of the gateway's changed it but the model: a key of
	// that provider is sent it instead of Body's translation, and its
	// answer is left in that dialect (Response.Native). Other keys send
	// Body.
	Native *Native
}

// Native is a request body in a provider's own dialect.
type Native struct {
	Kind  string   // the provider kind whose dialect Body is: KindAnthropic
	Body  []byte   // with the model Request.Model
	Betas []string // Anthropic: the client's anthropic-beta values
}

// nativeFor says whether a key of kind is sent r's Native body.
func (r Request) nativeFor(kind string) bool {
	return r.Native != nil && r.Native.Kind == kind
}

// endpoint is the request's path under an OpenAI API root.
func (r Request) endpoint() string {
	if r.Endpoint == "" {
		return ChatCompletions
	}
	return r.Endpoint
}

// Budget is one request's time with the providers across Do calls: the
// first call's start plus PoolOptions.Budget, on the pool's clock, so an
// alias's next model is asked within what its first left and the budget
// bounds the request, not each model. The zero value is ready; one Budget
// serves one request's calls, made in turn.
type Budget struct{ deadline time.Time }

// from is the deadline of a Do call that starts at start.
func (b *Budget) from(start time.Time, budget time.Duration) time.Time {
	if b == nil {
		return start.Add(budget)
	}
	if b.deadline.IsZero() {
		b.deadline = start.Add(budget)
	}
	return b.deadline
}

// Response is the provider's answer, in OpenAI's wire format whatever the
// provider's own (but for a Native answer). For a stream, Body is the live SSE body
// and must be closed; otherwise Body holds the whole JSON body, already read.
type Response struct {
	Status   int
	Header   http.Header
	Body     []byte        // non-streaming: the whole body
	Stream   StreamBody    // streaming: the body, read as it arrives
	KeyID    int64         // the key that answered
	Attempts int           // 1 + retries
	Latency  time.Duration // time to the response headers of the successful attempt
	// Native says Body or Stream is a 2xx answer to the Request's Native
	// body, in the provider's own dialect and not OpenAI's; ReadNative
	// reads a whole one.
	Native bool
	format nativeFormat // the answering key's, for ReadNative
}

// ReadNative reads a whole Native answer's reply and usage, exactly as
// the same answer translated would be read (ReadCompletion). It is left to
// the caller, as ReadCompletion is, so that the answer can be on its way to
// the client first; an error is an answer that is not the provider's
// message, billed as one that reports no usage.
func (r *Response) ReadNative() (Completion, error) {
	if !r.Native || r.format == nil || r.Stream != nil {
		return Completion{}, errors.New("upstream: not a whole native answer")
	}
	return r.format.readNative(r.Body)
}

// StreamBody is a streaming response body.
type StreamBody interface {
	Read(p []byte) (int, error)
	Close() error
}

// Errors the gateway maps to its answers.
var (
	// ErrNoKey: no configured key serves the model.
	ErrNoKey = errors.New("upstream: no provider key serves this model")
	// ErrUnavailable: every key for the model is open, disabled or
	// exhausted, or the retry budget ran out; the gateway falls back to the
	// local model or answers 503, as the tier says.
	ErrUnavailable = errors.New("upstream: every provider key for this model is unavailable")
)
