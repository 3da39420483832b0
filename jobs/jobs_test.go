package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/completion"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/testsync"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/upstream"
	"github.com/sluicehq/sluice/upstream/local"
)

// each runs fn on a migrated SQLite database and, with TEST_DATABASE_URL,
// on a private Postgres schema; url is what River's own pool connects to.
func each(t *testing.T, fn func(t *testing.T, db *models.DB, url string)) {
	t.Run("sqlite", func(t *testing.T) {
		db := testdb.SQLite(t)
		if _, err := Migrate(context.Background(), db, ""); err != nil {
			t.Fatal(err)
		}
		fn(t, db, "")
	})
	t.Run("postgres", func(t *testing.T) {
		url := testdb.PostgresURL(t)
		db, err := models.Open(context.Background(), url, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		sqlDB, _ := db.SQL()
		if _, err := migrations.Apply(context.Background(), sqlDB, migrations.Postgres); err != nil {
			t.Fatal(err)
		}
		if _, err := Migrate(context.Background(), db, url); err != nil {
			t.Fatal(err)
		}
		fn(t, db, url)
	})
}

// recorder stores usage at once, so tests see it.
type recorder struct{ store *models.Store }

func (r recorder) Record(ev models.UsageEvent) error {
	return r.store.InsertUsageEvents(context.Background(), []models.UsageEvent{ev})
}
func (recorder) Reject(int64, int64, string, string, time.Time) {}

type noAlerts struct{}

func (noAlerts) Spent(int64, money.Amount, time.Time, money.Amount, money.Amount) {}

// fixture is a queue on a real database with the real pipeline.
type fixture struct {
	t        *testing.T
	db       *models.DB
	url      string
	store    *models.Store
	dir      *accounts.Directory
	pipe     *completion.Pipeline
	deps     completion.Deps
	caller   accounts.Caller
	now      atomic.Pointer[time.Time]
	provider *httptest.Server
	calls    atomic.Int64
	tokenID  int64
	notify   Notifier // posts the queue's webhook deliveries; nil: none
}

func newFixture(t *testing.T, db *models.DB, url string) *fixture {
	ctx := context.Background()
	f := &fixture{t: t, db: db, url: url, store: models.NewStore(db)}
	now := time.Now()
	f.now.Store(&now)
	var err error
	if f.dir, err = accounts.NewDirectory(ctx, f.store, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	o, u, err := f.store.CreateOrganizationWithOwner(ctx, "Acme", "free", "o@acme.example", "h", models.RoleOwner)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, _ := f.store.CreateAPIToken(ctx, o.ID, u.ID, "jobs", nil)
	f.tokenID = tok.ID
	if f.caller, err = f.dir.CallerByTokenID(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	f.provider = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.calls.Add(1)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"done"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`))
	}))
	t.Cleanup(f.provider.Close)
	pool := upstream.NewPool(upstream.PoolOptions{Budget: time.Second, MaxBackoff: time.Millisecond, BaseBackoff: time.Millisecond})
	pool.SetKeys([]upstream.Key{{ID: 1, Name: "p", BaseURL: f.provider.URL + "/v1", Secret: "sk-provider", Models: []string{"gpt-test"}}})
	m, _ := local.New()
	acc, _ := accounts.NewService(f.store, f.dir, cluster.None{}, accounts.NewLoginThrottle(nil), 4)
	f.deps = completion.Deps{Log: slog.New(slog.DiscardHandler), Now: time.Now, Limiter: quota.NewMemory(nil), Freezes: f.dir, Freezer: acc,
		Detector: quota.NewDetector(quota.NewMemoryWindow(nil)), Scorer: quota.NewValueScorer(quota.ValueRules{}, nil),
		PriorityWeights: map[string]int64{"low": 1, "normal": 1, "high": 2}, DefaultMaxTokens: 16, Local: m, Providers: pool,
		Prices: metering.NewPriceBook(), Ledger: metering.NewMemoryLedger(metering.StoreSeed(f.store), metering.WithFunds(metering.StoreFunds(f.store))), Alerts: noAlerts{},
		Recorder: recorder{f.store}}
	f.pipe = completion.New(f.deps)
	return f
}

// queue starts a queue (a node's workers) on the fixture.
func (f *fixture) queue(cfg Config, batches BatchLines) *Queue {
	f.t.Helper()
	if cfg.Workers == 0 {
		cfg.Workers = 4
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 3
	}
	if cfg.Retention == 0 {
		cfg.Retention = 7 * 24 * time.Hour
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = 2 * time.Second
	}
	if cfg.RetryBase == 0 {
		cfg.RetryBase = 10 * time.Millisecond
	}
	if cfg.DeliveryWorkers == 0 {
		cfg.DeliveryWorkers, cfg.HostConcurrency, cfg.DeliveryAttempts, cfg.DeliveryRetryBase = 16, 4, 3, 10*time.Millisecond
	}
	cfg.Now = func() time.Time { return *f.now.Load() }
	q, err := New(context.Background(), Deps{DB: f.db, DatabaseURL: f.url, Pipeline: f.pipe, Directory: f.dir, Batches: batches,
		Notify: f.notify, Log: slog.New(slog.DiscardHandler)}, cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return q
}

func (f *fixture) start(q *Queue) {
	f.t.Helper()
	if err := q.Start(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		q.Stop(ctx)
	})
}

// wait polls job id until it leaves the queue or time runs out.
func (f *fixture) wait(q *Queue, id string, within time.Duration) Job {
	f.t.Helper()
	deadline := time.Now().Add(within)
	for {
		j, err := q.Get(context.Background(), f.caller.OrgID, id)
		if err != nil {
			f.t.Fatal(err)
		}
		if j.Status != Queued && j.Status != Running {
			return j
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("job %s still %s after %v", id, j.Status, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const jobBody = `{"model":"gpt-test","messages":[{"role":"user","content":"hello"}]}`

func TestAJobRunsThroughThePipelineOnce(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		q := f.queue(Config{}, nil)
		ctx := context.Background()
		j, err := q.Enqueue(ctx, f.pipe, f.caller, []byte(jobBody), "", "")
		if err != nil || j.Status != Queued || !strings.HasPrefix(j.ID, "job_") {
			t.Fatalf("%+v %v", j, err)
		}
		f.start(q)
		done := f.wait(q, j.ID, 10*time.Second)
		if done.Status != Succeeded || done.Output == nil || done.Output.Status != 200 || !strings.Contains(string(done.Output.Body), `"done"`) ||
			done.Attempts != 1 || done.FinishedAt == nil {
			t.Fatalf("%+v %+v", done, done.Output)
		}
		// Metered once, under the job's id.
		var n int64
		db.Gorm.Raw("SELECT COUNT(*) FROM usage_events WHERE request_id = ?", j.ID).Scan(&n)
		if n != 1 || f.calls.Load() != 1 {
			t.Fatalf("usage rows %d, provider calls %d", n, f.calls.Load())
		}
		// Another organization's token cannot see it.
		if _, err := q.Get(ctx, f.caller.OrgID+1, j.ID); apperr.CodeOf(err) != apperr.NotFound {
			t.Fatalf("another tenant: %v", err)
		}
		if _, err := q.Get(ctx, f.caller.OrgID, "job_x"); apperr.CodeOf(err) != apperr.NotFound {
			t.Fatalf("junk id: %v", err)
		}
		// Kept for the retention, then gone: hidden at once, and deleted,
		// answer and all, by the next DeleteExpired.
		riverID, _ := parseJobID(j.ID)
		rows := func() (c int64) {
			db.Gorm.Raw("SELECT COUNT(*) FROM river_job WHERE id = ?", riverID).Scan(&c)
			return c
		}
		almost := time.Now().Add(7*24*time.Hour - time.Minute)
		f.now.Store(&almost)
		if deleted, err := q.DeleteExpired(ctx); err != nil || deleted != 0 || rows() != 1 {
			t.Fatalf("within its retention: deleted %d (%v), rows %d", deleted, err, rows())
		}
		if _, err := q.Get(ctx, f.caller.OrgID, j.ID); err != nil {
			t.Fatalf("within its retention: %v", err)
		}
		later := time.Now().Add(7*24*time.Hour + time.Minute)
		f.now.Store(&later)
		if _, err := q.Get(ctx, f.caller.OrgID, j.ID); apperr.CodeOf(err) != apperr.NotFound || apperr.As(err).Message != "no such job (or it expired)" {
			t.Fatalf("past its retention: %v", err)
		}
		if deleted, err := q.DeleteExpired(ctx); err != nil || deleted != 1 || rows() != 0 {
			t.Fatalf("past its retention: deleted %d (%v), rows %d", deleted, err, rows())
		}
	})
}

func TestQueuedJobsCanBeCancelledAndBadOnesRefused(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		q := f.queue(Config{}, nil) // not started: jobs stay queued
		ctx := context.Background()
		j, err := q.Enqueue(ctx, f.pipe, f.caller, []byte(jobBody), "", "")
		if err != nil {
			t.Fatal(err)
		}
		c, err := q.Cancel(ctx, f.caller.OrgID, j.ID)
		if err != nil || c.Status != Cancelled {
			t.Fatalf("%+v %v", c, err)
		}
		if _, err := q.Cancel(ctx, f.caller.OrgID, j.ID); apperr.As(err).Reason != "job_not_cancellable" ||
			apperr.As(err).Message != "the job is cancelled; only a queued job can be cancelled" {
			t.Fatalf("twice: %v", err)
		}
		if _, err := q.Cancel(ctx, f.caller.OrgID+1, j.ID); apperr.CodeOf(err) != apperr.NotFound {
			t.Fatalf("another tenant's: %v", err)
		}
		if _, err := q.Enqueue(ctx, f.pipe, f.caller, []byte(`{"model":"gpt-test","stream":true,"messages":[{"role":"user","content":"x"}]}`), "", ""); apperr.As(err).Reason != "unsupported_stream" {
			t.Fatalf("a stream: %v", err)
		}
		if _, err := q.Enqueue(ctx, f.pipe, f.caller, []byte(`{"model":"nope","messages":[{"role":"user","content":"x"}]}`), "", ""); apperr.As(err).Reason != "model_not_found" {
			t.Fatalf("an unknown model: %v", err)
		}
	})
}

// A job no retry can fix fails at once; one the providers keep failing is
// retried, then fails with its last error.
func TestJobsFailWithTheirLastError(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		ctx := context.Background()
		// A budget of nothing: insufficient_quota, at once, no retries.
		none := money.Amount(0)
		if _, err := f.store.SetBudget(ctx, models.User{}, f.caller.OrgID, models.Budget{Limit: &none, HardStop: true}); err != nil {
			t.Fatal(err)
		}
		f.dir.ForgetOrganization(f.caller.OrgID)
		f.deps.Prices.Replace([]models.ModelPrice{{ID: 1, Model: "gpt-test", InputPerMTok: 1, OutputPerMTok: 1, EffectiveFrom: time.Now().Add(-time.Hour)}})
		q := f.queue(Config{MaxAttempts: 2}, nil)
		f.start(q)
		j, _ := q.Enqueue(ctx, f.pipe, f.caller, []byte(jobBody), "", "")
		done := f.wait(q, j.ID, 10*time.Second)
		if done.Status != Failed || done.Attempts != 1 || done.Output.Error == nil || done.Output.Error.Code != "insufficient_quota" ||
			done.Output.Status != 429 || f.calls.Load() != 0 {
			t.Fatalf("%+v %+v", done, done.Output)
		}
		// Providers down and the tier answers 503: two attempts, then failed.
		if _, err := f.store.SetBudget(ctx, models.User{}, f.caller.OrgID, models.Budget{}); err != nil {
			t.Fatal(err)
		}
		db.Gorm.Exec("UPDATE tiers SET upstream_fallback = 'error'")
		f.dir.ReloadTiers(ctx)
		f.dir.ForgetOrganization(f.caller.OrgID)
		f.provider.Close()
		j, _ = q.Enqueue(ctx, f.pipe, f.caller, []byte(jobBody), "", "")
		done = f.wait(q, j.ID, 20*time.Second)
		if done.Status != Failed || done.Attempts != 2 || done.Output.Error == nil || done.Output.Error.Code != "upstream_unavailable" ||
			!strings.Contains(done.Output.Error.Message, "every provider for 'gpt-test' is unavailable") {
			t.Fatalf("%+v %+v", done, done.Output)
		}
	})
}

// Jobs go at the pace the token's bucket allows, taking at most the part
// live traffic leaves, and never hear a 429.
func TestJobsGoAtTheBucketsPace(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		ctx := context.Background()
		// 20 a second with a burst of 10: jobs get 5 at once, then 20/s.
		db.Gorm.Exec("UPDATE tiers SET capacity = 10, refill_per_sec = 20, tokens_per_minute = 0 WHERE name = 'free'")
		f.dir.ReloadTiers(ctx)
		f.caller, _ = f.dir.CallerByTokenID(ctx, f.tokenID)
		q := f.queue(Config{Workers: 8}, nil)
		const n = 45
		ids := make([]string, n)
		for i := range ids {
			j, err := q.Enqueue(ctx, f.pipe, f.caller, []byte(jobBody), "low", "")
			if err != nil {
				t.Fatal(err)
			}
			ids[i] = j.ID
		}
		began := time.Now()
		f.start(q)
		for _, id := range ids {
			if j := f.wait(q, id, 20*time.Second); j.Status != Succeeded {
				t.Fatalf("%s: %+v %+v", id, j, j.Output)
			}
		}
		took := time.Since(began)
		// (45 - 5) at 20/s is 2 s; faster would mean the bucket was not
		// respected.
		if took < 1800*time.Millisecond || f.calls.Load() != n {
			t.Fatalf("%d jobs in %v with %d provider calls", n, took, f.calls.Load())
		}
		t.Logf("%d jobs in %v", n, took)
	})
}

// Two nodes on one queue: no job runs twice.
func TestTwoNodesRunEachJobOnce(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		if url == "" {
			t.Skip("the embedded SQLite default is one node by design")
		}
		f := newFixture(t, db, url)
		ctx := context.Background()
		db.Gorm.Exec("UPDATE tiers SET capacity = 1000, refill_per_sec = 1000, tokens_per_minute = 0 WHERE name = 'free'")
		f.dir.ReloadTiers(ctx)
		f.caller, _ = f.dir.CallerByTokenID(ctx, f.tokenID)
		a, b := f.queue(Config{Workers: 5}, nil), f.queue(Config{Workers: 5}, nil)
		const n = 60
		var ids []string
		for range n {
			j, err := a.Enqueue(ctx, f.pipe, f.caller, []byte(jobBody), "", "")
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, j.ID)
		}
		f.start(a)
		f.start(b)
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f.wait(a, id, 20*time.Second)
			}()
		}
		wg.Wait()
		var usage int64
		db.Gorm.Raw("SELECT COUNT(*) FROM usage_events WHERE request_id LIKE 'job_%'").Scan(&usage)
		if f.calls.Load() != n || usage != n {
			t.Fatalf("%d provider calls and %d usage rows for %d jobs", f.calls.Load(), usage, n)
		}
	})
}

func TestJobIDs(t *testing.T) {
	if id, ok := parseJobID(JobID(42)); !ok || id != 42 {
		t.Fatal(id, ok)
	}
	for _, s := range []string{"42", "job_", "job_-1", "job_x", "batch_1"} {
		if _, ok := parseJobID(s); ok {
			t.Errorf("%q parsed", s)
		}
	}
	var out Output
	if err := json.Unmarshal([]byte(fmt.Sprintf(`{"request_id":%q,"status_code":200}`, JobID(1))), &out); err != nil || out.Status != 200 {
		t.Fatal(err)
	}
}

// stopAfter is a batch that stops after its first n lines ran, and hears
// every line's outcome.
type stopAfter struct {
	mu      sync.Mutex
	n       int
	started int
	done    map[string]Output
}

func (s *stopAfter) Stopped(context.Context, int64) (*Failure, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started >= s.n {
		return &Failure{Code: "batch_cancelled", Message: "cancelled"}, nil
	}
	s.started++
	return nil, nil
}

func (s *stopAfter) LineDone(_ context.Context, batchID int64, customID, jobID string, out Output) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if batchID != 7 || out.RequestID != jobID {
		return fmt.Errorf("line %s of batch %d as %s", customID, batchID, jobID)
	}
	s.done[customID] = out
	return nil
}

// flakyLines is a batch whose first failures answers to LineDone fail, as a
// database blip would.
type flakyLines struct {
	stopAfter
	failures int
}

func (f *flakyLines) LineDone(ctx context.Context, batchID int64, customID, jobID string, out Output) error {
	f.mu.Lock()
	if f.failures > 0 {
		f.failures--
		f.mu.Unlock()
		return errors.New("database unavailable")
	}
	f.mu.Unlock()
	return f.stopAfter.LineDone(ctx, batchID, customID, jobID, out)
}

// A line whose outcome cannot be told to its batch at first is told again,
// not run again: the provider is asked once.
func TestALineIsNotRunAgainWhenItsOutcomeIsLate(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		ctx := context.Background()
		batch := &flakyLines{stopAfter: stopAfter{n: 1, done: map[string]Output{}}, failures: 3}
		q := f.queue(Config{Workers: 1}, batch)
		if err := q.EnqueueBatch(ctx, f.caller, 7, Lines([]Line{{CustomID: "only", Body: json.RawMessage(jobBody)}})); err != nil {
			t.Fatal(err)
		}
		if err := q.WakeBatch(ctx, 7); err != nil {
			t.Fatal(err)
		}
		f.start(q)
		var out Output
		testsync.WaitFor(t, 10*time.Second, "the line's outcome reaching its batch", func() bool {
			batch.mu.Lock()
			defer batch.mu.Unlock()
			var done bool
			out, done = batch.done["only"]
			return done
		})
		if out.Error != nil || out.Status != 200 {
			t.Fatalf("outcome %+v", out)
		}
		if n := f.calls.Load(); n != 1 {
			t.Fatalf("the provider was asked %d times for one line, want 1", n)
		}
	})
}

// A batch's lines are jobs of their own kind: not in the job list, counted
// in the queue's depth, run until their batch stops them; the job list is
// scoped to the organization on both databases.
func TestBatchLinesAndTheJobList(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		ctx := context.Background()
		batch := &stopAfter{n: 2, done: map[string]Output{}}
		q := f.queue(Config{Workers: 1}, batch)
		j, err := q.Enqueue(ctx, f.pipe, f.caller, []byte(jobBody), "", "")
		if err != nil {
			t.Fatal(err)
		}
		var lines []Line
		for _, id := range []string{"a", "b", "c", "d"} {
			lines = append(lines, Line{CustomID: id, Body: json.RawMessage(jobBody)})
		}
		if err := q.EnqueueBatch(ctx, f.caller, 7, Lines(lines)); err != nil {
			t.Fatal(err)
		}
		// Queueing the same lines again (two nodes rescuing one stranded
		// batch) queues none of them twice: Postgres refuses the insert
		// whole, River's SQLite driver skips the duplicates.
		err = q.EnqueueBatch(ctx, f.caller, 7, Lines(lines[1:3]))
		var lineJobs int64
		db.Gorm.Raw("SELECT COUNT(*) FROM river_job WHERE kind = 'batch_line'").Scan(&lineJobs)
		if lineJobs != 4 {
			t.Fatalf("%d line jobs for 4 lines after queueing two of them again (%v)", lineJobs, err)
		}
		if has, err := q.HasBatchLines(ctx, 7); err != nil || !has {
			t.Fatalf("batch 7 has lines: %v %v", has, err)
		}
		if has, err := q.HasBatchLines(ctx, 8); err != nil || has {
			t.Fatalf("batch 8 has none: %v %v", has, err)
		}
		if err := q.WakeBatch(ctx, 7); err != nil {
			t.Fatalf("waking: %v", err)
		}
		if s, err := q.Stats(ctx); err != nil || s.Waiting != 5 {
			t.Fatalf("stats: %+v %v", s, err)
		}
		// The oldest waiting job's age, as the database writes its time
		// (text in SQLite, timestamptz in Postgres), on the queue's clock.
		before := *f.now.Load()
		later := before.Add(time.Minute)
		f.now.Store(&later)
		if s, err := q.Stats(ctx); err != nil || s.Oldest < 50*time.Second || s.Oldest > 2*time.Minute {
			t.Fatalf("the oldest job's age a minute on: %+v %v", s, err)
		}
		f.now.Store(&before)
		list, err := q.List(ctx, f.caller.OrgID, 10)
		if err != nil || len(list) != 1 || list[0].ID != j.ID {
			t.Fatalf("list: %+v %v", list, err)
		}
		if other, err := q.List(ctx, f.caller.OrgID+1, 10); err != nil || len(other) != 0 {
			t.Fatalf("another organization's list: %+v %v", other, err)
		}
		f.start(q)
		f.wait(q, j.ID, 10*time.Second)
		testsync.WaitFor(t, 10*time.Second, "the four lines done", func() bool {
			batch.mu.Lock()
			defer batch.mu.Unlock()
			return len(batch.done) == 4
		})
		ran, stopped := 0, 0
		for id, out := range batch.done {
			switch {
			case out.Error == nil && out.Status == 200:
				ran++
			case out.Error != nil && out.Error.Code == "batch_cancelled" && out.Status == 0:
				stopped++
			default:
				t.Errorf("%s: %+v", id, out)
			}
		}
		if ran != 2 || stopped != 2 || f.calls.Load() != 3 {
			t.Fatalf("%d lines ran, %d stopped, %d provider calls", ran, stopped, f.calls.Load())
		}
		if _, err := q.Get(ctx, f.caller.OrgID, batch.done["a"].RequestID); apperr.CodeOf(err) != apperr.NotFound {
			t.Errorf("a batch line through the job API: %v", err)
		}
	})
}

// A frozen token's job is not failed: it waits for the thaw, in place when
// the freeze ends within MaxWait, else snoozed (the worker is freed), and
// then runs once.
func TestAFrozenTokensJobWaitsForTheThaw(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		ctx := context.Background()
		acc, err := accounts.NewService(f.store, f.dir, cluster.None{}, accounts.NewLoginThrottle(nil), 4)
		if err != nil {
			t.Fatal(err)
		}
		// freeze freezes the token until d from now (the tier's freeze is
		// a whole minute: it is dated back to end at the right time).
		freeze := func(d time.Duration) time.Time {
			t.Helper()
			minute := time.Duration(f.caller.Tier.FreezeMinutes) * time.Minute
			fr, err := acc.Freeze(ctx, f.caller, 99, time.Now().Add(d-minute))
			if err != nil {
				t.Fatal(err)
			}
			return fr.FrozenUntil
		}
		q := f.queue(Config{MaxWait: 2 * time.Second}, nil)
		f.start(q)
		for _, c := range []struct {
			name   string
			frozen time.Duration
		}{{"waits in place", 600 * time.Millisecond}, {"snoozed", 3 * time.Second}} {
			before := f.calls.Load()
			until := freeze(c.frozen)
			j, err := q.Enqueue(ctx, f.pipe, f.caller, []byte(jobBody), "", "")
			if err != nil {
				t.Fatal(err)
			}
			// Once a worker has taken the job (its attempt is dated), and
			// while the token is still frozen, the job waits, unsent.
			var got Job
			testsync.WaitFor(t, 10*time.Second, c.name+": a worker taking the job", func() bool {
				got, err = q.Get(ctx, f.caller.OrgID, j.ID)
				return err == nil && got.StartedAt != nil
			})
			calls := f.calls.Load()
			if time.Now().Before(until) {
				if got.Status != Queued && got.Status != Running || calls != before {
					t.Fatalf("%s: while frozen the job is %s with %d provider calls; want it waiting, unsent", c.name, got.Status, calls-before)
				}
			} else {
				t.Logf("%s: the job was taken only after the thaw; nothing to see while frozen", c.name)
			}
			done := f.wait(q, j.ID, 15*time.Second)
			if done.Status != Succeeded || f.calls.Load() != before+1 || done.FinishedAt.Before(until) {
				t.Fatalf("%s: %+v %+v, %d provider calls; want one success after the thaw at %v", c.name, done, done.Output, f.calls.Load()-before, until)
			}
		}
	})
}

// A job whose token was revoked after it was queued fails at once with the
// reason, and reaches no provider.
func TestARevokedTokensJobFails(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		ctx := context.Background()
		q := f.queue(Config{}, nil)
		j, err := q.Enqueue(ctx, f.pipe, f.caller, []byte(jobBody), "", "")
		if err != nil {
			t.Fatal(err)
		}
		owner := models.User{ID: f.caller.UserID}
		if _, err := f.store.RevokeAPIToken(ctx, owner, f.caller.OrgID, f.tokenID); err != nil {
			t.Fatal(err)
		}
		f.start(q)
		done := f.wait(q, j.ID, 10*time.Second)
		if done.Status != Failed || done.Attempts != 1 || done.Output == nil || done.Output.Status != 401 || done.Output.Error == nil ||
			done.Output.Error.Code != "revoked_api_key" || done.Output.Error.Message != "the API key has been revoked" || f.calls.Load() != 0 {
			t.Fatalf("%+v %+v, %d provider calls", done, done.Output, f.calls.Load())
		}
	})
}

// With every provider down, a job of a tier that falls back to the local
// model succeeds on it, metered as a fallback.
func TestAJobFallsBackToTheLocalModel(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		ctx := context.Background()
		db.Gorm.Exec("UPDATE tiers SET upstream_fallback = 'local'")
		f.dir.ReloadTiers(ctx)
		f.caller, _ = f.dir.CallerByTokenID(ctx, f.tokenID)
		f.provider.Close()
		q := f.queue(Config{}, nil)
		f.start(q)
		j, err := q.Enqueue(ctx, f.pipe, f.caller, []byte(jobBody), "", "")
		if err != nil {
			t.Fatal(err)
		}
		done := f.wait(q, j.ID, 15*time.Second)
		if done.Status != Succeeded || done.Output == nil || done.Output.Status != 200 || !strings.Contains(string(done.Output.Body), `"choices"`) {
			t.Fatalf("%+v %+v", done, done.Output)
		}
		var fallback []bool
		db.Gorm.Raw("SELECT fallback FROM usage_events WHERE request_id = ?", j.ID).Scan(&fallback)
		if len(fallback) != 1 || !fallback[0] {
			t.Fatalf("usage rows' fallback %v, want one row, a fallback", fallback)
		}
	})
}
