package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// TestLoginSetsAHardenedSessionCookie signs in over plain HTTP and over TLS:
// the cookie is HttpOnly, SameSite=Lax, site-wide, expires with the session
// by the injected clock, and is Secure exactly when the request was.
func TestLoginSetsAHardenedSessionCookie(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		ada := s.signup("ada@example.com", "Analytical Engines")
		tests := []struct {
			name, base string
			secure     bool
		}{
			{"http", "http://example.com", false},
			{"https", "https://example.com", true},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				b := s.anonymous()
				w := b.do(http.MethodPost, tt.base+"/login", url.Values{"email": {"ada@example.com"}, "password": {password}},
					map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": tt.base})
				w.t = t
				w.expectRedirect("/dashboard")
				c := w.sessionCookie()
				if c == nil {
					t.Fatalf("no %s cookie; Set-Cookie: %q", cookieName, w.Header().Values("Set-Cookie"))
				}
				if !c.HttpOnly {
					t.Error("session cookie is readable by scripts (no HttpOnly)")
				}
				if c.SameSite != http.SameSiteLaxMode {
					t.Errorf("SameSite = %v, want Lax", c.SameSite)
				}
				if c.Secure != tt.secure {
					t.Errorf("Secure = %v, want %v over %s", c.Secure, tt.secure, tt.name)
				}
				if c.Path != "/" {
					t.Errorf("Path = %q, want /", c.Path)
				}
				if want := epoch.Add(sessionTTL); !c.Expires.Equal(want) {
					t.Errorf("Expires = %v, want %v (the clock's now plus the session TTL)", c.Expires, want)
				}
				if id, err := s.sessions.Parse(c.Value); err != nil || id != ada.ID {
					t.Errorf("cookie names user %d (%v), want %d", id, err, ada.ID)
				}
				w = b.get(tt.base + "/dashboard")
				w.expectPage(http.StatusOK, "dashboard")
				if got := w.text("nav-user"); !strings.HasPrefix(got, "ada@example.com") {
					t.Errorf("signed in as %q", got)
				}
			})
		}
	})
}

func TestEachLoginStartsANewSession(t *testing.T) {
	t.Parallel()
	s := newSite(t, testdb.SQLite(t))
	s.signup("ada@example.com", "Analytical Engines")
	b := s.login("ada@example.com", password)
	first := b.cookie.Value
	// Signing in again, with the old cookie still sent, replaces it.
	b.post("/login", url.Values{"email": {"ada@example.com"}, "password": {password}}).expectRedirect("/dashboard")
	if b.cookie == nil || b.cookie.Value == first {
		t.Error("a second login kept the first session's token")
	}
}

// TestLogoutClearsTheCookie checks the cookie is expired with the same
// attributes it was set with, so the browser really drops it.
func TestLogoutClearsTheCookie(t *testing.T) {
	t.Parallel()
	s := newSite(t, testdb.SQLite(t))
	s.signup("ada@example.com", "Analytical Engines")
	b := s.login("ada@example.com", password)

	w := b.post("/logout", url.Values{})
	w.expectRedirect("/login")
	c := w.sessionCookie()
	if c == nil {
		t.Fatalf("logout sent no %s cookie; Set-Cookie: %q", cookieName, w.Header().Values("Set-Cookie"))
	}
	if c.Value != "" || c.MaxAge >= 0 {
		t.Errorf("logout cookie = value %q max-age %d, want an empty value and Max-Age=0", c.Value, c.MaxAge)
	}
	if !c.Expires.Equal(time.Unix(0, 0)) {
		t.Errorf("logout cookie expires %v, want the epoch", c.Expires)
	}
	if c.Path != "/" || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode {
		t.Errorf("logout cookie %+v does not match the session cookie's path and flags", c)
	}
	if b.cookie != nil {
		t.Fatal("the browser still holds the session")
	}
	b.get("/dashboard").expectRedirect("/login")
	if w := b.get("/login"); w.testid("nav-login").Length() == 0 {
		t.Error("after logout the navigation is not the anonymous one")
	}

	// Logging out when not signed in is harmless.
	s.anonymous().post("/logout", url.Values{}).expectRedirect("/login")
}

// TestBadSessionsAreDropped sends sessions that must not sign anyone in:
// the visitor is treated as anonymous and the cookie is cleared.
func TestBadSessionsAreDropped(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		ada := s.signup("ada@example.com", "Analytical Engines")
		secret := []byte("0123456789abcdef0123456789abcdef") // the site's
		// issue forges a session token in the format accounts signs, without
		// recording it: what a thief with the secret, or a clock, could make.
		issue := func(secret []byte, now time.Time, u models.User) string {
			claims := jwt.RegisteredClaims{
				Issuer: "sluice", Audience: jwt.ClaimStrings{"sluice-session"}, Subject: strconv.FormatInt(u.ID, 10),
				IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now),
				ExpiresAt: jwt.NewNumericDate(now.Add(sessionTTL)), ID: "forged",
			}
			tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
			if err != nil {
				t.Fatal(err)
			}
			return tok
		}
		valid, _, err := s.sessions.Start(context.Background(), s.store, ada)
		if err != nil {
			t.Fatal(err)
		}
		tests := []struct{ name, value string }{
			{"garbage", "not-a-jwt"},
			{"tampered", valid[:len(valid)-2] + "xx"},
			{"signed with another secret", issue([]byte("another secret, another server!!"), epoch, ada.User)},
			{"expired", issue(secret, epoch.Add(-sessionTTL-time.Second), ada.User)},
			{"not yet valid", issue(secret, epoch.Add(time.Hour), ada.User)},
			{"user gone", issue(secret, epoch, models.User{ID: ada.ID + 1000})},
			{"well signed but never started", issue(secret, epoch, ada.User)},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				b := &browser{s: s, cookie: &http.Cookie{Name: cookieName, Value: tt.value}}
				w := b.get("/dashboard")
				w.t = t
				w.expectRedirect("/login")
				if c := w.sessionCookie(); c == nil || c.MaxAge >= 0 {
					t.Errorf("the bad session was not cleared: %v", c)
				}
				// Public pages still work, as an anonymous visitor.
				b = &browser{s: s, cookie: &http.Cookie{Name: cookieName, Value: tt.value}}
				w = b.get("/login")
				w.t = t
				w.expectPage(http.StatusOK, "login-form", "nav-login")
			})
		}
		// The same session, still valid, signs her in.
		w := (&browser{s: s, cookie: &http.Cookie{Name: cookieName, Value: valid}}).get("/dashboard")
		w.expectPage(http.StatusOK, "dashboard")

		// And it ends with its TTL by the injected clock.
		s.clock.Advance(sessionTTL)
		(&browser{s: s, cookie: &http.Cookie{Name: cookieName, Value: valid}}).get("/dashboard").expectRedirect("/login")
	})
}
