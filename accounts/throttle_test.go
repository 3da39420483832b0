package accounts_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/testredis"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/quota"
)

// The throttle's numbers, as accounts/throttle.go documents them.
const (
	emailFree, emailInterval = 5, 3 * time.Minute
	addrFree, addrInterval   = 20, 30 * time.Second
)

// wantLocked fails t unless err is the locked answer, with a wait of want
// (its message rounds it up as the Retry-After does).
func wantLocked(t *testing.T, err error, want time.Duration) {
	t.Helper()
	e := wantErr(t, err, apperr.RateLimited, "login_throttled")
	if e.RetryAfter != want {
		t.Errorf("RetryAfter %v, want %v", e.RetryAfter, want)
	}
	if msg := lockedMessage(want); e.Message != msg {
		t.Errorf("message %q, want %q", e.Message, msg)
	}
}

func lockedMessage(wait time.Duration) string {
	secs := int((wait + time.Second - 1) / time.Second)
	switch {
	case secs == 1:
		return "too many sign-in attempts; try again in 1 second"
	case secs < 120:
		return fmt.Sprintf("too many sign-in attempts; try again in %d seconds", secs)
	default:
		return fmt.Sprintf("too many sign-in attempts; try again in %d minutes", (secs+59)/60)
	}
}

// TestLoginSprayOverEmailsIsLockedByTheAddress: one password tried on 100
// emails from one address (most of them without an account) is checked
// for the address's 20 free failures, then refused without a check; the
// same emails from another address are still checked.
func TestLoginSprayOverEmailsIsLockedByTheAddress(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		for i := range 10 {
			e.signup(t, fmt.Sprintf("user%d@example.com", i))
		}
		const ip = "192.0.2.1"
		for i := range 100 {
			_, err := e.svc.Login(ctx, fmt.Sprintf("user%d@example.com", i), "Summer2030!", ip)
			if i < addrFree {
				wantErr(t, err, apperr.Unauthorized, "invalid_credentials")
			} else {
				// Refused ones are not charged: the wait stays one interval.
				wantLocked(t, err, addrInterval)
			}
		}
		// Even the right password is refused from there, and the same
		// answer for an email without an account.
		_, err := e.svc.Login(ctx, "user1@example.com", "password1", ip)
		wantLocked(t, err, addrInterval)
		_, err = e.svc.Login(ctx, "ghost@example.com", "password1", ip)
		wantLocked(t, err, addrInterval)
		// The emails are not locked: 20 failures spread over 100 of them.
		if _, err := e.svc.Login(ctx, "user1@example.com", "password1", "198.51.100.7"); err != nil {
			t.Fatalf("another address: %v", err)
		}
		// After one interval, one more attempt from the address is checked.
		e.clock.Advance(addrInterval)
		if _, err := e.svc.Login(ctx, "user2@example.com", "password1", ip); err != nil {
			t.Fatalf("after the wait: %v", err)
		}
	})
}

// TestLoginOneEmailFromManyAddressesIsLockedByTheEmail: one account
// attacked from 100 addresses is checked for the email's 5 free failures,
// then refused from every address, the right password too, on every case
// of the email.
func TestLoginOneEmailFromManyAddressesIsLockedByTheEmail(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		e.signup(t, "ada@example.com")
		e.signup(t, "bo@example.com")
		for i := range 100 {
			ip := fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)
			_, err := e.svc.Login(ctx, "ada@example.com", fmt.Sprintf("guess-%d", i), ip)
			if i < emailFree {
				wantErr(t, err, apperr.Unauthorized, "invalid_credentials")
			} else {
				wantLocked(t, err, emailInterval)
			}
		}
		for _, email := range []string{"ada@example.com", " ADA@Example.com "} {
			_, err := e.svc.Login(ctx, email, "password1", "203.0.113.9")
			wantLocked(t, err, emailInterval)
		}
		// Another account is untouched, from one of those addresses.
		if _, err := e.svc.Login(ctx, "bo@example.com", "password1", "10.0.0.1"); err != nil {
			t.Fatalf("another email: %v", err)
		}
	})
}

// TestLoginIPv6IsThrottledByItsSlash64: a host walking through the
// addresses of its /64 meets one bucket; the next /64 is another.
func TestLoginIPv6IsThrottledByItsSlash64(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testdb.SQLite(t))
	for i := range addrFree + 1 {
		_, err := e.svc.Login(ctx, fmt.Sprintf("u%d@example.com", i), "whatever1", fmt.Sprintf("2001:db8:1:2::%x", i+1))
		if i < addrFree {
			wantErr(t, err, apperr.Unauthorized, "invalid_credentials")
		} else {
			wantLocked(t, err, addrInterval)
		}
	}
	_, err := e.svc.Login(ctx, "u0@example.com", "whatever1", "2001:db8:1:3::1")
	wantErr(t, err, apperr.Unauthorized, "invalid_credentials")
}

// TestLoginLockEndsByItselfAndIsShorterThanTheWindow walks the email
// bucket on the injected clock: five free failures, then one attempt per
// interval (the lock never longer than one interval), and everything
// forgotten once the bucket has refilled (five intervals after the last
// failure), which is much longer than the lock.
func TestLoginLockEndsByItselfAndIsShorterThanTheWindow(t *testing.T) {
	t.Parallel()
	if emailInterval >= emailFree*emailInterval || addrInterval >= addrFree*addrInterval {
		t.Fatal("a lock as long as the window that forgets")
	}
	e := newEnv(t, testdb.SQLite(t))
	e.signup(t, "ada@example.com")
	fail := func(ip string) error {
		_, err := e.svc.Login(ctx, "ada@example.com", "wrong-password", ip)
		return err
	}
	for i := range emailFree {
		wantErr(t, fail(fmt.Sprintf("192.0.2.%d", i+1)), apperr.Unauthorized, "invalid_credentials")
	}
	// The lock counts down with the clock and ends by itself.
	wantLocked(t, fail("192.0.2.99"), emailInterval)
	e.clock.Advance(time.Minute)
	wantLocked(t, fail("192.0.2.99"), emailInterval-time.Minute)
	e.clock.Advance(emailInterval - time.Minute - time.Second)
	wantLocked(t, fail("192.0.2.99"), time.Second)
	e.clock.Advance(time.Second)
	// One attempt is checked, then the lock is one interval again: never
	// longer, however long the guessing goes on.
	for range 20 {
		wantErr(t, fail("192.0.2.99"), apperr.Unauthorized, "invalid_credentials")
		wantLocked(t, fail("192.0.2.99"), emailInterval)
		e.clock.Advance(emailInterval)
	}
	// Left alone for the window, every failure is forgotten: five free
	// ones again. One second less, and only four have been forgiven.
	e.clock.Advance(emailFree*emailInterval - emailInterval - time.Second)
	for range emailFree - 1 {
		wantErr(t, fail("198.51.100.1"), apperr.Unauthorized, "invalid_credentials")
	}
	wantLocked(t, fail("198.51.100.1"), time.Second)
	e.clock.Advance(emailFree * emailInterval)
	for range emailFree {
		wantErr(t, fail("198.51.100.2"), apperr.Unauthorized, "invalid_credentials")
	}
	wantLocked(t, fail("198.51.100.2"), emailInterval)
}

// TestLoginSuccessForgetsTheEmailsFailures: the account's holder signing
// in clears their email's failures (a few typos never add up across
// days), but only gives back their own attempt to the address, so an
// attacker signing in to an account of their own gains no guesses there.
func TestLoginSuccessForgetsTheEmailsFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testdb.SQLite(t))
	e.signup(t, "ada@example.com")
	e.signup(t, "mallory@example.com")
	const ip = "192.0.2.1"
	for range emailFree - 1 {
		_, err := e.svc.Login(ctx, "ada@example.com", "typo-password", ip)
		wantErr(t, err, apperr.Unauthorized, "invalid_credentials")
	}
	if _, err := e.svc.Login(ctx, "ada@example.com", "password1", ip); err != nil {
		t.Fatal(err)
	}
	for range emailFree {
		_, err := e.svc.Login(ctx, "ada@example.com", "typo-password", ip)
		wantErr(t, err, apperr.Unauthorized, "invalid_credentials")
	}
	_, err := e.svc.Login(ctx, "ada@example.com", "password1", ip)
	wantLocked(t, err, emailInterval)

	// The address has 9 failures; mallory's successes do not undo them.
	e2 := newEnv(t, testdb.SQLite(t))
	e2.signup(t, "mallory@example.com")
	for i := range addrFree - 1 {
		_, err := e2.svc.Login(ctx, fmt.Sprintf("victim%d@example.com", i), "Summer2030!", ip)
		wantErr(t, err, apperr.Unauthorized, "invalid_credentials")
		if _, err := e2.svc.Login(ctx, "mallory@example.com", "password1", ip); err != nil {
			t.Fatalf("mallory's own sign-in %d: %v", i, err)
		}
	}
	_, err = e2.svc.Login(ctx, "victim-last@example.com", "Summer2030!", ip)
	wantErr(t, err, apperr.Unauthorized, "invalid_credentials")
	_, err = e2.svc.Login(ctx, "victim-next@example.com", "Summer2030!", ip)
	wantLocked(t, err, addrInterval)
}

// TestLoginLockedAnswerSaysNothing: locked, the answer is the same for the
// right password, a wrong one, and an email without an account.
func TestLoginLockedAnswerSaysNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testdb.SQLite(t))
	e.signup(t, "ada@example.com")
	const ip = "192.0.2.1"
	for i := range addrFree {
		e.svc.Login(ctx, fmt.Sprintf("x%d@example.com", i), "whatever1", ip)
	}
	var answers []string
	for _, try := range [][2]string{{"ada@example.com", "password1"}, {"ada@example.com", "wrong-one"}, {"ghost@example.com", "password1"}} {
		_, err := e.svc.Login(ctx, try[0], try[1], ip)
		a := apperr.As(err)
		answers = append(answers, fmt.Sprintf("%s %s %q %v", a.Code, a.Reason, a.Message, a.RetryAfter))
	}
	if answers[0] != answers[1] || answers[1] != answers[2] {
		t.Fatalf("locked answers differ:\n%s", answers)
	}
}

// TestLoginConcurrentGuessesAreChargedFirst: 60 guesses at one account at
// once get exactly the 5 free checks; the rest are refused, because each
// attempt is charged before its password is checked.
func TestLoginConcurrentGuessesAreChargedFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testdb.SQLite(t))
	e.signup(t, "ada@example.com")
	var mu sync.Mutex
	counts := map[string]int{}
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() {
			_, err := e.svc.Login(ctx, "ada@example.com", "wrong-password", fmt.Sprintf("10.1.0.%d", i+1))
			mu.Lock()
			counts[apperr.As(err).Reason]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if counts["invalid_credentials"] != emailFree || counts["login_throttled"] != 60-emailFree {
		t.Fatalf("answers %v, want %d checked and the rest throttled", counts, emailFree)
	}
}

// TestLoginThrottleIsSharedThroughRedis: two nodes with throttles of
// their own on one Redis lock an email together, and so an address; and
// the lock ends for both.
func TestLoginThrottleIsSharedThroughRedis(t *testing.T) {
	t.Parallel()
	client := testredis.Client(t)
	prefix := testredis.Prefix()
	e := newEnv(t, testdb.SQLite(t))
	e.signup(t, "ada@example.com")
	node := func() *accounts.Service {
		th := accounts.NewSharedLoginThrottle(quota.NewRedis(client, prefix, quota.WithRedisClock(e.clock.Now)))
		svc, err := accounts.NewService(e.store, e.dir, cluster.None{}, th, bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	nodes := []*accounts.Service{node(), node()}
	for i := range emailFree {
		_, err := nodes[i%2].Login(ctx, "ada@example.com", "wrong-password", fmt.Sprintf("192.0.2.%d", i+1))
		wantErr(t, err, apperr.Unauthorized, "invalid_credentials")
	}
	for _, n := range nodes {
		_, err := n.Login(ctx, "ada@example.com", "password1", "203.0.113.1")
		wantLocked(t, err, emailInterval)
	}
	// One address spraying over both nodes.
	for i := range addrFree {
		_, err := nodes[i%2].Login(ctx, fmt.Sprintf("s%d@example.com", i), "Summer2030!", "198.51.100.5")
		wantErr(t, err, apperr.Unauthorized, "invalid_credentials")
	}
	for _, n := range nodes {
		_, err := n.Login(ctx, "s99@example.com", "Summer2030!", "198.51.100.5")
		wantLocked(t, err, addrInterval)
	}
	e.clock.Advance(emailInterval)
	if _, err := nodes[1].Login(ctx, "ada@example.com", "password1", "203.0.113.1"); err != nil {
		t.Fatalf("after the lock, on the other node: %v", err)
	}
}

// TestALockedLoginCostsNoHash: a locked attempt is refused before any
// bcrypt hash (its 429 is the same whatever the password or the email, so
// there is no timing to hide), so a flood of them costs the server little:
// the median of many interleaved attempts is a small part of a checked
// one's (ratios, not absolute times, so a busy machine slows both alike).
func TestALockedLoginCostsNoHash(t *testing.T) {
	store := models.NewStore(testdb.SQLite(t))
	clock := clocktest.New(time.Now())
	dir, err := accounts.NewDirectory(ctx, store, time.Minute, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	const cost = 6 // ~4 ms a hash (more under -race): the hash, not the database, dominates
	svc, err := accounts.NewService(store, dir, cluster.None{}, accounts.NewLoginThrottle(clock.Now), cost)
	if err != nil {
		t.Fatal(err)
	}
	const n = 15
	// Real accounts, each tried once with a wrong password (their own
	// hashes checked), and the one tried from a locked address.
	for i := range n {
		if _, _, err := svc.Signup(ctx, fmt.Sprintf("r%d@example.com", i), "password1", "Acme", "192.0.2.1"); err != nil {
			t.Fatal(err)
		}
	}
	const lockedIP = "192.0.2.66"
	for i := range addrFree {
		svc.Login(ctx, fmt.Sprintf("x%d@example.com", i), "whatever1", lockedIP)
	}
	timed := func(email, ip string, want apperr.Code) time.Duration {
		start := time.Now()
		_, err := svc.Login(ctx, email, "wrong-password", ip)
		d := time.Since(start)
		if apperr.CodeOf(err) != want {
			t.Fatalf("%s from %s: %v, want %s", email, ip, err, want)
		}
		return d
	}
	var locked, wrong []time.Duration
	for i := range n {
		locked = append(locked, timed("r0@example.com", lockedIP, apperr.RateLimited))
		wrong = append(wrong, timed(fmt.Sprintf("r%d@example.com", i), fmt.Sprintf("10.2.0.%d", i+1), apperr.Unauthorized))
	}
	median := func(ds []time.Duration) time.Duration { slices.Sort(ds); return ds[len(ds)/2] }
	ml, mw := median(locked), median(wrong)
	ratio := float64(ml) / float64(mw)
	t.Logf("median locked %v, wrong password %v: ratio %.2f", ml, mw, ratio)
	if ratio > 0.3 {
		t.Fatalf("a locked attempt takes %.2f times a wrong password's time (median %v vs %v): it hashed", ratio, ml, mw)
	}
}

// TestAMadeUpResetLinkCostsNoHash: no throttle stands before confirming a
// password reset, so the link is looked up before the new password is
// hashed: a made-up or spent link costs a query, not a bcrypt hash (the
// median of interleaved attempts is a small part of a real reset's).
func TestAMadeUpResetLinkCostsNoHash(t *testing.T) {
	store := models.NewStore(testdb.SQLite(t))
	dir, err := accounts.NewDirectory(ctx, store, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	const cost = 8 // ~15 ms a hash: the hash, not the database, dominates
	svc, err := accounts.NewService(store, dir, cluster.None{}, accounts.NewLoginThrottle(nil), cost)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.Signup(ctx, "ada@example.com", "password1", "Acme", "192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	u, err := store.UserByEmail(ctx, "ada@example.com")
	if err != nil {
		t.Fatal(err)
	}
	timed := func(token, reason string) time.Duration {
		start := time.Now()
		_, err := svc.ConfirmPasswordReset(ctx, token, "password2")
		d := time.Since(start)
		if got := apperr.As(err); reason == "" && err != nil || reason != "" && (got == nil || got.Reason != reason) {
			t.Fatalf("reset with %s: %v, want %q", token, err, reason)
		}
		return d
	}
	var real, refused []time.Duration
	for range 9 {
		tok := models.NewLinkToken()
		if _, err := store.CreatePasswordReset(ctx, u, tok, nil, nil); err != nil {
			t.Fatal(err)
		}
		real = append(real, timed(tok, ""))
		refused = append(refused, timed(models.NewLinkToken(), "link_not_found"), timed(tok, "link_used"))
	}
	median := func(ds []time.Duration) time.Duration { slices.Sort(ds); return ds[len(ds)/2] }
	mr, mf := median(real), median(refused)
	t.Logf("median real reset %v, refused link %v", mr, mf)
	if float64(mf) > 0.3*float64(mr) {
		t.Fatalf("a refused reset link takes %v against a real reset's %v: it hashed", mf, mr)
	}
}
