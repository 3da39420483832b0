package gcfloor

import (
	"runtime/debug"
	"runtime/metrics"
	"testing"
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
		{0, 64 * mib, 6300},        // before the first cycle: as if 1 MiB were live
		{6 * mib, 0, 100},          // no floor
	} {
		if got := Percent(tc.live, tc.floor); got != tc.want {
			t.Errorf("Percent(%d MiB live, %d MiB floor) = %d, want %d", tc.live/mib, tc.floor/mib, got, tc.want)
		}
		if tc.live >= mib && tc.floor > 2*tc.live {
			goal := tc.live + tc.live*uint64(Percent(tc.live, tc.floor))/100
			if goal > tc.floor || tc.floor-goal > tc.live/100 {
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
