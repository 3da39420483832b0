package conversations_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/chat"
	"github.com/sluicehq/sluice/internal/clocktest"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/conversations"
)

func newFakeClock() *clocktest.Clock {
	return clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
}

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
	prefix := fmt.Sprintf("test:conversations:%s:%d:", t.Name(), time.Now().UnixNano())
	t.Cleanup(func() {
		ctx := context.Background()
		iter := client.Scan(ctx, 0, prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			client.Del(ctx, iter.Val())
		}
	})
	return client, prefix
}

// stores runs fn against every Store implementation available.
func stores(t *testing.T, fn func(t *testing.T, s conversations.Store)) {
	t.Run("memory", func(t *testing.T) {
		fn(t, conversations.NewMemory(0, nil))
	})
	t.Run("redis", func(t *testing.T) {
		client, prefix := testRedis(t)
		fn(t, conversations.NewRedis(client, prefix, 0))
	})
}

var history = []chat.Message{
	{Role: "system", Content: "be brief"},
	{Role: "user", Content: "hi"},
	{Role: "assistant", Content: "hello"},
}

func TestStoreRoundTrip(t *testing.T) {
	stores(t, func(t *testing.T, st conversations.Store) {
		ctx := context.Background()
		s := conversations.Scope{OrgID: 1, TokenID: 10, ID: "chat-1"}
		if _, ok, err := st.Load(ctx, s); ok || err != nil {
			t.Fatalf("Load before Save = ok %v, err %v", ok, err)
		}
		if err := st.Save(ctx, s, history); err != nil {
			t.Fatalf("Save: %v", err)
		}
		got, ok, err := st.Load(ctx, s)
		if err != nil || !ok || !reflect.DeepEqual(got, history) {
			t.Fatalf("Load = %v, %v, %v; want %v", got, ok, err, history)
		}
		// Save replaces the history.
		if err := st.Save(ctx, s, history[:1]); err != nil {
			t.Fatalf("Save: %v", err)
		}
		if got, _, _ := st.Load(ctx, s); !reflect.DeepEqual(got, history[:1]) {
			t.Fatalf("Load after second Save = %v", got)
		}
		// An empty history is still a conversation.
		if err := st.Save(ctx, s, nil); err != nil {
			t.Fatalf("Save(nil): %v", err)
		}
		if got, ok, _ := st.Load(ctx, s); !ok || len(got) != 0 {
			t.Fatalf("Load of empty conversation = %v, %v", got, ok)
		}
		deleted, err := st.Delete(ctx, s)
		if err != nil || !deleted {
			t.Fatalf("Delete = %v, %v; want true", deleted, err)
		}
		if _, ok, _ := st.Load(ctx, s); ok {
			t.Fatal("conversation still there after Delete")
		}
		if deleted, _ := st.Delete(ctx, s); deleted {
			t.Fatal("second Delete reported a deletion")
		}
	})
}

func TestStoreIsolation(t *testing.T) {
	stores(t, func(t *testing.T, st conversations.Store) {
		ctx := context.Background()
		owner := conversations.Scope{OrgID: 1, TokenID: 10, ID: "shared-id"}
		others := map[string]conversations.Scope{
			"other token":         {OrgID: 1, TokenID: 11, ID: "shared-id"},
			"other org":           {OrgID: 2, TokenID: 10, ID: "shared-id"},
			"other org and token": {OrgID: 2, TokenID: 11, ID: "shared-id"},
			"other id":            {OrgID: 1, TokenID: 10, ID: "shared-id2"},
		}
		if err := st.Save(ctx, owner, history); err != nil {
			t.Fatalf("Save: %v", err)
		}
		for name, other := range others {
			if got, ok, err := st.Load(ctx, other); ok || err != nil {
				t.Errorf("%s: Load = %v, %v, %v; want no conversation", name, got, ok, err)
			}
			if deleted, err := st.Delete(ctx, other); deleted || err != nil {
				t.Errorf("%s: Delete = %v, %v; want nothing deleted", name, deleted, err)
			}
		}
		// Another scope saving under the same id creates its own conversation and
		// leaves the owner's untouched.
		intruder := others["other token"]
		if err := st.Save(ctx, intruder, []chat.Message{{Role: "user", Content: "mine"}}); err != nil {
			t.Fatalf("Save: %v", err)
		}
		if got, ok, _ := st.Load(ctx, owner); !ok || !reflect.DeepEqual(got, history) {
			t.Fatalf("owner's conversation changed: %v, %v", got, ok)
		}
		if got, _, _ := st.Load(ctx, intruder); len(got) != 1 || got[0].Content != "mine" {
			t.Fatalf("intruder's conversation = %v", got)
		}
	})
}

func TestStoreRejectsInvalidID(t *testing.T) {
	stores(t, func(t *testing.T, st conversations.Store) {
		ctx := context.Background()
		bad := conversations.Scope{OrgID: 1, TokenID: 1, ID: "a b"}
		if _, _, err := st.Load(ctx, bad); !errors.Is(err, conversations.ErrInvalidID) {
			t.Errorf("Load err = %v, want ErrInvalidID", err)
		}
		if err := st.Save(ctx, bad, history); !errors.Is(err, conversations.ErrInvalidID) {
			t.Errorf("Save err = %v, want ErrInvalidID", err)
		}
		if _, err := st.Delete(ctx, bad); !errors.Is(err, conversations.ErrInvalidID) {
			t.Errorf("Delete err = %v, want ErrInvalidID", err)
		}
	})
}

func TestMemoryTTLWithInjectedClock(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	st := conversations.NewMemory(0, clock.Now) // DefaultTTL
	s := conversations.Scope{OrgID: 1, TokenID: 1, ID: "ttl"}

	if err := st.Save(ctx, s, history); err != nil {
		t.Fatalf("Save: %v", err)
	}
	clock.Advance(conversations.DefaultTTL - time.Second)
	if _, ok, _ := st.Load(ctx, s); !ok {
		t.Fatal("conversation expired before the TTL")
	}
	// Load does not refresh; Save does.
	if err := st.Save(ctx, s, history); err != nil {
		t.Fatalf("Save: %v", err)
	}
	clock.Advance(conversations.DefaultTTL - time.Second)
	if _, ok, _ := st.Load(ctx, s); !ok {
		t.Fatal("Save did not refresh the TTL")
	}
	clock.Advance(time.Second)
	if _, ok, _ := st.Load(ctx, s); ok {
		t.Fatal("conversation idle for the TTL still loads")
	}

	// An expired conversation cannot be deleted either: it is already gone.
	if err := st.Save(ctx, s, history); err != nil {
		t.Fatalf("Save: %v", err)
	}
	clock.Advance(conversations.DefaultTTL)
	if deleted, _ := st.Delete(ctx, s); deleted {
		t.Fatal("Delete of an expired conversation reported a deletion")
	}
}

func TestMemorySweepsExpiredOnWrite(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	st := conversations.NewMemory(time.Minute, clock.Now)
	for i := range 10 {
		if err := st.Save(ctx, conversations.Scope{OrgID: 1, TokenID: 1, ID: fmt.Sprint("s", i)}, history); err != nil {
			t.Fatalf("Save: %v", err)
		}
	}
	clock.Advance(time.Minute)
	if err := st.Save(ctx, conversations.Scope{OrgID: 1, TokenID: 1, ID: "fresh"}, history); err != nil {
		t.Fatalf("Save: %v", err)
	}
	if n := st.Len(); n != 1 {
		t.Fatalf("Len after expiry and a write = %d, want 1", n)
	}
}

func TestMemoryConcurrent(t *testing.T) {
	ctx := context.Background()
	st := conversations.NewMemory(time.Minute, nil)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				s := conversations.Scope{OrgID: int64(g % 2), TokenID: int64(g), ID: fmt.Sprint("c", i%7)}
				msgs, _, err := st.Load(ctx, s)
				if err != nil {
					t.Error(err)
					return
				}
				msgs = conversations.Append(msgs, []chat.Message{{Role: "user", Content: "q"}}, chat.Message{Role: "assistant", Content: "a"})
				if err := st.Save(ctx, s, msgs); err != nil {
					t.Error(err)
					return
				}
				if i%50 == 0 {
					_, _ = st.Delete(ctx, s)
				}
			}
		})
	}
	wg.Wait()
}

func TestRedisTTL(t *testing.T) {
	ctx := context.Background()
	client, prefix := testRedis(t)
	st := conversations.NewRedis(client, prefix, 0) // DefaultTTL
	s := conversations.Scope{OrgID: 7, TokenID: 8, ID: "ttl:check"}
	key := prefix + "{7:8}:ttl:check"

	if err := st.Save(ctx, s, history); err != nil {
		t.Fatalf("Save: %v", err)
	}
	pttl, err := client.PTTL(ctx, key).Result()
	if err != nil || pttl <= conversations.DefaultTTL-5*time.Second || pttl > conversations.DefaultTTL {
		t.Fatalf("PTTL(%s) = %v, %v; want about %v", key, pttl, err, conversations.DefaultTTL)
	}
	// Age the key, then check Save restarts the TTL and Load does not.
	if err := client.PExpire(ctx, key, time.Minute).Err(); err != nil {
		t.Fatalf("PEXPIRE: %v", err)
	}
	if _, ok, _ := st.Load(ctx, s); !ok {
		t.Fatal("Load missed")
	}
	if pttl, _ := client.PTTL(ctx, key).Result(); pttl > time.Minute {
		t.Fatalf("Load refreshed the TTL to %v", pttl)
	}
	if err := st.Save(ctx, s, history); err != nil {
		t.Fatalf("Save: %v", err)
	}
	if pttl, _ := client.PTTL(ctx, key).Result(); pttl <= conversations.DefaultTTL-5*time.Second {
		t.Fatalf("Save did not refresh the TTL: PTTL %v", pttl)
	}
	// A conversation whose key expires is gone.
	if err := client.PExpire(ctx, key, 20*time.Millisecond).Err(); err != nil {
		t.Fatalf("PEXPIRE: %v", err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		_, ok, err := st.Load(ctx, s)
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("conversation still loads after its key expired")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRedisCustomTTLAndCorruptValue(t *testing.T) {
	ctx := context.Background()
	client, prefix := testRedis(t)
	st := conversations.NewRedis(client, prefix, 90*time.Second)
	s := conversations.Scope{OrgID: 1, TokenID: 2, ID: "x"}
	if err := st.Save(ctx, s, history); err != nil {
		t.Fatalf("Save: %v", err)
	}
	key := prefix + "{1:2}:x"
	if pttl, _ := client.PTTL(ctx, key).Result(); pttl <= 85*time.Second || pttl > 90*time.Second {
		t.Fatalf("PTTL = %v, want about 90s", pttl)
	}
	if err := client.Set(ctx, key, "not json", time.Minute).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if _, _, err := st.Load(ctx, s); err == nil {
		t.Fatal("Load of a corrupt value returned no error")
	}
}
