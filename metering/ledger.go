package metering

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// Balance is what an organization has spent in a billing period and what
// requests in flight hold reserved.
type Balance struct {
	Spent    money.Amount
	Reserved money.Amount
}

// Ledger keeps each organization's spending per billing period (a calendar
// month in UTC) for budgets: a request reserves its worst case before it
// runs, and settles to its real cost after. Reserve is one atomic
// conditional step (a Redis script, a conditional UPDATE, a mutex), never a
// check followed by an act, so concurrent requests on any number of nodes
// cannot together pass the limit; only an overrun (a provider ignoring
// max_tokens) can, and it is taken as debt. Spending starts from what the
// store has already billed for the period, read once per organization and
// period (the Seed).
type Ledger interface {
	// Reserve holds amount if spent + reserved + amount <= limit; ok says
	// whether it did. The balance is after the call.
	Reserve(ctx context.Context, orgID int64, period time.Time, amount, limit money.Amount) (b Balance, ok bool, err error)
	// Settle releases reserved and adds actual to spent.
	Settle(ctx context.Context, orgID int64, period time.Time, reserved, actual money.Amount) (Balance, error)
	// Balance reads the period's balance.
	Balance(ctx context.Context, orgID int64, period time.Time) (Balance, error)
	// Resync raises the period's spending to what the store has billed, if
	// the store knows more (spending went untracked while the organization
	// had no limit, or while this ledger was unreachable), and keeps the
	// reservations in flight. Spending is only ever raised: the store lags
	// the ledger by what the recorder has not flushed yet, so a lower figure
	// is the store's lag, not an error.
	Resync(ctx context.Context, orgID int64, period time.Time) error
	// Reset forgets the period, so the next use starts again from the
	// store, reservations in flight and all: only after an outage, when
	// reservations may have been settled elsewhere.
	Reset(ctx context.Context, orgID int64, period time.Time) error
}

// Seed returns what the store has billed orgID in the period so far.
type Seed func(ctx context.Context, orgID int64, period time.Time) (money.Amount, error)

// StoreSeed seeds ledgers from the monthly rollup.
func StoreSeed(store *models.Store) Seed {
	return func(ctx context.Context, orgID int64, period time.Time) (money.Amount, error) {
		m, err := store.UsageInMonth(ctx, orgID, period)
		return m.Cost, err
	}
}

// Period is the billing period (a calendar month in UTC) t falls in.
func Period(t time.Time) time.Time { return models.MonthOf(t) }

// PeriodEnd is when the period starting at period ends.
func PeriodEnd(period time.Time) time.Time { return period.AddDate(0, 1, 0) }

// MemoryLedger is the Ledger of a single node (the embedded default): a map
// under a mutex, which only organizations with a budget or a blocking
// included credit ever touch.
type MemoryLedger struct {
	seed Seed
	mu   sync.Mutex
	m    map[ledgerKey]Balance
}

type ledgerKey struct {
	org    int64
	period int64 // unix seconds of the period's start
}

// NewMemoryLedger returns an empty ledger seeded by seed.
func NewMemoryLedger(seed Seed) *MemoryLedger {
	return &MemoryLedger{seed: seed, m: make(map[ledgerKey]Balance)}
}

// load returns the key of the balance, seeding it first if needed. The store is
// read without the lock held; a concurrent seed of the same key keeps the
// first.
func (l *MemoryLedger) load(ctx context.Context, orgID int64, period time.Time) (ledgerKey, error) {
	k := ledgerKey{orgID, Period(period).Unix()}
	l.mu.Lock()
	_, ok := l.m[k]
	l.mu.Unlock()
	if ok {
		return k, nil
	}
	spent, err := l.seed(ctx, orgID, Period(period))
	if err != nil {
		return k, err
	}
	l.mu.Lock()
	if _, ok := l.m[k]; !ok {
		l.m[k] = Balance{Spent: spent}
	}
	l.mu.Unlock()
	return k, nil
}

// Reserve implements Ledger.
func (l *MemoryLedger) Reserve(ctx context.Context, orgID int64, period time.Time, amount, limit money.Amount) (Balance, bool, error) {
	k, err := l.load(ctx, orgID, period)
	if err != nil {
		return Balance{}, false, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.m[k]
	if b.Spent+b.Reserved+amount > limit {
		return b, false, nil
	}
	b.Reserved += amount
	l.m[k] = b
	return b, true, nil
}

// Settle implements Ledger.
func (l *MemoryLedger) Settle(ctx context.Context, orgID int64, period time.Time, reserved, actual money.Amount) (Balance, error) {
	k, err := l.load(ctx, orgID, period)
	if err != nil {
		return Balance{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.m[k]
	b.Reserved = max(0, b.Reserved-reserved)
	b.Spent += actual
	l.m[k] = b
	return b, nil
}

// Balance implements Ledger.
func (l *MemoryLedger) Balance(ctx context.Context, orgID int64, period time.Time) (Balance, error) {
	k, err := l.load(ctx, orgID, period)
	if err != nil {
		return Balance{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m[k], nil
}

// Resync implements Ledger.
func (l *MemoryLedger) Resync(ctx context.Context, orgID int64, period time.Time) error {
	k := ledgerKey{orgID, Period(period).Unix()}
	l.mu.Lock()
	_, ok := l.m[k]
	l.mu.Unlock()
	if !ok {
		return nil // seeded from the store on its first use
	}
	billed, err := l.seed(ctx, orgID, Period(period))
	if err != nil {
		return err
	}
	l.mu.Lock()
	if b, ok := l.m[k]; ok && b.Spent < billed {
		b.Spent = billed
		l.m[k] = b
	}
	l.mu.Unlock()
	return nil
}

// Reset implements Ledger.
func (l *MemoryLedger) Reset(_ context.Context, orgID int64, period time.Time) error {
	l.mu.Lock()
	delete(l.m, ledgerKey{orgID, Period(period).Unix()})
	l.mu.Unlock()
	return nil
}
