package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/signing"
	"github.com/sluicehq/sluice/upstream"
)

// Postgres advisory locks that elect a node: the tuner's leader when there
// is no Redis, and the node that closes months' invoices.
const (
	tunerLockKey   = 7234612
	invoiceLockKey = 7234613
)

// admission is a node's quota machinery: in process for a single node, or
// shared through Redis for a cluster.
type admission struct {
	limiter      quota.Limiter
	prefetch     *quota.Prefetch // the limiter with Redis, to run and flush; nil without
	window       quota.RejectionWindow
	bus          cluster.Bus
	leader       quota.Leader
	listen       func(ctx context.Context, apply func(cluster.Event)) // nil without Redis
	status       func() quota.LimiterStatus
	redis        *redis.Client // the node's Redis client for all but the limiter; nil without Redis
	limiterRedis *redis.Client // the limiter's own client (newLimiterClient); nil without Redis
	close        func()
}

// nonces is where signed requests' nonces are remembered: Redis, so a
// replay sent to another node is caught, and this node's memory too, which
// carries signed traffic through a Redis outage (a replay across nodes
// during the outage would pass; see signing.FallbackNonces); memory alone
// without Redis.
func (a *admission) nonces(cfg config.Config) signing.Nonces {
	local := signing.NewMemoryNonces(nil)
	if a.redis == nil {
		return local
	}
	return signing.NewFallbackNonces(signing.NewRedisNonces(a.redis, cfg.RedisPrefix+"sign:"), local, cfg.RedisTimeout, nil)
}

// newAdmission builds the limiter, rejection window, invalidation bus and
// tuner leader for cfg. Redis being down at start is not an error: the
// degrading limiter starts on local limits and switches when Redis answers.
func newAdmission(cfg config.Config, db *models.DB, log *slog.Logger, metrics *prometheus.Registry) (*admission, error) {
	degraded := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_limiter_degraded",
		Help: "1 while Redis is unreachable and limits are enforced locally at a per-node share."})
	metrics.MustRegister(degraded)
	if cfg.RedisURL == "" {
		leader := models.NewAdvisoryLeader(db, tunerLockKey)
		return &admission{
			limiter: quota.NewMemory(nil), window: quota.NewMemoryWindow(nil), bus: cluster.None{}, leader: leader,
			status: func() quota.LimiterStatus { return quota.LimiterStatus{Mode: "local", Nodes: cfg.ExpectedNodes} },
			close:  leader.Resign,
		}, nil
	}
	opts, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	// Short timeouts: a slow Redis must turn into cache misses quickly, not
	// into slow requests.
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = cfg.RedisTimeout*5, cfg.RedisTimeout, cfg.RedisTimeout
	// No retries: a retried EVALSHA could run the script twice and charge
	// twice. Deadlines from the request context are honoured.
	opts.MaxRetries, opts.DialerRetries, opts.ContextTimeoutEnabled = -1, 1, true
	lclient, err := newLimiterClient(cfg)
	if err != nil {
		return nil, err
	}
	client := redis.NewClient(opts)
	shared := quota.NewRedis(lclient, cfg.RedisPrefix+"q:")
	limiter := quota.NewDegrading(shared, quota.NewMemory(nil), quota.DegradingOptions{
		Share: cfg.ExpectedNodes, Timeout: cfg.LimiterTimeout, Logger: log,
		OnStateChange: func(d bool) {
			if d {
				degraded.Set(1)
			} else {
				degraded.Set(0)
			}
		},
	})
	warmLimiter(shared, limiter, cfg, log)
	metrics.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_limiter_local_fallbacks_total",
			Help: "Admissions decided by local limits because Redis did not answer in time."}, func() float64 { return float64(limiter.Fallbacks()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_limiter_shared_failures_total",
			Help: "Shared-limiter calls that failed or ran past SLUICE_LIMITER_TIMEOUT; three in a row switch the node to local limits."},
			func() float64 { return float64(limiter.Failures()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_limiter_reconciled_tokens_total",
			Help: "Tokens admitted by local limits and charged to the shared buckets once Redis answered again."},
			func() float64 { return float64(limiter.Reconciled()) }),
	)
	bus := cluster.NewRedis(client, cfg.RedisPrefix+"invalidate", log)
	nodeID := cfg.NodeID
	if nodeID == "" {
		host, _ := os.Hostname()
		nodeID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	lease := quota.NewRedisLease(client, cfg.RedisPrefix+"tuner-leader", nodeID, 3*cfg.TuneInterval)
	// Buckets far from empty are charged for many requests per round trip;
	// near empty, one each. What is not spent goes back (runPrefetch,
	// flushPrefetch).
	prefetch := quota.NewPrefetch(limiter, nil)
	metrics.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_limiter_prefetch_given_back_total",
		Help: "Units of the shared buckets that this node was charged for in advance, did not spend and gave back."},
		func() float64 { return float64(prefetch.GivenBack()) }))
	return &admission{
		limiter:      prefetch,
		prefetch:     prefetch,
		window:       quota.FallbackWindow{Shared: quota.NewRedisWindow(client, cfg.RedisPrefix), Local: quota.NewMemoryWindow(nil), Timeout: cfg.RedisTimeout},
		bus:          bus,
		leader:       lease,
		listen:       bus.Listen,
		redis:        client,
		limiterRedis: lclient,
		status: func() quota.LimiterStatus {
			return quota.LimiterStatus{Mode: limiter.State(), Nodes: cfg.ExpectedNodes}
		},
		close: func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			lease.Release(ctx)
			client.Close()
			lclient.Close()
		},
	}, nil
}

// runPrefetch gives back, until ctx ends, what the node was charged for in
// advance and let expire unspent.
func (a *admission) runPrefetch(ctx context.Context) {
	if a.prefetch != nil {
		a.prefetch.Run(ctx)
	}
}

// flushPrefetch gives back all the node was charged for in advance and
// did not spend: when it stops, after its last request, so that what it
// held is not lost to the cluster.
func (a *admission) flushPrefetch(ctx context.Context, log *slog.Logger) {
	if a.prefetch == nil {
		return
	}
	if err := a.prefetch.Flush(ctx); err != nil {
		log.Warn("giving back what the limiter held failed", "err", err)
	}
}

// limiterWarmConns is how many connections the limiter's pool opens before
// the node serves (at most SLUICE_MAX_CONCURRENCY) and keeps idle after: a
// round trip takes well under a millisecond, so a few connections carry
// thousands of admissions a second, and more are dialled as load needs them.
const limiterWarmConns = 16

// newLimiterClient is the shared limiter's own Redis client, apart from the
// one the cache, sessions and invalidations use, so that their traffic and
// their shorter budget do not touch admissions:
//
//   - the pool holds SLUICE_MAX_CONCURRENCY connections, one per request the
//     node serves at once, so no admission waits for another's connection;
//   - calls are bounded by SLUICE_LIMITER_TIMEOUT (dials included, which the
//     pool runs apart from the waiting request and hands to whichever request
//     needs a connection first);
//   - no retries: a retried EVALSHA could run the script twice and charge
//     twice.
func newLimiterClient(cfg config.Config) (*redis.Client, error) {
	opts, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	t := cfg.LimiterTimeout
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout, opts.PoolTimeout = t, t, t, t
	opts.PoolSize = cfg.MaxConcurrency
	opts.MinIdleConns = min(cfg.MaxConcurrency, limiterWarmConns)
	opts.MaxRetries, opts.DialerRetries, opts.ContextTimeoutEnabled = -1, 1, true
	return redis.NewClient(opts), nil
}

// warmLimiter opens the limiter's connections and loads its scripts before
// the node serves, bounded by a few limiter budgets. If Redis cannot be
// reached then the node starts on local limits, and its first requests do
// not each wait for a timeout to find out.
func warmLimiter(shared *quota.Redis, limiter *quota.Degrading, cfg config.Config, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*cfg.LimiterTimeout)
	defer cancel()
	start := time.Now()
	if err := shared.Warm(ctx, min(cfg.MaxConcurrency, limiterWarmConns)); err != nil {
		limiter.Unavailable(err)
		return
	}
	log.Debug("limiter connections ready", "conns", min(cfg.MaxConcurrency, limiterWarmConns), "took", time.Since(start))
}

// runTuner samples this node's load and, while it leads, lowers or restores
// autotuned tiers' refill.
func runTuner(ctx context.Context, cfg config.Config, a *admission, acc *accounts.Service, store *models.Store,
	inFlight *quota.InFlight, latency *quota.LatencyWindow, pool *upstream.Pool, log *slog.Logger) error {
	upstreamRate := rateMeter{now: time.Now}
	return quota.RunTuner(ctx, quota.TunerRunConfig{
		Interval: cfg.TuneInterval,
		Leader:   a.leader,
		Log:      log,
		Sample: func(context.Context) (quota.LoadSample, error) {
			rate, capacity := upstreamRate.sample(pool.Status())
			return quota.LoadSample{InFlight: inFlight.Value(), Concurrency: cfg.MaxConcurrency,
				UpstreamRate: rate, UpstreamCapacity: capacity,
				P95: latency.P95(), LatencyTarget: cfg.LatencyTarget}, nil
		},
		Tiers: func(ctx context.Context) ([]quota.TunedTier, error) {
			ts, err := store.Tiers(ctx)
			out := make([]quota.TunedTier, len(ts))
			for i, t := range ts {
				out[i] = quota.TunedTier{Name: t.Name, Configured: t.RefillPerSec, Floor: t.RefillFloor, Effective: t.EffectiveRefill(), Autotune: t.Autotune}
			}
			return out, err
		},
		Apply: func(ctx context.Context, evs []quota.TuningEvent) error {
			rows := make([]models.TuningEvent, len(evs))
			for i, e := range evs {
				rows[i] = models.TuningEvent{Tier: e.Tier, FromRefill: e.From, ToRefill: e.To, Load: e.Load, CreatedAt: e.At.UTC()}
				log.Info("auto-tuner changed a tier's refill", "tier", e.Tier, "from", e.From, "to", e.To, "load", e.Load)
			}
			return acc.ApplyTuning(ctx, rows)
		},
	})
}

// rateMeter turns the pool's request counters into the admitted upstream
// rate, and the keys' RPM into the capacity it is measured against. Keys
// with no RPM (unknown capacity) are left out of both.
type rateMeter struct {
	now  func() time.Time
	last time.Time
	seen int64
}

func (m *rateMeter) sample(keys []upstream.KeyStatus) (rate, capacity float64) {
	var total int64
	for _, k := range keys {
		if k.RPM > 0 && k.State != upstream.Disabled {
			total += k.Requests
			capacity += float64(k.RPM) / 60
		}
	}
	now := m.now()
	if !m.last.IsZero() && now.After(m.last) && total >= m.seen {
		rate = float64(total-m.seen) / now.Sub(m.last).Seconds()
	}
	m.last, m.seen = now, total
	return rate, capacity
}
