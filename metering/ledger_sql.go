package metering

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// SQLLedger is the Ledger of a cluster without Redis: a row per
// organization and period, changed by conditional updates. It costs a
// database write per budgeted request, which is why clusters should have
// Redis.
type SQLLedger struct {
	store *models.Store
	seed  Seed
}

// NewSQLLedger keeps balances in store's budget_ledgers table.
func NewSQLLedger(store *models.Store, seed Seed) *SQLLedger {
	return &SQLLedger{store: store, seed: seed}
}

func (l *SQLLedger) seedOf(ctx context.Context, orgID int64, period time.Time) func() (money.Amount, error) {
	return func() (money.Amount, error) { return l.seed(ctx, orgID, Period(period)) }
}

// Reserve implements Ledger.
func (l *SQLLedger) Reserve(ctx context.Context, orgID int64, period time.Time, amount, limit money.Amount) (Balance, bool, error) {
	b, ok, err := l.store.LedgerReserve(ctx, orgID, Period(period), amount, limit, l.seedOf(ctx, orgID, period))
	return Balance(b), ok, err
}

// Settle implements Ledger.
func (l *SQLLedger) Settle(ctx context.Context, orgID int64, period time.Time, reserved, actual money.Amount) (Balance, error) {
	b, err := l.store.LedgerSettle(ctx, orgID, Period(period), reserved, actual, l.seedOf(ctx, orgID, period))
	return Balance(b), err
}

// Balance implements Ledger.
func (l *SQLLedger) Balance(ctx context.Context, orgID int64, period time.Time) (Balance, error) {
	b, err := l.store.LedgerRead(ctx, orgID, Period(period), l.seedOf(ctx, orgID, period))
	return Balance(b), err
}

// Resync implements Ledger.
func (l *SQLLedger) Resync(ctx context.Context, orgID int64, period time.Time) error {
	billed, err := l.seed(ctx, orgID, Period(period))
	if err != nil {
		return err
	}
	return l.store.LedgerRaiseSpent(ctx, orgID, Period(period), billed)
}

// Reset implements Ledger.
func (l *SQLLedger) Reset(ctx context.Context, orgID int64, period time.Time) error {
	return l.store.LedgerReset(ctx, orgID, period)
}
