package respcache_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/clocktest"

	"github.com/sluicehq/sluice/respcache"
)

func newFakeClock() *clocktest.Clock {
	return clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
}

func newMemory(t *testing.T, maxBytes int64, now func() time.Time) *respcache.Memory {
	t.Helper()
	m, err := respcache.NewMemory(maxBytes, now)
	if err != nil {
		t.Fatalf("NewMemory: %v", err)
	}
	t.Cleanup(m.Close)
	return m
}

func TestMemoryGetSet(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	m := newMemory(t, 1<<20, clock.Now)
	var _ respcache.Cache = m

	if _, ok, err := m.Get(ctx, "k"); ok || err != nil {
		t.Fatalf("Get on empty cache = ok %v, err %v; want miss", ok, err)
	}
	value := []byte(`{"choices":[]}`)
	if err := m.Set(ctx, "k", value, time.Minute); err != nil {
		t.Fatalf("Set: %v", err)
	}
	value[0] = 'X' // the cache must have kept its own copy
	got, ok, err := m.Get(ctx, "k")
	if err != nil || !ok || string(got) != `{"choices":[]}` {
		t.Fatalf("Get = %q, %v, %v; want the stored value", got, ok, err)
	}
	got[0] = 'Y'
	again, _, _ := m.Get(ctx, "k")
	if string(again) != `{"choices":[]}` {
		t.Fatalf("mutating a returned value changed the cache: %q", again)
	}
	if _, ok, _ := m.Get(ctx, "other"); ok {
		t.Fatal("Get of another key hit")
	}
	if err := m.Set(ctx, "k", value, 0); err == nil {
		t.Fatal("Set with zero ttl succeeded")
	}
}

func TestMemoryTTLWithInjectedClock(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	m := newMemory(t, 1<<20, clock.Now)

	if err := m.Set(ctx, "k", []byte("v"), respcache.DefaultTTL); err != nil {
		t.Fatalf("Set: %v", err)
	}
	clock.Advance(respcache.DefaultTTL - time.Second)
	if _, ok, _ := m.Get(ctx, "k"); !ok {
		t.Fatal("entry expired before its TTL")
	}
	clock.Advance(time.Second)
	if _, ok, _ := m.Get(ctx, "k"); ok {
		t.Fatal("entry still served at its TTL")
	}
	// Setting again after expiry serves the new value for a fresh TTL.
	if err := m.Set(ctx, "k", []byte("v2"), time.Minute); err != nil {
		t.Fatalf("Set: %v", err)
	}
	if got, ok, _ := m.Get(ctx, "k"); !ok || string(got) != "v2" {
		t.Fatalf("Get after re-Set = %q, %v", got, ok)
	}
}

func TestMemorySizeBound(t *testing.T) {
	ctx := context.Background()
	m := newMemory(t, 100, nil)

	if err := m.Set(ctx, "big", bytes.Repeat([]byte("x"), 101), time.Minute); err != nil {
		t.Fatalf("Set: %v", err)
	}
	if _, ok, _ := m.Get(ctx, "big"); ok {
		t.Fatal("value larger than the cache was kept")
	}
	if err := m.Set(ctx, "fits", bytes.Repeat([]byte("x"), 100), time.Minute); err != nil {
		t.Fatalf("Set: %v", err)
	}
	if _, ok, _ := m.Get(ctx, "fits"); !ok {
		t.Fatal("value of exactly the cache size was not kept")
	}
	// Filling the cache further must keep the total within the bound.
	for i := range 20 {
		_ = m.Set(ctx, string(rune('a'+i)), bytes.Repeat([]byte("y"), 30), time.Minute)
	}
	kept := 0
	if _, ok, _ := m.Get(ctx, "fits"); ok {
		kept += 100
	}
	for i := range 20 {
		if _, ok, _ := m.Get(ctx, string(rune('a'+i))); ok {
			kept += 30
		}
	}
	if kept > 100 {
		t.Fatalf("cache holds %d bytes, bound is 100", kept)
	}
}

func TestNewMemoryRejectsNonPositiveSize(t *testing.T) {
	if _, err := respcache.NewMemory(0, nil); err == nil {
		t.Fatal("NewMemory(0) succeeded")
	}
}

func TestMemoryPerOrganization(t *testing.T) {
	ctx := context.Background()
	m := newMemory(t, 1<<20, nil)
	k1 := mustKey(t, 1, "/v1/chat/completions", baseBody)
	k2 := mustKey(t, 2, "/v1/chat/completions", baseBody)
	if err := m.Set(ctx, k1, []byte("org1 answer"), time.Minute); err != nil {
		t.Fatalf("Set: %v", err)
	}
	if _, ok, _ := m.Get(ctx, k2); ok {
		t.Fatal("organization 2 hit organization 1's cached answer")
	}
	if got, ok, _ := m.Get(ctx, k1); !ok || string(got) != "org1 answer" {
		t.Fatalf("organization 1 Get = %q, %v", got, ok)
	}
}

func TestMemoryConcurrent(t *testing.T) {
	ctx := context.Background()
	m := newMemory(t, 1<<20, nil)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				k := string(rune('a' + (g+i)%26))
				_ = m.Set(ctx, k, []byte(k), time.Minute)
				_, _, _ = m.Get(ctx, k)
			}
		})
	}
	wg.Wait()
}
