package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/handlers"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/testsync"
	"github.com/sluicehq/sluice/models"
)

// TestPagesByRole visits every page as each kind of visitor: anonymous
// visitors are sent to sign in, members and owners see their pages but not
// the admin's, admins see everything.
func TestPagesByRole(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		visitors := map[string]*browser{
			"anonymous": s.anonymous(),
			"member":    s.signedIn(s.member("mia@example.com", "Mia's Models")),
			"owner":     s.signedIn(s.signup("ada@example.com", "Analytical Engines")),
			"admin":     s.signedIn(s.admin),
		}
		const notAdmin = "This page is for Sluice admins."
		signedInNav := []string{"nav-dashboard", "nav-tokens", "nav-user", "logout"}
		adminNav := []string{"nav-admin", "nav-upstreams"}
		anonymousNav := []string{"nav-login", "nav-signup"}
		tests := []struct {
			who, method, path string
			status            int
			location          string   // for redirects
			ids               []string // data-testids on the page
			absent            []string // data-testids not on the page
			message           string   // the error page's message
		}{
			{who: "anonymous", path: "/", status: 303, location: "/login"},
			{who: "member", path: "/", status: 303, location: "/dashboard"},
			{who: "admin", path: "/", status: 303, location: "/dashboard"},

			{who: "anonymous", path: "/login", status: 200, ids: append([]string{"login-form"}, anonymousNav...), absent: []string{"form-error", "nav-user"}},
			{who: "anonymous", path: "/signup", status: 200, ids: append([]string{"signup-form"}, anonymousNav...), absent: []string{"form-error", "nav-user"}},
			{who: "owner", path: "/login", status: 200, ids: []string{"login-form"}},

			{who: "anonymous", path: "/dashboard", status: 303, location: "/login"},
			{who: "member", path: "/dashboard", status: 200, ids: append([]string{"dashboard", "org-name", "tier", "tokens-empty", "quick-start"}, signedInNav...), absent: adminNav},
			{who: "owner", path: "/dashboard", status: 200, ids: append([]string{"dashboard", "requests-today", "tokens-month"}, signedInNav...), absent: append([]string{"freezes", "tuned-notice"}, adminNav...)},
			{who: "admin", path: "/dashboard", status: 200, ids: append(append([]string{"dashboard"}, signedInNav...), adminNav...)},

			{who: "anonymous", path: "/tokens", status: 303, location: "/login"},
			{who: "member", path: "/tokens", status: 200, ids: append([]string{"tokens", "create-token-form", "tokens-empty"}, signedInNav...), absent: append([]string{"new-token", "flash"}, adminNav...)},
			{who: "owner", path: "/tokens", status: 200, ids: []string{"tokens", "create-token-form"}, absent: adminNav},
			{who: "admin", path: "/tokens", status: 200, ids: append([]string{"tokens", "create-token-form"}, adminNav...)},

			{who: "anonymous", path: "/admin/tiers", status: 303, location: "/login"},
			{who: "member", path: "/admin/tiers", status: 403, message: notAdmin, ids: []string{"nav-user"}, absent: append([]string{"admin-tiers"}, adminNav...)},
			{who: "owner", path: "/admin/tiers", status: 403, message: notAdmin, absent: []string{"admin-tiers"}},
			{who: "admin", path: "/admin/tiers", status: 200, ids: append([]string{"admin-tiers", "tier-card", "tier-form-free", "tier-form-premium", "limiter-state", "admin-freezes", "freezes-empty", "admin-tuning", "tuning-empty", "create-tier-form", "admin-nav"}, adminNav...)},

			// The admin console's other pages.
			{who: "anonymous", path: "/admin", status: 303, location: "/login"},
			{who: "admin", path: "/admin", status: 303, location: "/admin/organizations"},
			{who: "anonymous", path: "/admin/organizations", status: 303, location: "/login"},
			{who: "member", path: "/admin/organizations", status: 403, message: notAdmin, absent: []string{"admin-overview"}},
			{who: "owner", path: "/admin/organizations", status: 403, message: notAdmin, absent: []string{"admin-overview"}},
			{who: "admin", path: "/admin/organizations", status: 200, ids: append([]string{"admin-overview", "admin-nav", "overview-search", "overview-row", "pager"}, adminNav...)},
			{who: "owner", path: "/admin/organizations/1", status: 403, message: notAdmin, absent: []string{"admin-org"}},
			{who: "admin", path: "/admin/organizations/1", status: 200, ids: []string{"admin-org", "org-usage", "org-budget", "org-invoices", "org-users"}},
			{who: "admin", path: "/admin/organizations/999999", status: 404, message: "No such organization."},
			{who: "admin", path: "/admin/organizations/nope", status: 404, message: "No such organization."},
			{who: "owner", path: "/admin/prices", status: 403, message: notAdmin, absent: []string{"admin-prices"}},
			{who: "admin", path: "/admin/prices", status: 200, ids: []string{"admin-prices", "price-row", "set-price-form"}},
			{who: "member", path: "/admin/audit", status: 403, message: notAdmin, absent: []string{"admin-audit"}},
			{who: "admin", path: "/admin/audit", status: 200, ids: []string{"admin-audit", "audit-filter", "audit-row"}},

			{who: "anonymous", path: "/admin/upstreams", status: 303, location: "/login"},
			{who: "member", path: "/admin/upstreams", status: 403, message: notAdmin, absent: []string{"admin-upstreams"}},
			{who: "owner", path: "/admin/upstreams", status: 403, message: notAdmin, absent: []string{"admin-upstreams", "add-upstream-form"}},
			{who: "admin", path: "/admin/upstreams", status: 200, ids: append([]string{"admin-upstreams", "upstreams-empty", "add-upstream-form"}, adminNav...)},

			// Forms behind a role refuse the wrong visitor before doing anything.
			{who: "anonymous", method: "POST", path: "/tokens", status: 303, location: "/login"},
			{who: "anonymous", method: "POST", path: "/tokens/1/revoke", status: 303, location: "/login"},
			{who: "anonymous", method: "POST", path: "/admin/tiers/free", status: 303, location: "/login"},
			{who: "owner", method: "POST", path: "/admin/tiers/free", status: 403, message: notAdmin},
			{who: "owner", method: "POST", path: "/admin/organizations/1/tier", status: 403, message: notAdmin},
			{who: "owner", method: "POST", path: "/admin/freezes/1/lift", status: 403, message: notAdmin},
			{who: "member", method: "POST", path: "/admin/upstreams", status: 403, message: notAdmin},
			{who: "member", method: "POST", path: "/admin/upstreams/1/delete", status: 403, message: notAdmin},
			{who: "anonymous", method: "POST", path: "/admin/tiers", status: 303, location: "/login"},
			{who: "owner", method: "POST", path: "/admin/tiers", status: 403, message: notAdmin},
			{who: "owner", method: "POST", path: "/admin/tiers/free/delete", status: 403, message: notAdmin},
			{who: "owner", method: "POST", path: "/admin/prices", status: 403, message: notAdmin},
			{who: "owner", method: "POST", path: "/admin/upgrade-requests/1/approve", status: 403, message: notAdmin},
			{who: "member", method: "POST", path: "/admin/upgrade-requests/1/decline", status: 403, message: notAdmin},
		}
		before := s.snapshot()
		for _, tt := range tests {
			method := tt.method
			if method == "" {
				method = http.MethodGet
			}
			t.Run(tt.who+" "+method+" "+tt.path, func(t *testing.T) {
				b := visitors[tt.who]
				var w *response
				if method == http.MethodGet {
					w = b.get(tt.path)
				} else {
					w = b.post(tt.path, formFor(tt.path))
				}
				w.t = t
				switch {
				case tt.location != "":
					w.expectRedirect(tt.location)
					return
				case tt.message != "":
					w.expectError(tt.status, tt.message)
					if w.testid("error-request-id").Length() != 0 {
						t.Error("a 4xx page quotes a request id: only server failures need one")
					}
				default:
					w.expectPage(tt.status, tt.ids...)
				}
				for _, id := range tt.ids {
					if w.testid(id).Length() == 0 {
						t.Errorf("data-testid=%q is missing", id)
					}
				}
				for _, id := range tt.absent {
					if w.testid(id).Length() != 0 {
						t.Errorf("data-testid=%q is shown to %s", id, tt.who)
					}
				}
				if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
					t.Errorf("Cache-Control = %q, want no-store: pages carry account data", cc)
				}
			})
		}
		if after := s.snapshot(); after != before {
			t.Errorf("refused requests changed the state:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})
}

// formFor is a plausible, valid form for a path, so a refusal in the
// role table is the role's doing and not the form's.
func formFor(path string) url.Values {
	switch {
	case path == "/admin/tiers":
		return url.Values{"name": {"gold"}, "capacity": {"5"}, "refill_per_sec": {"1"}, "tokens_per_minute": {"0"},
			"freeze_threshold": {"0"}, "freeze_minutes": {"1"}, "refill_floor": {"0"}}
	case strings.HasPrefix(path, "/admin/tiers/"):
		return url.Values{"capacity": {"5"}, "refill_per_sec": {"1"}, "tokens_per_minute": {"0"},
			"freeze_threshold": {"0"}, "freeze_minutes": {"1"}, "refill_floor": {"0"}}
	case path == "/admin/upstreams":
		return url.Values{"name": {"x"}, "base_url": {"https://api.example.com/v1"}, "api_key": {"sk-test-12345678"}, "weight": {"1"}}
	case path == "/tokens":
		return url.Values{"name": {"ci"}}
	case strings.HasPrefix(path, "/admin/organizations/"):
		return url.Values{"tier": {"premium"}}
	case path == "/admin/prices":
		return url.Values{"model": {"sluice-local"}, "input_per_mtok": {"1"}, "output_per_mtok": {"2"}}
	}
	return url.Values{}
}

func TestSignedInPagesShowWhoIsSignedIn(t *testing.T) {
	t.Parallel()
	s := newSite(t, testdb.SQLite(t))
	b := s.signedIn(s.signup("ada@example.com", "Analytical Engines"))
	for _, path := range []string{"/dashboard", "/tokens"} {
		w := b.get(path)
		w.expectPage(http.StatusOK, "nav-user")
		if got := w.text("nav-user"); got != "ada@example.com Analytical Engines · owner" {
			t.Errorf("%s: nav-user = %q, want the email, organization and role", path, got)
		}
	}
	// An admin page refused to her still says who she is and leads back.
	w := b.get("/admin/tiers")
	w.expectError(http.StatusForbidden, "This page is for Sluice admins.")
	if got := w.text("nav-user"); !strings.Contains(got, "ada@example.com") {
		t.Errorf("403 page nav-user = %q, want her email", got)
	}
	if href, _ := w.testid("error-page").Find("a").Attr("href"); href != "/dashboard" {
		t.Errorf("403 page links back to %q, want /dashboard", href)
	}
}

// TestStaticFilesAreServed needs no database: neither the assets nor an
// anonymous visit to a public page touch one.
func TestStaticFilesAreServed(t *testing.T) {
	t.Parallel()
	s := &site{t: t, logs: &testsync.Buffer{}}
	s.h = s.router(handlers.Deps{})
	w := s.anonymous().get("/static/sluice.css")
	if w.Code != http.StatusOK {
		t.Fatalf("GET /static/sluice.css = %d, want 200", w.Code)
	}
	if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/css") {
		t.Errorf("Content-Type = %q, want text/css", ct)
	}
	if !strings.Contains(w.Body.String(), ":root") {
		t.Errorf("stylesheet body does not look like the stylesheet: %.80q", w.Body.String())
	}
	if w := s.anonymous().get("/static/missing.css"); w.Code != http.StatusNotFound {
		t.Errorf("GET /static/missing.css = %d, want 404", w.Code)
	}
	// Every page links the stylesheet that is served.
	if href, _ := s.anonymous().get("/login").page().Find(`link[rel="stylesheet"]`).Attr("href"); href != "/static/sluice.css" {
		t.Errorf("stylesheet link = %q, want /static/sluice.css", href)
	}
}

// TestDashboardCountsUsageByTheInjectedClock checks the day and month
// windows against the clock the pages are given, not the wall clock.
func TestDashboardCountsUsageByTheInjectedClock(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		u := s.signup("ada@example.com", "Analytical Engines")
		tok := s.token(u, "ci")
		other := s.token(s.signup("bob@example.com", "Babbage"), "other org")
		event := func(id string, tok models.APIToken, at time.Time, prompt, completion int) models.UsageEvent {
			return models.UsageEvent{RequestID: id, OrgID: tok.OrgID, TokenID: tok.ID, Model: "sluice-local",
				PromptTokens: prompt, CompletionTokens: completion, Status: 200, CreatedAt: at}
		}
		evs := []models.UsageEvent{
			event("today", tok, epoch.Add(-time.Hour), 10, 5),                                         // 09:30 today
			event("midnight", tok, time.Date(2027, 3, 15, 0, 0, 0, 0, time.UTC), 1, 1),                // today's first instant
			event("this-month", tok, time.Date(2027, 3, 2, 8, 0, 0, 0, time.UTC), 1000, 234),          // earlier this month
			event("last-month", tok, time.Date(2027, 2, 28, 23, 59, 59, 0, time.UTC), 100000, 100000), // not counted
			event("another-org", other, epoch.Add(-time.Minute), 7777, 7777),                          // not hers
		}
		if err := s.store.InsertUsageEvents(context.Background(), evs); err != nil {
			t.Fatal(err)
		}
		w := s.signedIn(u).get("/dashboard")
		w.expectPage(http.StatusOK, "dashboard")
		want := map[string]string{
			"org-name":       "Analytical Engines",
			"requests-today": "2",
			"tokens-today":   "17",
			"requests-month": "3",
			"tokens-month":   "1,251",
			"active-tokens":  "1 active token",
			"tier-capacity":  "30 requests",
			"tier-refill":    "0.5",
		}
		for id, v := range want {
			if got := w.text(id); got != v {
				t.Errorf("%s = %q, want %q", id, got, v)
			}
		}
		if n := w.testid("dashboard-token-row").Length(); n != 1 {
			t.Errorf("dashboard lists %d tokens, want her 1", n)
		}

		// At midnight the day rolls over; the month does not.
		s.clock.Advance(13*time.Hour + 30*time.Minute) // 2027-03-16 00:00
		w = s.signedIn(u).get("/dashboard")
		if got := w.text("requests-today"); got != "0" {
			t.Errorf("after midnight requests-today = %q, want 0", got)
		}
		if got := w.text("requests-month"); got != "3" {
			t.Errorf("after midnight requests-month = %q, want 3", got)
		}
	})
}

func TestDashboardShowsFreezesUntilTheyThaw(t *testing.T) {
	t.Parallel()
	s := newSite(t, testdb.SQLite(t))
	u := s.signup("ada@example.com", "Analytical Engines")
	tok := s.token(u, "ci")
	s.freeze(tok, 10*time.Minute)
	b := s.signedIn(u)

	w := b.get("/dashboard")
	w.expectPage(http.StatusOK, "freezes", "freeze-row")
	if got := w.text("freeze-status"); got != "active" {
		t.Errorf("freeze-status = %q, want active", got)
	}
	if got := w.text("freeze-reason"); got != "25 requests were rejected within one minute" {
		t.Errorf("freeze-reason = %q", got)
	}
	if got := w.testid("freeze-row").Find("code").Text(); got != tok.Prefix+"…" {
		t.Errorf("frozen token shown as %q, want its prefix %q", got, tok.Prefix+"…")
	}

	s.clock.Advance(10 * time.Minute)
	w = b.get("/dashboard")
	if got := w.text("freeze-status"); got != "expired" {
		t.Errorf("after its end freeze-status = %q, want expired", got)
	}
}
