package handlers

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// throttleSignups rebuilds e with signups throttled at perHour per client
// address on e's limiter (and so e's clock), as main wires it.
func (e *env) throttleSignups(perHour int) {
	e.t.Helper()
	acc, err := accounts.NewService(e.store, e.dir, cluster.None{}, accounts.NewLoginThrottle(e.clock.Now), 4,
		accounts.WithSignupThrottle(accounts.NewSignupThrottle(e.limiter, perHour)))
	if err != nil {
		e.t.Fatal(err)
	}
	e.acc, e.deps.Accounts = acc, acc
	e.rebuild()
}

func signupReq(email string) request {
	return request{method: "POST", path: "/api/auth/signup", body: `{"email":"` + email + `","password":"password123","organization":"Org"}`}
}

const signupThrottled = "too many signups from your address (5 an hour); try again in 12 minutes"

// TestSignupThrottleAPI: the 6th signup in an hour from one address is
// refused with 429, Retry-After and a message saying when to come back;
// other addresses are not; the bucket refills on the clock; forged
// X-Forwarded-For is believed only from a trusted proxy.
func TestSignupThrottleAPI(t *testing.T) {
	throttled := map[string]string{"Retry-After": "720", "retry-after-ms": "720000"}
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		e.throttleSignups(5)
		logs := e.captureLogs()
		var steps []step
		for _, email := range []string{"a1@example.com", "a2@example.com", "a3@example.com", "a4@example.com", "a5@example.com"} {
			steps = append(steps, step{name: "signup " + email, req: signupReq(email), status: 201, body: []string{`"tier":"free"`}})
		}
		steps = append(steps,
			step{name: "the 6th", req: signupReq("a6@example.com"), status: 429, code: "signup_throttled", message: signupThrottled, headers: throttled},
			step{name: "refused for validation: answered, not counted", req: request{method: "POST", path: "/api/auth/signup",
				body: `{"email":"a6@example.com","password":"short","organization":"Org"}`}, status: 422, code: "unprocessable",
				message: "password must be at least 8 bytes"},
			step{name: "a forged X-Forwarded-For", req: request{method: "POST", path: "/api/auth/signup", header: map[string]string{"X-Forwarded-For": "203.0.113.1"},
				body: `{"email":"a6@example.com","password":"password123","organization":"Org"}`}, status: 429, code: "signup_throttled", message: signupThrottled},
			step{name: "another address", req: signupReq("b1@example.com"), remote: "198.51.100.7:1234", status: 201},
			step{name: "11 minutes on", req: signupReq("a6@example.com"), advance: 11 * time.Minute, status: 429, code: "signup_throttled",
				message: "too many signups from your address (5 an hour); try again in 60 seconds", headers: map[string]string{"Retry-After": "60"}},
			step{name: "12 minutes on", req: signupReq("a6@example.com"), advance: time.Minute, status: 201},
			step{name: "and then refused again", req: signupReq("a7@example.com"), status: 429, code: "signup_throttled", message: signupThrottled, headers: throttled},
		)
		runSteps(t, e, e.h, steps)
		if n := strings.Count(logs.String(), "error_code=signup_throttled"); n != 4 {
			t.Errorf("%d log lines for the 4 refusals:\n%s", n, logs.String())
		}
		for line := range strings.Lines(logs.String()) {
			if strings.Contains(line, "error_code=signup_throttled") && (!strings.Contains(line, "request_id=") || !strings.Contains(line, "status=429")) {
				t.Errorf("a refusal logged without its request id and status: %s", line)
			}
		}
		if orgs, _ := e.store.Organizations(context.Background()); len(orgs) != 1+7 { // the admin's and the 7 accepted
			t.Errorf("%d organizations", len(orgs))
		}

		// Behind a trusted proxy each client is its own address.
		proxied := e.withOps(Ops{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
		var behind []step
		for i, email := range []string{"p1@example.com", "p2@example.com", "p3@example.com", "p4@example.com", "p5@example.com"} {
			behind = append(behind, step{name: "behind the proxy " + email, req: signupReq(email), remote: "10.1.2.3:40000", status: 201})
			behind[i].req.header = map[string]string{"X-Forwarded-For": "203.0.113.20"}
		}
		behind = append(behind,
			step{name: "the client's 6th", req: request{method: "POST", path: "/api/auth/signup", header: map[string]string{"X-Forwarded-For": "203.0.113.20"},
				body: `{"email":"p6@example.com","password":"password123","organization":"Org"}`}, remote: "10.1.2.3:40000",
				status: 429, code: "signup_throttled", message: signupThrottled},
			step{name: "another client of the proxy", req: request{method: "POST", path: "/api/auth/signup", header: map[string]string{"X-Forwarded-For": "203.0.113.21"},
				body: `{"email":"q1@example.com","password":"password123","organization":"Org"}`}, remote: "10.1.2.3:40000", status: 201},
		)
		runSteps(t, e, proxied, behind)
	})
}

// TestSignupThrottleOff: SLUICE_SIGNUP_RATE=0 bounds nothing.
func TestSignupThrottleOff(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	e.throttleSignups(0)
	for _, email := range []string{"a1@example.com", "a2@example.com", "a3@example.com", "a4@example.com", "a5@example.com",
		"a6@example.com", "a7@example.com", "a8@example.com", "a9@example.com", "a10@example.com"} {
		e.signup(email, "Org")
	}
}
