package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/conversations"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/providers"
	"github.com/sluicehq/sluice/respcache"
	"github.com/sluicehq/sluice/secrets"
	"github.com/sluicehq/sluice/upstream"
)

// generation is a node's way to answer chat requests beyond the local
// model: the provider key pool, the response cache and conversation
// histories, in process or in Redis.
type generation struct {
	pool          *upstream.Pool
	providers     *providers.Service
	cache         respcache.Cache
	conversations conversations.Store
	close         func()
}

// newBox opens the master key that seals provider keys and webhook
// secrets: the configured one, or in the embedded default a key of its own
// in the data dir.
func newBox(cfg config.Config) (*secrets.Box, error) {
	master := cfg.MasterKey
	if master == nil {
		var err error
		if master, err = secrets.LoadOrCreateMasterKey(cfg.DataDir); err != nil {
			return nil, fmt.Errorf("master key: %w", err)
		}
	}
	return secrets.NewBox(master)
}

// newGeneration builds the provider side; transport carries requests to
// providers (nil: a pooled transport of its own).
func newGeneration(ctx context.Context, cfg config.Config, store *models.Store, box *secrets.Box, adm *admission, log *slog.Logger,
	metrics *prometheus.Registry, transport http.RoundTripper) (*generation, error) {
	if transport == nil {
		transport = &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}
	}
	g := &generation{close: func() {}}
	g.pool = upstream.NewPool(upstream.PoolOptions{
		Limiter: adm.limiter,
		Client: &http.Client{
			Transport: transport,
			// A redirected POST would silently lose its body: a redirect is a
			// misconfigured base URL, and the pool counts it as a failure.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		AttemptTimeout: cfg.UpstreamAttempt,
		Budget:         cfg.UpstreamBudget,
		MaxBackoff:     cfg.UpstreamMaxBackoff,
		StallTimeout:   cfg.UpstreamAttempt,
		Log:            log,
	})
	metrics.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_upstream_retries_total",
		Help: "Provider attempts that were retries."}, func() float64 { return float64(g.pool.Retries()) }))
	g.providers = providers.New(store, box, g.pool, adm.bus, log)
	if err := g.providers.Reload(ctx); err != nil {
		return nil, err
	}
	if adm.redis != nil { // the admission's client: short timeouts, no retries
		g.cache = respcache.NewRedis(adm.redis, cfg.RedisPrefix+"cache:")
		g.conversations = conversations.NewRedis(adm.redis, cfg.RedisPrefix+"session:", cfg.ChatSessionTTL)
		return g, nil
	}
	mem, err := respcache.NewMemory(cfg.CacheMaxBytes, nil)
	if err != nil {
		return nil, err
	}
	g.cache = mem
	g.conversations = conversations.NewMemory(cfg.ChatSessionTTL, nil)
	g.close = mem.Close
	return g, nil
}
