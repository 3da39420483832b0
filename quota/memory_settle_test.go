package quota

import (
	"context"
	"errors"
	"testing"
	"time"
)

// tpmParams is a tokens-per-minute bucket: 1000 a minute, one every 60ms exactly.
var tpmParams = Params{Capacity: 1000, RefillPerSec: 1000.0 / 60}

func allowBoth(t *testing.T, m *Memory, a, b Charge) (Decision, Decision) {
	t.Helper()
	da, db, err := m.AllowBoth(context.Background(), a, b)
	if err != nil {
		t.Fatalf("AllowBoth(%+v, %+v): %v", a, b, err)
	}
	return da, db
}

func adjustBy(t *testing.T, m *Memory, key string, p Params, delta int64) {
	t.Helper()
	if err := m.Adjust(context.Background(), key, p, delta); err != nil {
		t.Fatalf("Adjust(%q, %+v, %d): %v", key, p, delta, err)
	}
}

// wantRemaining proves through Allow alone that key has exactly n whole
// tokens now: a request of n passes and leaves 0, then one more is rejected.
// It spends them.
func wantRemaining(t *testing.T, m *Memory, key string, p Params, n int64) {
	t.Helper()
	if n > 0 {
		if d := allow(t, m, key, p, n); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("%s: request of %d got %+v, want admitted leaving 0", key, n, d)
		}
	}
	if d := allow(t, m, key, p, 1); d.Allowed {
		t.Fatalf("%s: one more than %d tokens admitted: %+v", key, n, d)
	}
}

func TestAllowBothChargesBoth(t *testing.T) {
	clk := newFakeClock()
	m := NewMemory(clk.Now)
	da, db := allowBoth(t, m, Charge{"rate", free, 1}, Charge{"tpm", tpmParams, 500})
	wantA := Decision{Allowed: true, Limit: 30, Remaining: 29, ResetAfter: 2 * time.Second}
	wantB := Decision{Allowed: true, Limit: 1000, Remaining: 500, ResetAfter: 30 * time.Second}
	if da != wantA || db != wantB {
		t.Fatalf("got\n %+v\n %+v\nwant\n %+v\n %+v", da, db, wantA, wantB)
	}
	wantRemaining(t, m, "rate", free, 29)
	wantRemaining(t, m, "tpm", tpmParams, 500)
}

// TestAllowBothSecondRejects: the rate bucket takes its charge, the TPM
// bucket cannot, and the rate bucket must get back exactly what it gave.
func TestAllowBothSecondRejects(t *testing.T) {
	clk := newFakeClock()
	m := NewMemory(clk.Now)
	allow(t, m, "rate", free, 10)      // 20 left, 20s from full
	allow(t, m, "tpm", tpmParams, 900) // 100 left, 54s from full
	clk.Advance(3 * time.Second)       // rate: 21 left (1s into the next); tpmParams: 150 left

	da, db := allowBoth(t, m, Charge{"rate", free, 1}, Charge{"tpm", tpmParams, 400})
	// The rate decision describes its bucket as it was, with no
	// RetryAfter: the TPM decision carries the wait.
	wantA := Decision{Allowed: false, Limit: 30, Remaining: 21, ResetAfter: 17 * time.Second}
	wantB := Decision{Allowed: false, Limit: 1000, Remaining: 150, RetryAfter: 15 * time.Second, ResetAfter: 51 * time.Second}
	if da != wantA || db != wantB {
		t.Fatalf("got\n %+v\n %+v\nwant\n %+v\n %+v", da, db, wantA, wantB)
	}
	// Not a nanosecond lost: the partial token is still 1s from complete.
	clk.Advance(time.Second - 1)
	wantRemaining(t, m, "rate", free, 21)
	clk.Advance(1)
	wantRemaining(t, m, "rate", free, 1)
	wantRemaining(t, m, "tpm", tpmParams, 166) // 150 + 1s/60ms
}

// TestAllowBothFirstRejects: the rate bucket rejects, so the TPM bucket is
// not charged, and is reported as it stands.
func TestAllowBothFirstRejects(t *testing.T) {
	clk := newFakeClock()
	m := NewMemory(clk.Now)
	drain(t, m, "rate", free)
	allow(t, m, "tpm", tpmParams, 300) // 700 left, 18s from full

	da, db := allowBoth(t, m, Charge{"rate", free, 1}, Charge{"tpm", tpmParams, 500})
	wantA := Decision{Allowed: false, Limit: 30, RetryAfter: 2 * time.Second, ResetAfter: time.Minute}
	wantB := Decision{Allowed: false, Limit: 1000, Remaining: 700, ResetAfter: 18 * time.Second}
	if da != wantA || db != wantB {
		t.Fatalf("got\n %+v\n %+v\nwant\n %+v\n %+v", da, db, wantA, wantB)
	}
	// Both over: each decision carries its own wait.
	_, db = allowBoth(t, m, Charge{"rate", free, 1}, Charge{"tpm", tpmParams, 800})
	if db.Allowed || db.Remaining != 700 || db.RetryAfter != 6*time.Second {
		t.Fatalf("TPM bucket over too: got %+v, want rejected with 700 left and RetryAfter 6s", db)
	}
	wantRemaining(t, m, "tpm", tpmParams, 700)

	// A key seen for the first time is reported full, and is not created.
	before, _ := tableStats(m)
	_, db = allowBoth(t, m, Charge{"rate", free, 1}, Charge{"tpm-new", tpmParams, 500})
	if want := (Decision{Limit: 1000, Remaining: 1000}); db != want {
		t.Fatalf("unseen TPM key: got %+v, want %+v", db, want)
	}
	if after, _ := tableStats(m); after != before {
		t.Fatalf("%d buckets after reporting an unseen key, want %d", after, before)
	}
}

func TestAllowBothInvalid(t *testing.T) {
	clk := newFakeClock()
	m := NewMemory(clk.Now)
	ok := Charge{"rate", free, 1}
	for _, tt := range []struct {
		name string
		a, b Charge
		want error
	}{
		{"first invalid", Charge{"rate", Params{}, 1}, Charge{"tpm", tpmParams, 1}, ErrInvalidParams},
		{"second invalid", ok, Charge{"tpm", tpmParams, 0}, ErrInvalidParams},
		{"second too heavy", ok, Charge{"tpm", tpmParams, 1001}, ErrWeightExceedsCapacity},
	} {
		if _, _, err := m.AllowBoth(context.Background(), tt.a, tt.b); !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}
	wantRemaining(t, m, "rate", free, 30)
	wantRemaining(t, m, "tpm", tpmParams, 1000)
}

func TestAdjustRefundNeverExceedsCapacity(t *testing.T) {
	clk := newFakeClock()
	m := NewMemory(clk.Now)

	adjustBy(t, m, "fresh", free, -100)
	if n, _ := tableStats(m); n != 0 {
		t.Fatalf("refund to an unseen key created %d buckets, want 0", n)
	}
	wantRemaining(t, m, "fresh", free, 30)

	allow(t, m, "used", free, 5)
	adjustBy(t, m, "used", free, -10)
	wantRemaining(t, m, "used", free, 30)

	allow(t, m, "drained", free, 30)
	adjustBy(t, m, "drained", free, -10)
	wantRemaining(t, m, "drained", free, 10)
}

func TestAdjustDebt(t *testing.T) {
	clk := newFakeClock()
	m := NewMemory(clk.Now)
	drain(t, m, "k", free)        // 60s from full
	adjustBy(t, m, "k", free, 10) // 80s: 10 tokens below empty
	d := allow(t, m, "k", free, 1)
	if want := (Decision{Limit: 30, RetryAfter: 22 * time.Second, ResetAfter: 80 * time.Second}); d != want {
		t.Fatalf("in debt: got %+v, want %+v", d, want)
	}
	clk.Advance(22*time.Second - 1)
	wantRemaining(t, m, "k", free, 0)
	clk.Advance(1)
	wantRemaining(t, m, "k", free, 1)
}

// TestAdjustDebtIsCapped: however wrong an estimate, a key is never locked
// out for more than twice its burst window (2 * 60s for free).
func TestAdjustDebtIsCapped(t *testing.T) {
	for _, used := range []int64{1, 30} {
		clk := newFakeClock()
		m := NewMemory(clk.Now)
		allow(t, m, "k", free, used)
		adjustBy(t, m, "k", free, 1_000_000)
		d := allow(t, m, "k", free, 1)
		if want := (Decision{Limit: 30, RetryAfter: 62 * time.Second, ResetAfter: 120 * time.Second}); d != want {
			t.Fatalf("used %d then huge debt: got %+v, want %+v", used, d, want)
		}
		clk.Advance(62 * time.Second)
		wantRemaining(t, m, "k", free, 1) // and that one token makes it 60s from full
		clk.Advance(62 * time.Second)
		wantRemaining(t, m, "k", free, 30)
	}
}

func TestAdjustInvalid(t *testing.T) {
	m := NewMemory(newFakeClock().Now)
	if err := m.Adjust(context.Background(), "k", Params{Capacity: 30}, 5); !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("got %v, want ErrInvalidParams", err)
	}
	adjustBy(t, m, "k", free, 0)
	if n, _ := tableStats(m); n != 0 {
		t.Fatalf("zero or invalid adjustments created %d buckets, want 0", n)
	}
}

// TestTPMSettle plays the tokens-per-minute flow of a generation request:
// reserve an estimate of 500 tokens together with the request's rate token,
// then settle the difference once the actual count is known.
func TestTPMSettle(t *testing.T) {
	tests := []struct {
		name   string
		actual int64
		want   int64         // TPM tokens left right after settling
		wait   time.Duration // if want is 0: RetryAfter for one more token
	}{
		{"actual below estimate is refunded", 200, 800, 0},
		{"actual equals estimate", 500, 500, 0},
		{"nothing generated", 0, 1000, 0},
		{"actual above estimate is a debt", 800, 200, 0},
		{"debt to empty", 1000, 0, 60 * time.Millisecond},
		{"debt below empty delays", 1300, 0, 300*60*time.Millisecond + 60*time.Millisecond},
		{"debt capped at 2 windows", 5000, 0, 60*time.Second + 60*time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			m := NewMemory(clk.Now)
			const estimate = 500
			da, db := allowBoth(t, m, Charge{"tok:1", premium, 1}, Charge{"tok:1:tpm", tpmParams, estimate})
			if !da.Allowed || !db.Allowed || db.Remaining != 1000-estimate {
				t.Fatalf("reserve: got %+v, %+v, want both admitted with 500 TPM left", da, db)
			}
			adjustBy(t, m, "tok:1:tpm", tpmParams, tt.actual-estimate)
			if tt.want == 0 {
				if d := allow(t, m, "tok:1:tpm", tpmParams, 1); d.Allowed || d.RetryAfter != tt.wait {
					t.Fatalf("after settling %d: got %+v, want rejected with RetryAfter %v", tt.actual, d, tt.wait)
				}
			}
			wantRemaining(t, m, "tok:1:tpm", tpmParams, tt.want)
			wantRemaining(t, m, "tok:1", premium, 199) // settling touches only the TPM bucket
		})
	}
}

func TestAllowBothAndAdjustDoNotAllocate(t *testing.T) {
	clk := newFakeClock()
	m := NewMemory(clk.Now)
	ctx := context.Background()
	rate, tokens := Charge{"tok:1", premium, 1}, Charge{"tok:1:tpm", tpmParams, 500}
	allowBoth(t, m, rate, tokens) // create the buckets
	allocs := testing.AllocsPerRun(1000, func() {
		clk.Advance(time.Minute)
		if _, _, err := m.AllowBoth(ctx, rate, tokens); err != nil {
			t.Fatal(err)
		}
		if err := m.Adjust(ctx, tokens.Key, tokens.Params, -300); err != nil {
			t.Fatal(err)
		}
		_, _, _ = m.AllowBoth(ctx, rate, Charge{"tok:1:tpm", tpmParams, 1000}) // second rejects
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per run, want 0", allocs)
	}
}
