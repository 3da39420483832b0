package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/testredis"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// controlledToken creates an API token with body's settings and returns it
// and its id.
func (e *env) controlledToken(session, body string) (string, int64) {
	e.t.Helper()
	w := e.do(request{method: "POST", path: "/api/tokens", bearer: session, body: body})
	if w.Code != http.StatusCreated {
		e.t.Fatalf("create token %s: %d %s", body, w.Code, w.Body.String())
	}
	m := decode(e.t, w)
	return m["token"].(string), int64(m["id"].(float64))
}

// apiError is a management or OpenAI error answer's code and message.
func apiError(t *testing.T, w *httptest.ResponseRecorder) (code, message string) {
	t.Helper()
	var body struct {
		Error struct{ Code, Message, Type string }
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("not an error answer (%d): %q", w.Code, w.Body.String())
	}
	return body.Error.Code, body.Error.Message
}

// The controls are set at creation, checked with messages naming the
// field, shown in GET /api/tokens and written to the audit log.
func TestTokenControlsAreCheckedStoredAndListed(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		owner := e.signup("a@example.com", "A")
		expires := e.clock.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
		_, id := e.controlledToken(owner, `{"name":"ci","models":["sluice-local"," fast ","sluice-local"],"monthly_budget":"12.50",
			"requests_per_minute":10,"allowed_ips":["203.0.113.0/24","2001:db8::/32","198.51.100.7","::ffff:192.0.2.0/120"],
			"expires_at":"`+expires.Format(time.RFC3339)+`"}`)
		w := e.do(request{method: "GET", path: "/api/tokens", bearer: owner})
		var list struct {
			Data []struct {
				ID                int64
				Models            []string
				MonthlyBudget     *string    `json:"monthly_budget"`
				RequestsPerMinute *int64     `json:"requests_per_minute"`
				AllowedIPs        []string   `json:"allowed_ips"`
				ExpiresAt         *time.Time `json:"expires_at"`
			}
		}
		if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil || len(list.Data) != 1 {
			t.Fatalf("list: %s", w.Body.String())
		}
		got := list.Data[0]
		if got.ID != id || fmt.Sprint(got.Models) != "[sluice-local fast]" || got.MonthlyBudget == nil || *got.MonthlyBudget != "12.50" ||
			got.RequestsPerMinute == nil || *got.RequestsPerMinute != 10 ||
			fmt.Sprint(got.AllowedIPs) != "[203.0.113.0/24 2001:db8::/32 198.51.100.7/32 192.0.2.0/24]" ||
			got.ExpiresAt == nil || !got.ExpiresAt.Equal(expires) {
			t.Fatalf("listed %s", w.Body.String())
		}
		// A token without controls lists them as null.
		e.controlledToken(owner, `{"name":"plain"}`)
		w = e.do(request{method: "GET", path: "/api/tokens", bearer: owner})
		if !strings.Contains(w.Body.String(), `"models":null,"monthly_budget":null,"requests_per_minute":null,"allowed_ips":null`) {
			t.Fatalf("a token without controls: %s", w.Body.String())
		}
		entries, _, err := e.store.AuditEntries(context.Background(), models.AuditQuery{ActionPrefix: "token.create"})
		if err != nil || len(entries) == 0 || !strings.Contains(fmt.Sprint(entries), "ci: models sluice-local, fast; monthly_budget 12.50; requests_per_minute 10; allowed_ips 203.0.113.0/24") {
			t.Fatalf("audit: %+v %v", entries, err)
		}

		ips := make([]string, 33)
		for i := range ips {
			ips[i] = `"10.0.` + strconv.Itoa(i) + `.0/24"`
		}
		for _, tt := range []struct{ body, code, message string }{
			{`{"name":"x","models":[]}`, "invalid_models", "models must name at least one model or alias, or be null for every model"},
			{`{"name":"x","models":[""]}`, "invalid_models", "models[0] must be a model or alias name of 1 to 200 characters"},
			{`{"name":"x","models":"gpt-4o"}`, "invalid_models", "models must be an array of model or alias names, or null for none"},
			{`{"name":"x","allowed_ips":[` + strings.Join(ips, ",") + `]}`, "invalid_allowed_ips", "allowed_ips may name at most 32 networks (33 given)"},
			{`{"name":"x","allowed_ips":["10.0.0.1/8"]}`, "invalid_allowed_ips",
				"allowed_ips[0] 10.0.0.1/8 has bits set past its /8: write 10.0.0.0/8 for the network or 10.0.0.1/32 for the address"},
			{`{"name":"x","allowed_ips":["office"]}`, "invalid_allowed_ips", "allowed_ips[0] must be a network such as 203.0.113.0/24"},
			{`{"name":"x","allowed_ips":[]}`, "invalid_allowed_ips", "allowed_ips must name at least one network, or be null to allow any address"},
			{`{"name":"x","requests_per_minute":31}`, "invalid_requests_per_minute",
				"requests_per_minute may be at most 30, the free tier's rate (0.5 a second); 31 is above it"},
			{`{"name":"x","requests_per_minute":0}`, "invalid_requests_per_minute", "requests_per_minute must be a whole number of at least 1, or null for none"},
			{`{"name":"x","requests_per_minute":2.5}`, "invalid_requests_per_minute", "requests_per_minute must be a whole number of requests"},
			{`{"name":"x","monthly_budget":12.5}`, "invalid_monthly_budget", `monthly_budget must be a decimal string of dollars such as "12.50"`},
			{`{"name":"x","monthly_budget":"-1"}`, "invalid_monthly_budget", `monthly_budget must be a decimal string of dollars such as "12.50"`},
			{`{"name":"x","expires_at":"tomorrow"}`, "invalid_expires_at", `expires_at must be an RFC 3339 time such as "2027-01-31T00:00:00Z"`},
			{`{"name":"x","expires_at":"2020-01-01T00:00:00Z"}`, "invalid_expiry", "expires_at must be in the future"},
			{`{"name":"x","expires_in_days":30,"expires_at":"` + expires.Format(time.RFC3339) + `"}`, "invalid_expiry", "send expires_in_days or expires_at, not both"},
			{`{"name":"x","allowed_ip":["10.0.0.0/8"]}`, "invalid_json", `unknown field "allowed_ip"`},
		} {
			w := e.do(request{method: "POST", path: "/api/tokens", bearer: owner, body: tt.body})
			code, msg := apiError(t, w)
			if w.Code != http.StatusBadRequest || code != tt.code || !strings.Contains(msg, tt.message) {
				t.Errorf("%s: %d %s %q, want 400 %s %q", tt.body, w.Code, code, msg, tt.code, tt.message)
			}
		}
		w = e.do(request{method: "GET", path: "/api/tokens", bearer: owner})
		if n := len(decode(t, w)["data"].([]any)); n != 2 {
			t.Fatalf("refused tokens were made: %d tokens", n)
		}
	})
}

// PATCH changes what it names and keeps the rest; null removes a control;
// an owner changes any token of the organization, a member only their
// own; another organization's token is not found; every change is
// audited, and takes effect on the token's next request although it was
// cached.
func TestTokenPatch(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		owner := e.signup("owner@example.com", "A")
		stranger := e.signup("b@example.com", "B")
		ownerUser, _ := e.store.UserByEmail(context.Background(), "owner@example.com")
		testdb.AddMember(t, db, ownerUser.LastOrgID, "member@example.com", ownerUser.PasswordHash, models.RoleMember)
		member := e.login("member@example.com", "password123")
		key, id := e.controlledToken(owner, `{"name":"ci","models":["sluice-local"],"requests_per_minute":10}`)
		_, memberID := e.controlledToken(member, `{"name":"mine"}`)
		patch := func(session string, id int64, body string) *httptest.ResponseRecorder {
			return e.do(request{method: "PATCH", path: "/api/tokens/" + strconv.FormatInt(id, 10), bearer: session, body: body})
		}
		if w := e.chat(key); w.Code != 200 { // now cached
			t.Fatalf("chat: %d %s", w.Code, w.Body.String())
		}

		w := patch(owner, id, `{"models":["gpt-4o"],"monthly_budget":"3.00"}`)
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"models":["gpt-4o"],"monthly_budget":"3.00","requests_per_minute":10,"allowed_ips":null`) {
			t.Fatalf("patch: %d %s", w.Code, w.Body.String())
		}
		w = e.chat(key)
		if code, msg := apiError(t, w); w.Code != 404 || code != "model_not_found" || !strings.Contains(msg, "the model 'sluice-local' does not exist") {
			t.Fatalf("the next request, the token cached before: %d %s", w.Code, w.Body.String())
		}
		w = patch(owner, id, `{"models":null,"requests_per_minute":null,"name":"ci renamed"}`)
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"name":"ci renamed"`) ||
			!strings.Contains(w.Body.String(), `"models":null,"monthly_budget":"3.00","requests_per_minute":null`) {
			t.Fatalf("clearing: %d %s", w.Code, w.Body.String())
		}
		if w := e.chat(key); w.Code != 200 || w.Header().Get("X-Ratelimit-Limit-Requests") != "30" {
			t.Fatalf("after clearing: %d %v", w.Code, w.Header())
		}

		// Members change their own tokens only.
		if w := patch(member, memberID, `{"requests_per_minute":5}`); w.Code != 200 {
			t.Fatalf("a member's own token: %d %s", w.Code, w.Body.String())
		}
		w = patch(member, id, `{"requests_per_minute":5}`)
		if code, msg := apiError(t, w); w.Code != 403 || code != "not_your_token" || msg != "members may change only the tokens they created; ask an owner of the organization" {
			t.Fatalf("a member on the owner's token: %d %s", w.Code, w.Body.String())
		}
		if w := patch(owner, memberID, `{"requests_per_minute":6}`); w.Code != 200 {
			t.Fatalf("the owner on a member's token: %d %s", w.Code, w.Body.String())
		}
		if w := patch(stranger, id, `{"requests_per_minute":5}`); w.Code != 404 {
			t.Fatalf("another organization: %d %s", w.Code, w.Body.String())
		}
		w = patch(owner, id, `{"requests_per_minute":300}`)
		if code, _ := apiError(t, w); w.Code != 400 || code != "invalid_requests_per_minute" {
			t.Fatalf("above the tier: %d %s", w.Code, w.Body.String())
		}

		// Expiry: set, then cleared; an expired token answers 401 as ever.
		at := e.clock.Now().Add(time.Hour).UTC().Truncate(time.Second)
		if w := patch(owner, id, `{"expires_at":"`+at.Format(time.RFC3339)+`"}`); w.Code != 200 || !strings.Contains(w.Body.String(), at.Format(time.RFC3339)) {
			t.Fatalf("set expiry: %d %s", w.Code, w.Body.String())
		}
		e.clock.Advance(2 * time.Hour)
		if w := e.chat(key); w.Code != 401 || errorCode(t, w) != "expired_api_key" {
			t.Fatalf("expired: %d %s", w.Code, w.Body.String())
		}
		owner = e.login("owner@example.com", "password123") // the session expired too
		if w := patch(owner, id, `{"expires_at":null}`); w.Code != 200 || !strings.Contains(w.Body.String(), `"expires_at":null`) {
			t.Fatalf("clear expiry: %d %s", w.Code, w.Body.String())
		}
		if w := e.chat(key); w.Code != 200 {
			t.Fatalf("an expiry cleared: %d %s", w.Code, w.Body.String())
		}

		entries, _, err := e.store.AuditEntries(context.Background(), models.AuditQuery{ActionPrefix: "token.update"})
		if err != nil {
			t.Fatal(err)
		}
		log := fmt.Sprint(entries)
		for _, want := range []string{"ci: models sluice-local -> gpt-4o; monthly_budget none -> 3.00",
			"ci renamed: name ci -> ci renamed; models gpt-4o -> all; requests_per_minute 10 -> none", "mine: requests_per_minute none -> 5",
			"expires_at never -> " + at.Format(time.RFC3339), "expires_at " + at.Format(time.RFC3339) + " -> never"} {
			if !strings.Contains(log, want) {
				t.Errorf("the audit log has no %q: %s", want, log)
			}
		}
		if len(entries) != 6 {
			t.Errorf("%d token.update entries, want 6 (refused changes are not audited)", len(entries))
		}

		// A revoked token's settings no longer change.
		e.do(request{method: "DELETE", path: "/api/tokens/" + strconv.FormatInt(id, 10), bearer: owner})
		w = patch(owner, id, `{"name":"zombie"}`)
		if code, _ := apiError(t, w); w.Code != 409 || code != "token_revoked" {
			t.Fatalf("revoked: %d %s", w.Code, w.Body.String())
		}
	})
}

// An expired token given a later expiry holds a place under the tier's
// token limit again: refused when the organization has no room.
func TestTokenPatchRevivingCountsAgainstTheLimit(t *testing.T) {
	d := testdb.SQLite(t)
	e := newEnv(t, d)
	ctx := context.Background()
	admin, _ := e.store.UserByEmail(ctx, "admin@example.com")
	free, _ := e.store.TierByName(ctx, "free")
	settings := free.Settings()
	settings.MaxAPITokens = 2
	if _, err := e.acc.UpdateTier(ctx, admin, "free", settings); err != nil {
		t.Fatal(err)
	}
	owner := e.signup("a@example.com", "A")
	_, old := e.controlledToken(owner, `{"name":"old","expires_at":"`+e.clock.Now().Add(time.Hour).UTC().Format(time.RFC3339)+`"}`)
	e.controlledToken(owner, `{"name":"second"}`)
	if err := d.Gorm.Exec(`UPDATE api_tokens SET expires_at = ? WHERE id = ?`, time.Now().UTC().Add(-time.Minute), old).Error; err != nil {
		t.Fatal(err)
	}
	e.controlledToken(owner, `{"name":"third"}`) // the expired one holds no place
	later := e.clock.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)
	w := e.do(request{method: "PATCH", path: "/api/tokens/" + strconv.FormatInt(old, 10), bearer: owner, body: `{"expires_at":"` + later + `"}`})
	if code, msg := apiError(t, w); w.Code != 409 || code != "token_limit_reached" || !strings.Contains(msg, "the free tier allows 2 active API tokens") {
		t.Fatalf("reviving past the limit: %d %s", w.Code, w.Body.String())
	}
}

// A token limited to some models uses those (an alias counts as a model)
// and no other, on every generation route: the others answer 404
// model_not_found in the very words of a model that does not exist, at
// the same cost, and GET /v1/models lists only the allowed.
func TestTokenModelsAllowList(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		g := newGenEnv(t, db)
		admin := g.login("admin@example.com", "admin-password")
		g.addKey(t, admin, "mock", g.mockURL, "sk-mock-key")
		if w := g.do(request{method: "POST", path: "/api/admin/aliases", bearer: admin,
			body: `{"name":"fast","targets":[{"model":"sluice-local"}]}`}); w.Code != 201 {
			t.Fatalf("alias: %d %s", w.Code, w.Body.String())
		}
		owner := g.signup("a@example.com", "A")
		key, _ := g.controlledToken(owner, `{"name":"narrow","models":["gpt-4o-mini","fast"]}`)
		free, _ := g.controlledToken(owner, `{"name":"free"}`)

		for _, tt := range []struct{ path, body string }{
			{"/v1/chat/completions", chatBody},
			{"/v1/chat/completions", `{"model":"sluice-local","stream":true,"messages":[{"role":"user","content":"hello"}]}`},
			{"/v1/responses", `{"model":"sluice-local","input":"hello"}`},
			{"/v1/embeddings", `{"model":"sluice-local","input":"hello"}`},
			{"/v1/jobs", chatBody}, // refused when queued, not when it runs
		} {
			refused := g.do(request{method: "POST", path: tt.path, bearer: key, body: tt.body})
			unknown := g.do(request{method: "POST", path: tt.path, bearer: free, body: strings.Replace(tt.body, "sluice-local", "no-such-model", 1)})
			code, msg := apiError(t, refused)
			_, unknownMsg := apiError(t, unknown)
			if refused.Code != 404 || code != "model_not_found" || msg != strings.Replace(unknownMsg, "no-such-model", "sluice-local", 1) {
				t.Errorf("%s %s: %d %s; an unknown model: %d %s", tt.path, tt.body, refused.Code, refused.Body.String(), unknown.Code, unknown.Body.String())
			}
			if got, want := refused.Header().Get("X-Ratelimit-Limit-Requests"), unknown.Header().Get("X-Ratelimit-Limit-Requests"); got == "" || got != want {
				t.Errorf("%s: a refused model's rate-limit headers %q, an unknown one's %q: both cost a request", tt.path, got, want)
			}
		}
		// Anthropic's Messages routes, in their shape.
		for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
			h := map[string]string{"anthropic-version": "2023-06-01"}
			send := func(key, model string) *httptest.ResponseRecorder {
				h["x-api-key"] = key
				return g.do(request{method: "POST", path: path, header: h, body: strings.Replace(localMessage, "sluice-local", model, 1)})
			}
			refused, unknown := send(key, "sluice-local"), send(free, "no-such-model")
			anthropicError(t, refused, 404, "not_found_error", "the model 'sluice-local' does not exist")
			var a, b struct {
				Error struct{ Type, Message string }
			}
			_ = json.Unmarshal(refused.Body.Bytes(), &a)
			_ = json.Unmarshal(unknown.Body.Bytes(), &b)
			if a.Error.Type != b.Error.Type || a.Error.Message != strings.Replace(b.Error.Message, "no-such-model", "sluice-local", 1) {
				t.Errorf("%s: refused %s, unknown %s", path, refused.Body.String(), unknown.Body.String())
			}
		}
		if w := g.do(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: gptBody}); w.Code != 200 {
			t.Errorf("an allowed model: %d %s", w.Code, w.Body.String())
		}
		if w := g.do(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: strings.Replace(chatBody, "sluice-local", "fast", 1)}); w.Code != 200 {
			t.Errorf("an allowed alias (to a model the token may not name itself): %d %s", w.Code, w.Body.String())
		}
		var list struct{ Data []struct{ ID string } }
		w := g.do(request{method: "GET", path: "/v1/models", bearer: key})
		if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil || fmt.Sprint(list.Data) != "[{fast} {gpt-4o-mini}]" {
			t.Errorf("models of the narrow token: %s", w.Body.String())
		}
		w = g.do(request{method: "GET", path: "/v1/models", bearer: free})
		if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil || fmt.Sprint(list.Data) != "[{sluice-local} {fast} {gpt-4o-mini}]" {
			t.Errorf("models of an unrestricted token: %s", w.Body.String())
		}
	})
}

// A token's requests_per_minute is a bucket under its organization's,
// charged in the same call (with the tokens-per-minute bucket too, on a
// completion): refused requests cost the organization nothing; the
// headers show the tighter limit; a lower tier binds the token too.
func TestTokenRequestsPerMinute(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		owner := e.signup("a@example.com", "A")
		key, _ := e.controlledToken(owner, `{"name":"slow","requests_per_minute":3}`)
		other, _ := e.apiToken(owner)
		for i := range 3 {
			w := e.chat(key)
			if w.Code != 200 || w.Header().Get("X-Ratelimit-Limit-Requests") != "3" || w.Header().Get("X-Ratelimit-Remaining-Requests") != strconv.Itoa(2-i) ||
				w.Header().Get("X-Ratelimit-Limit-Tokens") != "20000" {
				t.Fatalf("request %d: %d %v", i, w.Code, w.Header())
			}
		}
		for _, w := range []*httptest.ResponseRecorder{e.chat(key), e.do(request{method: "GET", path: "/v1/models", bearer: key})} {
			code, msg := apiError(t, w)
			if w.Code != 429 || code != "rate_limit_exceeded" || w.Header().Get("Retry-After") != "20" ||
				w.Header().Get("X-Ratelimit-Limit-Requests") != "3" || w.Header().Get("X-Ratelimit-Remaining-Requests") != "0" ||
				msg != "rate limit reached for requests on this API key (its requests_per_minute of 3) (limit 3, remaining 0); retry after 20s" {
				t.Fatalf("over the token's rate: %d %s %v", w.Code, w.Body.String(), w.Header())
			}
		}
		// The organization's bucket (30) paid for the three admitted only.
		if w := e.do(request{method: "GET", path: "/v1/models", bearer: other}); w.Code != 200 || w.Header().Get("X-Ratelimit-Remaining-Requests") != "26" {
			t.Fatalf("the organization's bucket after the refusals: %d %v", w.Code, w.Header())
		}
		// The tier lowered below the token's rate: the lower applies.
		ctx := context.Background()
		admin, _ := e.store.UserByEmail(ctx, "admin@example.com")
		free, _ := e.store.TierByName(ctx, "free")
		settings := free.Settings()
		settings.Capacity = 2
		if _, err := e.acc.UpdateTier(ctx, admin, "free", settings); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Hour)
		if w := e.chat(key); w.Code != 200 || w.Header().Get("X-Ratelimit-Limit-Requests") != "2" {
			t.Fatalf("under a lowered tier: %d %v", w.Code, w.Header())
		}
	})
}

// A token limited to some networks answers 403 ip_not_allowed, in
// OpenAI's shape, to a request from anywhere else, on every /v1 route;
// the address is the connection's, or X-Forwarded-For's only from a
// trusted proxy.
func TestTokenAllowedIPs(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	owner := e.signup("a@example.com", "A")
	key, _ := e.controlledToken(owner, `{"name":"office","allowed_ips":["203.0.113.0/24","2001:db8::/32"]}`)
	direct := e.withOps(Ops{})
	proxied := e.withOps(Ops{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	call := func(h http.Handler, path, remote, forwarded string) *httptest.ResponseRecorder {
		method, body := "GET", ""
		if path == "/v1/chat/completions" {
			method, body = "POST", chatBody
		}
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		if forwarded != "" {
			req.Header.Set("X-Forwarded-For", forwarded)
		}
		return serve(h, req, remote)
	}
	for _, tt := range []struct {
		name              string
		h                 http.Handler
		remote, forwarded string
		from              string // "" when allowed
	}{
		{"in the network", direct, "203.0.113.9:5000", "", ""},
		{"IPv6", direct, "[2001:db8::7]:5000", "", ""},
		{"IPv4 written as IPv6", direct, "[::ffff:203.0.113.9]:5000", "", ""},
		{"elsewhere", direct, "198.51.100.1:5000", "", "198.51.100.1"},
		{"a forged X-Forwarded-For without a trusted proxy", direct, "198.51.100.1:5000", "203.0.113.9", "198.51.100.1"},
		{"behind the proxy", proxied, "10.1.2.3:40000", "203.0.113.9", ""},
		{"behind the proxy, elsewhere", proxied, "10.1.2.3:40000", "198.51.100.1", "198.51.100.1"},
		{"behind the proxy, a forged entry in front", proxied, "10.1.2.3:40000", "203.0.113.9, 198.51.100.1", "198.51.100.1"},
	} {
		for _, path := range []string{"/v1/chat/completions", "/v1/models", "/v1/jobs"} {
			w := call(tt.h, path, tt.remote, tt.forwarded)
			if tt.from == "" {
				if w.Code != 200 {
					t.Errorf("%s, %s: %d %s", tt.name, path, w.Code, w.Body.String())
				}
				continue
			}
			var body struct {
				Error struct{ Code, Type, Message string }
			}
			_ = json.Unmarshal(w.Body.Bytes(), &body)
			if w.Code != 403 || body.Error.Code != "ip_not_allowed" || body.Error.Type != "permission_error" ||
				body.Error.Message != "this API key may not be used from "+tt.from+": its allowed_ips do not include the address" {
				t.Errorf("%s, %s: %d %s", tt.name, path, w.Code, w.Body.String())
			}
		}
	}
}

// budgetEnv is a free organization whose tier bills overage (so nothing
// but budgets limits its spending) and whose tokens-per-minute bucket is
// off, with sluice-local priced 1.00 in and 2.00 out per million tokens:
// budgetBody's worst case is 9 x 1 + 100 x 2 = 209 microdollars.
func budgetEnv(t *testing.T, e *env) (admin, owner string) {
	t.Helper()
	admin = e.login("admin@example.com", "admin-password")
	for path, body := range map[string]string{
		"/api/admin/tiers/free":          `{"tokens_per_minute":0,"overage":"bill","capacity":1000,"refill_per_sec":1000,"refill_floor":1}`,
		"/api/admin/prices/sluice-local": `{"input_per_mtok":"1","output_per_mtok":"2"}`,
	} {
		if w := e.do(request{method: "PUT", path: path, bearer: admin, body: body}); w.Code != 200 {
			t.Fatalf("%s: %d %s", path, w.Code, w.Body.String())
		}
	}
	return admin, e.signup("a@example.com", "A")
}

const budgetBody = `{"model":"sluice-local","max_tokens":100,"messages":[{"role":"user","content":"hello"}]}`

// A token's budget is reserved in the same ledger as its organization's,
// both or neither, and settled at the real cost on both; a refusal says
// which budget, and that retrying will not help.
func TestTokenBudget(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		_, owner := budgetEnv(t, e)
		// Room for one worst case (209 microdollars) and less than two: the
		// first costs 164 (6 prompt and 79 completion tokens).
		key, id := e.controlledToken(owner, `{"name":"capped","monthly_budget":"0.00025"}`)
		ask := func() *httptest.ResponseRecorder {
			return e.do(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: budgetBody})
		}
		if w := ask(); w.Code != 200 {
			t.Fatalf("first: %d %s", w.Code, w.Body.String())
		}
		ctx := context.Background()
		u, _ := e.store.UserByEmail(ctx, "a@example.com")
		tokBal, err := e.pipe.Ledger.Balance(ctx, metering.TokenAccount(u.LastOrgID, id), e.clock.Now())
		if err != nil || tokBal.Reserved != 0 || tokBal.Spent == 0 || tokBal.Spent >= 209*money.Amount(1e6) {
			t.Fatalf("the token's balance after one request: %+v %v (settled at the real cost, below the worst case)", tokBal, err)
		}
		// Room for less than another worst case: refused, naming the token's budget.
		w := ask()
		code, msg := apiError(t, w)
		if w.Code != 429 || code != "insufficient_quota" || w.Header().Get("x-should-retry") != "false" ||
			!strings.Contains(msg, "this request may cost up to $0.000209 (9 prompt tokens and 100 completion tokens), more than is left of this API key's monthly budget ($") ||
			!strings.Contains(msg, "($0.000086 of $0.00025 this month)") {
			t.Fatalf("over the token's budget: %d %s %v", w.Code, w.Body.String(), w.Header())
		}
		// The organization's budget refuses first: the token's balance holds nothing of it.
		if w := e.do(request{method: "PUT", path: "/api/budget", bearer: owner, body: `{"monthly_limit":"0.0001","hard_stop":true}`}); w.Code != 200 {
			t.Fatalf("budget: %d %s", w.Code, w.Body.String())
		}
		wide, _ := e.controlledToken(owner, `{"name":"wide","monthly_budget":"1.00"}`)
		w = e.do(request{method: "POST", path: "/v1/chat/completions", bearer: wide, body: budgetBody})
		if code, msg := apiError(t, w); w.Code != 429 || code != "insufficient_quota" || !strings.Contains(msg, "the organization's monthly budget") {
			t.Fatalf("over the organization's budget: %d %s", w.Code, w.Body.String())
		}
		wideID := int64(0)
		for _, tok := range decode(t, e.do(request{method: "GET", path: "/api/tokens", bearer: owner}))["data"].([]any) {
			if m := tok.(map[string]any); m["name"] == "wide" {
				wideID = int64(m["id"].(float64))
			}
		}
		if b, err := e.pipe.Ledger.Balance(ctx, metering.TokenAccount(u.LastOrgID, wideID), e.clock.Now()); err != nil || b != (metering.Balance{}) {
			t.Fatalf("a refusal by the organization's budget left %+v on the token's (%v)", b, err)
		}
		// Both settle at the real cost: the organization spent what the token did.
		orgBal, _ := e.pipe.Ledger.Balance(ctx, metering.OrgAccount(u.LastOrgID), e.clock.Now())
		tokBal, _ = e.pipe.Ledger.Balance(ctx, metering.TokenAccount(u.LastOrgID, id), e.clock.Now())
		if orgBal.Spent != tokBal.Spent || orgBal.Reserved != 0 || tokBal.Reserved != 0 {
			t.Fatalf("organization %+v, token %+v: both spent the one request", orgBal, tokBal)
		}
	})
}

// A budget set again on a token counts what the token spent while it had
// none: its balance is brought up to what the rollups billed it.
func TestTokenBudgetSetAgainCountsWhatWasSpent(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	_, owner := budgetEnv(t, e)
	key, id := e.controlledToken(owner, `{"name":"capped","monthly_budget":"1.00"}`)
	patch := func(body string) {
		t.Helper()
		if w := e.do(request{method: "PATCH", path: "/api/tokens/" + strconv.FormatInt(id, 10), bearer: owner, body: body}); w.Code != 200 {
			t.Fatalf("patch %s: %d %s", body, w.Code, w.Body.String())
		}
	}
	ask := func() int {
		return e.do(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: budgetBody}).Code
	}
	if c := ask(); c != 200 { // 164 microdollars, on the token's balance
		t.Fatalf("first: %d", c)
	}
	patch(`{"monthly_budget":null}`)
	for range 2 { // 328 more, untracked on the token's balance
		if c := ask(); c != 200 {
			t.Fatalf("without a budget: %d", c)
		}
	}
	// 492 spent + a worst case of 209 passes 600: refused. Without the
	// resync the balance would say 164, and admit it.
	patch(`{"monthly_budget":"0.0006"}`)
	if c := ask(); c != 429 {
		t.Fatalf("with the budget set again: %d, want 429", c)
	}
}

// A token's budget holds across gateway instances: two nodes on one
// database (its ledger rows, as a cluster without Redis keeps them) or on
// one Redis, twenty requests at once with room for one request's worst
// case: exactly one is admitted, the others are refused for the token's
// budget.
func TestTokenBudgetHoldsAcrossNodes(t *testing.T) {
	run := func(t *testing.T, db *models.DB, ledger func(*models.Store) metering.Ledger) {
		a, b := newEnv(t, db), newEnv(t, db)
		for _, e := range []*env{a, b} {
			// Usage and rejections are not written as they happen, as the
			// batching recorder does not: concurrent synchronous rollup
			// writes are this harness's, not the gateway's.
			e.pipe.Ledger, e.pipe.Recorder = ledger(e.store), nopRecorder{}
			e.rebuild()
		}
		_, owner := budgetEnv(t, a)
		// a's tier edit and price, as the bus and the price reload bring them.
		if err := b.dir.ReloadTiers(context.Background()); err != nil {
			t.Fatal(err)
		}
		if w := b.do(request{method: "PUT", path: "/api/admin/prices/sluice-local", bearer: b.login("admin@example.com", "admin-password"),
			body: `{"input_per_mtok":"1","output_per_mtok":"2"}`}); w.Code != 200 {
			t.Fatalf("price on b: %d %s", w.Code, w.Body.String())
		}
		key, _ := a.controlledToken(owner, `{"name":"one","monthly_budget":"0.000209"}`)
		var wg sync.WaitGroup
		codes := make(chan int, 20)
		for i := range 20 {
			node := []*env{a, b}[i%2]
			wg.Go(func() {
				w := node.do(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: budgetBody})
				if w.Code == 429 {
					if code, msg := apiError(t, w); code != "insufficient_quota" || w.Header().Get("x-should-retry") != "false" ||
						!strings.Contains(msg, "this API key's monthly budget") {
						t.Errorf("refusal: %s %v", w.Body.String(), w.Header())
					}
				}
				codes <- w.Code
			})
		}
		wg.Wait()
		close(codes)
		admitted := 0
		for c := range codes {
			switch c {
			case 200:
				admitted++
			case 429:
			default:
				t.Errorf("status %d", c)
			}
		}
		if admitted != 1 {
			t.Fatalf("%d of 20 admitted with a token budget worth one", admitted)
		}
	}
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		run(t, db, func(s *models.Store) metering.Ledger { return metering.NewSQLLedger(s, metering.StoreSeed(s)) })
	})
	t.Run("redis", func(t *testing.T) {
		client, prefix := testredis.Client(t), testredis.Prefix()+"budget:"
		run(t, testdb.SQLite(t), func(s *models.Store) metering.Ledger {
			return metering.NewRedisLedger(client, prefix, metering.StoreSeed(s))
		})
	})
}
