package quota

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// windowRedis connects to TEST_REDIS_URL and returns a client and a key
// prefix unique to this test run, or skips the test when no Redis is set.
func windowRedis(t *testing.T) (*redis.Client, string) {
	t.Helper()
	url := os.Getenv("TEST_REDIS_URL")
	if url == "" {
		t.Skip("TEST_REDIS_URL is not set; skipping a test that needs a real Redis")
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("TEST_REDIS_URL: %v", err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("redis at TEST_REDIS_URL: %v", err)
	}
	prefix := fmt.Sprintf("sluice-test:%s:%d:", t.Name(), time.Now().UnixNano())
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := c.Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
	})
	return c, prefix
}

func TestRedisWindowSharedAcrossNodes(t *testing.T) {
	c, prefix := windowRedis(t)
	nodes := []*Detector{
		NewDetector(NewRedisWindow(c, prefix)),
		NewDetector(NewRedisWindow(c, prefix)),
	}
	for i := 1; i <= 21; i++ {
		n, freeze := reject(t, nodes[i%2], "tok-1", 20)
		if n != i {
			t.Fatalf("rejection %d on node %d: count %d; the nodes do not share one count", i, i%2, n)
		}
		if freeze != (i == 20) {
			t.Fatalf("rejection %d: freeze %v; want a freeze exactly at the 20th", i, freeze)
		}
	}
	if n, _ := reject(t, nodes[0], "tok-2", 20); n != 1 {
		t.Fatalf("another token starts at %d, want 1", n)
	}
	ttl, err := c.PTTL(context.Background(), prefix+"{tok-1}:rej").Result()
	if err != nil || ttl <= 60*time.Second || ttl > 61*time.Second {
		t.Fatalf("window key TTL %v (%v), want just over a minute", ttl, err)
	}
}

func TestRedisWindowConcurrentOneFreeze(t *testing.T) {
	c, prefix := windowRedis(t)
	nodes := []*Detector{
		NewDetector(NewRedisWindow(c, prefix)),
		NewDetector(NewRedisWindow(c, prefix)),
	}
	var (
		mu      sync.Mutex
		counts  []int
		freezes int
		wg      sync.WaitGroup
	)
	for g := range 50 {
		wg.Go(func() {
			for range 4 {
				n, freeze, err := nodes[g%2].Rejected(context.Background(), "hot", 20)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				counts = append(counts, n)
				if freeze {
					freezes++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if freezes != 1 {
		t.Fatalf("%d freezes from 200 concurrent rejections on two nodes, want exactly 1", freezes)
	}
	slices.Sort(counts)
	for i, n := range counts {
		if n != i+1 {
			t.Fatalf("counts are not 1..200 (position %d holds %d): two callers saw the same count", i, n)
		}
	}
}

// Entries older than a minute by the server's clock fall out of the window.
func TestRedisWindowSlides(t *testing.T) {
	c, prefix := windowRedis(t)
	ctx := context.Background()
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	us := func(d time.Duration) float64 { return float64(now.Add(-d).UnixMicro()) }
	key := prefix + "{tok}:rej"
	c.ZAdd(ctx, key,
		redis.Z{Score: us(90 * time.Second), Member: "old-1"},
		redis.Z{Score: us(61 * time.Second), Member: "old-2"},
		redis.Z{Score: us(30 * time.Second), Member: "recent"},
	)
	n, err := NewRedisWindow(c, prefix).Add(ctx, "tok")
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("count %d, want 2 (one 30s old, this one)", n)
	}
	if card := c.ZCard(ctx, key).Val(); card != 2 {
		t.Fatalf("%d members left, want the expired ones trimmed", card)
	}
}

// A flood of rejections stops growing the key at MaxFreezeThreshold, and the
// count beyond stays at one more than that, so no threshold fires twice.
func TestRedisWindowCapsMembers(t *testing.T) {
	c, prefix := windowRedis(t)
	ctx := context.Background()
	key := prefix + "{flood}:rej"
	members := make([]redis.Z, MaxFreezeThreshold-1)
	now := float64(time.Now().UnixMicro()) // close enough to the server's clock
	for i := range members {
		members[i] = redis.Z{Score: now, Member: "m" + strconv.Itoa(i)}
	}
	c.ZAdd(ctx, key, members...)
	d := NewDetector(NewRedisWindow(c, prefix))
	if n, freeze := reject(t, d, "flood", MaxFreezeThreshold); n != MaxFreezeThreshold || !freeze {
		t.Fatalf("count %d, freeze %v; want %d and a freeze", n, freeze, MaxFreezeThreshold)
	}
	for range 3 {
		if n, freeze := reject(t, d, "flood", MaxFreezeThreshold); n != MaxFreezeThreshold+1 || freeze {
			t.Fatalf("beyond the cap: count %d, freeze %v; want %d, no freeze", n, freeze, MaxFreezeThreshold+1)
		}
	}
	if card := c.ZCard(ctx, key).Val(); card != MaxFreezeThreshold {
		t.Fatalf("%d members, want the key capped at %d", card, MaxFreezeThreshold)
	}
}

func TestRedisWindowReportsErrors(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	_, freeze, err := NewDetector(NewRedisWindow(c, "x:")).Rejected(context.Background(), "k", 1)
	if err == nil || freeze {
		t.Fatalf("unreachable Redis: freeze %v, err %v; want an error and no freeze", freeze, err)
	}
}
