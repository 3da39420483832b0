package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/testsync"
	"github.com/sluicehq/sluice/upstream/mock"
)

// A thousand jobs on one free-tier token: queued without a single 429,
// worked at the bucket's pace while live requests of the same organization
// pass beside them, with no 429 from the provider, and through a restart
// of the node in the middle nothing is lost or run twice.
func TestAThousandJobsThroughARestart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	const providerKey = "sk-mock-provider"
	// The provider allows 400 requests a second on the key; Sluice paces it.
	// It takes 200 ms to answer, so the 16 workers do at most 80 jobs a
	// second however fast the machine queues them: the backlog lasts over
	// 12 s and outlasts the live traffic below even when a loaded host
	// makes queueing slow (at the bucket's pace alone, 150 a second, a
	// slow queueing phase let the backlog run out before the live traffic
	// was done).
	provider := mock.New(mock.Config{Keys: map[string]float64{providerKey: 400}, Burst: 20, Latency: 200 * time.Millisecond})
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
	// of 30, of which jobs may use 15; and no freezes, since eight clients
	// queueing as fast as the bucket lets them would count as abuse.
	if r := c.call("PUT", "/api/admin/tiers/free", admin.Token, `{"capacity":30,"refill_per_sec":300,"refill_floor":0.3,"tokens_per_minute":0,"autotune":false,"max_queued_jobs":1000,"freeze_threshold":0}`, nil); r.StatusCode != 200 {
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
				for r.StatusCode == 429 { // queueing spends a request; the client waits as told
					wait, _ := strconv.Atoi(r.Header.Get("retry-after-ms"))
					time.Sleep(time.Duration(wait) * time.Millisecond)
					r = c.callWith("POST", path, tok.Token, body, hdr, &j)
				}
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
	// Queueing spent the organization's requests: the live traffic below
	// starts on a full bucket (30 at 300 a second: 100 ms).
	time.Sleep(200 * time.Millisecond)
	// Live traffic of the same organization while the backlog is worked:
	// on the jobs' own token, bursts of 10 (within the half of the burst
	// jobs leave) 100 ms apart; on another token of the organization (the
	// same buckets), that whole half at once. None of it is refused.
	var other struct{ Token string }
	c.call("POST", "/api/tokens", owner.Token, `{"name":"live"}`, &other)
	// Each live prompt distinct (the weights charge repeats extra; digits
	// do not count).
	var liveN atomic.Int64
	liveBody := func() string {
		i := liveN.Add(1)
		return `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"now, please: ` + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + `"}]}`
	}
	var firstRefusal atomic.Value
	firstRefusal.Store("")
	live := func(token string, at int) (refusedLive int64) {
		var bad atomic.Int64
		var wg sync.WaitGroup
		for range at {
			wg.Go(func() {
				req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(liveBody()))
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					bad.Add(1)
					return
				}
				defer resp.Body.Close()
				if resp.StatusCode != 200 {
					if bad.Add(1) == 1 {
						b, _ := io.ReadAll(resp.Body)
						firstRefusal.Store(fmt.Sprintf("%d %s", resp.StatusCode, b))
					}
				}
			})
		}
		wg.Wait()
		return bad.Load()
	}
	var liveRefused, liveSent int64
	for range 10 {
		liveRefused += live(tok.Token, 10)
		liveSent += 10
		time.Sleep(100 * time.Millisecond)
	}
	liveRefused += live(other.Token, 15)
	liveSent += 15
	if done := provider.Stats().Total.OK - (liveSent - liveRefused); liveRefused != 0 || done >= n {
		t.Fatalf("live requests beside the backlog: %d of %d refused (the first: %s); jobs done meanwhile %d of %d (the backlog must outlast them)",
			liveRefused, liveSent, firstRefusal.Load(), done, n)
	}
	// Restart the node while the queue is being worked.
	testsync.WaitFor(t, 30*time.Second, "a third of the jobs done", func() bool { return provider.Stats().Total.OK >= n/3 })
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
	for metered() < n+liveSent {
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
	if m := metered(); m != n+liveSent || st.Status429 != 0 || took < 3200*time.Millisecond {
		t.Fatalf("metered %d of %d jobs and %d live requests; provider 429s %d; took %v", m, n, liveSent, st.Status429, took)
	}
	// The rollups count a request id once whatever happens, so duplicates
	// show at the provider: only the attempts in flight when the node
	// stopped (at most its 16 workers) may be asked again.
	if calls := st.Requests - liveSent; calls < n || calls > n+16 {
		t.Fatalf("the provider was asked %d times for %d jobs; at most %d", calls, n, n+16)
	}
	t.Logf("%d jobs in %v through a restart, %d live requests beside them; provider calls for jobs %d (%d retried after the restart)",
		n, took, liveSent, st.Requests-liveSent, st.Requests-liveSent-n)
}

// callWith is call with X-Sluice-Async: true when async is set.
func (c client) callWith(method, path, bearer, body, async string, into any) *http.Response {
	c.t.Helper()
	if async == "" {
		return c.call(method, path, bearer, body, into)
	}
	return c.callHeaders(method, path, bearer, body, map[string]string{"X-Sluice-Async": "true"}, into)
}
