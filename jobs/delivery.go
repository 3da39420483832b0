package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/webhook"
)

// Webhooks are delivered by jobs of their own kind, on a queue of their
// own with workers of their own: a slow receiver holds one delivery
// worker, never a completion's, and a host at its limit snoozes its
// deliveries (which frees the worker) so other hosts go on. River gives
// what a delivery needs on both databases already: claimed by one node,
// retried with backoff, rescued from a lost node, its attempts and errors
// kept on its row (which the job's callback state is read from), deleted
// with the retention.

// deliveryQueue is River's queue of webhook deliveries.
const deliveryQueue = "webhooks"

// deliveryArgs is a webhook to post: a job's callback or a budget alert.
type deliveryArgs struct {
	OrgID int64           `json:"org_id"`
	URL   string          `json:"url"`
	Body  json.RawMessage `json:"body"`
	// JobID is the job whose callback this is; a job has one, however
	// often it is finished (a job run again after its node was lost).
	JobID int64 `json:"job_id,omitempty" river:"unique"`
}

// Kind names the delivery kind in River's tables.
func (deliveryArgs) Kind() string { return "webhook_delivery" }

// Callback states as the API shows them.
const (
	CallbackPending   = "pending"
	CallbackDelivered = "delivered"
	CallbackFailed    = "failed"
)

// Callback is a job's callback as its owner sees it.
type Callback struct {
	URL         string // its query hidden: it may carry a secret
	Status      string // CallbackPending, CallbackDelivered or CallbackFailed
	Attempts    int
	LastError   string
	DeliveredAt *time.Time
}

// hostSlots counts the deliveries in flight to each host on this node.
type hostSlots struct {
	mu    sync.Mutex
	limit int
	busy  map[string]int
}

// take claims one of host's slots, or says there is none free; release
// gives it back.
func (h *hostSlots) take(host string) (release func(), ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.busy[host] >= h.limit {
		return nil, false
	}
	h.busy[host]++
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.busy[host]--; h.busy[host] == 0 {
			delete(h.busy, host)
		}
	}, true
}

// deliveryWorker posts deliveries.
type deliveryWorker struct {
	river.WorkerDefaults[deliveryArgs]
	notify Notifier
	// final says whether job id's row is final (or gone): a job's
	// callback is posted only then.
	final     func(ctx context.Context, id int64) (bool, error)
	hosts     *hostSlots
	retryBase time.Duration
	log       *slog.Logger
}

// busySnooze is how long a delivery to a host at its limit waits before
// trying again (with up to as much again of jitter, so the waiting ones
// do not all come back at once).
const busySnooze = 2 * time.Second

// finalSnooze is how long a callback first waits for its job's row to be
// final; it doubles with each wait, up to about half a minute.
const finalSnooze = 50 * time.Millisecond

func (d *deliveryWorker) Work(ctx context.Context, job *river.Job[deliveryArgs]) error {
	a := job.Args
	// A job's callback is queued as the job ends, but River writes the
	// job's end a moment later, in a batch of its own: posted before
	// that, a receiver that reads the job back would find it running.
	if a.JobID != 0 {
		final, err := d.final(ctx, a.JobID)
		if err != nil {
			return err
		}
		if !final {
			var m struct {
				Snoozes int `json:"snoozes"`
			}
			_ = json.Unmarshal(job.Metadata, &m)
			return river.JobSnooze(finalSnooze << min(m.Snoozes, 9))
		}
	}
	host := hostOf(a.URL)
	release, ok := d.hosts.take(host)
	if !ok {
		return river.JobSnooze(busySnooze + rand.N(busySnooze))
	}
	defer release()
	err := d.notify(ctx, a.OrgID, a.URL, a.Body)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return river.JobSnooze(0) // shutting down: the next start posts it, no attempt counted
	case errors.Is(err, webhook.ErrNotAllowed):
		// The operator took the host off the list (or https became the
		// rule) since the URL was saved: no retry changes that.
		d.log.Warn("a webhook delivery is refused", "delivery_id", job.ID, "org_id", a.OrgID, "url", webhook.Redact(a.URL), "err", err)
		return river.JobCancel(err)
	}
	// Retried, its error kept on the row; an address that turned private
	// is retried too (its DNS may be fixed), each time refused at the dial.
	d.log.Info("a webhook delivery failed; retrying", "delivery_id", job.ID, "org_id", a.OrgID, "url", webhook.Redact(a.URL),
		"attempt", job.Attempt, "of", job.MaxAttempts, "err", err)
	return err
}

// NextRetry backs off with full jitter over retryBase doubling per
// attempt, at most an hour: a receiver that is down gets time to come back.
func (d *deliveryWorker) NextRetry(job *river.Job[deliveryArgs]) time.Time {
	ceil := d.retryBase << min(max(job.Attempt-1, 0), 12)
	return time.Now().Add(time.Duration(rand.Float64() * float64(min(ceil, time.Hour))))
}

// Timeout bounds an attempt beyond the client's own 10 s.
func (d *deliveryWorker) Timeout(*river.Job[deliveryArgs]) time.Duration { return 30 * time.Second }

// hostOf is the host a URL's deliveries are counted against.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Hostname())
}

// final says whether job id has ended as River keeps it; a job deleted
// already has.
func (q *Queue) final(ctx context.Context, id int64) (bool, error) {
	row, err := q.client.JobGet(ctx, id)
	if errors.Is(err, rivertype.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, apperr.Wrap(err, "reading a callback's job")
	}
	return row.FinalizedAt != nil, nil
}

// Deliver queues a signed POST of body to url for orgID (a budget alert,
// say): posted by the delivery workers, retried with backoff.
func (q *Queue) Deliver(ctx context.Context, orgID int64, url string, body []byte) error {
	return q.insertDelivery(ctx, deliveryArgs{OrgID: orgID, URL: url, Body: body})
}

func (q *Queue) insertDelivery(ctx context.Context, a deliveryArgs) error {
	meta := `{"org_id":` + strconv.FormatInt(a.OrgID, 10)
	if a.JobID != 0 {
		meta += `,"callback_of":` + strconv.FormatInt(a.JobID, 10)
	}
	opts := &river.InsertOpts{Queue: deliveryQueue, MaxAttempts: q.cfg.DeliveryAttempts, Metadata: []byte(meta + "}")}
	if a.JobID != 0 {
		opts.UniqueOpts = river.UniqueOpts{ByArgs: true} // by JobID alone: its river:"unique" tag
	}
	_, err := q.client.Insert(ctx, a, opts)
	if err != nil {
		return apperr.Wrap(err, "queueing a webhook delivery")
	}
	return nil
}

// withCallback fills in j's callback from its delivery, if one was queued
// (until then it is pending, not yet tried).
func (q *Queue) withCallback(ctx context.Context, j *Job, jobID int64) error {
	if j.Callback == nil {
		return nil
	}
	res, err := q.client.JobList(ctx, q.withMetadata(river.NewJobListParams().Kinds((deliveryArgs{}).Kind()).
		Queues(deliveryQueue), "callback_of", jobID).First(1))
	if err != nil {
		return apperr.Wrap(err, "reading a job's callback")
	}
	if len(res.Jobs) == 0 {
		return nil
	}
	r, c := res.Jobs[0], j.Callback
	c.Attempts = r.Attempt
	if n := len(r.Errors); n > 0 {
		c.LastError = r.Errors[n-1].Error
	}
	switch r.State {
	case rivertype.JobStateCompleted:
		c.Status, c.DeliveredAt = CallbackDelivered, r.FinalizedAt
	case rivertype.JobStateDiscarded, rivertype.JobStateCancelled:
		c.Status = CallbackFailed
	}
	return nil
}
