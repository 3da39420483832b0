package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/upstream"
)

// runTuner samples this node's load and, while it leads, lowers or restores
// autotuned tiers' refill.
func runTuner(ctx context.Context, cfg config.Config, a *shared, acc *accounts.Service, store *models.Store,
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
