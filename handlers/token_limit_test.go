package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// step is one request of a scenario of limits and what must come back.
type step struct {
	name    string
	req     request
	remote  string        // the connection's address; "" for httptest's 192.0.2.1
	advance time.Duration // the clock moves first
	status  int
	code    string            // error.code of a refusal
	message string            // its error.message, exactly
	headers map[string]string // headers and their values
	body    []string          // substrings of a success's body
}

// runSteps sends each step to h in order, asserting what comes back.
func runSteps(t *testing.T, e *env, h http.Handler, steps []step) {
	t.Helper()
	for i, s := range steps {
		e.clock.Advance(s.advance)
		req := httptest.NewRequest(s.req.method, s.req.path, strings.NewReader(s.req.body))
		if s.req.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if s.req.bearer != "" {
			req.Header.Set("Authorization", "Bearer "+s.req.bearer)
		}
		for k, v := range s.req.header {
			req.Header.Set(k, v)
		}
		w := serve(h, req, s.remote)
		if w.Code != s.status {
			t.Fatalf("step %d (%s): status %d, want %d: %s", i+1, s.name, w.Code, s.status, w.Body.String())
		}
		if s.code != "" {
			var body struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error.Code != s.code || body.Error.Message != s.message {
				t.Fatalf("step %d (%s): %s, want %s %q", i+1, s.name, w.Body.String(), s.code, s.message)
			}
		}
		for k, v := range s.headers {
			if got := w.Header().Get(k); got != v {
				t.Errorf("step %d (%s): %s %q, want %q", i+1, s.name, k, got, v)
			}
		}
		for _, b := range s.body {
			if !strings.Contains(w.Body.String(), b) {
				t.Errorf("step %d (%s): body lacks %q: %s", i+1, s.name, b, w.Body.String())
			}
		}
	}
}

const tokensFull = "the free tier allows 2 active API tokens and this organization has 2 (revoked and expired ones do not count); revoke one or upgrade"

// TestTokenLimitAPI: max_api_tokens through the admin API (shown, set,
// validated, defaulted on create, audited) and POST /api/tokens refused
// with 409 past it.
func TestTokenLimitAPI(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		admin := e.login("admin@example.com", "admin-password")
		owner := e.signup("owner@example.com", "Acme")
		put := func(body string) request {
			return request{method: "PUT", path: "/api/admin/tiers/free", bearer: admin, body: body}
		}
		newToken := request{method: "POST", path: "/api/tokens", bearer: owner, body: `{"name":"ci"}`}
		runSteps(t, e, e.h, []step{
			{name: "listed", req: request{method: "GET", path: "/api/admin/tiers", bearer: admin}, status: 200,
				body: []string{`"name":"free"`, `"max_api_tokens":10,`, `"max_api_tokens":200,`}},
			{name: "negative", req: put(`{"max_api_tokens":-1}`), status: 422, code: "unprocessable", message: "max_api_tokens must be from 0 (no limit) to 100000"},
			{name: "too many", req: put(`{"max_api_tokens":100001}`), status: 422, code: "unprocessable", message: "max_api_tokens must be from 0 (no limit) to 100000"},
			{name: "not a number", req: put(`{"max_api_tokens":"ten"}`), status: 400, code: "invalid_json",
				message: "request body is not valid JSON for this endpoint: field 'max_api_tokens' must be int"},
			{name: "set to 2", req: put(`{"max_api_tokens":2}`), status: 200, body: []string{`"name":"free"`, `"max_api_tokens":2`}},
			{name: "other fields keep it", req: put(`{"capacity":31}`), status: 200, body: []string{`"max_api_tokens":2`}},
			{name: "a new tier gets 10", req: request{method: "POST", path: "/api/admin/tiers", bearer: admin,
				body: `{"name":"team","capacity":50,"refill_per_sec":1}`}, status: 201, body: []string{`"max_api_tokens":10`}},
			{name: "or what it is given", req: request{method: "POST", path: "/api/admin/tiers", bearer: admin,
				body: `{"name":"open","capacity":50,"refill_per_sec":1,"max_api_tokens":0}`}, status: 201, body: []string{`"max_api_tokens":0`}},
			{name: "token 1", req: newToken, status: 201, body: []string{`"token":"sk_sluice_`}},
			{name: "token 2", req: newToken, status: 201},
		})
		audit, _, err := e.store.AuditEntries(context.Background(), models.AuditQuery{OrgID: currentOrg(t, e, "admin@example.com"), PageSize: 10})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, a := range audit {
			found = found || a.Action == "tier.update" && a.Detail == "max_api_tokens 10 -> 2"
		}
		if !found {
			t.Errorf("no audit entry for the limit: %+v", audit)
		}

		logs := e.captureLogs()
		w := e.do(newToken)
		expectError(t, w, 409, "token_limit_reached", tokensFull)
		if strings.Count(logs.String(), "\n") != 1 || !strings.Contains(logs.String(), "request_id="+w.Header().Get("X-Request-Id")) ||
			!strings.Contains(logs.String(), "error_code=token_limit_reached") {
			t.Errorf("the refusal is not logged once with its request id:\n%s", logs.String())
		}
		if toks, _ := e.store.APITokens(context.Background(), currentOrg(t, e, "owner@example.com")); len(toks) != 2 {
			t.Fatalf("%d tokens stored", len(toks))
		}
		list := decode(t, e.do(request{method: "GET", path: "/api/tokens", bearer: owner}))["data"].([]any)
		id := int64(list[0].(map[string]any)["id"].(float64))
		runSteps(t, e, e.h, []step{
			{name: "revoke one", req: request{method: "DELETE", path: "/api/tokens/" + itoa(id), bearer: owner}, status: 200},
			{name: "room again", req: newToken, status: 201},
			{name: "full again", req: newToken, status: 409, code: "token_limit_reached", message: tokensFull},
			{name: "no limit", req: put(`{"max_api_tokens":0}`), status: 200},
			{name: "past 2", req: newToken, status: 201},
		})
	})
}

// currentOrg is the organization of the user with email.
func currentOrg(t *testing.T, e *env, email string) int64 {
	t.Helper()
	u, err := e.store.UserByEmail(context.Background(), email)
	if err != nil {
		t.Fatal(err)
	}
	return u.LastOrgID
}
