package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/upstream/mock"
)

// A thousand jobs on one free-tier token: queued without a single 429,
// worked at the bucket's pace (leaving live traffic its half), with no 429
// from the provider, and through a restart of the node in the middle
// nothing is lost or run twice.
func TestAThousandJobsThroughARestart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	const providerKey = "sk-mock-provider"
	// The provider allows 400 requests a second on the key; Sluice paces it.
	provider := mock.New(mock.Config{Keys: map[string]float64{providerKey: 400}, Burst: 20})
	providerSrv := httptest.NewServer(provider)
	t.Cleanup(providerSrv.Close)
	// On Postgres when there is one (CI): River's Postgres driver works in
	// batches; on the embedded SQLite it goes row by row.
	env := map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4", "SLUICE_ADMIN_PASSWORD": "admin-password",
		"SLUICE_JOB_WORKERS": "16"}
	if os.Getenv("TEST_DATABASE_URL") != "" {
		env["DATABASE_URL"], env["SLUICE_AUTO_MIGRATE"], env["SLUICE_MASTER_KEY"] = testdb.PostgresURL(t), "true", testMasterKey
	}
	base, out, stop := start(t, env)
	c := client{t, base}
	var admin, owner struct{ Token string }
	c.call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &admin)
	// The free tier, faster so the test is short: 300 a second with a burst
	// of 30, of which jobs may use 15.
	if r := c.call("PUT", "/api/admin/tiers/free", admin.Token, `{"capacity":30,"refill_per_sec":300,"refill_floor":0.3,"tokens_per_minute":0,"autotune":false}`, nil); r.StatusCode != 200 {
		t.Fatalf("tier: %d", r.StatusCode)
	}
	if r := c.call("POST", "/api/admin/upstreams", admin.Token, `{"name":"mock","base_url":"`+providerSrv.URL+`/v1","api_key":"`+providerKey+
		`","weight":1,"rpm":24000,"models":["gpt-4o-mini"]}`, nil); r.StatusCode != 201 {
		t.Fatalf("provider key: %d", r.StatusCode)
	}
	c.call("POST", "/api/auth/signup", "", `{"email":"batcher@example.com","password":"password123","organization":"Batchers"}`, &owner)
	var tok struct{ Token string }
	c.call("POST", "/api/tokens", owner.Token, `{"name":"jobs"}`, &tok)

	const n = 1000
	ids := make([]string, n)
	var refused atomic.Int64
	var wg sync.WaitGroup
	began := time.Now()
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				var j struct{ ID, Status string }
				body := fmt.Sprintf(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"couplet %d"}]}`, i)
				path, hdr := "/v1/jobs", ""
				if i%2 == 1 { // half of them the other way in
					path, hdr = "/v1/chat/completions", "async"
				}
				r := c.callWith("POST", path, tok.Token, body, hdr, &j)
				if r.StatusCode != 202 || j.Status != "queued" || r.Header.Get("Location") != "/v1/jobs/"+j.ID {
					refused.Add(1)
				}
				ids[i] = j.ID
			}
		}()
	}
	wg.Wait()
	if refused.Load() != 0 {
		t.Fatalf("%d of %d jobs were not queued", refused.Load(), n)
	}
	// Restart the node while the queue is being worked.
	waitFor(t, 30*time.Second, "a third of the jobs done", func() bool { return provider.Stats().Total.OK >= n/3 })
	if err := stop(); err != nil {
		t.Fatalf("stop: %v\n%s", err, out.String())
	}
	first := out
	base, out, stop = start(t, env)
	t.Cleanup(func() { stop() })
	c = client{t, base}
	// Every job metered (once: usage is keyed by the job's id) means every
	// job done.
	metered := func() int64 {
		var usage struct{ Data []struct{ Requests int64 } }
		c.call("GET", "/api/usage/series?granularity=hour", owner.Token, "", &usage)
		var sum int64
		for _, p := range usage.Data {
			sum += p.Requests
		}
		return sum
	}
	deadline := time.Now().Add(90 * time.Second)
	for metered() < n {
		if time.Now().After(deadline) {
			statuses := map[string]int{}
			for _, id := range ids {
				var j struct {
					Status string
					Error  struct{ Code, Message string }
				}
				c.call("GET", "/v1/jobs/"+id, tok.Token, "", &j)
				statuses[j.Status+" "+j.Error.Code+" "+j.Error.Message]++
			}
			var errs []string
			for _, l := range strings.Split(first.String()+out.String(), "\n") {
				if strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") {
					errs = append(errs, l)
				}
			}
			t.Fatalf("after 90 s: %d metered, provider %+v, jobs %v\n%s", metered(), provider.Stats().Total, statuses, strings.Join(errs, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(began)
	var failed int
	for _, id := range ids {
		var j struct {
			Status string
			Result struct{ Choices []struct{} }
			Error  struct{ Code, Message string }
		}
		if r := c.call("GET", "/v1/jobs/"+id, tok.Token, "", &j); r.StatusCode != 200 || j.Status != "succeeded" || len(j.Result.Choices) != 1 {
			t.Errorf("%s: %d %s %+v", id, r.StatusCode, j.Status, j.Error)
			failed++
		}
	}
	if failed > 0 {
		t.Fatalf("%d jobs did not succeed", failed)
	}
	st := provider.Stats().Total
	// (1000 - 15 jobs at once) at 300 a second: at least 3.2 s.
	if m := metered(); m != n || st.Status429 != 0 || took < 3200*time.Millisecond {
		t.Fatalf("metered %d of %d; provider 429s %d; took %v", m, n, st.Status429, took)
	}
	// The rollups count a request id once whatever happens, so duplicates
	// show at the provider: only the attempts in flight when the node
	// stopped (at most its 16 workers) may be asked again.
	if st.Requests < int64(n) || st.Requests > int64(n)+16 {
		t.Fatalf("the provider was asked %d times for %d jobs; at most %d", st.Requests, n, n+16)
	}
	t.Logf("%d jobs in %v through a restart; provider calls %d (%d retried after the restart)", n, took, st.Requests, st.Requests-n)
}

// callWith is call with X-Sluice-Async: true when async is set.
func (c client) callWith(method, path, bearer, body, async string, into any) *http.Response {
	c.t.Helper()
	if async == "" {
		return c.call(method, path, bearer, body, into)
	}
	return c.callHeaders(method, path, bearer, body, map[string]string{"X-Sluice-Async": "true"}, into)
}

// waitFor polls cond until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %v", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
