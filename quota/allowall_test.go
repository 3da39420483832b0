package quota

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// A token's own bucket is charged with its organization's buckets, all or
// none: a request the token's bucket refuses costs the organization
// nothing, and one the organization's bucket refuses costs the token
// nothing. On both backends.
func TestAllowAllChargesAllOrNone(t *testing.T) {
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			clk := newFakeClock()
			var l Limiter = NewMemory(clk.Now)
			if backend == "redis" {
				l, _ = rlSetup(t, clk)
			}
			ctx := context.Background()
			org, tpm := Params{Capacity: 10, RefillPerSec: 0.001}, Params{Capacity: 1000, RefillPerSec: 0.001}
			tok := Params{Capacity: 3, RefillPerSec: 3.0 / 60}
			charges := func(key string, p Params) []Charge {
				return []Charge{{"org:1", org, 1}, {"org:1|tpm", tpm, 10}, {key, p, 1}}
			}
			for i := range 5 {
				ds, err := l.AllowAll(ctx, charges("org:1|tok:1", tok))
				if err != nil {
					t.Fatal(err)
				}
				want := i < 3
				for j, d := range ds {
					if d.Allowed != want {
						t.Fatalf("request %d, bucket %d: %+v, want allowed %v", i, j, d, want)
					}
				}
				if !want && (ds[2].RetryAfter != 20*time.Second || ds[0].RetryAfter != 0 || ds[0].Remaining != 7) {
					t.Fatalf("refused by the token's bucket: %+v, want its wait (20s) and the organization's 7 left, untouched", ds)
				}
			}
			// The organization's other token spends the rest of its bucket:
			// then the first token's refused requests cost its bucket
			// nothing either.
			big := Params{Capacity: 100, RefillPerSec: 0.001}
			for range 7 {
				if ds, err := l.AllowAll(ctx, charges("org:1|tok:2", big)); err != nil || !ds[0].Allowed {
					t.Fatalf("the other token: %+v %v", ds, err)
				}
			}
			ds, err := l.AllowAll(ctx, charges("org:1|tok:2", big))
			if err != nil || ds[0].Allowed || ds[2].Allowed || ds[2].Remaining != 93 || ds[2].RetryAfter != 0 {
				t.Fatalf("refused by the organization's bucket: %+v %v, want the token's 93 left untouched", ds, err)
			}
			if n := rlDrain(t, l, "org:1|tok:2", big); n != 93 {
				t.Fatalf("the token's bucket has %d left, want 93", n)
			}
			if n := rlDrain(t, l, "org:1|tpm", tpm); n != 1000-100 {
				t.Fatalf("the tokens bucket has %d left, want 900: only admitted requests charge it", n)
			}
			if _, err := l.AllowAll(ctx, []Charge{{"org:1", org, 1}, {"org:1", org, 1}}); !errors.Is(err, ErrSameKey) {
				t.Fatalf("one key twice: %v, want ErrSameKey", err)
			}
			if _, err := l.AllowAll(ctx, []Charge{{"org:1", org, 1}, {"org:1|tok:1", tok, 4}}); !errors.Is(err, ErrWeightExceedsCapacity) {
				t.Fatalf("a weight above the token's bucket: %v", err)
			}
		})
	}
}

// Many goroutines on three nodes sharing Redis (and, for memory, one
// process): the token's bucket admits exactly its capacity, and the
// organization's bucket is charged exactly for what was admitted on both
// tokens, never for a request the token's bucket refused. Run with -race.
// Redis decides each call in one script: exactly 60 in all. Memory charges
// the buckets in turn and gives a refused call's charges back (AllowAll),
// so a call racing a give-back may be refused with a token about to
// return: at most 60 in all there, never more, and whatever was admitted
// charged to both buckets exactly.
func TestAllowAllConcurrent(t *testing.T) {
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			var nodes []Limiter
			if backend == "memory" {
				nodes = []Limiter{NewMemory(nil)}
			} else {
				opt := rlOptions(t)
				first := rlClient(t, opt)
				prefix := rlPrefix(t, first)
				nodes = []Limiter{NewRedis(first, prefix), NewRedis(rlClient(t, opt), prefix), NewRedis(rlClient(t, opt), prefix)}
			}
			ctx := context.Background()
			org := Params{Capacity: 60, RefillPerSec: 0.001}
			small, big := Params{Capacity: 5, RefillPerSec: 0.001}, Params{Capacity: 1000, RefillPerSec: 0.001}
			var onSmall, calls atomic.Int64
			total := rlHammer(t, nodes, 120, 2, func(l Limiter) (bool, error) {
				key, p := "org:7|tok:1", small
				mine := calls.Add(1)%2 == 0
				if !mine {
					key, p = "org:7|tok:2", big
				}
				ds, err := l.AllowAll(ctx, []Charge{{"org:7", org, 1}, {key, p, 1}})
				if err == nil && ds[0].Allowed != ds[1].Allowed {
					return false, fmt.Errorf("AllowAll answered %+v", ds)
				}
				if err == nil && ds[0].Allowed && mine {
					onSmall.Add(1)
				}
				return err == nil && ds[0].Allowed, err
			})
			exact := backend == "redis"
			if onSmall.Load() > 5 || total > 60 || exact && (onSmall.Load() != 5 || total != 60) {
				t.Fatalf("admitted %d on the token of 5 and %d in all under the organization's 60", onSmall.Load(), total)
			}
			onBig := total - onSmall.Load()
			if n := rlDrain(t, nodes[0], "org:7|tok:2", big); n != 1000-onBig {
				t.Fatalf("the big token's bucket has %d left, want %d: charged for exactly the %d it admitted", n, 1000-onBig, onBig)
			}
			if n := rlDrain(t, nodes[0], "org:7", org); n != 60-total {
				t.Fatalf("the organization's bucket has %d left, want %d: charged for exactly the %d admitted", n, 60-total, total)
			}
		})
	}
}

// While the shared limiter is down, AllowAll decides on the local share of
// every bucket, all or none.
func TestDegradingAllowAllFallsBackToShares(t *testing.T) {
	clk := newFakeClock()
	shared := &switchLimiter{up: NewMemory(clk.Now)}
	var log dgLog
	d := newTestDegrading(shared, NewMemory(clk.Now), log.options(DegradingOptions{Share: 3, ProbeInterval: time.Second, Now: clk.Now}))
	ctx := context.Background()
	shared.mode.Store(sharedDown)
	org, tok := Params{Capacity: 30, RefillPerSec: 0.001}, Params{Capacity: 6, RefillPerSec: 0.001}
	admitted := 0
	for range 20 {
		ds, err := d.AllowAll(ctx, []Charge{{"org:1", org, 1}, {"org:1|tok:1", tok, 1}})
		if err != nil {
			t.Fatal(err)
		}
		if ds[0].Allowed != ds[1].Allowed {
			t.Fatalf("all or none: %+v", ds)
		}
		if ds[0].Allowed {
			admitted++
		}
	}
	if admitted != 2 {
		t.Fatalf("degraded: admitted %d, want 2 (a third of the token's 6)", admitted)
	}
	if n := rlDrain(t, d, "org:1", org); n != 8 {
		t.Fatalf("the organization's local share has %d left, want 8 of 10: the token's refusals cost it nothing", n)
	}
}
