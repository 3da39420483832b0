package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// TestCrossSiteFormsAreRefused posts every state-changing form as another
// site would: each is refused with 403 and the refusal message before it
// does anything; the same post from the site itself goes through.
func TestCrossSiteFormsAreRefused(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		ada := s.signup("ada@example.com", "Analytical Engines")
		tok := s.token(ada, "to revoke")
		frozen := s.freeze(s.token(ada, "frozen"), time.Hour)
		key := s.upstreamKey("to delete", "sk-test-secret-1234")
		if _, err := s.accounts.CreateTier(context.Background(), s.admin.User, "spare", models.TierSettings{Capacity: 1, RefillPerSec: 1}); err != nil {
			t.Fatal(err)
		}
		bob := s.signup("bob@example.com", "Babbage & Co")
		upgrade, err := s.billing.RequestUpgrade(context.Background(), bob, "premium", "")
		if err != nil {
			t.Fatal(err)
		}
		owner := func() *browser { return s.signedIn(ada) }
		admin := func() *browser { return s.signedIn(s.admin) }

		forms := []struct {
			name     string
			visitor  func() *browser
			path     string
			form     url.Values
			status   int    // when posted from the site itself
			location string // its redirect, if any
			session  string // "set" or "cleared" when the form changes the cookie rather than the store
		}{
			{name: "login", visitor: s.anonymous, path: "/login", form: url.Values{"email": {"ada@example.com"}, "password": {password}},
				status: 303, location: "/dashboard", session: "set"},
			{name: "signup", visitor: s.anonymous, path: "/signup", form: url.Values{"email": {"eve@example.com"}, "password": {password}, "organization": {"Eve"}},
				status: 303, location: "/dashboard"},
			{name: "logout", visitor: owner, path: "/logout", form: url.Values{}, status: 303, location: "/login", session: "cleared"},
			{name: "create token", visitor: owner, path: "/tokens", form: url.Values{"name": {"planted"}}, status: 201},
			{name: "revoke token", visitor: owner, path: fmt.Sprintf("/tokens/%d/revoke", tok.ID), form: url.Values{},
				status: 303, location: "/tokens?done=revoked"},
			{name: "update tier", visitor: admin, path: "/admin/tiers/premium", form: tierValues(map[string]string{"capacity": "1"}),
				status: 303, location: "/admin/tiers?done=tier"},
			{name: "move organization", visitor: admin, path: fmt.Sprintf("/admin/organizations/%d/tier", ada.OrgID), form: url.Values{"tier": {"premium"}},
				status: 303, location: fmt.Sprintf("/admin/organizations/%d?done=tier", ada.OrgID)},
			{name: "create tier", visitor: admin, path: "/admin/tiers", form: planValues(nil), status: 303, location: "/admin/tiers?done=created"},
			{name: "delete tier", visitor: admin, path: "/admin/tiers/spare/delete", form: url.Values{}, status: 303, location: "/admin/tiers?done=deleted"},
			{name: "approve upgrade", visitor: admin, path: fmt.Sprintf("/admin/upgrade-requests/%d/approve", upgrade.ID), form: url.Values{},
				status: 303, location: fmt.Sprintf("/admin/organizations/%d?done=approved", bob.OrgID)},
			{name: "lift freeze", visitor: admin, path: fmt.Sprintf("/admin/freezes/%d/lift", frozen.ID), form: url.Values{},
				status: 303, location: "/admin/tiers?done=lifted"},
			{name: "add provider key", visitor: admin, path: "/admin/upstreams", form: upstreamValues(map[string]string{"base_url": "https://attacker.example/v1"}),
				status: 303, location: "/admin/upstreams?done=added"},
			{name: "delete provider key", visitor: admin, path: fmt.Sprintf("/admin/upstreams/%d/delete", key.ID), form: url.Values{},
				status: 303, location: "/admin/upstreams?done=deleted"},
		}
		crossSite := []map[string]string{
			{"Sec-Fetch-Site": "cross-site"},
			{"Sec-Fetch-Site": "same-site"}, // a sibling subdomain is another origin
			{"Sec-Fetch-Site": "cross-site", "Origin": "http://example.com"},
			{"Origin": "https://evil.example"},    // a browser without Sec-Fetch-Site
			{"Origin": "http://example.com:8080"}, // another port is another origin
			{"Origin": "null", "Referer": "http://example.com/"},
		}
		for _, f := range forms {
			t.Run(f.name, func(t *testing.T) {
				before := s.snapshot()
				for _, h := range crossSite {
					b := f.visitor()
					had := b.cookie
					w := b.do(http.MethodPost, f.path, f.form, h)
					w.t = t
					w.expectError(http.StatusForbidden, refusedOrigin)
					if t.Failed() {
						t.Fatalf("headers %v were not refused", h)
					}
					if c := w.Header().Values("Set-Cookie"); len(c) != 0 {
						t.Errorf("headers %v: a refused form set cookies %q", h, c)
					}
					if b.cookie != had {
						t.Errorf("headers %v: a refused form changed the session", h)
					}
				}
				if after := s.snapshot(); after != before {
					t.Fatalf("a refused form changed the state:\nbefore:\n%s\nafter:\n%s", before, after)
				}

				b := f.visitor()
				w := b.do(http.MethodPost, f.path, f.form, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://example.com"})
				w.t = t
				if f.location != "" {
					w.expectRedirect(f.location)
				} else if w.Code != f.status {
					t.Fatalf("same-origin post = %d, want %d; body:\n%s", w.Code, f.status, w.Body.String())
				}
				switch f.session {
				case "set":
					if c := w.sessionCookie(); c == nil || c.Value == "" {
						t.Errorf("same-origin login set no session: %v", c)
					}
				case "cleared":
					if c := w.sessionCookie(); c == nil || c.MaxAge >= 0 {
						t.Errorf("same-origin logout did not clear the session: %v", c)
					}
				default:
					if s.snapshot() == before {
						t.Error("the same-origin post changed nothing")
					}
				}
			})
		}
	})
}

// TestSameOriginFormsAreAccepted checks the requests the guard must let
// through: the site's own forms, browsers that send no Sec-Fetch-Site, and
// clients that are not browsers at all.
func TestSameOriginFormsAreAccepted(t *testing.T) {
	t.Parallel()
	s := newSite(t, testdb.SQLite(t))
	b := s.signedIn(s.signup("ada@example.com", "Analytical Engines"))
	tests := []struct {
		name   string
		header map[string]string
	}{
		{"same-origin fetch", map[string]string{"Sec-Fetch-Site": "same-origin"}},
		{"user-initiated", map[string]string{"Sec-Fetch-Site": "none"}},
		{"matching Origin only", map[string]string{"Origin": "http://example.com"}},
		{"no browser headers", nil},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := b.do(http.MethodPost, "/tokens", url.Values{"name": {fmt.Sprint("token ", i)}}, tt.header)
			w.t = t
			w.expectPage(http.StatusCreated, "new-token")
			if n := w.testid("token-row").Length(); n != i+1 {
				t.Errorf("%d tokens listed, want %d", n, i+1)
			}
		})
	}
	// Reading is always allowed, so links from other sites work.
	w := b.do(http.MethodGet, "/dashboard", nil, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://elsewhere.example"})
	w.expectPage(http.StatusOK, "dashboard")
}
