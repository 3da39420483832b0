package metering

import (
	"context"
	"errors"
	"io"
	"log/slog"
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
	eachLedgerSeeded(t, func(context.Context, Account, time.Time) (money.Amount, error) { return seed, nil }, fn)
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
		b, ok, err := reserveOrg(ctx, l, 1, nov, 6*money.Dollar, limit)
		if err != nil || !ok || b != (Balance{Spent: 3 * money.Dollar, Reserved: 6 * money.Dollar}) {
			t.Fatalf("first: %+v %v %v", b, ok, err)
		}
		// 3 spent + 6 reserved + 2 > 10: refused, nothing held.
		if b, ok, err := reserveOrg(ctx, l, 1, nov, 2*money.Dollar, limit); err != nil || ok || b.Reserved != 6*money.Dollar {
			t.Fatalf("over: %+v %v %v", b, ok, err)
		}
		// Exactly up to the limit fits.
		if _, ok, _ := reserveOrg(ctx, l, 1, nov, money.Dollar, limit); !ok {
			t.Fatal("exactly the limit must fit")
		}
		// Settle below the reservation: the rest is released.
		b, err = settleOrg(ctx, l, 1, nov, 6*money.Dollar, 4*money.Dollar+money.Picodollar)
		if err != nil || b != (Balance{Spent: 7*money.Dollar + money.Picodollar, Reserved: money.Dollar}) {
			t.Fatalf("settle: %+v %v", b, err)
		}
		// An overrun is taken as debt: spent may pass the limit.
		b, err = settleOrg(ctx, l, 1, nov, money.Dollar, 5*money.Dollar)
		if err != nil || b != (Balance{Spent: 12*money.Dollar + money.Picodollar}) {
			t.Fatalf("overrun: %+v %v", b, err)
		}
		if _, ok, _ := reserveOrg(ctx, l, 1, nov, money.Picodollar, limit); ok {
			t.Fatal("in debt, nothing fits")
		}
		// Another organization and another month are separate.
		if b, _ := l.Balance(ctx, OrgAccount(2), nov); b != (Balance{Spent: 3 * money.Dollar}) {
			t.Fatalf("other org: %+v", b)
		}
		if b, _ := l.Balance(ctx, OrgAccount(1), nov.AddDate(0, 1, 0)); b != (Balance{Spent: 3 * money.Dollar}) {
			t.Fatalf("next month starts from the store: %+v", b)
		}
		// Reset forgets: the store's figure is the start again.
		if err := l.Reset(ctx, OrgAccount(1), nov); err != nil {
			t.Fatal(err)
		}
		if b, _ := l.Balance(ctx, OrgAccount(1), nov); b != (Balance{Spent: 3 * money.Dollar}) {
			t.Fatalf("after reset: %+v", b)
		}
	})
}

// Resync brings spending up to the store's figure when the store knows
// more, never down, and keeps what requests in flight hold: a budget
// changed under load frees nothing they reserved.
func TestLedgerResyncKeepsReservationsInFlight(t *testing.T) {
	var billed atomic.Int64
	seed := func(context.Context, Account, time.Time) (money.Amount, error) {
		return money.Amount(billed.Load()), nil
	}
	eachLedgerSeeded(t, seed, func(t *testing.T, l Ledger) {
		ctx := context.Background()
		billed.Store(int64(2 * money.Dollar))
		limit := 10 * money.Dollar
		if _, ok, err := reserveOrg(ctx, l, 5, nov, 6*money.Dollar, limit); err != nil || !ok {
			t.Fatalf("reserve: %v %v", ok, err)
		}
		// Spending the ledger did not see (the organization had no limit
		// for a while) reached the store: resync takes it, keeps the 6.00.
		billed.Store(int64(3*money.Dollar + money.Picodollar))
		if err := l.Resync(ctx, OrgAccount(5), nov); err != nil {
			t.Fatal(err)
		}
		if b, _ := l.Balance(ctx, OrgAccount(5), nov); b != (Balance{Spent: 3*money.Dollar + money.Picodollar, Reserved: 6 * money.Dollar}) {
			t.Fatalf("after resync: %+v", b)
		}
		if _, ok, _ := reserveOrg(ctx, l, 5, nov, money.Dollar, limit); ok {
			t.Fatal("3.00 spent + 6.00 held + 1.00 passed a 10.00 limit after a resync")
		}
		// The store lagging behind (events not flushed yet) lowers nothing.
		if _, err := settleOrg(ctx, l, 5, nov, 6*money.Dollar, 5*money.Dollar); err != nil {
			t.Fatal(err)
		}
		if err := l.Resync(ctx, OrgAccount(5), nov); err != nil {
			t.Fatal(err)
		}
		if b, _ := l.Balance(ctx, OrgAccount(5), nov); b != (Balance{Spent: 8*money.Dollar + money.Picodollar}) {
			t.Fatalf("a lagging store lowered spending: %+v", b)
		}
		// A balance never used is left to be seeded.
		if err := l.Resync(ctx, OrgAccount(6), nov); err != nil {
			t.Fatal(err)
		}
		if b, _ := l.Balance(ctx, OrgAccount(6), nov); b != (Balance{Spent: 3*money.Dollar + money.Picodollar}) {
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
				_, ok, err := reserveOrg(ctx, l, 9, nov, money.Dollar, 5*money.Dollar)
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
		if b, ok, err := reserveOrg(ctx, l, 3, nov, 2*money.Picodollar, limit); err != nil || !ok || b.Spent != big {
			t.Fatalf("exactly to the limit: %+v %v %v", b, ok, err)
		}
		if _, ok, _ := reserveOrg(ctx, l, 3, nov, money.Picodollar, limit); ok {
			t.Fatal("one picodollar over the limit was admitted")
		}
		b, err := settleOrg(ctx, l, 3, nov, 2*money.Picodollar, 3*money.Picodollar)
		if err != nil || b != (Balance{Spent: big + 3*money.Picodollar}) {
			t.Fatalf("settle: %+v %v", b, err)
		}
	})
}

// reserveOrg reserves amount on an organization's balance alone.
func reserveOrg(ctx context.Context, l Ledger, org int64, period time.Time, amount, limit money.Amount) (Balance, bool, error) {
	bs, ok, err := l.Reserve(ctx, period, amount, Hold{Account: OrgAccount(org), Limit: limit})
	if err != nil {
		return Balance{}, false, err
	}
	return bs[0], ok, nil
}

// settleOrg settles a reservation on an organization's balance alone.
func settleOrg(ctx context.Context, l Ledger, org int64, period time.Time, reserved, actual money.Amount) (Balance, error) {
	bs, err := l.Settle(ctx, period, actual, Release{Account: OrgAccount(org), Reserved: reserved})
	if err != nil {
		return Balance{}, err
	}
	return bs[0], nil
}

// A request under its organization's limit and its token's reserves on
// both or on neither: the one that refuses is named by Short, and the
// other keeps nothing of the refused request. Each balance starts from
// what the store billed its own account.
func TestLedgerReservesOnEveryLimitOrNone(t *testing.T) {
	seed := func(_ context.Context, a Account, _ time.Time) (money.Amount, error) {
		if a.TokenID != 0 {
			return money.Amount(a.TokenID) * money.Dollar, nil // token 1 has spent 1.00, token 2 2.00
		}
		return 3 * money.Dollar, nil
	}
	eachLedgerSeeded(t, seed, func(t *testing.T, l Ledger) {
		ctx := context.Background()
		org, tok := OrgAccount(7), TokenAccount(7, 1)
		holds := []Hold{{Account: org, Limit: 10 * money.Dollar}, {Account: tok, Limit: 4 * money.Dollar}}
		bs, ok, err := l.Reserve(ctx, nov, 2*money.Dollar, holds...)
		if err != nil || !ok || len(bs) != 2 || bs[0] != (Balance{Spent: 3 * money.Dollar, Reserved: 2 * money.Dollar}) ||
			bs[1] != (Balance{Spent: money.Dollar, Reserved: 2 * money.Dollar}) {
			t.Fatalf("first: %+v %v %v", bs, ok, err)
		}
		// The token's 1.00 spent + 2.00 held + 2.00 passes its 4.00: refused,
		// and the organization's balance holds nothing of it.
		bs, ok, err = l.Reserve(ctx, nov, 2*money.Dollar, holds...)
		if err != nil || ok || Short(bs, holds, 2*money.Dollar) != 1 {
			t.Fatalf("over the token's limit: %+v %v %v (short %d)", bs, ok, err, Short(bs, holds, 2*money.Dollar))
		}
		if b, _ := l.Balance(ctx, org, nov); b != (Balance{Spent: 3 * money.Dollar, Reserved: 2 * money.Dollar}) {
			t.Fatalf("the organization kept a refused reservation: %+v", b)
		}
		// Another token of the organization has a balance of its own.
		other := []Hold{{Account: org, Limit: 10 * money.Dollar}, {Account: TokenAccount(7, 2), Limit: 100 * money.Dollar}}
		if _, ok, err := l.Reserve(ctx, nov, 5*money.Dollar, other...); err != nil || !ok {
			t.Fatalf("another token: %v %v", ok, err)
		}
		// Now the organization refuses (3 + 7 + 1 > 10) and the token,
		// which had room, keeps nothing.
		bs, ok, err = l.Reserve(ctx, nov, money.Dollar, holds...)
		if err != nil || ok || Short(bs, holds, money.Dollar) != 0 {
			t.Fatalf("over the organization's limit: %+v %v %v", bs, ok, err)
		}
		if b, _ := l.Balance(ctx, tok, nov); b != (Balance{Spent: money.Dollar, Reserved: 2 * money.Dollar}) {
			t.Fatalf("the token kept a refused reservation: %+v", b)
		}
		// One settlement moves both: the organization's balance released
		// what it held, the token's too; both spent the real cost.
		bs, err = l.Settle(ctx, nov, money.Dollar+money.Picodollar,
			Release{Account: org, Reserved: 2 * money.Dollar}, Release{Account: tok, Reserved: 2 * money.Dollar})
		if err != nil || len(bs) != 2 || bs[0] != (Balance{Spent: 4*money.Dollar + money.Picodollar, Reserved: 5 * money.Dollar}) ||
			bs[1] != (Balance{Spent: 2*money.Dollar + money.Picodollar}) {
			t.Fatalf("settle: %+v %v", bs, err)
		}
		// A token's balance alone (its organization has no limit) works
		// the same, and resets to its own seed.
		if _, ok, err := l.Reserve(ctx, nov, money.Dollar, Hold{Account: TokenAccount(7, 2), Limit: 8 * money.Dollar}); err != nil || !ok {
			t.Fatalf("a token alone: %v %v", ok, err)
		}
		if err := l.Reset(ctx, TokenAccount(7, 2), nov); err != nil {
			t.Fatal(err)
		}
		if b, _ := l.Balance(ctx, TokenAccount(7, 2), nov); b != (Balance{Spent: 2 * money.Dollar}) {
			t.Fatalf("a token's balance after a reset: %+v", b)
		}
	})
}

// Concurrent requests of two tokens under one organization's limit never
// pass any of the limits together, and a token's refusals leave nothing
// held on the organization's balance: what each balance holds is exactly
// what was admitted on it.
func TestLedgerHoldsOnBothAreAtomic(t *testing.T) {
	eachLedger(t, 0, func(t *testing.T, l Ledger) {
		ctx := context.Background()
		org := OrgAccount(9)
		a, b := TokenAccount(9, 1), TokenAccount(9, 2)
		var admittedA, admittedB atomic.Int64
		var wg sync.WaitGroup
		for i := range 60 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tok, limit, n := a, 3*money.Dollar, &admittedA
				if i%2 == 1 {
					tok, limit, n = b, 100*money.Dollar, &admittedB
				}
				_, ok, err := l.Reserve(ctx, nov, money.Dollar, Hold{Account: org, Limit: 8 * money.Dollar}, Hold{Account: tok, Limit: limit})
				if err != nil {
					t.Error(err)
				}
				if ok {
					n.Add(1)
				}
			}()
		}
		wg.Wait()
		if admittedA.Load() > 3 || admittedA.Load()+admittedB.Load() != 8 {
			t.Fatalf("admitted %d on token A (limit 3) and %d on B, under the organization's 8", admittedA.Load(), admittedB.Load())
		}
		for acc, want := range map[Account]int64{org: 8, a: admittedA.Load(), b: admittedB.Load()} {
			if got, _ := l.Balance(ctx, acc, nov); got.Reserved != money.Amount(want)*money.Dollar {
				t.Errorf("%+v holds %s, want %d.00 (what was admitted on it)", acc, got.Reserved, want)
			}
		}
	})
}

// downLedger is a shared ledger that does not answer.
type downLedger struct{ Ledger }

var errLedgerDown = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

func (downLedger) Reserve(context.Context, time.Time, money.Amount, ...Hold) ([]Balance, bool, error) {
	return nil, false, errLedgerDown
}

func (downLedger) Settle(context.Context, time.Time, money.Amount, ...Release) ([]Balance, error) {
	return nil, errLedgerDown
}

func (downLedger) Balance(context.Context, Account, time.Time) (Balance, error) {
	return Balance{}, errLedgerDown
}

// While the shared ledger is down, each node reserves within its share of
// every limit of a request: its organization's and its token's.
func TestFallbackLedgerSharesEveryLimit(t *testing.T) {
	ctx := context.Background()
	seed := func(context.Context, Account, time.Time) (money.Amount, error) { return 0, nil }
	l := NewFallbackLedger(downLedger{}, seed, 2, slog.New(slog.NewTextHandler(io.Discard, nil)))
	holds := []Hold{{Account: OrgAccount(1), Limit: 10 * money.Dollar}, {Account: TokenAccount(1, 5), Limit: 4 * money.Dollar}}
	admitted := 0
	for range 5 {
		if _, ok, err := l.Reserve(ctx, nov, money.Dollar, holds...); err != nil {
			t.Fatal(err)
		} else if ok {
			admitted++
		}
	}
	if admitted != 2 || !l.Degraded() {
		t.Fatalf("admitted %d (degraded %v), want 2: half of the token's 4.00", admitted, l.Degraded())
	}
	if b, _ := l.local.Balance(ctx, OrgAccount(1), nov); b.Reserved != 2*money.Dollar {
		t.Fatalf("the organization's local balance holds %s, want 2.00: the token's refusals held nothing on it", b.Reserved)
	}
}

// The share follows the nodes last seen, never below the expected count:
// expecting 1 node but having seen 4, a node reserves a quarter of the
// token's 4.00 while the shared ledger is down.
func TestFallbackLedgerShareFollowsTheNodesSeen(t *testing.T) {
	ctx := context.Background()
	seed := func(context.Context, Account, time.Time) (money.Amount, error) { return 0, nil }
	for _, tt := range []struct{ expected, seen, want int }{{1, 4, 1}, {1, 0, 4}, {2, 1, 2}} {
		l := NewFallbackLedger(downLedger{}, seed, tt.expected, slog.New(slog.NewTextHandler(io.Discard, nil)))
		l.ObserveNodes(tt.seen)
		admitted := 0
		for range 6 {
			if _, ok, err := l.Reserve(ctx, nov, money.Dollar, Hold{Account: TokenAccount(1, 5), Limit: 4 * money.Dollar}); err != nil {
				t.Fatal(err)
			} else if ok {
				admitted++
			}
		}
		if admitted != tt.want {
			t.Errorf("%d expected, %d seen: admitted %d of the token's 4.00, want %d", tt.expected, tt.seen, admitted, tt.want)
		}
	}
}
