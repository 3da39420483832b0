package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/batches"
	"github.com/sluicehq/sluice/handlers"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/jobs"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/web"
)

// fakeJobs is the job queue as the pages read it: fixed jobs per
// organization and fixed stats. A real queue has them only once its
// workers have run jobs through a pipeline and delivered their callbacks;
// the pages only read them. What the pages do not read (queueing,
// cancelling) is left to the nil JobQueue, and would panic.
type fakeJobs struct {
	handlers.JobQueue
	byOrg    map[int64][]jobs.Job
	stats    jobs.Stats
	statsErr error
	stuck    bool          // Stats answers only when its context ends
	gave     time.Duration // how long Stats's context had left when it was called (none: 0)
}

func (f *fakeJobs) List(_ context.Context, orgID int64, limit int) ([]jobs.Job, error) {
	js := f.byOrg[orgID]
	return js[:min(limit, len(js))], nil
}

func (f *fakeJobs) Get(_ context.Context, orgID int64, id string) (jobs.Job, error) {
	for _, j := range f.byOrg[orgID] {
		if j.ID == id {
			return j, nil
		}
	}
	return jobs.Job{}, apperr.New(apperr.NotFound, "no such job")
}

func (f *fakeJobs) Stats(ctx context.Context) (jobs.Stats, error) {
	f.gave = 0
	if d, ok := ctx.Deadline(); ok {
		f.gave = time.Until(d)
	}
	if f.stuck {
		<-ctx.Done()
		return jobs.Stats{}, ctx.Err()
	}
	return f.stats, f.statsErr
}

// withQueue gives the site's pages the job queue j, and returns its
// batches.
func (s *site) withQueue(j *fakeJobs) *batches.Service {
	s.deps.Jobs = j
	s.rebuild()
	return s.deps.Batches
}

// batch stores a batch of orgID's with customIDs pending.
func (s *site) batch(orgID int64, customIDs ...string) models.Batch {
	s.t.Helper()
	ctx := context.Background()
	now := s.clock.Now()
	in := models.BatchFile{OrgID: orgID, Purpose: "batch", Filename: "couplets.jsonl", CreatedAt: now}
	w, err := s.store.CreateBatchFile(ctx, &in)
	if err != nil {
		s.t.Fatal(err)
	}
	w.Write([]byte("{}\n"))
	if _, err := w.Commit(now.Add(time.Hour)); err != nil {
		s.t.Fatal(err)
	}
	b := models.Batch{OrgID: orgID, InputFileID: in.ID, Endpoint: "/v1/chat/completions", CompletionWindow: "24h", Status: "in_progress",
		Total: len(customIDs), CreatedAt: now, InProgressAt: &now, ExpiresAt: now.Add(24 * time.Hour)}
	err = s.store.CreateBatch(ctx, &b, func(_ int64, yield func(models.BatchResult) error) error {
		for i, id := range customIDs {
			if err := yield(models.BatchResult{Line: i + 1, CustomID: id, State: "pending"}); err != nil {
				return err
			}
		}
		return nil
	}, 30*24*time.Hour, models.PendingLimit{Tier: "free", Lines: 1000})
	if err != nil {
		s.t.Fatal(err)
	}
	return b
}

func TestDashboardShowsJobsAndBatches(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		ctx := context.Background()
		u := s.signup("ada@example.com", "Analytical Engines")
		eve := s.signup("eve@example.com", "Elsewhere")
		finished := epoch.Add(-time.Minute)
		q := &fakeJobs{byOrg: map[int64][]jobs.Job{u.OrgID: {
			{ID: "job_3", Status: jobs.Queued, Attempts: 0, MaxAttempts: 5, CreatedAt: epoch},
			{ID: "job_2", Status: jobs.Failed, Attempts: 1, MaxAttempts: 5, CreatedAt: epoch.Add(-time.Hour), FinishedAt: &finished,
				Output:   &jobs.Output{Status: 429, Error: &jobs.Failure{Code: "insufficient_quota", Message: "the budget is spent"}},
				Callback: &jobs.Callback{URL: "https://hooks.example.com/cb?…", Status: jobs.CallbackPending, Attempts: 2, LastError: "webhook: the receiver answered 503"}},
			{ID: "job_1", Status: jobs.Succeeded, Attempts: 1, MaxAttempts: 5, CreatedAt: epoch.Add(-2 * time.Hour), FinishedAt: &finished,
				Output:   &jobs.Output{Status: 200, Body: json.RawMessage(`{"object":"chat.completion"}`)},
				Callback: &jobs.Callback{URL: "https://hooks.example.com/cb", Status: jobs.CallbackDelivered, Attempts: 1, DeliveredAt: &finished}},
		}}}
		svc := s.withQueue(q)
		running := s.batch(u.OrgID, "a", "b", "c", "d")
		done := s.batch(u.OrgID, "x", "y")
		for _, l := range []struct {
			b      models.Batch
			custom string
			out    jobs.Output
		}{
			{running, "a", jobs.Output{RequestID: "job_10", Status: 200, Body: json.RawMessage(`{}`)}},
			{running, "b", jobs.Output{RequestID: "job_11", Status: 503, Error: &jobs.Failure{Code: "upstream_unavailable", Message: "down"}}},
			{done, "x", jobs.Output{RequestID: "job_12", Status: 200, Body: json.RawMessage(`{"answer":"x"}`)}},
			{done, "y", jobs.Output{RequestID: "job_13", Status: 200, Body: json.RawMessage(`{"answer":"y"}`)}},
		} {
			if err := svc.LineDone(ctx, l.b.ID, l.custom, l.out.RequestID, l.out); err != nil {
				t.Fatal(err)
			}
		}

		b := s.signedIn(u)
		w := b.get("/dashboard")
		w.expectPage(http.StatusOK, "jobs", "batch-list", "job-list", "job-counts")
		if nav := w.text("section-nav"); !strings.Contains(nav, "Jobs") {
			t.Errorf("section nav %q", nav)
		}
		rows := w.testid("batch-row")
		if rows.Length() != 2 {
			t.Fatalf("%d batch rows", rows.Length())
		}
		// Newest first: the finished batch, then the one running.
		first, second := rows.Eq(0), rows.Eq(1)
		if id, _ := first.Attr("data-batch-id"); id != batches.ID(done.ID) {
			t.Errorf("first batch %q", id)
		}
		text := func(sel interface{ Text() string }) string { return strings.Join(strings.Fields(sel.Text()), " ") }
		if got := text(first.Find("[data-testid=batch-counts]")); got != "2 of 2 done (100%): 2 answered, 0 failed" {
			t.Errorf("finished batch counts %q", got)
		}
		if got := text(first.Find("[data-testid=batch-status]")); got != "completed" {
			t.Errorf("finished batch status %q", got)
		}
		if got := text(second.Find("[data-testid=batch-counts]")); got != "2 of 4 done (50%): 1 answered, 1 failed" {
			t.Errorf("running batch counts %q", got)
		}
		if got := text(second.Find("[data-testid=batch-status]")); got != "in progress" {
			t.Errorf("running batch status %q", got)
		}
		if label, _ := second.Find("svg").Attr("aria-label"); label != "50% done: 1 answered, 1 failed, of 4" {
			t.Errorf("meter label %q", label)
		}
		if second.Find("[data-testid=batch-output]").Length() != 0 || second.Find("[data-testid=batch-errors]").Length() != 0 {
			t.Error("a running batch offers files it does not have yet")
		}
		output, _ := first.Find("[data-testid=batch-output]").Attr("href")
		if first.Find("[data-testid=batch-errors]").Length() != 0 || !strings.HasPrefix(output, "/files/file-") {
			t.Fatalf("finished batch's downloads: output %q", output)
		}
		if got := w.text("job-counts"); got != "Of the latest 3 jobs: 1 queued, 0 running, 1 succeeded, 1 failed" {
			t.Errorf("job counts %q", got)
		}
		if got := w.texts("job-error"); len(got) != 1 || got[0] != "insufficient_quota: the budget is spent" {
			t.Errorf("job errors %q", got)
		}
		// Callbacks: where, how it went, and the last error while it has one.
		if got := w.texts("job-callback"); len(got) != 2 || got[0] != "Callback to https://hooks.example.com/cb?…: pending · 2 attempts" ||
			!strings.HasPrefix(got[1], "Callback to https://hooks.example.com/cb: delivered · 1 attempt · delivered ") {
			t.Errorf("job callbacks %q", got)
		}
		if got := w.texts("job-callback-error"); len(got) != 1 || got[0] != "Last error: webhook: the receiver answered 503" {
			t.Errorf("callback errors %q", got)
		}
		result, _ := w.testid("job-result").Attr("href")
		if w.testid("job-result").Length() != 1 || result != "/jobs/job_1/result" {
			t.Errorf("job results: %q", result)
		}

		// The downloads, for the owner only.
		dl := b.get(output)
		if dl.Code != 200 || dl.Header().Get("Content-Type") != "application/jsonl" ||
			dl.Header().Get("Content-Disposition") != `attachment; filename=batch_`+strings.TrimPrefix(batches.ID(done.ID), "batch_")+`_output.jsonl` ||
			strings.Count(dl.Body.String(), "\n") != 2 || !strings.Contains(dl.Body.String(), `"custom_id":"x"`) {
			t.Fatalf("output download: %d %v %q", dl.Code, dl.Header(), dl.Body.String())
		}
		res := b.get(result)
		if res.Code != 200 || res.Body.String() != `{"object":"chat.completion"}` || !strings.Contains(res.Header().Get("Content-Disposition"), "job_1.json") {
			t.Fatalf("result download: %d %q", res.Code, res.Body.String())
		}
		const noFile = "No such file: it may have expired, or belong to another organization."
		const noResult = "No such job result: the job may not have succeeded, may have expired, or belong to another organization."
		other := s.signedIn(eve)
		other.get(output).expectError(http.StatusNotFound, noFile)
		other.get(result).expectError(http.StatusNotFound, noResult)
		b.get("/jobs/job_2/result").expectError(http.StatusNotFound, noResult)
		b.get("/files/file-x").expectError(http.StatusNotFound, noFile)
		b.get("/files/12345").expectError(http.StatusNotFound, noFile)
		// The other organization's dashboard has nothing queued.
		ow := other.get("/dashboard")
		ow.expectPage(http.StatusOK, "jobs", "jobs-empty")
		if ow.testid("batch-row").Length() != 0 {
			t.Error("another organization's batches are shown")
		}
		// Signed out, the downloads send to the login page.
		if w := s.anonymous().get(output); w.Code != http.StatusSeeOther {
			t.Errorf("signed out: %d", w.Code)
		}
	})
}

func TestAdminSeesTheQueue(t *testing.T) {
	db := testdb.SQLite(t)
	s := newSite(t, db)
	admin := s.signedIn(s.admin)
	// The real queue, empty.
	if w := admin.get("/admin/organizations"); w.text("queue-waiting") != "0 jobs" || w.text("queue-oldest") != "none" {
		t.Errorf("an empty queue: %q %q", w.text("queue-waiting"), w.text("queue-oldest"))
	}
	q := &fakeJobs{stats: jobs.Stats{Waiting: 1234, Oldest: 3*time.Minute + 12*time.Second}}
	s.withQueue(q)
	w := admin.get("/admin/organizations")
	w.expectPage(http.StatusOK, "queue-panel")
	if got, oldest := w.text("queue-waiting"), w.text("queue-oldest"); got != "1,234 jobs" || oldest != "3m 12s" {
		t.Errorf("waiting %q, oldest %q", got, oldest)
	}
	q.stats = jobs.Stats{}
	if w := admin.get("/admin/organizations"); w.text("queue-waiting") != "0 jobs" || w.text("queue-oldest") != "none" {
		t.Errorf("an empty queue: %q %q", w.text("queue-waiting"), w.text("queue-oldest"))
	}
	// A queue that cannot be read does not take the page down.
	q.statsErr = errors.New("connection refused")
	w = admin.get("/admin/organizations")
	w.expectPage(http.StatusOK, "queue-panel", "queue-error", "overview-table")
	// Nor does one that does not answer within the pages' wait: the
	// page comes without it.
	// Its read is bounded by the wait the pages were given (the
	// harness's), read from the deadline the queue was handed.
	if q.gave <= 0 || q.gave > s.deps.QueueStatsWait {
		t.Errorf("the queue was given %v to answer, want at most %v", q.gave, s.deps.QueueStatsWait)
	}
	q.statsErr, q.stuck = nil, true
	s.deps.QueueStatsWait = 5 * time.Millisecond
	s.rebuild()
	w = admin.get("/admin/organizations")
	w.expectPage(http.StatusOK, "queue-panel", "queue-error", "overview-table")
	if q.gave <= 0 || q.gave > 5*time.Millisecond {
		t.Errorf("the queue was given %v to answer, want at most the pages' 5ms", q.gave)
	}
	// Unsaid, the wait is the console's default.
	q.stuck = false
	s.deps.QueueStatsWait = 0
	s.rebuild()
	admin.get("/admin/organizations").expectPage(http.StatusOK, "queue-panel")
	if q.gave <= web.DefaultQueueStatsWait/2 || q.gave > web.DefaultQueueStatsWait {
		t.Errorf("the queue was given %v to answer, want the default %v", q.gave, web.DefaultQueueStatsWait)
	}
}

// The tier form sets the batch file limit in MiB; the page shows it back.
func TestTierFormSetsTheBatchFileLimit(t *testing.T) {
	s := newSite(t, testdb.SQLite(t))
	admin := s.signedIn(s.admin)
	w := admin.get("/admin/tiers")
	if got := w.page().Find(`[data-testid="tier-form-free"] [data-testid=tier-batch-file]`).AttrOr("value", ""); got != "1" {
		t.Fatalf("free tier's batch file limit shown as %q", got)
	}
	admin.post("/admin/tiers/free", tierValues(map[string]string{"batch_file_mib": "2.5"})).expectRedirect("/admin/tiers?done=tier")
	tier, err := s.store.TierByName(context.Background(), "free")
	if err != nil || tier.BatchFileBytes != 5<<19 {
		t.Fatalf("%d bytes, %v", tier.BatchFileBytes, err)
	}
	if got := admin.get("/admin/tiers").page().Find(`[data-testid="tier-form-free"] [data-testid=tier-batch-file]`).AttrOr("value", ""); got != "2.5" {
		t.Errorf("shown as %q", got)
	}
	w = admin.post("/admin/tiers/free", tierValues(map[string]string{"batch_file_mib": "lots"}))
	if w.Code != http.StatusUnprocessableEntity || !strings.Contains(w.text("form-error"), "batch_file_mib") {
		t.Errorf("a bad limit: %d %q", w.Code, w.text("form-error"))
	}
	w = admin.post("/admin/tiers/free", tierValues(map[string]string{"batch_file_mib": "300"}))
	if w.Code != http.StatusUnprocessableEntity || !strings.Contains(w.text("form-error"), "batch_file_bytes must be from 0 (no batch files) to 268435456 (256 MiB)") {
		t.Errorf("over the most: %d %q", w.Code, w.text("form-error"))
	}
}
