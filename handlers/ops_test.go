package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/testsync"
	"github.com/sluicehq/sluice/logging"
	"github.com/sluicehq/sluice/metrics"
)

// /readyz names what fails, and logs each change once, not each probe.
func TestReadinessNamesWhatFails(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	logs := e.captureLogs()
	down := errors.New("dial tcp 10.0.0.5:5432: connection refused")
	var dbErr error
	e.h = New(e.log, Ops{Ready: func(context.Context) []Check {
		return []Check{{Name: "database", Err: dbErr}, {Name: "redis"}}
	}}, e.deps)
	if w := e.do(request{method: "GET", path: "/readyz"}); w.Code != 200 || !strings.Contains(w.Body.String(), `"status":"ready"`) {
		t.Fatalf("%d %s", w.Code, w.Body.String())
	}
	dbErr = down
	for range 3 {
		w := e.do(request{method: "GET", path: "/readyz"})
		if w.Code != 503 || !strings.Contains(w.Body.String(), `"failing":["database"]`) || strings.Contains(w.Body.String(), "10.0.0.5") {
			t.Fatalf("%d %s", w.Code, w.Body.String())
		}
	}
	if n := strings.Count(logs.String(), "readiness check failing"); n != 1 {
		t.Fatalf("logged %d times:\n%s", n, logs.String())
	}
	dbErr = nil
	if w := e.do(request{method: "GET", path: "/readyz"}); w.Code != 200 || !strings.Contains(logs.String(), "readiness check passing again") {
		t.Fatalf("%d\n%s", w.Code, logs.String())
	}
	// /healthz is liveness alone.
	if w := e.do(request{method: "GET", path: "/healthz"}); w.Code != 200 {
		t.Fatalf("healthz %d", w.Code)
	}
}

// Each request is one JSON line with what an operator needs, and nothing a
// customer would not want in a log: no token, no email, no prompt.
func TestAccessLogSaysWhatHappenedAndNothingPrivate(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	var b testsync.Buffer
	e.log = logging.New(&b, "info", "json")
	e.pipe.Log = e.log
	e.rebuild()
	key, _ := e.apiToken(e.signup("grace@example.com", "Compilers"))
	const secretPrompt = "my card is 4111 1111 1111 1111"
	w := e.do(request{method: "POST", path: "/v1/chat/completions", bearer: key,
		body: `{"model":"sluice-local","messages":[{"role":"user","content":"` + secretPrompt + `"}]}`})
	if w.Code != 200 {
		t.Fatal(w.Code)
	}
	e.do(request{method: "POST", path: "/api/auth/login", body: `{"email":"grace@example.com","password":"wrong-password"}`})
	all := b.String()
	// The whole card number: a duration in nanoseconds may hold "4111"
	// (8244111 did, in CI).
	if strings.Contains(all, key) || strings.Contains(all, "grace@example.com") || strings.Contains(all, "4111 1111") {
		t.Fatalf("the log holds private data:\n%s", all)
	}
	var chat, login map[string]any
	for _, line := range strings.Split(strings.TrimSpace(all), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not JSON: %s", line)
		}
		switch m["route"] {
		case "/v1/chat/completions":
			chat = m
		case "/api/auth/login":
			login = m
		}
	}
	if chat == nil || chat["request_id"] != w.Header().Get("X-Request-Id") || chat["status"] != 200.0 || chat["tier"] != "free" ||
		!strings.HasPrefix(chat["token"].(string), "sk_sluice_") || len(chat["token"].(string)) > 20 || chat["model"] != "sluice-local" ||
		chat["org_id"] == nil || chat["duration"] == nil || chat["retries"] != 0.0 {
		t.Fatalf("chat line: %v", chat)
	}
	if login == nil || login["status"] != 401.0 || login["error_code"] != "invalid_credentials" {
		t.Fatalf("login line: %v", login)
	}

	// With SLUICE_LOG_PROMPTS the exchange is logged, redacted.
	b = testsync.Buffer{}
	e.pipe.LogPrompts = true
	e.rebuild()
	e.do(request{method: "POST", path: "/v1/chat/completions", bearer: key,
		body: `{"model":"sluice-local","messages":[{"role":"user","content":"` + secretPrompt + ` mail me at x@y.org"}]}`})
	if s := b.String(); !strings.Contains(s, `"msg":"exchange"`) || !strings.Contains(s, "my card is [card]") || strings.Contains(s, "x@y.org") {
		t.Fatalf("prompt logging:\n%s", s)
	}
}

// With info off (an operator at warn level) no access line is written,
// and the request is still counted in the metrics.
func TestAccessLogOffStillCounts(t *testing.T) {
	var b testsync.Buffer
	reg := prometheus.NewRegistry()
	r := gin.New()
	r.Use(accessLog(logging.New(&b, "warn", "json"), metrics.NewGateway(reg)))
	r.GET("/v1/models", func(c *gin.Context) { c.Status(http.StatusOK) })
	r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/models", nil))
	if b.String() != "" {
		t.Fatalf("an access line at warn level: %s", b.String())
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var counted float64
	for _, f := range families {
		if f.GetName() == "sluice_requests_total" {
			for _, m := range f.GetMetric() {
				counted += m.GetCounter().GetValue()
			}
		}
	}
	if counted != 1 {
		t.Fatalf("requests counted: %v, want 1", counted)
	}
}
