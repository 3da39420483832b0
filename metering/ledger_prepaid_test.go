package metering

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/testredis"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// micro is a microdollar.
const micro = money.Dollar / 1_000_000

// prepaidNodes runs fn on two nodes' ledgers that share one store: two
// SQL ledgers on one database (SQLite, and Postgres with
// TEST_DATABASE_URL), two Redis ledgers on one Redis (TEST_REDIS_URL),
// and, for a single node, one memory ledger twice. orgID has a balance of
// credit in store.
func prepaidNodes(t *testing.T, credit money.Amount, fn func(t *testing.T, nodes [2]Ledger, store *models.Store, orgID int64)) {
	setUp := func(t *testing.T, db *models.DB) (*models.Store, int64) {
		store := models.NewStore(db)
		o, _, err := store.CreateOrganizationWithOwner(context.Background(), "Prepaid", "free", "owner@example.com", "x", models.RoleOwner)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := store.CreditBalance(context.Background(), o.ID, credit, models.BalanceTopUp, "start", ""); err != nil || !ok {
			t.Fatalf("credit: %v %v", ok, err)
		}
		return store, o.ID
	}
	t.Run("memory", func(t *testing.T) {
		store, org := setUp(t, testdb.SQLite(t))
		l := NewMemoryLedger(StoreSeed(store), WithFunds(StoreFunds(store)))
		fn(t, [2]Ledger{l, l}, store, org)
	})
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		store, org := setUp(t, db)
		fn(t, [2]Ledger{NewSQLLedger(store, StoreSeed(store)), NewSQLLedger(store, StoreSeed(store))}, store, org)
	})
	t.Run("redis", func(t *testing.T) {
		store, org := setUp(t, testdb.SQLite(t))
		client, prefix := testredis.Client(t), testredis.Prefix()
		fn(t, [2]Ledger{NewRedisLedger(client, prefix, StoreSeed(store), WithFunds(StoreFunds(store))),
			NewRedisLedger(client, prefix, StoreSeed(store), WithFunds(StoreFunds(store)))}, store, org)
	})
}

// With a balance worth exactly one request, twenty reservations at once
// across two nodes admit exactly one; settling it below its reservation
// leaves the difference, exactly.
func TestPrepaidBalanceAdmitsOneOfTwentyAcrossTwoNodes(t *testing.T) {
	const worst = 209 * micro
	prepaidNodes(t, worst, func(t *testing.T, nodes [2]Ledger, _ *models.Store, org int64) {
		ctx := context.Background()
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				_, ok, err := nodes[i%2].Reserve(ctx, nov, worst, Hold{Account: PrepaidAccount(org)})
				if err != nil {
					t.Error(err)
				}
				if ok {
					admitted.Add(1)
				}
			})
		}
		wg.Wait()
		if n := admitted.Load(); n != 1 {
			t.Fatalf("%d of 20 admitted with a balance worth one", n)
		}
		bs, err := nodes[1].Settle(ctx, nov, 150*micro+money.Picodollar, Release{Account: PrepaidAccount(org), Reserved: worst})
		if err != nil {
			t.Fatal(err)
		}
		if left := bs[0].Left(0); left != 59*micro-money.Picodollar || bs[0].Reserved != 0 {
			t.Fatalf("after settling: left %s, %+v", left, bs[0])
		}
		// Nothing more fits than is left, exactly.
		if _, ok, _ := nodes[0].Reserve(ctx, nov, 59*micro, Hold{Account: PrepaidAccount(org)}); ok {
			t.Fatal("a reservation one picodollar above the balance fitted")
		}
		if _, ok, _ := nodes[0].Reserve(ctx, nov, 59*micro-money.Picodollar, Hold{Account: PrepaidAccount(org)}); !ok {
			t.Fatal("a reservation of exactly the balance did not fit")
		}
	})
}

// A credit made in the store reaches every node's ledger with Resync (what
// the billing service does after each credit), and taking money away by
// hand lowers what fits; a balance never reserved is seeded with both.
func TestPrepaidCreditsReachTheLedgerAfterResync(t *testing.T) {
	prepaidNodes(t, money.Dollar, func(t *testing.T, nodes [2]Ledger, store *models.Store, org int64) {
		ctx := context.Background()
		acct := PrepaidAccount(org)
		// Raised before it was ever seeded: the seed keeps it.
		if ok, err := store.CreditBalance(ctx, org, money.Dollar, models.BalanceTopUp, "second", ""); err != nil || !ok {
			t.Fatal(ok, err)
		}
		if err := nodes[0].Resync(ctx, acct, nov); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := nodes[1].Reserve(ctx, nov, 2*money.Dollar, Hold{Account: acct}); err != nil || !ok {
			t.Fatalf("2.00 credited, 2.00 did not fit: %v %v", ok, err)
		}
		if _, err := nodes[1].Settle(ctx, nov, 2*money.Dollar, Release{Account: acct, Reserved: 2 * money.Dollar}); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := nodes[0].Reserve(ctx, nov, money.Picodollar, Hold{Account: acct}); ok {
			t.Fatal("a spent balance took a reservation")
		}
		// A top-up on one node is there on the other after Resync.
		if ok, err := store.CreditBalance(ctx, org, 3*money.Dollar, models.BalanceTopUp, "third", ""); err != nil || !ok {
			t.Fatal(ok, err)
		}
		if err := nodes[0].Resync(ctx, acct, nov); err != nil {
			t.Fatal(err)
		}
		b, err := nodes[1].Balance(ctx, acct, nov)
		if err != nil || b.Left(0) != 3*money.Dollar || b.Credited != 5*money.Dollar || b.Spent != 2*money.Dollar {
			t.Fatalf("after a top-up: %+v %v", b, err)
		}
		// Resync twice changes nothing: raises, not additions.
		_ = nodes[1].Resync(ctx, acct, nov)
		if b, _ := nodes[0].Balance(ctx, acct, nov); b.Left(0) != 3*money.Dollar {
			t.Fatalf("a second resync counted the credit again: %+v", b)
		}
		// Money taken away by hand (withdrawn) lowers what fits.
		if _, err := store.AdjustBalance(ctx, models.User{}, org, -money.Dollar, "goodwill reversed"); err != nil {
			t.Fatal(err)
		}
		if err := nodes[1].Resync(ctx, acct, nov); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := nodes[0].Reserve(ctx, nov, 2*money.Dollar+money.Picodollar, Hold{Account: acct}); ok {
			t.Fatal("a withdrawal did not lower what fits")
		}
		if b, _ := nodes[0].Balance(ctx, acct, nov); b.Left(0) != 2*money.Dollar || b.Withdrawn != money.Dollar {
			t.Fatalf("after a withdrawal: %+v", b)
		}
	})
}
