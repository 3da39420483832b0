package upstream

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/quota"
)

// countingLimiter records the Adjusts the pool makes.
type countingLimiter struct {
	quota.Limiter
	mu       sync.Mutex
	adjusts  []int64 // each Adjust's delta
	adjusted chan struct{}
}

func newCountingLimiter(now func() time.Time) *countingLimiter {
	return &countingLimiter{Limiter: quota.NewMemory(now), adjusted: make(chan struct{}, 100)}
}

func (l *countingLimiter) Adjust(ctx context.Context, key string, p quota.Params, delta int64) error {
	l.mu.Lock()
	l.adjusts = append(l.adjusts, delta)
	l.mu.Unlock()
	select {
	case l.adjusted <- struct{}{}:
	default:
	}
	return l.Limiter.Adjust(ctx, key, p, delta)
}

func (l *countingLimiter) calls() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int64(nil), l.adjusts...)
}

func sum(xs []int64) (s int64) {
	for _, x := range xs {
		s += x
	}
	return s
}

// settlingPool is a pool with one key whose tokens are paced (TPM 600,000),
// on a limiter that records its Adjusts.
func settlingPool(t *testing.T) (*Pool, *countingLimiter) {
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) { writeOK(w) })
	k := key(1, srv.URL, "a")
	k.TPM = 600000
	c := newClock()
	lim := newCountingLimiter(c.Now)
	p, _ := testPool(t, PoolOptions{Limiter: lim, Now: c.Now, Sleep: c.Sleep}, k)
	return p, lim
}

// TestSettleQueuesForOneAdjust: settlements never call the limiter on the
// request's path; Flush sends what 50 concurrent requests owe as one Adjust
// of the exact sum.
func TestSettleQueuesForOneAdjust(t *testing.T) {
	p, lim := settlingPool(t)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			// Half used 40 of 100 estimated tokens, half 130.
			used := int64(40)
			if i%2 == 1 {
				used = 130
			}
			if err := p.Settle(context.Background(), 1, 100, used); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if adjusts := lim.calls(); len(adjusts) != 0 {
		t.Fatalf("Settle called Adjust %d times before any Flush", len(adjusts))
	}
	p.Flush(context.Background())
	adjusts := lim.calls()
	if want := int64(25*(40-100) + 25*(130-100)); len(adjusts) != 1 || adjusts[0] != want {
		t.Fatalf("Flush sent %v, want one Adjust of %d", adjusts, want)
	}
	p.Flush(context.Background())
	if again := lim.calls(); len(again) != 1 {
		t.Fatalf("a second Flush sent %v, want nothing more", again[1:])
	}
}

// TestRunSendsSettlements: Run sends a settlement soon after it is queued,
// and what is queued when its context ends.
func TestRunSendsSettlements(t *testing.T) {
	p, lim := settlingPool(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		p.Run(ctx)
		close(done)
	}()
	_ = p.Settle(ctx, 1, 100, 10)
	select {
	case <-lim.adjusted:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not send the settlement")
	}
	_ = p.Settle(ctx, 1, 100, 300)
	cancel()
	<-done
	if adjusts := lim.calls(); sum(adjusts) != -90+200 {
		t.Fatalf("adjusts %v, want them to sum to %d", adjusts, -90+200)
	}
}

// TestSettleWakesRunForLargeCorrections: a key's corrections wait to be
// gathered until together they are worth 1/settleShare of its burst; then
// Run is woken to send them at once. The key of settlingPool has a burst
// of 10,000 tokens (a second of 600,000 a minute), so 625 is large.
func TestSettleWakesRunForLargeCorrections(t *testing.T) {
	p, _ := settlingPool(t)
	ctx := context.Background()
	for range 62 {
		_ = p.Settle(ctx, 1, 100, 90) // 10 tokens back each: 620 in all
	}
	if len(p.settlements.queued) != 1 {
		t.Fatal("the key's corrections were not queued for Run")
	}
	if len(p.settlements.large) != 0 {
		t.Fatal("620 tokens of corrections on a burst of 10,000 woke Run to send them at once")
	}
	_ = p.Settle(ctx, 1, 100, 95)
	if len(p.settlements.large) != 1 {
		t.Fatal("625 tokens of corrections on a burst of 10,000 did not wake Run")
	}
	// A debt counts as much as a refund.
	p.Flush(ctx)
	<-p.settlements.large
	_ = p.Settle(ctx, 1, 100, 800)
	if len(p.settlements.large) != 1 {
		t.Fatal("a debt of 700 tokens on a burst of 10,000 did not wake Run")
	}
}
