package accounts_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/internal/clocktest"
)

var throttleEpoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func TestThrottleBackoff(t *testing.T) {
	clock := clocktest.New(throttleEpoch)
	th := accounts.NewLoginThrottle(clock.Now)
	const key = "ada@example.com|192.0.2.1"

	if w := th.Wait(key); w != 0 {
		t.Fatalf("unknown key waits %v", w)
	}
	// want[i] is Wait right after failure i+1, on a clock that never moves.
	want := []time.Duration{
		0, 0, 0, 0, 0, // five free failures
		1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
		16 * time.Second, 32 * time.Second, 64 * time.Second, 128 * time.Second,
		256 * time.Second, 512 * time.Second,
		15 * time.Minute, // 1024 s would exceed the cap
		15 * time.Minute,
	}
	for i, w := range want {
		th.Fail(key)
		if got := th.Wait(key); got != w {
			t.Fatalf("after failure %d: Wait = %v, want %v", i+1, got, w)
		}
	}
	// Far past the point where the shift would overflow, still the cap.
	for i := len(want); i < 100; i++ {
		th.Fail(key)
		if got := th.Wait(key); got != 15*time.Minute {
			t.Fatalf("after failure %d: Wait = %v, want the 15m cap", i+1, got)
		}
	}
}

func TestThrottleWaitCountsDown(t *testing.T) {
	clock := clocktest.New(throttleEpoch)
	th := accounts.NewLoginThrottle(clock.Now)
	const key = "k"
	for range 9 { // 9th failure: wait 8 s
		th.Fail(key)
	}
	steps := []struct {
		advance time.Duration
		want    time.Duration
	}{
		{0, 8 * time.Second},
		{3 * time.Second, 5 * time.Second},
		{4500 * time.Millisecond, 500 * time.Millisecond},
		{500 * time.Millisecond, 0},
		{time.Minute, 0},
	}
	for _, s := range steps {
		clock.Advance(s.advance)
		if got := th.Wait(key); got != s.want {
			t.Fatalf("after advancing %v: Wait = %v, want %v", s.advance, got, s.want)
		}
	}
	// The count is remembered: the next failure doubles again.
	th.Fail(key)
	if got := th.Wait(key); got != 16*time.Second {
		t.Fatalf("10th failure: Wait = %v, want 16s", got)
	}
}

func TestThrottleSucceedResets(t *testing.T) {
	clock := clocktest.New(throttleEpoch)
	th := accounts.NewLoginThrottle(clock.Now)
	const key = "k"
	for range 7 {
		th.Fail(key)
	}
	if th.Wait(key) == 0 {
		t.Fatal("7 failures should wait")
	}
	th.Succeed(key)
	if got := th.Wait(key); got != 0 {
		t.Fatalf("after Succeed: Wait = %v", got)
	}
	// The count starts over: five more failures are free again.
	for i := range 5 {
		th.Fail(key)
		if got := th.Wait(key); got != 0 {
			t.Fatalf("failure %d after Succeed: Wait = %v", i+1, got)
		}
	}
	th.Fail(key)
	if got := th.Wait(key); got != time.Second {
		t.Fatalf("6th failure after Succeed: Wait = %v, want 1s", got)
	}
	th.Succeed("never failed") // harmless
}

func TestThrottleForgetsAfter15Minutes(t *testing.T) {
	tests := []struct {
		name  string
		idle  time.Duration // since the last failure
		fresh bool          // whether the key was forgotten
	}{
		{"14m59s later: remembered", 15*time.Minute - time.Second, false},
		{"exactly 15m later: remembered", 15 * time.Minute, false},
		{"just over 15m later: forgotten", 15*time.Minute + time.Nanosecond, true},
		{"an hour later: forgotten", time.Hour, true},
	}
	for _, tt := range tests {
		for _, viaWait := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/checked first=%v", tt.name, viaWait), func(t *testing.T) {
				clock := clocktest.New(throttleEpoch)
				th := accounts.NewLoginThrottle(clock.Now)
				const key = "k"
				for range 6 {
					th.Fail(key)
				}
				clock.Advance(tt.idle)
				if viaWait && th.Wait(key) != 0 {
					t.Fatal("1 s wait still running after minutes")
				}
				// One more failure: 7th (2 s) if remembered, 1st (free) if forgotten.
				th.Fail(key)
				want := 2 * time.Second
				if tt.fresh {
					want = 0
				}
				if got := th.Wait(key); got != want {
					t.Fatalf("Wait after one more failure = %v, want %v", got, want)
				}
			})
		}
	}

	// The idle time runs from the last failure, not the first: failures
	// 10 minutes apart keep a key remembered for as long as they come.
	clock := clocktest.New(throttleEpoch)
	th := accounts.NewLoginThrottle(clock.Now)
	for range 6 {
		th.Fail("k")
		clock.Advance(10 * time.Minute)
	}
	th.Fail("k") // 7th
	if got := th.Wait("k"); got != 2*time.Second {
		t.Fatalf("failures 10 minutes apart: Wait = %v, want 2s", got)
	}
}

func TestThrottleForgetsCappedKey(t *testing.T) {
	clock := clocktest.New(throttleEpoch)
	th := accounts.NewLoginThrottle(clock.Now)
	for range 30 {
		th.Fail("k")
	}
	clock.Advance(15*time.Minute - time.Second)
	if got := th.Wait("k"); got != time.Second {
		t.Fatalf("capped wait near its end = %v, want 1s", got)
	}
	clock.Advance(2 * time.Second)
	if got := th.Wait("k"); got != 0 {
		t.Fatalf("after 15m: Wait = %v", got)
	}
	th.Fail("k")
	if got := th.Wait("k"); got != 0 {
		t.Fatalf("first failure after being forgotten: Wait = %v", got)
	}
}

func TestThrottleKeysAreIndependent(t *testing.T) {
	clock := clocktest.New(throttleEpoch)
	th := accounts.NewLoginThrottle(clock.Now)
	a, b := "ada@example.com|192.0.2.1", "ada@example.com|192.0.2.2"
	for range 8 {
		th.Fail(a)
	}
	for range 6 {
		th.Fail(b)
	}
	if got := th.Wait(a); got != 4*time.Second {
		t.Fatalf("a: %v", got)
	}
	if got := th.Wait(b); got != time.Second {
		t.Fatalf("b: %v", got)
	}
	if got := th.Wait("bo@example.com|192.0.2.1"); got != 0 {
		t.Fatalf("untouched key: %v", got)
	}
	th.Succeed(b)
	if th.Wait(b) != 0 || th.Wait(a) != 4*time.Second {
		t.Fatalf("Succeed(b) touched a: a=%v b=%v", th.Wait(a), th.Wait(b))
	}
}

func TestThrottleConcurrent(t *testing.T) {
	clock := clocktest.New(throttleEpoch)
	th := accounts.NewLoginThrottle(clock.Now)
	const workers, perWorker = 50, 20
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			own := fmt.Sprintf("own-%d", w)
			for range perWorker {
				th.Fail("shared")
				th.Fail(own)
				th.Wait("shared")
				th.Wait(own)
				if w%10 == 0 {
					clock.Advance(time.Millisecond)
				}
			}
			if w%2 == 0 {
				th.Succeed(own)
			}
		})
	}
	wg.Wait()
	// 1000 failures on the shared key: capped, none lost to a race.
	if got := th.Wait("shared"); got <= 14*time.Minute || got > 15*time.Minute {
		t.Fatalf("shared key after %d failures: Wait = %v", workers*perWorker, got)
	}
	for w := range workers {
		got := th.Wait(fmt.Sprintf("own-%d", w))
		if w%2 == 0 && got != 0 {
			t.Errorf("own-%d succeeded but waits %v", w, got)
		}
		if w%2 == 1 && got == 0 {
			t.Errorf("own-%d failed %d times but waits 0", w, perWorker)
		}
	}
}
