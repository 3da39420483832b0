package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/handlers"
	"github.com/sluicehq/sluice/jobs"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/upstream"
)

// registerState adds to reg what operators page on, read when Prometheus
// scrapes: freezes, tiers' refill, the limiter's mode, provider keys, the
// recorder's backlog and losses, and the job queue.
func registerState(reg *prometheus.Registry, dir *accounts.Directory, limits func() string, pool *upstream.Pool,
	rec *metering.Recorder, queue *jobs.Queue) {
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	gaugeFunc := func(name, help string, fn func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, fn)
	}
	counterFunc := func(name, help string, fn func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, fn)
	}
	reg.MustRegister(
		gaugeFunc("sluice_freezes_active", "Tokens frozen now.", func() float64 { return float64(dir.ActiveFreezes()) }),
		metrics.State("sluice_tier_refill_per_second", "Each tier's refill: as configured, and in effect (the auto-tuner may lower it).",
			gauge, []string{"tier", "kind"}, func() []metrics.Sample {
				var out []metrics.Sample
				for _, t := range dir.Tiers() {
					out = append(out, metrics.Sample{Labels: []string{t.Name, "configured"}, Value: t.RefillPerSec},
						metrics.Sample{Labels: []string{t.Name, "effective"}, Value: t.EffectiveRefill()})
				}
				return out
			}),
		metrics.State("sluice_limiter_mode", "Where bucket state lives: 1 for the current mode (local, shared, degraded).",
			gauge, []string{"mode"}, func() []metrics.Sample {
				mode := limits()
				var out []metrics.Sample
				for _, m := range []string{"local", "shared", "degraded"} {
					v := 0.0
					if m == mode {
						v = 1
					}
					out = append(out, metrics.Sample{Labels: []string{m}, Value: v})
				}
				return out
			}),
		metrics.State("sluice_upstream_key_state", "Each provider key's state: 1 for the current one (healthy, cooling, open, disabled).",
			gauge, []string{"key", "state"}, func() []metrics.Sample {
				var out []metrics.Sample
				for _, k := range pool.Status() {
					for _, s := range []upstream.KeyState{upstream.Healthy, upstream.Cooling, upstream.Open, upstream.Disabled} {
						v := 0.0
						if k.State == s {
							v = 1
						}
						out = append(out, metrics.Sample{Labels: []string{k.Name, string(s)}, Value: v})
					}
				}
				return out
			}),
		metrics.State("sluice_upstream_healthy_keys", "Healthy provider keys able to serve each model named in a key's model list (*: keys serving any model, also counted for every model).",
			gauge, []string{"model"}, func() []metrics.Sample { return healthyKeys(pool.Status()) }),
		metrics.State("sluice_upstream_key_requests_per_minute", "The rate each provider key is paced to (configured or learned from the provider's headers); 0: not paced.",
			gauge, []string{"key"}, func() []metrics.Sample {
				var out []metrics.Sample
				for _, k := range pool.Status() {
					out = append(out, metrics.Sample{Labels: []string{k.Name}, Value: float64(k.RequestLimits.PerMinute)})
				}
				return out
			}),
		metrics.State("sluice_upstream_key_burst", "Each provider key's pacing burst now (learned, halved on a 429).",
			gauge, []string{"key"}, func() []metrics.Sample {
				var out []metrics.Sample
				for _, k := range pool.Status() {
					out = append(out, metrics.Sample{Labels: []string{k.Name}, Value: float64(k.RequestLimits.Burst)})
				}
				return out
			}),
		metrics.State("sluice_upstream_key_requests_total", "Attempts sent through each provider key, and of them failed.",
			counter, []string{"key", "result"}, func() []metrics.Sample {
				var out []metrics.Sample
				for _, k := range pool.Status() {
					out = append(out, metrics.Sample{Labels: []string{k.Name, "sent"}, Value: float64(k.Requests)},
						metrics.Sample{Labels: []string{k.Name, "failed"}, Value: float64(k.Failures)})
				}
				return out
			}),
		counterFunc("sluice_upstream_rate_limited_total", "Provider answers that were 429.", func() float64 { return float64(pool.RateLimited()) }),
		counterFunc("sluice_upstream_pacing_errors_total", "Requests sent unpaced because the limiter failed.",
			func() float64 { return float64(pool.PacingErrors()) }),
		gaugeFunc("sluice_recorder_queue_depth", "Usage events waiting to be stored.", func() float64 { return float64(rec.Depth()) }),
		gaugeFunc("sluice_recorder_queue_capacity", "Usage events the recorder holds before requests wait.",
			func() float64 { return float64(rec.Capacity()) }),
		counterFunc("sluice_recorder_stored_events_total", "Usage events stored.", func() float64 { return float64(rec.Stored()) }),
		counterFunc("sluice_recorder_lost_events_total", "Usage events given up (the database down past the shutdown deadline).",
			func() float64 { return float64(rec.Lost()) }),
	)
	jobState := cachedStats(queue)
	reg.MustRegister(
		gaugeFunc("sluice_jobs_waiting", "Jobs queued and not yet running (scheduled and retrying included).",
			func() float64 { return float64(jobState().Waiting) }),
		gaugeFunc("sluice_jobs_oldest_age_seconds", "How long the oldest waiting job has waited.",
			func() float64 { return jobState().Oldest.Seconds() }),
	)
}

// healthyKeys counts, per model some key lists, the healthy keys that can
// serve it; keys that serve any model count for every model and under "*".
// A model listed only by unhealthy keys reports 0, which is what the alert
// pages on.
func healthyKeys(keys []upstream.KeyStatus) []metrics.Sample {
	counts := map[string]int{}
	anyModel, anyKeys := 0, 0
	for _, k := range keys {
		up := 0
		if k.State == upstream.Healthy {
			up = 1
		}
		if len(k.Models) == 0 {
			anyModel += up
			anyKeys++
			continue
		}
		for _, m := range k.Models {
			counts[m] += up
		}
	}
	var out []metrics.Sample
	if anyKeys > 0 {
		out = append(out, metrics.Sample{Labels: []string{"*"}, Value: float64(anyModel)})
	}
	for m, n := range counts {
		out = append(out, metrics.Sample{Labels: []string{m}, Value: float64(n + anyModel)})
	}
	return out
}

// cachedStats reads the queue's stats at most once a second, so two
// series of one scrape cost one query.
func cachedStats(q *jobs.Queue) func() jobs.Stats {
	var mu sync.Mutex
	var at time.Time
	var last jobs.Stats
	return func() jobs.Stats {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(at) > time.Second {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if s, err := q.Stats(ctx); err == nil {
				last = s
			}
			at = time.Now()
		}
		return last
	}
}

// flushObserver feeds the recorder's flush latency histogram.
func flushObserver(reg *prometheus.Registry) metering.Option {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_recorder_flush_seconds",
		Help:    "Time to store one batch of usage events, retries included.",
		Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}})
	reg.MustRegister(h)
	return metering.WithFlushObserver(func(_ int, took time.Duration) { h.Observe(took.Seconds()) })
}

// readiness is what /readyz checks: the database answers, the schema is
// current (checked at most every 30 s: it is not free), Redis answers when
// configured, and the recorder is not backed up.
func readiness(cfg config.Config, db *models.DB, sh *shared, rec *metering.Recorder) func(context.Context) []handlers.Check {
	var mu sync.Mutex
	var checkedAt time.Time
	var schemaErr error
	return func(ctx context.Context) []handlers.Check {
		checks := []handlers.Check{{Name: "database", Err: db.Ping(ctx)}}
		mu.Lock()
		if time.Since(checkedAt) > 30*time.Second || schemaErr != nil {
			schemaErr = schemaCurrent(ctx, cfg, db)
			checkedAt = time.Now()
		}
		err := schemaErr
		mu.Unlock()
		checks = append(checks, handlers.Check{Name: "migrations", Err: err})
		if sh.redis != nil {
			checks = append(checks, handlers.Check{Name: "redis", Err: sh.redis.Ping(ctx).Err()})
		}
		var backlog error
		if d, c := rec.Depth(), rec.Capacity(); d*10 >= c*9 {
			backlog = fmt.Errorf("%d of %d usage events waiting to be stored", d, c)
		}
		return append(checks, handlers.Check{Name: "recorder", Err: backlog})
	}
}

func schemaCurrent(ctx context.Context, cfg config.Config, db *models.DB) error {
	sqlDB, err := db.SQL()
	if err != nil {
		return err
	}
	return errors.Join(migrations.Check(ctx, sqlDB, migrations.Dialect(db.Dialect)), jobs.CheckMigrated(ctx, db, cfg.DatabaseURL))
}

// serveMetrics serves /metrics on its own address (SLUICE_METRICS_ADDR)
// until ctx ends, behind the bearer token when one is set.
func serveMetrics(ctx context.Context, addr, token string, h http.Handler, log *slog.Logger) {
	srv := &http.Server{Addr: addr, Handler: handlers.MetricsOnly(token, h), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("metrics server stopped", "err", err)
	}
}
