package accounts

import (
	"sync"
	"time"
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
