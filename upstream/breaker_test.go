package upstream

import (
	"strings"
	"testing"
	"time"
)

func TestBreakerErrorRate(t *testing.T) {
	now := time.Unix(1000, 0)
	b := newBreaker(BreakerOptions{}.withDefaults())
	// Alternating outcomes never make 5 in a row, but reach 50% once
	// there are 10 samples.
	for i := 1; i <= 10; i++ {
		failed := i%2 == 1
		if failed {
			if opened, _ := b.failure(now, "503", false); opened {
				t.Fatalf("opened at outcome %d, before 10 samples", i)
			}
		} else {
			b.success(false)
		}
	}
	opened, reason := b.failure(now, "503", false)
	if !opened || !strings.Contains(reason, "6 of the last 11") {
		t.Fatalf("11th outcome (6 failures): opened %v %q, want open on the error rate", opened, reason)
	}
	if ok, _ := b.acquire(now.Add(29 * time.Second)); ok {
		t.Fatal("admitted during the cool-down")
	}
	ok, probe := b.acquire(now.Add(30 * time.Second))
	if !ok || !probe {
		t.Fatal("no probe after the cool-down")
	}
	if ok, _ := b.acquire(now.Add(31 * time.Second)); ok {
		t.Fatal("a second request went through during the probe")
	}
	b.release(true)
	if ok, probe := b.acquire(now.Add(31 * time.Second)); !ok || !probe {
		t.Fatal("a released probe is available again")
	}
	b.success(true)
	if b.open || b.samples != 0 {
		t.Fatalf("a good probe closes the breaker with a fresh window: %+v", b)
	}
}

func TestBreakerWindowSlides(t *testing.T) {
	now := time.Unix(1000, 0)
	b := newBreaker(BreakerOptions{Failures: 100, Window: 4, MinSamples: 4, ErrorRate: 0.75}.withDefaults())
	b.failure(now, "x", false)
	b.failure(now, "x", false)
	b.success(false)
	b.success(false) // F F S S: 50%
	b.success(false) // F S S S: the oldest failure slid out
	if b.fails != 1 || b.samples != 4 {
		t.Fatalf("fails %d samples %d, want 1 of 4", b.fails, b.samples)
	}
	b.failure(now, "x", false) // S S S F
	b.failure(now, "x", false) // S S F F
	if b.open {
		t.Fatal("opened at 50%")
	}
	if opened, _ := b.failure(now, "x", false); !opened { // S F F F
		t.Fatal("did not open at 75%")
	}
}

func TestBreakerLateOutcomesWhileOpen(t *testing.T) {
	now := time.Unix(1000, 0)
	b := newBreaker(BreakerOptions{Failures: 1}.withDefaults())
	b.failure(now, "x", false)
	until := b.until
	b.success(false) // a request sent before it opened
	if opened, _ := b.failure(now.Add(time.Second), "x", false); opened || !b.open || b.until != until {
		t.Fatal("late outcomes must neither close nor extend an open breaker")
	}
}
