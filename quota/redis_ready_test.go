package quota

import (
	"context"
	"testing"
	"time"
)

// TestServerClockDeadline: deadlines sent to Redis are the caller's, moved
// to the server's clock by the highest recent sample of its offset (samples
// from a slow round trip read low), and a step of either clock is learnt
// within two windows.
func TestServerClockDeadline(t *testing.T) {
	var c serverClock
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(1000, 0))
	defer cancel()
	if _, ok := c.deadline(ctx); ok {
		t.Fatal("a deadline before the server's clock was seen")
	}
	if _, ok := c.deadline(context.Background()); ok {
		t.Fatal("a deadline for a context without one")
	}
	at := time.Unix(900, 0)
	call := func(start time.Time, rtt, ahead time.Duration) {
		// The server reads its clock halfway through the round trip.
		c.observe(start, start.Add(rtt), start.Add(rtt/2+ahead).UnixNano())
	}
	want := func(ahead time.Duration) {
		t.Helper()
		got, ok := c.deadline(ctx)
		if w := time.Unix(1000, 0).Add(ahead + lateSlack).UnixNano(); !ok || got != w {
			t.Fatalf("deadline %d, %v; want %d (server %v ahead)", got, ok, w, ahead)
		}
	}
	call(at, time.Millisecond, 5*time.Second)
	want(5 * time.Second)
	// A busy node read the reply 100ms late: that sample is 50ms low, and
	// the estimate keeps the higher one.
	c.observe(at.Add(time.Second), at.Add(time.Second+101*time.Millisecond), at.Add(time.Second+5*time.Second).UnixNano())
	want(5 * time.Second)
	// The server's clock steps back a second: still the old estimate
	// during this window and the next (deadlines late, never early)...
	call(at.Add(serverClockWindow+time.Second), time.Millisecond, 4*time.Second)
	want(5 * time.Second)
	// ...and the new one after.
	call(at.Add(2*serverClockWindow+time.Second), time.Millisecond, 4*time.Second)
	want(4 * time.Second)
	// No sample for two windows: start over from the next.
	call(at.Add(5*serverClockWindow), time.Millisecond, 3*time.Second)
	want(3 * time.Second)
}
