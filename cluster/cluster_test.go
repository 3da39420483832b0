package cluster

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestEventsReachEveryNode(t *testing.T) {
	url := os.Getenv("TEST_REDIS_URL")
	if url == "" {
		t.Skip("TEST_REDIS_URL is not set: skipping the Redis pub/sub test (CI sets it)")
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	channel := "sluice-test-" + rand.Text()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan Event, 10)
	var buses []*Redis
	for range 2 {
		c := redis.NewClient(opts)
		defer c.Close()
		b := NewRedis(c, channel, log)
		buses = append(buses, b)
		go b.Listen(ctx, func(e Event) { got <- e })
	}
	// Wait until both nodes report their subscription in place; the
	// Subscribed event is local and comes before any published one.
	for range 2 {
		select {
		case e := <-got:
			if e.Kind != Subscribed {
				t.Fatalf("first event %+v, want %q", e, Subscribed)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a node never reported its subscription")
		}
	}
	want := Event{Kind: TokenChanged, Hash: "abc"}
	if err := buses[0].Publish(ctx, want); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case e := <-got:
			if e != want {
				t.Fatalf("got %+v, want %+v", e, want)
			}
		case <-time.After(time.Second):
			t.Fatal("an event did not reach a node within 1 s")
		}
	}
}
