package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercentPutsTheGoalAtTheFloorOrTwiceTheLiveHeap(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		live, floor uint64
		want        int
	}{
		{6 * mib, 64 * mib, 966},   // a small heap: goal 6 × 10.66 ≈ 64 MiB
		{32 * mib, 64 * mib, 100},  // twice the live heap reaches the floor
		{200 * mib, 64 * mib, 100}, // a large heap: Go's default
		{0, 64 * mib, 1500},        // before the first cycle: as if 4 MiB (Go's heap minimum) were live
		{1 * mib, 64 * mib, 1500},  // and a heap under it: the minimum, 4 MiB × 15, is the goal
		{6 * mib, 0, 100},          // no floor
	} {
		if got := Percent(tc.live, tc.floor); got != tc.want {
			t.Errorf("Percent(%d MiB live, %d MiB floor) = %d, want %d", tc.live/mib, tc.floor/mib, got, tc.want)
		}
		if tc.live >= mib && tc.floor > 2*tc.live {
			// Go's goal: the live heap grown by GOGC, and at least its
			// heap minimum, 4 MiB × GOGC/100.
			p := uint64(Percent(tc.live, tc.floor))
			goal := max(tc.live+tc.live*p/100, 4*mib*p/100)
			slack := tc.live / 100
			if tc.live < 4*mib {
				slack = 4 * mib // the goal is floor - 4 MiB
			}
			if goal > tc.floor || tc.floor-goal > slack {
				t.Errorf("live %d MiB: goal %d bytes, want about the floor %d", tc.live/mib, goal, tc.floor)
			}
		}
	}
}

func gogc() int64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

func TestApplyRaisesGOGCOnASmallHeapAndSaysWhatItReplaced(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	if was := Apply(1 << 40); was != 100 { // a 1 TiB floor: far above any live heap here
		t.Errorf("Apply replaced GOGC %d, want 100", was)
	}
	if got := gogc(); got <= 100 {
		t.Errorf("GOGC after Apply = %d, want it raised toward the floor", got)
	}
	if was := Apply(0); was <= 100 {
		t.Errorf("Apply without a floor replaced GOGC %d, want the raised one", was)
	}
	if got := gogc(); got != 100 {
		t.Errorf("GOGC without a floor = %d, want Go's default 100", got)
	}
}

// The percentage follows each collection's live heap, not a reading older
// than the heap's growth: after a cycle with more live, the goal is back
// at about the floor (here, with 24 MiB kept live and a 64 MiB floor,
// GOGC ≈ (64-24)/24 = 166%, not the 1500% of a 4 MiB heap).
func TestFollowAppliesTheFloorAfterEachCycle(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	const mib = 1 << 20
	stop := Follow(64 * mib)
	defer stop()
	keep := make([][]byte, 24)
	for i := range keep {
		keep[i] = make([]byte, mib)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // the finalizer goroutine applies it
		live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		metrics.Read(live)
		if got, want := gogc(), int64(Percent(live[0].Value.Uint64(), 64*mib)); got == want && got < 400 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("GOGC %d after the cycles, want %d for %d MiB live", got, want, live[0].Value.Uint64()/mib)
		}
	}
	runtime.KeepAlive(keep)
	stop()
	debug.SetGCPercent(100)
	runtime.GC()
	time.Sleep(20 * time.Millisecond)
	if got := gogc(); got != 100 {
		t.Errorf("GOGC %d after stop, want it left alone (100)", got)
	}
}
