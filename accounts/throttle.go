package accounts

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/quota"
)

// The login throttle's numbers. Each bucket holds its free failures and
// then lets one more through per interval: the wait a locked attempt is
// told (its cap) is at most one interval, and a bucket left alone is full
// again, every failure forgotten, after free × interval. The cap is the
// shorter by far, so a person who mistyped is never locked out for long,
// while a guesser is held to one guess an interval.
//
//   - per email: 5 free failures, then one every 3 minutes (the lock is at
//     most 3 minutes; forgotten 15 minutes after the last failure): 20
//     guesses an hour at one account, from any number of addresses;
//   - per client address: 20 free failures, then one every 30 seconds (the
//     lock is at most 30 seconds; forgotten 10 minutes after the last):
//     120 guesses an hour from one address, over any number of emails.
const (
	loginEmailFree     = 5
	loginEmailInterval = 3 * time.Minute
	loginAddrFree      = 20
	loginAddrInterval  = 30 * time.Second
)

// LoginThrottle slows down password guessing with two token buckets (GCRA)
// on a quota.Limiter: one per normalised email, across every address, and
// one per client address (an IPv6 client's /64), across every email. On
// the shared limiter every node draws on the same buckets through Redis;
// in memory without it. An attempt is charged to both buckets before its
// password is checked, in one limiter call (reserve before, settle after),
// so parallel guesses cannot all pass a check that each of them then
// fails; a successful sign-in gives its charge back (see Login).
type LoginThrottle struct {
	limiter     quota.Limiter
	email, addr quota.Params
}

// NewLoginThrottle returns a throttle on a limiter of its own, in this
// node's memory, on the clock now (nil: time.Now): for a single node and
// for tests. A cluster uses NewSharedLoginThrottle.
func NewLoginThrottle(now func() time.Time) *LoginThrottle {
	return NewSharedLoginThrottle(quota.NewMemory(now))
}

// NewSharedLoginThrottle returns a throttle whose buckets live in limiter,
// the node's shared limiter, so that every node counts the same failures.
func NewSharedLoginThrottle(limiter quota.Limiter) *LoginThrottle {
	return &LoginThrottle{limiter: limiter,
		email: quota.Params{Capacity: loginEmailFree, RefillPerSec: 1 / loginEmailInterval.Seconds()},
		addr:  quota.Params{Capacity: loginAddrFree, RefillPerSec: 1 / loginAddrInterval.Seconds()}}
}

// loginAttempt is one attempt charged to its two buckets, to be settled
// when the password has been checked.
type loginAttempt struct {
	t                 *LoginThrottle
	emailKey, addrKey string
}

// errLoginThrottled is the one answer to a locked attempt, whichever bucket
// is empty and whether or not the email has an account: the lock says
// nothing an attacker could not learn by failing.
func errLoginThrottled(wait time.Duration) error {
	return &apperr.Error{Code: apperr.RateLimited, Reason: "login_throttled", RetryAfter: wait,
		Message: "too many sign-in attempts; try again in " + waitText(wait)}
}

// reserve charges an attempt at email from clientIP to both buckets, or
// refuses it, charging neither, with the wait until both could take it.
// Both buckets' keys share the hash tag "login", so that one script
// charges them on Redis Cluster too (sign-ins are few; one slot holds
// them).
func (t *LoginThrottle) reserve(ctx context.Context, email, clientIP string) (loginAttempt, error) {
	a := loginAttempt{t: t, emailKey: "login|e:" + models.NormalizeEmail(email), addrKey: "login|a:" + addressKey(clientIP)}
	ds, err := t.limiter.AllowAll(ctx, []quota.Charge{
		{Key: a.emailKey, Params: t.email, Weight: 1},
		{Key: a.addrKey, Params: t.addr, Weight: 1},
	})
	if err != nil {
		return loginAttempt{}, apperr.Wrap(err, "login throttle")
	}
	if !ds[0].Allowed { // refused: neither is charged, and none says Allowed
		var wait time.Duration
		for _, d := range ds {
			wait = max(wait, d.RetryAfter)
		}
		return loginAttempt{}, errLoginThrottled(wait)
	}
	return a, nil
}

// succeeded settles an attempt whose password was right: the email's
// bucket forgets every failure (whoever made them, the account's holder
// has now shown the password, as the old throttle's reset did), and the
// address's gets back this attempt's charge only, so that signing in to an
// account of one's own does not buy more guesses at others'. Best effort,
// on a context of its own: a lost refund costs one attempt.
func (a loginAttempt) succeeded(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = a.t.limiter.Adjust(ctx, a.emailKey, a.t.email, -loginEmailFree)
	_ = a.t.limiter.Adjust(ctx, a.addrKey, a.t.addr, -1)
}

// refund gives an attempt that guessed nothing its charge back, to both
// buckets: a sign-in of an account with no password (single sign-on's).
func (a loginAttempt) refund(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = a.t.limiter.Adjust(ctx, a.emailKey, a.t.email, -1)
	_ = a.t.limiter.Adjust(ctx, a.addrKey, a.t.addr, -1)
}

// SignupThrottle bounds signups per client address: a token bucket on the
// node's limiter holding perHour signups and refilled at perHour an hour,
// keyed "signup:<address>". On the shared limiter every node draws on the
// one bucket of an address (in memory without Redis; a node cut off from
// Redis keeps its share of it, as with every limit). An IPv6 client is
// keyed by its /64, the block one subscriber usually holds, or one host
// could sign up from endless addresses.
type SignupThrottle struct {
	limiter quota.Limiter
	params  quota.Params
	perHour int
}

// NewSignupThrottle returns a throttle of perHour signups an hour per
// client address on limiter; perHour 0 returns nil, which throttles
// nothing (SLUICE_SIGNUP_RATE=0).
func NewSignupThrottle(limiter quota.Limiter, perHour int) *SignupThrottle {
	if perHour <= 0 {
		return nil
	}
	return &SignupThrottle{limiter: limiter, perHour: perHour,
		params: quota.Params{Capacity: int64(perHour), RefillPerSec: float64(perHour) / 3600}}
}

// take charges one signup from clientIP's bucket, or refuses with a
// rate_limited error saying when to try again. giveBack returns the
// signup to the bucket, for one that failed on our side.
func (t *SignupThrottle) take(ctx context.Context, clientIP string) (giveBack func(), err error) {
	if t == nil {
		return func() {}, nil
	}
	key := "signup:" + addressKey(clientIP)
	d, err := t.limiter.Allow(ctx, key, t.params, 1)
	if err != nil {
		return nil, apperr.Wrap(err, "signup throttle")
	}
	if !d.Allowed {
		return nil, &apperr.Error{Code: apperr.RateLimited, Reason: "signup_throttled", RetryAfter: d.RetryAfter,
			Message: fmt.Sprintf("too many signups from your address (%d an hour); try again in %s", t.perHour, waitText(d.RetryAfter))}
	}
	return func() {
		// Best effort, on a context of its own: the request's may be
		// what failed. A lost refund costs one signup of this hour.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = t.limiter.Adjust(ctx, key, t.params, -1)
	}, nil
}

// addressKey names a client address's bucket: the address itself, or an
// IPv6 address's /64, the block one subscriber usually holds, or one host
// could try from endless addresses.
func addressKey(clientIP string) string {
	a, err := netip.ParseAddr(clientIP)
	if err != nil {
		return clientIP
	}
	if a = a.Unmap().WithZone(""); a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// waitText says how long a wait is, rounded up so that it is never
// shorter than the Retry-After sent with it: seconds below two minutes,
// then minutes.
func waitText(d time.Duration) string {
	secs := int((d + time.Second - 1) / time.Second)
	secs = max(secs, 1)
	if secs < 120 {
		return plural(secs, "second")
	}
	return plural((secs+59)/60, "minute")
}
