package e2e

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/upstream/mock"
)

// scrape reads /metrics and returns each series name (without labels) and
// the whole text.
func scrape(t *testing.T, base, token string) (map[string]bool, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, b)
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line[:strings.IndexAny(line, "{ ")]
		names[name] = true
	}
	return names, string(b)
}

// The series an operator pages on are all there after some traffic, with
// bounded labels (never a token or an organization), behind the token
// when one is set.
func TestMetricsAnOperatorCanPageOn(t *testing.T) {
	const metricsToken = "metrics-token-0123456789"
	provider := httptest.NewServer(mock.New(mock.Config{Keys: map[string]float64{"sk-ops-provider": 0}}))
	t.Cleanup(provider.Close)
	base, _, stop := start(t, map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4",
		"SLUICE_ADMIN_PASSWORD": "admin-password", "SLUICE_METRICS_TOKEN": metricsToken})
	t.Cleanup(func() { stop() })
	c := client{t, base}
	var admin struct{ Token string }
	c.call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &admin)
	if r := c.call("POST", "/api/admin/upstreams", admin.Token, `{"name":"openai-1","base_url":"`+provider.URL+`/v1","api_key":"sk-ops-provider","models":["gpt-4o-mini"]}`, nil); r.StatusCode != 201 {
		t.Fatalf("add provider: %d", r.StatusCode)
	}
	var owner struct{ Token string }
	c.call("POST", "/api/auth/signup", "", `{"email":"ops@example.com","password":"password123","organization":"Ops"}`, &owner)
	var tok struct{ Token string }
	c.call("POST", "/api/tokens", owner.Token, `{"name":"m"}`, &tok)
	for range 3 {
		c.call("POST", "/v1/chat/completions", tok.Token, `{"model":"sluice-local","temperature":0,"messages":[{"role":"user","content":"写春联"}]}`, nil)
	}
	// Past the free tier's burst of 30: some 429s.
	for range 30 {
		c.call("GET", "/v1/models", tok.Token, "", nil)
	}
	if r := c.call("GET", "/metrics", "", "", nil); r.StatusCode != 401 {
		t.Fatalf("/metrics without the token: %d", r.StatusCode)
	}
	names, text := scrape(t, base, metricsToken)
	for _, want := range []string{
		"sluice_requests_total", "sluice_request_duration_seconds_bucket", "sluice_tokens_total", "sluice_cache_requests_total",
		"sluice_freezes_active", "sluice_tier_refill_per_second", "sluice_limiter_mode", "sluice_inflight_requests",
		"sluice_recorder_queue_depth", "sluice_recorder_queue_capacity", "sluice_recorder_lost_events_total",
		"sluice_recorder_stored_events_total", "sluice_jobs_waiting", "sluice_jobs_oldest_age_seconds",
		"sluice_upstream_retries_total", "sluice_upstream_rate_limited_total", "sluice_rejections_total",
		"sluice_upstream_key_state", "sluice_upstream_healthy_keys", "sluice_upstream_key_requests_per_minute",
		"sluice_upstream_key_burst", "sluice_upstream_key_requests_total", "sluice_recorder_flush_seconds_bucket",
	} {
		if !names[want] {
			t.Errorf("%s is not exported", want)
		}
	}
	for _, want := range []string{`sluice_requests_total{model="sluice-local",route="/v1/chat/completions",status="2xx",tier="free"} 3`,
		`sluice_cache_requests_total{result="hit"} 2`, `sluice_limiter_mode{mode="local"} 1`, `sluice_tier_refill_per_second{kind="configured",tier="free"} 0.5`,
		`part="gateway"`, `sluice_tokens_total{kind="completion",model="sluice-local",tier="free"}`,
		`sluice_rejections_total{reason="requests",tier="free"} `, `sluice_upstream_healthy_keys{model="gpt-4o-mini"} 1`,
		`sluice_upstream_key_state{key="openai-1",state="healthy"} 1`} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(text, "sk_sluice_") || strings.Contains(text, "ops@example.com") || regexp.MustCompile(`org(anization)?_id="`).MatchString(text) {
		t.Fatal("a token, an email or an organization id in a label")
	}

	// /healthz says alive; /readyz checks what serving needs.
	if r := c.call("GET", "/healthz", "", "", nil); r.StatusCode != 200 {
		t.Fatalf("healthz: %d", r.StatusCode)
	}
	var ready struct {
		Status string
		Checks map[string]string
	}
	if r := c.call("GET", "/readyz", "", "", &ready); r.StatusCode != 200 || ready.Status != "ready" ||
		ready.Checks["database"] != "ok" || ready.Checks["migrations"] != "ok" || ready.Checks["recorder"] != "ok" {
		t.Fatalf("readyz: %d %+v", r.StatusCode, ready)
	}

	// The alert rules parse, and every series they use is one Sluice exports.
	var alerts []string
	for _, r := range loadAlertRules(t) {
		alerts = append(alerts, r.Alert)
		if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
			t.Errorf("rule %+v lacks alert, expr, severity or summary", r)
		}
		if _, err := model.ParseDuration(r.For); r.For != "" && err != nil {
			t.Errorf("%s: for: %v", r.Alert, err)
		}
		expr, err := parser.ParseExpr(r.Expr)
		if err != nil {
			t.Errorf("%s: %v", r.Alert, err)
			continue
		}
		if typ := expr.Type(); typ != parser.ValueTypeVector && typ != parser.ValueTypeScalar {
			t.Errorf("%s: an alert's expression must be a vector, not a %s", r.Alert, typ)
		}
		parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
			vs, ok := node.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			s := vs.Name
			if !strings.HasPrefix(s, "sluice_") || !names[s] && !names[strings.TrimSuffix(s, "_bucket")+"_bucket"] && s != "sluice_limiter_degraded" {
				t.Errorf("%s uses %s, which Sluice does not export", r.Alert, s)
			}
			return nil
		})
	}
	// sluice_limiter_degraded exists only with Redis: it is checked against
	// the source instead.
	if src, _ := os.ReadFile("../internal/app/shared.go"); !strings.Contains(string(src), `"sluice_limiter_degraded"`) {
		t.Fatal("sluice_limiter_degraded, which the rules use, is gone from the source")
	}
	for _, want := range []string{"SluiceHigh429Ratio", "SluiceLatencyOverTarget", "SluiceModelWithoutHealthyKey", "SluiceLimiterDegraded",
		"SluiceRecorderBacklogGrowing", "SluiceUsageEventsLost", "SluiceJobsWaitingTooLong"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no %s rule", want)
		}
	}
}

// With SLUICE_METRICS_ADDR, /metrics moves to its own address, behind the
// token, and the main address has none.
func TestMetricsOnTheirOwnAddress(t *testing.T) {
	const metricsToken = "metrics-token-0123456789"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	base, _, stop := start(t, map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4",
		"SLUICE_METRICS_ADDR": addr, "SLUICE_METRICS_TOKEN": metricsToken})
	t.Cleanup(func() { stop() })
	if r := (client{t, base}).call("GET", "/metrics", "", "", nil); r.StatusCode != http.StatusNotFound {
		t.Errorf("/metrics on the main address: %d, want 404", r.StatusCode)
	}
	metricsURL := "http://" + addr + "/metrics"
	var resp *http.Response
	for deadline := time.Now().Add(5 * time.Second); ; {
		if resp, err = http.Get(metricsURL); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the metrics address never answered: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "metrics_token_required") {
		t.Errorf("without the token: %d %s", resp.StatusCode, body)
	}
	req, _ := http.NewRequest("GET", metricsURL, nil)
	req.Header.Set("Authorization", "Bearer "+metricsToken)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "sluice_inflight_requests") {
		t.Errorf("with the token: %d %.200s", resp.StatusCode, body)
	}
}

// In production (a database URL) an open /metrics on the public address
// is said once at start; a token, or an address of its own, silences it.
func TestOpenMetricsInProductionAreSaidOnce(t *testing.T) {
	dsn := testdb.PostgresURL(t)
	const warning = "/metrics is served on the public address without a token"
	for _, tc := range []struct {
		token string
		want  int
	}{{"", 1}, {"metrics-token-0123456789", 0}} {
		env := map[string]string{"DATABASE_URL": dsn, "SLUICE_AUTO_MIGRATE": "true", "SLUICE_MASTER_KEY": testMasterKey,
			"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4", "SLUICE_METRICS_TOKEN": tc.token}
		_, out, stop := start(t, env)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(out.String(), warning); n != tc.want {
			t.Errorf("token %q: the warning said %d times, want %d:\n%s", tc.token, n, tc.want, out.String())
		}
	}
}
