package metering

import (
	"slices"
	"testing"

	"github.com/sluicehq/sluice/money"
)

// The banner and the alerts read one threshold: a move that crosses a mark
// is an alert for it, and spending at the mark has reached it, to the
// picodollar; an odd limit's marks round down, never past the limit.
func TestThresholdsCrossedAndReached(t *testing.T) {
	limit := 10*money.Dollar + 1 // 50% is 5.000000000000 dollars (rounded down)
	half := limit / 2
	for _, tt := range []struct {
		before, after money.Amount
		crossed       []int
		reached       int
	}{
		{0, half - 1, nil, 0},
		{0, half, []int{50}, 50},
		{half, half + 1, nil, 50},
		{half - 1, limit, []int{50, 80, 100}, 100},
		{limit, 2 * limit, nil, 100},
	} {
		if got := Crossed(limit, tt.before, tt.after); !slices.Equal(got, tt.crossed) {
			t.Errorf("Crossed(%v → %v) = %v, want %v", tt.before, tt.after, got, tt.crossed)
		}
		if got := Reached(limit, tt.after); got != tt.reached {
			t.Errorf("Reached(%v) = %d, want %d", tt.after, got, tt.reached)
		}
	}
	if Reached(0, 0) != 100 {
		t.Error("a zero budget is reached from the start")
	}
	if m := mark(money.MaxAmount, 100); m > money.MaxAmount || m < money.MaxAmount-100 {
		t.Errorf("100%% of the largest amount = %v", m)
	}
}
