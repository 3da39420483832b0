package cluster

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testredis"
)

// A clock the test moves.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestPresenceCountsTheNodesSeenLately: every node beating counts; one that
// stops beating is counted out once PresenceWindow has passed since its
// last beat, not before; one that leaves, at once; and a node back again
// counts again.
func TestPresenceCountsTheNodesSeenLately(t *testing.T) {
	client := testredis.Client(t)
	ctx := context.Background()
	key := testredis.Prefix() + "nodes"
	clock := &testClock{t: time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)}
	a, b, c := NewPresence(client, key, "a", clock.now), NewPresence(client, key, "b", clock.now), NewPresence(client, key, "c", clock.now)
	beat := func(p *Presence, want int) {
		t.Helper()
		n, err := p.Beat(ctx)
		if err != nil || n != want {
			t.Fatalf("%s counts %d nodes (%v), want %d", p.node, n, err, want)
		}
	}
	beat(a, 1)
	beat(b, 2)
	beat(c, 3)
	beat(a, 3) // its own beat again is not another node

	// c stops beating: still counted within the window of its last beat.
	clock.advance(PresenceWindow)
	beat(a, 3)
	beat(b, 3)
	clock.advance(time.Millisecond)
	beat(a, 2) // c's last beat is now older than the window
	// b leaves as it stops: counted out at once.
	if err := b.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	beat(a, 1)
	beat(c, 2) // c is back
	if ttl := client.PTTL(ctx, key).Val(); ttl <= 0 || ttl > 2*PresenceWindow {
		t.Fatalf("the set's TTL is %v: it must go with the last node, within %v", ttl, 2*PresenceWindow)
	}
}

// TestPresenceRunKeepsTheLastCountThroughAnOutage: Run hands every count
// it gets, and none while Redis does not answer (the count from before the
// outage is what a node's share must keep).
func TestPresenceRunKeepsTheLastCountThroughAnOutage(t *testing.T) {
	client := testredis.Client(t)
	key := testredis.Prefix() + "nodes"
	other := NewPresence(client, key, "other", nil)
	if _, err := other.Beat(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := NewPresence(client, key, "self", nil)
	ctx, cancel := context.WithCancel(context.Background())
	seen := make(chan int, 10)
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx, func(n int) { seen <- n }) }()
	select {
	case n := <-seen:
		if n != 2 {
			t.Fatalf("the first beat counts %d nodes, want 2", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not beat at once")
	}
	cancel()
	<-done

	// Against a Redis that does not answer, nothing is handed on.
	down := NewPresence(client, key, "self", nil)
	ctx, cancel = context.WithCancel(context.Background())
	cancel() // every call fails at once
	called := false
	down.Run(ctx, func(int) { called = true })
	if called {
		t.Fatal("a failed beat handed on a count")
	}
}
