package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/testredis"
)

// TestPresenceCountsTheNodesSeenLately: every node beating counts; one that
// stops beating is counted out once PresenceWindow has passed since its
// last beat, not before; one that leaves, at once; and a node back again
// counts again.
func TestPresenceCountsTheNodesSeenLately(t *testing.T) {
	client := testredis.Client(t)
	ctx := context.Background()
	key := testredis.Prefix() + "nodes"
	clock := clocktest.New(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	a, b, c := NewPresence(client, key, "a", clock.Now), NewPresence(client, key, "b", clock.Now), NewPresence(client, key, "c", clock.Now)
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
	clock.Advance(PresenceWindow)
	beat(a, 3)
	beat(b, 3)
	clock.Advance(time.Millisecond)
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

	// Against a Redis that does not answer (nothing listens on port 1),
	// nothing is handed on.
	gone := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { gone.Close() })
	down := NewPresence(gone, key, "self", nil)
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	called := false
	down.Run(ctx, func(int) { called = true })
	if called {
		t.Fatal("a failed beat handed on a count")
	}
}
