package e2e

import (
	"bytes"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/testsync"
	"github.com/sluicehq/sluice/upstream/mock"
)

// TestBrowserJobsAndBatches shows a user's jobs and batches on the
// dashboard (a finished batch with failures, one still running, jobs) and
// the admin's queue panel, in a real browser on a desktop and a phone.
func TestBrowserJobsAndBatches(t *testing.T) {
	t.Parallel()
	ctx := browserContext(t)
	const providerKey = "sk-mock-provider"
	providerSrv := httptest.NewServer(refusing(mock.New(mock.Config{Keys: map[string]float64{providerKey: 0}})))
	defer providerSrv.Close()
	base, _, stop := start(t, map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4", "SLUICE_ADMIN_PASSWORD": "admin-password"})
	defer stop()
	c := client{t, base}
	var admin, tok struct{ Token string }
	var owner struct {
		Token        string
		Organization struct{ ID int64 }
	}
	c.call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &admin)
	if r := c.call("POST", "/api/admin/upstreams", admin.Token, `{"name":"mock","base_url":"`+providerSrv.URL+`/v1","api_key":"`+providerKey+
		`","weight":1,"models":["gpt-4o-mini"]}`, nil); r.StatusCode != 201 {
		t.Fatalf("provider key: %d", r.StatusCode)
	}
	c.call("POST", "/api/auth/signup", "", `{"email":"grace@example.com","password":"password123","organization":"春联工坊"}`, &owner)
	c.call("POST", "/api/tokens", owner.Token, `{"name":"batches"}`, &tok)

	request := func(id, prompt string) string {
		return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":%q}]}}`, id, prompt)
	}
	batch := func(token, file string) string {
		t.Helper()
		var b struct{ ID string }
		if r := c.call("POST", "/v1/batches", token, `{"input_file_id":"`+file+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`, &b); r.StatusCode != 200 {
			t.Fatalf("batch: %d", r.StatusCode)
		}
		return b.ID
	}
	// A finished batch with a refused and a malformed line.
	first := uploadFile(t, base, tok.Token, strings.Join([]string{request("spring", "spring"), request("river", "river"),
		request("policy", "refuse me"), `{"custom_id":"broken"}`}, "\n"))
	var lines []string
	for i := range 12 {
		lines = append(lines, request(fmt.Sprintf("line-%02d", i), fmt.Sprintf("couplet %d", i)))
	}
	finished := batch(tok.Token, first)
	testsync.WaitFor(t, 20*time.Second, "the first batch done", func() bool {
		var b struct{ Status string }
		c.call("GET", "/v1/batches/"+finished, tok.Token, "", &b)
		return b.Status == "completed"
	})
	// Jobs: two answered, one the provider refuses.
	var jobIDs []string
	for _, prompt := range []string{"couplet one", "couplet two", "refuse me"} {
		var j struct{ ID string }
		c.call("POST", "/v1/jobs", tok.Token, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"`+prompt+`"}]}`, &j)
		jobIDs = append(jobIDs, j.ID)
	}
	testsync.WaitFor(t, 20*time.Second, "the jobs done", func() bool {
		for _, id := range jobIDs {
			var j struct{ Status string }
			if c.call("GET", "/v1/jobs/"+id, tok.Token, "", &j); j.Status != "succeeded" && j.Status != "failed" {
				return false
			}
		}
		return true
	})
	// A slow tier, so the second batch is still running when we look: the
	// organization's bucket holds 10 and refills one in 50 s; its upload
	// and creation spend 2, and queued work may use the half above 5, so a
	// line or two run and the rest wait.
	if r := c.call("PUT", "/api/admin/tiers/free", admin.Token, `{"capacity":10,"refill_per_sec":0.02,"refill_floor":0.02,"autotune":false}`, nil); r.StatusCode != 200 {
		t.Fatalf("tier: %d", r.StatusCode)
	}
	var slow struct{ Token string }
	c.call("POST", "/api/tokens", owner.Token, `{"name":"slow"}`, &slow)
	running := batch(slow.Token, uploadFile(t, base, slow.Token, strings.Join(lines, "\n")))
	testsync.WaitFor(t, 20*time.Second, "a line of the second batch done", func() bool {
		var b struct {
			RequestCounts struct{ Completed int } `json:"request_counts"`
		}
		c.call("GET", "/v1/batches/"+running, slow.Token, "", &b)
		return b.RequestCounts.Completed >= 1
	})

	err := chromedp.Do(ctx,
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(base+"/login"),
		chromedp.SendKeys(chromedp.CSS(`input[name=email]`), "grace@example.com"),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "password123"),
		chromedp.Submit(chromedp.CSS(`[data-testid=login-form]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=dashboard]`)),
		chromedp.Navigate(base+"/dashboard#jobs"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=batch-list]`)),
	)
	if err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	for _, size := range []struct {
		name          string
		width, height int64
	}{{"desktop", 1280, 900}, {"phone", 390, 844}} {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(size.width, size.height), chromedp.Reload(),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=jobs]`)), chromedp.ScrollIntoView(chromedp.CSS(`[data-testid=jobs]`))); err != nil {
			t.Fatal(err)
		}
		counts := text(t, ctx, `[data-batch-id=`+finished+`] [data-testid=batch-counts]`)
		if got := strings.Join(strings.Fields(counts), " "); got != "4 of 4 done (100%): 2 answered, 2 failed" {
			t.Errorf("%s: finished batch %q", size.name, got)
		}
		if status := strings.ToLower(text(t, ctx, `[data-batch-id=`+running+`] [data-testid=batch-status]`)); status != "in progress" {
			t.Errorf("%s: running batch %q", size.name, status)
		}
		if counts := text(t, ctx, `[data-testid=job-counts]`); !strings.Contains(counts, "2 succeeded, 1 failed") {
			t.Errorf("%s: job counts %q", size.name, counts)
		}
		screenshot(t, ctx, size.name+"-jobs")
		fitsWidth(t, ctx, size.width, "the dashboard with jobs and batches")
		if dir := os.Getenv("SLUICE_SCREENSHOT_DIR"); dir != "" {
			png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(`[data-testid=jobs]`)))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, size.name+"-jobs-section.png"), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}

	err = chromedp.Do(ctx,
		chromedp.EmulateViewport(1280, 900),
		chromedp.Submit(chromedp.CSS(`[data-testid=logout]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=login-form]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=email]`), "admin@localhost"),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "admin-password"),
		chromedp.Submit(chromedp.CSS(`[data-testid=login-form]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=dashboard]`)),
		chromedp.Navigate(base+"/admin/organizations"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=queue-panel]`)),
	)
	if err != nil {
		t.Fatalf("admin: %v", err)
	}
	if waiting := text(t, ctx, `[data-testid=queue-waiting]`); !strings.HasSuffix(waiting, "jobs") && !strings.HasSuffix(waiting, "job") {
		t.Errorf("queue waiting %q", waiting)
	}
	screenshot(t, ctx, "admin-queue")
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844), chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`[data-testid=queue-panel]`))); err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "phone-admin-queue")
	fitsWidth(t, ctx, 390, "the admin overview with the queue panel")

	// The organization's page: its 30 days of requests and cost, drawn
	// in the dashboard's day buckets.
	orgPage := base + "/admin/organizations/" + strconv.FormatInt(owner.Organization.ID, 10)
	for _, size := range []struct {
		name          string
		width, height int64
	}{{"desktop", 1280, 900}, {"phone", 390, 844}} {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(size.width, size.height), chromedp.Navigate(orgPage),
			chromedp.WaitVisible(chromedp.CSS(`#org-requests`))); err != nil {
			t.Fatalf("%s: the organization's page: %v", size.name, err)
		}
		if title := text(t, ctx, `#org-requests figcaption`); !strings.Contains(title, "Requests per day") {
			t.Errorf("%s: requests chart titled %q", size.name, title)
		}
		days, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#org-requests tbody tr').length`))
		if err != nil || days != 30 {
			t.Errorf("%s: the requests chart's table has %d days (%v), want 30", size.name, days, err)
		}
		screenshot(t, ctx, size.name+"-admin-organization")
		fitsWidth(t, ctx, size.width, "the admin organization page")
	}
}

// uploadFile uploads content as a batch input file and returns its id.
func uploadFile(t *testing.T, base, token, content string) string {
	t.Helper()
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	w.WriteField("purpose", "batch")
	fw, _ := w.CreateFormFile("file", "input.jsonl")
	fw.Write([]byte(content))
	w.Close()
	var f struct{ ID string }
	r := client{t, base}.callHeaders("POST", "/v1/files", token, body.String(), map[string]string{"Content-Type": w.FormDataContentType()}, &f)
	if r.StatusCode != http.StatusOK || f.ID == "" {
		t.Fatalf("upload: %d", r.StatusCode)
	}
	return f.ID
}
