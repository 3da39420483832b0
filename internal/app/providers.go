package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/providers"
	"github.com/sluicehq/sluice/secrets"
	"github.com/sluicehq/sluice/upstream"
)

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

// newProviders builds the provider side: the key pool, paced by the node's
// limiter, and the service that keeps its keys; transport carries requests
// to providers (nil: a pooled transport of its own).
func newProviders(ctx context.Context, cfg config.Config, store *models.Store, box *secrets.Box, sh *shared, log *slog.Logger,
	metrics *prometheus.Registry, transport http.RoundTripper) (*upstream.Pool, *providers.Service, error) {
	if transport == nil {
		transport = &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}
	}
	pool := upstream.NewPool(upstream.PoolOptions{
		Limiter: sh.limiter,
		Client: &http.Client{
			Transport: transport,
			// A redirected POST would silently lose its body: a redirect is a
			// misconfigured base URL, and the pool counts it as a failure.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		AttemptTimeout: cfg.UpstreamAttempt,
		AnswerTimeout:  cfg.UpstreamAnswer,
		Budget:         cfg.UpstreamBudget,
		MaxBackoff:     cfg.UpstreamMaxBackoff,
		StallTimeout:   cfg.UpstreamAttempt,
		Log:            log,
	})
	metrics.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_upstream_retries_total",
		Help: "Provider attempts that were retries."}, func() float64 { return float64(pool.Retries()) }))
	svc := providers.New(store, box, pool, sh.bus, log)
	if err := svc.Reload(ctx); err != nil {
		return nil, nil, err
	}
	return pool, svc, nil
}
