package accounts

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/quota"
)

// LoginThrottle slows down password guessing per key (email and client
// address): the first few failures are free, then each one doubles the wait
// before the next attempt, up to a cap. Waiting is the caller's to enforce
// by refusing early, so no goroutine sleeps.
type LoginThrottle struct {
	now      func() time.Time
	free     int
	maxWait  time.Duration
	forgetIn time.Duration

	mu    sync.Mutex
	fails map[string]*loginFailures
}

type loginFailures struct {
	count     int
	last      time.Time
	nextAfter time.Time
}

// NewLoginThrottle allows 5 free failures, then waits 1 s, 2 s, 4 s … up to
// 15 minutes; a key is forgotten 15 minutes after its last failure.
func NewLoginThrottle(now func() time.Time) *LoginThrottle {
	if now == nil {
		now = time.Now
	}
	return &LoginThrottle{now: now, free: 5, maxWait: 15 * time.Minute, forgetIn: 15 * time.Minute, fails: map[string]*loginFailures{}}
}

// Wait returns how long key must wait before its next attempt, 0 for none.
func (t *LoginThrottle) Wait(key string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.fails[key]
	if !ok {
		return 0
	}
	now := t.now()
	if now.Sub(f.last) > t.forgetIn {
		delete(t.fails, key)
		return 0
	}
	if wait := f.nextAfter.Sub(now); wait > 0 {
		return wait
	}
	return 0
}

// Fail records a failed attempt.
func (t *LoginThrottle) Fail(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if len(t.fails) > 100_000 {
		t.sweep(now)
	}
	f := t.fails[key]
	if f == nil || now.Sub(f.last) > t.forgetIn {
		f = &loginFailures{}
		t.fails[key] = f
	}
	f.count++
	f.last = now
	if over := f.count - t.free; over > 0 {
		wait := t.maxWait
		if over < 20 {
			wait = min(time.Second<<(over-1), t.maxWait)
		}
		f.nextAfter = now.Add(wait)
	}
}

// Succeed forgets key's failures.
func (t *LoginThrottle) Succeed(key string) {
	t.mu.Lock()
	delete(t.fails, key)
	t.mu.Unlock()
}

// sweep drops forgotten keys so a flood of distinct keys cannot grow the map
// without bound.
func (t *LoginThrottle) sweep(now time.Time) {
	for k, f := range t.fails {
		if now.Sub(f.last) > t.forgetIn {
			delete(t.fails, k)
		}
	}
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
	key := signupKey(clientIP)
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

// signupKey is the bucket of a client address: the address itself, or
// an IPv6 address's /64.
func signupKey(clientIP string) string {
	a, err := netip.ParseAddr(clientIP)
	if err != nil {
		return "signup:" + clientIP
	}
	if a = a.Unmap().WithZone(""); a.Is6() {
		p, _ := a.Prefix(64)
		return "signup:" + p.String()
	}
	return "signup:" + a.String()
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
