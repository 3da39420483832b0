package quota

import (
	"context"
	"time"
)

// FallbackWindow counts rejections in a shared window and, when that fails
// (Redis down), in a local one, so freezes keep working per node during an
// outage instead of stopping altogether.
type FallbackWindow struct {
	Shared  RejectionWindow
	Local   RejectionWindow
	Timeout time.Duration // budget for one shared call
}

// Add counts a rejection of key.
func (w FallbackWindow) Add(ctx context.Context, key string) (int, error) {
	sctx, cancel := context.WithTimeout(ctx, w.Timeout)
	n, err := w.Shared.Add(sctx, key)
	cancel()
	if err == nil {
		return n, nil
	}
	return w.Local.Add(ctx, key)
}
