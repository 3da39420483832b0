package app

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/handlers"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/jobs"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/upstream"
)

// TestHealthyKeysPerModel: a model whose only keys are unhealthy reports 0,
// which is what SluiceModelWithoutHealthyKey pages on; keys serving any
// model count for every model.
func TestHealthyKeysPerModel(t *testing.T) {
	got := func(keys []upstream.KeyStatus) map[string]float64 {
		out := map[string]float64{}
		for _, s := range healthyKeys(keys) {
			out[s.Labels[0]] = s.Value
		}
		return out
	}
	keys := []upstream.KeyStatus{
		{Name: "a", State: upstream.Healthy, Models: []string{"gpt-4o-mini", "gpt-4o"}},
		{Name: "b", State: upstream.Open, Models: []string{"gpt-4o"}},
		{Name: "c", State: upstream.Disabled, Models: []string{"claude"}},
	}
	want := map[string]float64{"gpt-4o-mini": 1, "gpt-4o": 1, "claude": 0}
	if g := got(keys); !maps.Equal(g, want) {
		t.Fatalf("healthy keys %v, want %v", g, want)
	}
	keys = append(keys, upstream.KeyStatus{Name: "any", State: upstream.Healthy})
	want = map[string]float64{"*": 1, "gpt-4o-mini": 2, "gpt-4o": 2, "claude": 1}
	if g := got(keys); !maps.Equal(g, want) {
		t.Fatalf("with a key for any model: %v, want %v", g, want)
	}
	if g := healthyKeys(nil); g != nil {
		t.Fatalf("no keys: %v, want no samples", g)
	}
}

// stuckSink never finishes storing, as a database that hangs would.
type stuckSink struct{ release chan struct{} }

func (s stuckSink) InsertUsageEvents(ctx context.Context, _ []models.UsageEvent) error {
	<-s.release
	return nil
}
func (stuckSink) AddRejections(context.Context, []models.Rejections) error  { return nil }
func (stuckSink) TouchAPITokens(context.Context, map[int64]time.Time) error { return nil }

// /readyz names each thing a node cannot serve without: a schema behind
// the code, Redis gone, the recorder backed up (the database being down
// is the handlers' test of the same function's first check).
func TestReadinessNamesWhatFails(t *testing.T) {
	ctx := context.Background()
	db := testdb.SQLite(t)
	if _, err := jobs.Migrate(ctx, db, ""); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	sink := stuckSink{release: make(chan struct{})}
	rec := metering.NewRecorder(sink, slog.New(slog.DiscardHandler), time.Hour, 1)
	t.Cleanup(func() {
		close(sink.release)
		rec.Close(ctx)
	})
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { down.Close() })
	failing := func(checks []handlers.Check) []string {
		var out []string
		for _, c := range checks {
			if c.Err != nil {
				out = append(out, c.Name)
			}
		}
		return out
	}

	ready := readiness(cfg, db, &shared{}, rec)
	if got := failing(ready(ctx)); len(got) != 0 {
		t.Fatalf("a fresh node fails %v", got)
	}
	// The recorder: one event with the sink, one waiting to be handed
	// over, one in the loop, then the buffer of 8 fills.
	for i := range 11 {
		if err := rec.Record(models.UsageEvent{RequestID: fmt.Sprint("r", i), CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); rec.Depth() < 8; {
		if time.Now().After(deadline) {
			t.Fatalf("the buffer holds %d of %d", rec.Depth(), rec.Capacity())
		}
		time.Sleep(time.Millisecond)
	}
	sqlDB, _ := db.SQL()
	latest, _ := migrations.Latest(migrations.SQLite)
	if _, err := sqlDB.ExecContext(ctx, "DELETE FROM schema_migrations WHERE version = ?", latest); err != nil {
		t.Fatal(err)
	}
	// A new readiness: the schema is checked at most every 30 s.
	got := failing(readiness(cfg, db, &shared{redis: down}, rec)(ctx))
	if !slices.Equal(got, []string{"migrations", "redis", "recorder"}) {
		t.Fatalf("failing %v, want migrations, redis and recorder", got)
	}
}
