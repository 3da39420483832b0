package upstream

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/quota"
)

// TestEveryRateIsABucket: for any per-minute limit from 1 to the largest
// int64 and any request size, the pool's buckets are params the limiter
// accepts, and their rate is the limit's to within 0.5%.
func TestEveryRateIsABucket(t *testing.T) {
	lim := quota.NewMemory(newClock().Now)
	rates := []int64{1, 59, 60, 1500, 6e7, 6e8, 6e8 + 1, 6e9, 1e12, 1e15, math.MaxInt64}
	for _, perMinute := range rates {
		for _, weight := range []int64{1, 500, 1e6, 1e9, math.MaxInt64} {
			for _, capacity := range []int64{1, max(1, perMinute/60), perMinute} {
				b, ok := newBucket("upkey:1|tpm", perMinute, capacity, weight)
				if !ok {
					t.Fatalf("rate %d: no bucket", perMinute)
				}
				if _, err := lim.Allow(context.Background(), b.key, b.params, b.weight); err != nil {
					t.Fatalf("rate %d, capacity %d, weight %d: %+v refused: %v", perMinute, capacity, weight, b, err)
				}
				if err := lim.Adjust(context.Background(), b.key, b.params, -b.weight); err != nil {
					t.Fatalf("rate %d: adjust: %v", perMinute, err)
				}
				interval := math.Round(1e9 / b.params.RefillPerSec)
				got := 1e9 / interval * float64(b.unit) * 60
				if rel := math.Abs(got-float64(perMinute)) / float64(perMinute); rel > 0.005 && perMinute >= 60 {
					t.Fatalf("rate %d: the bucket refills %.6g a minute (%.2f%% off)", perMinute, got, 100*rel)
				}
			}
		}
	}
	if b, _ := newBucket("k", 1e12, int64(1e12)/60, 20); b.unit != 1e4 || b.weight != 1 || b.params.RefillPerSec > maxBucketRate {
		t.Fatalf("tpm 1e12: %+v, want units of 10,000 tokens, a small request charged one", b)
	}
	if b, _ := newBucket("k", 6e8, 1e7, 20); b.unit != 1 || b.weight != 20 {
		t.Fatalf("tpm 6e8: %+v, want exact tokens", b)
	}
	if _, ok := newBucket("k", 0, 1, 1); ok {
		t.Fatal("a bucket for an unknown limit")
	}
}

// TestLargeRateIsStillPaced: a key whose tokens limit is beyond what the
// limiter represents exactly (tpm 6e9, 1e8 a second, counted in units of
// 10) still holds back a request that does not fit.
func TestLargeRateIsStillPaced(t *testing.T) {
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) { writeOK(w) })
	k := key(1, srv.URL, "a")
	k.TPM = 6e9 // one second's worth: 1e8 tokens
	p, c := testPool(t, PoolOptions{}, k)
	req := chatRequest("m")
	req.Estimate = 6e7
	for range 3 {
		if _, err := p.Do(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	// 1e8 tokens hold one request of 6e7 and refill 4e7 of the next in
	// 0.4 s; the third waits for the rest.
	if slept := c.Slept(); slept < 300*time.Millisecond || slept > 900*time.Millisecond {
		t.Fatalf("waited %s in all (%v), want the tokens bucket to pace the large requests", slept, c.Sleeps())
	}
	if p.PacingErrors() != 0 {
		t.Fatalf("PacingErrors = %d", p.PacingErrors())
	}
}

// TestLimiterFailureLogsOnce: when the limiter fails for a key's buckets
// (here a Redis nobody listens on), every request still goes out, unpaced,
// each failure is counted, and only the first is logged.
func TestLimiterFailureLogsOnce(t *testing.T) {
	var h hits
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		h.add(r)
		writeOK(w)
	})
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond,
		DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	t.Cleanup(func() { client.Close() })
	log, buf := captureLog()
	k := key(1, srv.URL, "a")
	k.RPM, k.TPM = 600, 60000
	p, _ := testPool(t, PoolOptions{Limiter: quota.NewRedis(client, "t:"), Log: log}, k)
	const n = 5
	for range n {
		if _, err := p.Do(context.Background(), chatRequest("m")); err != nil {
			t.Fatal(err)
		}
		if err := p.Settle(context.Background(), 1, 20, 5); err != nil {
			t.Fatalf("Settle returned %v; the pool reports failures itself", err)
		}
		p.Flush(context.Background())
	}
	if h.total() != n {
		t.Fatalf("provider saw %d requests, want %d sent unpaced", h.total(), n)
	}
	if got := p.PacingErrors(); got != 2*n {
		t.Fatalf("PacingErrors = %d, want %d (one pacing and one settlement per request)", got, 2*n)
	}
	if got := strings.Count(buf.String(), "level=WARN"); got != 1 {
		t.Fatalf("%d warnings, want one for the change of state:\n%s", got, buf.String())
	}
}
