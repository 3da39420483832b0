package jobs

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/completion"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/models"
)

// rejections counts the rejections the pipeline is told of, per reason.
type rejections struct {
	recorder
	mu sync.Mutex
	n  map[string]int
}

func (r *rejections) Reject(_, _ int64, _, reason string, _ time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[reason]++
}

func (r *rejections) count(reason string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[reason]
}

// withQueueLimit is caller on a copy of its tier that queues at most n jobs.
func withQueueLimit(c accounts.Caller, n int64) accounts.Caller {
	t := *c.Tier
	t.MaxQueuedJobs = n
	c.Tier = &t
	return c
}

// enqueueAtOnce has n goroutines queue a job each, released together, and
// returns the jobs queued and the errors of those refused.
func enqueueAtOnce(t *testing.T, q *Queue, f *fixture, caller accounts.Caller, n int) ([]Job, []error) {
	t.Helper()
	var mu sync.Mutex
	var queued []Job
	var refused []error
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			j, err := q.Enqueue(context.Background(), f.pipe, caller, []byte(jobBody), "", "")
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				refused = append(refused, err)
			} else {
				queued = append(queued, j)
			}
		}()
	}
	close(start)
	wg.Wait()
	return queued, refused
}

func TestTheJobQueueIsBoundedPerOrganization(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		rej := &rejections{recorder: recorder{f.store}, n: map[string]int{}}
		f.deps.Recorder = rej
		f.pipe = completion.New(f.deps)
		q := f.queue(Config{}, nil) // not started: jobs stay queued
		ctx := context.Background()
		caller := withQueueLimit(f.caller, 10)

		queued, refused := enqueueAtOnce(t, q, f, caller, 40)
		if len(queued) != 10 || len(refused) != 30 {
			t.Fatalf("40 at once against a limit of 10: %d queued, %d refused", len(queued), len(refused))
		}
		const full = "the free tier queues at most 10 jobs per organization and 10 are queued; wait for some to finish"
		for _, err := range refused {
			if e := apperr.As(err); e.Code != apperr.RateLimited || e.Reason != models.QueueFull || e.Message != full || e.RetryAfter != 0 {
				t.Fatalf("refusal: %+v", e)
			}
		}
		if n := rej.count(metering.RejectedQueue); n != 30 {
			t.Fatalf("%d queue rejections metered, want 30", n)
		}
		if n, _ := f.store.QueuedJobs(ctx, caller.OrgID); n != 10 {
			t.Fatalf("counted %d queued", n)
		}

		// A cancelled job gives its place back once: exactly one more of 40 gets in.
		if _, err := q.Cancel(ctx, caller.OrgID, queued[0].ID); err != nil {
			t.Fatal(err)
		}
		more, _ := enqueueAtOnce(t, q, f, caller, 40)
		if len(more) != 1 {
			t.Fatalf("after one cancel, %d of 40 queued, want 1", len(more))
		}
		// The sweep finds the cancelled job finished: its place is not given twice.
		if released, err := f.store.ReleaseFinishedJobs(ctx); err != nil || released != 0 {
			t.Fatalf("sweep after the cancel: released %d (%v)", released, err)
		}
		if n, _ := f.store.QueuedJobs(ctx, caller.OrgID); n != 10 {
			t.Fatalf("counted %d queued after cancel and refill", n)
		}

		// Working them gives every place back, once each.
		f.start(q)
		for _, j := range append(queued[1:], more...) {
			if done := f.wait(q, j.ID, 10*time.Second); done.Status != Succeeded {
				t.Fatalf("%+v", done)
			}
		}
		deadline := time.Now().Add(5 * time.Second)
		for n, _ := f.store.QueuedJobs(ctx, caller.OrgID); n != 0; n, _ = f.store.QueuedJobs(ctx, caller.OrgID) {
			if time.Now().After(deadline) {
				t.Fatalf("%d still counted after every job finished", n)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if released, err := f.store.ReleaseFinishedJobs(ctx); err != nil || released != 0 {
			t.Fatalf("sweep after the work: released %d (%v)", released, err)
		}
		if err := f.store.ReleaseQueuedJob(ctx, mustJobID(t, more[0].ID)); err != nil {
			t.Fatal(err)
		}
		if n, _ := f.store.QueuedJobs(ctx, caller.OrgID); n != 0 {
			t.Fatalf("a job finished twice gave back twice: %d", n)
		}
	})
}

// A job whose insert fails after its place was taken takes none: the
// place, the job and its hold are one transaction.
func TestAJobNotInsertedHoldsNoPlace(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		q := f.queue(Config{}, nil)
		ctx := context.Background()
		args := Args{OrgID: f.caller.OrgID, TokenID: f.caller.TokenID, Body: []byte(jobBody)}
		_, _, err := q.insertHeld(ctx, f.caller.OrgID, 10, args, &river.InsertOpts{Queue: "not a queue name!"})
		if err == nil || !strings.Contains(err.Error(), "queue") {
			t.Fatalf("an invalid queue name was inserted: %v", err)
		}
		var holds int64
		db.Gorm.Raw("SELECT COUNT(*) FROM queued_jobs").Scan(&holds)
		if n, _ := f.store.QueuedJobs(ctx, f.caller.OrgID); n != 0 || holds != 0 {
			t.Fatalf("a failed insert kept %d places and %d holds", n, holds)
		}
	})
}

// The sweep gives back the place of a job that finished without its
// worker giving it back (discarded by the queue itself).
func TestTheSweepGivesBackPlacesOfJobsFinishedElsewhere(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		q := f.queue(Config{}, nil)
		ctx := context.Background()
		j, err := q.Enqueue(ctx, f.pipe, f.caller, []byte(jobBody), "", "")
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Gorm.Exec("UPDATE river_job SET state = 'discarded', finalized_at = created_at WHERE id = ?", mustJobID(t, j.ID)).Error; err != nil {
			t.Fatal(err)
		}
		if n, _ := f.store.QueuedJobs(ctx, f.caller.OrgID); n != 1 {
			t.Fatalf("counted %d", n)
		}
		if _, err := q.DeleteExpired(ctx); err != nil {
			t.Fatal(err)
		}
		if n, _ := f.store.QueuedJobs(ctx, f.caller.OrgID); n != 0 {
			t.Fatalf("a discarded job still holds its place: %d", n)
		}
	})
}

func mustJobID(t *testing.T, id string) int64 {
	t.Helper()
	n, ok := parseJobID(id)
	if !ok {
		t.Fatalf("job id %q", id)
	}
	return n
}
