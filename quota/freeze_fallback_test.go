package quota

import (
	"context"
	"errors"
	"testing"
	"time"
)

type brokenWindow struct{}

func (brokenWindow) Add(context.Context, string) (int, error) {
	return 0, errors.New("redis: connection refused")
}

func TestFallbackWindowCountsLocallyWhenSharedFails(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	local := NewMemoryWindow(func() time.Time { return now })
	w := FallbackWindow{Shared: brokenWindow{}, Local: local, Timeout: time.Millisecond}
	d := NewDetector(w)
	for i := 1; i <= 3; i++ {
		n, freeze, err := d.Rejected(context.Background(), "tok:1", 3)
		if err != nil || n != i || freeze != (i == 3) {
			t.Fatalf("rejection %d: count %d freeze %v err %v", i, n, freeze, err)
		}
	}
}
