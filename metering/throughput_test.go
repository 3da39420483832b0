package metering

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// BenchmarkRecorderPostgres is the recorder's sustained throughput into
// Postgres with the rollups kept: events from 8 writers over 50
// organizations, 2 tokens each, 3 models and the current hour, recorded
// and drained. Report: events/s (the goal is at least 150,000).
//
//	TEST_DATABASE_URL=postgres://… go test -run '^$' -bench RecorderPostgres -benchtime 400000x ./metering
func BenchmarkRecorderPostgres(b *testing.B) {
	for _, n := range []int{1024, 4096} {
		for _, flushers := range []int{1, 2} {
			b.Run(fmt.Sprintf("batch=%d/flushers=%d", n, flushers), func(b *testing.B) { benchmarkRecorderPostgres(b, n, flushers) })
		}
	}
}

func benchmarkRecorderPostgres(b *testing.B, batchSize, flushers int) {
	store := models.NewStore(testdb.Postgres(b))
	ctx := context.Background()
	type tok struct{ org, id int64 }
	var toks []tok
	for i := range 50 {
		o, u, err := store.CreateOrganizationWithOwner(ctx, fmt.Sprint("org", i), "free", fmt.Sprintf("u%d@example.com", i), "h", models.RoleOwner)
		if err != nil {
			b.Fatal(err)
		}
		for j := range 2 {
			t, _, _ := store.CreateAPIToken(ctx, o.ID, u.ID, fmt.Sprint("t", j), nil)
			toks = append(toks, tok{o.ID, t.ID})
		}
	}
	modelsUsed := []string{"gpt-4o-mini", "gpt-4o", "sluice-local"}
	r := NewRecorder(store, quiet(), time.Second, batchSize, WithFlushers(flushers))
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	const writers = 8
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < b.N; i += writers {
				t := toks[i%len(toks)]
				_ = r.Record(models.UsageEvent{RequestID: "bench" + strconv.Itoa(i), OrgID: t.org, TokenID: t.id,
					Model: modelsUsed[i%len(modelsUsed)], PromptTokens: 100, CompletionTokens: 50, Cost: money.Amount(1234 + i%7),
					PriceID: 1, Status: 200, CreatedAt: start})
			}
		}()
	}
	wg.Wait()
	if err := r.Close(ctx); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	b.StopTimer()
	var total int64
	for i := 0; i < len(toks); i += 2 { // two tokens per organization
		m, err := store.UsageInMonth(ctx, toks[i].org, start)
		if err != nil {
			b.Fatal(err)
		}
		total += m.Requests
	}
	if total != int64(b.N) {
		b.Fatalf("the monthly rollups count %d requests of %d", total, b.N)
	}
}
