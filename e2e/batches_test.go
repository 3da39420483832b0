package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/upstream/mock"
	"github.com/sluicehq/sluice/webhook"
)

// refusing wraps the mock provider: a prompt that asks to be refused is
// answered 400, as a provider's content policy would.
func refusing(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if bytes.Contains(body, []byte("refuse me")) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				w.Write([]byte(`{"error":{"message":"this request is refused by policy","type":"invalid_request_error","code":"content_policy"}}`))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// TestBatchesAndJobsEndToEnd runs the Batch API and job callbacks on a
// real Sluice: the official openai-go SDK, unchanged, uploads a file,
// creates a batch, polls it and downloads its output; refusals and limits
// answer in OpenAI's shape; another tenant's ids are not found; a job's
// callback arrives signed.
func TestBatchesAndJobsEndToEnd(t *testing.T) {
	const providerKey = "sk-mock-provider"
	provider := mock.New(mock.Config{Keys: map[string]float64{providerKey: 1000}})
	providerSrv := httptest.NewServer(refusing(provider))
	t.Cleanup(providerSrv.Close)
	env := map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4", "SLUICE_ADMIN_PASSWORD": "admin-password",
		// The receivers are httptest servers on loopback, over http.
		"SLUICE_WEBHOOK_HOSTS": "127.0.0.1", "SLUICE_WEBHOOK_ALLOW_PRIVATE": "true", "SLUICE_WEBHOOK_ALLOW_HTTP": "true"}
	if os.Getenv("TEST_DATABASE_URL") != "" {
		env["DATABASE_URL"], env["SLUICE_AUTO_MIGRATE"], env["SLUICE_MASTER_KEY"] = testdb.PostgresURL(t), "true", testMasterKey
	}
	base, out, stop := start(t, env)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("run: %v\n%s", err, out.String())
		}
	})
	c := client{t, base}
	var admin struct{ Token string }
	c.call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &admin)
	if r := c.call("POST", "/api/admin/upstreams", admin.Token, `{"name":"mock","base_url":"`+providerSrv.URL+`/v1","api_key":"`+providerKey+
		`","weight":1,"rpm":60000,"models":["gpt-4o-mini"]}`, nil); r.StatusCode != 201 {
		t.Fatalf("provider key: %d", r.StatusCode)
	}
	// Two tenants, each with an API token.
	tenant := func(email, org string) (session, token string) {
		var s, tok struct{ Token string }
		if r := c.call("POST", "/api/auth/signup", "", `{"email":"`+email+`","password":"password123","organization":"`+org+`"}`, &s); r.StatusCode != 201 {
			t.Fatalf("signup %s: %d", email, r.StatusCode)
		}
		if r := c.call("POST", "/api/tokens", s.Token, `{"name":"batches"}`, &tok); r.StatusCode != 201 {
			t.Fatalf("token: %d", r.StatusCode)
		}
		return s.Token, tok.Token
	}
	session, apiKey := tenant("ada@example.com", "Couplets")
	_, otherKey := tenant("eve@example.com", "Elsewhere")
	sdk := openai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey(apiKey))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)

	var batchID, outputID string
	t.Run("official SDK: upload, create, poll, download", func(t *testing.T) {
		prompts := map[string]string{"spring": "a couplet about spring", "river": "a couplet about rivers", "moon": "a couplet about the moon"}
		// Each line bounds its answer: without max_tokens a request to
		// gpt-4o-mini reserves its longest answer (16,384 tokens) of the
		// free tier's 20,000 a minute, so the jobs would run one at a time
		// and, behind this test's polling (ten requests a second of a
		// bucket refilled at 0.5), wait past its minute.
		var input strings.Builder
		for _, id := range []string{"spring", "river", "moon"} {
			fmt.Fprintf(&input, `{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","max_tokens":64,"messages":[{"role":"user","content":%q}]}}`+"\n",
				id, prompts[id])
		}
		input.WriteString(`{"custom_id":"policy","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","max_tokens":64,"messages":[{"role":"user","content":"please refuse me"}]}}` + "\n")
		input.WriteString(`{"custom_id":"broken","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini"}}` + "\n")
		file, err := sdk.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(input.String()), "couplets.jsonl", "application/jsonl"),
			Purpose: openai.FilePurposeBatch})
		if err != nil {
			t.Fatalf("Files.New: %v", err)
		}
		if !strings.HasPrefix(file.ID, "file-") || file.Object != "file" || file.Bytes != int64(input.Len()) || file.Filename != "couplets.jsonl" ||
			file.Purpose != "batch" {
			t.Fatalf("file: %s", file.RawJSON())
		}
		batch, err := sdk.Batches.New(ctx, openai.BatchNewParams{InputFileID: file.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
			CompletionWindow: openai.BatchNewParamsCompletionWindow24h, Metadata: map[string]string{"campaign": "spring festival"}})
		if err != nil {
			t.Fatalf("Batches.New: %v", err)
		}
		if !strings.HasPrefix(batch.ID, "batch_") || batch.Object != "batch" || batch.InputFileID != file.ID || batch.Endpoint != "/v1/chat/completions" ||
			batch.CompletionWindow != "24h" || batch.RequestCounts.Total != 5 || batch.Metadata["campaign"] != "spring festival" ||
			batch.ExpiresAt-batch.CreatedAt != 24*3600 {
			t.Fatalf("batch: %s", batch.RawJSON())
		}
		batchID = batch.ID
		for batch.Status != openai.BatchStatusCompleted {
			if batch.Status != openai.BatchStatusInProgress && batch.Status != openai.BatchStatusFinalizing {
				t.Fatalf("batch went %s: %s", batch.Status, batch.RawJSON())
			}
			if ctx.Err() != nil {
				t.Fatalf("still %s: %s", batch.Status, batch.RawJSON())
			}
			time.Sleep(100 * time.Millisecond)
			if batch, err = sdk.Batches.Get(ctx, batch.ID); err != nil {
				t.Fatalf("Batches.Get: %v", err)
			}
		}
		if rc := batch.RequestCounts; rc.Total != 5 || rc.Completed != 3 || rc.Failed != 2 || batch.OutputFileID == "" || batch.ErrorFileID == "" ||
			batch.CompletedAt == 0 || batch.InProgressAt == 0 {
			t.Fatalf("completed: %s", batch.RawJSON())
		}
		outputID = batch.OutputFileID
		type line struct {
			ID       string `json:"id"`
			CustomID string `json:"custom_id"`
			Response *struct {
				StatusCode int    `json:"status_code"`
				RequestID  string `json:"request_id"`
				Body       openai.ChatCompletion
			} `json:"response"`
			Error *struct{ Code, Message string } `json:"error"`
		}
		download := func(id string) map[string]line {
			res, err := sdk.Files.Content(ctx, id)
			if err != nil {
				t.Fatalf("Files.Content(%s): %v", id, err)
			}
			defer res.Body.Close()
			lines := map[string]line{}
			sc := bufio.NewScanner(res.Body)
			for sc.Scan() {
				var l line
				if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
					t.Fatalf("%s: %q: %v", id, sc.Text(), err)
				}
				lines[l.CustomID] = l
			}
			return lines
		}
		answers := download(batch.OutputFileID)
		if len(answers) != 3 {
			t.Fatalf("output: %+v", answers)
		}
		for id, prompt := range prompts {
			l := answers[id]
			if l.Error != nil || l.Response == nil || l.Response.StatusCode != 200 || !strings.HasPrefix(l.ID, "batch_req_") ||
				len(l.Response.Body.Choices) != 1 || l.Response.Body.Choices[0].Message.Content != "mock reply to: "+prompt {
				t.Errorf("%s: %+v", id, l)
			}
		}
		failures := download(batch.ErrorFileID)
		if p := failures["policy"]; p.Error == nil || p.Error.Code != "provider_refused" || p.Response == nil || p.Response.StatusCode != 400 {
			t.Errorf("refused line: %+v", p)
		}
		if b := failures["broken"]; b.Error == nil || b.Error.Code != "invalid_messages" || b.Response != nil ||
			!strings.Contains(b.Error.Message, "line 5: body: messages must be a non-empty array") {
			t.Errorf("malformed line: %+v", b)
		}
		page, err := sdk.Batches.List(ctx, openai.BatchListParams{Limit: openai.Int(10)})
		if err != nil || len(page.Data) != 1 || page.Data[0].ID != batch.ID || page.HasMore {
			t.Fatalf("Batches.List: %v %+v", err, page)
		}
		if f, err := sdk.Files.Get(ctx, batch.OutputFileID); err != nil || f.Purpose != "batch_output" {
			t.Fatalf("Files.Get(output): %v %+v", err, f)
		}
		// Deleting the input leaves the batch and its output.
		if d, err := sdk.Files.Delete(ctx, file.ID); err != nil || !d.Deleted {
			t.Fatalf("Files.Delete: %v %+v", err, d)
		}
		if _, err := sdk.Files.Get(ctx, file.ID); !isStatus(err, 404) {
			t.Fatalf("a deleted file: %v", err)
		}
	})

	t.Run("limits and refusals in OpenAI's shape", func(t *testing.T) {
		for _, tc := range []struct {
			name, purpose string
			size          int
			status        int
			code, param   string
			message       string
		}{
			{"over the free tier's limit", "batch", 1<<20 + 1, 413, "file_too_large", "file",
				"the file is larger than the free tier accepts: batch files of up to 1 MiB (1048576 bytes); split the requests into several files, or ask for a larger tier"},
			{"another purpose", "fine-tune", 10, 400, "invalid_purpose", "purpose", "purpose must be batch: this gateway keeps files only as batch input"},
		} {
			var body bytes.Buffer
			w := multipart.NewWriter(&body)
			w.WriteField("purpose", tc.purpose)
			fw, _ := w.CreateFormFile("file", "big.jsonl")
			fw.Write(bytes.Repeat([]byte("x"), tc.size))
			w.Close()
			var e struct {
				Error struct {
					Message, Type, Code string
					Param               *string
				}
			}
			r := c.callHeaders("POST", "/v1/files", apiKey, body.String(), map[string]string{"Content-Type": w.FormDataContentType()}, &e)
			if r.StatusCode != tc.status || e.Error.Type != "invalid_request_error" || e.Error.Code != tc.code || e.Error.Param == nil ||
				*e.Error.Param != tc.param || e.Error.Message != tc.message {
				t.Errorf("%s: %d %+v", tc.name, r.StatusCode, e)
			}
		}
		// The tier's limit is the admin's to set.
		var tier struct {
			BatchFileBytes int64 `json:"batch_file_bytes"`
		}
		if r := c.call("PUT", "/api/admin/tiers/free", admin.Token, `{"batch_file_bytes":2097152}`, &tier); r.StatusCode != 200 || tier.BatchFileBytes != 2<<20 {
			t.Fatalf("raising the limit: %d %+v", r.StatusCode, tier)
		}
		if f := uploadFile(t, base, apiKey, strings.Repeat("x", 1<<20+1)); !strings.HasPrefix(f, "file-") {
			t.Errorf("over the old limit: %q", f)
		}
		if r := c.call("PUT", "/api/admin/tiers/free", admin.Token, `{"batch_file_bytes":1048576}`, nil); r.StatusCode != 200 {
			t.Fatalf("restoring the limit: %d", r.StatusCode)
		}
		var e struct{ Error struct{ Code, Param string } }
		if r := c.call("POST", "/v1/batches", apiKey, `{"input_file_id":"`+outputID+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`, &e); r.StatusCode != 400 || e.Error.Code != "invalid_input_file" {
			t.Errorf("a batch of an output file: %d %+v", r.StatusCode, e)
		}
		if r := c.call("POST", "/v1/batches", apiKey, `{"input_file_id":"`+outputID+`","endpoint":"/v1/completions","completion_window":"24h"}`, &e); r.StatusCode != 400 || e.Error.Param != "endpoint" {
			t.Errorf("another endpoint: %d %+v", r.StatusCode, e)
		}
		if r := c.call("POST", "/v1/batches/"+batchID+"/cancel", apiKey, "", &e); r.StatusCode != 409 || e.Error.Code != "batch_not_cancellable" {
			t.Errorf("cancelling a completed batch: %d %+v", r.StatusCode, e)
		}
	})

	t.Run("the queue on /metrics", func(t *testing.T) {
		res, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		for _, m := range []string{"sluice_jobs_waiting ", "sluice_jobs_oldest_age_seconds "} {
			if !strings.Contains(string(body), "\n"+m) {
				t.Errorf("/metrics lacks %q", m)
			}
		}
	})

	t.Run("another tenant's job, batch and file ids are not found", func(t *testing.T) {
		var job struct{ ID string }
		if r := c.call("POST", "/v1/jobs", apiKey, `{"model":"sluice-local","messages":[{"role":"user","content":"hi"}]}`, &job); r.StatusCode != 202 {
			t.Fatalf("job: %d", r.StatusCode)
		}
		for _, tc := range []struct{ method, path, code string }{
			{"GET", "/v1/jobs/" + job.ID, "job_not_found"},
			{"DELETE", "/v1/jobs/" + job.ID, "job_not_found"},
			{"GET", "/v1/batches/" + batchID, "batch_not_found"},
			{"POST", "/v1/batches/" + batchID + "/cancel", "batch_not_found"},
			{"GET", "/v1/files/" + outputID, "file_not_found"},
			{"GET", "/v1/files/" + outputID + "/content", "file_not_found"},
			{"DELETE", "/v1/files/" + outputID, "file_not_found"},
		} {
			var e struct{ Error struct{ Code, Type string } }
			if r := c.call(tc.method, tc.path, otherKey, "", &e); r.StatusCode != 404 || e.Error.Code != tc.code || e.Error.Type != "invalid_request_error" {
				t.Errorf("%s %s: %d %+v", tc.method, tc.path, r.StatusCode, e)
			}
		}
		other := openai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey(otherKey))
		if page, err := other.Batches.List(ctx, openai.BatchListParams{}); err != nil || len(page.Data) != 0 {
			t.Errorf("another tenant's list: %v %+v", err, page)
		}
		if _, err := other.Batches.New(ctx, openai.BatchNewParams{InputFileID: outputID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
			CompletionWindow: openai.BatchNewParamsCompletionWindow24h}); !isStatus(err, 404) {
			t.Errorf("a batch of another tenant's file: %v", err)
		}
		// The owner still reads it, and lists the job.
		if r := c.call("GET", "/v1/files/"+outputID, apiKey, "", nil); r.StatusCode != 200 {
			t.Errorf("the owner: %d", r.StatusCode)
		}
		for key, want := range map[string]int{apiKey: 1, otherKey: 0} {
			var list struct{ Data []struct{ ID string } }
			if r := c.call("GET", "/v1/jobs", key, "", &list); r.StatusCode != 200 || len(list.Data) != want || want == 1 && list.Data[0].ID != job.ID {
				t.Errorf("GET /v1/jobs: %d %+v, want %d jobs", r.StatusCode, list, want)
			}
		}
	})

	t.Run("a job's callback arrives signed", func(t *testing.T) {
		type delivery struct {
			header http.Header
			body   []byte
		}
		got := make(chan delivery, 1)
		var once sync.Once
		receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			once.Do(func() { got <- delivery{r.Header.Clone(), body} })
		}))
		defer receiver.Close()
		job := `{"model":"sluice-local","messages":[{"role":"user","content":"Write a spring couplet"}],"callback_url":"` + receiver.URL + `/done"}`
		// Callbacks are signed with the organization's webhook secret: none yet.
		var e struct{ Error struct{ Code string } }
		if r := c.call("POST", "/v1/jobs", apiKey, job, &e); r.StatusCode != 400 || e.Error.Code != "no_signing_secret" {
			t.Fatalf("without a webhook: %d %+v", r.StatusCode, e)
		}
		var org struct {
			WebhookSecret string `json:"webhook_secret"`
		}
		if r := c.call("PUT", "/api/organization", session, `{"webhook_url":"`+receiver.URL+`/budget"}`, &org); r.StatusCode != 200 || org.WebhookSecret == "" {
			t.Fatalf("webhook: %d", r.StatusCode)
		}
		// Only hosts the operator allows.
		if r := c.call("POST", "/v1/jobs", apiKey, strings.Replace(job, receiver.URL, "http://example.com", 1), &e); r.StatusCode != 400 ||
			e.Error.Code != "callback_not_allowed" {
			t.Fatalf("another host: %d %+v", r.StatusCode, e)
		}
		var queued struct{ ID string }
		if r := c.call("POST", "/v1/jobs", apiKey, job, &queued); r.StatusCode != 202 {
			t.Fatalf("job: %d", r.StatusCode)
		}
		var d delivery
		select {
		case d = <-got:
		case <-time.After(20 * time.Second):
			t.Fatal("no callback within 20 s")
		}
		ts, err := strconv.ParseInt(d.header.Get("X-Sluice-Webhook-Timestamp"), 10, 64)
		if err != nil || time.Since(time.Unix(ts, 0)) > time.Minute {
			t.Fatalf("timestamp %q", d.header.Get("X-Sluice-Webhook-Timestamp"))
		}
		if sig := d.header.Get("X-Sluice-Webhook-Signature"); sig != webhook.Sign(org.WebhookSecret, time.Unix(ts, 0), d.body) {
			t.Fatalf("signature %q does not verify", sig)
		}
		var body struct {
			ID, Object, Status string
			Result             struct {
				RequestID  string `json:"request_id"`
				StatusCode int    `json:"status_code"`
				Body       openai.ChatCompletion
			}
		}
		if err := json.Unmarshal(d.body, &body); err != nil || body.ID != queued.ID || body.Object != "job" || body.Status != "succeeded" ||
			body.Result.RequestID != queued.ID || body.Result.StatusCode != 200 || len(body.Result.Body.Choices) != 1 {
			t.Fatalf("callback body %s: %v", d.body, err)
		}
		// The job shows its callback delivered.
		var cb struct {
			Callback struct {
				URL, Status string
				Attempts    int
				DeliveredAt *int64 `json:"delivered_at"`
			}
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if r := c.call("GET", "/v1/jobs/"+queued.ID, apiKey, "", &cb); r.StatusCode != 200 {
				t.Fatalf("GET the job: %d", r.StatusCode)
			}
			if cb.Callback.Status == "delivered" || time.Now().After(deadline) {
				break
			}
		}
		if cb.Callback.Status != "delivered" || cb.Callback.URL != receiver.URL+"/done" || cb.Callback.Attempts != 1 || cb.Callback.DeliveredAt == nil {
			t.Fatalf("the job's callback: %+v", cb.Callback)
		}
		if !strings.Contains(out.String(), "SLUICE_WEBHOOK_ALLOW_PRIVATE=true: webhooks and callbacks may reach loopback") {
			t.Fatalf("allowing private addresses is not warned at start:\n%s", out.String())
		}
	})
}

// isStatus says whether err is the SDK's error for an HTTP status.
func isStatus(err error, status int) bool {
	var apiErr *openai.Error
	return errors.As(err, &apiErr) && apiErr.StatusCode == status
}
