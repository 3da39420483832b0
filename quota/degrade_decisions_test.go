package quota

import (
	"context"
	"sync"
	"testing"
	"time"
)

// These tests pin down what Degrading takes for "Redis is down" and what a
// switch costs: each decision has a test that fails without it.

// TestDegradingFailuresInARow: a failed or slow call is one request decided
// locally, not an outage; three in a row, with no answer between them, are.
func TestDegradingFailuresInARow(t *testing.T) {
	for _, kind := range []struct {
		name string
		mode int32
	}{{"refused", sharedDown}, {"slow", sharedHung}} {
		t.Run(kind.name, func(t *testing.T) {
			clk := newFakeClock()
			shared := &switchLimiter{up: NewMemory(clk.Now)}
			var log dgLog
			d := newTestDegrading(shared, NewMemory(clk.Now), log.options(DegradingOptions{Share: 3, Timeout: 5 * time.Millisecond, Now: clk.Now}))
			p := Params{Capacity: 1000, RefillPerSec: 1}
			// x: the shared limiter fails this call; .: it answers.
			const steps = "x.xx.x.xx.xxx"
			for i, step := range steps {
				mode := int32(sharedUp)
				if step == 'x' {
					mode = kind.mode
				}
				shared.mode.Store(mode)
				if dec := rlAllow(t, d, "tok:1", p, 1); !dec.Allowed {
					t.Fatalf("step %d: rejected: %+v", i, dec)
				}
				if want := i == len(steps)-1; d.Degraded() != want {
					t.Fatalf("after %q: degraded %v, want %v", steps[:i+1], d.Degraded(), want)
				}
			}
			dgExpect(t, d, &log, "degraded", logDown)
			if got := d.Failures(); got != 9 {
				t.Fatalf("Failures() = %d, want 9", got)
			}
			if got := d.Fallbacks(); got != 9 {
				t.Fatalf("Fallbacks() = %d, want 9: each failed call's request decided locally", got)
			}
			if got := d.Outages(); got != 1 {
				t.Fatalf("Outages() = %d, want 1", got)
			}
		})
	}
}

// TestDegradingChargesSingleLocalDecisions: what a request decided locally
// (its shared call failed, the breaker stayed closed) spent is charged to
// the shared bucket at the next shared answer, settlements included.
func TestDegradingChargesSingleLocalDecisions(t *testing.T) {
	clk := newFakeClock()
	shared := &switchLimiter{up: NewMemory(clk.Now)}
	d := newTestDegrading(shared, NewMemory(clk.Now), DegradingOptions{Share: 3, Now: clk.Now})
	ctx := context.Background()
	for range 5 {
		rlAllow(t, d, "tok:1", free, 1)
	}
	shared.mode.Store(sharedDown)
	if dec := rlAllow(t, d, "tok:1", free, 2); !dec.Allowed {
		t.Fatalf("local decision: %+v, want admitted", dec)
	}
	if err := d.Adjust(ctx, "tok:1", free, -1); err != nil { // settled at 1, not 2
		t.Fatal(err)
	}
	shared.mode.Store(sharedUp)
	rlAllow(t, d, "tok:1", free, 1)
	if got := d.Reconciled(); got != 1 {
		t.Fatalf("Reconciled() = %d, want 1 (2 admitted locally, 1 refunded locally)", got)
	}
	if n := rlDrain(t, d, "tok:1", free); n != 30-5-1-1 {
		t.Fatalf("admitted %d more, want 23: the shared bucket saw all 7 spent", n)
	}
	if d.Degraded() || d.owed.owedKeys() != 0 {
		t.Fatalf("degraded %v, %d keys still owed", d.Degraded(), d.owed.owedKeys())
	}
}

// TestDegradingAbandonsWaitingCallsWhenItOpens: once the breaker opens, the
// requests still waiting for the shared limiter are decided locally at once
// rather than at the end of their timeouts, and their calls are not counted
// as failures.
func TestDegradingAbandonsWaitingCallsWhenItOpens(t *testing.T) {
	clk := newFakeClock()
	shared := &switchLimiter{up: NewMemory(clk.Now)}
	d := newTestDegrading(shared, NewMemory(clk.Now), DegradingOptions{Share: 3, Timeout: time.Minute, Now: clk.Now})
	shared.mode.Store(sharedHung)
	const waiting = 5
	var wg sync.WaitGroup
	done := make(chan time.Duration, waiting)
	for range waiting {
		wg.Go(func() {
			start := time.Now()
			if dec, err := d.Allow(context.Background(), "tok:1", free, 1); err != nil || !dec.Allowed {
				t.Errorf("abandoned call: %+v, %v; want admitted locally", dec, err)
			}
			done <- time.Since(start)
		})
	}
	for shared.calls.Load() < waiting {
		time.Sleep(time.Millisecond) // until every call is inside the shared limiter
	}
	shared.mode.Store(sharedDown)
	for range 3 {
		rlAllow(t, d, "tok:2", free, 1)
	}
	wg.Wait()
	close(done)
	for took := range done {
		if took > 30*time.Second {
			t.Fatalf("a waiting call took %v, its whole timeout", took)
		}
	}
	if !d.Degraded() || d.Failures() != 3 || d.Fallbacks() != waiting+3 {
		t.Fatalf("degraded %v, Failures() = %d, Fallbacks() = %d; want true, 3, %d", d.Degraded(), d.Failures(), d.Fallbacks(), waiting+3)
	}
}

// TestDegradingLocalSharesStartFromTheSharedState: switching to local limits
// hands out no fresh burst. A bucket the shared limiter last saw empty is
// empty at every node's share, and one it saw half spent is half spent.
func TestDegradingLocalSharesStartFromTheSharedState(t *testing.T) {
	clk := newFakeClock()
	shared := &switchLimiter{up: NewMemory(clk.Now)}
	d := newTestDegrading(shared, NewMemory(clk.Now), DegradingOptions{Share: 3, FailuresToDegrade: 1, Now: clk.Now})
	ctx := context.Background()
	if n := rlDrain(t, d, "tok:empty", free); n != 30 {
		t.Fatalf("shared: admitted %d, want 30", n)
	}
	for range 15 {
		rlAllow(t, d, "tok:half", free, 1)
	}
	tpm := Params{Capacity: 150, RefillPerSec: 150.0 / 60}
	if _, _, err := d.AllowBoth(ctx, Charge{"tok:pair", free, 1}, Charge{"tok:pair|tpm", tpm, 60}); err != nil {
		t.Fatal(err)
	}

	shared.mode.Store(sharedDown)
	if n := rlDrain(t, d, "tok:empty", free); n != 0 {
		t.Fatalf("degraded: an empty shared bucket gave %d at this node's share, want 0", n)
	}
	if !d.Degraded() {
		t.Fatal("not degraded")
	}
	if n := rlDrain(t, d, "tok:half", free); n != 5 {
		t.Fatalf("degraded: a half-spent shared bucket gave %d, want 5 (half of the share of 10)", n)
	}
	// 1 of 30 and 60 of 150 spent: shares of 10 and 50 hold 9 and 30.
	if da, db, err := d.AllowBoth(ctx, Charge{"tok:pair", free, 1}, Charge{"tok:pair|tpm", tpm, 1}); err != nil || da.Remaining != 8 || db.Remaining != 29 {
		t.Fatalf("degraded pair: %+v %+v %v, want 8 and 29 left", da, db, err)
	}
	// The share refills at a third of the rate: one token in 6s.
	clk.Advance(6 * time.Second)
	if n := rlDrain(t, d, "tok:empty", free); n != 1 {
		t.Fatalf("degraded, 6s later: admitted %d, want 1", n)
	}
}

// TestDegradingProbesTogether: nodes that switched at different moments
// probe at the same instants, so they come back to the shared limiter
// together.
func TestDegradingProbesTogether(t *testing.T) {
	clk := newFakeClock()
	shared := &switchLimiter{up: NewMemory(clk.Now)}
	shared.mode.Store(sharedDown)
	a := newTestDegrading(shared, NewMemory(clk.Now), DegradingOptions{Share: 2, FailuresToDegrade: 1, ProbeInterval: time.Second, Now: clk.Now})
	b := newTestDegrading(shared, NewMemory(clk.Now), DegradingOptions{Share: 2, FailuresToDegrade: 1, ProbeInterval: time.Second, Now: clk.Now})
	clk.Advance(200 * time.Millisecond)
	rlAllow(t, a, "tok:1", free, 1)
	clk.Advance(700 * time.Millisecond)
	rlAllow(t, b, "tok:1", free, 1)
	if !a.Degraded() || !b.Degraded() {
		t.Fatal("not degraded")
	}
	shared.mode.Store(sharedUp)
	clk.Advance(99 * time.Millisecond) // 999ms after the whole second
	rlAllow(t, a, "tok:1", free, 1)
	rlAllow(t, b, "tok:1", free, 1)
	if !a.Degraded() || !b.Degraded() {
		t.Fatal("a node probed before the whole second")
	}
	clk.Advance(time.Millisecond)
	rlAllow(t, a, "tok:1", free, 1)
	rlAllow(t, b, "tok:1", free, 1)
	if a.Degraded() || b.Degraded() {
		t.Fatalf("at the whole second: a degraded %v, b degraded %v; want both back", a.Degraded(), b.Degraded())
	}
}

// A degraded node probes four times a second by default: go-redis takes up
// to a second to dial again after a restart, and the node must be back on
// the shared bucket within 2 s of it.
func TestDegradingProbesFourTimesASecondByDefault(t *testing.T) {
	clk := newFakeClock()
	shared := &switchLimiter{up: NewMemory(clk.Now)}
	shared.mode.Store(sharedDown)
	d := newTestDegrading(shared, NewMemory(clk.Now), DegradingOptions{Share: 2, FailuresToDegrade: 1, Now: clk.Now})
	rlAllow(t, d, "tok:1", free, 1)
	if !d.Degraded() {
		t.Fatal("not degraded")
	}
	shared.mode.Store(sharedUp)
	clk.Advance(250 * time.Millisecond)
	rlAllow(t, d, "tok:1", free, 1)
	if d.Degraded() {
		t.Fatal("still degraded a quarter second after the shared limiter came back; want probed and back")
	}
}

// TestDegradingUnavailable: a node that cannot reach the shared limiter
// before it serves starts on local limits; its first request does not wait.
func TestDegradingUnavailable(t *testing.T) {
	clk := newFakeClock()
	shared := &switchLimiter{up: NewMemory(clk.Now)}
	shared.mode.Store(sharedHung)
	var log dgLog
	d := newTestDegrading(shared, nil, log.options(DegradingOptions{Share: 3, Timeout: time.Minute, Now: clk.Now}))
	d.Unavailable(errSharedDown)
	d.Unavailable(errSharedDown)
	if dec := rlAllow(t, d, "tok:1", free, 1); !dec.Allowed || dec.Limit != 10 {
		t.Fatalf("got %+v, want admitted from the local share", dec)
	}
	if shared.calls.Load() != 0 {
		t.Fatal("the first request asked the shared limiter")
	}
	dgExpect(t, d, &log, "degraded", logDown)
}

// TestDegradingKeepsWhatItCouldNotCharge: a reconciliation that fails part
// way leaves the rest owed, and the next shared answer charges it.
func TestDegradingKeepsWhatItCouldNotCharge(t *testing.T) {
	clk := newFakeClock()
	shared := &switchLimiter{up: NewMemory(clk.Now)}
	d := newTestDegrading(shared, NewMemory(clk.Now), DegradingOptions{Share: 3, FailuresToDegrade: 1, Now: clk.Now})
	// The reconciliation the probe starts runs while Redis is down again.
	d.spawn = func(f func()) {
		shared.mode.Store(sharedDown)
		f()
		shared.mode.Store(sharedUp)
	}
	shared.mode.Store(sharedDown)
	if n := rlDrain(t, d, "tok:1", free); n != 10 {
		t.Fatalf("degraded: admitted %d, want 10", n)
	}
	shared.mode.Store(sharedUp)
	clk.Advance(time.Second)
	rlAllow(t, d, "tok:2", free, 1) // the probe
	if d.Degraded() || d.Reconciled() != 0 || d.owed.owedKeys() != 1 {
		t.Fatalf("degraded %v, Reconciled() = %d, %d keys owed; want back, 0, 1", d.Degraded(), d.Reconciled(), d.owed.owedKeys())
	}
	d.spawn = func(f func()) { f() }
	rlAllow(t, d, "tok:2", free, 1)
	// 10 admitted, less the 1/6 token the share refilled in the second.
	if got := d.Reconciled(); got != 10 {
		t.Fatalf("Reconciled() = %d, want 10", got)
	}
}

// TestDegradingOutageOverAdmission runs three nodes on one shared limiter
// through an outage, one request a millisecond round robin (1000/s offered
// to a bucket of 100 at 100/s), on an injected clock, and measures what the
// outage lets through beyond burst + rate x elapsed. With C the capacity and
// N the nodes, the README's bound is N*ceil(C/N) - C (the shares' rounding)
// plus what the other nodes admitted after a node's last shared answer (one
// request each here), and once every node is back and has charged its local
// spending the total returns within N tokens (reconciliation rounds up).
func TestDegradingOutageOverAdmission(t *testing.T) {
	const n, c, rate = 3, 100, 100.0
	p := Params{Capacity: c, RefillPerSec: rate}
	clk := newFakeClock()
	shared := &switchLimiter{up: NewMemory(clk.Now)}
	var nodes [n]*Degrading
	for i := range nodes {
		nodes[i] = newTestDegrading(shared, NewMemory(clk.Now), DegradingOptions{Share: n, Now: clk.Now})
	}
	next := 0
	run := func(d time.Duration) (admitted int) {
		for end := clk.Now().Add(d); clk.Now().Before(end); clk.Advance(time.Millisecond) {
			if rlAllow(t, nodes[next%n], "tok:1", p, 1).Allowed {
				admitted++
			}
			next++
		}
		return admitted
	}
	before := run(2 * time.Second)
	shared.mode.Store(sharedDown)
	during := run(2 * time.Second)
	shared.mode.Store(sharedUp)
	after := run(3 * time.Second)
	for i, d := range nodes {
		if d.Degraded() || d.Fallbacks() == 0 {
			t.Fatalf("node %d: degraded %v after the outage, %d fallbacks", i, d.Degraded(), d.Fallbacks())
		}
	}
	roundUp := n*((c+n-1)/n) - c
	stale := n - 1
	overDuring := during - int(rate*2)
	overTotal := before + during + after - (c + int(rate*7))
	t.Logf("admitted %d before, %d during (%+d over rate x outage), %d after; %+d over burst + rate x 7s",
		before, during, overDuring, after, overTotal)
	// The token that refills at the end of a window is taken in the next.
	if want := c + int(rate*2); before < want-1 || before > want {
		t.Fatalf("before the outage: admitted %d, want %d", before, want)
	}
	if overDuring > roundUp+stale {
		t.Fatalf("the outage admitted %d over rate x outage, above the bound %d", overDuring, roundUp+stale)
	}
	if overTotal > n || overTotal < -2*n {
		t.Fatalf("%+d over burst + rate x elapsed after the outage, want within %d", overTotal, n)
	}
}
