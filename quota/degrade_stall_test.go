package quota

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testredis"
)

// TestDegradingRedisStall freezes a real Redis under three nodes' traffic
// and measures the over-admission it causes. Bucket arithmetic runs on an
// injected clock (in Redis too), so the counts are exact; only the failing
// calls take real time (a 50ms budget each). Traffic is one request a
// millisecond round robin, a bucket of 100 at 100/s, and the stall lasts
// 1.5s of that clock.
func TestDegradingRedisStall(t *testing.T) {
	srv := testredis.Start(t)
	const n, c, rate = 3, 100, 100.0
	p := Params{Capacity: c, RefillPerSec: rate}
	clk := newFakeClock()
	var nodes [n]*Degrading
	for i := range nodes {
		client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
		t.Cleanup(func() { client.Close() })
		nodes[i] = newTestDegrading(NewRedis(client, "stall:", WithRedisClock(clk.Now)), NewMemory(clk.Now),
			DegradingOptions{Share: n, Timeout: 50 * time.Millisecond, Now: clk.Now})
	}
	next := 0
	run := func(d time.Duration) (admitted int) {
		for end := clk.Now().Add(d); clk.Now().Before(end); clk.Advance(time.Millisecond) {
			dec, err := nodes[next%n].Allow(context.Background(), "tok:1", p, 1)
			if err != nil {
				t.Fatalf("request %d: %v", next, err)
			}
			if dec.Allowed {
				admitted++
			}
			next++
		}
		return admitted
	}
	before := run(time.Second)
	srv.Stop(t)
	start := time.Now()
	during := run(1500 * time.Millisecond)
	stalled := time.Since(start)
	for i, d := range nodes {
		if !d.Degraded() {
			t.Fatalf("node %d is not degraded during the stall", i)
		}
	}
	srv.Cont(t)
	after := run(2500 * time.Millisecond)
	var fallbacks uint64
	var owed int64
	for i, d := range nodes {
		if d.Degraded() {
			t.Fatalf("node %d is still degraded after the stall", i)
		}
		fallbacks += d.Fallbacks()
		owed += d.Reconciled()
	}
	overDuring := during - int(rate*1.5)
	overTotal := before + during + after - (c + int(rate*5))
	t.Logf("stall of %v real: admitted %d before, %d during (%+d over rate x stall), %d after; %+d over burst + rate x 5s; %d fallbacks, %d tokens charged back",
		stalled.Round(time.Millisecond), before, during, overDuring, after, overTotal, fallbacks, owed)
	// The bound (README): the shares' rounding, N*ceil(C/N) - C = 2, and
	// one request per other node admitted after a node's last answer.
	if overDuring > 2+(n-1) {
		t.Fatalf("the stall admitted %d over rate x stall, above the bound %d", overDuring, 2+n-1)
	}
	// Charging back rounds up, and the calls in flight when Redis froze run
	// when it resumes, charging the shared bucket for requests that were
	// decided locally: both only ever make the total lower.
	if overTotal > n {
		t.Fatalf("%+d over burst + rate x elapsed after the stall, want at most %d", overTotal, n)
	}
	if overTotal < -c/4 {
		t.Fatalf("%+d under burst + rate x elapsed after the stall: charged back far more than was spent", overTotal)
	}
}

// TestRedisLateCallChangesNothing: calls that a frozen Redis runs once it
// resumes, after their callers gave up and decided locally, charge nothing.
// Without the deadline they would charge the shared buckets a second time
// for requests already charged locally.
func TestRedisLateCallChangesNothing(t *testing.T) {
	srv := testredis.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	r := NewRedis(c, "late:")
	ctx := context.Background()
	// Three connections handshaken, so each call below sends its script.
	if err := r.Warm(ctx, 3); err != nil {
		t.Fatal(err)
	}
	rlAllow(t, r, "tok:0", free, 1)
	scripts := func() int {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(info) {
			if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
				n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				return n
			}
		}
		return 0
	}
	before := scripts()

	srv.Stop(t)
	calls := []func(context.Context) error{
		func(ctx context.Context) error { _, err := r.Allow(ctx, "tok:1", free, 1); return err },
		func(ctx context.Context) error {
			_, _, err := r.AllowBoth(ctx, Charge{"tok:2", free, 1}, Charge{"tok:2|tpm", free, 1})
			return err
		},
		func(ctx context.Context) error { return r.Adjust(ctx, "tok:3", free, 5) },
	}
	for i, call := range calls {
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		err := call(cctx)
		cancel()
		if err == nil {
			t.Fatalf("call %d answered while Redis was stopped", i)
		}
	}
	// Frozen for longer than the deadlines' slack past the last give-up: a
	// call run within the slack still charges (see serverClock).
	time.Sleep(20 * lateSlack)
	srv.Cont(t)
	for deadline := time.Now().Add(5 * time.Second); scripts() < before+len(calls); {
		if time.Now().After(deadline) {
			t.Fatalf("Redis ran %d of the %d queued scripts", scripts()-before, len(calls))
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, k := range []string{"tok:1", "tok:2", "tok:2|tpm", "tok:3"} {
		if n, err := c.Exists(ctx, r.key(k)).Result(); err != nil || n != 0 {
			t.Fatalf("%s: exists %d, %v; a call that came too late charged it", k, n, err)
		}
	}
	// A call in time still charges.
	if d := rlAllow(t, r, "tok:1", free, 1); !d.Allowed || d.Remaining != 29 {
		t.Fatalf("after the stall: %+v", d)
	}
}
