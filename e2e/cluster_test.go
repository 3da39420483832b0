package e2e

import (
	"crypto/rand"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/testsync"
)

// clusterEnv is the environment of N nodes sharing one Postgres schema and,
// unless redisURL is empty, one Redis namespace.
func clusterEnv(t *testing.T, redisURL string) map[string]string {
	env := map[string]string{
		"DATABASE_URL": testdb.PostgresURL(t), "SLUICE_AUTO_MIGRATE": "true", "SLUICE_BCRYPT_COST": "4", "SLUICE_MASTER_KEY": testMasterKey,
		"SLUICE_ADMIN_PASSWORD": "admin-password", "SLUICE_SESSION_SECRET": strings.Repeat("s", 32),
		"SLUICE_REDIS_PREFIX": "t" + rand.Text() + ":",
		// Generous: under -race on two cores a shared call can be slow, and
		// a node that fell back to local limits would spoil the measurement.
		"SLUICE_REDIS_TIMEOUT": "2s", "SLUICE_LIMITER_TIMEOUT": "2s", "SLUICE_EXPECTED_NODES": "3",
	}
	if redisURL != "" {
		env["REDIS_URL"] = redisURL
	}
	return env
}

func needRedis(t *testing.T) string {
	url := os.Getenv("TEST_REDIS_URL")
	if url == "" {
		t.Skip("TEST_REDIS_URL is not set: skipping the multi-node tests (CI sets it)")
	}
	return url
}

// startNodes starts n gateways on env; the first one migrates.
func startNodes(t *testing.T, n int, env map[string]string) []client {
	var nodes []client
	for i := range n {
		e := map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_NODE_ID": "node" + strconv.Itoa(i)}
		for k, v := range env {
			e[k] = v
		}
		base, _, stop := start(t, e)
		t.Cleanup(func() { stop() })
		nodes = append(nodes, client{t, base})
	}
	return nodes
}

// within polls cond until it holds or a second has passed.
func within(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testsync.WaitFor(t, time.Second, what, cond)
}

// limitEverywhere polls until every node answers key with the limit of
// the tier just edited: the edit has reached them all. Each look spends a
// request of key's bucket; bucketFull waits for it to come back.
func limitEverywhere(t *testing.T, nodes []client, key string, limit int, within time.Duration) {
	t.Helper()
	want := strconv.Itoa(limit)
	testsync.WaitFor(t, within, "the tier edit reaching every node", func() bool {
		for _, n := range nodes {
			if n.call("GET", "/v1/models", key, "", nil).Header.Get("x-ratelimit-limit-requests") != want {
				return false
			}
		}
		return true
	})
}

// bucketFull polls until a request through each of nodes finds key's
// bucket of burst full (it leaves burst-1), so that a measurement starts
// from the bucket the bound assumes without waiting longer than the
// refill takes. With Redis one node stands for all: the bucket is shared.
func bucketFull(t *testing.T, nodes []client, key string, burst int) {
	t.Helper()
	testsync.WaitFor(t, 5*time.Second, "the bucket refilling", func() bool {
		for _, n := range nodes {
			left, _ := strconv.Atoi(n.call("GET", "/v1/models", key, "", nil).Header.Get("x-ratelimit-remaining-requests"))
			if left < burst-1 {
				return false
			}
		}
		return true
	})
}

func TestNodesShareLimitsAndChanges(t *testing.T) {
	nodes := startNodes(t, 2, clusterEnv(t, needRedis(t)))
	a, b := nodes[0], nodes[1]
	var signup struct{ Token string }
	a.call("POST", "/api/auth/signup", "", `{"email":"ada@example.com","password":"password123","organization":"A"}`, &signup)
	var tok, other struct{ Token string }
	a.call("POST", "/api/tokens", signup.Token, `{"name":"shared"}`, &tok)
	a.call("POST", "/api/tokens", signup.Token, `{"name":"another"}`, &other)

	// One bucket for both nodes and both of the organization's tokens: 30
	// admitted in all, alternating nodes and tokens.
	admitted := 0
	for i := range 40 {
		key := tok.Token
		if i%4 >= 2 {
			key = other.Token
		}
		if r := nodes[i%2].call("GET", "/v1/models", key, "", nil); r.StatusCode == 200 {
			admitted++
		}
	}
	if admitted < 30 || admitted > 31 {
		t.Fatalf("two nodes and two tokens admitted %d, want the organization's one burst of 30", admitted)
	}

	// A tier edit on A reaches B within a second.
	var admin struct{ Token string }
	a.call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &admin)
	if r := a.call("PUT", "/api/admin/tiers/free", admin.Token, `{"capacity":77}`, nil); r.StatusCode != 200 {
		t.Fatalf("tier edit: %d", r.StatusCode)
	}
	within(t, "a tier edit reaching the other node", func() bool {
		return b.call("GET", "/v1/models", tok.Token, "", nil).Header.Get("x-ratelimit-limit-requests") == "77"
	})

	// A revocation on A reaches B within a second.
	var second struct {
		Token string
		ID    int64
	}
	a.call("POST", "/api/tokens", signup.Token, `{"name":"doomed"}`, &second)
	if r := b.call("GET", "/v1/models", second.Token, "", nil); r.StatusCode != 200 {
		t.Fatalf("fresh token on B: %d", r.StatusCode) // now cached on B
	}
	a.call("DELETE", fmt.Sprintf("/api/tokens/%d", second.ID), signup.Token, "", nil)
	within(t, "a revocation reaching the other node", func() bool {
		return b.call("GET", "/v1/models", second.Token, "", nil).StatusCode == 401
	})

	// A freeze decided on either node is honoured by both.
	if r := a.call("PUT", "/api/admin/tiers/free", admin.Token, `{"capacity":5,"refill_per_sec":0.01,"refill_floor":0.01,"freeze_threshold":6}`, nil); r.StatusCode != 200 {
		t.Fatalf("tier edit: %d", r.StatusCode)
	}
	var third struct{ Token string }
	a.call("POST", "/api/tokens", signup.Token, `{"name":"abusive"}`, &third)
	var last *http.Response
	for i := range 11 { // 5 admitted, then rejections 1..6 spread over both nodes
		last = nodes[i%2].call("GET", "/v1/models", third.Token, "", nil)
	}
	if last.StatusCode != 429 || last.Header.Get("Retry-After") == "" {
		t.Fatalf("after 6 rejections: %d", last.StatusCode)
	}
	for _, n := range nodes {
		var body struct {
			Error struct{ Code string }
		}
		within(t, "the freeze reaching every node", func() bool {
			n.call("GET", "/v1/models", third.Token, "", &body)
			return body.Error.Code == "token_frozen"
		})
	}
}

// TestNodesShareTheSignupThrottle: two gateways on one Redis give a client
// address 5 signups an hour in all (SLUICE_SIGNUP_RATE's default), not 5
// on each node.
func TestNodesShareTheSignupThrottle(t *testing.T) {
	nodes := startNodes(t, 2, clusterEnv(t, needRedis(t)))
	accepted := 0
	for i := range 10 {
		var body struct {
			Error struct{ Code, Message string }
		}
		r := nodes[i%2].call("POST", "/api/auth/signup", "", fmt.Sprintf(`{"email":"s%d@example.com","password":"password123","organization":"S"}`, i), &body)
		switch {
		case r.StatusCode == 201:
			accepted++
		case r.StatusCode != 429 || body.Error.Code != "signup_throttled" || r.Header.Get("Retry-After") == "" ||
			!strings.HasPrefix(body.Error.Message, "too many signups from your address (5 an hour); try again in "):
			t.Fatalf("signup %d on node %d: %d %+v", i+1, i%2, r.StatusCode, body.Error)
		}
	}
	if accepted != 5 {
		t.Fatalf("two nodes accepted %d signups from one address, want 5 in all", accepted)
	}
}

// offer sends GET /v1/models with key at rate per second for d, spread over
// nodes round robin, open loop, and returns how many were admitted and how
// long the offered window really lasted.
func offer(t *testing.T, nodes []client, key string, rate float64, d time.Duration) (admitted int64, window time.Duration) {
	o := offerCounting(t, nodes, key, rate, d)
	return o.admitted, o.window
}

// offered is what offerCounting saw.
type offered struct {
	admitted, serverErrors int64
	// window runs from the first send to the last answer. firstAnswer is
	// when the first answer came back and lastSent when the last request
	// went out: the limiter's first and last decisions fall between
	// start and firstAnswer, and between lastSent and window.
	window, firstAnswer, lastSent time.Duration
}

// offerCounting is offer, also counting 5xx answers.
func offerCounting(t *testing.T, nodes []client, key string, rate float64, d time.Duration) offered {
	return offerPicking(t, func(i int, _ time.Duration) string { return nodes[i%len(nodes)].base }, key, rate, d)
}

// offerPicking is offerCounting with the node of each request chosen by
// pick, from its number and the time it is sent at (after the start).
func offerPicking(t *testing.T, pick func(i int, at time.Duration) string, key string, rate float64, d time.Duration) offered {
	total := int(rate * d.Seconds())
	var next, ok, failed atomic.Int64
	var firstAnswer, lastSent atomic.Int64
	firstAnswer.Store(math.MaxInt64)
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	defer tr.CloseIdleConnections()
	start := time.Now()
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= total {
					return
				}
				at := time.Duration(float64(i) / rate * float64(time.Second))
				// Pacing: request i goes out at i/rate, open loop. The
				// offered rate is the scenario, not a wait for anything.
				time.Sleep(time.Until(start.Add(at)))
				req, _ := http.NewRequest("GET", pick(i, at)+"/v1/models", nil)
				req.Header.Set("Authorization", "Bearer "+key)
				storeMax(&lastSent, int64(time.Since(start)))
				resp, err := hc.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				storeMin(&firstAnswer, int64(time.Since(start)))
				switch {
				case resp.StatusCode == 200:
					ok.Add(1)
				case resp.StatusCode >= 500:
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return offered{admitted: ok.Load(), serverErrors: failed.Load(), window: time.Since(start),
		firstAnswer: time.Duration(firstAnswer.Load()), lastSent: time.Duration(lastSent.Load())}
}

func storeMax(v *atomic.Int64, n int64) {
	for old := v.Load(); n > old && !v.CompareAndSwap(old, n); old = v.Load() {
	}
}

func storeMin(v *atomic.Int64, n int64) {
	for old := v.Load(); n < old && !v.CompareAndSwap(old, n); old = v.Load() {
	}
}

// TestAccuracyAcrossNodes offers one token 10x its rate through three nodes.
// With Redis the nodes admit burst + rate x T within max(1, 0.5%); without
// it each node keeps its own bucket, which is the N-fold over-admission the
// README states. SLUICE_ACCURACY_SECONDS lengthens the run (the figures in
// docs/BENCHMARKS.md use 10) and SLUICE_ACCURACY_FACTORS adds offered
// multiples (e.g. "10,30").
func TestAccuracyAcrossNodes(t *testing.T) {
	redisURL := needRedis(t)
	seconds := 2.0
	if s, err := strconv.ParseFloat(os.Getenv("SLUICE_ACCURACY_SECONDS"), 64); err == nil && s > 0 {
		seconds = s
	}
	factors := []float64{10}
	if f := os.Getenv("SLUICE_ACCURACY_FACTORS"); f != "" {
		factors = nil
		for _, s := range strings.Split(f, ",") {
			n, _ := strconv.ParseFloat(s, 64)
			factors = append(factors, n)
		}
	}
	const rate, burst = 100.0, 100.0
	for _, mode := range []string{"redis", "in-process"} {
		t.Run(mode, func(t *testing.T) {
			env := clusterEnv(t, redisURL)
			if mode == "in-process" {
				// No bus: nodes learn of the tier edit by reloading.
				delete(env, "REDIS_URL")
				env["SLUICE_TOKEN_CACHE_TTL"] = "1s"
			}
			nodes := startNodes(t, 3, env)
			var admin, user struct{ Token string }
			nodes[0].call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &admin)
			if r := nodes[0].call("PUT", "/api/admin/tiers/free", admin.Token, `{"capacity":100,"refill_per_sec":100,"freeze_threshold":0}`, nil); r.StatusCode != 200 {
				t.Fatalf("tier: %d", r.StatusCode)
			}
			nodes[0].call("POST", "/api/auth/signup", "", `{"email":"load@example.com","password":"password123","organization":"Load"}`, &user)
			for _, factor := range factors {
				var tok struct{ Token string }
				nodes[0].call("POST", "/api/tokens", user.Token, `{"name":"load"}`, &tok)
				// Every node must know the new tier before the clock starts:
				// at once over the bus, within two reloads without one.
				if mode == "redis" {
					limitEverywhere(t, nodes, tok.Token, 100, 0) // one look
					bucketFull(t, nodes[:1], tok.Token, burst)
				} else {
					// Not polled: a look spends the token's bucket, and
					// before its reload a node spends it on the old tier
					// (a smaller bucket, rejections towards a freeze), which
					// spoils the measurement (tried: 298 admitted, not ~3x). Two reloads of the 1 s cache
					// are the wait; then one look at each node, and a
					// second for each node's own bucket to refill in real
					// time what the looks spent.
					time.Sleep(2500 * time.Millisecond)
					limitEverywhere(t, nodes, tok.Token, 100, 0)
					time.Sleep(time.Second) // refill what those checks spent
				}
				admitted, window := offer(t, nodes, tok.Token, rate*factor, time.Duration(seconds*float64(time.Second)))
				ideal := burst + rate*window.Seconds()
				errPct := 100 * (float64(admitted) - ideal) / ideal
				t.Logf("accuracy %s: offered %gx (%g/s) for %.2fs over 3 nodes: admitted %d, ideal %.0f, error %+.2f%%",
					mode, factor, rate*factor, window.Seconds(), admitted, ideal, errPct)
				var state struct{ Mode string }
				nodes[0].call("GET", "/api/admin/limiter", admin.Token, "", &state)
				switch mode {
				case "redis":
					if state.Mode != "shared" {
						t.Fatalf("the limiter is %q, not shared, after the run", state.Mode)
					}
					// Never more than the limit allows: that is the property.
					// Fewer is only a failure if the generator really kept the
					// bucket empty; on a loaded machine (-race, two cores) it
					// falls behind, leaves the bucket full at times and tokens
					// go unused, so the lower bound loosens with the lag.
					tol := max(1, 0.005*ideal)
					// The window runs to the last response, a little past the
					// last send; allow that tail (50 ms at 100/s) below.
					lower := ideal - tol - rate*0.05
					if planned := seconds; window.Seconds() > 1.1*planned {
						lower = 0.9 * ideal
						t.Logf("the load generator fell behind (%.2fs for %.2fs of load); lower bound %.0f", window.Seconds(), planned, lower)
					}
					if float64(admitted) > ideal+tol || float64(admitted) < lower {
						t.Errorf("shared limits admitted %d, want at most %.0f + %.1f and at least %.0f", admitted, ideal, tol, lower)
					}
				default:
					if float64(admitted) < 2*ideal {
						t.Errorf("in-process limits on 3 nodes admitted %d; expected about 3x %.0f", admitted, ideal)
					}
				}
			}
		})
	}
}
