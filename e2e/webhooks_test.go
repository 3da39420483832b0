package e2e

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/testdb"
)

// TestWebhooksNeverReachInside: with localhost and 127.0.0.1 on the
// allow-list, neither an organization's webhook nor a job's callback may
// point at the loopback listener: refused with 400 in each route's shape
// when saved, and the listener never reached.
func TestWebhooksNeverReachInside(t *testing.T) {
	var hits atomic.Int32
	inside := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer inside.Close()
	port := inside.URL[strings.LastIndex(inside.URL, ":"):]
	env := map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4", "SLUICE_ADMIN_PASSWORD": "admin-password",
		"SLUICE_WEBHOOK_HOSTS": "localhost,127.0.0.1"}
	if os.Getenv("TEST_DATABASE_URL") != "" {
		env["DATABASE_URL"], env["SLUICE_AUTO_MIGRATE"], env["SLUICE_MASTER_KEY"] = testdb.PostgresURL(t), "true", testMasterKey
	}
	base, out, stop := start(t, env)
	t.Cleanup(func() { stop() })
	c := client{t, base}
	var s, tok struct{ Token string }
	if r := c.call("POST", "/api/auth/signup", "", `{"email":"mallory@example.com","password":"password123","organization":"Inside"}`, &s); r.StatusCode != 201 {
		t.Fatalf("signup: %d", r.StatusCode)
	}
	if r := c.call("POST", "/api/tokens", s.Token, `{"name":"jobs"}`, &tok); r.StatusCode != 201 {
		t.Fatalf("token: %d", r.StatusCode)
	}
	type apiError struct {
		Error struct{ Code, Message, Param string }
	}
	for url, want := range map[string]string{
		"http://localhost" + port + "/hook":  "webhooks are sent over https only",
		"https://localhost" + port + "/hook": "localhost resolves to ",
		"https://127.0.0.1" + port + "/hook": "127.0.0.1 resolves to 127.0.0.1, a loopback address",
	} {
		var e apiError
		if r := c.call("PUT", "/api/organization", s.Token, `{"webhook_url":"`+url+`"}`, &e); r.StatusCode != 400 ||
			e.Error.Code != "webhook_not_allowed" || !strings.Contains(e.Error.Message, want) {
			t.Errorf("webhook %s: %d %+v, want 400 %q", url, r.StatusCode, e, want)
		}
		// A job's callback: OpenAI's error shape, the header named.
		var je apiError
		r := c.callHeaders("POST", "/v1/jobs", tok.Token, `{"model":"sluice-local","messages":[{"role":"user","content":"hi"}]}`,
			map[string]string{"X-Sluice-Callback-URL": url}, &je)
		if r.StatusCode != 400 || je.Error.Code != "callback_not_allowed" || je.Error.Param != "callback_url" || !strings.Contains(je.Error.Message, want) {
			t.Errorf("callback %s: %d %+v, want 400 %q", url, r.StatusCode, je, want)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("the loopback listener was reached %d times", hits.Load())
	}
	if strings.Contains(out.String(), "SLUICE_WEBHOOK_ALLOW_PRIVATE=true") {
		t.Fatal("a warning about allowing private addresses, which are not allowed")
	}
}
