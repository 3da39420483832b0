// Package mock is an OpenAI-compatible upstream for tests and benchmarks. It
// answers chat completions (plain and streamed), embeddings and the model
// list under any base path, limits each API key with its own token bucket and answers 429
// with the headers real providers send, and can add latency, jitter and
// random failures, so Sluice's pacing, retries and overhead can be measured
// without a real provider.
//
// Routes (matched by suffix, so "http://host/v1" and "http://host/x/y/v1"
// both work as base URLs):
//
//	POST .../chat/completions  chat completion; stream:true answers SSE
//	POST .../openai/deployments/{deployment}/chat/completions?api-version=...
//	                           the same as Azure OpenAI serves it: the key in
//	                           api-key, the api-version required (see authorize)
//	POST .../v1beta/models/{model}:generateContent, :streamGenerateContent?alt=sse, :batchEmbedContents
//	                           Gemini's API, key in x-goog-api-key (see gemini.go)
//	POST .../messages          Anthropic's Messages API (see anthropic.go), x-api-key auth
//	POST .../embeddings        embeddings, floats or base64, with usage
//	GET  .../models            the model list
//	GET  .../_stats            Stats as JSON (no auth), for load harnesses
//
// Test hooks, set as request headers on a chat completion (after auth, before
// the bucket, so they neither need nor use a token):
//
//	X-Mock-Status: 503            answer that status (400-599) at once with an OpenAI error body
//	X-Mock-Retry-After: 3600      with a forced 429, also send "Retry-After: 3600"
//	X-Mock-Stall: after-first-chunk
//	                              write the first chunk (for a non-stream request: the
//	                              status and headers), then block until the client goes away
//	X-Mock-Answer-Tokens: 20000   the answer runs this long unless the request bounds it
//	X-Mock-Usage-Delay: 2s        a stream's usage chunk comes this long after its last word
//
// Usage is billed as a provider bills it (see bill.go): prompt tokens
// from the whole body with a real tokenizer, an answer cut at the
// request's max_completion_tokens or max_tokens.
package mock

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/wire"
)

// Config sets what the mock accepts and how it behaves. The zero value of
// each field is a working default: no latency, no failures, 4 stream chunks.
type Config struct {
	// Keys maps each accepted API key to the requests per second it may make.
	// Each key has a token bucket holding max(1, rps) requests (Burst, when
	// set) that refills at rps per second; rps <= 0 (or +Inf) means the key
	// is not limited.
	Keys map[string]float64
	// Burst, when > 0, is how many requests each limited key's bucket
	// holds, instead of max(1, rps). It makes a provider that states its
	// limit per minute (x-ratelimit-limit-requests is 60·rps) but enforces
	// it over a window of Burst/rps seconds, as some providers do: with
	// rps 25 and Burst 5, 1,500 RPM that refuses the sixth request of any
	// 200 ms. The x-ratelimit-remaining-requests and -reset-requests headers
	// describe this short-window bucket truthfully.
	Burst int
	// OmitLimitHeaders stops the x-ratelimit-* headers: a 429 then carries
	// only Retry-After and retry-after-ms, like a provider that does not
	// say what its limits are.
	OmitLimitHeaders bool
	// Latency is added before every admitted answer, plus or minus a
	// uniformly drawn Jitter (never below zero).
	Latency, Jitter time.Duration
	// FailureRate is the fraction of admitted requests answered 500.
	FailureRate float64
	// Seed makes jitter and failures repeatable.
	Seed int64
	// StreamChunks is how many content deltas a streamed answer has (4 when <= 0).
	StreamChunks int
	// ChunkDelay is the pause between two content deltas.
	ChunkDelay time.Duration
	// Models is what GET .../models lists (default "gpt-4o-mini",
	// "mock-model"). Chat completions accept any model and echo it.
	Models []string
	// Now is the clock of the buckets and of "created"; time.Now when nil.
	Now func() time.Time
	// Billing is how usage is counted: BillTokens (the default) as a
	// provider bills, with a real tokenizer over the whole body; BillWords
	// by words, at no cost, for load runs.
	Billing string
	// AnswerTokens is how long an answer runs when the request sets no
	// bound (X-Mock-Answer-Tokens per request); 0: a one-line answer.
	AnswerTokens int
	// UsageDelay is how long a stream's usage chunk comes after its last
	// word (X-Mock-Usage-Delay per request).
	UsageDelay time.Duration
}

// Server is the mock upstream, an http.Handler. It is safe for concurrent use.
type Server struct {
	cfg    Config
	now    func() time.Time
	keys   map[string]*keyState // fixed at New, read-only after
	total  counters
	ids    atomic.Uint64
	chunks int
	bill   *biller

	rngMu sync.Mutex
	rng   *rand.Rand

	cacheMu sync.Mutex
	cached  map[string]bool // prompt prefixes in the Anthropic speaker's prompt cache
}

// keyState is one API key's bucket and counters.
type keyState struct {
	bucket *bucket // nil when the key is not limited
	counts counters
}

// counters are the live form of Counts.
type counters struct {
	requests, ok, status429, status5xx atomic.Int64
}

func (c *counters) snapshot() Counts {
	return Counts{Requests: c.requests.Load(), OK: c.ok.Load(), Status429: c.status429.Load(), Status5xx: c.status5xx.Load()}
}

// Counts are what the mock answered to chat completion and embeddings
// requests.
type Counts struct {
	Requests  int64 `json:"requests"`   // chat completion and embeddings requests received
	OK        int64 `json:"ok"`         // answered 2xx
	Status429 int64 `json:"status_429"` // answered 429, by the bucket or a hook
	Status5xx int64 `json:"status_5xx"` // answered 5xx, by FailureRate or a hook
}

// Stats are the counts since New, in total and per configured key. Total
// also counts requests with a missing or unknown key (answered 401), which
// belong to no key.
type Stats struct {
	Total Counts            `json:"total"`
	Keys  map[string]Counts `json:"keys"`
}

// New returns a mock upstream configured by cfg.
func New(cfg Config) *Server {
	s := &Server{
		cfg:    cfg,
		now:    cfg.Now,
		keys:   make(map[string]*keyState, len(cfg.Keys)),
		chunks: cfg.StreamChunks,
		bill:   newBiller(cfg.Billing),
		rng:    rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5eed)),
		cached: map[string]bool{},
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.chunks <= 0 {
		s.chunks = 4
	}
	if len(s.cfg.Models) == 0 {
		s.cfg.Models = []string{"gpt-4o-mini", "mock-model"}
	}
	for key, rps := range cfg.Keys {
		ks := &keyState{}
		if rps > 0 && !math.IsInf(rps, 1) {
			ks.bucket = newBucket(rps, cfg.Burst)
		}
		s.keys[key] = ks
	}
	return s
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	st := Stats{Total: s.total.snapshot(), Keys: make(map[string]Counts, len(s.keys))}
	for key, ks := range s.keys {
		st.Keys[key] = ks.counts.snapshot()
	}
	return st
}

// ServeHTTP routes by path suffix; see the package comment.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case strings.Contains(path, "/v1beta/") && (strings.HasSuffix(path, ":generateContent") || strings.HasSuffix(path, ":streamGenerateContent") ||
		strings.HasSuffix(path, ":batchEmbedContents")):
		s.gemini(w, r, path)
	case strings.HasSuffix(path, "/chat/completions"):
		s.chat(w, r)
	case strings.HasSuffix(path, "/messages"):
		s.anthropic(w, r)
	case strings.HasSuffix(path, "/embeddings"):
		s.embeddings(w, r)
	case strings.HasSuffix(path, "/models"):
		s.models(w, r)
	case strings.HasSuffix(path, "/_stats"):
		s.stats(w, r)
	default:
		writeError(w, http.StatusNotFound, "unknown path "+r.URL.Path)
	}
}

// authorize returns the caller's key state, or answers 401 and returns nil.
// Under an Azure OpenAI deployment's path the key comes in api-key, not
// Authorization, and a request without its api-version is 404 "Resource
// not found", as Azure answers both.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) *keyState {
	if strings.Contains(r.URL.Path, "/openai/deployments/") {
		if r.URL.Query().Get("api-version") == "" {
			writeError(w, http.StatusNotFound, "Resource not found")
			return nil
		}
		if ks := s.keys[r.Header.Get("api-key")]; ks != nil {
			return ks
		}
		writeError(w, http.StatusUnauthorized, "Access denied due to invalid subscription key or wrong API endpoint. "+
			"Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.")
		return nil
	}
	auth := r.Header.Get("Authorization")
	key, ok := strings.CutPrefix(auth, "Bearer ")
	if ks := s.keys[strings.TrimSpace(key)]; ok && ks != nil {
		return ks
	}
	if auth == "" {
		writeError(w, http.StatusUnauthorized, "You didn't provide an API key.")
	} else {
		writeError(w, http.StatusUnauthorized, "Incorrect API key provided.")
	}
	return nil
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeError(w, http.StatusMethodNotAllowed, "use GET for "+r.URL.Path)
		return
	}
	if s.authorize(w, r) == nil {
		return
	}
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	list := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list"}
	for _, id := range s.cfg.Models {
		list.Data = append(list.Data, model{ID: id, Object: "model", Created: 1700000000, OwnedBy: "mock"})
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeError(w, http.StatusMethodNotAllowed, "use GET for "+r.URL.Path)
		return
	}
	writeJSON(w, http.StatusOK, s.Stats())
}

// count records the status answered to a chat completion.
func (s *Server) count(ks *keyState, status int) {
	for _, c := range []*counters{&s.total, &ks.counts} {
		switch {
		case status >= 200 && status < 300:
			c.ok.Add(1)
		case status == http.StatusTooManyRequests:
			c.status429.Add(1)
		case status >= 500:
			c.status5xx.Add(1)
		}
	}
}

// forced answers the X-Mock-Status hook; it reports false when the request
// does not use it.
func (s *Server) forced(w http.ResponseWriter, r *http.Request, ks *keyState) bool {
	v := r.Header.Get("X-Mock-Status")
	if v == "" {
		return false
	}
	status, err := strconv.Atoi(v)
	if err != nil || status < 400 || status > 599 {
		writeError(w, http.StatusBadRequest, "X-Mock-Status must be a status from 400 to 599")
		return true
	}
	if ra := r.Header.Get("X-Mock-Retry-After"); ra != "" && status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", ra)
	}
	s.count(ks, status)
	writeError(w, status, "forced by X-Mock-Status")
	return true
}

// setLimitHeaders writes the x-ratelimit-*-requests headers of a take
// (unless omit), and Retry-After and retry-after-ms when it was refused.
func setLimitHeaders(h http.Header, d decision, omit bool) {
	if !omit {
		h.Set("x-ratelimit-limit-requests", strconv.FormatInt(d.limit, 10))
		h.Set("x-ratelimit-remaining-requests", strconv.FormatInt(d.remaining, 10))
		h.Set("x-ratelimit-reset-requests", formatReset(d.reset))
	}
	if !d.ok {
		h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(d.retryAfter.Seconds())), 10))
		h.Set("retry-after-ms", strconv.FormatInt(int64(ceilMs(d.retryAfter)/time.Millisecond), 10))
	}
}

// ceilMs rounds d up to a whole millisecond.
func ceilMs(d time.Duration) time.Duration {
	if r := d.Truncate(time.Millisecond); r < d {
		return r + time.Millisecond
	}
	return d
}

// formatReset writes a duration the way OpenAI's reset headers do ("1s",
// "6m0s", "250ms").
func formatReset(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return d.Round(time.Millisecond).String()
}

// delay draws the latency of one answer.
func (s *Server) delay() time.Duration {
	if s.cfg.Jitter <= 0 {
		return max(s.cfg.Latency, 0)
	}
	s.rngMu.Lock()
	f := s.rng.Float64()
	s.rngMu.Unlock()
	return max(s.cfg.Latency+time.Duration((2*f-1)*float64(s.cfg.Jitter)), 0)
}

// fail draws whether this answer is a failure.
func (s *Server) fail() bool {
	switch {
	case s.cfg.FailureRate <= 0:
		return false
	case s.cfg.FailureRate >= 1:
		return true
	}
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.Float64() < s.cfg.FailureRate
}

// writeError writes status with an OpenAI error body whose type and code
// follow the status: 401 invalid_api_key, 429 rate_limit_exceeded, other 4xx
// invalid_request_error, 5xx server_error; the code of the others is the
// status text in snake case ("service_unavailable").
func writeError(w http.ResponseWriter, status int, message string) {
	var e wire.OpenAIError
	e.Error.Message = message
	e.Error.Code = strings.ToLower(strings.ReplaceAll(http.StatusText(status), " ", "_"))
	e.Error.Type = "invalid_request_error"
	switch {
	case status == http.StatusUnauthorized:
		e.Error.Code = "invalid_api_key"
	case status == http.StatusTooManyRequests:
		e.Error.Type, e.Error.Code = "rate_limit_exceeded", "rate_limit_exceeded"
	case status >= 500:
		e.Error.Type = "server_error"
	}
	writeJSON(w, status, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
