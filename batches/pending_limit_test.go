package batches_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/batches"
	"github.com/sluicehq/sluice/jobs"
	"github.com/sluicehq/sluice/models"
)

// failingQueue cannot queue anything.
type failingQueue struct{ heldQueue }

func (*failingQueue) EnqueueBatch(context.Context, accounts.Caller, int64, jobs.LineSource) error {
	return errors.New("queue down")
}

func lines(prefix string, n int) string {
	var ls []string
	for i := range n {
		ls = append(ls, line(fmt.Sprintf("%s-%d", prefix, i), "p"))
	}
	return strings.Join(ls, "\n")
}

func (f *fixture) pending(caller accounts.Caller) int64 {
	f.t.Helper()
	n, err := f.store.PendingBatchLines(context.Background(), caller.OrgID)
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

func TestPendingBatchLinesAreBoundedPerOrganization(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		ctx := context.Background()
		q := &heldQueue{}
		if f.caller.Tier.MaxPendingBatchLines != 1000 {
			t.Fatalf("the free tier's pending lines: %d, want 1000", f.caller.Tier.MaxPendingBatchLines)
		}
		first := f.create(q, f.caller, lines("a", 800)+"\n"+`not json`) // the malformed line fails at once and holds no place
		if n := f.pending(f.caller); n != 800 {
			t.Fatalf("pending %d, want 800", n)
		}
		_, err := f.svc.Create(ctx, q, f.caller, batches.Create{InputFileID: f.upload(f.caller, lines("b", 300)),
			Endpoint: "/v1/chat/completions", CompletionWindow: "24h"})
		const full = "the free tier allows at most 1,000 pending batch lines per organization; 800 are pending and this batch has 300; wait for some to finish or split the file"
		if e := apperr.As(err); e.Code != apperr.RateLimited || e.Reason != models.QueueFull || e.Message != full {
			t.Fatalf("past the limit: %+v", e)
		}
		if bs, _, _ := f.svc.List(ctx, f.caller.OrgID, "", 100); len(bs) != 1 || f.pending(f.caller) != 800 {
			t.Fatalf("a refused batch was stored: %d batches, %d pending", len(bs), f.pending(f.caller))
		}
		// Another organization has its own queue.
		f.create(q, f.other, lines("o", 300))
		if n := f.pending(f.other); n != 300 {
			t.Fatalf("the other organization: %d pending", n)
		}

		// A line that finishes gives its place back, once.
		out := jobs.Output{RequestID: "job_1", Status: 200, Body: []byte(`{"id":"x"}`)}
		for range 2 {
			if err := f.svc.LineDone(ctx, first.ID, "a-0", "job_1", out); err != nil {
				t.Fatal(err)
			}
		}
		if n := f.pending(f.caller); n != 799 {
			t.Fatalf("after a line finished (twice): %d pending, want 799", n)
		}
		// A cancelled batch's lines that never come back give theirs back when the sweep fails them.
		if _, err := f.svc.Cancel(ctx, f.caller.OrgID, batches.ID(first.ID)); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(time.Hour)
		if err := f.svc.Sweep(ctx, q); err != nil {
			t.Fatal(err)
		}
		if n := f.pending(f.caller); n != 0 {
			t.Fatalf("after the sweep ended the cancelled batch: %d pending", n)
		}
		// A batch whose lines could not be queued fails and gives them back.
		if _, err := f.svc.Create(ctx, &failingQueue{}, f.caller, batches.Create{InputFileID: f.upload(f.caller, lines("c", 5)),
			Endpoint: "/v1/chat/completions", CompletionWindow: "24h"}); err == nil {
			t.Fatal("a batch that could not be queued was created")
		}
		if n := f.pending(f.caller); n != 0 {
			t.Fatalf("after a batch failed to queue: %d pending", n)
		}
		f.create(q, f.caller, lines("d", 1000))
		if n := f.pending(f.caller); n != 1000 {
			t.Fatalf("a batch of the whole limit: %d pending", n)
		}
	})
}

func TestBatchesCreatedAtOnceNeverPassThePendingLimit(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		ctx := context.Background()
		tier := *f.caller.Tier
		tier.MaxPendingBatchLines = 10
		caller := f.caller
		caller.Tier = &tier
		file := f.upload(caller, lines("x", 1))
		q := &heldQueue{}
		var wg sync.WaitGroup
		var mu sync.Mutex
		created, refused := 0, 0
		start := make(chan struct{})
		for range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := f.svc.Create(ctx, q, caller, batches.Create{InputFileID: file, Endpoint: "/v1/chat/completions", CompletionWindow: "24h"})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					created++
				case apperr.As(err).Reason == models.QueueFull:
					refused++
				default:
					t.Errorf("unexpected: %v", err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if created != 10 || refused != 30 || f.pending(caller) != 10 {
			t.Fatalf("40 one-line batches at once against 10: %d created, %d refused, %d pending", created, refused, f.pending(caller))
		}
	})
}
