// Sluice is a metered gateway for text-generation APIs. See README.md.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/batches"
	"github.com/sluicehq/sluice/billing"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/completion"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/handlers"
	"github.com/sluicehq/sluice/internal/datadir"
	"github.com/sluicehq/sluice/internal/gcfloor"
	"github.com/sluicehq/sluice/jobs"
	"github.com/sluicehq/sluice/logging"
	"github.com/sluicehq/sluice/metering"
	mtr "github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/signing"
	"github.com/sluicehq/sluice/upstream/local"
	"github.com/sluicehq/sluice/web"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if os.Getenv("GOGC") == "" { // an operator's GOGC is theirs
		defer gcfloor.Follow(gcHeapFloor)()
	}
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sluice:", err)
		os.Exit(1)
	}
}

// gcHeapFloor is the smallest heap goal the garbage collector gets: it
// runs a tenth as often on the embedded default's small heap, whose
// collections made the tail at load (docs/BENCHMARKS.md).
const gcHeapFloor = 64 << 20

// run builds Sluice from its configuration and serves until ctx ends, then
// shuts down gracefully: in-flight requests finish and every usage event is
// stored before it returns.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	return runWith(ctx, args, getenv, stdout, seams{})
}

// seams are the parts of a running Sluice a test may replace; production
// replaces none.
type seams struct {
	// providerTransport carries requests to providers (a test's may fail
	// in ways no real server can make it); nil: Sluice's own.
	providerTransport http.RoundTripper
}

// runWith is run with seams s.
func runWith(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer, s seams) error {
	cfg, err := config.Load(args, getenv)
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	log := logging.New(stdout, cfg.LogLevel, cfg.LogFormat)

	if cfg.Embedded() || cfg.MasterKey == nil {
		// The data directory holds the database and the master key: 0700,
		// its files 0600, an existing one tightened.
		changes, err := datadir.Prepare(cfg.DataDir)
		if err != nil {
			return err
		}
		for _, c := range changes {
			log.Warn("the data directory was readable by others: tightened", "path", c.Path,
				"from", fmt.Sprintf("%04o", c.From), "to", fmt.Sprintf("%04o", c.To))
		}
	}
	db, err := models.Open(ctx, cfg.DatabaseURL, cfg.SQLitePath())
	if err != nil {
		return err
	}
	defer db.Close()
	if err := prepareSchema(ctx, cfg, db, stdout); err != nil || cfg.Command == "migrate" {
		return err
	}

	store := models.NewStore(db)
	secret := cfg.SessionSecret
	if secret == "" {
		// Generated once and kept in the database, so restarts and other
		// nodes keep accepting the same sessions.
		if secret, err = store.SettingOrInit(ctx, "session_secret", rand.Text()+rand.Text()); err != nil {
			return err
		}
	}
	metrics := prometheus.NewRegistry()
	adm, err := newAdmission(cfg, db, log, metrics)
	if err != nil {
		return err
	}
	defer adm.close()
	box, err := newBox(cfg)
	if err != nil {
		return err
	}
	dir, err := accounts.NewDirectory(ctx, store, cfg.TokenCacheTTL, nil, accounts.WithSigningSecrets(box))
	if err != nil {
		return err
	}
	// Signups per client address draw on the node's limiter: one bucket
	// per address for the whole cluster through Redis, in memory without.
	acc, err := accounts.NewService(store, dir, adm.bus, accounts.NewLoginThrottle(nil), cfg.BcryptCost,
		accounts.WithSignupThrottle(accounts.NewSignupThrottle(adm.limiter, cfg.SignupRate)))
	if err != nil {
		return err
	}
	created, password, err := acc.EnsureAdmin(ctx, cfg.AdminEmail, cfg.AdminPassword)
	if err != nil {
		return fmt.Errorf("create admin account: %w", err)
	}
	if created && password != "" {
		fmt.Fprintf(stdout, "\nCreated the admin account %s with password %s\nIt is shown only this once: sign in and keep it safe.\n\n", cfg.AdminEmail, password)
	}
	model, err := local.New()
	if err != nil {
		return err
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
	recorder := metering.NewRecorder(store, log, time.Second, batch, flushObserver(metrics), placement)
	gateway := mtr.NewGateway(metrics)
	gateway.KnowTiers(func() []string {
		var names []string
		for _, t := range dir.Tiers() {
			names = append(names, t.Name)
		}
		return names
	}, metering.RejectionReasons)

	gen, err := newGeneration(ctx, cfg, store, box, adm, log, metrics, s.providerTransport)
	if err != nil {
		return err
	}
	defer gen.close()
	bill := newBilling(cfg, store, db, adm, dir, box, log)
	if err := bill.prices.Load(ctx, store); err != nil {
		return err
	}

	pipeline := completion.New(completion.Deps{
		Log: log, Now: time.Now,
		Limiter: adm.limiter, Freezes: dir, Freezer: acc, Detector: quota.NewDetector(adm.window),
		Scorer:          quota.NewValueScorer(quota.DefaultValueRules(), nil),
		PriorityWeights: cfg.PriorityWeights, DefaultMaxTokens: cfg.DefaultMaxTokens, UsageGrace: cfg.UsageGrace,
		Local: model, Providers: gen.pool,
		Cache: gen.cache, CacheTTL: cfg.CacheTTL,
		Conversations: gen.conversations, HistoryBudget: cfg.ChatSessionBudget,
		Prices: bill.prices, Ledger: bill.ledger, Alerts: bill.alerts, Recorder: recorder,
		Metrics: gateway, LogPrompts: cfg.LogPrompts,
	})
	// The batches hear their lines' outcomes from the queue; the queue
	// takes their lines when one is created.
	batchService := batches.New(batches.Deps{Store: store, Pipeline: pipeline, Log: log},
		batches.Config{FileRetention: cfg.BatchRetention, MaxLineBytes: int(cfg.MaxBodyBytes) + 4<<10, Now: time.Now})
	queue, err := jobs.New(ctx, jobs.Deps{DB: db, DatabaseURL: cfg.DatabaseURL, Pipeline: pipeline, Directory: dir,
		Notify: bill.billing.Notify, Batches: batchService, Log: log}, jobs.Config{Workers: cfg.JobWorkers, MaxAttempts: cfg.JobAttempts,
		Retention: cfg.JobRetention, MaxWait: 2 * time.Second, RetryBase: cfg.JobRetryBase, Now: time.Now})
	if err != nil {
		return err
	}
	inFlight, latency := &quota.InFlight{}, quota.NewLatencyWindow(1024, time.Minute, nil)
	metrics.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_inflight_requests",
		Help: "API requests in flight on this node."}, func() float64 { return float64(inFlight.Value()) }))
	registerState(metrics, dir, func() string { return adm.status().Mode }, gen.pool, recorder, queue)
	metricsHandler := promhttp.HandlerFor(metrics, promhttp.HandlerOpts{})
	ops := handlers.Ops{Ready: readiness(cfg, db, adm, recorder), Gateway: gateway, MetricsToken: cfg.MetricsToken}
	if cfg.MetricsAddr == "" {
		ops.Metrics = metricsHandler
		if cfg.MetricsToken == "" && cfg.DatabaseURL != "" {
			// Production (a shared database) with /metrics open to whoever
			// reaches the API: said once, at start.
			log.Warn("/metrics is served on the public address without a token; set SLUICE_METRICS_TOKEN or SLUICE_METRICS_ADDR")
		}
	}
	sessions := accounts.NewSessions([]byte(secret), cfg.SessionTTL, nil)
	handler := handlers.New(log,
		ops,
		handlers.API{Directory: dir, Pipeline: pipeline, Conversations: gen.conversations, Jobs: queue, Batches: batchService, Callbacks: bill.billing, Models: gen.pool.Models,
			Usage: recorder, Signatures: signing.NewVerifier(adm.nonces(cfg), nil), MaxBodyBytes: cfg.MaxBodyBytes, InFlight: inFlight, Latency: latency, Now: time.Now},
		handlers.Management{Store: store, Accounts: acc, Sessions: sessions, Providers: gen.providers, Billing: bill.billing,
			PoolStatus: gen.pool.Status, Models: gen.pool.Models, Limits: adm.status, MaxBodyBytes: cfg.MaxBodyBytes, Now: time.Now},
		web.New(web.Deps{Log: log, Store: store, Accounts: acc, Sessions: sessions, Providers: gen.providers, Billing: bill.billing,
			PoolStatus: gen.pool.Status, Models: gen.pool.Models, Limits: adm.status, Jobs: queue, Batches: batchService, Now: time.Now}),
	)
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s (SLUICE_ADDR): %w", cfg.Addr, err)
	}
	// Hear other nodes' changes before serving: an invalidation published
	// before the subscription would be missed until the periodic reload.
	if adm.listen != nil {
		subscribed := make(chan struct{})
		go adm.listen(ctx, func(e cluster.Event) {
			var err error
			switch e.Kind {
			case cluster.Subscribed:
				close(subscribed)
			case cluster.UpstreamsChanged:
				err = gen.providers.Reload(ctx)
			case cluster.PricesChanged:
				err = bill.billing.ReloadPrices(ctx)
			default:
				err = dir.Apply(ctx, e)
			}
			if err != nil && ctx.Err() == nil {
				log.Warn("applying an invalidation failed; the periodic reload will catch up", "kind", e.Kind, "err", err)
			}
		})
		select {
		case <-subscribed:
		case <-time.After(5 * time.Second):
			log.Warn("not subscribed to other nodes' changes yet; serving anyway (the periodic reload catches up)")
		}
	}
	if cfg.PprofAddr != "" {
		go servePprof(ctx, cfg.PprofAddr, log)
	}
	if cfg.MetricsAddr != "" {
		go serveMetrics(ctx, cfg.MetricsAddr, cfg.MetricsToken, metricsHandler, log)
	}
	go reloadEvery(ctx, dir, bill.billing, cfg.TokenCacheTTL, log)
	go gen.providers.PersistRefusals(ctx, gen.pool.Refusals())
	go gen.pool.Run(ctx)
	go adm.runPrefetch(ctx)
	go bill.alerts.Run(ctx)
	invoicer := models.NewAdvisoryLeader(db, invoiceLockKey)
	defer invoicer.Resign()
	go bill.billing.RunFinalizer(ctx, cfg.FinalizeInterval, invoicer)
	if err := queue.Start(ctx); err != nil {
		return fmt.Errorf("start the job queue: %w", err)
	}
	go batchService.Run(ctx, queue, time.Minute)
	go expireJobsEvery(ctx, queue, time.Minute, log)
	go func() {
		if err := runTuner(ctx, cfg, adm, acc, store, inFlight, latency, gen.pool, log); err != nil {
			log.Error("auto-tuner stopped", "err", err)
		}
	}()
	fmt.Fprintf(stdout, "Sluice is listening on %s — open it in your browser.\n", browserURL(ln.Addr()))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		queue.Stop(context.Background())
		recorder.Close(context.Background())
		adm.flushPrefetch(context.Background(), log)
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}

	log.Info("shutting down: finishing in-flight requests")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	errShutdown := srv.Shutdown(shutdownCtx)
	// Jobs in flight finish (or go back to the queue for the next start)
	// before the usage they made is drained.
	errQueue := queue.Stop(shutdownCtx)
	// Storing the queued usage gets its own deadline: a long stream that
	// used up the first must not cost the usage of everything else.
	drainCtx, cancelDrain := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancelDrain()
	errRecorder := recorder.Close(drainCtx)
	gen.pool.Flush(drainCtx) // what the last requests owe their keys' buckets
	adm.flushPrefetch(drainCtx, log)
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return errors.Join(errShutdown, errQueue, errRecorder)
}

// prepareSchema applies migrations when asked to (always for `sluice
// migrate`), and otherwise refuses to serve on an older schema.
func prepareSchema(ctx context.Context, cfg config.Config, db *models.DB, stdout io.Writer) error {
	sqlDB, err := db.SQL()
	if err != nil {
		return err
	}
	dialect := migrations.Dialect(db.Dialect)
	if cfg.Command == "migrate" || cfg.AutoMigrate {
		applied, err := migrations.Apply(ctx, sqlDB, dialect)
		if err != nil {
			return err
		}
		queueApplied, err := jobs.Migrate(ctx, db, cfg.DatabaseURL)
		if err != nil {
			return err
		}
		if len(applied) > 0 || queueApplied > 0 || cfg.Command == "migrate" {
			fmt.Fprintf(stdout, "Database (%s) migrated: applied %v, and %d job queue migrations\n", dialect, applied, queueApplied)
		}
		return nil
	}
	if err := migrations.Check(ctx, sqlDB, dialect); err != nil {
		return err
	}
	return jobs.CheckMigrated(ctx, db, cfg.DatabaseURL)
}

// reloadEvery refreshes tiers, freezes and prices from the database, so a
// change made on another node is picked up within one interval even if its
// invalidation message was lost.
func reloadEvery(ctx context.Context, dir *accounts.Directory, bill *billing.Service, interval time.Duration, log *slog.Logger) {
	every(ctx, interval, func(ctx context.Context) {
		err := errors.Join(dir.ReloadTiers(ctx), dir.ReloadFreezes(ctx), bill.ReloadPrices(ctx))
		if err != nil && ctx.Err() == nil {
			log.Warn("reloading tiers, freezes and prices failed; keeping the last ones", "err", err)
		}
	})
}

// expireJobsEvery deletes the jobs past their retention every interval.
func expireJobsEvery(ctx context.Context, queue *jobs.Queue, interval time.Duration, log *slog.Logger) {
	every(ctx, interval, func(ctx context.Context) {
		n, err := queue.DeleteExpired(ctx)
		if err != nil && ctx.Err() == nil {
			log.Warn("deleting expired jobs failed; the next run tries again", "err", err)
		} else if n > 0 {
			log.Info("deleted expired jobs", "jobs", n)
		}
	})
}

// every runs fn every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn(ctx)
		}
	}
}

// browserURL turns a listener address into a URL a person can open.
func browserURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() || ip.IsLoopback() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// servePprof serves Go's profiler on a loopback address, for operators
// chasing a hot spot; it is off unless SLUICE_PPROF_ADDR is set.
func servePprof(ctx context.Context, addr string, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("pprof server stopped", "err", err)
	}
}
