package quota_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/quota"
)

// A free-tier token gets its burst of 30, then one request every 2 seconds.
func ExampleMemory_Allow() {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	lim := quota.NewMemory(func() time.Time { return now })
	free := quota.Params{Capacity: 30, RefillPerSec: 0.5}
	ctx := context.Background()

	for range 30 {
		_, _ = lim.Allow(ctx, "tok_abc", free, 1)
	}
	d, _ := lim.Allow(ctx, "tok_abc", free, 1)
	fmt.Printf("allowed=%v remaining=%d retry-after=%v reset=%v\n", d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter)

	now = now.Add(d.RetryAfter)
	d, _ = lim.Allow(ctx, "tok_abc", free, 1)
	fmt.Printf("allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	// Output:
	// allowed=false remaining=0 retry-after=2s reset=1m0s
	// allowed=true remaining=0
}
