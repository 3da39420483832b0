// Package metering turns admitted requests into durable usage. The request
// path only enqueues; a Recorder batches events into the database off the
// hot path and drains everything on shutdown.
package metering

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/models"
)

// Sink is where batches go: the store in production.
type Sink interface {
	// InsertUsageEvents must not keep evs once it returns: the recorder
	// reuses the batch's array for a later one.
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
	RejectedQueue    = "queue"    // the organization's queued jobs or pending batch lines are at the tier's limit
)

// RejectionReasons are every reason a request is refused with 429, the
// label values of sluice_rejections_total.
var RejectionReasons = []string{RejectedRequests, RejectedTokens, RejectedFrozen, RejectedBudget, RejectedQueue}

// Recorder batches usage events. Record never touches the database; it
// blocks only when the buffer is full, which is back-pressure, not loss.
type Recorder struct {
	sink     Sink
	log      *slog.Logger
	maxBatch int
	interval time.Duration
	flushers int                      // batches stored at once
	batches  chan []models.UsageEvent // from loop to the flushers
	spare    chan []models.UsageEvent // stored batches back to loop, whose arrays it refills

	mu     sync.RWMutex // guards closed against Record racing Close
	closed bool
	events chan models.UsageEvent
	// nudge tells loop that a batch's worth is queued (or the buffer is
	// closed). loop does not wait on events itself: a receiver waiting on
	// the channel would be woken by every Record, a goroutine switch on
	// every request's path.
	nudge chan struct{}

	rejMu      sync.Mutex // guards rejections, which are counted, not queued
	rejections map[rejectionKey]*models.Rejections
	closing    chan struct{} // closed when Close starts: blocked Records give up
	abandon    chan struct{} // closed when Close's deadline passes: stop retrying
	done       chan struct{}
	once       sync.Once

	stored  atomic.Int64 // events stored
	lost    atomic.Int64 // events given up at shutdown with the database down
	flushed func(events int, took time.Duration)
	nice    int // the flushers' thread priority while they keep up; 0: the process's
}

// Option adjusts a Recorder.
type Option func(*Recorder)

// WithFlushObserver has observe called after each stored batch with its
// size and how long storing it took, retries included (for a histogram).
func WithFlushObserver(observe func(events int, took time.Duration)) Option {
	return func(r *Recorder) { r.flushed = observe }
}

// WithFlushers has n batches stored at once (default 1). Postgres stores
// concurrent batches on as many cores; rollup rows are upserted in one
// order by every batch, so they wait for each other but never deadlock.
// SQLite has one writer: keep 1 there.
func WithFlushers(n int) Option {
	return func(r *Recorder) { r.flushers = max(1, n) }
}

// WithBackgroundPriority has the flushers store batches on threads of their
// own at nice n (Linux; elsewhere it does nothing) while they keep up. An
// embedded database stores on the cores that serve requests: a second's
// batch at 1,000 requests/s is tens of milliseconds of CPU in one burst,
// which the requests arriving meanwhile waited behind (the embedded
// default's p99, docs/BENCHMARKS.md); at a low priority the burst takes
// only the CPU they leave. With a batch's worth queued behind a batch, or
// once Close has begun, the batch is stored at the process's priority:
// the recorder never falls behind for it.
func WithBackgroundPriority(n int) Option {
	return func(r *Recorder) { r.nice = n }
}

// Depth is how many events wait in the buffer.
func (r *Recorder) Depth() int { return len(r.events) }

// Capacity is how many events the buffer holds before Record blocks.
func (r *Recorder) Capacity() int { return cap(r.events) }

// Stored is how many events have been stored since the start.
func (r *Recorder) Stored() int64 { return r.stored.Load() }

// Lost is how many events were given up: only at shutdown, when the
// database stayed down past the deadline.
func (r *Recorder) Lost() int64 { return r.lost.Load() }

// ErrClosed is returned by Record after Close.
var ErrClosed = errors.New("metering: recorder is closed")

// NewRecorder starts a recorder that flushes every interval or every
// maxBatch events, whichever comes first.
func NewRecorder(sink Sink, log *slog.Logger, interval time.Duration, maxBatch int, opts ...Option) *Recorder {
	r := &Recorder{
		sink: sink, log: log, maxBatch: maxBatch, interval: interval,
		events:     make(chan models.UsageEvent, 8*maxBatch),
		nudge:      make(chan struct{}, 1),
		rejections: make(map[rejectionKey]*models.Rejections),
		closing:    make(chan struct{}),
		abandon:    make(chan struct{}),
		done:       make(chan struct{}),
		flushers:   1,
	}
	for _, o := range opts {
		o(r)
	}
	// One batch may wait while each flusher stores one: the loop keeps
	// collecting meanwhile, and the buffer bounds what waits beyond that.
	r.batches = make(chan []models.UsageEvent, 1)
	r.spare = make(chan []models.UsageEvent, r.flushers+1)
	var flushing sync.WaitGroup
	for range r.flushers {
		flushing.Go(r.flushBatches)
	}
	go func() {
		r.loop()
		close(r.batches)
		flushing.Wait()
		r.flushRejections()
		close(r.done)
	}()
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
	case RejectedQueue:
		c.Queue++
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
		if len(r.events) >= r.maxBatch {
			r.wake()
		}
		return nil
	default:
	}
	r.wake()
	select {
	case r.events <- ev:
		return nil
	case <-r.closing:
		return ErrClosed
	}
}

// wake nudges loop to take what is queued now.
func (r *Recorder) wake() {
	select {
	case r.nudge <- struct{}{}:
	default:
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
		r.wake()
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

// loop collects events into batches for the flushers, every interval or
// when nudged, until the buffer is closed and drained.
func (r *Recorder) loop() {
	tick := time.NewTicker(r.interval)
	defer tick.Stop()
	batch := r.emptyBatch()
	send := func() {
		if len(batch) > 0 {
			r.batches <- batch
			batch = r.emptyBatch()
		}
	}
	// drain moves what is queued into batches, sending each full one; it
	// reports false once the buffer is closed and empty.
	drain := func() bool {
		for {
			select {
			case ev, ok := <-r.events:
				if !ok {
					return false
				}
				batch = append(batch, ev)
				if len(batch) >= r.maxBatch {
					send()
				}
			default:
				return true
			}
		}
	}
	for {
		select {
		case <-r.nudge:
			if !drain() {
				send()
				return
			}
		case <-tick.C:
			open := drain()
			send()
			if !open {
				return
			}
			r.flushRejections()
		}
	}
}

// flushBatches stores batches until there are no more, at the background
// priority while the recorder keeps up.
func (r *Recorder) flushBatches() {
	background := false
	if r.nice > 0 {
		// The lowered thread is this goroutine's alone, and ends with it.
		if err := lowerPriority(r.nice); err != nil {
			r.log.Warn("usage is stored at the process's priority: lowering the recorder's failed", "err", err)
		} else {
			background = true
		}
	}
	for batch := range r.batches {
		if !background || !r.behind() {
			r.flush(batch)
		} else {
			done := make(chan struct{})
			go func() {
				defer close(done)
				r.flush(batch)
			}()
			<-done
		}
		clear(batch) // the stored events' strings are not kept alive by the array
		select {
		case r.spare <- batch[:0]:
		default:
		}
	}
}

// emptyBatch is a stored batch's array to fill again, or a new one: at
// 1,000 events a second a new array per batch was most of the garbage the
// recorder made.
func (r *Recorder) emptyBatch() []models.UsageEvent {
	select {
	case b := <-r.spare:
		return b
	default:
		return make([]models.UsageEvent, 0, r.maxBatch)
	}
}

// behind says a batch's worth waits in the buffer, or Close has begun:
// the next batch is stored at the process's priority.
func (r *Recorder) behind() bool {
	select {
	case <-r.closing:
		return true
	default:
		return len(r.events) >= r.maxBatch
	}
}

// flushRejections stores the rejection counts, retrying like flush.
func (r *Recorder) flushRejections() {
	rs := r.takeRejections()
	if len(rs) == 0 {
		return
	}
	_ = r.retry("rejection counts", len(rs), 0, func(ctx context.Context) error { return r.sink.AddRejections(ctx, rs) })
}

// flush stores a batch, retrying with backoff until it lands: inserts are
// idempotent by request id, so a retry never double-counts.
func (r *Recorder) flush(batch []models.UsageEvent) {
	if len(batch) == 0 {
		return
	}
	lastUsed := make(map[int64]time.Time)
	billed := batch[:0] // filtered in place: the batch is this flusher's alone
	for _, ev := range batch {
		if ev.CreatedAt.After(lastUsed[ev.TokenID]) {
			lastUsed[ev.TokenID] = ev.CreatedAt
		}
		if !ev.TouchOnly() {
			billed = append(billed, ev)
		}
	}
	batch = billed
	began := time.Now()
	if r.retry("usage events", len(batch), len(batch), func(ctx context.Context) error {
		if err := r.sink.InsertUsageEvents(ctx, batch); err != nil {
			return err
		}
		return r.sink.TouchAPITokens(ctx, lastUsed)
	}) {
		r.stored.Add(int64(len(batch)))
		if r.flushed != nil {
			r.flushed(len(batch), time.Since(began))
		}
	}
}

// retry runs store until it succeeds, with backoff, or until Close's
// deadline passes: then what is queued is given up, counted and logged. n
// is how many things store stores, events the usage events among them
// (what counts as lost). It reports whether store succeeded.
func (r *Recorder) retry(what string, n, events int, store func(context.Context) error) bool {
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := store(ctx)
		cancel()
		if err == nil {
			return true
		}
		r.log.Error("storing "+what+" failed; retrying", "count", n, "attempt", attempt, "err", err)
		select {
		case <-time.After(backoff):
		case <-r.abandon:
			queued := 0
			for range r.events { // drain what is queued
				queued++
			}
			r.lost.Add(int64(events + queued))
			r.log.Error(what+" lost: the database stayed unavailable past the shutdown deadline", "count", n, "queued_events", queued)
			return false
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
