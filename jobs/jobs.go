// Package jobs is the queue layer: chat completions (and a batch's
// embeddings requests) that can wait. A job is
// stored in the database on River's own tables (Postgres, or the embedded
// SQLite), worked by River on every node through the same completion
// pipeline as a live request but at low priority (it waits for the
// buckets instead of failing, and never takes the half of a burst live
// traffic is owed), and its answer is kept for the caller to fetch for a
// while. The Batch API is built on it.
package jobs

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/completion"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/webhook"
)

// Args is a queued chat completion, as River stores it.
type Args struct {
	OrgID   int64 `json:"org_id"`
	TokenID int64 `json:"token_id"`
	// Endpoint is what Body is for: "" for a chat completion (so jobs
	// queued before embeddings read as they were), Embeddings.
	Endpoint    string          `json:"endpoint,omitempty"`
	Body        json.RawMessage `json:"body"`                   // the request, as the client sent it
	Priority    string          `json:"priority,omitempty"`     // X-Sluice-Priority
	CallbackURL string          `json:"callback_url,omitempty"` // told the outcome, signed
	BatchID     int64           `json:"batch_id,omitempty"`
	CustomID    string          `json:"custom_id,omitempty"` // the batch line's id
}

// Kind names the job kind in River's tables.
func (Args) Kind() string { return "chat_completion" }

// lineArgs is a batch's line: a chat completion like any job, of a kind of
// its own, so the job API (GET /v1/jobs) shows the jobs queued one by one
// and not a batch's thousands of lines.
type lineArgs struct{ Args }

// Kind names the batch line kind in River's tables.
func (lineArgs) Kind() string { return "batch_line" }

// Output is what a finished job keeps: the answer, or why there is none.
type Output struct {
	RequestID string          `json:"request_id"`
	Status    int             `json:"status_code"`    // the answer's HTTP status, or the error's
	Body      json.RawMessage `json:"body,omitempty"` // the answer (a chat completion, embeddings), as a live call would return it
	Error     *Failure        `json:"error,omitempty"`
}

// Failure is a job's last error, in the API's words.
type Failure struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Job states as the API shows them.
const (
	Queued    = "queued"
	Running   = "running"
	Succeeded = "succeeded"
	Failed    = "failed"
	Cancelled = "cancelled"
)

// Job is a queued completion as its owner sees it.
type Job struct {
	ID          string // "job_" + River's id; also the usage event's request id
	Status      string
	Attempts    int
	MaxAttempts int
	CreatedAt   time.Time
	StartedAt   *time.Time // of the latest attempt
	FinishedAt  *time.Time
	Output      *Output   // once finished (and while retrying: the last error)
	Callback    *Callback // the job's callback, if it has one
}

// JobID is the public id of River's job id.
func JobID(id int64) string { return "job_" + strconv.FormatInt(id, 10) }

// parseJobID reads a public job id; anything else names no job.
func parseJobID(s string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimPrefix(s, "job_"), 10, 64)
	return n, err == nil && n > 0 && strings.HasPrefix(s, "job_")
}

// Config shapes the queue.
type Config struct {
	Workers     int           // jobs worked at once on this node
	MaxAttempts int           // attempts before a job fails
	Retention   time.Duration // how long finished jobs and their answers are kept
	MaxWait     time.Duration // longest a worker waits in place for a bucket; longer waits are snoozes
	RetryBase   time.Duration // the first retry's backoff ceiling; it doubles per attempt, up to 10 minutes
	// ProviderTime is the longest the pipeline may spend with providers on
	// one attempt: the retry budget and a whole answer's timeout. A job
	// left running longer than that (and MaxWait) is taken for one whose
	// node was lost, and run again.
	ProviderTime time.Duration
	Now          func() time.Time

	// Webhook deliveries (job callbacks, budget alerts) have workers of
	// their own.
	DeliveryWorkers   int           // deliveries in flight at once on this node, all hosts together
	HostConcurrency   int           // deliveries in flight at once to one host on this node
	DeliveryAttempts  int           // attempts before a delivery fails
	DeliveryRetryBase time.Duration // a delivery's first retry backoff ceiling; it doubles per attempt, up to an hour
}

// rescueAfter is how long a job may run before it is taken for lost: its
// longest attempt and a minute's margin, and at least 5 minutes.
func rescueAfter(cfg Config) time.Duration {
	return max(5*time.Minute, cfg.MaxWait+cfg.ProviderTime+time.Minute)
}

// client is the part of River's generic client the queue uses, the same
// for Postgres and SQLite.
type client interface {
	Insert(ctx context.Context, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
	InsertMany(ctx context.Context, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error)
	JobGet(ctx context.Context, id int64) (*rivertype.JobRow, error)
	JobCancel(ctx context.Context, id int64) (*rivertype.JobRow, error)
	JobDeleteMany(ctx context.Context, params *river.JobDeleteManyParams) (*river.JobDeleteManyResult, error)
	JobList(ctx context.Context, params *river.JobListParams) (*river.JobListResult, error)
	JobRetry(ctx context.Context, id int64) (*rivertype.JobRow, error)
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// Queue is the node's job queue: it inserts, reads and cancels jobs, and
// works them.
type Queue struct {
	client client
	// insertAll inserts the jobs fill adds in one transaction, a chunk at
	// a time; fill reads through tx (SQLite's, nil on Postgres).
	insertAll func(ctx context.Context, fill func(tx *sql.Tx, add func(river.InsertManyParams) error) error) error
	// insertHeld inserts a job that takes one of its organization's places
	// for queued jobs, in one transaction: false, and no job, when the
	// organization has limit queued already.
	insertHeld func(ctx context.Context, orgID, limit int64, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, bool, error)
	store      *models.Store
	stats      *sql.DB
	sqlite     bool // River's SQLite driver lists by metadata its own way
	cfg        Config
	close      func()
}

// Notifier posts body to url once, signed for orgID: a delivery's attempt.
type Notifier func(ctx context.Context, orgID int64, url string, body []byte) error

// BatchLines is what the worker asks and tells the batches of the lines it
// works: whether a line may still run (not when its batch was cancelled or
// its window is over: then the line ends with that Failure, unrun), and
// each line's final outcome. An error from either is retried.
type BatchLines interface {
	Stopped(ctx context.Context, batchID int64) (*Failure, error)
	LineDone(ctx context.Context, batchID int64, customID string, jobID string, out Output) error
}

// Deps are what the queue's workers use.
type Deps struct {
	DB          *models.DB
	DatabaseURL string // Postgres: River gets a pgx pool of its own; "" for SQLite
	Pipeline    *completion.Pipeline
	Directory   *accounts.Directory
	Notify      Notifier
	Batches     BatchLines // where batch lines' outcomes go; nil: no batches
	Log         *slog.Logger
}

// New builds the queue on d.DB. Call Start to work jobs.
func New(ctx context.Context, d Deps, cfg Config) (*Queue, error) {
	store := models.NewStore(d.DB)
	q := &Queue{cfg: cfg, store: store, close: func() {}}
	w := &worker{pipeline: d.Pipeline, dir: d.Directory, batches: d.Batches, places: store, log: d.Log,
		maxWait: cfg.MaxWait, retryBase: cfg.RetryBase}
	if d.Notify != nil {
		w.deliver = q.insertDelivery
	}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, w); err != nil {
		return nil, err
	}
	if err := river.AddWorkerSafely(workers, &lineWorker{w: w}); err != nil {
		return nil, err
	}
	queues := map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.Workers}}
	if d.Notify != nil {
		if err := river.AddWorkerSafely(workers, &deliveryWorker{notify: d.Notify, final: q.final, retryBase: cfg.DeliveryRetryBase, log: d.Log,
			hosts: &hostSlots{limit: cfg.HostConcurrency, busy: map[string]int{}}}); err != nil {
			return nil, err
		}
		queues[deliveryQueue] = river.QueueConfig{MaxWorkers: cfg.DeliveryWorkers}
	}
	rc := &river.Config{
		Queues:      queues,
		Workers:     workers,
		MaxAttempts: cfg.MaxAttempts,
		// Finished jobs are deleted by DeleteExpired, on the queue's clock;
		// River's cleaner (on its own clock, every 30 s) is off.
		CompletedJobRetentionPeriod: -1,
		CancelledJobRetentionPeriod: -1,
		DiscardedJobRetentionPeriod: -1,
		FetchCooldown:               50 * time.Millisecond,
		FetchPollInterval:           500 * time.Millisecond,
		JobTimeout:                  -1, // the pipeline bounds provider calls; a job waiting for a bucket must not time out
		// A job left running by a lost node is run again after this:
		// longer than an attempt can take (MaxWait, then the providers'
		// time), or a slow answer would be asked for twice.
		RescueStuckJobsAfter: rescueAfter(cfg),
		Logger:               d.Log,
	}
	sqlDB, err := d.DB.SQL()
	if err != nil {
		return nil, err
	}
	q.stats = sqlDB
	if d.DB.Dialect == "postgres" {
		pool, err := pgxpool.New(ctx, d.DatabaseURL)
		if err != nil {
			return nil, fmt.Errorf("jobs: %w", err)
		}
		c, err := river.NewClient(riverpgxv5.New(pool), rc)
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("jobs: %w", err)
		}
		q.client, q.close = c, pool.Close
		q.insertAll = func(ctx context.Context, fill func(*sql.Tx, func(river.InsertManyParams) error) error) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				return inChunks(func(add func(river.InsertManyParams) error) error { return fill(nil, add) },
					func(chunk []river.InsertManyParams) error {
						_, err := c.InsertManyFastTx(ctx, tx, chunk)
						return err
					})
			})
		}
		q.insertHeld = func(ctx context.Context, orgID, limit int64, args river.JobArgs, opts *river.InsertOpts) (res *rivertype.JobInsertResult, ok bool, err error) {
			err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				res, ok, err = insertHeld(ctx, pgxExec{tx}, orgID, limit, func() (*rivertype.JobInsertResult, error) {
					return c.InsertTx(ctx, tx, args, opts)
				})
				return err
			})
			return res, ok, err
		}
	} else {
		// SQLite has one writer: River's polling shares the one connection.
		rc.PollOnly, q.sqlite = true, true
		c, err := river.NewClient(riversqlite.New(sqlDB), rc)
		if err != nil {
			return nil, fmt.Errorf("jobs: %w", err)
		}
		q.client = c
		q.insertAll = func(ctx context.Context, fill func(*sql.Tx, func(river.InsertManyParams) error) error) error {
			tx, err := sqlDB.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			err = inChunks(func(add func(river.InsertManyParams) error) error { return fill(tx, add) },
				func(chunk []river.InsertManyParams) error {
					_, err := c.InsertManyFastTx(ctx, tx, chunk)
					return err
				})
			if err != nil {
				return err
			}
			return tx.Commit()
		}
		q.insertHeld = func(ctx context.Context, orgID, limit int64, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, bool, error) {
			tx, err := sqlDB.BeginTx(ctx, nil)
			if err != nil {
				return nil, false, err
			}
			defer tx.Rollback()
			res, ok, err := insertHeld(ctx, sqlExec{tx}, orgID, limit, func() (*rivertype.JobInsertResult, error) {
				return c.InsertTx(ctx, tx, args, opts)
			})
			if err != nil {
				return nil, false, err
			}
			return res, ok, tx.Commit()
		}
	}
	return q, nil
}

// insertHeld takes a place of orgID's queued jobs, inserts the job and
// records that it holds the place, on one transaction ex: a job is never
// counted without existing nor queued without being counted, whatever
// fails in between.
func insertHeld(ctx context.Context, ex models.Execer, orgID, limit int64, insert func() (*rivertype.JobInsertResult, error)) (*rivertype.JobInsertResult, bool, error) {
	ok, err := models.TakeQueuedJob(ctx, ex, orgID, limit)
	if err != nil || !ok {
		return nil, false, err
	}
	res, err := insert()
	if err != nil {
		return nil, false, err
	}
	return res, true, models.HoldQueuedJob(ctx, ex, orgID, res.Job.ID)
}

// pgxExec and sqlExec run models' statements on the queue's own
// transactions; models writes ? placeholders, which pgx wants as $n.
type pgxExec struct{ tx pgx.Tx }

func (e pgxExec) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	tag, err := e.tx.Exec(ctx, b.String(), args...)
	return tag.RowsAffected(), err
}

type sqlExec struct{ tx *sql.Tx }

func (e sqlExec) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := e.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// inChunks calls fn on the params fill adds, a thousand at a time or
// fewer when their bodies pass chunkBytes: one statement each, however
// long the batch, and no more than a chunk of it held.
func inChunks(fill func(add func(river.InsertManyParams) error) error, fn func([]river.InsertManyParams) error) error {
	const chunkLines, chunkBytes = 1000, 1 << 20
	var chunk []river.InsertManyParams
	size := 0
	flush := func() error {
		if len(chunk) == 0 {
			return nil
		}
		err := fn(chunk)
		clear(chunk)
		chunk, size = chunk[:0], 0
		return err
	}
	err := fill(func(p river.InsertManyParams) error {
		chunk = append(chunk, p)
		if a, ok := p.Args.(lineArgs); ok {
			size += len(a.Body)
		}
		if len(chunk) == chunkLines || size >= chunkBytes {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}

// Migrate applies River's own migrations, which keep its tables (jobs,
// queues, leader) in the database next to Sluice's.
func Migrate(ctx context.Context, db *models.DB, databaseURL string) (int, error) {
	return withMigrator(ctx, db, databaseURL, func(m migrator) (int, error) {
		res, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil)
		if err != nil {
			return 0, fmt.Errorf("jobs: migrating River's tables: %w", err)
		}
		return len(res.Versions), nil
	})
}

// CheckMigrated refuses an older schema of River's tables, as
// migrations.Check does for Sluice's.
func CheckMigrated(ctx context.Context, db *models.DB, databaseURL string) error {
	_, err := withMigrator(ctx, db, databaseURL, func(m migrator) (int, error) {
		res, err := m.Validate(ctx, nil)
		if err != nil {
			return 0, fmt.Errorf("jobs: checking River's tables: %w", err)
		}
		if !res.OK {
			return 0, fmt.Errorf("the job queue's tables are not migrated (%s): run `sluice migrate`", strings.Join(res.Messages, "; "))
		}
		return 0, nil
	})
	return err
}

// migrator is the part of rivermigrate's generic Migrator used here.
type migrator interface {
	Migrate(ctx context.Context, direction rivermigrate.Direction, opts *rivermigrate.MigrateOpts) (*rivermigrate.MigrateResult, error)
	Validate(ctx context.Context, opts *rivermigrate.ValidateOpts) (*rivermigrate.ValidateResult, error)
}

func withMigrator(ctx context.Context, db *models.DB, databaseURL string, fn func(migrator) (int, error)) (int, error) {
	if db.Dialect == "postgres" {
		pool, err := pgxpool.New(ctx, databaseURL)
		if err != nil {
			return 0, fmt.Errorf("jobs: %w", err)
		}
		defer pool.Close()
		m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
		if err != nil {
			return 0, err
		}
		return fn(m)
	}
	sqlDB, err := db.SQL()
	if err != nil {
		return 0, err
	}
	m, err := rivermigrate.New(riversqlite.New(sqlDB), nil)
	if err != nil {
		return 0, err
	}
	return fn(m)
}

// Start works jobs until Stop.
func (q *Queue) Start(ctx context.Context) error { return q.client.Start(ctx) }

// Stop finishes the jobs in flight (within ctx) and releases the queue.
// A job cut short by ctx is worked again after the next start.
func (q *Queue) Stop(ctx context.Context) error {
	err := q.client.Stop(ctx)
	q.close()
	return err
}

// DeleteExpired deletes the jobs, and with them their answers, that
// finished longer than the retention ago by the queue's clock, a chunk at a
// time, and returns how many. First it gives back the places of finished
// jobs that did not give theirs back. Deleting and giving back are
// idempotent, so every node may run it.
func (q *Queue) DeleteExpired(ctx context.Context) (int, error) {
	if _, err := q.store.ReleaseFinishedJobs(ctx); err != nil {
		return 0, err
	}
	const chunk = 1000
	cutoff := q.cfg.Now().Add(-q.cfg.Retention)
	var horizon any = cutoff
	if q.sqlite { // River's SQLite schema keeps times as text in this form
		horizon = cutoff.UTC().Format("2006-01-02 15:04:05.000")
	}
	params := river.NewJobDeleteManyParams().
		States(rivertype.JobStateCompleted, rivertype.JobStateCancelled, rivertype.JobStateDiscarded).
		Where("finalized_at < @horizon", river.NamedArgs{"horizon": horizon}).First(chunk)
	deleted := 0
	for {
		res, err := q.client.JobDeleteMany(ctx, params)
		if err != nil {
			return deleted, fmt.Errorf("jobs: deleting expired jobs: %w", err)
		}
		deleted += len(res.Jobs)
		if len(res.Jobs) < chunk {
			return deleted, nil
		}
	}
}

// Errors of the job API.
var (
	ErrNoJob     = apperr.WithReason(apperr.NotFound, "job_not_found", "no such job (or it expired)")
	errNoStreams = apperr.Field(apperr.Invalid, "unsupported_stream", "stream", "a job cannot stream: its answer is kept for GET /v1/jobs/{id}; send stream false")
)

// Enqueue queues a chat completion for caller: it must parse as a live
// request would (so a bad request fails now, not later), and may not
// stream. callbackURL, if set, must be on an allowed host (the caller
// checks it). It takes one of the organization's places for queued jobs,
// given back when the job finishes; with none left it is refused (429
// queue_full, counted as a rejection) and nothing is queued.
func (q *Queue) Enqueue(ctx context.Context, p *completion.Pipeline, caller accounts.Caller, body []byte, priority, callbackURL string) (Job, error) {
	req, err := checked(p, ChatCompletions, body)
	if err == nil {
		// Refused now, as a live request would be, rather than failing
		// when it runs.
		err = completion.CheckModel(caller, req.Model)
	}
	if err != nil {
		return Job{}, err
	}
	args := Args{OrgID: caller.OrgID, TokenID: caller.TokenID, Body: body, Priority: priority, CallbackURL: callbackURL}
	limit := caller.Tier.MaxQueuedJobs
	res, ok, err := q.insertHeld(ctx, caller.OrgID, limit, args, insertOpts(caller.OrgID))
	if err != nil {
		return Job{}, apperr.Wrap(err, "queueing a job")
	}
	if !ok {
		p.Rejected(caller, metering.RejectedQueue)
		queued, err := q.store.QueuedJobs(ctx, caller.OrgID)
		if err != nil {
			queued = limit // the words need a number; the refusal stands
		}
		return Job{}, models.ErrJobsFull(caller.Tier.Name, limit, queued)
	}
	return q.view(res.Job), nil
}

// The endpoints a queued request may be for, as OpenAI's paths name them.
const (
	ChatCompletions = "/v1/chat/completions"
	Embeddings      = "/v1/embeddings"
)

// Check says whether body may be queued for endpoint (ChatCompletions,
// "" too, or Embeddings): it must parse as a live request would (so a bad
// request fails now, not later), and may not stream.
func Check(p *completion.Pipeline, endpoint string, body []byte) error {
	_, err := checked(p, endpoint, body)
	return err
}

// checked is Check, with the request it parsed.
func checked(p *completion.Pipeline, endpoint string, body []byte) (completion.Request, error) {
	req, err := parse(p, endpoint, body)
	if err != nil {
		return req, err
	}
	if req.Stream {
		return req, errNoStreams
	}
	return req, nil
}

// parse reads body as a request to endpoint.
func parse(p *completion.Pipeline, endpoint string, body []byte) (completion.Request, error) {
	switch endpoint {
	case "", ChatCompletions:
		return p.Parse(body)
	case Embeddings:
		return p.ParseEmbeddings(body)
	}
	return completion.Request{}, apperr.New(apperr.Internal, "jobs: no endpoint %q", endpoint)
}

// argsEndpoint is endpoint as Args keeps it: chat completions as "".
func argsEndpoint(endpoint string) string {
	if endpoint == ChatCompletions {
		return ""
	}
	return endpoint
}

// Line is one request of a batch: its custom_id, its endpoint (the
// batch's) and a body that passed Check.
type Line struct {
	CustomID string
	Endpoint string
	Body     json.RawMessage
}

// batchPriority is River's priority of batch lines (1 is first, 4 last):
// a job queued on its own goes before the lines of a large batch.
const batchPriority = 3

// LineSource passes a batch's lines, in order, to yield. It runs inside the
// queue's transaction: on SQLite that transaction holds the database's one
// connection, and tx (nil on Postgres) is what to read it through.
type LineSource func(ctx context.Context, tx *sql.Tx, yield func(Line) error) error

// Lines is a source of lines already read.
func Lines(lines []Line) LineSource {
	return func(_ context.Context, _ *sql.Tx, yield func(Line) error) error {
		for _, l := range lines {
			if err := yield(l); err != nil {
				return err
			}
		}
		return nil
	}
}

// EnqueueBatch queues the lines of caller's batch batchID, each a job of
// its own, all or none, as lines reads them: a chunk of them is held at a
// time. A line's outcome goes to the queue's BatchLines.
func (q *Queue) EnqueueBatch(ctx context.Context, caller accounts.Caller, batchID int64, lines LineSource) error {
	// Unique by their arguments (the batch, the line, its body): should two
	// nodes queue a stranded batch at once, no line is queued twice (on
	// Postgres the second insert fails whole; River's SQLite driver skips
	// the duplicates).
	opts := &river.InsertOpts{Priority: batchPriority, Metadata: []byte(fmt.Sprintf(`{"org_id":%d,"batch_id":%d}`, caller.OrgID, batchID)),
		UniqueOpts: river.UniqueOpts{ByArgs: true}}
	err := q.insertAll(ctx, func(tx *sql.Tx, add func(river.InsertManyParams) error) error {
		return lines(ctx, tx, func(l Line) error {
			return add(river.InsertManyParams{Args: lineArgs{Args{OrgID: caller.OrgID, TokenID: caller.TokenID, Endpoint: argsEndpoint(l.Endpoint),
				Body: l.Body, BatchID: batchID, CustomID: l.CustomID}}, InsertOpts: opts})
		})
	})
	if err != nil {
		var known *apperr.Error
		if errors.As(err, &known) {
			return err
		}
		return apperr.Wrap(err, "queueing a batch's lines")
	}
	return nil
}

// HasBatchLines says whether any of batch batchID's lines was ever queued
// (and not yet deleted with the retention).
func (q *Queue) HasBatchLines(ctx context.Context, batchID int64) (bool, error) {
	res, err := q.client.JobList(ctx, q.withMetadata(river.NewJobListParams().Kinds((lineArgs{}).Kind()), "batch_id", batchID).First(1))
	if err != nil {
		return false, apperr.Wrap(err, "listing a batch's lines")
	}
	return len(res.Jobs) > 0, nil
}

// WakeBatch makes the lines of batch batchID that wait (snoozed for a
// bucket, or backing off before a retry) available now, so that a
// cancelled batch's lines are skipped at once rather than when they would
// have run.
func (q *Queue) WakeBatch(ctx context.Context, batchID int64) error {
	params := q.withMetadata(river.NewJobListParams().Kinds((lineArgs{}).Kind()), "batch_id", batchID).
		States(rivertype.JobStateScheduled, rivertype.JobStateRetryable).First(500)
	for {
		res, err := q.client.JobList(ctx, params)
		if err != nil {
			return apperr.Wrap(err, "listing a batch's waiting lines")
		}
		for _, j := range res.Jobs {
			if _, err := q.client.JobRetry(ctx, j.ID); err != nil && !errors.Is(err, river.ErrNotFound) {
				return apperr.Wrap(err, "waking a batch's line")
			}
		}
		if len(res.Jobs) < 500 {
			return nil
		}
		params = params.After(res.LastCursor)
	}
}

// insertOpts tags a job with its organization, so listing is scoped.
func insertOpts(orgID int64) *river.InsertOpts {
	return &river.InsertOpts{Metadata: []byte(`{"org_id":` + strconv.FormatInt(orgID, 10) + `}`)}
}

// Get returns one of orgID's jobs; another organization's, or one past its
// retention, is not found.
func (q *Queue) Get(ctx context.Context, orgID int64, id string) (Job, error) {
	row, err := q.row(ctx, orgID, id)
	if err != nil {
		return Job{}, err
	}
	j := q.view(row)
	return j, q.withCallback(ctx, &j, row.ID)
}

// Cancel cancels one of orgID's jobs that has not started; a running or
// finished job is a conflict.
func (q *Queue) Cancel(ctx context.Context, orgID int64, id string) (Job, error) {
	row, err := q.row(ctx, orgID, id)
	if err != nil {
		return Job{}, err
	}
	if st := q.view(row).Status; st != Queued {
		return Job{}, apperr.WithReason(apperr.Conflict, "job_not_cancellable", "the job is "+st+"; only a queued job can be cancelled")
	}
	row, err = q.client.JobCancel(ctx, row.ID)
	if err != nil {
		return Job{}, apperr.Wrap(err, "cancelling a job")
	}
	if row.State == rivertype.JobStateCancelled {
		// No worker will finish it: its place is given back here (or, should
		// this fail, by DeleteExpired's sweep).
		if err := q.store.ReleaseQueuedJob(ctx, row.ID); err != nil {
			return Job{}, err
		}
	}
	// A job picked up between the check and the cancel is asked to stop;
	// report what it is now.
	return q.view(row), nil
}

func (q *Queue) row(ctx context.Context, orgID int64, id string) (*rivertype.JobRow, error) {
	n, ok := parseJobID(id)
	if !ok {
		return nil, ErrNoJob
	}
	row, err := q.client.JobGet(ctx, n)
	if errors.Is(err, river.ErrNotFound) {
		return nil, ErrNoJob
	}
	if err != nil {
		return nil, apperr.Wrap(err, "reading a job")
	}
	var a Args
	if json.Unmarshal(row.EncodedArgs, &a) != nil || a.OrgID != orgID || row.Kind != (Args{}).Kind() {
		return nil, ErrNoJob
	}
	if row.FinalizedAt != nil && q.cfg.Now().Sub(*row.FinalizedAt) > q.cfg.Retention {
		return nil, ErrNoJob // expired: DeleteExpired deletes it soon
	}
	return row, nil
}

// List returns orgID's latest jobs, newest first.
func (q *Queue) List(ctx context.Context, orgID int64, limit int) ([]Job, error) {
	res, err := q.client.JobList(ctx, q.withMetadata(river.NewJobListParams().Kinds((Args{}).Kind()), "org_id", orgID).
		OrderBy(river.JobListOrderByID, river.SortOrderDesc).First(limit))
	if err != nil {
		return nil, apperr.Wrap(err, "listing jobs")
	}
	out := make([]Job, 0, len(res.Jobs))
	for _, r := range res.Jobs {
		if j := q.view(r); j.FinishedAt == nil || q.cfg.Now().Sub(*j.FinishedAt) <= q.cfg.Retention {
			if err := q.withCallback(ctx, &j, r.ID); err != nil {
				return nil, err
			}
			out = append(out, j)
		}
	}
	return out, nil
}

// withMetadata narrows p to jobs whose metadata has key = value: with
// Postgres's @> (which River's index on metadata serves), or on SQLite,
// where River has no Metadata filter, by comparing the key's value.
func (q *Queue) withMetadata(p *river.JobListParams, key string, value int64) *river.JobListParams {
	if q.sqlite {
		return p.Where("metadata ->> @path_"+key+" = @value_"+key, river.NamedArgs{"path_" + key: "$." + key, "value_" + key: value})
	}
	return p.Metadata(`{"` + key + `":` + strconv.FormatInt(value, 10) + `}`)
}

// view is a River row as the API shows it.
func (q *Queue) view(r *rivertype.JobRow) Job {
	j := Job{ID: JobID(r.ID), Attempts: r.Attempt, MaxAttempts: r.MaxAttempts, CreatedAt: r.CreatedAt.UTC(),
		StartedAt: r.AttemptedAt, FinishedAt: r.FinalizedAt}
	var meta struct {
		Output *Output `json:"output"`
	}
	if json.Unmarshal(r.Metadata, &meta) == nil {
		j.Output = meta.Output
	}
	var a Args
	if json.Unmarshal(r.EncodedArgs, &a) == nil && a.CallbackURL != "" {
		j.Callback = &Callback{URL: webhook.Redact(a.CallbackURL), Status: CallbackPending}
	}
	switch r.State {
	case rivertype.JobStateRunning:
		j.Status = Running
	case rivertype.JobStateCompleted:
		j.Status = Succeeded
	case rivertype.JobStateDiscarded:
		j.Status = Failed
	case rivertype.JobStateCancelled:
		j.Status = Cancelled
		if j.Output != nil && j.Output.Error != nil {
			j.Status = Failed // cancelled by its own worker: a failure no retry could fix
		}
	default: // available, scheduled, retryable, pending
		j.Status = Queued
	}
	return j
}

// Stats are the node's view of the queue for operators: jobs waiting to
// run and how long the oldest has waited (webhook deliveries, on a queue
// of their own, are not jobs).
type Stats struct {
	Waiting int64
	Oldest  time.Duration
}

// Stats reads the queue's depth and the age of its oldest waiting job.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	var oldest sql.NullString
	err := q.stats.QueryRowContext(ctx, `SELECT COUNT(*), MIN(created_at) FROM river_job
		WHERE state IN ('available', 'scheduled', 'retryable', 'pending') AND queue = 'default'`).Scan(&s.Waiting, &oldest)
	if err != nil {
		return s, apperr.Wrap(err, "job queue stats")
	}
	if oldest.Valid {
		if t, ok := parseDBTime(oldest.String); ok {
			s.Oldest = max(q.cfg.Now().Sub(t), 0)
		}
	}
	return s, nil
}

// parseDBTime reads a timestamp as Postgres or SQLite write it as text.
func parseDBTime(s string) (time.Time, bool) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999-07:00", "2006-01-02 15:04:05.999999999-07",
		"2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}
