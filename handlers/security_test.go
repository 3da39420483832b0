package handlers

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/web"
)

// testSessionSecret is the env's session secret (see newEnv).
var testSessionSecret = []byte("0123456789abcdef0123456789abcdef")

// withOps is the env's handler built with ops, sharing its store, clock and
// services: another node of the same deployment.
func (e *env) withOps(ops Ops) http.Handler {
	return New(e.log, ops, e.deps)
}

// serve sends req to h as a browser or client at remoteAddr would.
func serve(h http.Handler, req *http.Request, remoteAddr string) *httptest.ResponseRecorder {
	if remoteAddr != "" {
		req.RemoteAddr = remoteAddr
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func sessionCookieOf(w *httptest.ResponseRecorder) *http.Cookie {
	for _, c := range w.Result().Cookies() {
		if c.Name == "sluice_session" {
			return c
		}
	}
	return nil
}

// TestSecurityHeaders checks every kind of answer — pages, error pages,
// static files, the API, its errors, the operator's routes — carries the
// headers that stop sniffing, framing and leaking referrers, with the
// pages' strict CSP on pages and a deny-all policy on the API; HSTS only
// over TLS.
func TestSecurityHeaders(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	session := e.signup("ada@example.com", "Analytical Engines")
	key, _ := e.apiToken(session)
	if strings.Contains(web.ContentSecurityPolicy, "unsafe-") || !strings.Contains(web.ContentSecurityPolicy, "frame-ancestors 'none'") ||
		!strings.Contains(web.ContentSecurityPolicy, "default-src 'none'") || strings.Contains(web.ContentSecurityPolicy, "script-src") {
		t.Fatalf("the pages' CSP is not strict: %q", web.ContentSecurityPolicy)
	}
	tests := []struct {
		name, method, target, bearer string
		page                         bool
	}{
		{"login page", "GET", "/login", "", true},
		{"redirect", "GET", "/dashboard", "", true},
		{"404 page", "GET", "/no/such/page", "", true},
		{"405 page", "DELETE", "/login", "", true},
		{"static CSS", "GET", "/static/sluice.css", "", true},
		{"cross-site form refused", "POST", "/logout", "", true},
		{"API", "GET", "/api/tokens", session, false},
		{"API 401", "GET", "/api/tokens", "", false},
		{"API 404", "GET", "/api/nothing", session, false},
		{"v1", "GET", "/v1/models", key, false},
		{"v1 401", "POST", "/v1/chat/completions", "", false},
		{"healthz", "GET", "/healthz", "", false},
		{"page over TLS", "GET", "https://example.com/login", "", true},
		{"API over TLS", "GET", "https://example.com/api/tokens", session, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.target, nil)
			if tt.bearer != "" {
				req.Header.Set("Authorization", "Bearer "+tt.bearer)
			}
			if tt.method == "POST" {
				req.Header.Set("Sec-Fetch-Site", "cross-site")
			}
			w := serve(e.h, req, "")
			h := w.Header()
			want := map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
				"Content-Security-Policy": apiContentSecurityPolicy, "Referrer-Policy": "no-referrer"}
			if tt.page {
				want["Content-Security-Policy"], want["Referrer-Policy"] = web.ContentSecurityPolicy, "same-origin"
			}
			if strings.HasPrefix(tt.target, "https://") {
				want["Strict-Transport-Security"] = hsts
			} else if v := h.Get("Strict-Transport-Security"); v != "" {
				t.Errorf("HSTS %q over plain HTTP", v)
			}
			for k, v := range want {
				if got := h.Get(k); got != v {
					t.Errorf("%d answer: %s = %q, want %q", w.Code, k, got, v)
				}
			}
		})
	}
}

// TestForwardedHeadersOnlyFromTrustedProxies checks the per-address login
// throttle and the Secure cookie flag believe X-Forwarded-For and
// X-Forwarded-Proto only from a configured proxy: without one, a client
// rotating forged addresses stays throttled; behind one, each client is
// throttled on its own address, and a forged entry in front of the
// proxy's is ignored.
func TestForwardedHeadersOnlyFromTrustedProxies(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	for _, email := range []string{"ada@example.com", "bob@example.com", "cy@example.com", "dee@example.com"} {
		e.signup(email, "Org of "+email)
	}
	login := func(h http.Handler, remote, forwarded, email, password string) int {
		req := httptest.NewRequest("POST", "/api/auth/login", strings.NewReader(`{"email":"`+email+`","password":"`+password+`"}`))
		req.Header.Set("Content-Type", "application/json")
		if forwarded != "" {
			req.Header.Set("X-Forwarded-For", forwarded)
		}
		return serve(h, req, remote).Code
	}
	// guess sprays a password over 21 emails without accounts (each its
	// own email bucket): the address's 20 failures are free, the 21st is
	// refused (the test clock stands still).
	guess := func(h http.Handler, remote string, forwarded func(i int) string, who string) int {
		for i := range 20 {
			if code := login(h, remote, forwarded(i), fmt.Sprintf("%s-%d@example.com", who, i), "wrong password"); code != http.StatusUnauthorized {
				t.Fatalf("guess %d: %d", i, code)
			}
		}
		return login(h, remote, forwarded(20), who+"-last@example.com", "wrong password")
	}
	rotating := func(i int) string { return fmt.Sprintf("198.51.100.%d", 100+i) }

	direct := e.withOps(Ops{})
	if code := guess(direct, "203.0.113.9:5555", rotating, "direct"); code != http.StatusTooManyRequests {
		t.Errorf("without a trusted proxy, rotating X-Forwarded-For dodged the throttle: %d", code)
	}

	proxied := e.withOps(Ops{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	const proxy = "10.1.2.3:40000"
	client := func(string) func(int) string { return func(int) string { return "198.51.100.7" } }("")
	if code := guess(proxied, proxy, client, "behind"); code != http.StatusTooManyRequests {
		t.Errorf("behind the proxy, a guessing client was not throttled: %d", code)
	}
	if code := login(proxied, proxy, "198.51.100.8", "bob@example.com", "password123"); code != http.StatusOK {
		t.Errorf("behind the proxy, another client was throttled with the guesser: %d", code)
	}
	// The proxy appends the address it saw; what the client wrote in front is not believed.
	if code := login(proxied, proxy, "198.51.100.8, 198.51.100.7", "bob@example.com", "password123"); code != http.StatusTooManyRequests {
		t.Errorf("a forged entry in front of the proxy's dodged the throttle: %d", code)
	}
	// A client reaching Sluice directly is not a proxy, whatever it sends.
	if code := guess(proxied, "203.0.113.50:1", rotating, "forger"); code != http.StatusTooManyRequests {
		t.Errorf("a direct client's forged X-Forwarded-For was believed: %d", code)
	}

	// The cookie is Secure over TLS: direct, or as a trusted proxy says.
	for _, tt := range []struct {
		name, remote, proto string
		tls, secure         bool
	}{
		{"plain HTTP", "203.0.113.77:1", "", false, false},
		{"direct TLS", "203.0.113.77:1", "", true, true},
		{"trusted proxy over TLS", proxy, "https", false, true},
		{"trusted proxy, several hops", proxy, "https, http", false, true},
		{"trusted proxy over plain HTTP", proxy, "http", false, false},
		{"forged by a client", "203.0.113.77:1", "https", false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			target := "http://example.com/login"
			if tt.tls {
				target = "https://example.com/login"
			}
			req := httptest.NewRequest("POST", target, strings.NewReader(url.Values{"email": {"dee@example.com"}, "password": {"password123"}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Sec-Fetch-Site", "same-origin")
			if tt.proto != "" {
				req.Header.Set("X-Forwarded-Proto", tt.proto)
			}
			w := serve(proxied, req, tt.remote)
			c := sessionCookieOf(w)
			if w.Code != http.StatusSeeOther || c == nil {
				t.Fatalf("login: %d %v", w.Code, c)
			}
			if c.Secure != tt.secure || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode {
				t.Errorf("cookie Secure=%v HttpOnly=%v SameSite=%v, want Secure=%v, HttpOnly, Lax", c.Secure, c.HttpOnly, c.SameSite, tt.secure)
			}
			if hsts := w.Header().Get("Strict-Transport-Security") != ""; hsts != tt.secure {
				t.Errorf("HSTS sent: %v, want %v", hsts, tt.secure)
			}
		})
	}
}

// TestSessionMisuse presents tokens that must not sign anyone in, as the
// management API's bearer and as the pages' cookie: each is a 401 with the
// API's error shape, and an anonymous visitor (sent to sign in, the cookie
// cleared) on the pages.
func TestSessionMisuse(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		e.signup("ada@example.com", "Analytical Engines")
		ada, err := e.store.UserByEmail(t.Context(), "ada@example.com")
		if err != nil {
			t.Fatal(err)
		}
		now := e.clock.Now()
		claims := func(mod func(c *jwt.RegisteredClaims)) jwt.RegisteredClaims {
			c := jwt.RegisteredClaims{Issuer: "sluice", Audience: jwt.ClaimStrings{"sluice-session"}, Subject: itoa(ada.ID),
				IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour)), ID: rand.Text()}
			if mod != nil {
				mod(&c)
			}
			return c
		}
		sign := func(m jwt.SigningMethod, key any, c jwt.Claims) string {
			tok, err := jwt.NewWithClaims(m, c).SignedString(key)
			if err != nil {
				t.Fatal(err)
			}
			return tok
		}
		rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		// A real session, ended by signing out.
		loggedOut := e.login("ada@example.com", "password123")
		if w := e.do(request{method: "POST", path: "/api/auth/logout", bearer: loggedOut}); w.Code != http.StatusNoContent {
			t.Fatalf("logout: %d %s", w.Code, w.Body.String())
		}
		// A real session of a user who is then deleted.
		e.signup("gone@example.com", "Gone")
		goneSession := e.login("gone@example.com", "password123")
		if err := db.Gorm.Exec("DELETE FROM users WHERE email = 'gone@example.com'").Error; err != nil {
			t.Fatal(err)
		}
		tests := []struct{ name, token string }{
			{"alg none", sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims(nil))},
			{"HS256 with another secret", sign(jwt.SigningMethodHS256, []byte("another secret that is long enough!"), claims(nil))},
			{"HS512 with the right secret", sign(jwt.SigningMethodHS512, testSessionSecret, claims(nil))},
			{"RS256", sign(jwt.SigningMethodRS256, rsaKey, claims(nil))},
			{"ES256", sign(jwt.SigningMethodES256, ecKey, claims(nil))},
			{"missing exp", sign(jwt.SigningMethodHS256, testSessionSecret, claims(func(c *jwt.RegisteredClaims) { c.ExpiresAt = nil }))},
			{"expired", sign(jwt.SigningMethodHS256, testSessionSecret, claims(func(c *jwt.RegisteredClaims) {
				c.IssuedAt, c.NotBefore, c.ExpiresAt = jwt.NewNumericDate(now.Add(-2*time.Hour)), jwt.NewNumericDate(now.Add(-2*time.Hour)), jwt.NewNumericDate(now.Add(-time.Hour))
			}))},
			{"not valid before the future", sign(jwt.SigningMethodHS256, testSessionSecret, claims(func(c *jwt.RegisteredClaims) { c.NotBefore = jwt.NewNumericDate(now.Add(time.Minute)) }))},
			{"issued in the future", sign(jwt.SigningMethodHS256, testSessionSecret, claims(func(c *jwt.RegisteredClaims) { c.IssuedAt = jwt.NewNumericDate(now.Add(time.Minute)) }))},
			{"wrong issuer", sign(jwt.SigningMethodHS256, testSessionSecret, claims(func(c *jwt.RegisteredClaims) { c.Issuer = "evil" }))},
			{"wrong audience", sign(jwt.SigningMethodHS256, testSessionSecret, claims(func(c *jwt.RegisteredClaims) { c.Audience = jwt.ClaimStrings{"sluice-api"} }))},
			{"no audience", sign(jwt.SigningMethodHS256, testSessionSecret, claims(func(c *jwt.RegisteredClaims) { c.Audience = nil }))},
			{"well signed, never started", sign(jwt.SigningMethodHS256, testSessionSecret, claims(nil))},
			{"signed out", loggedOut},
			{"deleted user", goneSession},
			{"tampered", loggedOut[:len(loggedOut)-4] + "AAAA"},
			{"garbage", "eyJhbGciOiJub25lIn0.e30."},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				w := e.do(request{method: "GET", path: "/api/tokens", bearer: tt.token})
				if w.Code != http.StatusUnauthorized || errorCode(t, w) != "invalid_session" {
					t.Errorf("API: %d %s, want 401 invalid_session", w.Code, w.Body.String())
				}
				if msg, _ := decode(t, w)["error"].(map[string]any)["message"].(string); msg != "session is invalid or expired; sign in again" {
					t.Errorf("API message %q", msg)
				}
				b := &browser{e: e, cookie: &http.Cookie{Name: "sluice_session", Value: tt.token}}
				w = b.do("GET", "/dashboard", nil, nil)
				if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/login" {
					t.Errorf("page: %d to %q, want 303 to /login", w.Code, w.Header().Get("Location"))
				}
				if c := sessionCookieOf(w); c == nil || c.MaxAge >= 0 {
					t.Errorf("page: the bad cookie was not cleared: %v", c)
				}
				b = &browser{e: e, cookie: &http.Cookie{Name: "sluice_session", Value: tt.token}}
				if w := b.do("GET", "/login", nil, nil); w.Code != 200 || !strings.Contains(w.Body.String(), `data-testid="nav-login"`) {
					t.Errorf("page: /login with the bad cookie is not the anonymous page: %d", w.Code)
				}
			})
		}
		// The control: a session started by signing in works on both.
		good := e.login("ada@example.com", "password123")
		if w := e.do(request{method: "GET", path: "/api/tokens", bearer: good}); w.Code != http.StatusOK {
			t.Fatalf("a good session: %d", w.Code)
		}
	})
}

// TestSessionLifecycle checks a login always starts a new session that
// replaces whatever the browser held (fixation), and that signing out ends
// the session on the server, on every node at once, for the pages and for
// the management API.
func TestSessionLifecycle(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	e.signup("victim@example.com", "Victim")
	e.signup("mallory@example.com", "Mallory")
	otherNode := e.withOps(Ops{}) // its own Pages and middleware, the same database

	t.Run("fixation", func(t *testing.T) {
		planted := e.browserLogin(t, "mallory@example.com", "password123").cookie.Value
		for name, value := range map[string]string{"the attacker's own session": planted, "a made-up id": "planted-session-id"} {
			b := &browser{e: e, cookie: &http.Cookie{Name: "sluice_session", Value: value}}
			w := b.do("POST", "/login", url.Values{"email": {"victim@example.com"}, "password": {"password123"}}, nil)
			if w.Code != http.StatusSeeOther || b.cookie == nil || b.cookie.Value == value || b.cookie.Value == "" {
				t.Fatalf("%s: login kept the planted session: %d %v", name, w.Code, b.cookie)
			}
			if w := b.do("GET", "/dashboard", nil, nil); w.Code != 200 || !strings.Contains(w.Body.String(), "victim@example.com") {
				t.Fatalf("%s: the new session is not the victim's: %d", name, w.Code)
			}
			// The planted id is not signed in as the victim, now or ever.
			old := &browser{e: e, cookie: &http.Cookie{Name: "sluice_session", Value: value}}
			if w := old.do("GET", "/dashboard", nil, nil); w.Code != http.StatusSeeOther {
				t.Errorf("%s: the planted session still signs someone in: %d %s", name, w.Code, w.Body.String())
			}
		}
	})

	t.Run("page sign-out ends the session everywhere", func(t *testing.T) {
		b := e.browserLogin(t, "victim@example.com", "password123")
		stolen := *b.cookie
		other := e.browserLogin(t, "victim@example.com", "password123") // another device
		if w := b.do("POST", "/logout", url.Values{}, nil); w.Code != http.StatusSeeOther {
			t.Fatalf("logout: %d", w.Code)
		}
		for name, h := range map[string]http.Handler{"this node": e.h, "another node": otherNode} {
			req := httptest.NewRequest("GET", "/dashboard", nil)
			req.AddCookie(&stolen)
			if w := serve(h, req, ""); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/login" {
				t.Errorf("%s: a copy of the signed-out cookie still works: %d", name, w.Code)
			}
		}
		if w := other.do("GET", "/dashboard", nil, nil); w.Code != 200 {
			t.Errorf("signing out on one device signed out another: %d", w.Code)
		}
	})

	t.Run("API sign-out ends the bearer everywhere", func(t *testing.T) {
		tok := e.login("victim@example.com", "password123")
		if w := e.do(request{method: "POST", path: "/api/auth/logout", bearer: tok}); w.Code != http.StatusNoContent {
			t.Fatalf("logout: %d %s", w.Code, w.Body.String())
		}
		for name, h := range map[string]http.Handler{"this node": e.h, "another node": otherNode} {
			req := httptest.NewRequest("GET", "/api/tokens", nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			if w := serve(h, req, ""); w.Code != http.StatusUnauthorized {
				t.Errorf("%s: a signed-out bearer still works: %d", name, w.Code)
			}
		}
		if w := e.do(request{method: "POST", path: "/api/auth/logout", bearer: tok}); w.Code != http.StatusUnauthorized {
			t.Errorf("signing out twice: %d, want 401", w.Code)
		}
	})
}

// TestEveryFormRefusesCrossSitePosts walks every state-changing route of
// the pages registered on the router — so a new form is covered the day
// it is added — and posts to it as another site would, signed in as the
// admin: each is refused with 403 before it changes anything or sets a
// cookie. The API's routes read their credentials from the Authorization
// header only, which another site cannot make a browser send, so a cookie
// alone gets nowhere there.
func TestEveryFormRefusesCrossSitePosts(t *testing.T) {
	db := testdb.SQLite(t)
	e := newEnv(t, db)
	admin := e.browserLogin(t, "admin@example.com", "admin-password")
	e.signup("ada@example.com", "Analytical Engines")
	before := dumpDB(t, db)
	var pages, api int
	for _, r := range e.h.(*gin.Engine).Routes() {
		if r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions {
			continue
		}
		path := fillParams(r.Path)
		if r.Path == "/webhooks/stripe" {
			continue // Stripe's signature is its only credential: no cookie, no form
		}
		if isAPIPath(r.Path) {
			if strings.HasPrefix(r.Path, "/api/auth/") && r.Path != "/api/auth/logout" {
				continue // public: no credentials at all, and they set no cookie
			}
			b := &browser{e: e, cookie: admin.cookie}
			if w := b.do(r.Method, path, url.Values{}, nil); w.Code != http.StatusUnauthorized {
				t.Errorf("%s %s with the admin's cookie and no bearer: %d, want 401", r.Method, r.Path, w.Code)
			}
			api++
			continue
		}
		pages++
		for _, h := range []map[string]string{
			{"Sec-Fetch-Site": "cross-site"},
			{"Sec-Fetch-Site": "same-site"},
			{"Origin": "https://evil.example"},
		} {
			b := &browser{e: e, cookie: admin.cookie}
			w := b.do(r.Method, path, url.Values{"name": {"planted"}, "tier": {"premium"}}, h)
			if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "submitted from another site") {
				t.Errorf("%s %s from another site (%v): %d, want 403", r.Method, r.Path, h, w.Code)
			}
			if c := w.Header().Values("Set-Cookie"); len(c) != 0 {
				t.Errorf("%s %s from another site set cookies: %q", r.Method, r.Path, c)
			}
		}
	}
	if pages < 15 || api < 10 {
		t.Fatalf("walked %d page and %d API routes: is the router wired?", pages, api)
	}
	if after := dumpDB(t, db); after != before {
		t.Errorf("cross-site posts changed the database:\n%s", diffLines(before, after))
	}
}

// fillParams puts a plausible value in each parameter of a route path.
func fillParams(path string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		switch {
		case p == ":name":
			parts[i] = "free"
		case strings.HasPrefix(p, ":"):
			parts[i] = "1"
		case strings.HasPrefix(p, "*"):
			parts[i] = "x"
		}
	}
	return strings.Join(parts, "/")
}

// dumpDB renders every row of every table, for comparing before and after.
func dumpDB(t testing.TB, db *models.DB) string {
	t.Helper()
	var tables []string
	q := `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name`
	if db.Dialect == "postgres" {
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name`
	}
	if err := db.Gorm.Raw(q).Scan(&tables).Error; err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, table := range tables {
		rows, err := db.Gorm.Raw(`SELECT * FROM ` + table).Rows()
		if err != nil {
			t.Fatalf("dump %s: %v", table, err)
		}
		cols, _ := rows.Columns()
		var lines []string
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			var line strings.Builder
			for i, v := range vals {
				if b, ok := v.([]byte); ok {
					v = string(b)
				}
				fmt.Fprintf(&line, " %s=%v", cols[i], v)
			}
			lines = append(lines, table+":"+line.String())
		}
		rows.Close()
		sort.Strings(lines)
		for _, l := range lines {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// diffLines lists the lines only in a and only in b.
func diffLines(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	var out strings.Builder
	for _, l := range strings.Split(a, "\n") {
		if !mb[l] {
			out.WriteString("- " + l + "\n")
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if !ma[l] {
			out.WriteString("+ " + l + "\n")
		}
	}
	return out.String()
}

// TestPanicsLeakNoSecrets breaks a dependency of a management API route, a
// /v1 route and an admin page so each handler panics, with credentials in
// the request: each answer is a 500 in its clients' shape that says
// nothing of the cause, and the log says what panicked without a single
// credential, password or body of the request.
func TestPanicsLeakNoSecrets(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	session := e.signup("ada@example.com", "Analytical Engines")
	key, _ := e.apiToken(session)
	admin := e.browserLogin(t, "admin@example.com", "admin-password")
	logs := e.captureLogs()
	e.deps.Billing = nil       // GET /api/budget dereferences it
	e.deps.Models = nil        // GET /v1/models calls it
	e.deps.LimiterStatus = nil // the admin's tiers page calls it
	e.rebuild()
	const bodySecret = "password-in-a-body-0123456789"
	tests := []struct {
		name string
		req  *http.Request
		want string // in the answer
	}{
		{"management API", httptest.NewRequest("GET", "/api/budget", strings.NewReader(`{"password":"`+bodySecret+`"}`)), `"code":"internal"`},
		{"v1", httptest.NewRequest("GET", "/v1/models", strings.NewReader(bodySecret)), `"type":"server_error"`},
		{"page", httptest.NewRequest("GET", "/admin/tiers", strings.NewReader(bodySecret)), `data-testid="error-page"`},
	}
	tests[0].req.Header.Set("Authorization", "Bearer "+session)
	tests[1].req.Header.Set("Authorization", "Bearer "+key)
	tests[2].req.AddCookie(admin.cookie)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := serve(e.h, tt.req, "")
			if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), tt.want) {
				t.Fatalf("%d %.300s", w.Code, w.Body.String())
			}
			if b := w.Body.String(); strings.Contains(b, "nil pointer") || strings.Contains(b, "runtime error") {
				t.Errorf("the answer shows the panic: %.300s", b)
			}
		})
	}
	log := logs.String()
	if strings.Count(log, "panic") < len(tests) {
		t.Errorf("the panics were not all logged:\n%s", log)
	}
	for name, s := range map[string]string{"session": session, "API token": key, "cookie": admin.cookie.Value, "body": bodySecret,
		"session signature": session[strings.LastIndex(session, ".")+1:]} {
		if strings.Contains(log, s) {
			t.Errorf("the log shows the %s:\n%s", name, log)
		}
	}
}
