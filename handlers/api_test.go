package handlers

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// fixture is the state the scenario tables run against.
type fixture struct {
	member, admin         string // session tokens
	key, revoked, expired string // API tokens
	unknown               string // well-formed, never issued
	memberOrgID           int64
}

func newFixture(t *testing.T, e *env) fixture {
	ctx := context.Background()
	var f fixture
	f.member = e.signup("member@example.com", "Acme")
	f.admin = e.login("admin@example.com", "admin-password")
	f.key, _ = e.apiToken(f.member)
	var revokedID int64
	f.revoked, revokedID = e.apiToken(f.member)
	if w := e.do(request{method: "DELETE", path: "/api/tokens/" + itoa(revokedID), bearer: f.member}); w.Code != http.StatusOK {
		t.Fatalf("revoke: %d %s", w.Code, w.Body.String())
	}
	u, err := e.store.UserByEmail(ctx, "member@example.com")
	if err != nil {
		t.Fatal(err)
	}
	f.memberOrgID = u.LastOrgID
	past := time.Now().Add(-time.Hour)
	_, f.expired, err = e.store.CreateAPIToken(ctx, u.LastOrgID, u.ID, "old", &past)
	if err != nil {
		t.Fatal(err)
	}
	f.unknown, _ = models.NewTokenSecret()
	return f
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// scenario is one request and what must come back.
type scenario struct {
	name        string
	req         func(f fixture) request
	status      int
	code        string   // error.code, "" for successes
	headers     []string // headers that must be present
	contains    []string // substrings of the body
	notContains []string
}

func runScenarios(t *testing.T, scenarios []scenario) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		f := newFixture(t, e)
		for _, s := range scenarios {
			t.Run(s.name, func(t *testing.T) {
				w := e.do(s.req(f))
				if w.Code != s.status {
					t.Fatalf("status %d, want %d: %s", w.Code, s.status, w.Body.String())
				}
				if w.Code >= 400 {
					if got := errorCode(t, w); got != s.code {
						t.Errorf("error code %q, want %q (%s)", got, s.code, w.Body.String())
					}
				}
				for _, h := range s.headers {
					if w.Header().Get(h) == "" {
						t.Errorf("header %s missing; have %v", h, w.Header())
					}
				}
				for _, c := range s.contains {
					if !strings.Contains(w.Body.String(), c) {
						t.Errorf("body lacks %q: %s", c, w.Body.String())
					}
				}
				for _, c := range s.notContains {
					if strings.Contains(w.Body.String(), c) {
						t.Errorf("body has %q: %s", c, w.Body.String())
					}
				}
			})
		}
	})
}

func chatReq(key, body string) func(fixture) request {
	return func(f fixture) request {
		return request{method: "POST", path: "/v1/chat/completions", bearer: key, body: body}
	}
}

func TestV1Scenarios(t *testing.T) {
	rl := []string{"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests", "X-Request-Id"}
	valid := func(body string) func(fixture) request {
		return func(f fixture) request {
			return request{method: "POST", path: "/v1/chat/completions", bearer: f.key, body: body}
		}
	}
	big := `{"model":"sluice-local","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`
	runScenarios(t, []scenario{
		{name: "no key", req: chatReq("", chatBody), status: 401, code: "missing_api_key", contains: []string{`"type":"authentication_error"`}},
		{name: "malformed key", req: chatReq("sk_sluice_nope", chatBody), status: 401, code: "malformed_api_key"},
		{name: "unknown key", req: func(f fixture) request { return chatReq(f.unknown, chatBody)(f) }, status: 401, code: "invalid_api_key"},
		{name: "revoked key", req: func(f fixture) request { return chatReq(f.revoked, chatBody)(f) }, status: 401, code: "revoked_api_key"},
		{name: "expired key", req: func(f fixture) request { return chatReq(f.expired, chatBody)(f) }, status: 401, code: "expired_api_key"},
		{name: "chat ok", req: valid(chatBody), status: 200, headers: rl,
			contains: []string{`"object":"chat.completion"`, `"model":"sluice-local"`, `"role":"assistant"`, `"prompt_tokens":`, `"finish_reason":"stop"`}},
		{name: "couplet", req: valid(`{"model":"sluice-local","messages":[{"role":"user","content":"写一副春联"}]}`), status: 200, contains: []string{"上联", "下联", "横批"}},
		{name: "content parts", req: valid(`{"model":"sluice-local","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`), status: 200},
		{name: "wrong content type", req: func(f fixture) request {
			return request{method: "POST", path: "/v1/chat/completions", bearer: f.key, body: chatBody, contentType: "text/plain"}
		}, status: 400, code: "invalid_content_type", headers: rl},
		{name: "malformed json", req: valid(`{"model":`), status: 400, code: "invalid_json", contains: []string{`"type":"invalid_request_error"`}},
		{name: "two json values", req: valid(chatBody + chatBody), status: 400, code: "invalid_json"},
		{name: "wrong field type", req: valid(`{"model":"sluice-local","messages":"hi"}`), status: 400, code: "invalid_json", contains: []string{"messages"}},
		{name: "empty messages", req: valid(`{"model":"sluice-local","messages":[]}`), status: 400, code: "invalid_messages", contains: []string{`"param":"messages"`}},
		{name: "missing model", req: valid(`{"messages":[{"role":"user","content":"hi"}]}`), status: 400, code: "missing_model"},
		{name: "unknown model", req: valid(`{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}`), status: 404, code: "model_not_found"},
		{name: "bad role", req: valid(`{"model":"sluice-local","messages":[{"role":"wizard","content":"hi"}]}`), status: 400, code: "invalid_role"},
		{name: "image part", req: valid(`{"model":"sluice-local","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`), status: 400, code: "invalid_content"},
		{name: "max_tokens 0", req: valid(`{"model":"sluice-local","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`), status: 400, code: "invalid_max_tokens"},
		{name: "max_tokens cuts", req: valid(`{"model":"sluice-local","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`), status: 200, contains: []string{`"finish_reason":"length"`, `"completion_tokens":3`}},
		{name: "n=2", req: valid(`{"model":"sluice-local","n":2,"messages":[{"role":"user","content":"hi"}]}`), status: 400, code: "unsupported_n"},
		{name: "body too large", req: valid(big), status: 413, code: "request_too_large"},
		{name: "models", req: func(f fixture) request { return request{method: "GET", path: "/v1/models", bearer: f.key} },
			status: 200, headers: rl, contains: []string{`"id":"sluice-local"`, `"object":"list"`}},
		{name: "models needs a key", req: func(f fixture) request { return request{method: "GET", path: "/v1/models"} }, status: 401, code: "missing_api_key"},
		{name: "wrong method", req: func(f fixture) request { return request{method: "GET", path: "/v1/chat/completions", bearer: f.key} },
			status: 405, code: "method_not_allowed"},
		{name: "unknown route", req: func(f fixture) request { return request{method: "GET", path: "/v1/nothing", bearer: f.key} },
			status: 404, code: "not_found"},
		{name: "session token is not an API key", req: func(f fixture) request { return chatReq(f.member, chatBody)(f) }, status: 401, code: "malformed_api_key"},
	})
}

func TestManagementAPIScenarios(t *testing.T) {
	post := func(path, body string, who func(fixture) string) func(fixture) request {
		return func(f fixture) request {
			r := request{method: "POST", path: path, body: body}
			if who != nil {
				r.bearer = who(f)
			}
			return r
		}
	}
	member := func(f fixture) string { return f.member }
	admin := func(f fixture) string { return f.admin }
	runScenarios(t, []scenario{
		{name: "signup bad json", req: post("/api/auth/signup", `{"email":`, nil), status: 400, code: "invalid_json"},
		{name: "signup empty body", req: post("/api/auth/signup", ``, nil), status: 400, code: "invalid_json"},
		{name: "signup unknown field", req: post("/api/auth/signup", `{"email":"x@example.com","pasword":"password123","organization":"X"}`, nil), status: 400, code: "invalid_json", contains: []string{"pasword"}},
		{name: "signup short password", req: post("/api/auth/signup", `{"email":"x@example.com","password":"short","organization":"X"}`, nil), status: 422, code: "unprocessable", contains: []string{"at least 8"}},
		{name: "signup long password", req: post("/api/auth/signup", `{"email":"x@example.com","password":"`+strings.Repeat("p", 73)+`","organization":"X"}`, nil), status: 422, code: "unprocessable", contains: []string{"at most 72"}},
		{name: "signup bad email", req: post("/api/auth/signup", `{"email":"nobody","password":"password123","organization":"X"}`, nil), status: 422, code: "unprocessable"},
		{name: "signup taken email", req: post("/api/auth/signup", `{"email":"MEMBER@example.com","password":"password123","organization":"X"}`, nil), status: 409, code: "email_taken"},
		{name: "signup ok", req: post("/api/auth/signup", `{"email":"new@example.com","password":"password123","organization":"New"}`, nil), status: 201,
			contains: []string{`"token":"`, `"tier":"free"`, `"role":"owner"`}, notContains: []string{"password"}},
		{name: "login wrong password", req: post("/api/auth/login", `{"email":"member@example.com","password":"wrong-password"}`, nil), status: 401, code: "invalid_credentials"},
		{name: "login unknown email", req: post("/api/auth/login", `{"email":"ghost@example.com","password":"password123"}`, nil), status: 401, code: "invalid_credentials"},
		{name: "login ok", req: post("/api/auth/login", `{"email":"Member@Example.com","password":"password123"}`, nil), status: 200, contains: []string{`"token":"`}},
		{name: "tokens need a session", req: func(f fixture) request { return request{method: "GET", path: "/api/tokens"} }, status: 401, code: "missing_session"},
		{name: "tokens bad session", req: func(f fixture) request { return request{method: "GET", path: "/api/tokens", bearer: "a.b.c"} }, status: 401, code: "invalid_session"},
		{name: "API key is not a session", req: func(f fixture) request { return request{method: "GET", path: "/api/tokens", bearer: f.key} }, status: 401, code: "invalid_session"},
		{name: "list tokens", req: func(f fixture) request { return request{method: "GET", path: "/api/tokens", bearer: f.member} }, status: 200,
			contains: []string{`"status":"active"`, `"status":"revoked"`, `"status":"expired"`, `"prefix":"sk_sluice_`}, notContains: []string{`"hash"`, `"token":`}},
		{name: "create token empty name", req: post("/api/tokens", `{"name":""}`, member), status: 422, code: "unprocessable"},
		{name: "create token bad expiry", req: post("/api/tokens", `{"name":"x","expires_in_days":-1}`, member), status: 422, code: "unprocessable"},
		{name: "create token expiry", req: post("/api/tokens", `{"name":"x","expires_in_days":30}`, member), status: 201, contains: []string{`"token":"sk_sluice_`, `"expires_at":"20`}},
		{name: "create token wrong type", req: post("/api/tokens", `{"name":1}`, member), status: 400, code: "invalid_json", contains: []string{"name"}},
		{name: "revoke bad id", req: func(f fixture) request { return request{method: "DELETE", path: "/api/tokens/abc", bearer: f.member} }, status: 404, code: "not_found"},
		{name: "revoke missing id", req: func(f fixture) request {
			return request{method: "DELETE", path: "/api/tokens/999999", bearer: f.member}
		}, status: 404, code: "not_found"},
		{name: "usage", req: func(f fixture) request { return request{method: "GET", path: "/api/usage", bearer: f.member} }, status: 200,
			contains: []string{`"today":{"requests":`, `"month":{"requests":`}},
		{name: "tier edit by member", req: func(f fixture) request {
			return request{method: "PUT", path: "/api/admin/tiers/free", bearer: f.member, body: `{"capacity":5}`}
		}, status: 403, code: "forbidden"},
		{name: "tier edit unknown tier", req: func(f fixture) request {
			return request{method: "PUT", path: "/api/admin/tiers/gold", bearer: admin(f), body: `{"capacity":5}`}
		}, status: 404, code: "not_found"},
		{name: "tier edit invalid", req: func(f fixture) request {
			return request{method: "PUT", path: "/api/admin/tiers/free", bearer: admin(f), body: `{"capacity":0}`}
		}, status: 422, code: "unprocessable"},
		{name: "tier edit typo", req: func(f fixture) request {
			return request{method: "PUT", path: "/api/admin/tiers/free", bearer: admin(f), body: `{"refil_per_sec":1}`}
		}, status: 400, code: "invalid_json"},
		{name: "org tier unknown tier", req: func(f fixture) request {
			return request{method: "PUT", path: "/api/admin/organizations/" + itoa(f.memberOrgID) + "/tier", bearer: admin(f), body: `{"tier":"gold"}`}
		}, status: 404, code: "not_found"},
		{name: "org tier missing tier", req: func(f fixture) request {
			return request{method: "PUT", path: "/api/admin/organizations/" + itoa(f.memberOrgID) + "/tier", bearer: admin(f), body: `{}`}
		}, status: 422, code: "unprocessable"},
		{name: "org tier unknown org", req: func(f fixture) request {
			return request{method: "PUT", path: "/api/admin/organizations/999999/tier", bearer: admin(f), body: `{"tier":"premium"}`}
		}, status: 404, code: "not_found"},
		{name: "unknown api route", req: func(f fixture) request { return request{method: "GET", path: "/api/nothing", bearer: f.member} }, status: 404, code: "not_found"},
	})
}
