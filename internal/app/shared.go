package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/conversations"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/respcache"
	"github.com/sluicehq/sluice/signing"
)

// Postgres advisory locks that elect a node: the tuner's leader when there
// is no Redis, and the node that closes months' invoices.
const (
	tunerLockKey   = 7234612
	invoiceLockKey = 7234613
	// paymentsLockKey elects the node that charges invoices through Stripe.
	paymentsLockKey = 7234614
)

// The Redis keys of each part of a node, all under SLUICE_REDIS_PREFIX: one
// table, so that no two parts can share one.
const (
	// the shared token buckets (quota.Redis), named by their users:
	// "org:<id>…" (organizations and their tokens), "signup:<address>"
	// (accounts.SignupThrottle), "login|e:<email>" and "login|a:<address>"
	// (accounts.LoginThrottle, both under the hash tag "login")
	redisBuckets       = "q:"
	redisRejections    = ""             // rejection windows: "{<key>}:rej" (quota.RedisWindow)
	redisNonces        = "sign:"        // signed requests' nonces (signing.RedisNonces)
	redisSSOFlows      = "sso:"         // single sign-ons that came back, each finished once (signing.RedisNonces)
	redisCache         = "cache:"       // cached responses (respcache.Redis)
	redisConversations = "session:"     // X-Sluice-Session histories (conversations.Redis)
	redisBudgets       = "budget:"      // budget and prepaid balance reservations (metering.RedisLedger)
	redisInvalidations = "invalidate"   // the channel other nodes' changes arrive on (cluster.Redis)
	redisTunerLeader   = "tuner-leader" // the auto-tuner's lease (quota.RedisLease)
	redisNodes         = "nodes"        // the nodes seen lately, sizing each one's share in an outage (cluster.Presence)
)

// shared is the state a node shares with the others through Redis, or, with
// no Redis, keeps to itself: limits, rejection windows, invalidations, the
// tuner's leader, signed requests' nonces, the response cache, chat
// histories and budget reservations. newShared makes the one choice.
type shared struct {
	limiter  quota.Limiter
	prefetch *quota.Prefetch // the limiter with Redis, to run and flush; nil without
	// presence counts the nodes sharing Redis, and observeNodes hands the
	// count to what shares limits and budgets 1/N in an outage; nil
	// without Redis.
	presence      *cluster.Presence
	observeNodes  func(int)
	window        quota.RejectionWindow
	bus           cluster.Bus
	leader        quota.Leader
	listen        func(ctx context.Context, apply func(cluster.Event)) // nil without Redis
	status        func() quota.LimiterStatus
	nonces        signing.Nonces
	ssoFlows      signing.Nonces // single sign-ons finished (accounts.UsedFlows)
	cache         respcache.Cache
	conversations conversations.Store
	ledger        metering.Ledger
	redis         *redis.Client // the node's Redis client for all but the limiter; nil without Redis
	limiterRedis  *redis.Client // the limiter's own client (newLimiterClient); nil without Redis
	close         func()
}

// newShared builds a node's shared state for cfg. Redis being down at start
// is not an error: the degrading limiter starts on local limits and
// switches when Redis answers.
func newShared(cfg config.Config, db *models.DB, store *models.Store, log *slog.Logger, metrics *prometheus.Registry) (*shared, error) {
	degraded := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_limiter_degraded",
		Help: "1 while Redis is unreachable and limits are enforced locally at a per-node share."})
	metrics.MustRegister(degraded)
	seed, funds := metering.StoreSeed(store), metering.WithFunds(metering.StoreFunds(store))
	if cfg.RedisURL == "" {
		return alone(cfg, db, store, seed, funds)
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
	key := func(part string) string { return cfg.RedisPrefix + part }
	buckets := quota.NewRedis(lclient, key(redisBuckets))
	limiter := quota.NewDegrading(buckets, quota.NewMemory(nil), quota.DegradingOptions{
		Share: cfg.ExpectedNodes, Timeout: cfg.LimiterTimeout, Logger: log,
		OnStateChange: func(d bool) {
			if d {
				degraded.Set(1)
			} else {
				degraded.Set(0)
			}
		},
	})
	warmLimiter(buckets, limiter, cfg, log)
	metrics.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_limiter_local_fallbacks_total",
			Help: "Admissions decided by local limits because Redis did not answer in time."}, func() float64 { return float64(limiter.Fallbacks()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_limiter_shared_failures_total",
			Help: "Shared-limiter calls that failed or ran past SLUICE_LIMITER_TIMEOUT; three in a row switch the node to local limits."},
			func() float64 { return float64(limiter.Failures()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_limiter_outages_total",
			Help: "Switches to local limits (Redis unreachable or too slow); each may admit the README's bound beyond the bucket."},
			func() float64 { return float64(limiter.Outages()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_limiter_reconciled_tokens_total",
			Help: "Tokens admitted by local limits and charged to the shared buckets once Redis answered again."},
			func() float64 { return float64(limiter.Reconciled()) }),
	)
	bus := cluster.NewRedis(client, key(redisInvalidations), log)
	nodeID := cfg.NodeID
	if nodeID == "" {
		host, _ := os.Hostname()
		nodeID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	lease := quota.NewRedisLease(client, key(redisTunerLeader), nodeID, 3*cfg.TuneInterval)
	presence := cluster.NewPresence(client, key(redisNodes), nodeID, nil)
	// Buckets far from empty are charged for many requests per round trip;
	// near empty, one each. What is not spent goes back (runPrefetch,
	// flushPrefetch).
	prefetch := quota.NewPrefetch(limiter, nil)
	metrics.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_limiter_prefetch_given_back_total",
		Help: "Units of the shared buckets that this node was charged for in advance, did not spend and gave back."},
		func() float64 { return float64(prefetch.GivenBack()) }))
	metrics.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_limiter_prefetch_not_given_back_total",
		Help: "Units of the shared buckets that this node was charged for in advance, did not spend and could not give back (the call failed or came late, or Redis had lost its state): allowance lost to the cluster."},
		func() float64 { return float64(prefetch.NotGivenBack()) }))
	// Budgets per node while Redis is unreachable.
	ledger := metering.NewFallbackLedger(metering.NewRedisLedger(client, key(redisBudgets), seed, funds), seed, cfg.ExpectedNodes, log, funds)
	return &shared{
		limiter:  prefetch,
		prefetch: prefetch,
		presence: presence,
		observeNodes: func(n int) {
			limiter.ObserveNodes(n)
			ledger.ObserveNodes(n)
		},
		window: quota.FallbackWindow{Shared: quota.NewRedisWindow(client, key(redisRejections)), Local: quota.NewMemoryWindow(nil),
			Timeout: cfg.RedisTimeout},
		bus:    bus,
		leader: lease,
		listen: bus.Listen,
		// Nonces in Redis, so a replay sent to another node is caught, and in
		// this node's memory too, which carries signed traffic through a Redis
		// outage (a replay across nodes during the outage would pass; see
		// signing.FallbackNonces).
		nonces: signing.NewFallbackNonces(signing.NewRedisNonces(client, key(redisNonces)), signing.NewMemoryNonces(nil),
			cfg.RedisTimeout, nil),
		// The same for single sign-on's callbacks: each is finished once,
		// whichever node it reaches.
		ssoFlows: signing.NewFallbackNonces(signing.NewRedisNonces(client, key(redisSSOFlows)), signing.NewMemoryNonces(nil),
			cfg.RedisTimeout, nil),
		cache:         respcache.NewRedis(client, key(redisCache)),
		conversations: conversations.NewRedis(client, key(redisConversations), cfg.ConversationTTL),
		ledger:        ledger,
		redis:         client,
		limiterRedis:  lclient,
		status: func() quota.LimiterStatus {
			return quota.LimiterStatus{Mode: limiter.State(), Nodes: limiter.Share()}
		},
		close: func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			lease.Release(ctx)
			_ = presence.Leave(ctx)
			client.Close()
			lclient.Close()
		},
	}, nil
}

// alone is a node's state without Redis: everything in process, but the
// tuner's leader (a Postgres advisory lock, so nodes on one database still
// elect one) and budgets on Postgres (reserved in the database, so nodes on
// one database share them).
func alone(cfg config.Config, db *models.DB, store *models.Store, seed metering.Seed, funds metering.LedgerOption) (*shared, error) {
	cache, err := respcache.NewMemory(cfg.CacheMaxBytes, nil)
	if err != nil {
		return nil, err
	}
	var ledger metering.Ledger = metering.NewMemoryLedger(seed, funds)
	if db.Dialect == "postgres" {
		ledger = metering.NewSQLLedger(store, seed)
	}
	leader := models.NewAdvisoryLeader(db, tunerLockKey)
	return &shared{
		limiter: quota.NewMemory(nil), window: quota.NewMemoryWindow(nil), bus: cluster.None{}, leader: leader,
		status:        func() quota.LimiterStatus { return quota.LimiterStatus{Mode: "local", Nodes: cfg.ExpectedNodes} },
		nonces:        signing.NewMemoryNonces(nil),
		ssoFlows:      signing.NewMemoryNonces(nil),
		cache:         cache,
		conversations: conversations.NewMemory(cfg.ConversationTTL, nil),
		ledger:        ledger,
		close: func() {
			leader.Resign()
			cache.Close()
		},
	}, nil
}

// runPrefetch gives back, until ctx ends, what the node was charged for in
// advance and let expire unspent.
func (a *shared) runPrefetch(ctx context.Context) {
	if a.prefetch != nil {
		a.prefetch.Run(ctx)
	}
}

// runPresence counts the nodes sharing Redis, until ctx ends, and sizes
// this node's share of every limit and budget in an outage by it.
func (a *shared) runPresence(ctx context.Context) {
	if a.presence != nil {
		a.presence.Run(ctx, a.observeNodes)
	}
}

// flushPrefetch gives back all the node was charged for in advance and
// did not spend: when it stops, after its last request, so that what it
// held is not lost to the cluster.
func (a *shared) flushPrefetch(ctx context.Context, log *slog.Logger) {
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
