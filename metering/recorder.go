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
	TouchAPITokens(ctx context.Context, lastUsed map[int64]time.Time) error
}

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
	done   chan struct{}
}

// ErrClosed is returned by Record after Close.
var ErrClosed = errors.New("metering: recorder is closed")

// NewRecorder starts a recorder that flushes every interval or every
// maxBatch events, whichever comes first.
func NewRecorder(sink Sink, log *slog.Logger, interval time.Duration, maxBatch int) *Recorder {
	r := &Recorder{
		sink: sink, log: log, maxBatch: maxBatch, interval: interval,
		events: make(chan models.UsageEvent, 8*maxBatch),
		done:   make(chan struct{}),
	}
	go r.loop()
	return r
}

// Record enqueues one event.
func (r *Recorder) Record(ev models.UsageEvent) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return ErrClosed
	}
	r.events <- ev
	return nil
}

// Close stops accepting events and returns once every queued event is
// stored, or ctx ends; in that case the error says how many were not.
func (r *Recorder) Close(ctx context.Context) error {
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
		return errors.New("metering: shutdown timed out with usage events still queued")
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
		}
	}
}

// flush stores a batch, retrying with backoff until it lands: inserts are
// idempotent by request id, so a retry never double-counts.
func (r *Recorder) flush(batch []models.UsageEvent) {
	if len(batch) == 0 {
		return
	}
	lastUsed := make(map[int64]time.Time)
	for _, ev := range batch {
		if ev.CreatedAt.After(lastUsed[ev.TokenID]) {
			lastUsed[ev.TokenID] = ev.CreatedAt
		}
	}
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := r.sink.InsertUsageEvents(ctx, batch)
		if err == nil {
			err = r.sink.TouchAPITokens(ctx, lastUsed)
		}
		cancel()
		if err == nil {
			return
		}
		r.log.Error("storing usage events failed; retrying", "events", len(batch), "attempt", attempt, "err", err)
		time.Sleep(backoff)
		backoff = min(2*backoff, 5*time.Second)
	}
}
