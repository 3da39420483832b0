package accounts_test

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/testredis"
	"github.com/sluicehq/sluice/quota"
)

// throttled is e's service again, with signups throttled at perHour on
// limiter.
func (e *env) throttled(t *testing.T, limiter quota.Limiter, perHour int) *accounts.Service {
	t.Helper()
	svc, err := accounts.NewService(e.store, e.dir, cluster.None{}, e.throttle, bcrypt.MinCost,
		accounts.WithSignupThrottle(accounts.NewSignupThrottle(limiter, perHour)))
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

const throttledMessage = "too many signups from your address (5 an hour); try again in 12 minutes"

// TestSignupThrottle: 5 signups an hour per client address by default;
// what counts and what does not, what the refusal says, and how the bucket
// refills, on a clock the test moves.
func TestSignupThrottle(t *testing.T) {
	type attempt struct {
		email, ip string
		password  string        // "" for a valid one
		advance   time.Duration // the clock moves first
		code      apperr.Code   // "" for a signup that succeeds
		message   string
	}
	ok := func(email, ip string) attempt { return attempt{email: email, ip: ip} }
	refused := func(email, ip string) attempt {
		return attempt{email: email, ip: ip, code: apperr.RateLimited, message: throttledMessage}
	}
	five := func(prefix, ip string) []attempt {
		var as []attempt
		for i := range 5 {
			as = append(as, ok(fmt.Sprintf("%s%d@example.com", prefix, i), ip))
		}
		return as
	}
	tests := []struct {
		name     string
		perHour  int
		attempts []attempt
	}{
		{"the 6th from an address is refused, another address is not", 5, append(five("a", "192.0.2.1"),
			refused("a5@example.com", "192.0.2.1"),
			refused("other@example.com", "192.0.2.1"), // a new email does not help
			ok("b0@example.com", "198.51.100.7"),
		)},
		{"one more each 12 minutes", 5, append(five("a", "192.0.2.1"),
			attempt{email: "a5@example.com", ip: "192.0.2.1", advance: 11 * time.Minute, code: apperr.RateLimited,
				message: "too many signups from your address (5 an hour); try again in 60 seconds"},
			attempt{email: "a5@example.com", ip: "192.0.2.1", advance: time.Minute},
			refused("a6@example.com", "192.0.2.1"),
		)},
		{"refused for validation: not counted", 5, append([]attempt{
			{email: "bad@example.com", ip: "192.0.2.1", password: "short", code: apperr.Unprocessable, message: "password must be at least 8 bytes"},
			{email: "bad@example.com", ip: "192.0.2.1", password: "short", code: apperr.Unprocessable, message: "password must be at least 8 bytes"},
			{email: "not an email", ip: "192.0.2.1", code: apperr.Unprocessable, message: "email must be an address like ada@example.com"},
		}, append(five("a", "192.0.2.1"), refused("a5@example.com", "192.0.2.1"))...)},
		{"a taken email counts", 5, []attempt{
			ok("taken@example.com", "192.0.2.1"),
			{email: "taken@example.com", ip: "192.0.2.1", code: apperr.Conflict, message: "an account with this email already exists"},
			{email: "TAKEN@example.com", ip: "192.0.2.1", code: apperr.Conflict, message: "an account with this email already exists"},
			{email: "taken@example.com", ip: "192.0.2.1", code: apperr.Conflict, message: "an account with this email already exists"},
			{email: "taken@example.com", ip: "192.0.2.1", code: apperr.Conflict, message: "an account with this email already exists"},
			refused("taken@example.com", "192.0.2.1"),
			refused("new@example.com", "192.0.2.1"),
		}},
		{"an IPv6 client is its /64; IPv4 mapped into IPv6 is IPv4", 5, []attempt{
			ok("v0@example.com", "2001:db8:1:2::1"),
			ok("v1@example.com", "2001:db8:1:2::2"),
			ok("v2@example.com", "2001:db8:1:2:ffff::9"),
			ok("v3@example.com", "2001:db8:1:2:1:2:3:4"),
			ok("v4@example.com", "2001:db8:1:2::5"),
			refused("v5@example.com", "2001:db8:1:2::6"),
			ok("w0@example.com", "2001:db8:1:3::1"), // the next /64
			ok("m0@example.com", "192.0.2.9"),
			ok("m1@example.com", "::ffff:192.0.2.9"),
			ok("m2@example.com", "192.0.2.9"),
			ok("m3@example.com", "::ffff:192.0.2.9"),
			ok("m4@example.com", "192.0.2.9"),
			refused("m5@example.com", "::ffff:192.0.2.9"),
		}},
		{"a rate of 1", 1, []attempt{
			ok("a0@example.com", "192.0.2.1"),
			{email: "a1@example.com", ip: "192.0.2.1", code: apperr.RateLimited,
				message: "too many signups from your address (1 an hour); try again in 60 minutes"},
		}},
		{"0 turns the throttle off", 0, append(append(five("a", "192.0.2.1"), five("b", "192.0.2.1")...), ok("c@example.com", "192.0.2.1"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := testdb.SQLite(t) // the limiter is what is tested; Postgres runs the API's table
			e := newEnv(t, db)
			svc := e.throttled(t, quota.NewMemory(e.clock.Now), tt.perHour)
			for i, a := range tt.attempts {
				e.clock.Advance(a.advance)
				password := a.password
				if password == "" {
					password = "password1"
				}
				_, _, err := svc.Signup(ctx, a.email, password, "Org", a.ip)
				if a.code == "" {
					if err != nil {
						t.Fatalf("attempt %d (%s from %s): %v", i+1, a.email, a.ip, err)
					}
					continue
				}
				got := apperr.As(err)
				if err == nil || got.Code != a.code || got.Message != a.message {
					t.Fatalf("attempt %d (%s from %s): %v; want %s %q", i+1, a.email, a.ip, err, a.code, a.message)
				}
				if a.code == apperr.RateLimited && (got.Reason != "signup_throttled" || got.RetryAfter <= 0) {
					t.Fatalf("attempt %d: reason %q, retry after %v", i+1, got.Reason, got.RetryAfter)
				}
			}
		})
	}
}

// TestSignupThrottleRetryAfter: the refusal's wait is when the next signup
// is admitted, to the second; the message never says less.
func TestSignupThrottleRetryAfter(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	svc := e.throttled(t, quota.NewMemory(e.clock.Now), 5)
	for i := range 5 {
		if _, _, err := svc.Signup(ctx, fmt.Sprintf("a%d@example.com", i), "password1", "Org", "192.0.2.1"); err != nil {
			t.Fatal(err)
		}
	}
	e.clock.Advance(100 * time.Second)
	_, _, err := svc.Signup(ctx, "late@example.com", "password1", "Org", "192.0.2.1")
	got := apperr.As(err)
	if got.RetryAfter != 620*time.Second || got.Message != "too many signups from your address (5 an hour); try again in 11 minutes" {
		t.Fatalf("after 100 s: %v, retry after %v", err, got.RetryAfter)
	}
	e.clock.Advance(got.RetryAfter)
	if _, _, err := svc.Signup(ctx, "late@example.com", "password1", "Org", "192.0.2.1"); err != nil {
		t.Fatalf("at the Retry-After: %v", err)
	}
}

// TestSignupThrottleGivesBackFailures: a signup that fails on our side
// (here its node's database is gone) is given back to the bucket.
func TestSignupThrottleGivesBackFailures(t *testing.T) {
	limiter := quota.NewMemory(nil) // one bucket per address for both nodes
	db := testdb.SQLite(t)
	down := newEnv(t, db).throttled(t, limiter, 1)
	up := newEnv(t, testdb.SQLite(t)).throttled(t, limiter, 1)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := down.Signup(ctx, "a@example.com", "password1", "Org", "192.0.2.1"); apperr.Status(apperr.CodeOf(err)) < 500 {
		t.Fatalf("with the database closed: %v", err)
	}
	if _, _, err := up.Signup(ctx, "a@example.com", "password1", "Org", "192.0.2.1"); err != nil {
		t.Fatalf("the one signup of the hour after a failure of ours: %v", err)
	}
}

// TestSignupThrottleSharedByNodes: two services (two nodes), each with its
// own client of one Redis, give an address 5 signups in all, not 5 each.
func TestSignupThrottleSharedByNodes(t *testing.T) {
	prefix := testredis.Prefix()
	db := testdb.SQLite(t)
	e := newEnv(t, db)
	var nodes []*accounts.Service
	for range 2 {
		nodes = append(nodes, e.throttled(t, quota.NewRedis(testredis.Client(t), prefix), 5))
	}
	accepted := 0
	for i := range 10 {
		_, _, err := nodes[i%2].Signup(ctx, fmt.Sprintf("n%d@example.com", i), "password1", "Org", "192.0.2.1")
		switch got := apperr.As(err); {
		case err == nil:
			accepted++
		case got.Reason != "signup_throttled" || got.Message != throttledMessage:
			t.Fatalf("signup %d on node %d: %v", i+1, i%2, err)
		}
	}
	if accepted != 5 {
		t.Fatalf("%d signups accepted by two nodes, want 5 in all", accepted)
	}
	if _, _, err := nodes[1].Signup(ctx, "other@example.com", "password1", "Org", "198.51.100.7"); err != nil {
		t.Fatalf("another address: %v", err)
	}
}
