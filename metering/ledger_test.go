package metering

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/testredis"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// eachLedger runs fn on every Ledger: in memory, in SQL (SQLite, and
// Postgres when TEST_DATABASE_URL is set) and in Redis (TEST_REDIS_URL).
// seed is what the store has billed before the ledger starts.
func eachLedger(t *testing.T, seed money.Amount, fn func(t *testing.T, l Ledger)) {
	eachLedgerSeeded(t, func(context.Context, int64, time.Time) (money.Amount, error) { return seed, nil }, fn)
}

// eachLedgerSeeded is eachLedger with the store's figure read from s.
func eachLedgerSeeded(t *testing.T, s Seed, fn func(t *testing.T, l Ledger)) {
	t.Run("memory", func(t *testing.T) { fn(t, NewMemoryLedger(s)) })
	testdb.Each(t, func(t *testing.T, db *models.DB) { fn(t, NewSQLLedger(models.NewStore(db), s)) })
	t.Run("redis", func(t *testing.T) { fn(t, NewRedisLedger(testredis.Client(t), testredis.Prefix()+"budget:", s)) })
}

var nov = time.Date(2026, 11, 14, 9, 30, 0, 0, time.UTC)

func TestLedgerReservesWithinTheLimitAndSettles(t *testing.T) {
	eachLedger(t, 3*money.Dollar, func(t *testing.T, l Ledger) {
		ctx := context.Background()
		limit := 10 * money.Dollar
		b, ok, err := l.Reserve(ctx, 1, nov, 6*money.Dollar, limit)
		if err != nil || !ok || b != (Balance{Spent: 3 * money.Dollar, Reserved: 6 * money.Dollar}) {
			t.Fatalf("first: %+v %v %v", b, ok, err)
		}
		// 3 spent + 6 reserved + 2 > 10: refused, nothing held.
		if b, ok, err := l.Reserve(ctx, 1, nov, 2*money.Dollar, limit); err != nil || ok || b.Reserved != 6*money.Dollar {
			t.Fatalf("over: %+v %v %v", b, ok, err)
		}
		// Exactly up to the limit fits.
		if _, ok, _ := l.Reserve(ctx, 1, nov, money.Dollar, limit); !ok {
			t.Fatal("exactly the limit must fit")
		}
		// Settle below the reservation: the rest is released.
		b, err = l.Settle(ctx, 1, nov, 6*money.Dollar, 4*money.Dollar+money.Picodollar)
		if err != nil || b != (Balance{Spent: 7*money.Dollar + money.Picodollar, Reserved: money.Dollar}) {
			t.Fatalf("settle: %+v %v", b, err)
		}
		// An overrun is taken as debt: spent may pass the limit.
		b, err = l.Settle(ctx, 1, nov, money.Dollar, 5*money.Dollar)
		if err != nil || b != (Balance{Spent: 12*money.Dollar + money.Picodollar}) {
			t.Fatalf("overrun: %+v %v", b, err)
		}
		if _, ok, _ := l.Reserve(ctx, 1, nov, money.Picodollar, limit); ok {
			t.Fatal("in debt, nothing fits")
		}
		// Another organization and another month are separate.
		if b, _ := l.Balance(ctx, 2, nov); b != (Balance{Spent: 3 * money.Dollar}) {
			t.Fatalf("other org: %+v", b)
		}
		if b, _ := l.Balance(ctx, 1, nov.AddDate(0, 1, 0)); b != (Balance{Spent: 3 * money.Dollar}) {
			t.Fatalf("next month starts from the store: %+v", b)
		}
		// Reset forgets: the store's figure is the start again.
		if err := l.Reset(ctx, 1, nov); err != nil {
			t.Fatal(err)
		}
		if b, _ := l.Balance(ctx, 1, nov); b != (Balance{Spent: 3 * money.Dollar}) {
			t.Fatalf("after reset: %+v", b)
		}
	})
}

// Resync brings spending up to the store's figure when the store knows
// more, never down, and keeps what requests in flight hold: a budget
// changed under load frees nothing they reserved.
func TestLedgerResyncKeepsReservationsInFlight(t *testing.T) {
	var billed atomic.Int64
	seed := func(context.Context, int64, time.Time) (money.Amount, error) { return money.Amount(billed.Load()), nil }
	eachLedgerSeeded(t, seed, func(t *testing.T, l Ledger) {
		ctx := context.Background()
		billed.Store(int64(2 * money.Dollar))
		limit := 10 * money.Dollar
		if _, ok, err := l.Reserve(ctx, 5, nov, 6*money.Dollar, limit); err != nil || !ok {
			t.Fatalf("reserve: %v %v", ok, err)
		}
		// Spending the ledger did not see (the organization had no limit
		// for a while) reached the store: resync takes it, keeps the 6.00.
		billed.Store(int64(3*money.Dollar + money.Picodollar))
		if err := l.Resync(ctx, 5, nov); err != nil {
			t.Fatal(err)
		}
		if b, _ := l.Balance(ctx, 5, nov); b != (Balance{Spent: 3*money.Dollar + money.Picodollar, Reserved: 6 * money.Dollar}) {
			t.Fatalf("after resync: %+v", b)
		}
		if _, ok, _ := l.Reserve(ctx, 5, nov, money.Dollar, limit); ok {
			t.Fatal("3.00 spent + 6.00 held + 1.00 passed a 10.00 limit after a resync")
		}
		// The store lagging behind (events not flushed yet) lowers nothing.
		if _, err := l.Settle(ctx, 5, nov, 6*money.Dollar, 5*money.Dollar); err != nil {
			t.Fatal(err)
		}
		if err := l.Resync(ctx, 5, nov); err != nil {
			t.Fatal(err)
		}
		if b, _ := l.Balance(ctx, 5, nov); b != (Balance{Spent: 8*money.Dollar + money.Picodollar}) {
			t.Fatalf("a lagging store lowered spending: %+v", b)
		}
		// A balance never used is left to be seeded.
		if err := l.Resync(ctx, 6, nov); err != nil {
			t.Fatal(err)
		}
		if b, _ := l.Balance(ctx, 6, nov); b != (Balance{Spent: 3*money.Dollar + money.Picodollar}) {
			t.Fatalf("unused balance: %+v", b)
		}
	})
}

// Many concurrent reservations never together pass the limit.
func TestLedgerReservationsAreAtomic(t *testing.T) {
	eachLedger(t, 0, func(t *testing.T, l Ledger) {
		ctx := context.Background()
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, ok, err := l.Reserve(ctx, 9, nov, money.Dollar, 5*money.Dollar)
				if err != nil {
					t.Error(err)
				}
				if ok {
					admitted.Add(1)
				}
			}()
		}
		wg.Wait()
		if admitted.Load() != 5 {
			t.Fatalf("%d reservations of 1.00 fit under 5.00", admitted.Load())
		}
	})
}

// Redis scripts do arithmetic in doubles, exact only to 2^53: the ledger
// must stay exact far beyond that (2^53 picodollars is about 9,007 USD).
func TestLedgerIsExactForLargeSums(t *testing.T) {
	big := money.Amount(1)<<53 + 1 // not representable as a double
	eachLedger(t, big, func(t *testing.T, l Ledger) {
		ctx := context.Background()
		limit := big + 2*money.Picodollar
		if b, ok, err := l.Reserve(ctx, 3, nov, 2*money.Picodollar, limit); err != nil || !ok || b.Spent != big {
			t.Fatalf("exactly to the limit: %+v %v %v", b, ok, err)
		}
		if _, ok, _ := l.Reserve(ctx, 3, nov, money.Picodollar, limit); ok {
			t.Fatal("one picodollar over the limit was admitted")
		}
		b, err := l.Settle(ctx, 3, nov, 2*money.Picodollar, 3*money.Picodollar)
		if err != nil || b != (Balance{Spent: big + 3*money.Picodollar}) {
			t.Fatalf("settle: %+v %v", b, err)
		}
	})
}
