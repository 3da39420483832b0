package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/app"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/testsync"
)

// run is Sluice as its command line runs it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	return app.Run(ctx, args, getenv, stdout, app.Options{})
}

var listening = regexp.MustCompile(`listening on (http://\S+)`)

// startWait bounds how long a node may take to start listening. A node
// starts in about a second, but its migrations on a busy host under -race
// beside two other test binaries have taken over 20 s; waiting longer
// costs only a failing test's time.
const startWait = 2 * time.Minute

// start runs Sluice on :0 with env and returns its base URL and a stop
// function that shuts it down and returns run's error.
func start(t *testing.T, env map[string]string) (string, *testsync.Buffer, func() error) {
	t.Helper()
	return startWith(t, env, app.Options{})
}

// startWith is start with the node options o.
func startWith(t *testing.T, env map[string]string, o app.Options) (string, *testsync.Buffer, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &testsync.Buffer{}
	getenv := func(k string) string { return env[k] }
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, []string{"-addr", "127.0.0.1:0"}, getenv, out, o) }()
	deadline := time.Now().Add(startWait)
	for {
		if m := listening.FindStringSubmatch(out.String()); m != nil {
			stop := func() error { cancel(); return <-done }
			t.Cleanup(func() { cancel() })
			return m[1], out, stop
		}
		select {
		case err := <-done:
			t.Fatalf("run returned before listening: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not listening after %s:\n%s", startWait, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type client struct {
	t    *testing.T
	base string
}

func (c client) call(method, path, bearer, body string, into any) *http.Response {
	c.t.Helper()
	return c.callHeaders(method, path, bearer, body, nil, into)
}

// callHeaders is call with extra request headers.
func (c client) callHeaders(method, path, bearer, body string, headers map[string]string, into any) *http.Response {
	c.t.Helper()
	req, _ := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if into != nil {
		if err := json.Unmarshal(b, into); err != nil {
			c.t.Fatalf("%s %s: %d %q", method, path, resp.StatusCode, b)
		}
	}
	return resp
}

// TestEndToEnd drives a real Sluice process the way a customer would.
func TestEndToEnd(t *testing.T) {
	variants := map[string]func(t *testing.T) map[string]string{
		"sqlite": func(t *testing.T) map[string]string {
			return map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4"}
		},
		"postgres": func(t *testing.T) map[string]string {
			return map[string]string{"DATABASE_URL": testdb.PostgresURL(t), "SLUICE_AUTO_MIGRATE": "true", "SLUICE_BCRYPT_COST": "4", "SLUICE_MASTER_KEY": testMasterKey,
				"SLUICE_DATA_DIR": t.TempDir()}
		},
	}
	for name, envFor := range variants {
		t.Run(name, func(t *testing.T) {
			base, out, stop := start(t, envFor(t))
			if !strings.Contains(out.String(), "admin@localhost with password") {
				t.Errorf("the generated admin password was not printed:\n%s", out.String())
			}
			c := client{t, base}
			var signup struct{ Token string }
			if r := c.call("POST", "/api/auth/signup", "", `{"email":"ada@example.com","password":"password123","organization":"Analytical Engines"}`, &signup); r.StatusCode != 201 {
				t.Fatalf("signup: %d", r.StatusCode)
			}
			var tok struct{ Token string }
			if r := c.call("POST", "/api/tokens", signup.Token, `{"name":"e2e"}`, &tok); r.StatusCode != 201 {
				t.Fatalf("token: %d", r.StatusCode)
			}
			var chat struct {
				Choices []struct{ Message struct{ Content string } }
				Usage   struct {
					TotalTokens int `json:"total_tokens"`
				}
			}
			body := `{"model":"sluice-local","messages":[{"role":"user","content":"Write a spring couplet about peace"}]}`
			r := c.call("POST", "/v1/chat/completions", tok.Token, body, &chat)
			if r.StatusCode != 200 || !strings.Contains(chat.Choices[0].Message.Content, "上联") || chat.Usage.TotalTokens == 0 {
				t.Fatalf("chat: %d %+v", r.StatusCode, chat)
			}
			// The batching recorder stores usage within about a second.
			deadline := time.Now().Add(10 * time.Second)
			for {
				var usage struct {
					Today struct {
						Requests int `json:"requests"`
					} `json:"today"`
				}
				c.call("GET", "/api/usage", signup.Token, "", &usage)
				if usage.Today.Requests == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("usage never showed the request: %+v", usage)
				}
				time.Sleep(50 * time.Millisecond)
			}
			admitted := 1
			var last *http.Response
			for i := range 40 {
				// Distinct prompts: a repeated one weighs more (see README).
				themes := []string{"peace", "health", "wealth", "spring", "family", "study", "harvest", "joy"}
				prompt := fmt.Sprintf("Write a spring couplet about %s for the %s gate", themes[i%8], []string{"east", "west", "south", "north", "inner"}[i/8])
				last = c.call("POST", "/v1/chat/completions", tok.Token, `{"model":"sluice-local","messages":[{"role":"user","content":"`+prompt+`"}]}`, nil)
				if last.StatusCode != 200 {
					break
				}
				admitted++
			}
			// 30 burst; a request or so may refill while the loop runs.
			if last.StatusCode != 429 || admitted < 30 || admitted > 31 || last.Header.Get("Retry-After") == "" {
				t.Fatalf("after %d admitted: %d, Retry-After %q", admitted, last.StatusCode, last.Header.Get("Retry-After"))
			}
			resp, err := http.Get(base + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			metrics, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, m := range []string{"sluice_limiter_degraded 0", "sluice_upstream_retries_total 0", "sluice_inflight_requests"} {
				if !strings.Contains(string(metrics), m) {
					t.Errorf("/metrics lacks %q", m)
				}
			}
			// Graceful shutdown stores every usage event before run returns.
			if err := stop(); err != nil {
				t.Fatalf("run: %v", err)
			}
		})
	}
}

func TestUsageSurvivesShutdown(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"SLUICE_DATA_DIR": dir, "SLUICE_BCRYPT_COST": "4", "SLUICE_ADMIN_PASSWORD": "admin-password"}
	base, _, stop := start(t, env)
	c := client{t, base}
	var signup struct{ Token string }
	c.call("POST", "/api/auth/signup", "", `{"email":"ada@example.com","password":"password123","organization":"A"}`, &signup)
	var tok struct{ Token string }
	c.call("POST", "/api/tokens", signup.Token, `{"name":"e2e"}`, &tok)
	for range 5 {
		c.call("POST", "/v1/chat/completions", tok.Token, `{"model":"sluice-local","messages":[{"role":"user","content":"hi"}]}`, nil)
	}
	if err := stop(); err != nil { // well inside the recorder's one-second flush
		t.Fatal(err)
	}
	base, out, stop := start(t, env)
	defer stop()
	if strings.Contains(out.String(), "with password") {
		t.Error("a restart created the admin again")
	}
	c = client{t, base}
	// The session secret was kept, so the old session still works.
	var usage struct {
		Today struct {
			Requests int `json:"requests"`
		} `json:"today"`
	}
	if r := c.call("GET", "/api/usage", signup.Token, "", &usage); r.StatusCode != 200 || usage.Today.Requests != 5 {
		t.Fatalf("after restart: %d, %d requests, want 5", r.StatusCode, usage.Today.Requests)
	}
}

func TestInvalidConfigurationStopsStartUp(t *testing.T) {
	err := run(context.Background(), nil, func(k string) string {
		return map[string]string{"SLUICE_MAX_BODY_BYTES": "huge"}[k]
	}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "SLUICE_MAX_BODY_BYTES") {
		t.Fatalf("got %v", err)
	}
}

func TestServerRefusesAnOlderSchemaUntilMigrated(t *testing.T) {
	url := testdb.PostgresURL(t)
	env := map[string]string{"DATABASE_URL": url, "SLUICE_BCRYPT_COST": "4", "SLUICE_MASTER_KEY": testMasterKey}
	getenv := func(k string) string { return env[k] }
	err := run(context.Background(), []string{"-addr", "127.0.0.1:0"}, getenv, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "sluice migrate") {
		t.Fatalf("serving on an empty Postgres: %v", err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"migrate"}, getenv, &out); err != nil || !strings.Contains(out.String(), "applied [1 ") {
		t.Fatalf("migrate: %v %s", err, out.String())
	}
	base, _, stop := start(t, env)
	if r := (client{t, base}).call("GET", "/healthz", "", "", nil); r.StatusCode != 200 {
		t.Fatalf("healthz after migrate: %d", r.StatusCode)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// testMasterKey seals provider keys in tests that run on Postgres, where a
// master key is required.
const testMasterKey = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
