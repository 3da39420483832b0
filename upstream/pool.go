package upstream

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/quota"
)

// Defaults for PoolOptions and BreakerOptions.
const (
	DefaultAttemptTimeout = 8 * time.Second
	DefaultAnswerTimeout  = 10 * time.Minute
	DefaultBudget         = 30 * time.Second
	DefaultMaxBackoff     = 8 * time.Second
	DefaultBaseBackoff    = 250 * time.Millisecond
	DefaultStallTimeout   = 8 * time.Second
	DefaultMaxAttempts    = 10
	DefaultSlowFailure    = 5 * time.Second
	DefaultSlowFailures   = 3

	DefaultBreakerFailures   = 5
	DefaultBreakerWindow     = 20
	DefaultBreakerMinSamples = 10
	DefaultBreakerErrorRate  = 0.5
	DefaultBreakerCoolDown   = 30 * time.Second
)

// MaxResponseBytes bounds a non-streaming response body read into memory.
const MaxResponseBytes = 16 << 20

// PoolOptions configure NewPool. The zero value is usable: zero fields take
// the defaults above.
type PoolOptions struct {
	// Limiter holds the keys' pacing buckets ("upkey:<id>" and
	// "upkey:<id>|tpm"). Pass the shared (Redis) limiter so that every
	// gateway instance paces a key together; nil means an in-process
	// quota.NewMemory on Now.
	Limiter quota.Limiter
	// Client sends the requests. It must not set Timeout (streams outlive
	// any fixed timeout; the pool bounds attempts with contexts). nil means
	// a client that does not follow redirects.
	Client *http.Client

	// AttemptTimeout bounds one attempt of a stream until its response
	// headers (StallTimeout then watches the body), and one of a whole
	// answer until its request is written: a key that does not connect
	// or take the request is given up, and another tried.
	AttemptTimeout time.Duration
	// AnswerTimeout bounds a whole (non-streamed) answer's attempt once
	// its request is written. The provider writes nothing until it has
	// generated all of it, so this is how long an answer may take to
	// generate, not a sign of a provider that hangs: cut short, the answer
	// would be billed by the provider and lost (OpenAI's SDKs wait 10
	// minutes).
	AnswerTimeout time.Duration
	// Budget bounds one Do call before a response is returned: attempts,
	// backoffs and pacing waits together. No attempt starts after it; one
	// started runs to its own timeout. A stream's body is not counted.
	Budget time.Duration
	// MaxBackoff caps one backoff and the provider's Retry-After, so a
	// Retry-After: 3600 rests a key for MaxBackoff, not an hour.
	MaxBackoff time.Duration
	// BaseBackoff is the first retry's backoff ceiling; it doubles per retry.
	BaseBackoff time.Duration
	// MaxAttempts bounds attempts per Do call, on top of Budget, so a
	// provider failing instantly is not hammered for the whole budget.
	MaxAttempts int
	// StallTimeout ends a stream whose provider sends no byte for this long:
	// the stream's Read returns ErrStalled.
	StallTimeout time.Duration

	// Breaker shapes each key's circuit breaker.
	Breaker BreakerOptions

	// SlowFailure and SlowFailures are the degradation rule: SlowFailures
	// consecutive 5xx answers (or timeouts) for a model, each slower than
	// SlowFailure, mark the model degraded for Breaker.CoolDown, during
	// which Do returns ErrUnavailable at once so the gateway answers from
	// sluice-local. SlowFailures < 0 turns the rule off.
	SlowFailure  time.Duration
	SlowFailures int

	// Now is the clock for budgets, cool-downs and the breaker; nil means
	// time.Now. Attempt and stall timeouts are real timers regardless.
	Now func() time.Time
	// Sleep waits d or until ctx ends, returning ctx's error then; nil
	// means a real timer. Tests inject it so backoffs take no time.
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand returns a float in [0, 1) for jitter and weighted choice; nil
	// means math/rand/v2. It must be safe for concurrent use.
	Rand func() float64
	// Log gets one Info line per retry and one Warn line per key disabled,
	// breaker opened or model degraded; nil discards them. Secrets are never
	// logged.
	Log *slog.Logger
}

// BreakerOptions shape a key's circuit breaker. Zero fields take the
// defaults: 5 consecutive failures, or at least 50% failures over the last
// 20 outcomes once there are 10, open the breaker for 30 s; then one probe
// request decides whether it closes or stays open for another cool-down.
type BreakerOptions struct {
	Failures   int           // consecutive failures that open the breaker
	Window     int           // recent outcomes kept for the error rate
	MinSamples int           // outcomes needed before the error rate counts
	ErrorRate  float64       // failure share over the window that opens it
	CoolDown   time.Duration // how long an open breaker rests before one probe
}

func (o BreakerOptions) withDefaults() BreakerOptions {
	if o.Failures <= 0 {
		o.Failures = DefaultBreakerFailures
	}
	if o.Window <= 0 {
		o.Window = DefaultBreakerWindow
	}
	if o.MinSamples <= 0 {
		o.MinSamples = DefaultBreakerMinSamples
	}
	o.MinSamples = min(o.MinSamples, o.Window)
	if !(o.ErrorRate > 0) {
		o.ErrorRate = DefaultBreakerErrorRate
	}
	if o.CoolDown <= 0 {
		o.CoolDown = DefaultBreakerCoolDown
	}
	return o
}

func (o PoolOptions) withDefaults() PoolOptions {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Limiter == nil {
		o.Limiter = quota.NewMemory(o.Now)
	}
	if o.Client == nil {
		o.Client = defaultClient()
	}
	setDefault(&o.AttemptTimeout, DefaultAttemptTimeout)
	setDefault(&o.AnswerTimeout, DefaultAnswerTimeout)
	setDefault(&o.Budget, DefaultBudget)
	setDefault(&o.MaxBackoff, DefaultMaxBackoff)
	setDefault(&o.BaseBackoff, DefaultBaseBackoff)
	setDefault(&o.StallTimeout, DefaultStallTimeout)
	setDefault(&o.SlowFailure, DefaultSlowFailure)
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.SlowFailures == 0 {
		o.SlowFailures = DefaultSlowFailures
	}
	o.Breaker = o.Breaker.withDefaults()
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

func setDefault(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

// defaultClient keeps connections to providers warm and never follows a
// redirect: a redirected POST would lose its body, so a 3xx is a failure of
// the key's configuration.
func defaultClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return &http.Client{
		Transport:     t,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// sleep waits d on a real timer, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Pool sends chat completions through the operator's provider keys: it paces
// each key with its own buckets, picks among the healthy ones by weight and
// load, retries what is worth retrying on another key, and keeps a breaker
// per key. It is safe for concurrent use; Do takes no pool-wide lock.
type Pool struct {
	opts         PoolOptions
	keys         atomic.Pointer[keySet]
	setMu        sync.Mutex // serialises SetKeys
	models       degradation
	retries      atomic.Int64
	rateLimited  atomic.Int64
	pacingErrors atomic.Int64
	refusals     chan Refusal
	settlements  settlements
}

// Refusal is a key a provider refused (401/403). The pool has stopped
// using it; whoever stores the keys should disable it for good.
type Refusal struct {
	KeyID  int64
	Reason string
}

// refusalBuffer is how many refusals wait for a reader. A key is refused
// once (the pool stops using it), so this is far more than needed.
const refusalBuffer = 64

// keySet is one immutable generation of the configured keys.
type keySet struct {
	entries []*keyEntry
}

// keyEntry is a key as configured, plus its health, which survives SetKeys
// while the key's ID, secret and base URL stay the same.
type keyEntry struct {
	key    Key
	format wireFormat // how the key's provider is spoken to
	base   *url.URL   // the parsed BaseURL; nil if it is unusable
	weight int64
	reqKey string // limiter key of the requests bucket
	tpmKey string // limiter key of the tokens bucket
	h      *keyHealth
}

// NewPool returns a pool with no keys; call SetKeys before Do.
func NewPool(opts PoolOptions) *Pool {
	p := &Pool{opts: opts.withDefaults(), refusals: make(chan Refusal, refusalBuffer)}
	p.settlements.queued, p.settlements.large = make(chan struct{}, 1), make(chan struct{}, 1)
	p.keys.Store(&keySet{})
	p.models.init(p.opts.SlowFailures, p.opts.SlowFailure, p.opts.Breaker.CoolDown)
	return p
}

// SetKeys replaces the key set, e.g. after an admin edits the keys. A key
// whose ID remains keeps its breaker, cool-down, disabled state and counters,
// unless its Secret or BaseURL changed: then it starts healthy again (the
// admin fixed it) and keeps only its counters. Requests already in flight
// finish on the keys they started with.
func (p *Pool) SetKeys(keys []Key) {
	p.setMu.Lock()
	defer p.setMu.Unlock()
	old := make(map[int64]*keyEntry)
	for _, e := range p.keys.Load().entries {
		old[e.key.ID] = e
	}
	next := &keySet{entries: make([]*keyEntry, 0, len(keys))}
	for _, k := range keys {
		k.Models = slices.Clone(k.Models)
		id := strconv.FormatInt(k.ID, 10)
		e := &keyEntry{
			key:    k,
			weight: int64(max(1, k.Weight)),
			reqKey: "upkey:" + id,
			tpmKey: "upkey:" + id + "|tpm",
		}
		forget := false
		if prev, ok := old[k.ID]; ok {
			e.h = prev.h
			if prev.key.Secret != k.Secret || prev.key.BaseURL != k.BaseURL || prev.key.Provider != k.Provider {
				e.h.reset(p.opts.Breaker)
				forget = true // another account: its limits are not these
			}
		} else {
			e.h = newKeyHealth(p.opts.Breaker)
		}
		e.h.configure(max(0, k.RPM), max(0, k.TPM), forget)
		if err := e.setBase(); err != nil {
			e.h.disable(err.Error())
		}
		next.entries = append(next.entries, e)
	}
	p.keys.Store(next)
}

// setBase finds the key's wire format and parses its base URL; a key
// without both stays out of rotation.
func (e *keyEntry) setBase() error {
	f, ok := formatOf(e.key.Provider)
	if !ok {
		return errors.New("unknown provider " + strconv.Quote(e.key.Provider))
	}
	e.format = f
	u, err := parseBase(e.key.BaseURL)
	if err == nil {
		err = f.check(u)
	}
	if err != nil {
		return err
	}
	e.base = u
	return nil
}

// Models lists the models the keys serve, sorted, each once; "*" stands for
// keys configured with no model list, which serve any model.
func (p *Pool) Models() []string {
	var out []string
	for _, e := range p.keys.Load().entries {
		if len(e.key.Models) == 0 {
			out = append(out, "*")
		}
		out = append(out, e.key.Models...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Serves reports whether any configured key, whatever its state, serves
// model: when it does not, Do returns ErrNoKey.
func (p *Pool) Serves(model string) bool {
	for _, e := range p.keys.Load().entries {
		if e.serves(model) {
			return true
		}
	}
	return false
}

func (e *keyEntry) serves(model string) bool {
	return len(e.key.Models) == 0 || slices.Contains(e.key.Models, model)
}

// Status reports every key's state for the admin pages, in SetKeys order.
// It never includes a secret.
func (p *Pool) Status() []KeyStatus {
	now := p.opts.Now()
	entries := p.keys.Load().entries
	out := make([]KeyStatus, 0, len(entries))
	for _, e := range entries {
		s := e.h.status(now)
		s.ID, s.Name, s.RPM, s.Models = e.key.ID, e.key.Name, e.key.RPM, e.key.Models
		out = append(out, s)
	}
	return out
}

// Degraded reports whether the degradation rule has tripped for model: Do
// answers ErrUnavailable for it until the cool-down ends.
func (p *Pool) Degraded(model string) bool {
	_, ok := p.models.degraded(model, p.opts.Now())
	return ok
}

// Refusals delivers each key the pool disables because its provider
// refused it, once, so it can be persisted and shown to admins.
func (p *Pool) Refusals() <-chan Refusal { return p.refusals }

// refused reports a refusal without ever blocking the request that saw it.
func (p *Pool) refused(keyID int64, reason string) {
	select {
	case p.refusals <- Refusal{KeyID: keyID, Reason: reason}:
	default:
		p.opts.Log.Error("upstream key refusal not reported: nobody reads Refusals", "key_id", keyID)
	}
}

// Retries is the number of retries since start (attempts beyond the first),
// for a metrics counter.
func (p *Pool) Retries() int64 { return p.retries.Load() }

// RateLimited is the number of 429 answers from providers since start, for
// a metrics counter (sluice_upstream_rate_limited_total): every one is a
// wasted round trip that counts against the key with the provider, so
// pacing aims to keep it near zero.
func (p *Pool) RateLimited() int64 { return p.rateLimited.Load() }

// PacingErrors is the number of limiter calls for the keys' buckets that
// failed since start (each one a request sent unpaced, or a settlement or
// refund lost), for a metrics counter (sluice_upstream_pacing_errors_total).
// Only the change of a key between working and failing is logged.
func (p *Pool) PacingErrors() int64 { return p.pacingErrors.Load() }

// limiterFailed counts a failed limiter call for e's buckets and logs it if
// it is the first since the limiter last worked for e.
func (p *Pool) limiterFailed(e *keyEntry, what string, err error) {
	p.pacingErrors.Add(1)
	e.h.mu.Lock()
	first := !e.h.limiterFailing
	e.h.limiterFailing = true
	e.h.mu.Unlock()
	if first {
		p.opts.Log.Warn("upstream key pacing failed; requests go unpaced and settlements are lost until it works again (counted in PacingErrors)",
			"key", e.key.Name, "key_id", e.key.ID, "during", what, "error", err)
	}
}

// limiterWorks notes a limiter call for e's buckets that worked, logging
// the recovery after failures.
func (p *Pool) limiterWorks(e *keyEntry) {
	e.h.mu.Lock()
	was := e.h.limiterFailing
	e.h.limiterFailing = false
	e.h.mu.Unlock()
	if was {
		p.opts.Log.Info("upstream key pacing works again", "key", e.key.Name, "key_id", e.key.ID,
			"pacing_errors_total", p.pacingErrors.Load())
	}
}
