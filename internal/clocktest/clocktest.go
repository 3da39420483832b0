// Package clocktest is the hand-moved clock the tests inject wherever
// production code takes a `now func() time.Time`.
package clocktest

import (
	"sync"
	"time"
)

// Clock is a time that moves only when told to; safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a clock stopped at t.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now is the clock's time; pass c.Now where a clock is injected.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
