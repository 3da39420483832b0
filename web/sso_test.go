package web_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/oauth2-proxy/mockoidc"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/signing"
)

// ssoRig is the site served on a real port, signing in through a real
// OpenID Connect provider (mockoidc, which approves whoever is queued)
// with a browser-like client that keeps cookies and follows redirects one
// step at a time, so a test can tamper with any of them.
type ssoRig struct {
	*site
	t      *testing.T
	base   string
	idp    *mockoidc.MockOIDC
	clock  *clocktest.Clock // single sign-on's clock: the ID tokens' expiry is checked on it
	client *http.Client
	// secrets are the codes, states and nonces of every sign-in so far,
	// none of which may reach the log.
	secrets []string
}

// newSSORig wires single sign-on into the site, joining new users of
// domains to their organizations; flowTTL 0 is the default.
func newSSORig(t *testing.T, db *models.DB, domains map[string]int64, flowTTL time.Duration) *ssoRig {
	t.Helper()
	s := newSite(t, db)
	idp, err := mockoidc.Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idp.Shutdown() })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.h.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	// mockoidc stamps its tokens with the wall clock: single sign-on's
	// clock starts there, and the test moves it.
	clock := clocktest.New(time.Now())
	log := slog.New(slog.NewTextHandler(s.logs, nil))
	sso, err := accounts.NewSSO(context.Background(), accounts.SSOConfig{Issuer: idp.Issuer(), ClientID: idp.ClientID, ClientSecret: idp.ClientSecret,
		RedirectURL: srv.URL + "/auth/oidc/callback", Domains: domains, Now: clock.Now, FlowTTL: flowTTL},
		s.accounts, signing.NewMemoryNonces(clock.Now), []byte("0123456789abcdef0123456789abcdef"), log)
	if err != nil {
		t.Fatal(err)
	}
	s.deps.SSO = sso
	s.rebuild()
	r := &ssoRig{site: s, t: t, base: srv.URL, idp: idp, clock: clock}
	r.client = r.newClient()
	return r
}

// newClient is another browser: cookies of its own.
func (r *ssoRig) newClient() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// hop is one request's answer.
type hop struct {
	status   int
	location string
	body     string
	doc      *goquery.Document
}

func (h hop) text(testid string) string {
	return strings.Join(strings.Fields(h.doc.Find(`[data-testid="`+testid+`"]`).Text()), " ")
}

func (r *ssoRig) get(c *http.Client, target string) hop {
	r.t.Helper()
	resp, err := c.Get(target)
	if err != nil {
		r.t.Fatalf("GET %s: %v", target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	doc, _ := goquery.NewDocumentFromReader(bytes.NewReader(b))
	loc := resp.Header.Get("Location")
	if loc != "" && strings.HasPrefix(loc, "/") {
		loc = r.base + loc
	}
	return hop{status: resp.StatusCode, location: loc, body: string(b), doc: doc}
}

// queue has the provider approve the next sign-in as this account.
func (r *ssoRig) queue(subject, email string, verified bool) {
	r.idp.QueueUser(&mockoidc.MockUser{Subject: subject, Email: email, EmailVerified: verified})
}

// flow is one sign-in's hops up to the provider's redirect back.
type flow struct {
	authorize *url.URL // the provider's authorization URL Sluice sent the browser to
	callback  *url.URL // where the provider sent it back
}

// toCallback starts a sign-in with c and lets the provider approve it;
// tamper, when not nil, changes the authorization request first (as a
// man in the middle would).
func (r *ssoRig) toCallback(c *http.Client, tamper func(q url.Values)) flow {
	r.t.Helper()
	start := r.get(c, r.base+"/auth/oidc/start")
	if start.status != http.StatusFound || !strings.HasPrefix(start.location, r.idp.AuthorizationEndpoint()) {
		r.t.Fatalf("start: %d to %q, want a redirect to the provider\n%s", start.status, start.location, start.body)
	}
	authz, _ := url.Parse(start.location)
	if tamper != nil {
		q := authz.Query()
		tamper(q)
		authz.RawQuery = q.Encode()
	}
	back := r.get(c, authz.String())
	if back.status != http.StatusFound || !strings.HasPrefix(back.location, r.base+"/auth/oidc/callback?") {
		r.t.Fatalf("provider: %d to %q\n%s", back.status, back.location, back.body)
	}
	cb, _ := url.Parse(back.location)
	r.secrets = append(r.secrets, cb.Query().Get("code"), cb.Query().Get("state"), authz.Query().Get("nonce"))
	return flow{authorize: authz, callback: cb}
}

// signIn goes all the way: start, provider, callback, and the page the
// callback leads to (or shows).
func (r *ssoRig) signIn(c *http.Client, tamper func(q url.Values)) hop {
	r.t.Helper()
	f := r.toCallback(c, tamper)
	h := r.get(c, f.callback.String())
	if h.status == http.StatusSeeOther {
		return r.get(c, h.location)
	}
	return h
}

// cookie is c's cookie name for the site, "" when it has none.
func (r *ssoRig) cookie(c *http.Client, name string) string {
	u, _ := url.Parse(r.base + "/auth/oidc/callback")
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == name {
			return ck.Value
		}
	}
	return ""
}

// wantLoginError checks a refused sign-in: the login page, with its status
// and message, the SSO button to start again, and no session.
func (r *ssoRig) wantLoginError(c *http.Client, h hop, status int, message string) {
	r.t.Helper()
	if h.status != status || h.text("form-error") != message || h.doc.Find(`[data-testid=login-form]`).Length() != 1 {
		r.t.Fatalf("got %d %q, want %d on the login page %q\n%s", h.status, h.text("form-error"), status, message, h.body)
	}
	if h.doc.Find(`[data-testid=sso-start]`).Length() != 1 {
		r.t.Errorf("the refusal page has no Sign in with SSO button")
	}
	if r.cookie(c, cookieName) != "" {
		r.t.Errorf("a refused sign-in left a session cookie")
	}
}

// TestSSOFirstSignInLinksAnExistingUser: the login page offers SSO; the
// provider's verified email is an existing user's, who lands on their
// dashboard, signed in with the same cookie a password sign-in sets, the
// flow's cookie used up. The PKCE challenge (S256), the state and the
// nonce went to the provider. When the email changes at the provider,
// the account stays the same user.
func TestSSOFirstSignInLinksAnExistingUser(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		r := newSSORig(t, db, nil, 0)
		ada := r.signup("ada@example.com", "Analytical Engines")
		login := r.get(r.client, r.base+"/login")
		if href, _ := login.doc.Find(`[data-testid=sso-start]`).Attr("href"); href != "/auth/oidc/start" || login.text("sso-start") != "Sign in with SSO" {
			t.Fatalf("the login page's SSO button: %q %q", href, login.text("sso-start"))
		}

		r.queue("sub-ada", "ada@example.com", true)
		f := r.toCallback(r.client, nil)
		q := f.authorize.Query()
		if q.Get("code_challenge_method") != "S256" || len(q.Get("code_challenge")) != 43 || q.Get("state") == "" || q.Get("nonce") == "" ||
			q.Get("redirect_uri") != r.base+"/auth/oidc/callback" || q.Get("scope") != "openid email" {
			t.Fatalf("the authorization request: %v", q)
		}
		if r.cookie(r.client, "sluice_sso") == "" {
			t.Fatal("no flow cookie while at the provider")
		}
		cb := r.get(r.client, f.callback.String())
		if cb.status != http.StatusSeeOther || cb.location != r.base+"/dashboard" {
			t.Fatalf("callback: %d to %q\n%s", cb.status, cb.location, cb.body)
		}
		if r.cookie(r.client, cookieName) == "" || r.cookie(r.client, "sluice_sso") != "" {
			t.Fatalf("after the callback: session %q, flow %q", r.cookie(r.client, cookieName), r.cookie(r.client, "sluice_sso"))
		}
		dash := r.get(r.client, cb.location)
		if dash.status != http.StatusOK || dash.doc.Find(`[data-testid=dashboard]`).Length() != 1 ||
			!strings.Contains(dash.text("nav-user"), "ada@example.com") || !strings.Contains(dash.text("nav-org"), "Analytical Engines") {
			t.Fatalf("dashboard: %d %q", dash.status, dash.text("nav-user"))
		}

		// Another browser, and the provider now says ada@newname.example.
		other := r.newClient()
		r.queue("sub-ada", "ada@newname.example", true)
		dash = r.signIn(other, nil)
		if dash.status != http.StatusOK || !strings.Contains(dash.text("nav-user"), "ada@example.com") {
			t.Fatalf("after the email changed at the provider: %d %q\n%s", dash.status, dash.text("nav-user"), dash.body)
		}
		if u, err := r.store.UserByEmail(context.Background(), "ada@example.com"); err != nil || u.ID != ada.ID {
			t.Fatalf("ada: %+v %v", u, err)
		}
	})
}

// TestSSOListedDomainJoinsAsMember: a new user whose domain the operator
// gave to an organization lands in it as a member; their password sign-in
// says to use SSO, on the login page.
func TestSSOListedDomainJoinsAsMember(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		s := newSite(t, db)
		owner := s.signup("owner@corp.example", "Corp")
		r := newSSORig(t, db, map[string]int64{"corp.example": owner.OrgID}, 0)
		r.queue("sub-grace", "grace@corp.example", true)
		dash := r.signIn(r.client, nil)
		if dash.status != http.StatusOK || !strings.Contains(dash.text("nav-user"), "grace@corp.example") ||
			dash.text("nav-org") != "Corp · member" {
			t.Fatalf("dashboard: %d %q %q\n%s", dash.status, dash.text("nav-user"), dash.text("nav-org"), dash.body)
		}
		w := r.anonymous().post("/login", url.Values{"email": {"grace@corp.example"}, "password": {"anything-at-all"}})
		if w.Code != http.StatusUnauthorized || w.text("form-error") != "this account signs in with SSO: use “Sign in with SSO” instead of a password" ||
			w.testid("sso-start").Length() != 1 {
			t.Fatalf("password sign-in of an SSO user: %d %q", w.Code, w.text("form-error"))
		}
	})
}

// TestSSORefusals: each way a sign-in is refused lands on the login page
// with its own message and no session — an unverified or missing email, a
// state that is not the browser's, a nonce that is not the flow's, a PKCE
// challenge that is not the verifier's, an expired ID token, the
// provider's refusal, a callback without its cookie, and a replay of a
// sign-in that worked.
func TestSSORefusals(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		r := newSSORig(t, db, nil, time.Hour)
		fresh := func() *http.Client { return r.newClient() }

		c := fresh()
		r.queue("sub-1", "unverified@example.com", false)
		r.wantLoginError(c, r.signIn(c, nil), http.StatusForbidden,
			"your email address unverified@example.com is not verified at the identity provider; verify it there, then sign in again")
		if _, err := r.store.UserByEmail(context.Background(), "unverified@example.com"); err == nil {
			t.Error("an unverified email made a user")
		}

		c = fresh()
		r.queue("sub-2", "", true)
		r.wantLoginError(c, r.signIn(c, nil), http.StatusForbidden,
			"the identity provider did not share your email address, which Sluice needs; ask your administrator to allow the email scope")

		c = fresh()
		r.queue("sub-3", "state@example.com", true)
		f := r.toCallback(c, nil)
		q := f.callback.Query()
		q.Set("state", "an-attackers-state")
		f.callback.RawQuery = q.Encode()
		r.wantLoginError(c, r.get(c, f.callback.String()), http.StatusUnauthorized,
			"this sign-in does not match the one this browser started (perhaps another tab started a newer one); start again with “Sign in with SSO”")

		c = fresh()
		r.queue("sub-4", "nonce@example.com", true)
		r.wantLoginError(c, r.signIn(c, func(q url.Values) { q.Set("nonce", "another-nonce") }), http.StatusUnauthorized,
			"the identity provider's answer was not made for this sign-in; start again with “Sign in with SSO”")

		c = fresh()
		r.queue("sub-5", "pkce@example.com", true)
		r.wantLoginError(c, r.signIn(c, func(q url.Values) { q.Set("code_challenge", strings.Repeat("A", 43)) }), http.StatusUnauthorized,
			"the identity provider did not accept this sign-in; start again with “Sign in with SSO”")

		// The provider's own refusal, whose description is not shown.
		c = fresh()
		started, _ := url.Parse(r.get(c, r.base+"/auth/oidc/start").location)
		state := started.Query().Get("state")
		r.wantLoginError(c, r.get(c, r.base+"/auth/oidc/callback?error=access_denied&error_description=Call+555-0100&state="+state),
			http.StatusUnauthorized, "the sign-in was cancelled or refused at the identity provider")
		if h := r.get(c, r.base+"/auth/oidc/callback?error=access_denied&error_description=Call+555-0100&state="+state); strings.Contains(h.body, "555-0100") {
			t.Error("the provider's error description is shown")
		}

		c = fresh()
		r.queue("sub-7", "other-browser@example.com", true)
		f = r.toCallback(c, nil)
		stranger := fresh()
		r.wantLoginError(stranger, r.get(stranger, f.callback.String()), http.StatusUnauthorized,
			"this sign-in was not started in this browser, or its cookie is gone; start again with “Sign in with SSO”")

		// A sign-in that worked, replayed with a copy of its cookie.
		c = fresh()
		r.queue("sub-8", "replayed@example.com", true)
		f = r.toCallback(c, nil)
		copied := r.cookie(c, "sluice_sso")
		if h := r.get(c, f.callback.String()); h.status != http.StatusSeeOther {
			t.Fatalf("the sign-in to replay: %d\n%s", h.status, h.body)
		}
		thief := fresh()
		u, _ := url.Parse(r.base + "/auth/oidc/")
		thief.Jar.SetCookies(u, []*http.Cookie{{Name: "sluice_sso", Value: copied, Path: "/auth/oidc/"}})
		r.wantLoginError(thief, r.get(thief, f.callback.String()), http.StatusUnauthorized,
			"this sign-in has already been used; start again with “Sign in with SSO”")

		// The ID token expired (mockoidc's last 10 minutes) by the time the
		// browser came back: last, since the clock cannot go back.
		c = fresh()
		r.queue("sub-6", "slow@example.com", true)
		slow := r.toCallback(c, nil)
		r.clock.Advance(11 * time.Minute)
		r.wantLoginError(c, r.get(c, slow.callback.String()), http.StatusUnauthorized,
			"the identity provider's answer could not be verified; start again with “Sign in with SSO”")

		// Nothing secret reached the log: not the client secret, the codes,
		// the flow's cookie nor the provider's tokens.
		logs := r.logs.String()
		for _, secret := range append([]string{r.idp.ClientSecret, copied}, r.secrets...) {
			if secret != "" && strings.Contains(logs, secret) {
				t.Errorf("the log holds %q:\n%s", secret, logs)
			}
		}
		if strings.Contains(logs, "eyJ") {
			t.Errorf("the log holds a JWT:\n%s", logs)
		}
		if !strings.Contains(logs, "single sign-on refused") || !strings.Contains(logs, "reason=sso_nonce_mismatch") ||
			!strings.Contains(logs, `the token endpoint answered 401 Unauthorized, error \"invalid_grant\"`) {
			t.Errorf("the refusals are not logged:\n%s", logs)
		}
	})
}

// TestSSOOff: without the OIDC settings there is no button and its routes
// are 404, in the pages' shape.
func TestSSOOff(t *testing.T) {
	s := newSite(t, testdb.SQLite(t))
	if w := s.anonymous().get("/login"); w.Code != http.StatusOK || w.testid("sso-start").Length() != 0 {
		t.Fatalf("login page without SSO: %d, %d SSO buttons", w.Code, w.testid("sso-start").Length())
	}
	for _, path := range []string{"/auth/oidc/start", "/auth/oidc/callback?code=x&state=y"} {
		w := s.anonymous().get(path)
		if w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), "no route for GET /auth/oidc/") {
			t.Errorf("%s without SSO: %d %s", path, w.Code, w.Body.String())
		}
	}
}
