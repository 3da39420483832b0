package batches_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/batches"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/completion"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/testsync"
	"github.com/sluicehq/sluice/jobs"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/upstream"
	"github.com/sluicehq/sluice/upstream/local"
)

// each runs fn on a migrated SQLite database and, with TEST_DATABASE_URL,
// on a private Postgres schema (url is what a second node, or River's own
// pool, connects to).
func each(t *testing.T, fn func(t *testing.T, db *models.DB, url string)) {
	t.Run("sqlite", func(t *testing.T) {
		db := testdb.SQLite(t)
		if _, err := jobs.Migrate(context.Background(), db, ""); err != nil {
			t.Fatal(err)
		}
		fn(t, db, "")
	})
	t.Run("postgres", func(t *testing.T) {
		url := testdb.PostgresURL(t)
		db := open(t, url)
		sqlDB, _ := db.SQL()
		if _, err := migrations.Apply(context.Background(), sqlDB, migrations.Postgres); err != nil {
			t.Fatal(err)
		}
		if _, err := jobs.Migrate(context.Background(), db, url); err != nil {
			t.Fatal(err)
		}
		fn(t, db, url)
	})
}

func open(t *testing.T, url string) *models.DB {
	t.Helper()
	db, err := models.Open(context.Background(), url, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// clock is the real time moved forward by hand.
type clock struct{ offset atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// recorder stores usage at once, so tests see it.
type recorder struct{ store *models.Store }

func (r recorder) Record(ev models.UsageEvent) error {
	return r.store.InsertUsageEvents(context.Background(), []models.UsageEvent{ev})
}

func (recorder) Reject(int64, int64, string, string, time.Time) {}

type noAlerts struct{}

func (noAlerts) Spent(int64, money.Amount, time.Time, money.Amount, money.Amount) {}

// fixture is the batches on a real database, with the real pipeline and
// job queue in front of a provider that answers "answer to <prompt>", and
// refuses (400) a prompt that asks it to.
type fixture struct {
	t        *testing.T
	db       *models.DB
	url      string
	store    *models.Store
	dir      *accounts.Directory
	pipe     *completion.Pipeline
	clock    *clock
	svc      *batches.Service
	caller   accounts.Caller // Acme's, on the free tier
	other    accounts.Caller // Globex's
	calls    atomic.Int64
	provider *httptest.Server
	// embeddingCalls are the provider's embeddings requests, which it
	// answers with one vector and 4 prompt tokens.
	embeddingCalls atomic.Int64
}

func newFixture(t *testing.T, db *models.DB, url string) *fixture {
	ctx := context.Background()
	f := &fixture{t: t, db: db, url: url, store: models.NewStore(db), clock: &clock{}}
	var err error
	if f.dir, err = accounts.NewDirectory(ctx, f.store, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	f.caller, f.other = f.org("Acme"), f.org("Globex")
	f.provider = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/embeddings") {
			f.embeddingCalls.Add(1)
			w.Write([]byte(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":"AAAAPwAAgL4="}],"model":"gpt-test","usage":{"prompt_tokens":4,"total_tokens":4}}`))
			return
		}
		var req struct {
			Messages []struct{ Content string }
		}
		json.NewDecoder(r.Body).Decode(&req)
		prompt := req.Messages[len(req.Messages)-1].Content
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(prompt, "refuse") {
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":{"message":"this prompt is refused","type":"invalid_request_error","code":"content_policy"}}`))
			return
		}
		fmt.Fprintf(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`,
			"answer to "+prompt)
	}))
	t.Cleanup(f.provider.Close)
	pool := upstream.NewPool(upstream.PoolOptions{Budget: time.Second, MaxBackoff: time.Millisecond, BaseBackoff: time.Millisecond})
	pool.SetKeys([]upstream.Key{{ID: 1, Name: "p", BaseURL: f.provider.URL + "/v1", Secret: "sk-provider", Models: []string{"gpt-test"}}})
	m, _ := local.New()
	acc, _ := accounts.NewService(f.store, f.dir, cluster.None{}, accounts.NewLoginThrottle(nil), 4)
	f.pipe = completion.New(completion.Deps{Log: slog.New(slog.DiscardHandler), Now: time.Now, Limiter: quota.NewMemory(nil), Freezes: f.dir,
		Freezer: acc, Detector: quota.NewDetector(quota.NewMemoryWindow(nil)), Scorer: quota.NewValueScorer(quota.ValueRules{}, nil),
		PriorityWeights: map[string]int64{"low": 1, "normal": 1, "high": 2}, DefaultMaxTokens: 16, Local: m, Providers: pool,
		Prices: metering.NewPriceBook(), Ledger: metering.NewMemoryLedger(metering.StoreSeed(f.store), metering.WithFunds(metering.StoreFunds(f.store))), Alerts: noAlerts{},
		Recorder: recorder{f.store}})
	f.svc = f.service(db)
	return f
}

// org signs up an organization with a token and returns its caller.
func (f *fixture) org(name string) accounts.Caller {
	ctx := context.Background()
	o, u, err := f.store.CreateOrganizationWithOwner(ctx, name, "free", "owner@"+strings.ToLower(name)+".example", "h", models.RoleOwner)
	if err != nil {
		f.t.Fatal(err)
	}
	tok, _, err := f.store.CreateAPIToken(ctx, o.ID, u.ID, "batches", nil)
	if err != nil {
		f.t.Fatal(err)
	}
	c, err := f.dir.CallerByTokenID(ctx, tok.ID)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// service is a node's batches on db.
func (f *fixture) service(db *models.DB) *batches.Service {
	return batches.New(batches.Deps{Store: models.NewStore(db), Pipeline: f.pipe, Log: slog.New(slog.DiscardHandler)},
		batches.Config{FileRetention: 30 * 24 * time.Hour, Now: f.clock.Now})
}

// queue starts a node's job queue, telling svc its lines' outcomes.
func (f *fixture) queue(svc *batches.Service) *jobs.Queue {
	f.t.Helper()
	q, err := jobs.New(context.Background(), jobs.Deps{DB: f.db, DatabaseURL: f.url, Pipeline: f.pipe, Directory: f.dir, Batches: svc,
		Log: slog.New(slog.DiscardHandler)}, jobs.Config{Workers: 4, MaxAttempts: 3, Retention: 24 * time.Hour, MaxWait: 500 * time.Millisecond,
		RetryBase: 10 * time.Millisecond, Now: time.Now})
	if err != nil {
		f.t.Fatal(err)
	}
	if err := q.Start(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		q.Stop(ctx)
	})
	return q
}

// upload stores content as caller's batch input file.
func (f *fixture) upload(caller accounts.Caller, content string) string {
	f.t.Helper()
	file, err := f.svc.Upload(context.Background(), caller, batches.Upload{Purpose: "batch", Filename: "in.jsonl", Content: strings.NewReader(content)})
	if err != nil {
		f.t.Fatal(err)
	}
	return batches.FileID(file.ID)
}

// create makes a batch of content for caller on q.
func (f *fixture) create(q batches.Queue, caller accounts.Caller, content string) models.Batch {
	f.t.Helper()
	return f.createFor(q, caller, batches.Endpoint, content)
}

// createFor makes a batch of content for caller's endpoint on q.
func (f *fixture) createFor(q batches.Queue, caller accounts.Caller, endpoint, content string) models.Batch {
	f.t.Helper()
	b, err := f.svc.Create(context.Background(), q, caller, batches.Create{InputFileID: f.upload(caller, content),
		Endpoint: endpoint, CompletionWindow: "24h"})
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

// wait polls batch id until it is no longer open.
func (f *fixture) wait(caller accounts.Caller, id int64, within time.Duration) models.Batch {
	f.t.Helper()
	deadline := time.Now().Add(within)
	for {
		b, err := f.svc.Get(context.Background(), caller.OrgID, batches.ID(id))
		if err != nil {
			f.t.Fatal(err)
		}
		if !models.BatchOpen(b.Status) {
			return b
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("batch %d still %s (%d of %d done, %d failed) after %v", id, b.Status, b.Completed+b.Failed, b.Total, b.Failed, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// resultLine is a line of an output or error file as a client reads it.
type resultLine struct {
	ID       string  `json:"id"`
	CustomID *string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		RequestID  string          `json:"request_id"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct{ Code, Message string } `json:"error"`
}

func (r resultLine) custom() string {
	if r.CustomID == nil {
		return "<null>"
	}
	return *r.CustomID
}

// file reads one of caller's files as result lines; nil for no file.
func (f *fixture) file(caller accounts.Caller, id *int64) []resultLine {
	f.t.Helper()
	if id == nil {
		return nil
	}
	file, content, err := f.svc.FileContent(context.Background(), caller.OrgID, batches.FileID(*id))
	if err != nil {
		f.t.Fatal(err)
	}
	if file.Purpose != "batch_output" || !strings.HasSuffix(file.Filename, ".jsonl") {
		f.t.Fatalf("file %+v", file)
	}
	var out []resultLine
	sc := bufio.NewScanner(content)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l resultLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			f.t.Fatalf("%q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

func line(customID, prompt string) string {
	return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-test","messages":[{"role":"user","content":%q}]}}`,
		customID, prompt)
}

// A batch runs its good lines, and each bad one fails alone with its
// reason: the output file has the answers in input order, the error file
// the rest, and the counts add up.
func TestABatchWithFailingLines(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		q := f.queue(f.svc)
		input := strings.Join([]string{
			line("a", "first"),
			`{"custom_id":"b", this is not json`,
			`{"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-test","messages":[{"role":"user","content":"x"}]}}`,
			line("c", "please refuse this"),
			line("a", "again"),
			strings.Replace(line("d", "x"), "/v1/chat/completions", "/v1/embeddings", 1),
			strings.Replace(line("e", "x"), "gpt-test", "no-such-model", 1),
			"",
			`{"custom_id":"f","method":"GET","url":"/v1/chat/completions","body":{}}`,
			strings.Replace(line("g", "x"), `"messages"`, `"stream":true,"messages"`, 1),
			line("h", "last"),
		}, "\r\n") + "\n"
		b := f.create(q, f.caller, input)
		if b.Status != "in_progress" || b.Total != 10 || b.Failed != 7 || b.ExpiresAt.Sub(b.CreatedAt) != 24*time.Hour {
			t.Fatalf("created: %+v", b)
		}
		b = f.wait(f.caller, b.ID, 20*time.Second)
		if b.Status != "completed" || b.Total != 10 || b.Completed != 2 || b.Failed != 8 || b.CompletedAt == nil || b.FinalizingAt == nil {
			t.Fatalf("done: %+v", b)
		}
		out := f.file(f.caller, b.OutputFileID)
		if len(out) != 2 || out[0].custom() != "a" || out[1].custom() != "h" {
			t.Fatalf("output: %+v", out)
		}
		for i, want := range []string{"answer to first", "answer to last"} {
			l := out[i]
			var body struct {
				Choices []struct{ Message struct{ Content string } }
			}
			json.Unmarshal(l.Response.Body, &body)
			if l.Error != nil || l.Response.StatusCode != 200 || !strings.HasPrefix(l.Response.RequestID, "job_") ||
				l.ID != "batch_req_"+strings.TrimPrefix(l.Response.RequestID, "job_") || body.Choices[0].Message.Content != want {
				t.Errorf("output line %d: %+v %s", i, l, l.Response.Body)
			}
		}
		errs := f.file(f.caller, b.ErrorFileID)
		want := []struct{ custom, code, message string }{
			{"<null>", "invalid_json", "line 2: not a JSON object"},
			{"<null>", "missing_custom_id", "line 3: custom_id must be"},
			{"c", "provider_refused", "the provider answered Bad Request"},
			{"a", "duplicate_custom_id", `line 5: custom_id "a" is already used by line 1`},
			{"d", "invalid_url", `line 6: url must be "/v1/chat/completions"`},
			{"e", "model_not_found", "line 7: body: the model 'no-such-model' does not exist"},
			{"f", "invalid_method", `line 9: method must be "POST"`},
			{"g", "unsupported_stream", "line 10: body: a job cannot stream"},
		}
		if len(errs) != len(want) {
			t.Fatalf("error file: %+v", errs)
		}
		for i, w := range want {
			l := errs[i]
			if l.custom() != w.custom || l.Error == nil || l.Error.Code != w.code || !strings.Contains(l.Error.Message, w.message) {
				t.Errorf("error line %d: %s %+v, want %+v", i, l.custom(), l.Error, w)
			}
			if strings.HasPrefix(l.ID, "batch_req_") == false {
				t.Errorf("error line %d id %q", i, l.ID)
			}
		}
		// The provider's refusal is in the line, as it answered.
		if r := errs[2].Response; r == nil || r.StatusCode != 400 || !strings.Contains(string(r.Body), "this prompt is refused") {
			t.Errorf("refused line's response: %+v", errs[2].Response)
		}
		if f.calls.Load() != 3 {
			t.Errorf("%d provider calls, want 3 (a, c, h)", f.calls.Load())
		}
		// Metered under the jobs' ids, like any job.
		var usage int64
		db.Gorm.Raw("SELECT COUNT(*) FROM usage_events WHERE request_id LIKE 'job_%' AND status = 200").Scan(&usage)
		if usage != 2 {
			t.Errorf("%d usage rows for the 2 answered lines", usage)
		}
		// The lines are gone from batch_results: the files hold them.
		var rows int64
		db.Gorm.Raw("SELECT COUNT(*) FROM batch_results WHERE batch_id = ?", b.ID).Scan(&rows)
		if rows != 0 {
			t.Errorf("%d result rows left", rows)
		}
	})
}

// Cancelling skips the lines not started (they go to the error file as
// batch_cancelled); the batch is cancelled once the rest finished.
func TestCancellingABatch(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		ctx := context.Background()
		// A slow bucket: jobs get one request at once, then one every 2 s.
		db.Gorm.Exec("UPDATE tiers SET capacity = 2, refill_per_sec = 0.5, tokens_per_minute = 0 WHERE name = 'free'")
		f.dir.ReloadTiers(ctx)
		f.dir.ForgetOrganization(f.caller.OrgID)
		caller, _ := f.dir.CallerByTokenID(ctx, f.caller.TokenID)
		q := f.queue(f.svc)
		var lines []string
		for i := range 12 {
			lines = append(lines, line(fmt.Sprintf("req-%02d", i), fmt.Sprintf("prompt %d", i)))
		}
		b := f.create(q, caller, strings.Join(lines, "\n"))
		runCtx, stop := context.WithCancel(ctx)
		ran := make(chan struct{})
		go func() { f.svc.Run(runCtx, q, time.Hour); close(ran) }() // wakes the waiting lines
		t.Cleanup(func() { stop(); <-ran })
		testsync.WaitFor(t, 10*time.Second, "a line answered", func() bool { return f.calls.Load() >= 1 })
		c, err := f.svc.Cancel(ctx, caller.OrgID, batches.ID(b.ID))
		if err != nil || c.Status != "cancelling" || c.CancellingAt == nil {
			t.Fatalf("cancel: %+v %v", c, err)
		}
		if again, err := f.svc.Cancel(ctx, caller.OrgID, batches.ID(b.ID)); err != nil || !(again.Status == "cancelling" || again.Status == "cancelled") {
			t.Fatalf("cancel again: %+v %v", again, err)
		}
		done := f.wait(caller, b.ID, 15*time.Second)
		if done.Status != "cancelled" || done.CancelledAt == nil || done.Completed+done.Failed != 12 || done.Completed < 1 || done.Failed < 8 {
			t.Fatalf("cancelled: %+v", done)
		}
		out, errs := f.file(caller, done.OutputFileID), f.file(caller, done.ErrorFileID)
		if len(out) != done.Completed || len(errs) != done.Failed || int(f.calls.Load()) != done.Completed {
			t.Fatalf("%d output lines, %d error lines, %d provider calls for %+v", len(out), len(errs), f.calls.Load(), done)
		}
		for _, l := range errs {
			if l.Error == nil || l.Error.Code != "batch_cancelled" || l.Response != nil {
				t.Errorf("error line %+v", l)
			}
		}
		// A finished batch cannot be cancelled; another tenant's is not found.
		if _, err := f.svc.Cancel(ctx, caller.OrgID, batches.ID(b.ID)); err != nil {
			t.Errorf("cancelling a cancelled batch returns it: %v", err)
		}
		if _, err := f.svc.Cancel(ctx, f.other.OrgID, batches.ID(b.ID)); apperr.CodeOf(err) != apperr.NotFound {
			t.Errorf("another tenant cancels: %v", err)
		}
	})
}

// Another organization's batch, file and its content are not found, and
// its file cannot make a batch.
func TestAnotherTenantsBatchesAndFilesAreNotFound(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		ctx := context.Background()
		q := &heldQueue{}
		b := f.create(q, f.caller, line("a", "x"))
		fileID := batches.FileID(b.InputFileID)
		for name, err := range map[string]error{
			"get batch":    second(f.svc.Get(ctx, f.other.OrgID, batches.ID(b.ID))),
			"cancel batch": second(f.svc.Cancel(ctx, f.other.OrgID, batches.ID(b.ID))),
			"get file":     second(f.svc.File(ctx, f.other.OrgID, fileID)),
			"file content": third(f.svc.FileContent(ctx, f.other.OrgID, fileID)),
			"delete file":  f.svc.DeleteFile(ctx, f.other.OrgID, fileID),
			"create from":  second(f.svc.Create(ctx, q, f.other, batches.Create{InputFileID: fileID, Endpoint: "/v1/chat/completions", CompletionWindow: "24h"})),
			"junk id":      second(f.svc.Get(ctx, f.caller.OrgID, "batch_x")),
			"job id":       second(f.svc.Get(ctx, f.caller.OrgID, "job_1")),
		} {
			if apperr.CodeOf(err) != apperr.NotFound {
				t.Errorf("%s: %v, want not found", name, err)
			}
		}
		if bs, more, err := f.svc.List(ctx, f.other.OrgID, "", 0); err != nil || len(bs) != 0 || more {
			t.Errorf("another tenant's list: %v %v %v", bs, more, err)
		}
		if fs, _, err := f.svc.Files(ctx, f.other.OrgID, batches.FileList{}); err != nil || len(fs) != 0 {
			t.Errorf("another tenant's files: %v %v", fs, err)
		}
		// The owner still has both.
		if _, err := f.svc.Get(ctx, f.caller.OrgID, batches.ID(b.ID)); err != nil {
			t.Error(err)
		}
		if _, _, err := f.svc.FileContent(ctx, f.caller.OrgID, fileID); err != nil {
			t.Error(err)
		}
	})
}

// Files are kept within the tier's size, for batch input only; batches
// page as OpenAI's do.
func TestFileLimitsAndPages(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		ctx := context.Background()
		if f.caller.Tier.BatchFileBytes != 1<<20 {
			t.Fatalf("free tier: %d bytes", f.caller.Tier.BatchFileBytes)
		}
		up := func(c accounts.Caller, n int, purpose string) error {
			_, err := f.svc.Upload(ctx, c, batches.Upload{Purpose: purpose, Filename: "../../in.jsonl", Content: bytes.NewReader(bytes.Repeat([]byte("x"), n))})
			return err
		}
		if err := up(f.caller, 1<<20, "batch"); err != nil {
			t.Fatalf("exactly the limit: %v", err)
		}
		err := up(f.caller, 1<<20+1, "batch")
		if e := apperr.As(err); e.Code != apperr.TooLarge || e.Reason != "file_too_large" ||
			e.Message != "the file is larger than the free tier accepts: batch files of up to 1 MiB (1048576 bytes); split the requests into several files, or ask for a larger tier" {
			t.Fatalf("over the limit: %v", err)
		}
		if e := apperr.As(up(f.caller, 10, "fine-tune")); e.Code != apperr.Invalid || e.Param != "purpose" {
			t.Fatalf("purpose: %v", e)
		}
		if e := apperr.As(up(f.caller, 10, "")); e.Reason != "missing_purpose" {
			t.Fatalf("no purpose: %v", e)
		}
		// A tier without batch files refuses any.
		none, noFiles := f.caller, *f.caller.Tier
		noFiles.BatchFileBytes, none.Tier = 0, &noFiles
		if e := apperr.As(up(none, 0, "batch")); e.Code != apperr.Forbidden || e.Message != "the free tier does not accept batch files" {
			t.Fatalf("no batch files: %v", e)
		}
		// Premium takes 100 MiB.
		if _, err := f.store.SetOrganizationTier(ctx, models.User{}, f.other.OrgID, "premium"); err != nil {
			t.Fatal(err)
		}
		f.dir.ForgetOrganization(f.other.OrgID)
		premium, _ := f.dir.CallerByTokenID(ctx, f.other.TokenID)
		if premium.Tier.BatchFileBytes != 100<<20 {
			t.Fatalf("premium: %d", premium.Tier.BatchFileBytes)
		}
		if err := up(premium, 2<<20, "batch"); err != nil {
			t.Fatalf("premium, 2 MiB: %v", err)
		}
		fs, more, err := f.svc.Files(ctx, f.caller.OrgID, batches.FileList{})
		if err != nil || len(fs) != 1 || more || fs[0].Filename != "in.jsonl" || fs[0].Bytes != 1<<20 || !fs[0].Complete {
			t.Fatalf("files: %+v %v %v", fs, more, err)
		}
		// An empty file makes no batch; nor does an output file.
		empty := f.upload(f.caller, "\n\n")
		if _, err := f.svc.Create(ctx, &heldQueue{}, f.caller, batches.Create{InputFileID: empty, Endpoint: "/v1/chat/completions", CompletionWindow: "24h"}); apperr.As(err).Reason != "empty_input_file" {
			t.Fatalf("empty: %v", err)
		}
		// Each bad parameter is refused for itself, on a file that is fine.
		good := f.upload(f.caller, line("a", "x")+"\n")
		for _, bad := range []struct {
			in            batches.Create
			reason, param string
		}{
			{batches.Create{InputFileID: good, Endpoint: "/v1/completions", CompletionWindow: "24h"}, "invalid_endpoint", "endpoint"},
			{batches.Create{InputFileID: good, Endpoint: "/v1/chat/completions", CompletionWindow: "1h"}, "invalid_completion_window", "completion_window"},
			{batches.Create{Endpoint: "/v1/chat/completions", CompletionWindow: "24h"}, "missing_input_file_id", "input_file_id"},
		} {
			e := apperr.As(second(f.svc.Create(ctx, &heldQueue{}, f.caller, bad.in)))
			if e.Code != apperr.Invalid || e.Reason != bad.reason || e.Param != bad.param {
				t.Errorf("%+v: %+v, want %s on %s", bad.in, e, bad.reason, bad.param)
			}
		}
		// Pages of batches, newest first.
		var ids []string
		for i := range 5 {
			ids = append(ids, batches.ID(f.create(&heldQueue{}, f.caller, line("a", fmt.Sprint(i))).ID))
		}
		page, more, err := f.svc.List(ctx, f.caller.OrgID, "", 2)
		if err != nil || len(page) != 2 || !more || batches.ID(page[0].ID) != ids[4] || batches.ID(page[1].ID) != ids[3] {
			t.Fatalf("first page: %v %v", more, err)
		}
		page, more, err = f.svc.List(ctx, f.caller.OrgID, batches.ID(page[1].ID), 10)
		if err != nil || len(page) != 3 || more || batches.ID(page[2].ID) != ids[0] {
			t.Fatalf("second page: %d %v %v", len(page), more, err)
		}
	})
}

// Two nodes finishing the lines of one batch at once (and each line twice,
// as a job worked again after a lost node would) count each line once and
// make the output and error files once.
func TestTwoNodesFinishingLinesMakeTheFilesOnce(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		nodes := []*batches.Service{f.svc, f.svc}
		if url != "" { // a second node: its own connections to the same database
			nodes[1] = f.service(open(t, url))
		}
		held := &heldQueue{}
		const n = 40
		var lines []string
		for i := range n {
			lines = append(lines, line(fmt.Sprintf("r%d", i), "x"))
		}
		b := f.create(held, f.caller, strings.Join(lines, "\n"))
		if len(held.lines) != n {
			t.Fatalf("%d lines queued", len(held.lines))
		}
		var wg sync.WaitGroup
		errs := make(chan error, 2*n)
		for node := range 2 {
			for i, l := range held.lines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					out := jobs.Output{RequestID: jobs.JobID(int64(1000 + i)), Status: 200, Body: json.RawMessage(`{"ok":true}`)}
					if i%4 == 0 {
						out = jobs.Output{RequestID: jobs.JobID(int64(1000 + i)), Status: 503, Error: &jobs.Failure{Code: "upstream_unavailable", Message: "down"}}
					}
					errs <- nodes[node].LineDone(context.Background(), b.ID, l.CustomID, out.RequestID, out)
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		done, err := f.svc.Get(context.Background(), f.caller.OrgID, batches.ID(b.ID))
		if err != nil || done.Status != "completed" || done.Completed != 30 || done.Failed != 10 {
			t.Fatalf("%+v %v", done, err)
		}
		var outputs int64
		db.Gorm.Raw("SELECT COUNT(*) FROM batch_files WHERE org_id = ? AND purpose = 'batch_output'", f.caller.OrgID).Scan(&outputs)
		if outputs != 2 {
			t.Fatalf("%d output and error files, want 2", outputs)
		}
		out, errLines := f.file(f.caller, done.OutputFileID), f.file(f.caller, done.ErrorFileID)
		seen := map[string]bool{}
		for _, l := range append(out, errLines...) {
			if seen[l.custom()] {
				t.Errorf("%s twice", l.custom())
			}
			seen[l.custom()] = true
		}
		if len(out) != 30 || len(errLines) != 10 || len(seen) != n {
			t.Fatalf("%d output lines, %d error lines, %d custom ids", len(out), len(errLines), len(seen))
		}
		if errLines[0].custom() != "r0" || errLines[0].Error.Code != "upstream_unavailable" || errLines[0].Response != nil {
			t.Errorf("error line %+v", errLines[0])
		}
	})
}

// A batch's window ends after 24 hours: lines not run by then are skipped
// as batch_expired, and lines that never come back are failed by the sweep
// after a grace; files and finished batches go after the retention.
func TestBatchesAndFilesExpire(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		ctx := context.Background()
		held := &heldQueue{}
		b := f.create(held, f.caller, line("a", "x")+"\n"+line("b", "y")+"\nnot json")
		if st, err := f.svc.Stopped(ctx, b.ID); st != nil || err != nil {
			t.Fatalf("a line in the window: %+v %v", st, err)
		}
		// One line comes back in time.
		if err := f.svc.LineDone(ctx, b.ID, "a", "job_7", jobs.Output{RequestID: "job_7", Status: 200, Body: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(24 * time.Hour)
		if st, _ := f.svc.Stopped(ctx, b.ID); st == nil || st.Code != "batch_expired" {
			t.Fatalf("a line past the window: %+v", st)
		}
		// The sweep waits a grace for lines still running, then fails the rest.
		if err := f.svc.Sweep(ctx, held); err != nil {
			t.Fatal(err)
		}
		if got, _ := f.svc.Get(ctx, f.caller.OrgID, batches.ID(b.ID)); got.Status != "in_progress" {
			t.Fatalf("swept within the grace: %+v", got)
		}
		f.clock.Advance(16 * time.Minute)
		if err := f.svc.Sweep(ctx, held); err != nil {
			t.Fatal(err)
		}
		done, _ := f.svc.Get(ctx, f.caller.OrgID, batches.ID(b.ID))
		if done.Status != "expired" || done.ExpiredAt == nil || done.Completed != 1 || done.Failed != 2 {
			t.Fatalf("expired: %+v", done)
		}
		errs := f.file(f.caller, done.ErrorFileID)
		if len(errs) != 2 || errs[0].custom() != "b" || errs[0].Error.Code != "batch_expired" || errs[1].Error.Code != "invalid_json" ||
			errs[0].ID != fmt.Sprintf("batch_req_%d_2", b.ID) {
			t.Fatalf("error file: %+v", errs)
		}
		// A line that comes back after all changes nothing.
		if err := f.svc.LineDone(ctx, b.ID, "b", "job_8", jobs.Output{RequestID: "job_8", Status: 200, Body: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
		if again, _ := f.svc.Get(ctx, f.caller.OrgID, batches.ID(b.ID)); again.Completed != 1 || again.Failed != 2 {
			t.Fatalf("a late line was counted: %+v", again)
		}
		// Thirty days on, the files and the batch are gone.
		f.clock.Advance(30*24*time.Hour + time.Minute)
		if _, _, err := f.svc.FileContent(ctx, f.caller.OrgID, batches.FileID(*done.OutputFileID)); apperr.CodeOf(err) != apperr.NotFound {
			t.Fatalf("an expired file: %v", err)
		}
		if err := f.svc.Sweep(ctx, held); err != nil {
			t.Fatal(err)
		}
		var files, left int64
		db.Gorm.Raw("SELECT COUNT(*) FROM batch_files").Scan(&files)
		db.Gorm.Raw("SELECT COUNT(*) FROM batches").Scan(&left)
		if files != 0 || left != 0 {
			t.Fatalf("%d files and %d batches left", files, left)
		}
	})
}

// heldQueue keeps a batch's lines instead of running them.
type heldQueue struct {
	mu    sync.Mutex
	lines []jobs.Line
}

func (h *heldQueue) EnqueueBatch(ctx context.Context, _ accounts.Caller, _ int64, lines jobs.LineSource) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return lines(ctx, nil, func(l jobs.Line) error {
		h.lines = append(h.lines, l)
		return nil
	})
}

func (*heldQueue) WakeBatch(context.Context, int64) error { return nil }

func (h *heldQueue) HasBatchLines(context.Context, int64) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.lines) > 0, nil
}

// lostQueue stands for a node lost between storing a batch and queueing
// its lines: the lines never reach any queue.
type lostQueue struct{}

func (lostQueue) EnqueueBatch(context.Context, accounts.Caller, int64, jobs.LineSource) error {
	return nil
}
func (lostQueue) WakeBatch(context.Context, int64) error             { return nil }
func (lostQueue) HasBatchLines(context.Context, int64) (bool, error) { return false, nil }

// A batch stored by a node lost before it queued the lines is found by the
// sweep once it is old enough, and its pending lines are queued, once:
// the batch completes, each line asked of the provider one time.
func TestAStrandedBatchIsQueuedBySweep(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		ctx := context.Background()
		q := f.queue(f.svc)
		b := f.create(lostQueue{}, f.caller, line("a", "x")+"\n"+line("b", "y")+"\nnot json")
		if err := f.svc.Sweep(ctx, q); err != nil {
			t.Fatal(err)
		}
		if queued, err := q.HasBatchLines(ctx, b.ID); err != nil || queued {
			t.Fatalf("a batch still being created was queued by the sweep: %v %v", queued, err)
		}
		f.clock.Advance(11 * time.Minute)
		for range 2 { // a second sweep, or a second node's, queues nothing more
			if err := f.svc.Sweep(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		done := f.wait(f.caller, b.ID, 20*time.Second)
		if done.Status != "completed" || done.Completed != 2 || done.Failed != 1 {
			t.Fatalf("the stranded batch: %+v", done)
		}
		if err := f.svc.Sweep(ctx, q); err != nil {
			t.Fatal(err)
		}
		var lineJobs int64
		db.Gorm.Raw("SELECT COUNT(*) FROM river_job WHERE kind = 'batch_line'").Scan(&lineJobs)
		if n := f.calls.Load(); n != 2 || lineJobs != 2 {
			t.Fatalf("the provider was asked %d times, and %d line jobs queued, for 2 lines", n, lineJobs)
		}
		out := f.file(f.caller, done.OutputFileID)
		if len(out) != 2 || out[0].custom() != "a" || out[1].custom() != "b" {
			t.Fatalf("output: %+v", out)
		}
	})
}

// wakeRecorder is a heldQueue that says which batches it was asked to wake.
type wakeRecorder struct {
	heldQueue
	woke chan int64
}

func (w *wakeRecorder) WakeBatch(_ context.Context, id int64) error {
	w.woke <- id
	return nil
}

// Cancelling answers at once: the batch's waiting lines are woken by Run,
// not inside the request.
func TestCancelWakesTheLinesInTheBackground(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		ctx := context.Background()
		q := &wakeRecorder{woke: make(chan int64, 1)}
		b := f.create(q, f.caller, line("a", "one")+"\n"+line("b", "two"))
		c, err := f.svc.Cancel(ctx, f.caller.OrgID, batches.ID(b.ID))
		if err != nil || c.Status != "cancelling" {
			t.Fatalf("cancel: %+v %v", c, err)
		}
		select {
		case id := <-q.woke:
			t.Fatalf("batch %d woken inside Cancel", id)
		default:
		}
		runCtx, stop := context.WithCancel(ctx)
		ran := make(chan struct{})
		go func() { f.svc.Run(runCtx, q, time.Hour); close(ran) }()
		defer func() { stop(); <-ran }()
		select {
		case id := <-q.woke:
			if id != b.ID {
				t.Fatalf("woke batch %d, want %d", id, b.ID)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not wake the cancelled batch's lines")
		}
	})
}

func second[T any](_ T, err error) error { return err }

func third[T, U any](_ T, _ U, err error) error { return err }

// TestAnOrganizationsFilesAreBounded: an organization keeps at most
// Config.FileStorage bytes of files: uploads at once past it are refused
// (file_storage_full, the upload left nowhere), however many race for the
// last room; a deleted or expired file makes room; another organization
// has room of its own.
func TestAnOrganizationsFilesAreBounded(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		ctx := context.Background()
		const kib, storage = 1 << 10, 10 << 10 // room for ten 1 KiB files
		svc := batches.New(batches.Deps{Store: models.NewStore(db), Pipeline: f.pipe, Log: slog.New(slog.DiscardHandler)},
			batches.Config{FileRetention: 30 * 24 * time.Hour, FileStorage: storage, Now: f.clock.Now})
		up := func(c accounts.Caller, expiresAfter time.Duration) (models.BatchFile, error) {
			return svc.Upload(ctx, c, batches.Upload{Purpose: "batch", Filename: "in.jsonl", Content: bytes.NewReader(bytes.Repeat([]byte("x"), kib)), ExpiresAfter: expiresAfter})
		}
		if _, err := up(f.caller, time.Hour); err != nil { // expires first
			t.Fatal(err)
		}
		// Twenty uploads at once for the nine places left.
		var wg sync.WaitGroup
		var stored, full atomic.Int32
		for range 20 {
			wg.Go(func() {
				_, err := up(f.caller, 0)
				switch e := apperr.As(err); {
				case err == nil:
					stored.Add(1)
				case e.Code == apperr.TooLarge && e.Reason == "file_storage_full" && strings.Contains(e.Message, "would pass its 10240"):
					full.Add(1)
				default:
					t.Errorf("an upload: %v", err)
				}
			})
		}
		wg.Wait()
		held := func(orgID int64) (n, bytes int64) {
			db.Gorm.Raw("SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM batch_files WHERE org_id = ?", orgID).Row().Scan(&n, &bytes)
			return n, bytes
		}
		if n, b := held(f.caller.OrgID); stored.Load() != 9 || full.Load() != 11 || n != 10 || b != storage {
			t.Fatalf("%d stored, %d refused; the organization holds %d files of %d bytes, want 10 of %d", stored.Load(), full.Load(), n, b, storage)
		}
		if _, err := up(f.other, 0); err != nil {
			t.Fatalf("another organization: %v", err)
		}
		// The first file expires: room for one more, and only one.
		f.clock.Advance(time.Hour)
		if _, err := up(f.caller, 0); err != nil {
			t.Fatalf("after a file expired: %v", err)
		}
		if _, err := up(f.caller, 0); apperr.As(err).Reason != "file_storage_full" {
			t.Fatalf("full again: %v", err)
		}
	})
}
