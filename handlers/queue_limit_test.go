package handlers

import (
	"bytes"
	"encoding/json"
	"mime/multipart"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/wire"
)

// eachTenantFixture runs fn on the tenant fixture over SQLite and Postgres.
func eachTenantFixture(t *testing.T, fn func(t *testing.T, db *models.DB, f *tenantFixture)) {
	testdb.Each(t, func(t *testing.T, db *models.DB) { fn(t, db, newTenantFixture(t, db)) })
}

func uploadRequest(token string) request {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	_ = mw.WriteField("purpose", "batch")
	fw, _ := mw.CreateFormFile("file", "zebra.jsonl")
	_, _ = fw.Write([]byte(`{"custom_id":"z-1","method":"POST","url":"/v1/chat/completions","body":{"model":"sluice-local","messages":[{"role":"user","content":"zebra"}]}}` + "\n"))
	_ = mw.Close()
	return request{method: "POST", path: "/v1/files", bearer: token, contentType: mw.FormDataContentType(), body: b.String()}
}

// openAIError reads a /v1 error body's type, code and message.
func openAIError(t *testing.T, body []byte) (typ, code, message string) {
	t.Helper()
	var e wire.OpenAIError
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("not OpenAI's error shape: %q", body)
	}
	return e.Error.Type, e.Error.Code, e.Error.Message
}

// Uploads, downloads, batch creation and job creation spend the
// organization's request bucket, the one chat completions spend: a free
// organization (burst 30) is refused its 31st call, as chat would refuse
// it, and chat after it too.
func TestFilesBatchesAndJobsSpendTheRequestBucket(t *testing.T) {
	eachTenantFixture(t, func(t *testing.T, db *models.DB, f *tenantFixture) {
		e, token := f.e, f.tokens["ownerB"] // Zebra: nothing spent yet, on a clock that does not move
		w := e.do(uploadRequest(token))
		if w.Code != 200 {
			t.Fatalf("upload: %d %s", w.Code, w.Body.String())
		}
		file := decode(t, w)["id"].(string)
		calls := []request{
			{method: "GET", path: "/v1/files/" + file + "/content", bearer: token},
			{method: "POST", path: "/v1/batches", bearer: token, body: `{"input_file_id":"` + file + `","endpoint":"/v1/chat/completions","completion_window":"24h"}`},
			{method: "POST", path: "/v1/jobs", bearer: token, body: `{"model":"sluice-local","messages":[{"role":"user","content":"zebra job"}]}`},
			{method: "POST", path: "/v1/chat/completions", bearer: token, body: `{"model":"sluice-local","messages":[{"role":"user","content":"zebra async"}]}`,
				header: map[string]string{"X-Sluice-Async": "true"}},
			uploadRequest(token),
		}
		for i := 1; i < 30; i++ { // the upload above was the first
			c := calls[i%len(calls)]
			if w := e.do(c); w.Code/100 != 2 {
				t.Fatalf("call %d (%s %s): %d %s", i+1, c.method, c.path, w.Code, w.Body.String())
			}
		}
		for _, c := range calls {
			w := e.do(c)
			typ, code, msg := openAIError(t, w.Body.Bytes())
			if w.Code != 429 || typ != "rate_limit_exceeded" || code != "rate_limit_exceeded" ||
				!strings.HasPrefix(msg, "rate limit reached for requests on the free tier (limit 30, remaining 0); retry after ") ||
				w.Header().Get("Retry-After") == "" || w.Header().Get("x-ratelimit-limit-requests") != "30" {
				t.Fatalf("%s %s past the burst: %d %q %q %q %v", c.method, c.path, w.Code, typ, code, msg, w.Header())
			}
		}
		w = e.chat(token)
		if typ, code, msg := openAIError(t, w.Body.Bytes()); w.Code != 429 || typ != "rate_limit_exceeded" || code != "rate_limit_exceeded" ||
			!strings.HasPrefix(msg, "rate limit reached for requests on the free tier (limit 30, remaining 0)") {
			t.Fatalf("chat after the files: %d %s", w.Code, w.Body.String())
		}
	})
}

// TestListingJobsCostsARequest: the list reads up to 100 jobs with their
// bodies and answers, so it costs one request, and an organization over
// its limit cannot list; polling one job stays free.
func TestListingJobsCostsARequest(t *testing.T) {
	eachTenantFixture(t, func(t *testing.T, db *models.DB, f *tenantFixture) {
		e, token := f.e, f.tokens["ownerB"]
		w := e.do(request{method: "POST", path: "/v1/jobs", bearer: token, body: `{"model":"sluice-local","messages":[{"role":"user","content":"zebra job"}]}`})
		if w.Code != 202 {
			t.Fatalf("queueing: %d %s", w.Code, w.Body.String())
		}
		id, _ := decode(t, w)["id"].(string)
		remaining := func(w *httptest.ResponseRecorder) int {
			n, err := strconv.Atoi(w.Header().Get("x-ratelimit-remaining-requests"))
			if w.Code != 200 || err != nil {
				t.Fatalf("%d %v %s", w.Code, w.Header(), w.Body.String())
			}
			return n
		}
		list := request{method: "GET", path: "/v1/jobs", bearer: token}
		first := remaining(e.do(list))
		if second := remaining(e.do(list)); first-second != 1 {
			t.Fatalf("listing jobs cost %d requests, want 1", first-second)
		}
		for w := e.do(list); w.Code != 429; w = e.do(list) {
		}
		expectError(t, e.do(list), 429, "rate_limit_exceeded", "rate limit reached for requests")
		if w := e.do(request{method: "GET", path: "/v1/jobs/" + id, bearer: token}); w.Code != 200 || !strings.Contains(w.Body.String(), id) {
			t.Fatalf("polling a job over the limit: %d %s", w.Code, w.Body.String())
		}
	})
}

// Past the tier's queued jobs, POST /v1/jobs and async chat completions
// answer 429 queue_full saying how many are queued, with no Retry-After,
// and the refusal is counted among the rejections.
func TestAFullJobQueueIsA429(t *testing.T) {
	eachTenantFixture(t, func(t *testing.T, db *models.DB, f *tenantFixture) {
		e, token := f.e, f.tokens["ownerB"]
		if w := e.do(request{method: "PUT", path: "/api/admin/tiers/free", bearer: f.sessions["admin"], body: `{"max_queued_jobs":2}`}); w.Code != 200 ||
			decode(t, w)["max_queued_jobs"] != float64(2) || decode(t, w)["max_pending_batch_lines"] != float64(1000) {
			t.Fatalf("tier: %d %s", w.Code, w.Body.String())
		}
		job := request{method: "POST", path: "/v1/jobs", bearer: token, body: `{"model":"sluice-local","messages":[{"role":"user","content":"zebra job"}]}`}
		async := request{method: "POST", path: "/v1/chat/completions", bearer: token, body: job.body, header: map[string]string{"X-Sluice-Async": "true"}}
		for _, r := range []request{job, async} {
			if w := e.do(r); w.Code != 202 {
				t.Fatalf("within the limit: %d %s", w.Code, w.Body.String())
			}
		}
		const full = "the free tier queues at most 2 jobs per organization and 2 are queued; wait for some to finish"
		for _, r := range []request{job, async} {
			w := e.do(r)
			typ, code, msg := openAIError(t, w.Body.Bytes())
			if w.Code != 429 || typ != "rate_limit_exceeded" || code != "queue_full" || msg != full || w.Header().Get("Retry-After") != "" {
				t.Fatalf("past the limit: %d %q %q %q Retry-After %q", w.Code, typ, code, msg, w.Header().Get("Retry-After"))
			}
		}
		var rejected int64
		db.Gorm.Raw("SELECT COALESCE(SUM(rejected_queue), 0) FROM usage_hourly").Scan(&rejected)
		if rejected != 2 {
			t.Fatalf("%d queue rejections in the rollups, want 2", rejected)
		}
	})
}
