package e2e

import (
	"bufio"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testredis"
)

// metric reads one unlabelled sample from a node's /metrics, 0 if absent.
func metric(t *testing.T, c client, name string) float64 {
	t.Helper()
	resp, err := http.Get(c.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %q", name, v)
			}
			return f
		}
	}
	return 0
}

// sumMetric adds a metric over the nodes.
func sumMetric(t *testing.T, nodes []client, name string) float64 {
	var sum float64
	for _, n := range nodes {
		sum += metric(t, n, name)
	}
	return sum
}

// loadToken makes the free tier a bucket of 100 at 100/s (like a premium
// token's, with round numbers) and returns an admin session and a token on
// it, through node c.
func loadToken(t *testing.T, c client) (admin, token string) {
	var a, user, tok struct{ Token string }
	c.call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &a)
	if r := c.call("PUT", "/api/admin/tiers/free", a.Token, `{"capacity":100,"refill_per_sec":100,"freeze_threshold":0}`, nil); r.StatusCode != 200 {
		t.Fatalf("tier: %d", r.StatusCode)
	}
	c.call("POST", "/api/auth/signup", "", `{"email":"load@example.com","password":"password123","organization":"Load"}`, &user)
	c.call("POST", "/api/tokens", user.Token, `{"name":"load"}`, &tok)
	return a.Token, tok.Token
}

// envRates reads a comma-separated list of rates, or def.
func envRates(name string, def ...float64) []float64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []float64
	for _, s := range strings.Split(v, ",") {
		if f, err := strconv.ParseFloat(s, 64); err == nil && f > 0 {
			out = append(out, f)
		}
	}
	return out
}

// TestColdStartAccuracy starts three fresh nodes with the default limiter
// settings and at once offers one token (100/s, burst 100) 1k/s and 3k/s
// round robin: admitted within max(1, 0.1%) of burst + rate x elapsed, and
// no admission decided locally (where the host can send half the load). The tier and token are made on a fourth
// node first, so the three start with cold pools and serve nothing before
// the load. Every run checks 2 s at 1,000/s; SLUICE_ONSET_SECONDS=10 and
// SLUICE_ONSET_RATES=1000,3000 give the figures in docs/BENCHMARKS.md.
func TestColdStartAccuracy(t *testing.T) {
	redisURL := needRedis(t)
	seconds, _ := strconv.ParseFloat(os.Getenv("SLUICE_ONSET_SECONDS"), 64)
	if seconds <= 0 {
		seconds = 2
	}
	const rate, burst = 100.0, 100.0
	for _, offered := range envRates("SLUICE_ONSET_RATES", 1000) {
		t.Run(strconv.Itoa(int(offered)), func(t *testing.T) {
			env := clusterEnv(t, redisURL)
			delete(env, "SLUICE_REDIS_TIMEOUT") // the defaults
			delete(env, "SLUICE_LIMITER_TIMEOUT")
			_, token := loadToken(t, startNodes(t, 1, env)[0])
			nodes := startNodes(t, 3, env)
			o := offerCounting(t, nodes, token, offered, time.Duration(seconds*float64(time.Second)))
			ideal := burst + rate*o.window.Seconds()
			fallbacks := sumMetric(t, nodes, "sluice_limiter_local_fallbacks_total")
			failures := sumMetric(t, nodes, "sluice_limiter_shared_failures_total")
			t.Logf("cold start, %g/s offered for %.2fs (%.0f/s sent): admitted %d, ideal %.0f, error %+.2f%%, local fallbacks %.0f, failed shared calls %.0f",
				offered, window(o), offered*seconds/o.window.Seconds(), o.admitted, ideal, 100*(float64(o.admitted)-ideal)/ideal, fallbacks, failures)
			if tol := max(1, 0.001*ideal); float64(o.admitted) > ideal+tol {
				t.Errorf("admitted %d, more than %.0f + %.1f", o.admitted, ideal, tol)
			}
			if o.serverErrors != 0 {
				t.Errorf("%d server errors; want none", o.serverErrors)
			}
			// A cold pool must not fail its first calls: no admission is
			// decided locally. Only a host that cannot send half the load
			// (CI's, under -race beside other packages) may see a shared
			// call run out its 500 ms budget; there a fallback is allowed
			// for each failed call counted, up to 1% of what was sent,
			// and the upper bound above still holds.
			allowed := 0.0
			if sent := offered * seconds / o.window.Seconds(); sent < offered/2 {
				allowed = min(failures, 0.01*offered*seconds)
			}
			if fallbacks > allowed {
				t.Errorf("%.0f admissions decided locally (%.0f shared calls failed); want at most %.0f", fallbacks, failures, allowed)
			}
		})
	}
}

func window(o offered) float64 { return o.window.Seconds() }

// TestClusterRedisStall freezes the nodes' Redis (a redis-server of the
// test's own, SIGSTOP) for 2s under load through three nodes, one token at
// 100/s with a burst of 100: no 5xx, every node on local limits during the
// stall and back on Redis within 2s of its return, and the over-admission
// within the README's bound. 300 req/s offered in CI; SLUICE_STALL_RATES
// (e.g. 1000) for the figures in docs/BENCHMARKS.md.
func TestClusterRedisStall(t *testing.T) {
	needRedis(t)
	const rate, burst, nodesN = 100.0, 100.0, 3
	for _, load := range envRates("SLUICE_STALL_RATES", 300) {
		t.Run(strconv.Itoa(int(load)), func(t *testing.T) {
			srv := testredis.Start(t)
			env := clusterEnv(t, srv.URL())
			delete(env, "SLUICE_REDIS_TIMEOUT") // the defaults
			delete(env, "SLUICE_LIMITER_TIMEOUT")
			nodes := startNodes(t, nodesN, env)
			admin, token := loadToken(t, nodes[0])
			limitEverywhere(t, nodes, token, 100, 2*time.Second)
			bucketFull(t, nodes[:1], token, burst)

			// Watch each node's limiter mode.
			type seen struct {
				degraded bool
				episodes int       // switches to local limits seen
				back     time.Time // first time shared again after the stall
			}
			var mu sync.Mutex
			var cont time.Time
			modes := make([]seen, nodesN)
			stop := make(chan struct{})
			var watchers sync.WaitGroup
			for i, n := range nodes {
				watchers.Go(func() {
					for {
						select {
						case <-stop:
							return
						case <-time.After(20 * time.Millisecond):
						}
						var st struct{ Mode string }
						n.call("GET", "/api/admin/limiter", admin, "", &st)
						mu.Lock()
						switch {
						case st.Mode == "degraded":
							if !modes[i].degraded || !modes[i].back.IsZero() {
								modes[i].episodes++
							}
							modes[i].degraded = true
						case st.Mode == "shared" && modes[i].degraded && !cont.IsZero() && modes[i].back.IsZero():
							modes[i].back = time.Now()
						}
						mu.Unlock()
					}
				})
			}

			done := make(chan offered)
			go func() { done <- offerCounting(t, nodes, token, load, 6*time.Second) }()
			// The scenario's timeline, not waits for anything: a second
			// of load on shared limits, then a stall of 2 s.
			time.Sleep(time.Second)
			srv.Stop(t)
			time.Sleep(2 * time.Second)
			srv.Cont(t)
			mu.Lock()
			cont = time.Now()
			mu.Unlock()
			o := <-done
			close(stop)
			watchers.Wait()

			ideal := burst + rate*o.window.Seconds()
			fallbacks := sumMetric(t, nodes, "sluice_limiter_local_fallbacks_total")
			charged := sumMetric(t, nodes, "sluice_limiter_reconciled_tokens_total")
			// README: N*ceil(C/N) - C for the shares' rounding, and about one
			// request per other node admitted after a node's last answer, at
			// the switch and again at the return; per switch, should a node
			// on a loaded machine (CI, -race) switch again on its own.
			// The node's own count of its switches: a switch back and
			// forth between two polls of the watchers is not seen by them.
			episodes := 1
			for i, m := range modes {
				episodes = max(episodes, m.episodes, int(metric(t, nodes[i], "sluice_limiter_outages_total")))
			}
			bound := float64(episodes * (nodesN*((int(burst)+nodesN-1)/nodesN) - int(burst) + 2*(nodesN-1)))
			t.Logf("stall under %g/s for %.2fs: admitted %d, burst + rate x elapsed %.0f (%+.0f, bound +%.0f for %d switch(es)); %d server errors, %.0f local fallbacks, %.0f tokens charged back",
				load, o.window.Seconds(), o.admitted, ideal, float64(o.admitted)-ideal, bound, episodes, o.serverErrors, fallbacks, charged)
			if o.serverErrors != 0 {
				t.Errorf("%d server errors during the stall, want none", o.serverErrors)
			}
			for i, m := range modes {
				switch {
				case !m.degraded:
					t.Errorf("node %d never switched to local limits", i)
				case m.back.IsZero():
					t.Errorf("node %d was not back on shared limits when the load ended", i)
				case m.back.Sub(cont) > 2*time.Second:
					t.Errorf("node %d was back on shared limits %v after Redis, want within 2s", i, m.back.Sub(cont))
				default:
					t.Logf("node %d back on shared limits %v after Redis", i, m.back.Sub(cont).Round(time.Millisecond))
				}
			}
			if float64(o.admitted) > ideal+bound {
				t.Errorf("admitted %d, above burst + rate x elapsed %.0f by more than the bound %.0f", o.admitted, ideal, bound)
			}
		})
	}
}
