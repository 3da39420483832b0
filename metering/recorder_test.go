package metering

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// flakySink fails its first few inserts, as a database restarting would.
type flakySink struct {
	mu         sync.Mutex
	failures   int
	stored     map[string]models.UsageEvent
	touched    map[int64]time.Time
	rejections []models.Rejections
}

func (s *flakySink) AddRejections(_ context.Context, rs []models.Rejections) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failures > 0 {
		s.failures--
		return errors.New("connection refused")
	}
	s.rejections = append(s.rejections, rs...)
	return nil
}

func (s *flakySink) InsertUsageEvents(_ context.Context, evs []models.UsageEvent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failures > 0 {
		s.failures--
		return errors.New("connection refused")
	}
	for _, ev := range evs {
		s.stored[ev.RequestID] = ev
	}
	return nil
}

func (s *flakySink) TouchAPITokens(_ context.Context, m map[int64]time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, at := range m {
		if at.After(s.touched[id]) {
			s.touched[id] = at
		}
	}
	return nil
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Every event is stored once, whoever records it and however the
// flushers run: the embedded default's background priority included.
func TestCloseDrainsEveryEventFromManyWritersDespiteFailures(t *testing.T) {
	for name, extra := range map[string][]Option{
		"one flusher":         nil,
		"two flushers":        {WithFlushers(2)},
		"background priority": {WithBackgroundPriority(5)},
	} {
		t.Run(name, func(t *testing.T) {
			sink := &flakySink{failures: 2, stored: map[string]models.UsageEvent{}, touched: map[int64]time.Time{}}
			var flushes, flushed atomic.Int64
			opts := append([]Option{WithFlushObserver(func(n int, _ time.Duration) { flushes.Add(1); flushed.Add(int64(n)) })}, extra...)
			r := NewRecorder(sink, quiet(), time.Hour, 16, opts...) // never ticks: only batch size and Close flush
			base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			var wg sync.WaitGroup
			for w := range 50 {
				wg.Go(func() {
					for i := range 20 {
						ev := models.UsageEvent{RequestID: fmt.Sprintf("%d-%d", w, i), TokenID: int64(w % 3), CreatedAt: base.Add(time.Duration(i) * time.Second)}
						if err := r.Record(ev); err != nil {
							t.Error(err)
						}
					}
				})
			}
			wg.Wait()
			if err := r.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if len(sink.stored) != 1000 || r.Stored() != 1000 || flushed.Load() != 1000 || flushes.Load() < 1000/16 || r.Lost() != 0 {
				t.Fatalf("stored %d events (counted %d, observed %d in %d flushes, lost %d), want 1000",
					len(sink.stored), r.Stored(), flushed.Load(), flushes.Load(), r.Lost())
			}
			for id := range int64(3) {
				if want := base.Add(19 * time.Second); !sink.touched[id].Equal(want) {
					t.Errorf("token %d last used %v, want %v", id, sink.touched[id], want)
				}
			}
			if err := r.Record(models.UsageEvent{RequestID: "late"}); !errors.Is(err, ErrClosed) {
				t.Fatalf("record after close: %v", err)
			}
		})
	}
}

func TestRecorderStoresIntoTheDatabase(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		ctx := context.Background()
		store := models.NewStore(db)
		o, u, err := store.CreateOrganizationWithOwner(ctx, "Acme", "free", "a@example.com", "x", models.RoleOwner)
		if err != nil {
			t.Fatal(err)
		}
		tok, _, err := store.CreateAPIToken(ctx, o.ID, u.ID, "ci", nil)
		if err != nil {
			t.Fatal(err)
		}
		r := NewRecorder(store, quiet(), 10*time.Millisecond, 4)
		now := time.Now().UTC()
		for i := range 10 {
			ev := models.UsageEvent{RequestID: fmt.Sprint("req-", i), OrgID: o.ID, TokenID: tok.ID, Model: "sluice-local",
				PromptTokens: 3, CompletionTokens: 4, Status: 200, CreatedAt: now}
			if err := r.Record(ev); err != nil {
				t.Fatal(err)
			}
		}
		// The same request id again must not be billed twice.
		_ = r.Record(models.UsageEvent{RequestID: "req-0", OrgID: o.ID, TokenID: tok.ID, Model: "sluice-local", PromptTokens: 100, Status: 200, CreatedAt: now})
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := store.UsageSince(ctx, o.ID, now.Add(-time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if got.Requests != 10 || got.TotalTokens() != 70 {
			t.Fatalf("usage %+v, want 10 requests and 70 tokens", got)
		}
		toks, _ := store.APITokens(ctx, o.ID)
		if toks[0].LastUsedAt == nil {
			t.Fatal("last used not recorded")
		}
	})
}

type downSink struct{}

func (downSink) InsertUsageEvents(context.Context, []models.UsageEvent) error {
	return errors.New("database is down")
}
func (downSink) TouchAPITokens(context.Context, map[int64]time.Time) error { return nil }
func (downSink) AddRejections(context.Context, []models.Rejections) error {
	return errors.New("database is down")
}

// With the database down and the buffer full, a shutdown must still end at
// its deadline: blocked Records give up and the recorder stops retrying.
func TestCloseEndsAtItsDeadlineWhenTheDatabaseIsDown(t *testing.T) {
	r := NewRecorder(downSink{}, quiet(), time.Hour, 1) // buffer of 8
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 { // more than the buffer: some block
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- r.Record(models.UsageEvent{RequestID: fmt.Sprint(i)})
		}()
	}
	for len(r.events) < cap(r.events) { // wait until the writers have filled the buffer
		runtime.Gosched()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := r.Close(ctx); err == nil {
		t.Fatal("Close reported success with the database down")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Close took %v", took)
	}
	wg.Wait()
	close(errs)
	refused := 0
	for err := range errs {
		if errors.Is(err, ErrClosed) {
			refused++
		}
	}
	if refused == 0 {
		t.Fatal("no blocked Record was released")
	}
	// What was accepted and never stored is counted, for the alert.
	if accepted := int64(20 - refused); r.Lost() != accepted || r.Stored() != 0 {
		t.Fatalf("lost %d, stored %d; %d events were accepted", r.Lost(), r.Stored(), accepted)
	}
}

func TestTouchMarksUseWithoutBilling(t *testing.T) {
	sink := &flakySink{stored: map[string]models.UsageEvent{}, touched: map[int64]time.Time{}}
	r := NewRecorder(sink, quiet(), time.Hour, 16)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := r.Touch(42, at); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(sink.stored) != 0 || !sink.touched[42].Equal(at) {
		t.Fatalf("stored %v touched %v", sink.stored, sink.touched)
	}
}

// Rejections are summed per organization, token, model and hour, and the
// sums survive a failing store and shutdown.
func TestRejectionsAreCountedNotQueued(t *testing.T) {
	sink := &flakySink{failures: 1, stored: map[string]models.UsageEvent{}, touched: map[int64]time.Time{}}
	r := NewRecorder(sink, quiet(), time.Hour, 16)
	h := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reason := []string{RejectedRequests, RejectedTokens, RejectedFrozen, RejectedBudget}[i%4]
			r.Reject(1, 2, "m", reason, h.Add(time.Duration(i)*time.Second))
		}()
	}
	wg.Wait()
	r.Reject(1, 2, "m", RejectedRequests, h.Add(time.Hour)) // the next hour: its own row
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(sink.rejections) != 2 {
		t.Fatalf("rows %+v", sink.rejections)
	}
	var first, second models.Rejections
	for _, rj := range sink.rejections {
		if rj.Hour.Equal(h) {
			first = rj
		} else {
			second = rj
		}
	}
	if first != (models.Rejections{OrgID: 1, TokenID: 2, Model: "m", Hour: h, Requests: 25, Tokens: 25, Frozen: 25, Budget: 25}) ||
		second.Requests != 1 || second.Total() != 1 {
		t.Fatalf("counts %+v %+v", first, second)
	}
}

// arraySink notes the array behind each batch it is given.
type arraySink struct {
	flakySink
	arrays chan *models.UsageEvent
}

func (s *arraySink) InsertUsageEvents(ctx context.Context, evs []models.UsageEvent) error {
	s.arrays <- &evs[:1][0]
	return s.flakySink.InsertUsageEvents(ctx, evs)
}

// A stored batch's array is filled again: one per batch was most of the
// garbage the recorder made.
func TestTheRecorderRefillsAStoredBatchsArray(t *testing.T) {
	sink := &arraySink{flakySink{stored: map[string]models.UsageEvent{}, touched: map[int64]time.Time{}}, make(chan *models.UsageEvent, 3)}
	r := NewRecorder(sink, quiet(), time.Hour, 2) // never ticks: each pair of events is a batch
	var arrays []*models.UsageEvent
	for b := range 3 {
		for i := range 2 {
			if err := r.Record(models.UsageEvent{RequestID: fmt.Sprint(b, "-", i)}); err != nil {
				t.Fatal(err)
			}
		}
		arrays = append(arrays, <-sink.arrays)
		for deadline := time.Now().Add(10 * time.Second); len(r.spare) == 0 && time.Now().Before(deadline); {
			runtime.Gosched() // the flusher hands the array back once the sink returns
		}
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if arrays[2] != arrays[0] {
		t.Errorf("the third batch got a new array, want the first batch's again")
	}
	if len(sink.stored) != 6 {
		t.Errorf("stored %d events, want 6", len(sink.stored))
	}
}
