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
		"login":     Login(p, LoginView{}),
		"signup":    Signup(p, SignupView{}),
		"dashboard": Dashboard(p, DashboardView{OrgName: "Acme"}),
		"tokens":    Tokens(p, TokensView{}),
		"admin":     AdminTiers(p, AdminTiersView{}),
		"error":     ErrorPage(p, 404, "Not found"),
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
		"nav-tokens": "/tokens", "nav-admin": "/admin/tiers",
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
			Tiers:     []TierRow{{Name: "free", Capacity: 1, RefillPerSec: "1"}, {Name: "pro", Capacity: 2, RefillPerSec: "2"}},
			Orgs:      []OrgRow{{ID: 1, Name: "a", Tier: "free"}, {ID: 2, Name: "b", Tier: "pro"}},
			TierNames: []string{"free", "pro"},
		}),
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
			{Name: "free", Capacity: 60, RefillPerSec: "1", Autotune: true, RefillFloor: "0.25"},
			{Name: "pro", Capacity: 600, RefillPerSec: "12.5"},
		},
		Orgs: []OrgRow{
			{ID: 3, Name: "Acme", Tier: "free", Created: "2025-01-01"},
			{ID: 42, Name: "Globex", Tier: "pro", Created: "2025-02-01"},
		},
		TierNames: []string{"free", "pro"},
	}
	doc, _ := render(t, AdminTiers(Page{Title: "Admin", User: admin()}, v))
	if byTestID(doc, "admin-tiers").Length() != 1 {
		t.Fatal("no admin page")
	}
	if n := doc.Find(`form[action^="/admin/tiers/"]`).Length(); n != len(v.Tiers) {
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
			wantAuto := "off"
			if tier.Autotune {
				wantAuto = "on"
			}
			if got := strings.TrimSpace(form.Find(`[data-testid="tier-autotune"]`).Text()); got != wantAuto {
				t.Errorf("autotune = %q, want %q", got, wantAuto)
			}
			if form.Find(`button[type="submit"]`).Length() != 1 {
				t.Error("no save button")
			}
		})
	}
	for _, org := range v.Orgs {
		t.Run(fmt.Sprintf("org %d", org.ID), func(t *testing.T) {
			form := byTestID(doc, fmt.Sprintf("org-tier-form-%d", org.ID))
			want := fmt.Sprintf("/admin/organizations/%d/tier", org.ID)
			if !form.Is("form") || attr(form, "method") != "post" || attr(form, "action") != want {
				t.Fatalf("org form = %s, want a POST form to %s", outer(form), want)
			}
			options := form.Find(`select[name="tier"] option`)
			if options.Length() != len(v.TierNames) {
				t.Errorf("options = %d, want %d", options.Length(), len(v.TierNames))
			}
			selected := form.Find(`select[name="tier"] option[selected]`)
			if selected.Length() != 1 || attr(selected, "value") != org.Tier {
				t.Errorf("selected = %s, want %s", outer(selected), org.Tier)
			}
		})
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, _ := render(t, ErrorPage(Page{Title: "Not found", User: tt.user}, 404, "That page does not exist."))
			page := byTestID(doc, "error-page")
			if !strings.Contains(page.Text(), "404") || !strings.Contains(page.Text(), "That page does not exist.") {
				t.Errorf("error page = %q", page.Text())
			}
			if page.Find(fmt.Sprintf(`a[href=%q]`, tt.back)).Length() != 1 {
				t.Errorf("no link back to %s", tt.back)
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
			OrgName: evil, TierName: evil, RefillPerSec: evil,
			Tokens: []TokenRow{{Name: evil, Prefix: evil, LastUsed: evil, Status: evil}},
		})},
		{"tokens", Tokens(p, TokensView{
			NewToken: &NewTokenView{Name: evil, Secret: evil},
			Form:     TokenForm{Name: evilAttr, ExpiresInDays: evilAttr},
			Tokens:   []TokenRow{{ID: 1, Name: evil, Prefix: evil, Created: evil, LastUsed: evil, Expires: evil, Status: "active"}},
		})},
		{"admin", AdminTiers(p, AdminTiersView{
			Tiers:     []TierRow{{Name: evilAttr, RefillPerSec: evilAttr, RefillFloor: evil}},
			Orgs:      []OrgRow{{ID: 1, Name: evil, Tier: evilAttr, Created: evil}},
			TierNames: []string{evilAttr},
		})},
		{"error", ErrorPage(p, 500, evil)},
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
		if got := formatCount(tt.n); got != tt.want {
			t.Errorf("formatCount(%d) = %q, want %q", tt.n, got, tt.want)
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
