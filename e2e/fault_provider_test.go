package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/upstream"
)

// stormProvider is an OpenAI-compatible provider misbehaving on purpose.
// The API key says how (sk-storm-<mode>): "429" refuses every request
// (a 429 flood), "500" fails it, "slow" answers slowly but well (streams
// dribble), "stall" sends a stream's first chunk and then nothing, and
// "reset" resets the connection: before the answer, or after a stream's
// first chunk. It counts the attempts it sees per request, by the marker
// each request's last message carries.
type stormProvider struct {
	mu       sync.Mutex
	attempts map[string]int
}

func newStormProvider() *stormProvider { return &stormProvider{attempts: map[string]int{}} }

// tries is how many attempts the provider saw for marker.
func (s *stormProvider) tries(marker string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts[marker]
}

func (s *stormProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.NotFound(w, r)
		return
	}
	var req struct {
		Model    string
		Stream   bool
		Messages []struct{ Content string }
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		http.Error(w, `{"error":{"message":"bad request"}}`, 400)
		return
	}
	marker := req.Messages[len(req.Messages)-1].Content
	s.mu.Lock()
	s.attempts[marker]++
	s.mu.Unlock()

	chunk := func(text string) string {
		return `data: {"id":"chatcmpl-storm","object":"chat.completion.chunk","model":"` + req.Model +
			`","choices":[{"index":0,"delta":{"content":"` + text + `"}}]}` + "\n\n"
	}
	startStream := func() http.Flusher {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		f := w.(http.Flusher)
		io.WriteString(w, chunk("first "))
		f.Flush()
		return f
	}
	reset := func() {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetLinger(0) // a reset, not a clean close
		}
		conn.Close()
	}
	switch mode := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer sk-storm-"); {
	case mode == "429":
		w.Header().Set("retry-after-ms", "20")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(429)
		io.WriteString(w, `{"error":{"message":"rate limited","type":"requests","code":"rate_limit_exceeded"}}`)
	case mode == "500":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(500)
		io.WriteString(w, `{"error":{"message":"the server had an error","type":"server_error"}}`)
	case mode == "slow" && req.Stream:
		f := startStream()
		for i := range 5 {
			time.Sleep(40 * time.Millisecond)
			io.WriteString(w, chunk("part"+strconv.Itoa(i)+" "))
			f.Flush()
		}
		io.WriteString(w, `data: {"id":"chatcmpl-storm","object":"chat.completion.chunk","model":"`+req.Model+
			`","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":6,"total_tokens":11}}`+"\n\ndata: [DONE]\n\n")
	case mode == "slow":
		time.Sleep(200 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"chatcmpl-storm","object":"chat.completion","model":"`+req.Model+
			`","choices":[{"index":0,"message":{"role":"assistant","content":"slow but sure"},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`)
	case mode == "stall":
		startStream()
		<-r.Context().Done() // until Sluice gives up on it
	case mode == "reset" && req.Stream:
		startStream()
		reset()
	case mode == "reset":
		reset()
	}
}

// stormCase is one kind of request in the storm.
type stormCase struct {
	model  string
	stream bool
}

var stormCases = []stormCase{
	{"storm-429", false}, {"storm-500", false}, {"storm-slow", true}, {"storm-slow", false},
	{"storm-stall", true}, {"storm-reset", true}, {"storm-reset", false},
}

// Limits the gateway runs the storm with (SLUICE_UPSTREAM_*); attempts
// are bounded by upstream.DefaultMaxAttempts, which no setting changes.
const (
	stormAttemptTimeout = time.Second
	stormBudget         = 3 * time.Second
	stormMaxAttempts    = upstream.DefaultMaxAttempts
)

// TestFaultProviderStorm sends chat requests at a provider that floods
// 429s, fails with 500s, dribbles, stalls and resets its connections,
// through one node (Postgres and Redis), 8 at a time, on a tier that
// falls back to sluice-local:
//
//   - every request is answered 200: from the provider, or from the local
//     model with x-sluice-fallback: local once retries or the breaker give
//     up; a stream that stalls or breaks after its first byte ends with
//     Sluice's error event, never retried;
//   - retries are bounded: no request makes more than MaxAttempts (10)
//     attempts or outlives the retry budget plus one attempt, and
//     x-sluice-upstream-attempts says what the provider saw;
//   - on a tier that does not fall back, the client gets 503 with
//     Retry-After instead;
//   - memory is flat (heap in use after the storm against after a warm-up,
//     after GC), and once the node has stopped no goroutine it started is
//     left (goleak).
func TestFaultProviderStorm(t *testing.T) {
	env := clusterEnv(t, needRedis(t))
	env["SLUICE_DATA_DIR"] = t.TempDir()
	env["SLUICE_UPSTREAM_ATTEMPT_TIMEOUT"] = stormAttemptTimeout.String()
	env["SLUICE_UPSTREAM_ANSWER_TIMEOUT"] = stormAttemptTimeout.String() // whole answers too: the storm bounds retries
	env["SLUICE_UPSTREAM_BUDGET"] = stormBudget.String()
	env["SLUICE_UPSTREAM_MAX_BACKOFF"] = "100ms"
	provider := newStormProvider()
	providerSrv := httptest.NewServer(provider)
	defer providerSrv.Close()
	// Whatever runs now (this process's other tests' leftovers included)
	// is not the node's.
	before := goleak.IgnoreCurrent()

	base, out, stop := start(t, env)
	c := client{t, base}
	var admin, user struct{ Token string }
	c.call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &admin)
	if r := c.call("PUT", "/api/admin/tiers/free", admin.Token,
		`{"capacity":10000,"refill_per_sec":10000,"tokens_per_minute":1000000000,"freeze_threshold":0,"upstream_fallback":"local"}`, nil); r.StatusCode != 200 {
		t.Fatalf("tier: %d", r.StatusCode)
	}
	for _, mode := range []string{"429", "500", "slow", "stall", "reset"} {
		body := `{"name":"storm-` + mode + `","base_url":"` + providerSrv.URL + `/v1","api_key":"sk-storm-` + mode + `","models":["storm-` + mode + `"]}`
		if r := c.call("POST", "/api/admin/upstreams", admin.Token, body, nil); r.StatusCode != 201 {
			t.Fatalf("adding the %s key: %d", mode, r.StatusCode)
		}
	}
	c.call("POST", "/api/auth/signup", "", `{"email":"storm@example.com","password":"password123","organization":"Storm"}`, &user)
	var tok struct{ Token string }
	c.call("POST", "/api/tokens", user.Token, `{"name":"storm"}`, &tok)

	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var (
		mu       sync.Mutex
		seen     = map[string]int{} // outcome -> requests
		attempts int                // at the provider, in all
		most     int                // attempts for one request
		slowest  time.Duration
	)
	// one sends request n of the storm and checks its answer.
	one := func(n int) {
		sc := stormCases[n%len(stormCases)]
		marker := "storm request " + strconv.Itoa(n)
		body := fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":%q}]}`, sc.model, sc.stream, marker)
		req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok.Token)
		req.Header.Set("Content-Type", "application/json")
		began := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			t.Errorf("%s: %v", marker, err)
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(began)
		tries := provider.tries(marker)
		fallback := resp.Header.Get("x-sluice-fallback") == "local"
		var outcome string
		switch {
		case resp.StatusCode != 200 || err != nil:
			t.Errorf("%s (%s, stream %v): %d %v %s", marker, sc.model, sc.stream, resp.StatusCode, err, b)
			return
		case fallback:
			outcome = "local fallback"
		case sc.stream && strings.Contains(string(b), `"upstream_stalled"`):
			outcome = "stream ended with an error event"
		case sc.model == "storm-slow" && (!sc.stream || strings.HasSuffix(string(b), "data: [DONE]\n\n")):
			outcome = "slow answer relayed"
		default:
			t.Errorf("%s (%s, stream %v): unexpected answer %s", marker, sc.model, sc.stream, b)
			return
		}
		if h := resp.Header.Get("x-sluice-upstream-attempts"); !fallback && h != strconv.Itoa(tries) {
			t.Errorf("%s: x-sluice-upstream-attempts %q, the provider saw %d", marker, h, tries)
		}
		if sc.stream && !fallback && tries != 1 {
			t.Errorf("%s: a stream that had started was tried %d times", marker, tries)
		}
		if tries > stormMaxAttempts {
			t.Errorf("%s (%s): %d attempts, more than %d", marker, sc.model, tries, stormMaxAttempts)
		}
		// The budget, one attempt that may start just before it ends, and
		// the local answer; generous for -race on two busy cores.
		if limit := stormBudget + stormAttemptTimeout + 2*time.Second; took > limit {
			t.Errorf("%s (%s): took %v, more than %v", marker, sc.model, took, limit)
		}
		mu.Lock()
		seen[sc.model+": "+outcome]++
		attempts += tries
		most = max(most, tries)
		slowest = max(slowest, took)
		mu.Unlock()
	}
	storm := func(from, to int) {
		var wg sync.WaitGroup
		next := make(chan int)
		for range 8 {
			wg.Go(func() {
				for n := range next {
					one(n)
				}
			})
		}
		for n := from; n < to; n++ {
			next <- n
		}
		close(next)
		wg.Wait()
	}
	heapInUse := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}

	const warmup, total = 70, 245
	storm(0, warmup)
	warm := heapInUse()
	began := time.Now()
	storm(warmup, total)
	stormed := time.Since(began)
	after := heapInUse()

	// A tier that does not fall back says so, with a Retry-After.
	if r := c.call("PUT", "/api/admin/tiers/free", admin.Token, `{"upstream_fallback":"error"}`, nil); r.StatusCode != 200 {
		t.Fatalf("tier: %d", r.StatusCode)
	}
	var refused struct{ Error struct{ Code string } }
	r := c.call("POST", "/v1/chat/completions", tok.Token, `{"model":"storm-500","messages":[{"role":"user","content":"no fallback"}]}`, &refused)
	if r.StatusCode != 503 || r.Header.Get("Retry-After") == "" || refused.Error.Code != "upstream_unavailable" || r.Header.Get("x-sluice-fallback") != "" {
		t.Errorf("no fallback on the tier: %d, Retry-After %q, code %q", r.StatusCode, r.Header.Get("Retry-After"), refused.Error.Code)
	}

	retries := metric(t, c, "sluice_upstream_retries_total")
	t.Logf("storm of %d requests (%d to warm up, %d more in %v): %v; %d provider attempts in all, at most %d for one request (limit %d), %.0f retries; slowest answer %v (budget %v)",
		total, warmup, total-warmup, stormed.Round(time.Millisecond), seen, attempts, most, stormMaxAttempts, retries, slowest.Round(time.Millisecond), stormBudget)
	t.Logf("heap in use after GC: %.1f MiB after the warm-up, %.1f MiB after the storm (%.2fx)",
		float64(warm)/(1<<20), float64(after)/(1<<20), float64(after)/float64(warm))
	if after > warm+warm/2 {
		t.Errorf("heap in use grew from %d to %d bytes over the storm", warm, after)
	}
	for _, want := range []string{"storm-429: local fallback", "storm-500: local fallback", "storm-slow: slow answer relayed",
		"storm-stall: stream ended with an error event", "storm-reset: stream ended with an error event", "storm-reset: local fallback"} {
		if seen[want] == 0 {
			t.Errorf("no request ended as %q", want)
		}
	}

	if err := stop(); err != nil {
		t.Errorf("run: %v\n%s", err, out.String())
	}
	tr.CloseIdleConnections()
	providerSrv.Close()
	goleak.VerifyNone(t, before)
}
