package respcache_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/respcache"
)

// testRedis connects to TEST_REDIS_URL and returns a key prefix unique to
// this test run, so parallel runs and other packages never share keys.
func testRedis(t *testing.T) (*redis.Client, string) {
	t.Helper()
	url := os.Getenv("TEST_REDIS_URL")
	if url == "" {
		t.Skip("TEST_REDIS_URL not set; skipping Redis test (e.g. TEST_REDIS_URL=redis://127.0.0.1:6379/0)")
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("parse TEST_REDIS_URL: %v", err)
	}
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	if err := client.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("ping redis at %s: %v", url, err)
	}
	prefix := fmt.Sprintf("test:respcache:%s:%d:", t.Name(), time.Now().UnixNano())
	t.Cleanup(func() {
		ctx := context.Background()
		iter := client.Scan(ctx, 0, prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			client.Del(ctx, iter.Val())
		}
	})
	return client, prefix
}

func TestRedisGetSet(t *testing.T) {
	ctx := context.Background()
	client, prefix := testRedis(t)
	c := respcache.NewRedis(client, prefix)
	var _ respcache.Cache = c

	if _, ok, err := c.Get(ctx, "k"); ok || err != nil {
		t.Fatalf("Get on empty cache = ok %v, err %v; want miss", ok, err)
	}
	if err := c.Set(ctx, "k", []byte("answer"), respcache.DefaultTTL); err != nil {
		t.Fatalf("Set: %v", err)
	}
	got, ok, err := c.Get(ctx, "k")
	if err != nil || !ok || string(got) != "answer" {
		t.Fatalf("Get = %q, %v, %v", got, ok, err)
	}
	// The key lives under the prefix with the TTL set.
	pttl, err := client.PTTL(ctx, prefix+"k").Result()
	if err != nil {
		t.Fatalf("PTTL: %v", err)
	}
	if pttl <= respcache.DefaultTTL-5*time.Second || pttl > respcache.DefaultTTL {
		t.Fatalf("PTTL = %v, want about %v", pttl, respcache.DefaultTTL)
	}
	if err := c.Set(ctx, "k", []byte("x"), 0); err == nil {
		t.Fatal("Set with zero ttl succeeded")
	}
}

func TestRedisExpiry(t *testing.T) {
	ctx := context.Background()
	client, prefix := testRedis(t)
	c := respcache.NewRedis(client, prefix)

	if err := c.Set(ctx, "short", []byte("v"), 1500*time.Millisecond); err != nil {
		t.Fatalf("Set: %v", err)
	}
	pttl, err := client.PTTL(ctx, prefix+"short").Result()
	if err != nil || pttl <= 1000*time.Millisecond || pttl > 1500*time.Millisecond {
		t.Fatalf("PTTL = %v, %v; want about 1.5s (millisecond precision)", pttl, err)
	}
	if err := c.Set(ctx, "tiny", []byte("v"), 30*time.Millisecond); err != nil {
		t.Fatalf("Set: %v", err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		_, ok, err := c.Get(ctx, "tiny")
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("entry with 30ms TTL still served after 2s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRedisPerOrganization(t *testing.T) {
	ctx := context.Background()
	client, prefix := testRedis(t)
	c := respcache.NewRedis(client, prefix)
	k1 := mustKey(t, 1, "/v1/chat/completions", baseBody)
	k2 := mustKey(t, 2, "/v1/chat/completions", baseBody)
	if err := c.Set(ctx, k1, []byte("org1 answer"), time.Minute); err != nil {
		t.Fatalf("Set: %v", err)
	}
	if _, ok, _ := c.Get(ctx, k2); ok {
		t.Fatal("organization 2 hit organization 1's cached answer")
	}
	if got, ok, _ := c.Get(ctx, k1); !ok || string(got) != "org1 answer" {
		t.Fatalf("organization 1 Get = %q, %v", got, ok)
	}
}

func TestRedisError(t *testing.T) {
	// A cache that cannot reach Redis reports an error rather than a miss,
	// so the gateway can log it and fall through to the upstream.
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer client.Close()
	c := respcache.NewRedis(client, "x:")
	if _, _, err := c.Get(context.Background(), "k"); err == nil {
		t.Fatal("Get against an unreachable Redis returned no error")
	}
	if err := c.Set(context.Background(), "k", []byte("v"), time.Minute); err == nil {
		t.Fatal("Set against an unreachable Redis returned no error")
	}
}
