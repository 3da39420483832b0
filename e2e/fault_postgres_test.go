package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/faultproxy"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// completions sends chat completions with key from workers goroutines
// until stop is closed, each prompt different (no cache), and keeps the
// request id of every 200 and a line for anything else.
func completions(t *testing.T, base, key string, workers int, stop <-chan struct{}) (done func() (ok []string, failed []string)) {
	var (
		mu         sync.Mutex
		ids, fails []string
		wg         sync.WaitGroup
	)
	tr := &http.Transport{MaxIdleConnsPerHost: workers}
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				body := fmt.Sprintf(`{"model":"sluice-local","messages":[{"role":"user","content":"Write a couplet for gate %d of hall %d"}]}`, i, w)
				req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				resp, err := hc.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				mu.Lock()
				if resp.StatusCode == 200 {
					ids = append(ids, resp.Header.Get("X-Request-Id"))
				} else {
					fails = append(fails, fmt.Sprintf("%s %d %s", time.Now().Format("15:04:05.000"), resp.StatusCode, b))
				}
				mu.Unlock()
			}
		})
	}
	return func() ([]string, []string) {
		wg.Wait()
		tr.CloseIdleConnections()
		mu.Lock()
		defer mu.Unlock()
		return ids, fails
	}
}

// The Postgres faults: one node (Postgres and Redis, as in production)
// under load loses its database for about 3 s, two ways.
//
// While it is down, API calls with a token already in the token cache keep
// succeeding (the request path reads no database: limits and budgets are
// in Redis, usage is queued); sign-in (API and page), sign-up, token
// creation, a signed-in browser's page and a token not cached yet answer
// 503 with Retry-After and the database's message, in the API's shape or
// on the error page, never a 500, a 401 or a redirect to sign in. Once it
// is back, those work again, and every completion the client saw succeed
// has exactly one usage row (request ids compared), billed, and is counted
// once in the rollups: the recorder kept the events and retried.

// TestFaultPostgresCut reaches the shared Postgres through a proxy and cuts
// the proxy: every open connection dropped, every new one hung up on. The
// shared Postgres is never touched; other tests use it.
func TestFaultPostgresCut(t *testing.T) {
	env := clusterEnv(t, needRedis(t))
	direct := env["DATABASE_URL"]
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultproxy.Start(t, u.Host)
	u.Host = proxy.Addr()
	env["DATABASE_URL"] = u.String()
	postgresFault(t, env, direct, "cut", func() { proxy.Set(faultproxy.Refuse) }, func() { proxy.Set(faultproxy.Up) })
}

// TestFaultPostgresRestarted runs the node on a Postgres server of the
// test's own and restarts it: a fast shutdown (every session ended by the
// server), 3 s down, started again.
func TestFaultPostgresRestarted(t *testing.T) {
	env := clusterEnv(t, needRedis(t))
	server := testdb.StartServer(t)
	env["DATABASE_URL"] = server.URL()
	postgresFault(t, env, server.URL(), "restarted", func() { server.Stop(t) }, func() { server.Start(t) })
}

// postgresFault runs the scenario on env, whose database is direct, with
// the database taken down by down and brought back by up; how names the
// fault in messages.
func postgresFault(t *testing.T, env map[string]string, direct, how string, down, up func()) {
	env["SLUICE_DATA_DIR"] = t.TempDir()
	env["SLUICE_TOKEN_CACHE_TTL"] = "1m" // longer than the test: no entry expires while it is down
	base, out, stop := start(t, env)
	c := client{t, base}

	var admin, user struct{ Token string }
	c.call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &admin)
	for path, body := range map[string]string{
		"/api/admin/tiers/free": `{"capacity":10000,"refill_per_sec":10000,"tokens_per_minute":1000000000,"freeze_threshold":0}`,
		// Priced, so that each completion reserves and settles its cost.
		"/api/admin/prices/sluice-local": `{"input_per_mtok":"0.10","output_per_mtok":"0.20","cached_input_per_mtok":"0.05"}`,
	} {
		if r := c.call("PUT", path, admin.Token, body, nil); r.StatusCode != 200 {
			t.Fatalf("PUT %s: %d", path, r.StatusCode)
		}
	}
	if r := c.call("POST", "/api/auth/signup", "", `{"email":"ada@example.com","password":"password123","organization":"A"}`, &user); r.StatusCode != 201 {
		t.Fatalf("signup: %d", r.StatusCode)
	}
	var cached, uncached struct {
		Token string
		ID    int64
	}
	c.call("POST", "/api/tokens", user.Token, `{"name":"cached"}`, &cached)
	c.call("POST", "/api/tokens", user.Token, `{"name":"not used yet"}`, &uncached)
	warm := c.call("POST", "/v1/chat/completions", cached.Token, `{"model":"sluice-local","messages":[{"role":"user","content":"hello"}]}`, nil)
	if warm.StatusCode != 200 {
		t.Fatalf("first completion: %d", warm.StatusCode)
	}

	// A browser signed in before the fault.
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	signedIn, err := noRedirect.PostForm(base+"/login", url.Values{"email": {"ada@example.com"}, "password": {"password123"}})
	if err != nil {
		t.Fatal(err)
	}
	signedIn.Body.Close()
	cookies := signedIn.Cookies()
	if signedIn.StatusCode != http.StatusSeeOther || len(cookies) == 0 {
		t.Fatalf("signing in on the page: %d, cookies %v", signedIn.StatusCode, cookies)
	}

	stopLoad := make(chan struct{})
	loadDone := completions(t, base, cached.Token, 3, stopLoad)
	time.Sleep(time.Second)
	down()
	wentDown := time.Now()

	// unavailable checks one answer given while the database is down.
	retryAfter := strconv.Itoa(int(models.DatabaseRetryAfter / time.Second))
	unavailable := func(what string, r *http.Response, body string) {
		t.Helper()
		if r.StatusCode != 503 || r.Header.Get("Retry-After") != retryAfter ||
			!strings.Contains(body, "the database is unavailable right now; retry shortly") {
			t.Errorf("%s with the database down: %d, Retry-After %q, %s; want 503, Retry-After %s and the database's message",
				what, r.StatusCode, r.Header.Get("Retry-After"), body, retryAfter)
		}
	}
	send := func(method, path, bearer, contentType, body string, cookies ...*http.Cookie) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		for _, ck := range cookies {
			req.AddCookie(ck)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	const apiShape = `{"error":{"code":"database_unavailable","message":"the database is unavailable right now; retry shortly"}}`
	r, body := send("POST", "/api/auth/login", "", "application/json", `{"email":"ada@example.com","password":"password123"}`)
	unavailable("API sign-in", r, body)
	if strings.TrimSpace(body) != apiShape {
		t.Errorf("API sign-in with the database down: %s, want %s", body, apiShape)
	}
	r, body = send("POST", "/api/tokens", user.Token, "application/json", `{"name":"while it is down"}`)
	unavailable("token creation", r, body)
	// The failure is logged once (JSON: a database means production), with
	// its request id and its cause, beside the access log's line.
	rid := r.Header.Get("X-Request-Id")
	var failures []map[string]any
	for line := range strings.Lines(out.String()) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["request_id"] == rid && rec["msg"] != "request" {
			failures = append(failures, rec)
		}
	}
	if len(failures) != 1 || failures[0]["msg"] != "request failed" || failures[0]["code"] != "database_unavailable" ||
		!strings.Contains(fmt.Sprint(failures[0]["err"]), "connect") {
		t.Errorf("token creation with the database down: want one failure line with its code and cause, got %v", failures)
	}
	r, body = send("POST", "/api/auth/signup", "", "application/json", `{"email":"bob@example.com","password":"password123","organization":"B"}`)
	unavailable("API sign-up", r, body)
	r, body = send("POST", "/login", "", "application/x-www-form-urlencoded", "email=ada%40example.com&password=password123")
	unavailable("the sign-in page", r, body)
	if !strings.Contains(r.Header.Get("Content-Type"), "text/html") || !strings.Contains(body, `data-testid="error-page"`) {
		t.Errorf("the sign-in page with the database down is not the error page: %s", body)
	}
	r, body = send("GET", "/tokens", "", "", "", cookies...)
	unavailable("the tokens page of a signed-in browser", r, body) // never sent back to sign in
	if !strings.Contains(body, `data-testid="error-page"`) {
		t.Errorf("the tokens page with the database down is not the error page: %s", body)
	}
	r, body = send("POST", "/v1/chat/completions", uncached.Token, "application/json", `{"model":"sluice-local","messages":[{"role":"user","content":"hi"}]}`)
	unavailable("a token not in the cache", r, body) // never a 401: the key may be good
	if !strings.Contains(body, `"type":"server_error"`) || !strings.Contains(body, `"code":"database_unavailable"`) {
		t.Errorf("the /v1 answer is not in OpenAI's error shape: %s", body)
	}
	time.Sleep(time.Until(wentDown.Add(3 * time.Second)))
	up()
	restored := time.Now()

	// Back: sign-in works again as soon as the pool reconnects.
	var back struct{ Token string }
	for c.call("POST", "/api/auth/login", "", `{"email":"ada@example.com","password":"password123"}`, &back).StatusCode != 200 {
		if time.Since(restored) > 5*time.Second {
			t.Fatal("sign-in still fails 5 s after the database came back")
		}
		time.Sleep(50 * time.Millisecond)
	}
	loginBack := time.Since(restored)
	if r := c.call("POST", "/api/tokens", back.Token, `{"name":"after it came back"}`, nil); r.StatusCode != 201 {
		t.Errorf("token creation after it came back: %d", r.StatusCode)
	}
	if r := c.call("POST", "/v1/chat/completions", uncached.Token, `{"model":"sluice-local","messages":[{"role":"user","content":"hi"}]}`, nil); r.StatusCode != 200 {
		t.Errorf("the uncached token after it came back: %d", r.StatusCode)
	}
	time.Sleep(time.Second)
	close(stopLoad)
	ok, failed := loadDone()
	for _, f := range failed {
		t.Errorf("a cached token's completion failed: %s", f)
	}
	ids := append(ok, warm.Header.Get("X-Request-Id"))

	// Every success has exactly one usage row, and one count in the rollups.
	db, err := models.Open(context.Background(), direct, "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var stored []string
	var rolled int64
	for deadline := time.Now().Add(15 * time.Second); ; {
		stored = nil
		if err := db.Gorm.Raw("SELECT request_id FROM usage_events WHERE token_id = ?", cached.ID).Scan(&stored).Error; err != nil {
			t.Fatal(err)
		}
		if len(stored) >= len(ids) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var billed int64
	if err := db.Gorm.Raw("SELECT COALESCE(SUM(requests), 0) FROM usage_hourly WHERE token_id = ?", cached.ID).Scan(&rolled).Error; err != nil {
		t.Fatal(err)
	}
	if err := db.Gorm.Raw("SELECT COUNT(*) FROM usage_events WHERE token_id = ? AND cost > 0", cached.ID).Scan(&billed).Error; err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	slices.Sort(stored)
	lost, extra := difference(ids, stored), difference(stored, ids)
	retries := strings.Count(out.String(), "storing usage events failed; retrying")
	t.Logf("Postgres %s for %v under load: %d completions succeeded with a cached token (none failed), %d usage rows, %d counted in the rollups; "+
		"the recorder retried %d times; sign-in worked again %v after it came back",
		how, restored.Sub(wentDown).Round(time.Millisecond), len(ids), len(stored), rolled, retries, loginBack.Round(time.Millisecond))
	if len(lost) > 0 || len(extra) > 0 || len(stored) != len(slices.Compact(slices.Clone(stored))) {
		t.Errorf("usage rows: %d lost (%v), %d not seen by the client, %d stored for %d successes", len(lost), lost, len(extra), len(stored), len(ids))
	}
	if billed != int64(len(stored)) {
		t.Errorf("%d of %d usage rows carry a cost", billed, len(stored))
	}
	if rolled != int64(len(ids)) {
		t.Errorf("the hourly rollup counts %d requests for %d successes", rolled, len(ids))
	}
	if retries == 0 {
		t.Error("the recorder never had to retry: the fault did not reach it")
	}
	if lostEvents := metric(t, c, "sluice_recorder_lost_events_total"); lostEvents != 0 {
		t.Errorf("the recorder lost %v events", lostEvents)
	}
	if err := stop(); err != nil {
		t.Errorf("run: %v", err)
	}
}

// difference is what sorted a has that sorted b does not.
func difference(a, b []string) []string {
	var out []string
	for _, s := range a {
		if _, found := slices.BinarySearch(b, s); !found {
			out = append(out, s)
		}
	}
	return out
}
