package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/batches"
	"github.com/sluicehq/sluice/billing"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/completion"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/conversations"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/testjobs"
	"github.com/sluicehq/sluice/internal/testmail"
	"github.com/sluicehq/sluice/internal/testsync"
	"github.com/sluicehq/sluice/mail"
	"github.com/sluicehq/sluice/mail/outbox"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/payments"
	"github.com/sluicehq/sluice/providers"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/secrets"
	"github.com/sluicehq/sluice/signing"
	"github.com/sluicehq/sluice/upstream"
	"github.com/sluicehq/sluice/upstream/local"
	"github.com/sluicehq/sluice/web"
	"github.com/sluicehq/sluice/webhook"
)

// storeRecorder writes usage synchronously, so tests see it at once; the
// batching recorder has its own tests.
type storeRecorder struct{ store *models.Store }

// TestMain keeps gin quiet: the mode is the process's, set by the program
// that builds the router, not by the router.
func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}

func (r storeRecorder) Touch(tokenID int64, at time.Time) error {
	return r.store.TouchAPITokens(context.Background(), map[int64]time.Time{tokenID: at})
}

func (r storeRecorder) Reject(orgID, tokenID int64, model, reason string, at time.Time) {
	rj := models.Rejections{OrgID: orgID, TokenID: tokenID, Model: model, Hour: at}
	switch reason {
	case metering.RejectedRequests:
		rj.Requests = 1
	case metering.RejectedTokens:
		rj.Tokens = 1
	case metering.RejectedFrozen:
		rj.Frozen = 1
	case metering.RejectedBudget:
		rj.Budget = 1
	case metering.RejectedQueue:
		rj.Queue = 1
	}
	if err := r.store.AddRejections(context.Background(), []models.Rejections{rj}); err != nil {
		panic(err)
	}
}

func (r storeRecorder) Record(ev models.UsageEvent) error {
	ctx := context.Background()
	if err := r.store.InsertUsageEvents(ctx, []models.UsageEvent{ev}); err != nil {
		return err
	}
	return r.store.TouchAPITokens(ctx, map[int64]time.Time{ev.TokenID: ev.CreatedAt})
}

// env is a Sluice HTTP stack on a real database with a fake clock. Its
// parts are kept so a test can swap one and rebuild.
type env struct {
	t       testing.TB
	h       http.Handler
	store   *models.Store
	clock   *clocktest.Clock
	acc     *accounts.Service
	dir     *accounts.Directory
	limiter *quota.Memory
	model   *local.Model
	jwt     *accounts.Sessions
	aliases *providers.Aliases

	log    *slog.Logger
	bill   *billing.Service
	alerts *metering.BudgetAlerts
	pipe   completion.Deps
	deps   Deps
	outbox *outbox.Worker // withMail's
}

// sendMail sends every mail the outbox holds due, as a node's worker does.
func (e *env) sendMail() {
	e.t.Helper()
	for {
		n, err := e.outbox.SendDue(context.Background())
		if err != nil {
			e.t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
}

// rebuild makes the pipeline, the batches (which check lines with the
// pipeline) and the handler from the env's parts, after a test changed one.
func (e *env) rebuild() {
	e.deps.Pipeline = completion.New(e.pipe)
	e.deps.Batches = batches.New(batches.Deps{Store: e.store, Pipeline: e.deps.Pipeline, Log: e.log},
		batches.Config{FileRetention: 24 * time.Hour, Now: e.clock.Now})
	e.h = New(e.log, Ops{}, e.deps)
}

// captureLogs sends every part's log lines to the returned buffer.
func (e *env) captureLogs() *testsync.Buffer {
	var b testsync.Buffer
	e.log = slog.New(slog.NewTextHandler(&b, nil))
	e.pipe.Log = e.log
	e.rebuild()
	return &b
}

// defaults is the configuration a server started with no settings gets:
// the one source of defaults.
func defaults(t testing.TB) config.Config {
	cfg, err := config.Load(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// envOption adjusts the env newEnv builds.
type envOption func(*envConfig)

type envConfig struct {
	mailpit *testmail.Server // nil: Sluice sends no mail
}

// withMail has the env send mail through mp, as a node with
// SLUICE_SMTP_URL does (public URL publicURL); e.sendMail sends what is
// queued. Its store runs on the env's clock.
func withMail(mp *testmail.Server) envOption { return func(c *envConfig) { c.mailpit = mp } }

// publicURL is the mail env's SLUICE_PUBLIC_URL.
const publicURL = "https://sluice.example"

func newEnv(t testing.TB, db *models.DB, opts ...envOption) *env {
	t.Helper()
	var o envConfig
	for _, opt := range opts {
		opt(&o)
	}
	ctx := context.Background()
	clk := clocktest.New(time.Now().UTC())
	var storeOpts []models.StoreOption
	var accOpts []accounts.ServiceOption
	if o.mailpit != nil {
		storeOpts = append(storeOpts, models.WithClock(clk.Now), models.WithEmailVerification())
		accOpts = append(accOpts, accounts.WithMail(accounts.Mailing{Composer: mail.NewComposer(publicURL)}))
	}
	store := models.NewStore(db, storeOpts...)
	box, _ := secrets.NewBox(bytes.Repeat([]byte{3}, 32))
	dir, err := accounts.NewDirectory(ctx, store, time.Minute, clk.Now, accounts.WithSigningSecrets(box))
	if err != nil {
		t.Fatal(err)
	}
	ledger := metering.NewMemoryLedger(metering.StoreSeed(store), metering.WithFunds(metering.StoreFunds(store)))
	acc, err := accounts.NewService(store, dir, cluster.None{}, accounts.NewLoginThrottle(clk.Now), 4, append(accOpts, accounts.WithLedger(ledger, discardLog()))...)
	if err != nil {
		t.Fatal(err)
	}
	model, err := local.New()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := acc.EnsureAdmin(ctx, "admin@example.com", "admin-password"); err != nil {
		t.Fatal(err)
	}
	limiter := quota.NewMemory(clk.Now)
	jwt := accounts.NewSessions([]byte("0123456789abcdef0123456789abcdef"), time.Hour, clk.Now)
	cfg := defaults(t)
	recorder := storeRecorder{store}
	prices := metering.NewPriceBook()
	webhooks := webhook.NewSender(webhook.Options{Hosts: webhook.Hosts{"127.0.0.1", "hooks.example.com"}, Now: clk.Now,
		// hooks.example.com is public, without asking DNS; 127.0.0.1 is
		// allowed by name and refused by address.
		Lookup: func(context.Context, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
		}})
	bill := billing.New(billing.Deps{Store: store, Directory: dir, Bus: cluster.None{}, Prices: prices, Ledger: ledger, Box: box,
		Webhooks: webhooks, Log: discardLog(), Now: clk.Now})
	alerts := metering.NewBudgetAlerts(store, discardLog(), clk.Now)
	var worker *outbox.Worker
	if o.mailpit != nil {
		alerts.WithMail(mail.NewComposer(publicURL), nil)
		server, err := mail.ParseURL(o.mailpit.URL())
		if err != nil {
			t.Fatal(err)
		}
		sender, err := mail.NewSMTP(server, "Sluice <sluice@example.com>", clk.Now)
		if err != nil {
			t.Fatal(err)
		}
		worker = outbox.NewWorker(store, sender, discardLog(), outbox.WithClock(clk.Now))
	}
	convs := conversations.NewMemory(30*time.Minute, clk.Now)
	queue := testjobs.Queue(t, db, dir, clk.Now)
	aliases := providers.NewAliases(store, cluster.None{}, discardLog())
	if err := aliases.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, store: store, clock: clk, acc: acc, dir: dir, limiter: limiter, model: model, jwt: jwt, aliases: aliases, log: discardLog(),
		pipe: completion.Deps{
			Log: discardLog(), Now: clk.Now,
			Limiter: limiter, Freezes: dir, Freezer: acc, Detector: quota.NewDetector(quota.NewMemoryWindow(clk.Now)),
			// Flat weights, so tests count requests; the low-value rules
			// have their own test.
			Scorer:          quota.NewValueScorer(quota.ValueRules{}, clk.Now),
			PriorityWeights: cfg.PriorityWeights, DefaultMaxTokens: cfg.DefaultMaxTokens, UsageGrace: cfg.UsageGrace,
			Local: model, Aliases: aliases, CacheTTL: cfg.CacheTTL, Conversations: convs, HistoryBudget: cfg.ConversationTokens,
			Prices: prices, Ledger: ledger, Alerts: alerts, Recorder: recorder,
		},
		deps: Deps{
			Deps: web.Deps{Store: store, Accounts: acc, Sessions: jwt, Aliases: aliases, Billing: bill, PoolStatus: noKeys, Models: noModels,
				Payments: payments.New(payments.Config{Currency: "usd", TopUpMin: 5 * money.Dollar, TopUpMax: 1000 * money.Dollar},
					payments.Deps{Store: store, Log: discardLog(), Now: clk.Now}),
				LimiterStatus: inProcess, Now: clk.Now},
			Directory: dir, Conversations: convs, Jobs: queue, Callbacks: bill, TokenUse: recorder, MaxBodyBytes: 4 << 10,
			ResponseRetention: cfg.ResponseRetention,
			Signatures:        signing.NewVerifier(signing.NewMemoryNonces(clk.Now), clk.Now),
			InFlight:          &quota.InFlight{}, Latency: quota.NewLatencyWindow(1024, time.Minute, clk.Now)},
		bill: bill, alerts: alerts, outbox: worker,
	}
	e.rebuild()
	return e
}

func noKeys() []upstream.KeyStatus { return nil }

func noModels() []string { return nil }

func inProcess() quota.LimiterStatus { return quota.LimiterStatus{Mode: "local", Nodes: 1} }

// request is one HTTP call in a test.
type request struct {
	method, path string
	bearer       string
	contentType  string
	body         string
	header       map[string]string
}

func (e *env) do(r request) *httptest.ResponseRecorder {
	e.t.Helper()
	req := httptest.NewRequest(r.method, r.path, strings.NewReader(r.body))
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	} else if r.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+r.bearer)
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, req)
	return w
}

// decode parses a JSON response into a map.
func decode(t testing.TB, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
		t.Fatalf("response is not JSON (%d): %q", w.Code, w.Body.String())
	}
	return m
}

// errorCode returns error.code of a JSON error response.
func errorCode(t testing.TB, w *httptest.ResponseRecorder) string {
	t.Helper()
	m := decode(t, w)
	e, ok := m["error"].(map[string]any)
	if !ok {
		t.Fatalf("no error object in %q", w.Body.String())
	}
	code, _ := e["code"].(string)
	return code
}

// signup creates an organization and returns its owner's session token.
func (e *env) signup(email, org string) string {
	e.t.Helper()
	w := e.do(request{method: "POST", path: "/api/auth/signup",
		body: `{"email":"` + email + `","password":"password123","organization":"` + org + `"}`})
	if w.Code != http.StatusCreated {
		e.t.Fatalf("signup %s: %d %s", email, w.Code, w.Body.String())
	}
	return decode(e.t, w)["token"].(string)
}

func (e *env) login(email, password string) string {
	e.t.Helper()
	w := e.do(request{method: "POST", path: "/api/auth/login", body: `{"email":"` + email + `","password":"` + password + `"}`})
	if w.Code != http.StatusOK {
		e.t.Fatalf("login %s: %d %s", email, w.Code, w.Body.String())
	}
	return decode(e.t, w)["token"].(string)
}

// apiToken creates an API token with the session and returns it and its id.
func (e *env) apiToken(session string) (string, int64) {
	e.t.Helper()
	w := e.do(request{method: "POST", path: "/api/tokens", bearer: session, body: `{"name":"test"}`})
	if w.Code != http.StatusCreated {
		e.t.Fatalf("create token: %d %s", w.Code, w.Body.String())
	}
	m := decode(e.t, w)
	return m["token"].(string), int64(m["id"].(float64))
}

const chatBody = `{"model":"sluice-local","messages":[{"role":"user","content":"hello"}]}`

func (e *env) chat(key string) *httptest.ResponseRecorder {
	return e.do(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: chatBody})
}
