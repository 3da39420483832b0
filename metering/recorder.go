// Package metering turns admitted requests into durable usage. The request
// path only enqueues; a Recorder batches events into the database off the
// hot path and drains everything on shutdown.
package metering

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicehq/sluice/models"
)

// Sink is where batches go: the store in production.
type Sink interface {
	InsertUsageEvents(ctx context.Context, evs []models.UsageEvent) error
	AddRejections(ctx context.Context, rs []models.Rejections) error
	TouchAPITokens(ctx context.Context, lastUsed map[int64]time.Time) error
}

// Reasons a request is rejected, as the rollups count them.
const (
	RejectedRequests = "requests" // the request bucket was empty
	RejectedTokens   = "tokens"   // the tokens-per-minute bucket was empty
	RejectedFrozen   = "frozen"   // the token is frozen
	RejectedBudget   = "budget"   // the budget or the included credit is spent
)

// Recorder batches usage events. Record never touches the database; it
// blocks only when the buffer is full, which is back-pressure, not loss.
type Recorder struct {
	sink     Sink
	log      *slog.Logger
	maxBatch int
	interval time.Duration

	mu     sync.RWMutex // guards closed against Record racing Close
	closed bool
	events chan models.UsageEvent

	rejMu      sync.Mutex // guards rejections, which are counted, not queued
	rejections map[rejectionKey]*models.Rejections
	closing    chan struct{} // closed when Close starts: blocked Records give up
	abandon    chan struct{} // closed when Close's deadline passes: stop retrying
	done       chan struct{}
	once       sync.Once
}

// ErrClosed is returned by Record after Close.
var ErrClosed = errors.New("metering: recorder is closed")

// NewRecorder starts a recorder that flushes every interval or every
// maxBatch events, whichever comes first.
func NewRecorder(sink Sink, log *slog.Logger, interval time.Duration, maxBatch int) *Recorder {
	r := &Recorder{
		sink: sink, log: log, maxBatch: maxBatch, interval: interval,
		events:     make(chan models.UsageEvent, 8*maxBatch),
		rejections: make(map[rejectionKey]*models.Rejections),
		closing:    make(chan struct{}),
		abandon:    make(chan struct{}),
		done:       make(chan struct{}),
	}
	go r.loop()
	return r
}

// Touch records that a token was used by a request that is not metered
// (listing models, reading a session), so its last-used time stays true.
func (r *Recorder) Touch(tokenID int64, at time.Time) error {
	return r.Record(models.UsageEvent{TokenID: tokenID, CreatedAt: at})
}

// rejectionKey is one rollup row's identity.
type rejectionKey struct {
	org, token int64
	model      string
	hour       int64 // unix seconds
}

// Reject counts one rejected request toward its hour's rollup. Rejections
// are summed in memory and stored with the next flush, so a flood of 429s
// costs no database rows of its own.
func (r *Recorder) Reject(orgID, tokenID int64, model, reason string, at time.Time) {
	hour := at.UTC().Truncate(time.Hour)
	k := rejectionKey{orgID, tokenID, model, hour.Unix()}
	r.rejMu.Lock()
	defer r.rejMu.Unlock()
	c := r.rejections[k]
	if c == nil {
		c = &models.Rejections{OrgID: orgID, TokenID: tokenID, Model: model, Hour: hour}
		r.rejections[k] = c
	}
	switch reason {
	case RejectedRequests:
		c.Requests++
	case RejectedTokens:
		c.Tokens++
	case RejectedFrozen:
		c.Frozen++
	case RejectedBudget:
		c.Budget++
	}
}

// takeRejections hands over the counts so far.
func (r *Recorder) takeRejections() []models.Rejections {
	r.rejMu.Lock()
	defer r.rejMu.Unlock()
	if len(r.rejections) == 0 {
		return nil
	}
	out := make([]models.Rejections, 0, len(r.rejections))
	for _, c := range r.rejections {
		out = append(out, *c)
	}
	clear(r.rejections)
	return out
}

// Record enqueues one event. With the buffer full (the database is slow or
// down) it waits, which is back-pressure, until Close begins.
func (r *Recorder) Record(ev models.UsageEvent) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return ErrClosed
	}
	select {
	case r.events <- ev:
		return nil
	default:
	}
	select {
	case r.events <- ev:
		return nil
	case <-r.closing:
		return ErrClosed
	}
}

// Close stops accepting events and returns once every queued event is
// stored, or ctx ends: then the recorder stops retrying and logs how many
// events it could not store.
func (r *Recorder) Close(ctx context.Context) error {
	r.once.Do(func() { close(r.closing) })
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.events)
	}
	r.mu.Unlock()
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		close(r.abandon)
		<-r.done
		return errors.New("metering: shutdown deadline passed before every usage event was stored (see the log)")
	}
}

func (r *Recorder) loop() {
	defer close(r.done)
	tick := time.NewTicker(r.interval)
	defer tick.Stop()
	batch := make([]models.UsageEvent, 0, r.maxBatch)
	for {
		select {
		case ev, ok := <-r.events:
			if !ok {
				r.flush(batch)
				r.flushRejections()
				return
			}
			batch = append(batch, ev)
			if len(batch) >= r.maxBatch {
				r.flush(batch)
				batch = batch[:0]
			}
		case <-tick.C:
			if len(batch) > 0 {
				r.flush(batch)
				batch = batch[:0]
			}
			r.flushRejections()
		}
	}
}

// flushRejections stores the rejection counts, retrying like flush.
func (r *Recorder) flushRejections() {
	rs := r.takeRejections()
	if len(rs) == 0 {
		return
	}
	r.retry("rejection counts", len(rs), func(ctx context.Context) error { return r.sink.AddRejections(ctx, rs) })
}

// flush stores a batch, retrying with backoff until it lands: inserts are
// idempotent by request id, so a retry never double-counts.
func (r *Recorder) flush(batch []models.UsageEvent) {
	if len(batch) == 0 {
		return
	}
	lastUsed := make(map[int64]time.Time)
	billed := batch[:0:0]
	for _, ev := range batch {
		if ev.CreatedAt.After(lastUsed[ev.TokenID]) {
			lastUsed[ev.TokenID] = ev.CreatedAt
		}
		if !ev.TouchOnly() {
			billed = append(billed, ev)
		}
	}
	batch = billed
	r.retry("usage events", len(batch), func(ctx context.Context) error {
		if err := r.sink.InsertUsageEvents(ctx, batch); err != nil {
			return err
		}
		return r.sink.TouchAPITokens(ctx, lastUsed)
	})
}

// retry runs store until it succeeds, with backoff, or until Close's
// deadline passes: then what is queued is given up, and logged.
func (r *Recorder) retry(what string, n int, store func(context.Context) error) {
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := store(ctx)
		cancel()
		if err == nil {
			return
		}
		r.log.Error("storing "+what+" failed; retrying", "count", n, "attempt", attempt, "err", err)
		select {
		case <-time.After(backoff):
		case <-r.abandon:
			r.log.Error(what+" lost: the database stayed unavailable past the shutdown deadline", "count", n+len(r.events))
			for range r.events { // drain what is queued, uncounted
			}
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
