package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/internal/testredis"
	"github.com/sluicehq/sluice/internal/testsync"
)

// answer is one response of a recorded load: when it was sent and when it
// arrived, from which node, and what the limiter said.
type answer struct {
	sent, at         time.Time
	node, status     int
	limit, remaining int // x-ratelimit-{limit,remaining}-requests
}

// offerRecording is offerCounting that keeps every answer: GET /v1/models
// with key at rate per second for d, round robin over nodes, open loop.
func offerRecording(t *testing.T, nodes []client, key string, rate float64, d time.Duration) (answers []answer, window time.Duration) {
	total := int(rate * d.Seconds())
	answers = make([]answer, total)
	var next atomic.Int64
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	defer tr.CloseIdleConnections()
	start := time.Now()
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= total {
					return
				}
				// Pacing: request i goes out at i/rate, open loop; the
				// offered rate is the scenario, not a wait for anything.
				time.Sleep(time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
				req, _ := http.NewRequest("GET", nodes[i%len(nodes)].base+"/v1/models", nil)
				req.Header.Set("Authorization", "Bearer "+key)
				sent := time.Now()
				resp, err := hc.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				limit, _ := strconv.Atoi(resp.Header.Get("x-ratelimit-limit-requests"))
				remaining, _ := strconv.Atoi(resp.Header.Get("x-ratelimit-remaining-requests"))
				answers[i] = answer{sent: sent, at: time.Now(), node: i % len(nodes), status: resp.StatusCode, limit: limit, remaining: remaining}
			}
		})
	}
	wg.Wait()
	return answers, time.Since(start)
}

// chatTraffic sends chat completions with key round robin over nodes every
// interval until stop is closed: at temperature 0 (through the response
// cache) and, every third, in a conversation (X-Sluice-Session). done
// waits for it to stop and says how many it sent, how many conversations
// were refused with the store's explicit 503 (its code and message), and
// what else went wrong: any other 5xx.
func chatTraffic(t *testing.T, nodes []client, key string, every time.Duration, stop <-chan struct{}) (done func() (sent, refused int, problems []string)) {
	var (
		mu            sync.Mutex
		problems      []string
		sent, refused int
	)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(every):
			}
			headers := map[string]string{}
			body := fmt.Sprintf(`{"model":"sluice-local","temperature":0,"messages":[{"role":"user","content":"Write a couplet about river %d"}]}`, i%5)
			if i%3 == 0 {
				headers["X-Sluice-Session"] = "fault-" + strconv.Itoa(i%2)
			}
			req, _ := http.NewRequest("POST", nodes[i%len(nodes)].base+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			for k, v := range headers {
				req.Header.Set(k, v)
			}
			r, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			var e struct {
				Error struct{ Code, Message string }
			}
			_ = json.NewDecoder(r.Body).Decode(&e)
			r.Body.Close()
			mu.Lock()
			sent++
			switch {
			case r.StatusCode < 500:
			case r.StatusCode == 503 && headers["X-Sluice-Session"] != "" && e.Error.Code == "session_store_unavailable" &&
				strings.Contains(e.Error.Message, "session store is unavailable"):
				refused++
			default:
				problems = append(problems, fmt.Sprintf("%d %s: %s", r.StatusCode, e.Error.Code, e.Error.Message))
			}
			mu.Unlock()
		}
	}()
	return func() (int, int, []string) {
		<-finished
		mu.Lock()
		defer mu.Unlock()
		return sent, refused, problems
	}
}

// limiterModes reads every node's limiter mode.
func limiterModes(t *testing.T, nodes []client, admin string) []string {
	modes := make([]string, len(nodes))
	for i, n := range nodes {
		var st struct{ Mode string }
		n.call("GET", "/api/admin/limiter", admin, "", &st)
		modes[i] = st.Mode
	}
	return modes
}

// TestFaultRedisKilled kills the nodes' Redis (a redis-server of the
// test's own, SIGKILL: never the shared one) under load through three
// nodes, and 2 s later starts it again on the same port, empty. One token
// (bucket C = 100, refill r = 100/s) is offered 3x its rate while a second
// token chats through the response cache and conversations.
//
// The nodes are told to expect one node each: they must count each other
// on Redis (cluster.Presence) for their shares. No 5xx (a conversation's
// explicit 503 aside); while Redis is gone every
// node decides at its share (x-ratelimit-limit-requests ⌈C/N⌉ = 34) and
// says it is degraded; within 2 s of the restart every node is back on the
// shared bucket, and invalidations flow again. The over-admission is
// within the bound of a Redis outage (README, limiter; docs/BENCHMARKS.md):
// what the nodes admit on their own during an outage of D seconds is at
// most R + r·D + (N·⌈C/N⌉ − C) + s, R being what was left in the shared
// bucket when it went, N·⌈C/N⌉ − C the shares' rounding and s = 2(N − 1)
// the requests other nodes admit after a node's last shared answer, at
// the switch and at the return. Over the whole run, the restarted Redis
// has forgotten the bucket: at most one bucket C more than burst + rate ×
// elapsed, less what the nodes charge back for their local decisions.
func TestFaultRedisKilled(t *testing.T) {
	needRedis(t)
	const (
		rate, burst, n = 100.0, 100, 3
		offered        = 300.0
		before, outage = 1500 * time.Millisecond, 2 * time.Second
	)
	srv := testredis.Start(t)
	env := clusterEnv(t, srv.URL())
	delete(env, "SLUICE_REDIS_TIMEOUT") // the defaults
	delete(env, "SLUICE_LIMITER_TIMEOUT")
	// Each node is told to expect only itself: the share of 1/3 below
	// must come from the nodes counting each other on Redis.
	env["SLUICE_EXPECTED_NODES"] = "1"
	nodes := startNodes(t, n, env)
	admin, token := loadToken(t, nodes[0])
	// A node counts the others at its beats, every 5 s.
	testsync.WaitFor(t, 2*cluster.PresenceEvery+5*time.Second, "every node counting the 3 nodes", func() bool {
		for _, node := range nodes {
			var st struct{ Nodes int }
			if node.call("GET", "/api/admin/limiter", admin, "", &st); st.Nodes != n {
				return false
			}
		}
		return true
	})
	var user, chatTok struct{ Token string }
	nodes[0].call("POST", "/api/auth/login", "", `{"email":"load@example.com","password":"password123"}`, &user)
	nodes[0].call("POST", "/api/tokens", user.Token, `{"name":"chat"}`, &chatTok)
	limitEverywhere(t, nodes, token, 100, 0) // every node has the new tier before the clock starts
	bucketFull(t, nodes[:1], token, burst)

	stopChat := make(chan struct{})
	chatDone := chatTraffic(t, nodes, chatTok.Token, 40*time.Millisecond, stopChat)
	type result struct {
		answers []answer
		window  time.Duration
	}
	loaded := make(chan result)
	began := time.Now()
	go func() {
		a, w := offerRecording(t, nodes, token, offered, 7*time.Second)
		loaded <- result{a, w}
	}()
	time.Sleep(time.Until(began.Add(before))) // the scenario: the kill comes 1.5 s into the load
	srv.Kill(t)
	killed := time.Now()
	// Every node degraded within half the outage; not a Fatal (WaitFor)
	// while the load and the chat still report to t.
	var modes []string
	for deadline := killed.Add(outage / 2); ; time.Sleep(20 * time.Millisecond) {
		if modes = limiterModes(t, nodes, admin); strings.Count(strings.Join(modes, " "), "degraded") == n {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%v into the outage the nodes' limiters are %v, want every one degraded", outage/2, modes)
			break
		}
	}
	time.Sleep(time.Until(killed.Add(outage))) // the scenario: the outage lasts 2 s
	restarted := time.Now()
	srv.Restart(t)
	res := <-loaded
	close(stopChat)
	chats, sessionsRefused, chatProblems := chatDone()

	// What the limiter decided, and where.
	share := (burst + n - 1) / n
	// Times are the client's, so each decision is bracketed by its request's
	// sending and its answer's arrival: a node's outage is taken from the
	// sending of its last shared answer (its local bucket starts as that
	// answer left the shared one) to the arrival of its last local one,
	// which can only make D longer than it was.
	var admitted, local, serverErrors int
	lastShared := make([]answer, n)   // each node's last shared answer before the outage
	lastLocal := make([]time.Time, n) // each node's last decision on its own
	backAt := make([]time.Time, n)    // each node's first shared answer after the restart
	for _, a := range res.answers {
		if a.status >= 500 {
			serverErrors++
		}
		if a.status != 200 {
			continue
		}
		admitted++
		switch {
		case a.limit == share:
			if a.at.After(killed) {
				local++
				if a.at.After(lastLocal[a.node]) {
					lastLocal[a.node] = a.at
				}
			}
		case a.sent.Before(killed): // decided before the kill: no shared answer came between kill and restart
			if a.sent.After(lastShared[a.node].sent) {
				lastShared[a.node] = a
			}
		default:
			if backAt[a.node].IsZero() || a.at.Before(backAt[a.node]) {
				backAt[a.node] = a.at
			}
		}
	}
	// Each node refills its share, r/N, for as long as it decides alone,
	// from what its last shared answer left: R/N of the bucket at most.
	var refilled, d float64
	var residual int // R
	for i, at := range lastLocal {
		residual = max(residual, lastShared[i].remaining)
		if !at.IsZero() {
			refilled += rate / n * at.Sub(lastShared[i].sent).Seconds()
			d = max(d, at.Sub(lastShared[i].sent).Seconds())
		}
	}
	stale := 2 * (n - 1)
	roundUp := n*share - burst
	bound := float64(residual) + refilled + float64(roundUp+stale)
	ideal := float64(burst) + rate*res.window.Seconds()
	t.Logf("Redis killed under %g/s (restarted %v later) on %d nodes: %d admitted on local shares over D = %.2fs (the longest of the nodes'), bound R + r·D + (N·⌈C/N⌉ − C) + s = %d + %.0f + %d + %d = %.0f; "+
		"in all %d admitted in %.2fs, burst + rate × elapsed %.0f (%+.0f; the restart forgot one bucket of %d); %d server errors; %d chat requests (%d in a conversation refused with the store's explicit 503)",
		offered, restarted.Sub(killed).Round(time.Millisecond), n, local, d, residual, refilled, roundUp, stale, bound,
		admitted, res.window.Seconds(), ideal, float64(admitted)-ideal, burst, serverErrors, chats, sessionsRefused)
	for i, at := range backAt {
		if at.IsZero() {
			t.Errorf("node %d never answered from the shared bucket after the restart", i)
		} else {
			t.Logf("node %d back on the shared bucket %v after the restart", i, at.Sub(restarted).Round(time.Millisecond))
			if at.Sub(restarted) > 2*time.Second {
				t.Errorf("node %d took %v to return to the shared bucket, want within 2s", i, at.Sub(restarted))
			}
		}
	}
	if serverErrors != 0 {
		t.Errorf("%d server errors from the limiter's load, want none", serverErrors)
	}
	for _, p := range chatProblems {
		t.Errorf("chat during the outage: %s", p)
	}
	for i, at := range lastLocal {
		if at.IsZero() {
			t.Errorf("node %d decided no request at the per-node share of %d during the outage", i, share)
		}
	}
	if float64(local) > bound {
		t.Errorf("the nodes admitted %d on their own during the outage, above the bound %.0f", local, bound)
	}
	if float64(admitted) > ideal+float64(burst+roundUp+stale) {
		t.Errorf("admitted %d in all, more than burst + rate × elapsed %.0f plus the forgotten bucket and the bound's slack", admitted, ideal)
	}
	if modes := limiterModes(t, nodes, admin); strings.Count(strings.Join(modes, " "), "shared") != n {
		t.Errorf("after the restart the nodes' limiters are %v, want every one shared", modes)
	}

	// Invalidations flow again: a tier edit on one node reaches the others.
	if r := nodes[0].call("PUT", "/api/admin/tiers/free", admin, `{"capacity":77}`, nil); r.StatusCode != 200 {
		t.Fatalf("tier edit: %d", r.StatusCode)
	}
	for _, c := range nodes[1:] {
		within(t, "a tier edit reaching another node after the restart", func() bool {
			return c.call("GET", "/v1/models", chatTok.Token, "", nil).Header.Get("x-ratelimit-limit-requests") == "77"
		})
	}
}
