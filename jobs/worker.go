package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/riverqueue/river"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/completion"
	"github.com/sluicehq/sluice/models"
)

// worker runs queued requests (chat completions, a batch's embeddings)
// through the pipeline.
type worker struct {
	river.WorkerDefaults[Args]
	pipeline *completion.Pipeline
	dir      *accounts.Directory
	// deliver queues a job's callback; nil when the node sends none.
	deliver func(context.Context, deliveryArgs) error
	batches BatchLines
	places  *models.Store // gives back a finished job's place in its organization's queue
	log     *slog.Logger
	maxWait time.Duration
	// retryBase is the first retry's backoff ceiling.
	retryBase time.Duration
}

// Work runs one attempt of a job. A job whose buckets are busy, or whose
// token is frozen, waits: in place when the wait is short, else snoozed
// (which frees the worker and costs no attempt). What no retry can fix (a
// spent budget, a revoked token, a request the provider refused) fails the
// job at once; anything else (providers unavailable) is retried after a
// backoff longer than a live request's, until the attempts run out.
func (w *worker) Work(ctx context.Context, job *river.Job[Args]) error {
	a := job.Args
	out := Output{RequestID: JobID(job.ID)}
	caller, err := w.dir.CallerByTokenID(ctx, a.TokenID)
	if err != nil {
		if apperr.CodeOf(err) == apperr.Unauthorized { // revoked, expired or deleted: for good
			return w.fail(ctx, job, out, err)
		}
		w.log.Warn("a job could not read its token; retrying", "job_id", out.RequestID, "attempt", job.Attempt, "err", err)
		return err
	}
	req, err := parse(w.pipeline, a.Endpoint, a.Body)
	if err != nil {
		return w.fail(ctx, job, out, err)
	}
	// The job's id is the usage event's request id: a job worked twice (a
	// node lost mid-attempt) is metered once.
	req.ID, req.Priority, req.Queued, req.Stream = out.RequestID, a.Priority, true, false
	for {
		// A batch's line asks its batch first, and again after each wait
		// for a bucket: one that was cancelled, or whose window is over,
		// ends unrun.
		if a.BatchID != 0 && w.batches != nil {
			stopped, err := w.batches.Stopped(ctx, a.BatchID)
			if err != nil {
				if ctx.Err() != nil {
					return river.JobSnooze(0) // shutting down, as below
				}
				return err
			}
			if stopped != nil {
				out.Error = stopped
				return w.finish(ctx, job, out, river.JobCancel(errors.New(stopped.Message)))
			}
		}
		sink := newBuffer()
		served, err := w.pipeline.Complete(ctx, caller, &req, sink)
		if err == nil {
			out.Status, out.Body = served.Status, sink.body.Bytes()
			if served.Status/100 != 2 { // the provider refused the request itself
				out.Error = &Failure{Code: "provider_refused", Message: "the provider answered " + http.StatusText(served.Status)}
				return w.finish(ctx, job, out, river.JobCancel(apperr.New(apperr.Invalid, "provider answered %d", served.Status)))
			}
			return w.finish(ctx, job, out, nil)
		}
		e := apperr.As(err)
		switch {
		case ctx.Err() != nil:
			// Shutting down: nothing was delivered; the next start picks
			// the job up again without counting an attempt.
			return river.JobSnooze(0)
		case e.Reason == completion.ErrWait || e.Code == apperr.Frozen:
			if e.RetryAfter > w.maxWait {
				return river.JobSnooze(e.RetryAfter)
			}
			if sleep(ctx, e.RetryAfter) != nil {
				return river.JobSnooze(0)
			}
		case retryable(e.Code):
			w.log.Warn("a job's attempt failed", "job_id", out.RequestID, "attempt", job.Attempt, "of", job.MaxAttempts, "err", err)
			out.Status, out.Error = apperr.Status(e.Code), FailureOf(e)
			if job.Attempt >= job.MaxAttempts {
				return w.finish(ctx, job, out, err)
			}
			_ = river.RecordOutput(ctx, out) // the last error, visible while it waits to retry
			return err
		default:
			return w.fail(ctx, job, out, err)
		}
	}
}

// retryable says whether another attempt, later, may succeed.
func retryable(c apperr.Code) bool {
	return c == apperr.Unavailable || c == apperr.Timeout || c == apperr.BadUpstream || c == apperr.Internal
}

// fail ends a job with an error no retry can fix.
func (w *worker) fail(ctx context.Context, job *river.Job[Args], out Output, err error) error {
	e := apperr.As(err)
	out.Status, out.Error = apperr.Status(e.Code), FailureOf(e)
	return w.finish(ctx, job, out, river.JobCancel(err))
}

// FailureOf is how e reads in a job's or a batch line's outcome: its reason
// (or code) and message, an internal error's message hidden.
func FailureOf(e *apperr.Error) *Failure {
	code := string(e.Code)
	if e.Reason != "" {
		code = e.Reason
	}
	msg := e.Message
	if e.Code == apperr.Internal {
		msg = "internal error"
	}
	return &Failure{Code: code, Message: msg}
}

// finish records a job's final outcome, tells its batch, queues its
// callback (posted by the delivery workers, never in this worker's slot),
// and returns what River should do with it.
func (w *worker) finish(ctx context.Context, job *river.Job[Args], out Output, result error) error {
	if err := river.RecordOutput(ctx, out); err != nil {
		w.log.Error("recording a job's output failed", "job_id", out.RequestID, "err", err)
	}
	a := job.Args
	if a.BatchID == 0 {
		// Once, however often the job is finished; should this fail,
		// DeleteExpired's sweep gives it back.
		if err := w.places.ReleaseQueuedJob(context.WithoutCancel(ctx), job.ID); err != nil {
			w.log.Warn("giving back a finished job's place failed; the sweep gives it back", "job_id", out.RequestID, "err", err)
		}
	}
	if a.BatchID != 0 && w.batches != nil {
		if err := w.lineDone(ctx, a, out); err != nil {
			return err // retried: the line's outcome must reach its batch
		}
	}
	if a.CallbackURL != "" && w.deliver != nil {
		status := Succeeded
		if out.Error != nil {
			status = Failed
		}
		body, _ := json.Marshal(struct {
			ID     string  `json:"id"`
			Object string  `json:"object"`
			Status string  `json:"status"`
			Result *Output `json:"result"`
		}{out.RequestID, "job", status, &out})
		if err := w.queueCallback(context.WithoutCancel(ctx), deliveryArgs{OrgID: a.OrgID, URL: a.CallbackURL, Body: body, JobID: job.ID}); err != nil {
			// Not a reason to run the job again (the provider would be
			// paid twice): its callback stays pending, and says so.
			w.log.Error("queueing a job's callback failed", "job_id", out.RequestID, "err", err)
		}
	}
	return result
}

// lineDone tells a line's batch its outcome, trying again for a few
// seconds before giving up: giving up retries the whole job, which asks the
// provider again (metered once, by the job's id, but paid to the provider
// twice), so a database blip must not get that far.
func (w *worker) lineDone(ctx context.Context, a Args, out Output) error {
	wait := max(w.retryBase/100, time.Millisecond) // 100 ms by default, doubling: ~6 s in all
	for attempt := 1; ; attempt++ {
		err := w.batches.LineDone(ctx, a.BatchID, a.CustomID, out.RequestID, out)
		if err == nil || attempt == 6 {
			return err
		}
		w.log.Warn("telling a batch a line's outcome failed; trying again", "job_id", out.RequestID, "attempt", attempt, "err", err)
		if sleep(ctx, wait) != nil {
			return err
		}
		wait *= 2
	}
}

// queueCallback queues a job's callback, trying again for a few seconds
// as lineDone does.
func (w *worker) queueCallback(ctx context.Context, d deliveryArgs) error {
	wait := max(w.retryBase/100, time.Millisecond)
	for attempt := 1; ; attempt++ {
		err := w.deliver(ctx, d)
		if err == nil || attempt == 6 {
			return err
		}
		if sleep(ctx, wait) != nil {
			return err
		}
		wait *= 2
	}
}

// NextRetry backs off longer than a live request's retries do: the job can
// wait, and providers that failed it need time. Full jitter over retryBase
// (10 s by default) doubling per attempt, capped at 10 minutes.
func (w *worker) NextRetry(job *river.Job[Args]) time.Time {
	ceil := w.retryBase << min(max(job.Attempt-1, 0), 10)
	return time.Now().Add(time.Duration(rand.Float64() * float64(min(ceil, 10*time.Minute))))
}

// lineWorker works a batch's lines as worker works jobs.
type lineWorker struct {
	river.WorkerDefaults[lineArgs]
	w *worker
}

func (l *lineWorker) Work(ctx context.Context, job *river.Job[lineArgs]) error {
	return l.w.Work(ctx, &river.Job[Args]{JobRow: job.JobRow, Args: job.Args.Args})
}

func (l *lineWorker) NextRetry(job *river.Job[lineArgs]) time.Time {
	return l.w.NextRetry(&river.Job[Args]{JobRow: job.JobRow, Args: job.Args.Args})
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// buffer is the pipeline's Sink for a job: it keeps the whole answer.
type buffer struct {
	header http.Header
	body   bytes.Buffer
}

func newBuffer() *buffer { return &buffer{header: http.Header{}} }

func (b *buffer) Header() http.Header { return b.header }

func (b *buffer) Send(_ int, _ string, body []byte) error {
	b.body.Write(body)
	return nil
}

func (b *buffer) StartStream(int) error { return nil }

func (b *buffer) Write(p []byte) (int, error) { return b.body.Write(p) }
