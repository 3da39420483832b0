package app

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/upstream"
)

func TestRateMeterMeasuresAdmittedUpstreamRate(t *testing.T) {
	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	m := rateMeter{now: clk.Now}
	keys := func(a, b int64) []upstream.KeyStatus {
		return []upstream.KeyStatus{
			{ID: 1, RPM: 600, Requests: a, State: upstream.Healthy},
			{ID: 2, RPM: 1200, Requests: b, State: upstream.Healthy},
			{ID: 3, RPM: 0, Requests: 1000, State: upstream.Healthy},  // unknown capacity: ignored
			{ID: 4, RPM: 6000, Requests: 5, State: upstream.Disabled}, // out of rotation: ignored
		}
	}
	if rate, capacity := m.sample(keys(0, 0)); rate != 0 || capacity != 30 {
		t.Fatalf("first sample: rate %v capacity %v", rate, capacity)
	}
	clk.Advance(5 * time.Second)
	rate, capacity := m.sample(keys(50, 75)) // 125 requests in 5 s
	if rate != 25 || capacity != 30 {
		t.Fatalf("rate %v capacity %v, want 25 of 30", rate, capacity)
	}
}
