package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// expectError checks an API error's status, code and message.
func expectError(t *testing.T, w interface {
	Result() *http.Response
}, status int, code, message string) {
	t.Helper()
	res := w.Result()
	var body struct {
		Error struct{ Code, Message string }
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil || res.StatusCode != status || body.Error.Code != code ||
		!strings.Contains(body.Error.Message, message) {
		t.Fatalf("got %d %+v, want %d %s %q", res.StatusCode, body.Error, status, code, message)
	}
}

// The billing API end to end on one node: prices, costs, series, budgets,
// invoices, upgrade requests and tiers.
func TestBillingAPI(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		ctx := context.Background()
		admin := e.login("admin@example.com", "admin-password")
		owner := e.signup("owner@example.com", "Acme")
		key, _ := e.apiToken(owner)
		other := e.signup("other@example.com", "Other")
		otherKey, _ := e.apiToken(other)
		u, _ := e.store.UserByEmail(ctx, "owner@example.com")
		hash, _ := bcrypt.GenerateFromPassword([]byte("password123"), bcrypt.MinCost)
		testdb.AddMember(t, db, u.LastOrgID, "member@example.com", string(hash), models.RoleMember)
		member := e.login("member@example.com", "password123")

		// Prices: admins only, decimal strings, flagged when missing.
		w := e.do(request{method: "GET", path: "/api/admin/prices", bearer: admin})
		if w.Code != 200 || !strings.Contains(w.Body.String(), `{"model":"sluice-local","priced":false}`) {
			t.Fatalf("unpriced: %d %s", w.Code, w.Body.String())
		}
		expectError(t, e.do(request{method: "PUT", path: "/api/admin/prices/sluice-local", bearer: owner, body: `{"input_per_mtok":"1"}`}),
			403, "forbidden", "this endpoint is for admins")
		expectError(t, e.do(request{method: "PUT", path: "/api/admin/prices/sluice-local", bearer: admin,
			body: `{"input_per_mtok":"0.0000001","output_per_mtok":"1"}`}), 400, "invalid_price", "input_per_mtok must be a decimal string")
		w = e.do(request{method: "PUT", path: "/api/admin/prices/sluice-local", bearer: admin,
			body: `{"input_per_mtok":"1.5","output_per_mtok":"3","cached_input_per_mtok":"0.75"}`})
		var price struct {
			Priced        bool      `json:"priced"`
			EffectiveFrom time.Time `json:"effective_from"`
		}
		if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &price) != nil || !price.Priced || price.EffectiveFrom.IsZero() {
			t.Fatalf("set price: %d %s", w.Code, w.Body.String())
		}
		if !strings.Contains(w.Body.String(), `"input_per_mtok":"1.50","output_per_mtok":"3.00","cached_input_per_mtok":"0.75"`) {
			t.Fatalf("price as decimal strings: %s", w.Body.String())
		}
		// A model name with a slash, as some providers spell them.
		if w := e.do(request{method: "PUT", path: "/api/admin/prices/meta-llama/Llama-3-8B", bearer: admin,
			body: `{"input_per_mtok":"0.2","output_per_mtok":"0.2"}`}); w.Code != 200 || !strings.Contains(w.Body.String(), `"model":"meta-llama/Llama-3-8B"`) {
			t.Fatalf("slash: %d %s", w.Code, w.Body.String())
		}

		// Calls cost exactly what they used at that price.
		var cost int64 // in picodollars: tokens x microdollars per million
		for range 3 {
			w := e.chat(key)
			var r struct {
				Usage struct {
					PromptTokens     int64 `json:"prompt_tokens"`
					CompletionTokens int64 `json:"completion_tokens"`
				} `json:"usage"`
			}
			if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &r) != nil {
				t.Fatalf("chat: %d %s", w.Code, w.Body.String())
			}
			cost += r.Usage.PromptTokens*1_500_000 + r.Usage.CompletionTokens*3_000_000
		}
		wantCost := formatPico(cost)
		w = e.do(request{method: "GET", path: "/api/usage/series?granularity=hour&group_by=model", bearer: owner})
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"model":"sluice-local","requests":3`) ||
			!strings.Contains(w.Body.String(), `"cost":"`+wantCost+`"`) {
			t.Fatalf("series (want cost %s): %d %s", wantCost, w.Code, w.Body.String())
		}
		expectError(t, e.do(request{method: "GET", path: "/api/usage/series?granularity=week", bearer: owner}),
			400, "invalid_granularity", "granularity must be hour or day")
		// Another organization sees none of it.
		if w := e.do(request{method: "GET", path: "/api/usage/series", bearer: other}); strings.Contains(w.Body.String(), "sluice-local") {
			t.Fatalf("another tenant's usage: %s", w.Body.String())
		}

		// Budgets: owners set them; a spent one refuses in OpenAI's shape.
		w = e.do(request{method: "GET", path: "/api/budget", bearer: owner})
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"monthly_limit":null`) || !strings.Contains(w.Body.String(), `"spent":"`+wantCost+`"`) {
			t.Fatalf("budget: %d %s", w.Code, w.Body.String())
		}
		expectError(t, e.do(request{method: "PUT", path: "/api/budget", bearer: member, body: `{"monthly_limit":"5.00"}`}),
			403, "owner_required", "only the organization's owners may set its budget")
		expectError(t, e.do(request{method: "PUT", path: "/api/budget", bearer: owner, body: `{"monthly_limit":5}`}),
			400, "invalid_amount", `monthly_limit must be a decimal string of dollars such as "10.00", or null`)
		w = e.do(request{method: "PUT", path: "/api/budget", bearer: owner, body: `{"monthly_limit":"0.0001","hard_stop":true}`})
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"monthly_limit":"0.0001"`) || !strings.Contains(w.Body.String(), `"hard_stop":true`) {
			t.Fatalf("set budget: %d %s", w.Code, w.Body.String())
		}
		w = e.chat(key)
		if w.Code != 429 || w.Header().Get("x-should-retry") != "false" ||
			!strings.Contains(w.Body.String(), `"type":"insufficient_quota","param":null,"code":"insufficient_quota"`) ||
			!strings.Contains(w.Body.String(), "more than is left of the organization's monthly budget") {
			t.Fatalf("over budget: %d %v %s", w.Code, w.Header(), w.Body.String())
		}
		if w := e.chat(otherKey); w.Code != 200 {
			t.Fatalf("another organization's budget is its own: %d", w.Code)
		}
		if w := e.do(request{method: "PUT", path: "/api/budget", bearer: owner, body: `{"monthly_limit":null}`}); w.Code != 200 {
			t.Fatalf("remove budget: %d", w.Code)
		}
		if w := e.chat(key); w.Code != 200 {
			t.Fatalf("after removing the budget: %d %s", w.Code, w.Body.String())
		}

		// Organization settings: a real zone, webhooks only to allowed hosts,
		// over https, at public addresses.
		expectError(t, e.do(request{method: "PUT", path: "/api/organization", bearer: owner, body: `{"time_zone":"Mars/Olympus"}`}),
			400, "invalid_time_zone", `"Mars/Olympus" is not an IANA time zone`)
		expectError(t, e.do(request{method: "PUT", path: "/api/organization", bearer: owner, body: `{"webhook_url":"https://169.254.169.254/x"}`}),
			400, "webhook_not_allowed", "169.254.169.254 is not among the hosts the operator allows")
		expectError(t, e.do(request{method: "PUT", path: "/api/organization", bearer: owner, body: `{"webhook_url":"https://127.0.0.1:9/hook"}`}),
			400, "webhook_not_allowed", "127.0.0.1 resolves to 127.0.0.1, a loopback address")
		expectError(t, e.do(request{method: "PUT", path: "/api/organization", bearer: owner, body: `{"webhook_url":"http://hooks.example.com/hook"}`}),
			400, "webhook_not_allowed", "webhooks are sent over https only")
		w = e.do(request{method: "PUT", path: "/api/organization", bearer: owner, body: `{"time_zone":"Asia/Shanghai","webhook_url":"https://hooks.example.com/hook"}`})
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"webhook_secret":"whsec_`) || !strings.Contains(w.Body.String(), `"time_zone":"Asia/Shanghai"`) {
			t.Fatalf("settings: %d %s", w.Code, w.Body.String())
		}
		var secret struct {
			WebhookSecret string `json:"webhook_secret"`
		}
		json.Unmarshal(w.Body.Bytes(), &secret)
		var dump []map[string]any
		db.Gorm.Raw("SELECT * FROM organizations").Scan(&dump)
		for _, row := range dump {
			for col, v := range row {
				if s, ok := v.(string); ok && strings.Contains(s, secret.WebhookSecret) {
					t.Fatalf("the webhook secret is stored in plain text in %s", col)
				}
			}
		}

		// Invoices: the live draft, its lines and CSV; another tenant's id is 404.
		w = e.do(request{method: "GET", path: "/api/invoices", bearer: owner})
		var list struct {
			Data []struct {
				ID                      int64
				Status, Total, Currency string
			}
		}
		if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &list) != nil || len(list.Data) != 1 || list.Data[0].Status != "draft" || list.Data[0].Currency != "USD" {
			t.Fatalf("invoices: %d %s", w.Code, w.Body.String())
		}
		id := itoa(list.Data[0].ID)
		w = e.do(request{method: "GET", path: "/api/invoices/" + id, bearer: owner})
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"kind":"usage"`) || !strings.Contains(w.Body.String(), `"model":"sluice-local","requests":4`) {
			t.Fatalf("invoice: %d %s", w.Code, w.Body.String())
		}
		w = e.do(request{method: "GET", path: "/api/invoices/" + id + "/csv", bearer: owner})
		if w.Code != 200 || w.Header().Get("Content-Type") != "text/csv; charset=utf-8" || !strings.HasPrefix(w.Body.String(), "period,kind,") ||
			!strings.Contains(w.Header().Get("Content-Disposition"), "attachment") {
			t.Fatalf("csv: %d %v %s", w.Code, w.Header(), w.Body.String())
		}
		expectError(t, e.do(request{method: "GET", path: "/api/invoices/" + id, bearer: other}), 404, "not_found", "invoice")
		expectError(t, e.do(request{method: "GET", path: "/api/invoices/" + id + "/csv", bearer: other}), 404, "not_found", "invoice")

		// Upgrade requests: one pending at a time; an approval moves the
		// organization, and its next request has the new limits.
		w = e.do(request{method: "POST", path: "/api/upgrade-requests", bearer: owner, body: `{"tier":"premium","note":"launch week"}`})
		if w.Code != 201 || !strings.Contains(w.Body.String(), `"status":"pending"`) || !strings.Contains(w.Body.String(), `"from_tier":"free"`) {
			t.Fatalf("request: %d %s", w.Code, w.Body.String())
		}
		expectError(t, e.do(request{method: "POST", path: "/api/upgrade-requests", bearer: owner, body: `{"tier":"premium"}`}),
			409, "conflict", "already has a pending request")
		expectError(t, e.do(request{method: "POST", path: "/api/upgrade-requests", bearer: other, body: `{"tier":"free"}`}),
			422, "unprocessable", "already on the free tier")
		var pending struct{ Data []struct{ ID int64 } }
		w = e.do(request{method: "GET", path: "/api/admin/upgrade-requests?status=pending", bearer: admin})
		if json.Unmarshal(w.Body.Bytes(), &pending) != nil || len(pending.Data) != 1 {
			t.Fatalf("pending: %s", w.Body.String())
		}
		expectError(t, e.do(request{method: "POST", path: "/api/admin/upgrade-requests/" + itoa(pending.Data[0].ID) + "/approve", bearer: owner}),
			403, "forbidden", "for admins")
		if w := e.do(request{method: "POST", path: "/api/admin/upgrade-requests/" + itoa(pending.Data[0].ID) + "/approve", bearer: admin}); w.Code != 200 ||
			!strings.Contains(w.Body.String(), `"status":"approved"`) {
			t.Fatalf("approve: %d %s", w.Code, w.Body.String())
		}
		expectError(t, e.do(request{method: "POST", path: "/api/admin/upgrade-requests/" + itoa(pending.Data[0].ID) + "/decline", bearer: admin}),
			409, "conflict", "already approved")
		if w := e.chat(key); w.Header().Get("x-ratelimit-limit-requests") != "200" {
			t.Fatalf("after the upgrade the premium limits apply: %v", w.Header())
		}

		// Tiers: created with plan fields, refused when invalid, deleted
		// only when nobody is on them.
		w = e.do(request{method: "POST", path: "/api/admin/tiers", bearer: admin,
			body: `{"name":"team","capacity":50,"refill_per_sec":1,"monthly_fee":"19.00","included_credit":"5","overage":"bill"}`})
		if w.Code != 201 || !strings.Contains(w.Body.String(), `"monthly_fee":"19.00","included_credit":"5.00","overage":"bill"`) {
			t.Fatalf("create tier: %d %s", w.Code, w.Body.String())
		}
		// Its terms are in force from its creation (to the second); an edit
		// of its limits keeps them, an edit of its fee is new terms from
		// then on.
		termsFrom := func(w *httptest.ResponseRecorder) time.Time {
			t.Helper()
			var out struct {
				TermsFrom time.Time `json:"terms_effective_from"`
			}
			if w.Code != 200 && w.Code != 201 || json.Unmarshal(w.Body.Bytes(), &out) != nil {
				t.Fatalf("%d %s", w.Code, w.Body.String())
			}
			return out.TermsFrom
		}
		created := termsFrom(w)
		if since := time.Since(created); since < 0 || since > time.Minute {
			t.Fatalf("terms of a new tier in force from %v", created)
		}
		if got := termsFrom(e.do(request{method: "PUT", path: "/api/admin/tiers/team", bearer: admin, body: `{"capacity":60}`})); !got.Equal(created) {
			t.Errorf("a capacity edit moved the terms to %v from %v", got, created)
		}
		if got := termsFrom(e.do(request{method: "PUT", path: "/api/admin/tiers/team", bearer: admin, body: `{"monthly_fee":"21.00"}`})); got.Before(created) || time.Since(got) > time.Minute {
			t.Errorf("a fee edit left the terms in force from %v (created %v)", got, created)
		}
		expectError(t, e.do(request{method: "POST", path: "/api/admin/tiers", bearer: admin, body: `{"name":"bad","capacity":5,"refill_per_sec":0}`}),
			422, "unprocessable", "refill_per_sec must be greater than 0")
		expectError(t, e.do(request{method: "POST", path: "/api/admin/tiers", bearer: admin, body: `{"name":"bad","capacity":5,"refill_per_sec":1,"refill_floor":2}`}),
			422, "unprocessable", "refill_floor must be from 0 to refill_per_sec")
		expectError(t, e.do(request{method: "POST", path: "/api/admin/tiers", bearer: admin, body: `{"name":"team","capacity":5,"refill_per_sec":1}`}),
			409, "conflict", "")
		expectError(t, e.do(request{method: "PUT", path: "/api/admin/tiers/team", bearer: admin, body: `{"overage":"maybe"}`}),
			422, "unprocessable", "overage must be bill or block")
		expectError(t, e.do(request{method: "DELETE", path: "/api/admin/tiers/free", bearer: admin}),
			409, "conflict", "the free tier is in use by")
		if w := e.do(request{method: "DELETE", path: "/api/admin/tiers/team", bearer: admin}); w.Code != 200 {
			t.Fatalf("delete tier: %d %s", w.Code, w.Body.String())
		}
		var entries int64
		db.Gorm.Model(&models.AuditEntry{}).Where("action IN ?", []string{"price.set", "organization.budget", "tier.create", "tier.delete", "upgrade.approved"}).Count(&entries)
		if entries < 6 {
			t.Fatalf("%d audit entries for the billing changes", entries)
		}
	})
}

// formatPico writes picodollars as the API's decimal strings.
func formatPico(n int64) string {
	whole, frac := n/1_000_000_000_000, n%1_000_000_000_000
	s := strings.TrimRight(strings.Repeat("0", 12-len(itoa(frac)))+itoa(frac), "0")
	for len(s) < 2 {
		s += "0"
	}
	return itoa(whole) + "." + s
}
