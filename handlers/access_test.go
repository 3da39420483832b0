package handlers

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

func TestTenantIsolation(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		a := e.signup("a@example.com", "Org A")
		b := e.signup("b@example.com", "Org B")
		bKey, bID := e.apiToken(b)
		e.chat(bKey)
		path := "/api/tokens/" + itoa(bID)

		if w := e.do(request{method: "DELETE", path: path, bearer: a}); w.Code != http.StatusNotFound || errorCode(t, w) != "not_found" {
			t.Errorf("JSON revoke of another org's token: %d %s", w.Code, w.Body.String())
		}
		if w := e.do(request{method: "GET", path: "/api/tokens", bearer: a}); strings.Contains(w.Body.String(), `"id":`+itoa(bID)+`,`) {
			t.Errorf("JSON list shows another org's token: %s", w.Body.String())
		}
		if w := e.do(request{method: "GET", path: "/api/usage", bearer: a}); !strings.Contains(w.Body.String(), `"today":{"requests":0`) {
			t.Errorf("JSON usage counts another org's requests: %s", w.Body.String())
		}

		br := e.browserLogin(t, "a@example.com", "password123")
		if w := br.do("POST", "/tokens/"+itoa(bID)+"/revoke", url.Values{}, nil); w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), `data-testid="error-page"`) {
			t.Errorf("browser revoke of another org's token: %d", w.Code)
		}
		if w := br.do("GET", "/tokens", nil, nil); strings.Contains(w.Body.String(), `data-token-id="`+itoa(bID)+`"`) {
			t.Errorf("browser list shows another org's token")
		}
		if w := br.do("GET", "/dashboard", nil, nil); strings.Contains(w.Body.String(), "Org B") {
			t.Errorf("dashboard shows another org")
		}
		if w := e.chat(bKey); w.Code != http.StatusOK {
			t.Fatalf("org B's token stopped working: %d", w.Code)
		}
	})
}

func TestRoleTable(t *testing.T) {
	db := testdb.SQLite(t)
	e := newEnv(t, db)
	owner := e.signup("owner@example.com", "Acme")
	u, _ := e.store.UserByEmail(t.Context(), "owner@example.com")
	hash, _ := bcrypt.GenerateFromPassword([]byte("password123"), bcrypt.MinCost)
	testdb.AddMember(t, db, u.LastOrgID, "member@example.com", string(hash), models.RoleMember)
	sessions := map[string]string{
		"anonymous": "",
		"member":    e.login("member@example.com", "password123"),
		"owner":     owner,
		"admin":     e.login("admin@example.com", "admin-password"),
	}
	org := itoa(u.LastOrgID)
	jsonRoutes := []struct{ method, path, body string }{
		{"GET", "/api/admin/tiers", ""},
		{"PUT", "/api/admin/tiers/free", `{"capacity":30}`},
		{"GET", "/api/admin/organizations", ""},
		{"PUT", "/api/admin/organizations/" + org + "/tier", `{"tier":"free"}`},
		{"GET", "/api/admin/audit", ""},
	}
	wantJSON := map[string]int{"anonymous": 401, "member": 403, "owner": 403, "admin": 200}
	for _, r := range jsonRoutes {
		for role, session := range sessions {
			w := e.do(request{method: r.method, path: r.path, bearer: session, body: r.body})
			if w.Code != wantJSON[role] {
				t.Errorf("%s %s as %s: %d, want %d", r.method, r.path, role, w.Code, wantJSON[role])
			}
		}
	}

	browsers := map[string]*browser{
		"anonymous": {e: e},
		"member":    e.browserLogin(t, "member@example.com", "password123"),
		"owner":     e.browserLogin(t, "owner@example.com", "password123"),
		"admin":     e.browserLogin(t, "admin@example.com", "admin-password"),
	}
	pageRoutes := []struct {
		method, path string
		form         url.Values
		adminStatus  int
	}{
		{"GET", "/admin/tiers", nil, 200},
		{"GET", "/admin/organizations", nil, 200},
		{"GET", "/admin/organizations/" + org, nil, 200},
		{"GET", "/admin/prices", nil, 200},
		{"GET", "/admin/audit", nil, 200},
		{"POST", "/admin/tiers/free", freeTierForm("30", "0.5"), 303},
		{"POST", "/admin/organizations/" + org + "/tier", url.Values{"tier": {"free"}}, 303},
	}
	for _, r := range pageRoutes {
		want := map[string]int{"anonymous": 303, "member": 403, "owner": 403, "admin": r.adminStatus}
		for role, b := range browsers {
			if w := b.do(r.method, r.path, r.form, nil); w.Code != want[role] {
				t.Errorf("%s %s as %s: %d, want %d", r.method, r.path, role, w.Code, want[role])
			}
		}
	}
	if w := browsers["member"].do("GET", "/dashboard", nil, nil); strings.Contains(w.Body.String(), `href="/admin/`) {
		t.Error("a member sees the admin link")
	}
	if w := browsers["admin"].do("GET", "/dashboard", nil, nil); !strings.Contains(w.Body.String(), `href="/admin/organizations"`) {
		t.Error("an admin does not see the admin link")
	}
}

func TestAdminEditsTierInTheBrowser(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	key, _ := e.apiToken(e.signup("a@example.com", "A"))
	admin := e.browserLogin(t, "admin@example.com", "admin-password")
	w := admin.do("POST", "/admin/tiers/free", freeTierForm("0", "1"), nil)
	if w.Code != 422 || !strings.Contains(w.Body.String(), "capacity must be between") {
		t.Fatalf("invalid capacity: %d", w.Code)
	}
	w = admin.do("POST", "/admin/tiers/free", freeTierForm("abc", "1"), nil)
	if w.Code != 422 || !strings.Contains(w.Body.String(), "need a number: capacity") {
		t.Fatalf("non-numeric capacity: %d", w.Code)
	}
	form := freeTierForm("12", "3")
	form.Set("tokens_per_minute", "900")
	form.Del("autotune") // an unticked checkbox is not sent
	w = admin.do("POST", "/admin/tiers/free", form, nil)
	if w.Code != http.StatusSeeOther {
		t.Fatalf("save: %d %s", w.Code, w.Body.String())
	}
	page := admin.do("GET", w.Header().Get("Location"), nil, nil)
	if !strings.Contains(page.Body.String(), `value="12"`) || !strings.Contains(page.Body.String(), "Tier saved") {
		t.Fatalf("the page does not show the saved tier")
	}
	if w := e.chat(key); w.Header().Get("x-ratelimit-limit-requests") != "12" || w.Header().Get("x-ratelimit-limit-tokens") != "900" {
		t.Fatalf("limits after browser edit: %s %s", w.Header().Get("x-ratelimit-limit-requests"), w.Header().Get("x-ratelimit-limit-tokens"))
	}
	if free, _ := e.store.TierByName(t.Context(), "free"); free.Autotune {
		t.Fatal("unticking autotune did not turn it off")
	}
}

// freeTierForm is the admin tier form as a browser sends it, with the free
// tier's defaults and the given capacity and refill.
func freeTierForm(capacity, refill string) url.Values {
	return url.Values{"capacity": {capacity}, "refill_per_sec": {refill}, "tokens_per_minute": {"20000"},
		"freeze_threshold": {"20"}, "freeze_minutes": {"10"}, "autotune": {"on"}, "refill_floor": {"0.3"}}
}
