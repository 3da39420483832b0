package quota

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The auto-tuner protects paying traffic under load: while the gateway stays
// loaded it lowers the refill rate of tiers marked autotune (free, by
// default) step by step down to their floor, and once things stay calm it
// gives the rate back gradually. Tuner is the pure decision; TunerLoop runs it
// on one node of the cluster at a time, chosen by a Leader.

// TunedTier is a tier as the tuner sees it: its configured refill per second,
// the floor a cut may not go below, and the refill currently in force.
type TunedTier struct {
	Name       string
	Configured float64 // refill per second set by an admin
	Floor      float64 // lowest effective refill a cut may reach
	Effective  float64 // refill in force now; <= 0 means "not tuned yet", i.e. Configured
	Autotune   bool    // false: never touched (premium by default)
}

// TuningEvent is one change of a tier's effective refill: applied by every
// node and stored so that users can see why their rate changed.
type TuningEvent struct {
	At       time.Time
	Tier     string
	From, To float64 // effective refill per second before and after
	Load     float64 // the load sample that triggered the change
}

// TunerConfig sets when and how far the tuner moves.
type TunerConfig struct {
	High, Low               float64 // load at or above High is "loaded", at or below Low is "calm"
	HighSamples, LowSamples int     // consecutive samples needed before acting
	Cut                     float64 // a cut multiplies the effective refill by this (0 < Cut < 1)
	Step                    float64 // a restore adds this fraction of the configured refill
}

// DefaultTunerConfig: loaded is load >= 0.8 for 3 samples, calm is load <= 0.5
// for 6 samples; a cut keeps 60% of the rate, a restore adds back 10% of the
// configured rate. Cutting fast and restoring slowly avoids oscillating.
func DefaultTunerConfig() TunerConfig {
	return TunerConfig{High: 0.8, Low: 0.5, HighSamples: 3, LowSamples: 6, Cut: 0.6, Step: 0.1}
}

// Validate reports the first setting that cannot work.
func (c TunerConfig) Validate() error {
	switch {
	case !(c.Low >= 0 && c.Low < c.High):
		return fmt.Errorf("quota: tuner low mark %v must be at least 0 and below the high mark %v", c.Low, c.High)
	case c.HighSamples < 1 || c.LowSamples < 1:
		return fmt.Errorf("quota: tuner sample counts %d and %d must be at least 1", c.HighSamples, c.LowSamples)
	case !(c.Cut > 0 && c.Cut < 1):
		return fmt.Errorf("quota: tuner cut %v must be between 0 and 1", c.Cut)
	case !(c.Step > 0 && c.Step <= 1):
		return fmt.Errorf("quota: tuner step %v must be above 0 and at most 1", c.Step)
	}
	return nil
}

// refillScale sets the grid effective refills are rounded to (1e-6), so that
// repeated multiplication and addition land on the values an operator expects
// (0.3 + 0.05 is 0.35, not 0.35000000000000003) and never reach zero.
const refillScale = 1e6

func roundRefill(x float64) float64 {
	// Dividing the rounded whole number by an exact 1e6 gives the float
	// nearest the decimal; multiplying by an inexact 1e-6 would not.
	return math.Round(x*refillScale) / refillScale
}

// Tuner decides tuning steps from a stream of load samples. It keeps only
// the consecutive-sample counters; the effective rates come in with each
// call, so a new leader carries on from whatever the cluster last applied.
// Safe for concurrent use, though one loop normally drives it.
type Tuner struct {
	cfg       TunerConfig
	mu        sync.Mutex
	high, low int
}

// NewTuner returns a tuner with cfg; invalid settings (see Validate) are
// replaced by their defaults so that the tuner always behaves sanely.
func NewTuner(cfg TunerConfig) *Tuner {
	d := DefaultTunerConfig()
	if !(cfg.Low >= 0 && cfg.Low < cfg.High) {
		cfg.High, cfg.Low = d.High, d.Low
	}
	if cfg.HighSamples < 1 {
		cfg.HighSamples = d.HighSamples
	}
	if cfg.LowSamples < 1 {
		cfg.LowSamples = d.LowSamples
	}
	if !(cfg.Cut > 0 && cfg.Cut < 1) {
		cfg.Cut = d.Cut
	}
	if !(cfg.Step > 0 && cfg.Step <= 1) {
		cfg.Step = d.Step
	}
	return &Tuner{cfg: cfg}
}

// Reset forgets the consecutive samples seen so far, as after a lost
// leadership: a decision must rest on an unbroken run of samples.
func (t *Tuner) Reset() {
	t.mu.Lock()
	t.high, t.low = 0, 0
	t.mu.Unlock()
}

// Observe takes one load sample taken at `at` and returns the changes to
// make, if any:
//
//   - HighSamples samples in a row at or above High cut every autotuned tier
//     above its floor to max(floor, effective*Cut);
//   - LowSamples samples in a row at or below Low raise every autotuned tier
//     below its configured rate to min(configured, effective +
//     Step*configured);
//   - a sample in between breaks both runs.
//
// Reaching a run's length is a decision and restarts the count, so the next
// cut needs another HighSamples loaded samples. Tiers without Autotune never
// change. The caller applies the events, after which tiers must report the new
// Effective values.
func (t *Tuner) Observe(load float64, tiers []TunedTier, at time.Time) []TuningEvent {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.cfg
	switch {
	case load >= c.High:
		t.low = 0
		if t.high++; t.high < c.HighSamples {
			return nil
		}
		t.high = 0
		return changes(tiers, at, load, func(tt TunedTier, eff, floor float64) float64 {
			if eff <= floor {
				return eff // at (or, after a floor was raised, below) the floor
			}
			return max(floor, eff*c.Cut)
		})
	case load <= c.Low:
		t.high = 0
		if t.low++; t.low < c.LowSamples {
			return nil
		}
		t.low = 0
		return changes(tiers, at, load, func(tt TunedTier, eff, floor float64) float64 {
			if eff >= tt.Configured {
				return eff // nothing to restore
			}
			return min(tt.Configured, eff+c.Step*tt.Configured)
		})
	default:
		t.high, t.low = 0, 0
		return nil
	}
}

// changes applies next to each autotuned tier and returns the events for
// those whose rounded effective rate moves. The floor is capped at the
// configured rate and kept above zero, so a cut can never stop a tier.
func changes(tiers []TunedTier, at time.Time, load float64, next func(tt TunedTier, eff, floor float64) float64) []TuningEvent {
	var events []TuningEvent
	for _, tt := range tiers {
		if !tt.Autotune || !(tt.Configured > 0) {
			continue
		}
		eff := tt.Effective
		if !(eff > 0) {
			eff = tt.Configured
		}
		eff = roundRefill(eff)
		floor := roundRefill(min(max(tt.Floor, 1/refillScale), tt.Configured))
		if to := roundRefill(next(tt, eff, floor)); to != eff {
			events = append(events, TuningEvent{At: at, Tier: tt.Name, From: eff, To: to, Load: load})
		}
	}
	return events
}

// Leader decides which node runs the tuner, so the cluster makes one decision
// rather than one per node.
type Leader interface {
	// Lead reports whether this node leads now, acquiring or renewing the
	// leadership as needed. It is called once per tuning interval.
	Lead(ctx context.Context) (bool, error)
}

// Always is the Leader of a single-node deployment: it always leads.
type Always struct{}

// Lead always reports true.
func (Always) Lead(context.Context) (bool, error) { return true, nil }

// TunerRunConfig wires a TunerLoop to the gateway. Storage and signals come
// in as functions so quota stays free of databases and HTTP.
type TunerRunConfig struct {
	Interval time.Duration // time between samples; 0 means 5s
	Tuner    TunerConfig   // zero means DefaultTunerConfig()
	Leader   Leader        // nil means Always
	// Sample reads the current load. In a cluster the leader's sample stands
	// for everyone: either each node's traffic is balanced, or Sample
	// aggregates the nodes' figures.
	Sample func(ctx context.Context) (LoadSample, error)
	// Tiers returns every tier with its current effective refill.
	Tiers func(ctx context.Context) ([]TunedTier, error)
	// Apply stores the events (tuning_events) and publishes the new effective
	// refills so that every node uses them.
	Apply func(ctx context.Context, events []TuningEvent) error
	Now   func() time.Time // nil means time.Now
	Log   *slog.Logger     // nil discards
}

// TunerLoop samples load and applies the tuner's decisions, on the leader only.
type TunerLoop struct {
	cfg   TunerRunConfig
	tuner *Tuner
}

// NewTunerLoop checks cfg and returns a loop ready to Step or Run.
func NewTunerLoop(cfg TunerRunConfig) (*TunerLoop, error) {
	if cfg.Sample == nil || cfg.Tiers == nil || cfg.Apply == nil {
		return nil, errors.New("quota: tuner loop needs Sample, Tiers and Apply")
	}
	if cfg.Tuner == (TunerConfig{}) {
		cfg.Tuner = DefaultTunerConfig()
	}
	if err := cfg.Tuner.Validate(); err != nil {
		return nil, err
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("quota: tuner interval %v is negative", cfg.Interval)
	}
	if cfg.Interval == 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.Leader == nil {
		cfg.Leader = Always{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &TunerLoop{cfg: cfg, tuner: NewTuner(cfg.Tuner)}, nil
}

// Step runs one tuning interval: if this node leads, take a sample, decide
// and apply; otherwise forget any run of samples, so that a node regaining
// leadership starts counting afresh. It returns the events applied. A failed
// sample also breaks the run: a decision rests on consecutive samples.
func (l *TunerLoop) Step(ctx context.Context) ([]TuningEvent, error) {
	lead, err := l.cfg.Leader.Lead(ctx)
	if err != nil || !lead {
		l.tuner.Reset()
		if err != nil {
			return nil, fmt.Errorf("quota: tuner leadership: %w", err)
		}
		return nil, nil
	}
	s, err := l.cfg.Sample(ctx)
	if err != nil {
		l.tuner.Reset()
		return nil, fmt.Errorf("quota: tuner sample: %w", err)
	}
	tiers, err := l.cfg.Tiers(ctx)
	if err != nil {
		l.tuner.Reset()
		return nil, fmt.Errorf("quota: tuner tiers: %w", err)
	}
	events := l.tuner.Observe(s.Load(), tiers, l.cfg.Now())
	if len(events) == 0 {
		return nil, nil
	}
	if err := l.cfg.Apply(ctx, events); err != nil {
		// The tuner holds no rates, so the next decision starts again from
		// whatever Tiers reports: nothing half-applied is remembered here.
		return nil, fmt.Errorf("quota: apply tuning: %w", err)
	}
	return events, nil
}

// Run calls Step every Interval until ctx ends, logging failures (a failed
// interval is skipped, not fatal). It returns nil when ctx is done.
func (l *TunerLoop) Run(ctx context.Context) error {
	tick := time.NewTicker(l.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			events, err := l.Step(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				l.cfg.Log.Warn("tuner step failed", "err", err)
				continue
			}
			for _, e := range events {
				l.cfg.Log.Info("tier refill tuned", "tier", e.Tier, "from", e.From, "to", e.To, "load", e.Load)
			}
		}
	}
}

// RunTuner builds a TunerLoop from cfg and runs it until ctx ends.
func RunTuner(ctx context.Context, cfg TunerRunConfig) error {
	l, err := NewTunerLoop(cfg)
	if err != nil {
		return err
	}
	return l.Run(ctx)
}

// leaseScript acquires the lease if nobody holds it (SET NX PX) or renews it
// if we do (compare, then PEXPIRE), in one atomic round trip; a lease held by
// another node is left alone. KEYS[1] lease key; ARGV[1] node id, ARGV[2] TTL
// in ms.
var leaseScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX')
  return 1
end
return 0
`)

// releaseScript deletes the lease only if we hold it.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// RedisLease is a Leader for a cluster sharing a Redis: the node whose id is
// stored under key leads until it stops renewing and the key expires, after
// which the first node to call Lead takes over. Pick ttl as a few tuning
// intervals, so one slow renewal does not hand leadership around, yet a dead
// leader is replaced within seconds. While Redis is unreachable nobody leads
// and the effective rates stay where they are.
type RedisLease struct {
	client redis.UniversalClient
	key    string
	nodeID string
	ttlMS  int64
}

var _ Leader = (*RedisLease)(nil)

// NewRedisLease returns a lease on key for the node nodeID, which must be
// unique in the cluster (a hostname plus a random suffix, say). ttl is
// rounded down to whole milliseconds, at least 1.
func NewRedisLease(client redis.UniversalClient, key, nodeID string, ttl time.Duration) *RedisLease {
	return &RedisLease{client: client, key: key, nodeID: nodeID, ttlMS: max(ttl.Milliseconds(), 1)}
}

// Lead acquires the lease if it is free, renews it if it is ours, and reports
// whether this node leads for the next ttl.
func (l *RedisLease) Lead(ctx context.Context) (bool, error) {
	n, err := leaseScript.Run(ctx, l.client, []string{l.key}, l.nodeID, l.ttlMS).Int()
	if err != nil {
		return false, fmt.Errorf("quota: redis lease %s: %w", l.key, err)
	}
	return n == 1, nil
}

// Release gives the lease up if this node holds it, so that on a graceful
// shutdown another node takes over at its next interval instead of after ttl.
func (l *RedisLease) Release(ctx context.Context) error {
	if err := releaseScript.Run(ctx, l.client, []string{l.key}, l.nodeID).Err(); err != nil {
		return fmt.Errorf("quota: release redis lease %s: %w", l.key, err)
	}
	return nil
}
