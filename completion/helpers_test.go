package completion_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/completion"
	"github.com/sluicehq/sluice/conversations"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/respcache"
	"github.com/sluicehq/sluice/upstream"
	"github.com/sluicehq/sluice/upstream/local"
)

// rig is a pipeline on the real in-memory quota backend and an injected
// clock, with a fake provider pool and a sink that keeps what it is sent.
type rig struct {
	t        *testing.T
	prices   []models.ModelPrice
	clock    *clocktest.Clock
	limiter  *spyLimiter
	freezes  *quota.FreezeSet
	provider *fakeProviders
	recorder *memRecorder
	cache    *respcache.Memory
	convs    *conversations.Memory
	ledger   *metering.MemoryLedger
	alerts   *alertLog
	deps     completion.Deps
	p        *completion.Pipeline
	caller   accounts.Caller
}

// price sets model's price in the pipeline's book, in force from the rig's
// start.
func (r *rig) price(model, input, output, cached string) models.ModelPrice {
	r.t.Helper()
	p := models.ModelPrice{ID: int64(len(r.prices) + 1), Model: model, EffectiveFrom: r.clock.Now().Add(-time.Hour)}
	var err error
	if p.InputPerMTok, err = money.ParsePrice(input); err == nil {
		if p.OutputPerMTok, err = money.ParsePrice(output); err == nil {
			p.CachedInputPerMTok, err = money.ParsePrice(cached)
		}
	}
	if err != nil {
		r.t.Fatal(err)
	}
	r.prices = append(r.prices, p)
	r.deps.Prices.Replace(r.prices)
	return p
}

// alertLog keeps the spending moves the pipeline reports.
type alertLog struct {
	mu    sync.Mutex
	moves []string
}

func (a *alertLog) Spent(orgID int64, limit money.Amount, _ time.Time, before, after money.Amount) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.moves = append(a.moves, fmt.Sprintf("org %d: %s -> %s of %s", orgID, before, after, limit))
}

const providerModel = "gpt-test"

func newRig(t *testing.T) *rig {
	t.Helper()
	clk := clocktest.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	m, err := local.New()
	if err != nil {
		t.Fatal(err)
	}
	cache, err := respcache.NewMemory(1<<20, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cache.Close)
	r := &rig{t: t, clock: clk, limiter: &spyLimiter{Memory: quota.NewMemory(clk.Now)}, freezes: quota.NewFreezeSet(clk.Now),
		provider: &fakeProviders{}, recorder: &memRecorder{}, cache: cache, convs: conversations.NewMemory(time.Hour, clk.Now),
		ledger: metering.NewMemoryLedger(func(context.Context, metering.Account, time.Time) (money.Amount, error) { return 0, nil }),
		alerts: &alertLog{}}
	r.deps = completion.Deps{
		Log: slog.New(slog.DiscardHandler), Now: clk.Now,
		Limiter: r.limiter, Freezes: r.freezes, Freezer: &freezer{set: r.freezes},
		Detector:        quota.NewDetector(quota.NewMemoryWindow(clk.Now)),
		Scorer:          quota.NewValueScorer(quota.ValueRules{}, clk.Now), // flat: tests count requests
		PriorityWeights: map[string]int64{"low": 1, "normal": 1, "high": 2}, DefaultMaxTokens: 512,
		Local: m, Providers: r.provider, Cache: cache, CacheTTL: time.Minute,
		Conversations: r.convs, HistoryBudget: 4096, Recorder: r.recorder,
		Prices: metering.NewPriceBook(), Ledger: r.ledger, Alerts: r.alerts,
	}
	r.p = completion.New(r.deps)
	r.caller = accounts.Caller{TokenID: 7, OrgID: 3, RequestsKey: "org:3", TPMKey: "org:3|tpm", TokenKey: "tok:7", Tier: &models.Tier{
		Name: "free", Capacity: 10, RefillPerSec: 1, TokensPerMinute: 1000, FreezeThreshold: 3, FreezeMinutes: 10,
		UpstreamFallback: "local"}}
	return r
}

// rebuild applies a change to r.deps.
func (r *rig) rebuild() { r.p = completion.New(r.deps) }

// request parses body as the HTTP handler would and gives it an id.
func (r *rig) request(body string) *completion.Request {
	r.t.Helper()
	req, err := r.p.Parse([]byte(body))
	if err != nil {
		r.t.Fatalf("parse %s: %v", body, err)
	}
	req.ID = "req_" + strings.Repeat("a", 8)
	return &req
}

func (r *rig) complete(ctx context.Context, body string) (completion.Served, *sink, error) {
	r.t.Helper()
	s := newSink()
	out, err := r.p.Complete(ctx, r.caller, r.request(body), s)
	return out, s, err
}

// sink keeps what the pipeline sends. failAfter > 0 is a client that
// leaves after that many writes: onGone runs then (as the server cancels
// the request's context) and later writes fail.
type sink struct {
	mu          sync.Mutex
	header      http.Header
	status      int
	contentType string
	body        bytes.Buffer
	streamed    bool
	writes      int
	failAfter   int
	onGone      func()
}

func newSink() *sink { return &sink{header: http.Header{}} }

func (s *sink) Header() http.Header { return s.header }

func (s *sink) Send(status int, contentType string, body []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.contentType = status, contentType
	s.body.Write(body)
	return nil
}

func (s *sink) StartStream(status int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.streamed = status, true
	return nil
}

func (s *sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failAfter > 0 && s.writes >= s.failAfter {
		return 0, errors.New("write: broken pipe")
	}
	s.writes++
	n, err := s.body.Write(p)
	if s.writes == s.failAfter && s.onGone != nil {
		s.onGone()
	}
	return n, err
}

func (s *sink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.body.String()
}

// spyLimiter is the real in-memory limiter, recording each settlement.
type spyLimiter struct {
	*quota.Memory
	mu      sync.Mutex
	adjusts []adjustment
	// holdRefunds drops refunds, as if the requests they settle were
	// still running.
	holdRefunds bool
}

type adjustment struct {
	key       string
	delta     int64
	cancelled bool // settled on a context that had ended
}

func (l *spyLimiter) Adjust(ctx context.Context, key string, p quota.Params, delta int64) error {
	l.mu.Lock()
	l.adjusts = append(l.adjusts, adjustment{key, delta, ctx.Err() != nil})
	hold := l.holdRefunds && delta < 0
	l.mu.Unlock()
	if hold {
		return nil
	}
	return l.Memory.Adjust(ctx, key, p, delta)
}

func (l *spyLimiter) settlements() []adjustment {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]adjustment(nil), l.adjusts...)
}

// fakeProviders is the provider pool: answer decides each call.
type fakeProviders struct {
	mu      sync.Mutex
	answer  func(ctx context.Context, req upstream.Request) (*upstream.Response, error)
	calls   []upstream.Request
	settled []keySettlement
}

type keySettlement struct {
	keyID, estimate, actual int64
	cancelled               bool
}

func (f *fakeProviders) Serves(model string) bool { return model == providerModel }

func (f *fakeProviders) Do(ctx context.Context, req upstream.Request) (*upstream.Response, error) {
	f.mu.Lock()
	f.calls = append(f.calls, req)
	answer := f.answer
	f.mu.Unlock()
	return answer(ctx, req)
}

func (f *fakeProviders) Settle(ctx context.Context, keyID, estimate, actual int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settled = append(f.settled, keySettlement{keyID, estimate, actual, ctx.Err() != nil})
	return nil
}

func (f *fakeProviders) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func (f *fakeProviders) settlements() []keySettlement {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]keySettlement(nil), f.settled...)
}

// answerJSON makes every call a 200 with body from key 1.
func answerJSON(body string) func(context.Context, upstream.Request) (*upstream.Response, error) {
	return func(context.Context, upstream.Request) (*upstream.Response, error) {
		return &upstream.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}},
			Body: []byte(body), KeyID: 1, Attempts: 1}, nil
	}
}

// stream is a provider's streaming body: first, then nothing until the
// request's context ends.
type stream struct {
	ctx    context.Context
	first  io.Reader
	closed chan struct{}
	once   sync.Once
}

func (s *stream) Read(p []byte) (int, error) {
	if n, err := s.first.Read(p); err != io.EOF {
		return n, err
	}
	select {
	case <-s.ctx.Done():
		return 0, s.ctx.Err()
	case <-s.closed:
		return 0, io.ErrClosedPipe
	}
}

func (s *stream) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}

// memRecorder keeps usage events.
type memRecorder struct {
	mu         sync.Mutex
	events     []models.UsageEvent
	rejections []string
}

func (m *memRecorder) Record(ev models.UsageEvent) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, ev)
	return nil
}

func (m *memRecorder) Reject(orgID, tokenID int64, model, reason string, _ time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rejections = append(m.rejections, fmt.Sprintf("%d/%d/%s: %s", orgID, tokenID, model, reason))
}

func (m *memRecorder) all() []models.UsageEvent {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]models.UsageEvent(nil), m.events...)
}

// freezer freezes into the set the pipeline reads, as accounts does.
type freezer struct {
	set    *quota.FreezeSet
	frozen int
}

func (f *freezer) Freeze(_ context.Context, c accounts.Caller, count int, now time.Time) (models.Freeze, error) {
	f.frozen++
	until := now.Add(time.Duration(c.Tier.FreezeMinutes) * time.Minute)
	reason := "too many rejected requests"
	f.set.Put(quota.Freeze{TokenID: c.TokenID, Until: until, Reason: reason})
	return models.Freeze{TokenID: c.TokenID, FrozenUntil: until, Reason: reason, WindowCount: count}, nil
}
