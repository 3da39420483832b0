package metering

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// SQLLedger is the Ledger of a cluster without Redis: a row per account and
// period, changed by conditional updates, the holds of one request in one
// transaction. It costs a database write per budgeted request, which is
// why clusters should have Redis. A prepaid balance's credits are read from
// org_balances in the statement that reserves, so a credit counts at once
// on every node.
type SQLLedger struct {
	store *models.Store
	seed  Seed
}

// NewSQLLedger keeps balances in store's budget_ledgers (organizations)
// and token_budget_ledgers (tokens) tables.
func NewSQLLedger(store *models.Store, seed Seed) *SQLLedger {
	return &SQLLedger{store: store, seed: seed}
}

func (l *SQLLedger) seedOf(ctx context.Context, period time.Time) models.LedgerSeed {
	return func(a Account) (money.Amount, error) { return l.seed(ctx, a, Period(period)) }
}

// Reserve implements Ledger.
func (l *SQLLedger) Reserve(ctx context.Context, period time.Time, amount money.Amount, holds ...Hold) ([]Balance, bool, error) {
	bs, ok, err := l.store.LedgerReserve(ctx, Period(period), amount, holds, l.seedOf(ctx, period))
	return balances(bs), ok, err
}

// Settle implements Ledger.
func (l *SQLLedger) Settle(ctx context.Context, period time.Time, actual money.Amount, rs ...Release) ([]Balance, error) {
	bs, err := l.store.LedgerSettle(ctx, Period(period), actual, rs, l.seedOf(ctx, period))
	return balances(bs), err
}

// Balance implements Ledger.
func (l *SQLLedger) Balance(ctx context.Context, a Account, period time.Time) (Balance, error) {
	b, err := l.store.LedgerRead(ctx, a, Period(period), l.seedOf(ctx, period))
	return Balance(b), err
}

// Resync implements Ledger.
func (l *SQLLedger) Resync(ctx context.Context, a Account, period time.Time) error {
	billed, err := l.seed(ctx, a, Period(period))
	if err != nil {
		return err
	}
	return l.store.LedgerRaiseSpent(ctx, a, Period(period), billed)
}

// Reset implements Ledger.
func (l *SQLLedger) Reset(ctx context.Context, a Account, period time.Time) error {
	return l.store.LedgerReset(ctx, a, period)
}

func balances(bs []models.LedgerBalance) []Balance {
	if bs == nil {
		return nil
	}
	out := make([]Balance, len(bs))
	for i, b := range bs {
		out[i] = Balance(b)
	}
	return out
}
