package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// tierValues is a valid tier form with changes applied.
func tierValues(changes map[string]string) url.Values {
	v := url.Values{"capacity": {"30"}, "refill_per_sec": {"0.5"}, "tokens_per_minute": {"0"}, "freeze_threshold": {"20"},
		"freeze_minutes": {"10"}, "refill_floor": {"0.3"}, "autotune": {"on"}, "upstream_fallback": {"local"}}
	for k, x := range changes {
		if x == "-" {
			v.Del(k)
			continue
		}
		v.Set(k, x)
	}
	return v
}

// upstreamValues is a valid add-a-key form with changes applied.
func upstreamValues(changes map[string]string) url.Values {
	v := url.Values{"name": {"openai-main"}, "base_url": {"https://api.openai.com/v1"}, "api_key": {"sk-test-secret-9876"},
		"weight": {"1"}, "rpm": {"0"}, "tpm": {"0"}, "models": {""}}
	for k, x := range changes {
		v.Set(k, x)
	}
	return v
}

// TestFormsShowTheirErrors submits each form with a mistake: the form comes
// back with the status the code uses, the message on the page, the user's
// input kept (never a password or key), and nothing changed.
func TestFormsShowTheirErrors(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		ada := s.signup("ada@example.com", "Analytical Engines")
		visitors := map[string]*browser{"anonymous": s.anonymous(), "owner": s.signedIn(ada), "admin": s.signedIn(s.admin)}
		long := strings.Repeat("n", 101)
		tests := []struct {
			name      string
			who, path string
			form      url.Values
			status    int
			formID    string
			message   string
			kept      map[string]string // input selector -> value it must show again
			notShown  string            // a secret that must not come back
		}{
			// Signup.
			{name: "signup bad email", who: "anonymous", path: "/signup",
				form:   url.Values{"email": {"ada-at-example.com"}, "password": {"password123"}, "organization": {"Acme"}},
				status: 422, formID: "signup-form", message: "email must be an address like ada@example.com",
				kept: map[string]string{"#signup-email": "ada-at-example.com", "#signup-organization": "Acme", "#signup-password": ""}, notShown: "password123"},
			{name: "signup short password", who: "anonymous", path: "/signup",
				form:   url.Values{"email": {"new@example.com"}, "password": {"seven77"}, "organization": {"Acme"}},
				status: 422, formID: "signup-form", message: "password must be at least 8 bytes",
				kept: map[string]string{"#signup-email": "new@example.com", "#signup-password": ""}, notShown: "seven77"},
			{name: "signup long password", who: "anonymous", path: "/signup",
				form:   url.Values{"email": {"new@example.com"}, "password": {strings.Repeat("p", 73)}, "organization": {"Acme"}},
				status: 422, formID: "signup-form", message: "password must be at most 72 bytes (73 given)"},
			{name: "signup blank organization", who: "anonymous", path: "/signup",
				form:   url.Values{"email": {"new@example.com"}, "password": {"password123"}, "organization": {"   "}},
				status: 422, formID: "signup-form", message: "organization name must be 1 to 100 characters"},
			{name: "signup taken email", who: "anonymous", path: "/signup",
				form:   url.Values{"email": {"ADA@example.com"}, "password": {"password123"}, "organization": {"Copycat"}},
				status: 409, formID: "signup-form", message: "an account with this email already exists",
				kept: map[string]string{"#signup-email": "ADA@example.com", "#signup-organization": "Copycat"}},

			// Login.
			{name: "login wrong password", who: "anonymous", path: "/login",
				form:   url.Values{"email": {"ada@example.com"}, "password": {"wrong-password"}},
				status: 401, formID: "login-form", message: "email or password is wrong",
				kept: map[string]string{"#login-email": "ada@example.com", "#login-password": ""}, notShown: "wrong-password"},
			{name: "login unknown email", who: "anonymous", path: "/login",
				form:   url.Values{"email": {"nobody@example.com"}, "password": {"password123"}},
				status: 401, formID: "login-form", message: "email or password is wrong",
				kept: map[string]string{"#login-email": "nobody@example.com"}},

			// API tokens.
			{name: "token empty name", who: "owner", path: "/tokens", form: url.Values{"name": {""}, "expires_in_days": {"0"}},
				status: 422, formID: "create-token-form", message: "name must be 1 to 100 characters"},
			{name: "token blank name", who: "owner", path: "/tokens", form: url.Values{"name": {"   "}, "expires_in_days": {"30"}},
				status: 422, formID: "create-token-form", message: "name must be 1 to 100 characters",
				kept: map[string]string{"#token-expires option[selected]": "30"}},
			{name: "token too long name", who: "owner", path: "/tokens", form: url.Values{"name": {long}, "expires_in_days": {"0"}},
				status: 422, formID: "create-token-form", message: "name must be 1 to 100 characters",
				kept: map[string]string{"#token-name": long}},
			{name: "token expiry not a number", who: "owner", path: "/tokens", form: url.Values{"name": {"ci"}, "expires_in_days": {"soon"}},
				status: 422, formID: "create-token-form", message: "Expiry must be a number of days.",
				kept: map[string]string{"#token-name": "ci"}},
			{name: "token expiry too far", who: "owner", path: "/tokens", form: url.Values{"name": {"ci"}, "expires_in_days": {"3651"}},
				status: 422, formID: "create-token-form", message: "expires_in_days must be from 0 (never) to 3650"},
			{name: "token expiry negative", who: "owner", path: "/tokens", form: url.Values{"name": {"ci"}, "expires_in_days": {"-1"}},
				status: 422, formID: "create-token-form", message: "expires_in_days must be from 0 (never) to 3650"},

			// Tiers.
			{name: "tier capacity not a number", who: "admin", path: "/admin/tiers/free", form: tierValues(map[string]string{"capacity": "lots"}),
				status: 422, formID: "tier-form-free", message: "These fields need a number: capacity."},
			{name: "tier several not numbers", who: "admin", path: "/admin/tiers/free",
				form:   tierValues(map[string]string{"capacity": "", "refill_per_sec": "fast", "freeze_minutes": "-"}),
				status: 422, formID: "tier-form-free", message: "These fields need a number: capacity, refill_per_sec, freeze_minutes."},
			{name: "tier queue limit not a number", who: "admin", path: "/admin/tiers/free", form: tierValues(map[string]string{"max_pending_batch_lines": "many"}),
				status: 422, formID: "tier-form-free", message: "These fields need a number: max_pending_batch_lines."},
			{name: "tier capacity zero", who: "admin", path: "/admin/tiers/free", form: tierValues(map[string]string{"capacity": "0"}),
				status: 422, formID: "tier-form-free", message: "capacity must be between 1 and 1000000"},
			{name: "tier refill zero", who: "admin", path: "/admin/tiers/premium", form: tierValues(map[string]string{"refill_per_sec": "0", "refill_floor": "0", "autotune": "-"}),
				status: 422, formID: "tier-form-premium", message: "refill_per_sec must be greater than 0 and at most 1000000"},
			{name: "tier floor above refill", who: "admin", path: "/admin/tiers/free", form: tierValues(map[string]string{"refill_floor": "0.6"}),
				status: 422, formID: "tier-form-free", message: "refill_floor must be from 0 to refill_per_sec"},
			{name: "tier autotune without floor", who: "admin", path: "/admin/tiers/free", form: tierValues(map[string]string{"refill_floor": "0"}),
				status: 422, formID: "tier-form-free", message: "an autotuned tier needs a refill_floor above 0"},
			{name: "tier freezing without length", who: "admin", path: "/admin/tiers/free", form: tierValues(map[string]string{"freeze_minutes": "0"}),
				status: 422, formID: "tier-form-free", message: "freeze_minutes must be from 1 to 10080 (a week) when freezing is on"},
			{name: "tier unknown fallback", who: "admin", path: "/admin/tiers/free", form: tierValues(map[string]string{"upstream_fallback": "maybe"}),
				status: 422, formID: "tier-form-free", message: "upstream_fallback must be local or error"},

			// Provider keys.
			{name: "upstream base URL not http", who: "admin", path: "/admin/upstreams", form: upstreamValues(map[string]string{"base_url": "ftp://api.example.com/v1"}),
				status: 422, formID: "add-upstream-form", message: "base_url must be an http(s) URL such as https://api.openai.com/v1",
				kept: map[string]string{"#up-base": "ftp://api.example.com/v1", "#up-name": "openai-main", "#up-key": ""}, notShown: "sk-test-secret-9876"},
			{name: "upstream base URL not a URL", who: "admin", path: "/admin/upstreams", form: upstreamValues(map[string]string{"base_url": "api.openai.com"}),
				status: 422, formID: "add-upstream-form", message: "base_url must be an http(s) URL such as https://api.openai.com/v1", notShown: "sk-test-secret-9876"},
			{name: "upstream base URL with query", who: "admin", path: "/admin/upstreams", form: upstreamValues(map[string]string{"base_url": "https://api.openai.com/v1?key=x"}),
				status: 422, formID: "add-upstream-form", message: "base_url must be an http(s) URL such as https://api.openai.com/v1"},
			{name: "upstream weight not a number", who: "admin", path: "/admin/upstreams", form: upstreamValues(map[string]string{"weight": "heavy"}),
				status: 422, formID: "add-upstream-form", message: "Weight, RPM and TPM must be whole numbers.",
				kept: map[string]string{"#up-weight": "heavy"}, notShown: "sk-test-secret-9876"},
			{name: "upstream weight zero", who: "admin", path: "/admin/upstreams", form: upstreamValues(map[string]string{"weight": "0"}),
				status: 422, formID: "add-upstream-form", message: "weight must be from 1 to 1000"},
			{name: "upstream short key", who: "admin", path: "/admin/upstreams", form: upstreamValues(map[string]string{"api_key": "sk-1"}),
				status: 422, formID: "add-upstream-form", message: "api_key must be 8 to 512 characters without spaces"},
			{name: "upstream model with a space", who: "admin", path: "/admin/upstreams", form: upstreamValues(map[string]string{"models": "gpt-4o, gpt 4"}),
				status: 422, formID: "add-upstream-form", message: "models must be names without commas or spaces",
				kept: map[string]string{"#up-models": "gpt-4o, gpt 4"}},
		}
		before := s.snapshot()
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				b := visitors[tt.who]
				hadCookie := b.cookie
				w := b.post(tt.path, tt.form)
				w.t = t
				w.expectFormError(tt.status, tt.formID, tt.message)
				for sel, want := range tt.kept {
					got, ok := w.page().Find(sel).Attr("value")
					if w.page().Find(sel).Length() == 0 {
						t.Errorf("%s is not on the page", sel)
					} else if got != want || (want != "" && !ok) {
						t.Errorf("%s value = %q, want %q", sel, got, want)
					}
				}
				if tt.notShown != "" && strings.Contains(w.Body.String(), tt.notShown) {
					t.Errorf("the page shows the submitted secret %q", tt.notShown)
				}
				if c := w.sessionCookie(); c != nil {
					t.Errorf("a failed form set the session cookie: %v", c)
				}
				if b.cookie != hadCookie {
					t.Error("a failed form changed the browser's session")
				}
			})
		}
		if after := s.snapshot(); after != before {
			t.Errorf("rejected forms changed the state:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})
}

// TestLoginIsThrottledByTheClock checks that after an email's five free
// wrong passwords the form answers 429 with Retry-After and says when to
// come back, the right password too, until the injected clock moves on.
func TestLoginIsThrottledByTheClock(t *testing.T) {
	t.Parallel()
	s := newSite(t, testdb.SQLite(t))
	s.signup("ada@example.com", "Analytical Engines")
	b := s.anonymous()
	wrong := url.Values{"email": {"ada@example.com"}, "password": {"wrong-password"}}
	for i := range 5 { // five free failures
		w := b.post("/login", wrong)
		w.expectFormError(http.StatusUnauthorized, "login-form", "email or password is wrong")
		if t.Failed() {
			t.Fatalf("attempt %d", i+1)
		}
	}
	right := url.Values{"email": {"ada@example.com"}, "password": {password}}
	w := b.post("/login", right)
	w.expectFormError(http.StatusTooManyRequests, "login-form", "too many sign-in attempts; try again in 3 minutes")
	if got := w.Header().Get("Retry-After"); got != "180" {
		t.Errorf("Retry-After %q, want 180", got)
	}
	if got := w.value("#login-email"); got != "ada@example.com" {
		t.Errorf("email kept as %q", got)
	}
	s.clock.Advance(3*time.Minute - time.Second)
	w = b.post("/login", right)
	w.expectFormError(http.StatusTooManyRequests, "login-form", "too many sign-in attempts; try again in 1 second")
	s.clock.Advance(time.Second)
	b.post("/login", right).expectRedirect("/dashboard")
	if b.cookie == nil {
		t.Fatal("no session after the wait")
	}
}

func TestSignupStartsASessionOnTheNewOrganization(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		b := s.anonymous()
		w := b.post("/signup", url.Values{"email": {" Ada@Example.com "}, "password": {password}, "organization": {"Analytical Engines"}})
		w.expectRedirect("/dashboard")
		if b.cookie == nil {
			t.Fatal("signup set no session cookie")
		}
		w = b.get("/dashboard")
		w.expectPage(http.StatusOK, "dashboard")
		if got := w.text("org-name"); got != "Analytical Engines" {
			t.Errorf("org-name = %q", got)
		}
		if got := w.text("nav-user"); got != "ada@example.com Analytical Engines · owner" {
			t.Errorf("nav-user = %q, want the normalised email, the organization and the role", got)
		}
		if got := w.page().Find(".tier-name").Text(); got != "free" {
			t.Errorf("new organization is on tier %q, want free", got)
		}
	})
}
