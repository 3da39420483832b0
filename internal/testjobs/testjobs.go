// Package testjobs gives handler and page tests a real job queue on their
// database, opened only when a test first uses it: migrating River's tables
// is most of a test env's cost under the race detector, and most tests
// never queue anything.
package testjobs

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/completion"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/jobs"
	"github.com/sluicehq/sluice/models"
)

// Queue is the job queue on db, with River's tables migrated when it is
// first used. It is never started: jobs stay queued, and its workers'
// pipeline (none) is never asked.
func Queue(t testing.TB, db *models.DB, dir *accounts.Directory, now func() time.Time) *Lazy {
	return &Lazy{open: func() *jobs.Queue {
		ctx := context.Background()
		url := testdb.URL(db)
		if _, err := jobs.Migrate(ctx, db, url); err != nil {
			t.Fatal(err)
		}
		q, err := jobs.New(ctx, jobs.Deps{DB: db, DatabaseURL: url, Directory: dir, Log: slog.New(slog.DiscardHandler)},
			jobs.Config{Workers: 1, MaxAttempts: 1, Retention: time.Hour, MaxWait: time.Second, RetryBase: time.Second, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = q.Stop(context.Background()) })
		return q
	}}
}

// Lazy is a *jobs.Queue opened on first use, with the methods the handlers
// and pages call.
type Lazy struct {
	once  sync.Once
	open  func() *jobs.Queue
	queue *jobs.Queue
}

func (l *Lazy) q() *jobs.Queue {
	l.once.Do(func() { l.queue = l.open() })
	return l.queue
}

func (l *Lazy) List(ctx context.Context, orgID int64, limit int) ([]jobs.Job, error) {
	return l.q().List(ctx, orgID, limit)
}

func (l *Lazy) Get(ctx context.Context, orgID int64, id string) (jobs.Job, error) {
	return l.q().Get(ctx, orgID, id)
}

func (l *Lazy) Stats(ctx context.Context) (jobs.Stats, error) { return l.q().Stats(ctx) }

func (l *Lazy) EnqueueBatch(ctx context.Context, caller accounts.Caller, batchID int64, lines jobs.LineSource) error {
	return l.q().EnqueueBatch(ctx, caller, batchID, lines)
}

func (l *Lazy) WakeBatch(ctx context.Context, batchID int64) error {
	return l.q().WakeBatch(ctx, batchID)
}

func (l *Lazy) HasBatchLines(ctx context.Context, batchID int64) (bool, error) {
	return l.q().HasBatchLines(ctx, batchID)
}

func (l *Lazy) Enqueue(ctx context.Context, p *completion.Pipeline, caller accounts.Caller, body []byte, priority, callbackURL string) (jobs.Job, error) {
	return l.q().Enqueue(ctx, p, caller, body, priority, callbackURL)
}

func (l *Lazy) Cancel(ctx context.Context, orgID int64, id string) (jobs.Job, error) {
	return l.q().Cancel(ctx, orgID, id)
}
