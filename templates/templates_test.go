package templates

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"github.com/a-h/templ"
)

// render renders c the way a handler would and parses the result.
func render(t *testing.T, c templ.Component) (*goquery.Document, string) {
	t.Helper()
	var buf bytes.Buffer
	if err := c.Render(context.Background(), &buf); err != nil {
		t.Fatalf("render: %v", err)
	}
	html := buf.String()
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(html))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return doc, html
}

// byTestID finds elements by their data-testid.
func byTestID(doc *goquery.Document, id string) *goquery.Selection {
	return doc.Find(fmt.Sprintf(`[data-testid=%q]`, id))
}

func member() *UserNav { return &UserNav{Email: "ada@example.com", OrgName: "Analytical Engines"} }
func admin() *UserNav {
	return &UserNav{Email: "root@example.com", OrgName: "Sluice Ops", IsAdmin: true}
}

// everyPage renders each component once with p, so frame-level checks run
// against all of them.
func everyPage(p Page) map[string]templ.Component {
	return map[string]templ.Component{
		"login":      Login(p, LoginView{}),
		"signup":     Signup(p, SignupView{}),
		"dashboard":  Dashboard(p, DashboardView{OrgName: "Acme"}),
		"tokens":     Tokens(p, TokensView{}),
		"admin":      AdminTiers(p, AdminTiersView{}),
		"error":      ErrorPage(p, 404, "Not found", ""),
		"team":       Team(p, TeamView{OrgName: "Acme", CanManage: true}),
		"invitation": Invitation(p, InvitationView{Code: "inv_X", OrgName: "Acme", Email: "ada@example.com", Role: "member"}),
	}
}

func TestLayoutFrame(t *testing.T) {
	for name, c := range everyPage(Page{Title: "Overview"}) {
		t.Run(name, func(t *testing.T) {
			doc, html := render(t, c)
			if !strings.HasPrefix(strings.ToLower(html), "<!doctype html>") {
				t.Errorf("page does not start with a doctype: %.40q", html)
			}
			if got, _ := doc.Find("html").Attr("lang"); got != "en" {
				t.Errorf("lang = %q, want en", got)
			}
			if got := doc.Find("title").Text(); got != "Overview · Sluice" {
				t.Errorf("title = %q", got)
			}
			if doc.Find(`meta[charset]`).Length() != 1 {
				t.Error("missing meta charset")
			}
			if got, _ := doc.Find(`meta[name="viewport"]`).Attr("content"); got != "width=device-width, initial-scale=1" {
				t.Errorf("viewport = %q", got)
			}
			if doc.Find(`link[rel="stylesheet"][href="/static/sluice.css"]`).Length() != 1 {
				t.Error("missing stylesheet link")
			}
			if got, _ := doc.Find("header a.brand").Attr("href"); got != "/" {
				t.Errorf("brand links to %q, want /", got)
			}
			if doc.Find("footer").Length() != 1 {
				t.Error("missing footer")
			}
		})
	}
}

func TestNavigation(t *testing.T) {
	tests := []struct {
		name    string
		user    *UserNav
		present []string
		absent  []string
	}{
		{
			name:    "anonymous",
			user:    nil,
			present: []string{"nav-login", "nav-signup"},
			absent:  []string{"nav-dashboard", "nav-tokens", "nav-admin", "nav-user", "logout"},
		},
		{
			name:    "member",
			user:    member(),
			present: []string{"nav-dashboard", "nav-tokens", "nav-user", "logout"},
			absent:  []string{"nav-login", "nav-signup", "nav-admin"},
		},
		{
			name:    "admin",
			user:    admin(),
			present: []string{"nav-dashboard", "nav-tokens", "nav-admin", "nav-user", "logout"},
			absent:  []string{"nav-login", "nav-signup"},
		},
	}
	hrefs := map[string]string{
		"nav-login": "/login", "nav-signup": "/signup", "nav-dashboard": "/dashboard",
		"nav-tokens": "/tokens", "nav-admin": "/admin/organizations",
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, _ := render(t, Dashboard(Page{Title: "x", User: tt.user}, DashboardView{}))
			for _, id := range tt.present {
				sel := byTestID(doc, id)
				if sel.Length() != 1 {
					t.Errorf("%s: found %d, want 1", id, sel.Length())
					continue
				}
				if want, ok := hrefs[id]; ok {
					if got, _ := sel.Attr("href"); got != want {
						t.Errorf("%s href = %q, want %q", id, got, want)
					}
				}
			}
			for _, id := range tt.absent {
				if n := byTestID(doc, id).Length(); n != 0 {
					t.Errorf("%s: found %d, want none", id, n)
				}
			}
			if tt.user == nil {
				return
			}
			user := byTestID(doc, "nav-user").Text()
			if !strings.Contains(user, tt.user.Email) || !strings.Contains(user, tt.user.OrgName) {
				t.Errorf("nav-user = %q, want email and org name", user)
			}
			logout := byTestID(doc, "logout")
			if !logout.Is("form") || attr(logout, "method") != "post" || attr(logout, "action") != "/logout" {
				t.Errorf("logout is not a POST form to /logout: %s", outer(logout))
			}
			if logout.Find(`button[type="submit"]`).Length() != 1 {
				t.Error("logout form has no submit button")
			}
		})
	}
}

func TestNotices(t *testing.T) {
	tests := []struct {
		name         string
		flash, error string
	}{
		{name: "none"},
		{name: "flash", flash: "Token revoked."},
		{name: "error", error: "Email or password is wrong."},
		{name: "both", flash: "Saved.", error: "But something else failed."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, _ := render(t, Login(Page{Title: "Sign in", Flash: tt.flash, Error: tt.error}, LoginView{}))
			flash := byTestID(doc, "flash")
			if tt.flash == "" {
				if flash.Length() != 0 {
					t.Errorf("flash shown without a message: %s", outer(flash))
				}
			} else if got := strings.TrimSpace(flash.Text()); got != tt.flash {
				t.Errorf("flash = %q, want %q", got, tt.flash)
			}
			formErr := byTestID(doc, "form-error")
			if tt.error == "" {
				if formErr.Length() != 0 {
					t.Errorf("form error shown without a message: %s", outer(formErr))
				}
				return
			}
			if got := strings.TrimSpace(formErr.Text()); got != tt.error {
				t.Errorf("form-error = %q, want %q", got, tt.error)
			}
			if attr(formErr, "role") != "alert" {
				t.Errorf("form-error role = %q, want alert", attr(formErr, "role"))
			}
		})
	}
}

// TestEveryFieldHasALabel checks the accessibility promise of all forms:
// each visible control is named by a <label for>.
func TestEveryFieldHasALabel(t *testing.T) {
	p := Page{Title: "x", User: admin()}
	pages := map[string]templ.Component{
		"login":  Login(Page{Title: "x"}, LoginView{}),
		"signup": Signup(Page{Title: "x"}, SignupView{}),
		"tokens": Tokens(p, TokensView{Tokens: []TokenRow{{ID: 1, Name: "a", Status: "active"}}}),
		"admin": AdminTiers(p, AdminTiersView{
			Tiers: []TierRow{{Name: "free", Capacity: 1, RefillPerSec: "1"}, {Name: "pro", Capacity: 2, RefillPerSec: "2"}},
		}),
		"team": Team(Page{Title: "x", User: &UserNav{Email: "a@example.com", OrgName: "A", Role: "owner",
			Orgs: []OrgChoice{{ID: 1, Name: "A", Current: true}, {ID: 2, Name: "B"}}}}, TeamView{OrgName: "A", CanManage: true}),
		"invitation": Invitation(Page{Title: "x"}, InvitationView{Code: "inv_X", OrgName: "A", Email: "a@example.com", Role: "member"}),
	}
	for name, c := range pages {
		t.Run(name, func(t *testing.T) {
			doc, _ := render(t, c)
			ids := map[string]bool{}
			doc.Find("input, select, textarea").Each(func(_ int, s *goquery.Selection) {
				if typ := attr(s, "type"); typ == "hidden" || typ == "submit" {
					return
				}
				id := attr(s, "id")
				if id == "" {
					t.Errorf("control without id: %s", outer(s))
					return
				}
				if ids[id] {
					t.Errorf("duplicate id %q", id)
				}
				ids[id] = true
				if doc.Find(fmt.Sprintf(`label[for=%q]`, id)).Length() != 1 {
					t.Errorf("no label for #%s", id)
				}
			})
		})
	}
}

func TestAuthForms(t *testing.T) {
	tests := []struct {
		name     string
		c        templ.Component
		testID   string
		action   string
		fields   map[string]string // name -> type
		linkTo   string
		prefills map[string]string
	}{
		{
			name:     "login",
			c:        Login(Page{Title: "Sign in"}, LoginView{Email: "ada@example.com"}),
			testID:   "login-form",
			action:   "/login",
			fields:   map[string]string{"email": "email", "password": "password"},
			linkTo:   "/signup",
			prefills: map[string]string{"email": "ada@example.com"},
		},
		{
			name:     "signup",
			c:        Signup(Page{Title: "Sign up"}, SignupView{Email: "ada@example.com", Organization: "Engines Ltd"}),
			testID:   "signup-form",
			action:   "/signup",
			fields:   map[string]string{"email": "email", "password": "password", "organization": "text"},
			linkTo:   "/login",
			prefills: map[string]string{"email": "ada@example.com", "organization": "Engines Ltd"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, _ := render(t, tt.c)
			form := byTestID(doc, tt.testID)
			if !form.Is("form") || attr(form, "method") != "post" || attr(form, "action") != tt.action {
				t.Fatalf("want a POST form to %s, got %s", tt.action, outer(form))
			}
			for name, typ := range tt.fields {
				in := form.Find(fmt.Sprintf(`input[name=%q]`, name))
				if in.Length() != 1 {
					t.Errorf("field %q: found %d", name, in.Length())
					continue
				}
				if got := attr(in, "type"); got != typ {
					t.Errorf("field %q type = %q, want %q", name, got, typ)
				}
				if attr(in, "autocomplete") == "" {
					t.Errorf("field %q has no autocomplete", name)
				}
			}
			for name, want := range tt.prefills {
				if got := attr(form.Find(fmt.Sprintf(`input[name=%q]`, name)), "value"); got != want {
					t.Errorf("field %q value = %q, want %q", name, got, want)
				}
			}
			if got := attr(form.Find(`input[name="password"]`), "value"); got != "" {
				t.Errorf("password refilled with %q", got)
			}
			if doc.Find(fmt.Sprintf(`main a[href=%q]`, tt.linkTo)).Length() == 0 {
				t.Errorf("no link to %s", tt.linkTo)
			}
		})
	}
}

func TestDashboard(t *testing.T) {
	v := DashboardView{
		OrgName:       "Acme",
		TierName:      "pro",
		Capacity:      600,
		RefillPerSec:  "2.5",
		RequestsToday: 1234,
		TokensToday:   98765,
		RequestsMonth: 45678,
		TokensMonth:   1234567,
		ActiveTokens:  2,
		Tokens: []TokenRow{
			{ID: 1, Name: "prod", Prefix: "sk_sluice_AbC123", LastUsed: "2 minutes ago", Status: "active"},
			{ID: 2, Name: "old", Prefix: "sk_sluice_XyZ789", LastUsed: "never", Status: "revoked"},
		},
	}
	doc, html := render(t, Dashboard(Page{Title: "Dashboard", User: member()}, v))

	if byTestID(doc, "dashboard").Length() != 1 {
		t.Fatal("no dashboard")
	}
	tier := strings.Join(strings.Fields(byTestID(doc, "tier").Text()), " ")
	for _, want := range []string{"pro", "burst of 600 requests", "refills 2.5 per second"} {
		if !strings.Contains(tier, want) {
			t.Errorf("tier = %q, want it to contain %q", tier, want)
		}
	}
	stats := map[string]string{
		"requests-today": "1,234",
		"tokens-today":   "98,765",
		"requests-month": "45,678",
		"tokens-month":   "1,234,567",
	}
	for id, want := range stats {
		if got := strings.TrimSpace(byTestID(doc, id).Text()); got != want {
			t.Errorf("%s = %q, want %q", id, got, want)
		}
	}
	active := byTestID(doc, "active-tokens")
	if attr(active, "href") != "/tokens" || !strings.Contains(active.Text(), "2 active tokens") {
		t.Errorf("active tokens = %s", outer(active))
	}
	if n := byTestID(doc, "dashboard-token-row").Length(); n != 2 {
		t.Errorf("token rows = %d, want 2", n)
	}
	if byTestID(doc, "tokens-empty").Length() != 0 {
		t.Error("empty state shown alongside tokens")
	}
	if !strings.Contains(html, "sk_sluice_AbC123…") {
		t.Error("token prefix not shown with an ellipsis")
	}
	quick := byTestID(doc, "quick-start").Text()
	for _, want := range []string{"/v1/chat/completions", `"sluice-local"`, "Authorization: Bearer sk_sluice_…"} {
		if !strings.Contains(quick, want) {
			t.Errorf("quick start lacks %q", want)
		}
	}
}

func TestDashboardEmpty(t *testing.T) {
	doc, _ := render(t, Dashboard(Page{Title: "Dashboard", User: member()}, DashboardView{OrgName: "Acme", Capacity: 1}))
	empty := byTestID(doc, "tokens-empty")
	if empty.Length() != 1 || empty.Find(`a[href="/tokens"]`).Length() != 1 {
		t.Errorf("empty state = %s, want a link to /tokens", outer(empty))
	}
	if doc.Find("table").Length() != 0 {
		t.Error("table shown without tokens")
	}
	if tier := byTestID(doc, "tier").Text(); !strings.Contains(tier, "burst of 1 request,") {
		t.Errorf("tier = %q, want singular request", tier)
	}
}

func TestTokensSecret(t *testing.T) {
	const secret = "sk_sluice_3f9aQm2LkP0zXw8VbN4cR7tY1uE6iO5pA9sD2fG0hJkLz1x2c3"
	tests := []struct {
		name     string
		newToken *NewTokenView
	}{
		{name: "just created", newToken: &NewTokenView{Name: "ci", Secret: secret}},
		{name: "plain list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := TokensView{
				NewToken: tt.newToken,
				Tokens:   []TokenRow{{ID: 9, Name: "ci", Prefix: secret[:16], Status: "active"}},
			}
			doc, html := render(t, Tokens(Page{Title: "API tokens", User: member()}, v))
			box := byTestID(doc, "new-token")
			code := byTestID(doc, "new-token-secret")
			if tt.newToken == nil {
				if box.Length() != 0 || code.Length() != 0 {
					t.Errorf("secret box shown without a new token: %s", outer(box))
				}
				if strings.Contains(html, secret) {
					t.Error("secret leaked into the page")
				}
				return
			}
			if !strings.Contains(box.Text(), "Copy this token now — it will not be shown again") {
				t.Errorf("new-token box lacks the warning: %q", box.Text())
			}
			if !code.Is("code") || code.Text() != secret {
				t.Errorf("secret element = %s", outer(code))
			}
			if n := strings.Count(html, secret); n != 1 {
				t.Errorf("secret appears %d times, want once", n)
			}
		})
	}
}

func TestTokensList(t *testing.T) {
	rows := []TokenRow{
		{ID: 11, Name: "prod", Prefix: "sk_sluice_AAAAAA", Created: "2025-01-02", LastUsed: "never", Expires: "never", Status: "active"},
		{ID: 12, Name: "old", Prefix: "sk_sluice_BBBBBB", Created: "2024-01-02", LastUsed: "2024-03-01", Expires: "never", Status: "revoked"},
		{ID: 13, Name: "trial", Prefix: "sk_sluice_CCCCCC", Created: "2024-05-02", LastUsed: "never", Expires: "2024-06-01", Status: "expired"},
		{ID: 14, Name: "ci", Prefix: "sk_sluice_DDDDDD", Created: "2025-02-02", LastUsed: "today", Expires: "2026-02-02", Status: "active"},
	}
	doc, _ := render(t, Tokens(Page{Title: "API tokens", User: member()}, TokensView{Tokens: rows}))

	if byTestID(doc, "tokens").Length() != 1 {
		t.Fatal("no tokens page")
	}
	trs := byTestID(doc, "token-row")
	if trs.Length() != len(rows) {
		t.Fatalf("token rows = %d, want %d", trs.Length(), len(rows))
	}
	if byTestID(doc, "tokens-empty").Length() != 0 {
		t.Error("empty state shown alongside tokens")
	}
	trs.Each(func(i int, tr *goquery.Selection) {
		row := rows[i]
		t.Run(row.Name, func(t *testing.T) {
			if got, want := attr(tr, "data-token-id"), fmt.Sprint(row.ID); got != want {
				t.Errorf("data-token-id = %q, want %q", got, want)
			}
			if !strings.Contains(tr.Find("code").Text(), row.Prefix+"…") {
				t.Errorf("prefix cell = %q", tr.Find("code").Text())
			}
			badge := tr.Find(".badge")
			if !badge.HasClass("badge-"+row.Status) || strings.TrimSpace(badge.Text()) != row.Status {
				t.Errorf("badge = %s", outer(badge))
			}
			revoke := tr.Find(`[data-testid="revoke"]`)
			if row.Status != "active" {
				if revoke.Length() != 0 {
					t.Errorf("revoke offered for a %s token", row.Status)
				}
				return
			}
			want := fmt.Sprintf("/tokens/%d/revoke", row.ID)
			if !revoke.Is("form") || attr(revoke, "method") != "post" || attr(revoke, "action") != want {
				t.Errorf("revoke = %s, want a POST form to %s", outer(revoke), want)
			}
			if revoke.Find(`button[type="submit"]`).Length() != 1 {
				t.Error("revoke form has no submit button")
			}
		})
	})
}

func TestTokensCreateForm(t *testing.T) {
	tests := []struct {
		expires string
		want    string // the selected option's value; "" means none marked
	}{
		{expires: "", want: ""},
		{expires: "0", want: "0"},
		{expires: "30", want: "30"},
		{expires: "365", want: "365"},
	}
	for _, tt := range tests {
		t.Run("expires="+tt.expires, func(t *testing.T) {
			v := TokensView{Form: TokenForm{Name: "staging", ExpiresInDays: tt.expires}}
			doc, _ := render(t, Tokens(Page{Title: "API tokens", User: member()}, v))
			form := byTestID(doc, "create-token-form")
			if !form.Is("form") || attr(form, "method") != "post" || attr(form, "action") != "/tokens" {
				t.Fatalf("create form = %s", outer(form))
			}
			name := form.Find(`input[name="name"]`)
			if attr(name, "value") != "staging" || attr(name, "maxlength") != "100" {
				t.Errorf("name input = %s", outer(name))
			}
			if _, ok := name.Attr("required"); !ok {
				t.Error("name input not required")
			}
			if byTestID(doc, "tokens-empty").Length() != 1 {
				t.Error("no empty state without tokens")
			}
			var values []string
			form.Find(`select[name="expires_in_days"] option`).Each(func(_ int, o *goquery.Selection) {
				values = append(values, attr(o, "value"))
			})
			if got := strings.Join(values, ","); got != "0,30,90,365" {
				t.Errorf("expiry options = %s", got)
			}
			selected := form.Find(`select[name="expires_in_days"] option[selected]`)
			if tt.want == "" {
				if selected.Length() != 0 {
					t.Errorf("option preselected without a choice: %s", outer(selected))
				}
				return
			}
			if selected.Length() != 1 || attr(selected, "value") != tt.want {
				t.Errorf("selected = %s, want %s", outer(selected), tt.want)
			}
		})
	}
}

func TestAdminTiers(t *testing.T) {
	v := AdminTiersView{
		Tiers: []TierRow{
			{Name: "free", Capacity: 60, RefillPerSec: "1", EffectiveRefill: "1", TokensPerMinute: 20000,
				FreezeThreshold: 20, FreezeMinutes: 10, Autotune: true, RefillFloor: "0.25"},
			{Name: "pro", Capacity: 600, RefillPerSec: "12.5", EffectiveRefill: "12.5", TokensPerMinute: 0,
				FreezeThreshold: 0, FreezeMinutes: 15, RefillFloor: "0"},
		},
	}
	doc, _ := render(t, AdminTiers(Page{Title: "Admin", User: admin()}, v))
	if byTestID(doc, "admin-tiers").Length() != 1 {
		t.Fatal("no admin page")
	}
	if n := doc.Find(`form[data-testid^="tier-form-"]`).Length(); n != len(v.Tiers) {
		t.Errorf("tier forms = %d, want %d", n, len(v.Tiers))
	}
	for _, tier := range v.Tiers {
		t.Run("tier "+tier.Name, func(t *testing.T) {
			form := byTestID(doc, "tier-form-"+tier.Name)
			if !form.Is("form") || attr(form, "method") != "post" || attr(form, "action") != "/admin/tiers/"+tier.Name {
				t.Fatalf("tier form = %s", outer(form))
			}
			capacity := form.Find(`input[name="capacity"]`)
			if attr(capacity, "value") != fmt.Sprint(tier.Capacity) || attr(capacity, "min") != "1" || attr(capacity, "type") != "number" {
				t.Errorf("capacity = %s", outer(capacity))
			}
			refill := form.Find(`input[name="refill_per_sec"]`)
			if attr(refill, "value") != tier.RefillPerSec || attr(refill, "step") != "any" || attr(refill, "min") != "0.001" {
				t.Errorf("refill = %s", outer(refill))
			}
			fields := []struct{ name, value, min, step string }{
				{"capacity", fmt.Sprint(tier.Capacity), "1", "1"},
				{"refill_per_sec", tier.RefillPerSec, "0.001", "any"},
				{"tokens_per_minute", fmt.Sprint(tier.TokensPerMinute), "0", "1"},
				{"freeze_threshold", fmt.Sprint(tier.FreezeThreshold), "0", "1"},
				{"freeze_minutes", fmt.Sprint(tier.FreezeMinutes), "1", "1"},
				{"refill_floor", tier.RefillFloor, "0", "any"},
			}
			for _, f := range fields {
				in := form.Find(fmt.Sprintf(`input[name=%q]`, f.name))
				if in.Length() != 1 {
					t.Errorf("field %s: found %d, want 1", f.name, in.Length())
					continue
				}
				if attr(in, "type") != "number" || attr(in, "value") != f.value || attr(in, "min") != f.min || attr(in, "step") != f.step {
					t.Errorf("field %s = %s, want number value=%q min=%q step=%q", f.name, outer(in), f.value, f.min, f.step)
				}
				id := attr(in, "id")
				if id == "" || form.Find(fmt.Sprintf(`label[for=%q]`, id)).Length() != 1 {
					t.Errorf("field %s has no label", f.name)
				}
			}
			hints := map[string]string{
				"tokens_per_minute": "0 = no limit",
				"freeze_threshold":  "rejections in a minute that freeze a token; 0 = never",
			}
			for name, want := range hints {
				in := form.Find(fmt.Sprintf(`input[name=%q]`, name))
				hint := form.Find("#" + attr(in, "aria-describedby"))
				if got := strings.TrimSpace(hint.Text()); got != want {
					t.Errorf("%s hint = %q, want %q", name, got, want)
				}
			}
			auto := form.Find(`input[name="autotune"]`)
			if auto.Length() != 1 || attr(auto, "type") != "checkbox" || attr(auto, "value") != "on" {
				t.Fatalf("autotune = %s, want a checkbox with value on", outer(auto))
			}
			if _, checked := auto.Attr("checked"); checked != tier.Autotune {
				t.Errorf("autotune checked = %v, want %v", checked, tier.Autotune)
			}
			if !auto.Is(`[data-testid="tier-autotune"]`) {
				t.Errorf("autotune checkbox lost its test id: %s", outer(auto))
			}
			if form.Find(`[data-testid="tier-effective"]`).Length() != 0 {
				t.Error("effective refill shown while it equals the configured one")
			}
			if form.Find(`button[type="submit"]`).Length() != 1 {
				t.Error("no save button")
			}
		})
	}
}

func TestAdminTierEffective(t *testing.T) {
	tests := []struct {
		name       string
		configured string
		effective  string
		want       string // "" when no notice is expected
	}{
		{name: "lowered", configured: "0.5", effective: "0.3", want: "effective now: 0.3/s (lowered by the auto-tuner)"},
		{name: "as configured", configured: "0.5", effective: "0.5"},
		{name: "not reported", configured: "0.5", effective: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := AdminTiersView{Tiers: []TierRow{{Name: "free", Capacity: 30, RefillPerSec: tt.configured, EffectiveRefill: tt.effective, FreezeMinutes: 10}}}
			doc, _ := render(t, AdminTiers(Page{Title: "Admin", User: admin()}, v))
			form := byTestID(doc, "tier-form-free")
			eff := form.Find(`[data-testid="tier-effective"]`)
			refill := form.Find(`input[name="refill_per_sec"]`)
			if attr(refill, "value") != tt.configured {
				t.Errorf("refill input = %s, want the configured %s", outer(refill), tt.configured)
			}
			if tt.want == "" {
				if eff.Length() != 0 {
					t.Errorf("effective shown: %s", outer(eff))
				}
				return
			}
			if got := strings.Join(strings.Fields(eff.Text()), " "); eff.Length() != 1 || got != tt.want {
				t.Errorf("effective = %q, want %q", got, tt.want)
			}
			if id := attr(eff, "id"); id == "" || attr(refill, "aria-describedby") != id {
				t.Errorf("refill input not described by the effective note: %s", outer(refill))
			}
		})
	}
}

func TestAdminLimiterState(t *testing.T) {
	tests := []struct {
		name  string
		state LimiterState
		want  string // "" when nothing should be said
		alert bool
	}{
		{name: "local", state: LimiterState{Mode: "local", Nodes: 1}, want: "Limits are kept in this process (single node)."},
		{name: "shared", state: LimiterState{Mode: "shared", Nodes: 3}, want: "Limits are shared through Redis across 3 nodes."},
		{name: "shared one node", state: LimiterState{Mode: "shared", Nodes: 1}, want: "Limits are shared through Redis across 1 node."},
		{
			name: "degraded", state: LimiterState{Mode: "degraded", Nodes: 4, Degraded: true}, alert: true,
			want: "Redis is unreachable: each node enforces 1/4 of every limit locally until it returns.",
		},
		{
			name: "degraded flag only", state: LimiterState{Mode: "shared", Nodes: 2, Degraded: true}, alert: true,
			want: "Redis is unreachable: each node enforces 1/2 of every limit locally until it returns.",
		},
		{name: "unknown", state: LimiterState{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, _ := render(t, AdminTiers(Page{Title: "Admin", User: admin()}, AdminTiersView{Limiter: tt.state}))
			line := byTestID(doc, "limiter-state")
			if tt.want == "" {
				if line.Length() != 0 {
					t.Errorf("limiter state shown for an unknown mode: %s", outer(line))
				}
				return
			}
			if line.Length() != 1 {
				t.Fatalf("limiter-state: found %d, want 1", line.Length())
			}
			if got := strings.Join(strings.Fields(line.Text()), " "); got != tt.want {
				t.Errorf("limiter state = %q, want %q", got, tt.want)
			}
			role, hasRole := line.Attr("role")
			if tt.alert {
				if role != "alert" || !line.HasClass("notice-warning") {
					t.Errorf("degraded state is not a warning alert: %s", outer(line))
				}
			} else if hasRole {
				t.Errorf("calm state has role %q", role)
			}
			if n := doc.Find(`[role="alert"]`).Length(); n != map[bool]int{true: 1, false: 0}[tt.alert] {
				t.Errorf("alerts on the page = %d", n)
			}
		})
	}
}

func TestAdminFreezes(t *testing.T) {
	freezes := []FreezeRow{
		{ID: 7, TokenID: 11, TokenPrefix: "sk_sluice_AAAAAA", OrgName: "Acme", Reason: "42 rejections in a minute", Count: 42, From: "2025-03-01 10:00", Until: "2025-03-01 10:10", Status: "active"},
		{ID: 8, TokenID: 12, TokenPrefix: "sk_sluice_BBBBBB", OrgName: "Globex", Reason: "burst", Count: 25, From: "2025-02-01 09:00", Until: "2025-02-01 09:10", Status: "lifted"},
		{ID: 9, TokenID: 13, TokenPrefix: "", OrgName: "Initech", Reason: "burst", Count: 21, From: "2025-01-01 08:00", Until: "2025-01-01 08:10", Status: "expired"},
		{ID: 10, TokenID: 14, TokenPrefix: "sk_sluice_DDDDDD", OrgName: "Acme", Reason: "again", Count: 30, From: "2025-03-02 10:00", Until: "2025-03-02 10:10", Status: "active"},
	}
	doc, _ := render(t, AdminTiers(Page{Title: "Admin", User: admin()}, AdminTiersView{Freezes: freezes}))
	section := byTestID(doc, "admin-freezes")
	if section.Length() != 1 {
		t.Fatal("no freezes section")
	}
	if section.Find(`[data-testid="freezes-empty"]`).Length() != 0 {
		t.Error("empty state shown alongside freezes")
	}
	rows := section.Find(`[data-testid="admin-freeze-row"]`)
	if rows.Length() != len(freezes) {
		t.Fatalf("freeze rows = %d, want %d", rows.Length(), len(freezes))
	}
	if n := section.Find(`[data-testid="lift-freeze"]`).Length(); n != 2 {
		t.Errorf("lift forms = %d, want 2 (one per active freeze)", n)
	}
	rows.Each(func(i int, tr *goquery.Selection) {
		f := freezes[i]
		t.Run(fmt.Sprint(f.ID), func(t *testing.T) {
			text := strings.Join(strings.Fields(tr.Text()), " ")
			for _, want := range []string{f.OrgName, f.Reason, fmt.Sprint(f.Count), f.From, f.Until} {
				if !strings.Contains(text, want) {
					t.Errorf("row %q lacks %q", text, want)
				}
			}
			wantToken := f.TokenPrefix + "…"
			if f.TokenPrefix == "" {
				wantToken = "unknown token"
			}
			if got := tr.Find("code").Text(); got != wantToken {
				t.Errorf("token = %q, want %q", got, wantToken)
			}
			badge := tr.Find(`[data-testid="freeze-status"]`)
			if !badge.HasClass("badge") || !badge.HasClass("badge-freeze-"+f.Status) || strings.TrimSpace(badge.Text()) != f.Status {
				t.Errorf("badge = %s", outer(badge))
			}
			lift := tr.Find(`[data-testid="lift-freeze"]`)
			if f.Status != "active" {
				if lift.Length() != 0 {
					t.Errorf("lift offered for a %s freeze", f.Status)
				}
				return
			}
			want := fmt.Sprintf("/admin/freezes/%d/lift", f.ID)
			if !lift.Is("form") || attr(lift, "method") != "post" || attr(lift, "action") != want {
				t.Errorf("lift = %s, want a POST form to %s", outer(lift), want)
			}
			if attr(lift, "data-freeze-id") != fmt.Sprint(f.ID) {
				t.Errorf("lift data-freeze-id = %q, want %d", attr(lift, "data-freeze-id"), f.ID)
			}
			if lift.Find(`button[type="submit"]`).Length() != 1 {
				t.Error("lift form has no submit button")
			}
		})
	})
}

func TestAdminEmptySections(t *testing.T) {
	doc, _ := render(t, AdminTiers(Page{Title: "Admin", User: admin()}, AdminTiersView{}))
	if got := strings.TrimSpace(byTestID(doc, "admin-freezes").Find(`[data-testid="freezes-empty"]`).Text()); got != "No freezes." {
		t.Errorf("freezes empty state = %q", got)
	}
	tuning := byTestID(doc, "admin-tuning")
	const want = "No changes yet: the tuner lowers autotuned tiers' refill when load stays above 80% and restores it when calm."
	if got := strings.TrimSpace(tuning.Find(`[data-testid="tuning-empty"]`).Text()); got != want {
		t.Errorf("tuning empty state = %q", got)
	}
	if doc.Find("table").Length() != 0 || byTestID(doc, "lift-freeze").Length() != 0 {
		t.Error("tables shown on an empty admin page")
	}
}

func TestAdminTuning(t *testing.T) {
	rows := []TuningRow{
		{At: "2025-03-01 10:00", Tier: "free", From: "0.5", To: "0.4", Load: "0.92"},
		{At: "2025-03-01 10:05", Tier: "free", From: "0.4", To: "0.5", Load: "0.31"},
	}
	doc, _ := render(t, AdminTiers(Page{Title: "Admin", User: admin()}, AdminTiersView{Tuning: rows}))
	tuning := byTestID(doc, "admin-tuning")
	if tuning.Find(`[data-testid="tuning-empty"]`).Length() != 0 {
		t.Error("empty state shown alongside changes")
	}
	trs := tuning.Find(`[data-testid="tuning-row"]`)
	if trs.Length() != len(rows) {
		t.Fatalf("tuning rows = %d, want %d", trs.Length(), len(rows))
	}
	wantLoad := []string{"92%", "31%"}
	trs.Each(func(i int, tr *goquery.Selection) {
		r := rows[i]
		text := strings.Join(strings.Fields(tr.Text()), " ")
		for _, want := range []string{r.At, r.Tier} {
			if !strings.Contains(text, want) {
				t.Errorf("row %d = %q, lacks %q", i, text, want)
			}
		}
		if got, want := strings.TrimSpace(tr.Find(`[data-testid="tuning-change"]`).Text()), r.From+" → "+r.To; got != want {
			t.Errorf("row %d change = %q, want %q", i, got, want)
		}
		if got := strings.TrimSpace(tr.Find(`[data-testid="tuning-load"]`).Text()); got != wantLoad[i] {
			t.Errorf("row %d load = %q, want %q", i, got, wantLoad[i])
		}
	})
}

func TestDashboardTiersLimits(t *testing.T) {
	tests := []struct {
		name      string
		tpm       int64
		effective string
		wantTPM   string // "" when the tier has no tokens-per-minute limit
	}{
		{name: "as configured, tpm", tpm: 20000, wantTPM: "20,000 tokens per minute"},
		{name: "tuned, no tpm", effective: "0.3"},
		{name: "tuned, tpm", tpm: 1, effective: "0.3", wantTPM: "1 token per minute"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := DashboardView{OrgName: "Acme", TierName: "free", Capacity: 30, RefillPerSec: "0.5", TokensPerMinute: tt.tpm, EffectiveRefill: tt.effective}
			doc, _ := render(t, Dashboard(Page{Title: "Dashboard", User: member()}, v))
			tier := strings.Join(strings.Fields(byTestID(doc, "tier").Text()), " ")
			if !strings.Contains(tier, "refills 0.5 per second") {
				t.Errorf("tier = %q", tier)
			}
			if tt.wantTPM == "" {
				if byTestID(doc, "tier-tpm").Length() != 0 || strings.Contains(tier, "per minute") {
					t.Errorf("tokens per minute shown without a limit: %q", tier)
				}
			} else if !strings.Contains(tier, tt.wantTPM) {
				t.Errorf("tier = %q, want it to contain %q", tier, tt.wantTPM)
			}
			notice := byTestID(doc, "tuned-notice")
			if tt.effective == "" {
				if notice.Length() != 0 {
					t.Errorf("tuned notice shown as configured: %s", outer(notice))
				}
				return
			}
			want := "Busy period: your tier's refill is temporarily 0.3 per second (normally 0.5). It is restored automatically when load drops."
			if got := strings.Join(strings.Fields(notice.Text()), " "); notice.Length() != 1 || got != want {
				t.Errorf("tuned notice = %q, want %q", got, want)
			}
		})
	}
}

func TestDashboardFreezes(t *testing.T) {
	t.Run("none", func(t *testing.T) {
		doc, _ := render(t, Dashboard(Page{Title: "Dashboard", User: member()}, DashboardView{OrgName: "Acme"}))
		if byTestID(doc, "freezes").Length() != 0 || byTestID(doc, "freeze-row").Length() != 0 {
			t.Error("freezes card shown without freezes")
		}
	})
	t.Run("some", func(t *testing.T) {
		freezes := []FreezeRow{
			{ID: 1, TokenPrefix: "sk_sluice_AAAAAA", Reason: "40 rejections in a minute", Until: "10:10", Status: "active"},
			{ID: 2, TokenPrefix: "sk_sluice_BBBBBB", Reason: "25 rejections in a minute", Until: "09:10", Status: "lifted"},
			{ID: 3, TokenPrefix: "sk_sluice_CCCCCC", Reason: "21 rejections in a minute", Until: "08:10", Status: "expired"},
		}
		doc, _ := render(t, Dashboard(Page{Title: "Dashboard", User: member()}, DashboardView{OrgName: "Acme", Freezes: freezes}))
		card := byTestID(doc, "freezes")
		if card.Length() != 1 {
			t.Fatal("no freezes card")
		}
		const explain = "A token that keeps hitting its rate limit is frozen for a while to protect the service. It thaws by itself at the time shown."
		if got := strings.Join(strings.Fields(card.Text()), " "); !strings.Contains(got, explain) {
			t.Errorf("freezes card lacks the explanation: %q", got)
		}
		rows := card.Find(`[data-testid="freeze-row"]`)
		if rows.Length() != len(freezes) {
			t.Fatalf("freeze rows = %d, want %d", rows.Length(), len(freezes))
		}
		if card.Find("form").Length() != 0 {
			t.Error("a member is offered a form on a freeze")
		}
		rows.Each(func(i int, tr *goquery.Selection) {
			f := freezes[i]
			if got := tr.Find(`[data-testid="freeze-reason"]`).Text(); got != f.Reason {
				t.Errorf("row %d reason = %q, want %q", i, got, f.Reason)
			}
			if got := tr.Find("code").Text(); got != f.TokenPrefix+"…" {
				t.Errorf("row %d token = %q", i, got)
			}
			if !strings.Contains(tr.Text(), f.Until) {
				t.Errorf("row %d lacks until %q", i, f.Until)
			}
			badge := tr.Find(`[data-testid="freeze-status"]`)
			if !badge.HasClass("badge-freeze-"+f.Status) || strings.TrimSpace(badge.Text()) != f.Status {
				t.Errorf("row %d badge = %s", i, outer(badge))
			}
		})
	})
}

// TestFreezeTextIsEscaped puts markup in a freeze's free text and checks it
// lands as text in its own cell.
func TestFreezeTextIsEscaped(t *testing.T) {
	const evil = `<script>alert(1)</script>`
	f := FreezeRow{ID: 5, TokenPrefix: "sk_sluice_AAAAAA", OrgName: evil, Reason: evil, Status: "active"}
	t.Run("admin", func(t *testing.T) {
		doc, html := render(t, AdminTiers(Page{Title: "Admin", User: admin()}, AdminTiersView{Freezes: []FreezeRow{f}}))
		if doc.Find("script").Length() != 0 || strings.Contains(html, evil) {
			t.Fatal("freeze text rendered as markup")
		}
		cells := byTestID(doc, "admin-freeze-row").Find("td")
		if cells.Eq(0).Text() != evil || cells.Eq(2).Text() != evil {
			t.Errorf("org / reason cells = %q / %q", cells.Eq(0).Text(), cells.Eq(2).Text())
		}
	})
	t.Run("dashboard", func(t *testing.T) {
		doc, html := render(t, Dashboard(Page{Title: "Dashboard", User: member()}, DashboardView{OrgName: "Acme", Freezes: []FreezeRow{f}}))
		if doc.Find("script").Length() != 0 || strings.Contains(html, evil) {
			t.Fatal("freeze text rendered as markup")
		}
		if got := byTestID(doc, "freeze-reason").Text(); got != evil {
			t.Errorf("reason = %q", got)
		}
	})
}

func TestLoadPercent(t *testing.T) {
	tests := map[string]string{"0.92": "92%", "0.805": "81%", "1": "100%", "0": "0%", "busy": "busy", "": "", "NaN": "NaN"}
	for in, want := range tests {
		if got := loadPercent(in); got != want {
			t.Errorf("loadPercent(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestErrorPage(t *testing.T) {
	tests := []struct {
		name string
		user *UserNav
		back string
	}{
		{name: "anonymous", back: "/"},
		{name: "signed in", user: member(), back: "/dashboard"},
		// The dashboard would answer this page again: a loop.
		{name: "in no organization", user: &UserNav{Email: "bo@example.com", NoOrganization: true}, back: "/account"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, _ := render(t, ErrorPage(Page{Title: "Not found", User: tt.user}, 404, "That page does not exist.", ""))
			page := byTestID(doc, "error-page")
			if !strings.Contains(page.Text(), "404") || !strings.Contains(page.Text(), "That page does not exist.") {
				t.Errorf("error page = %q", page.Text())
			}
			if page.Find(fmt.Sprintf(`a[href=%q]`, tt.back)).Length() != 1 || page.Find("a").Length() != 1 {
				t.Errorf("the page's links: %d, want one to %s", page.Find("a").Length(), tt.back)
			}
			if tt.user != nil && tt.user.NoOrganization && byTestID(doc, "nav").Find(`a[href="/dashboard"], a[href="/tokens"]`).Length() != 0 {
				t.Error("the header offers an organization's pages to a visitor in none")
			}
		})
	}
}

// TestUserStringsAreEscaped renders attacker-chosen text everywhere a user
// can put some and checks that it stays text.
func TestUserStringsAreEscaped(t *testing.T) {
	const evil = `<script>alert(1)</script>`
	const evilAttr = `"><script>alert(1)</script>`
	user := &UserNav{Email: evil, OrgName: evil, IsAdmin: true}
	p := Page{Title: evil, User: user, Flash: evil, Error: evil}
	tests := []struct {
		name string
		c    templ.Component
	}{
		{"login", Login(p, LoginView{Email: evilAttr})},
		{"signup", Signup(p, SignupView{Email: evilAttr, Organization: evilAttr})},
		{"dashboard", Dashboard(p, DashboardView{
			OrgName: evil, TierName: evil, RefillPerSec: evil, EffectiveRefill: evil,
			Tokens:  []TokenRow{{Name: evil, Prefix: evil, LastUsed: evil, Status: evil}},
			Freezes: []FreezeRow{{ID: 1, TokenPrefix: evil, OrgName: evil, Reason: evil, Until: evil, Status: evil}},
		})},
		{"tokens", Tokens(p, TokensView{
			NewToken: &NewTokenView{Name: evil, Secret: evil},
			Form:     TokenForm{Name: evilAttr, ExpiresInDays: evilAttr},
			Tokens:   []TokenRow{{ID: 1, Name: evil, Prefix: evil, Created: evil, LastUsed: evil, Expires: evil, Status: "active"}},
		})},
		{"admin", AdminTiers(p, AdminTiersView{
			Tiers: []TierRow{{Name: evilAttr, RefillPerSec: evilAttr, EffectiveRefill: evil, RefillFloor: evilAttr,
				MonthlyFee: evilAttr, IncludedCredit: evilAttr, Overage: evilAttr}},
			NewTier: AdminTierForm{Name: evilAttr, Capacity: evilAttr, MonthlyFee: evilAttr},
			Freezes: []FreezeRow{
				{ID: 1, TokenPrefix: evil, OrgName: evil, Reason: evil, From: evil, Until: evil, Status: "active"},
				{ID: 2, TokenPrefix: evil, OrgName: evil, Reason: evil, From: evil, Until: evil, Status: evil},
			},
			Tuning:  []TuningRow{{At: evil, Tier: evil, From: evil, To: evil, Load: evil}},
			Limiter: LimiterState{Mode: evil},
		})},
		{"error", ErrorPage(p, 500, evil, "req_1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, _ := render(t, tt.c)
			if n := doc.Find("script").Length(); n != 0 {
				t.Errorf("found %d <script> elements", n)
			}
			if !strings.Contains(doc.Find("body").Text(), evil) {
				t.Error("the text itself should still be shown, escaped")
			}
		})
	}
	t.Run("tier name in action", func(t *testing.T) {
		doc, _ := render(t, AdminTiers(p, AdminTiersView{Tiers: []TierRow{{Name: "a/../b c"}}}))
		if got := attr(doc.Find(`form[action^="/admin/tiers/"]`), "action"); got != "/admin/tiers/a%2F..%2Fb%20c" {
			t.Errorf("action = %q, want the name path-escaped", got)
		}
	})
}

func TestFormatCount(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{0, "0"}, {7, "7"}, {999, "999"}, {1000, "1,000"}, {12345, "12,345"},
		{1234567, "1,234,567"}, {-1234, "-1,234"},
	}
	for _, tt := range tests {
		if got := FormatCount(tt.n); got != tt.want {
			t.Errorf("FormatCount(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

func attr(s *goquery.Selection, name string) string {
	v, _ := s.Attr(name)
	return v
}

func outer(s *goquery.Selection) string {
	if s.Length() == 0 {
		return "<nothing>"
	}
	h, err := goquery.OuterHtml(s)
	if err != nil {
		return err.Error()
	}
	return h
}
