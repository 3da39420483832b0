// Package app is Sluice's composition root. Build wires a node from its
// configuration: config, then stores, then the node's shared state (Redis or
// not, chosen once), then services, then the router. Start runs the node's
// workers, each a named goroutine of one group, and serves. Shutdown stops
// in dependency order: stop accepting and drain HTTP (in-flight completions
// included), let running jobs finish, stop the workers and wait for them,
// store the last usage, then close Redis and the database.
//
// main calls Run; so do the system tests in e2e/.
package app

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/batches"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/completion"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/handlers"
	"github.com/sluicehq/sluice/internal/datadir"
	"github.com/sluicehq/sluice/jobs"
	"github.com/sluicehq/sluice/logging"
	"github.com/sluicehq/sluice/mail"
	"github.com/sluicehq/sluice/mail/outbox"
	"github.com/sluicehq/sluice/metering"
	mtr "github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/providers"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/signing"
	"github.com/sluicehq/sluice/upstream"
	"github.com/sluicehq/sluice/upstream/local"
	"github.com/sluicehq/sluice/web"
)

// Options are the parts of a node its caller may supply; the zero value is
// what `sluice` runs with.
type Options struct {
	// ProviderTransport carries requests to providers (an egress proxy, or a
	// test's transport that fails as no server can); nil: Sluice's own.
	ProviderTransport http.RoundTripper
}

// Run builds Sluice from its command line and environment and serves until
// ctx ends, then shuts down gracefully: in-flight requests finish and every
// usage event is stored before it returns.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer, opts Options) error {
	cfg, err := config.Load(args, getenv)
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	log := logging.New(stdout, cfg.LogLevel, cfg.LogFormat)
	gin.SetMode(gin.ReleaseMode) // the process's mode, once; no route dump on stdout
	a, err := Build(ctx, cfg, log, stdout, opts)
	if err != nil || a == nil {
		return err
	}
	served, err := a.Start(ctx)
	if err != nil {
		return errors.Join(err, a.Shutdown(context.WithoutCancel(ctx)))
	}
	fmt.Fprintf(stdout, "Sluice is listening on %s — open it in your browser.\n", browserURL(a.Addr()))
	select {
	case err = <-served:
		err = fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		log.Info("shutting down: finishing in-flight requests")
	}
	return errors.Join(err, a.Shutdown(context.WithoutCancel(ctx)))
}

// App is one built node.
type App struct {
	cfg      config.Config
	log      *slog.Logger
	db       *models.DB
	shared   *shared
	dir      *accounts.Directory
	accounts *accounts.Service
	store    *models.Store
	pool     *upstream.Pool
	keys     *providers.Service
	aliases  *providers.Aliases
	bill     *billingParts
	recorder *metering.Recorder
	batches  *batches.Service
	queue    *jobs.Queue
	inFlight *quota.InFlight
	latency  *quota.LatencyWindow
	invoicer *models.AdvisoryLeader
	mailer   *outbox.Worker // nil without mail
	composer mail.Composer
	payer    *models.AdvisoryLeader // charges final invoices through Stripe
	metrics  http.Handler
	srv      *http.Server
	ln       net.Listener

	// closers undo Build, last first.
	closers []func()
	// work is the workers' context, which stopWorkers ends; workers is
	// their group.
	work        context.Context
	stopWorkers context.CancelFunc
	workers     errgroup.Group
}

// Build wires a node for cfg and listens on its address, serving nothing
// until Start. On `sluice migrate` it migrates and returns nil. On an error
// it closes what it opened.
func Build(ctx context.Context, cfg config.Config, log *slog.Logger, stdout io.Writer, opts Options) (_ *App, err error) {
	a := &App{cfg: cfg, log: log}
	defer func() {
		if err != nil {
			a.close()
		}
	}()
	if cfg.Embedded() || cfg.MasterKey == nil {
		// The data directory holds the database and the master key: 0700,
		// its files 0600, an existing one tightened.
		changes, err := datadir.Prepare(cfg.DataDir)
		if err != nil {
			return nil, err
		}
		for _, c := range changes {
			log.Warn("the data directory was readable by others: tightened", "path", c.Path,
				"from", fmt.Sprintf("%04o", c.From), "to", fmt.Sprintf("%04o", c.To))
		}
	}
	db, err := models.Open(ctx, cfg.DatabaseURL, cfg.SQLitePath())
	if err != nil {
		return nil, err
	}
	a.db = db
	a.closers = append(a.closers, func() { db.Close() })
	if err := prepareSchema(ctx, cfg, db, stdout); err != nil || cfg.Command == "migrate" {
		return nil, err
	}

	var storeOpts []models.StoreOption
	if cfg.MailOn() {
		// Addresses can be verified: tiers' credit_needs_verified_email
		// is in force.
		storeOpts = append(storeOpts, models.WithEmailVerification())
	}
	store := models.NewStore(db, storeOpts...)
	a.store = store
	var accOpts []accounts.ServiceOption
	if cfg.MailOn() {
		sender, err := mail.NewSMTP(cfg.SMTP, cfg.MailFrom, nil)
		if err != nil {
			return nil, fmt.Errorf("SLUICE_MAIL_FROM: %w", err)
		}
		a.mailer = outbox.NewWorker(store, sender, log)
		a.composer = mail.NewComposer(cfg.PublicURL)
		log.Info("mail is on", "smtp_server", cfg.SMTP.Addr(), "from", cfg.MailFrom, "public_url", cfg.PublicURL)
		accOpts = append(accOpts, accounts.WithMail(accounts.Mailing{Composer: a.composer, Nudge: a.mailer.Nudge}))
	}
	secret := cfg.SessionSecret
	if secret == "" {
		// Generated once and kept in the database, so restarts and other
		// nodes keep accepting the same sessions.
		if secret, err = store.SettingOrInit(ctx, "session_secret", rand.Text()+rand.Text()); err != nil {
			return nil, err
		}
	}
	registry := prometheus.NewRegistry()
	sh, err := newShared(cfg, db, store, log, registry)
	if err != nil {
		return nil, err
	}
	a.shared = sh
	a.closers = append(a.closers, sh.close)
	box, err := newBox(cfg)
	if err != nil {
		return nil, err
	}
	dir, err := accounts.NewDirectory(ctx, store, cfg.TokenCacheTTL, nil, accounts.WithSigningSecrets(box))
	if err != nil {
		return nil, err
	}
	a.dir = dir
	// Signups per client address and failed sign-ins per email and per
	// address draw on the node's limiter: one bucket each for the whole
	// cluster through Redis, in memory without.
	accOpts = append(accOpts, accounts.WithSignupThrottle(accounts.NewSignupThrottle(sh.limiter, cfg.SignupRate)), accounts.WithLedger(sh.ledger, log),
		accounts.WithDeletedOrgRetention(cfg.DeletedOrgRetention))
	acc, err := accounts.NewService(store, dir, sh.bus, accounts.NewSharedLoginThrottle(sh.limiter), cfg.BcryptCost, accOpts...)
	if err != nil {
		return nil, err
	}
	a.accounts = acc
	created, password, err := acc.EnsureAdmin(ctx, cfg.AdminEmail, cfg.AdminPassword)
	if err != nil {
		return nil, fmt.Errorf("create admin account: %w", err)
	}
	if created && password != "" {
		fmt.Fprintf(stdout, "\nCreated the admin account %s with password %s\nIt is shown only this once: sign in and keep it safe.\n\n", cfg.AdminEmail, password)
	}
	model, err := local.New()
	if err != nil {
		return nil, err
	}
	// SQLite has one writer, and it writes on the cores that serve requests:
	// in the background, or its once-a-second batch is the tail of the
	// requests beside it. On Postgres the database, not Go, bounds the
	// recorder: larger batches and two in flight measured 1.9x the events/s
	// of one 1024-event batch at a time (docs/BENCHMARKS.md).
	batch, placement := 1024, metering.WithBackgroundPriority(10)
	if db.Dialect == "postgres" {
		batch, placement = 4096, metering.WithFlushers(2)
	}
	a.recorder = metering.NewRecorder(store, log, time.Second, batch, flushObserver(registry), placement)
	gateway := mtr.NewGateway(registry)
	gateway.KnowTiers(func() []string {
		var names []string
		for _, t := range dir.Tiers() {
			names = append(names, t.Name)
		}
		return names
	}, metering.RejectionReasons)

	if a.pool, a.keys, err = newProviders(ctx, cfg, store, box, sh, log, registry, opts.ProviderTransport); err != nil {
		return nil, err
	}
	a.aliases = providers.NewAliases(store, sh.bus, log)
	if err := a.aliases.Reload(ctx); err != nil {
		return nil, err
	}
	a.bill = newBilling(cfg, store, sh, dir, box, log)
	if a.mailer != nil {
		a.bill.alerts.WithMail(a.composer, a.mailer.Nudge) // budget alerts go to the owners by mail too
		a.bill.payments.WithMailer(paymentMail{store: store, composer: a.composer, nudge: a.mailer.Nudge})
	}
	if err := a.bill.prices.Load(ctx, store); err != nil {
		return nil, err
	}

	pipeline := completion.New(completion.Deps{
		Log: log, Now: time.Now,
		Limiter: sh.limiter, Freezes: dir, Freezer: acc, Detector: quota.NewDetector(sh.window),
		Scorer:          quota.NewValueScorer(quota.DefaultValueRules(), nil),
		PriorityWeights: cfg.PriorityWeights, DefaultMaxTokens: cfg.DefaultMaxTokens, UsageGrace: cfg.UsageGrace,
		Local: model, Providers: a.pool, Aliases: a.aliases,
		Cache: sh.cache, CacheTTL: cfg.CacheTTL,
		Conversations: sh.conversations, HistoryBudget: cfg.ConversationTokens,
		Prices: a.bill.prices, Ledger: a.bill.ledger, Alerts: a.bill.alerts, BalanceAlerts: a.bill.alerts, Recorder: a.recorder,
		Metrics: gateway, LogPrompts: cfg.LogPrompts,
	})
	// The batches hear their lines' outcomes from the queue; the queue
	// takes their lines when one is created.
	a.batches = batches.New(batches.Deps{Store: store, Pipeline: pipeline, Log: log},
		batches.Config{FileRetention: cfg.BatchRetention, FileStorage: cfg.FileStorage, Now: time.Now})
	a.queue, err = jobs.New(ctx, jobs.Deps{DB: db, DatabaseURL: cfg.DatabaseURL, Pipeline: pipeline, Directory: dir,
		Notify: a.bill.billing.Notify, Batches: a.batches, Log: log}, jobs.Config{Workers: cfg.JobWorkers, MaxAttempts: cfg.JobAttempts,
		Retention: cfg.JobRetention, MaxWait: 2 * time.Second, RetryBase: cfg.JobRetryBase, Now: time.Now,
		ProviderTime:    cfg.UpstreamBudget + cfg.UpstreamAnswer,
		DeliveryWorkers: cfg.WebhookWorkers, HostConcurrency: cfg.WebhookHostLimit, DeliveryAttempts: cfg.WebhookAttempts,
		DeliveryRetryBase: cfg.WebhookRetryBase})
	if err != nil {
		return nil, err
	}
	a.inFlight, a.latency = &quota.InFlight{}, quota.NewLatencyWindow(1024, time.Minute, nil)
	registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_inflight_requests",
		Help: "API requests in flight on this node."}, func() float64 { return float64(a.inFlight.Value()) }))
	registerState(registry, dir, func() string { return sh.status().Mode }, a.pool, a.recorder, a.queue)
	a.metrics = promhttp.HandlerFor(registry, promhttp.HandlerOpts{})
	ops := handlers.Ops{Ready: readiness(cfg, db, sh, a.recorder), Gateway: gateway, MetricsToken: cfg.MetricsToken}
	if cfg.MetricsAddr == "" {
		ops.Metrics = a.metrics
		if cfg.MetricsToken == "" && cfg.DatabaseURL != "" {
			// Production (a shared database) with /metrics open to whoever
			// reaches the API: said once, at start.
			log.Warn("/metrics is served on the public address without a token; set SLUICE_METRICS_TOKEN or SLUICE_METRICS_ADDR")
		}
	}
	sessions := accounts.NewSessions([]byte(secret), cfg.SessionTTL, nil)
	sso, err := newSSO(ctx, cfg, store, acc, sh, secret, log)
	if err != nil {
		return nil, err
	}
	handler := handlers.New(log, ops, handlers.Deps{
		Deps: web.Deps{Store: store, Accounts: acc, Sessions: sessions, Providers: a.keys, Aliases: a.aliases, Billing: a.bill.billing,
			Payments: a.bill.payments, PoolStatus: a.pool.Status, Models: a.pool.Models, LimiterStatus: sh.status, Now: time.Now, SSO: sso, PublicURL: cfg.PublicURL},
		Directory: dir, Pipeline: pipeline, Conversations: sh.conversations, Jobs: a.queue, Batches: a.batches, Callbacks: a.bill.billing,
		TokenUse: a.recorder, Signatures: signing.NewVerifier(sh.nonces, nil), MaxBodyBytes: cfg.MaxBodyBytes, InFlight: a.inFlight, Latency: a.latency,
		ResponseRetention: cfg.ResponseRetention,
	})
	a.srv = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	if a.ln, err = net.Listen("tcp", cfg.Addr); err != nil {
		return nil, fmt.Errorf("listen on %s (SLUICE_ADDR): %w", cfg.Addr, err)
	}
	a.closers = append(a.closers, func() { a.ln.Close() })
	return a, nil
}

// Addr is the address the node serves on.
func (a *App) Addr() net.Addr { return a.ln.Addr() }

// Start subscribes to other nodes' changes, starts the workers and serves.
// The workers run until Shutdown, not until ctx ends: a signal must not stop
// the invoicer or the job sweep while requests are still draining. The
// returned channel gets the server's error if it stops serving by itself.
func (a *App) Start(ctx context.Context) (<-chan error, error) {
	a.work, a.stopWorkers = context.WithCancel(context.WithoutCancel(ctx))
	if a.shared.listen != nil {
		// Hear other nodes' changes before serving: an invalidation
		// published before the subscription would be missed until the
		// periodic reload.
		subscribed := make(chan struct{})
		a.worker("invalidations", func(ctx context.Context) { a.shared.listen(ctx, a.applier(ctx, subscribed)) })
		select {
		case <-subscribed:
		case <-time.After(5 * time.Second):
			a.log.Warn("not subscribed to other nodes' changes yet; serving anyway (the periodic reload catches up)")
		}
	}
	cfg := a.cfg
	if cfg.PprofAddr != "" {
		a.worker("pprof", func(ctx context.Context) { servePprof(ctx, cfg.PprofAddr, a.log) })
	}
	if cfg.MetricsAddr != "" {
		a.worker("metrics", func(ctx context.Context) { serveMetrics(ctx, cfg.MetricsAddr, cfg.MetricsToken, a.metrics, a.log) })
	}
	a.worker("reload", func(ctx context.Context) {
		reloadEvery(ctx, a.dir, a.bill.billing, a.aliases, cfg.TokenCacheTTL, a.log)
	})
	a.worker("refusals", func(ctx context.Context) { a.keys.PersistRefusals(ctx, a.pool.Refusals()) })
	a.worker("provider pool", a.pool.Run)
	a.worker("prefetch give-backs", a.shared.runPrefetch)
	a.worker("node presence", a.shared.runPresence)
	if a.mailer != nil {
		a.worker("mail outbox", a.mailer.Run)
	}
	a.worker("budget alerts", func(ctx context.Context) { a.bill.alerts.Run(ctx, a.queue.Deliver) })
	a.invoicer = models.NewAdvisoryLeader(a.db, invoiceLockKey)
	a.worker("invoices", func(ctx context.Context) { a.bill.billing.RunFinalizer(ctx, cfg.FinalizeInterval, a.invoicer) })
	a.payer = models.NewAdvisoryLeader(a.db, paymentsLockKey)
	a.worker("payments", func(ctx context.Context) { a.bill.payments.Run(ctx, time.Minute, a.payer) })
	if err := a.queue.Start(a.work); err != nil {
		return nil, fmt.Errorf("start the job queue: %w", err)
	}
	a.worker("batch sweep", func(ctx context.Context) { a.batches.Run(ctx, a.queue, time.Minute) })
	a.worker("job expiry", func(ctx context.Context) {
		expireEvery(ctx, time.Minute, "jobs", func(ctx context.Context) (int64, error) {
			n, err := a.queue.DeleteExpired(ctx)
			return int64(n), err
		}, a.log)
	})
	a.worker("response expiry", func(ctx context.Context) {
		expireEvery(ctx, time.Minute, "responses", func(ctx context.Context) (int64, error) { return a.store.DeleteExpiredResponses(ctx, time.Now()) }, a.log)
	})
	a.worker("link expiry", func(ctx context.Context) {
		// Used or expired more than models.LinkKeep ago.
		expireEvery(ctx, 10*time.Minute, "links", func(ctx context.Context) (int64, error) { return a.store.DeleteStaleLinks(ctx, time.Now()) }, a.log)
	})
	a.worker("organization purge", func(ctx context.Context) { purgeOrganizationsEvery(ctx, a.store, 10*time.Minute, a.log) })
	a.worker("auto-tuner", func(ctx context.Context) {
		if err := runTuner(ctx, cfg, a.shared, a.accounts, a.store, a.inFlight, a.latency, a.pool, a.log); err != nil {
			a.log.Error("auto-tuner stopped", "err", err)
		}
	})
	served := make(chan error, 1)
	go func() {
		if err := a.srv.Serve(a.ln); !errors.Is(err, http.ErrServerClosed) {
			served <- err
		}
		close(served)
	}()
	return served, nil
}

// worker runs fn as one of the node's named workers, on the workers'
// context, until Shutdown.
func (a *App) worker(name string, fn func(ctx context.Context)) {
	a.workers.Go(func() error {
		fn(a.work)
		a.log.Debug("worker stopped", "worker", name)
		return nil
	})
}

// Shutdown stops the node in dependency order, each step bounded by
// SLUICE_SHUTDOWN_TIMEOUT: stop accepting and drain HTTP; let the jobs
// running finish (or go back to the queue for the next start); stop the
// workers and wait for them; store the usage the last requests made and
// give back what the node holds of the shared buckets; close Redis and the
// database. It returns once nothing of the node runs.
func (a *App) Shutdown(ctx context.Context) error {
	step := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, a.cfg.ShutdownTimeout) }
	var errs []error
	httpCtx, cancel := step()
	errs = append(errs, a.srv.Shutdown(httpCtx))
	cancel()
	queueCtx, cancel := step()
	errs = append(errs, a.queue.Stop(queueCtx))
	cancel()
	if a.stopWorkers != nil {
		a.stopWorkers()
		workersCtx, cancel := step()
		done := make(chan error, 1)
		go func() { done <- a.workers.Wait() }()
		select {
		case err := <-done:
			errs = append(errs, err)
		case <-workersCtx.Done():
			errs = append(errs, errors.New("shutdown: workers still running after SLUICE_SHUTDOWN_TIMEOUT"))
		}
		cancel()
	}
	// Storing the queued usage gets its own deadline: a long stream that
	// used up the HTTP step's must not cost the usage of everything else.
	drainCtx, cancel := step()
	errs = append(errs, a.recorder.Close(drainCtx))
	a.pool.Flush(drainCtx) // what the last requests owe their keys' buckets
	a.shared.flushPrefetch(drainCtx, a.log)
	cancel()
	if a.invoicer != nil {
		a.invoicer.Resign()
	}
	if a.payer != nil {
		a.payer.Resign()
	}
	a.close()
	return errors.Join(errs...)
}

// close undoes Build, last first.
func (a *App) close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
	a.closers = nil
}

// applier applies another node's change on this one; the first event,
// Subscribed, closes subscribed.
func (a *App) applier(ctx context.Context, subscribed chan struct{}) func(cluster.Event) {
	return func(e cluster.Event) {
		var err error
		switch e.Kind {
		case cluster.Subscribed:
			close(subscribed)
		case cluster.UpstreamsChanged:
			err = a.keys.Reload(ctx)
		case cluster.PricesChanged:
			err = a.bill.billing.ReloadPrices(ctx)
		case cluster.AliasesChanged:
			err = a.aliases.Reload(ctx)
		default:
			err = a.dir.Apply(ctx, e)
		}
		if err != nil && ctx.Err() == nil {
			a.log.Warn("applying an invalidation failed; the periodic reload will catch up", "kind", e.Kind, "err", err)
		}
	}
}
