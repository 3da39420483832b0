package handlers

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

func loginReq(email, password string) request {
	return request{method: "POST", path: "/api/auth/login", body: `{"email":"` + email + `","password":"` + password + `"}`}
}

// TestLoginThrottleAPI: an email's 5 free failures, then 429
// login_throttled with Retry-After and a message saying when, the same for
// the right password and for an email without an account once the address
// is spent; the lock ends by itself on the clock.
func TestLoginThrottleAPI(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		e.signup("ada@example.com", "Analytical Engines")
		locked := "too many sign-in attempts; try again in 3 minutes"
		var steps []step
		for i := range 5 {
			steps = append(steps, step{name: fmt.Sprintf("failure %d", i+1), req: loginReq("ada@example.com", "wrong-password"),
				status: 401, code: "invalid_credentials", message: "email or password is wrong"})
		}
		steps = append(steps,
			step{name: "locked, the right password too", req: loginReq("ada@example.com", "password123"), status: 429,
				code: "login_throttled", message: locked, headers: map[string]string{"Retry-After": "180", "retry-after-ms": "180000"}},
			step{name: "from another address too", req: loginReq("ada@example.com", "password123"), remote: "198.51.100.7:1234",
				status: 429, code: "login_throttled", message: locked, headers: map[string]string{"Retry-After": "180"}},
			step{name: "the lock ends by itself", advance: 3 * time.Minute, req: loginReq("ada@example.com", "password123"), status: 200,
				body: []string{`"token":"`}},
		)
		// One address spraying emails (its earlier failures refilled in
		// those 3 minutes, its success given back): 20 checked, then
		// locked for every email, real or not.
		for i := range 20 {
			steps = append(steps, step{name: fmt.Sprintf("spray %d", i+1), req: loginReq(fmt.Sprintf("s%d@example.com", i), "Summer2030!"),
				status: 401, code: "invalid_credentials", message: "email or password is wrong"})
		}
		steps = append(steps,
			step{name: "spray locked", req: loginReq("nobody@example.com", "Summer2030!"), status: 429, code: "login_throttled",
				message: "too many sign-in attempts; try again in 30 seconds", headers: map[string]string{"Retry-After": "30"}},
			step{name: "a real account from the sprayer", req: loginReq("ada@example.com", "password123"), status: 429, code: "login_throttled",
				message: "too many sign-in attempts; try again in 30 seconds", headers: map[string]string{"Retry-After": "30"}},
		)
		runSteps(t, e, e.h, steps)
	})
}
