package metering

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// Balance is what an account (an organization, or one of its tokens) has
// spent in a billing period and what requests in flight hold reserved.
type Balance struct {
	Spent    money.Amount
	Reserved money.Amount
}

// Account names a balance in the ledger: an organization's (TokenID 0),
// or one of its API tokens' (a token's own monthly budget).
type Account = models.LedgerAccount

// OrgAccount is the organization's own balance.
func OrgAccount(orgID int64) Account { return Account{OrgID: orgID} }

// TokenAccount is one token's balance.
func TokenAccount(orgID, tokenID int64) Account { return Account{OrgID: orgID, TokenID: tokenID} }

// Hold is one limit a request's reservation must fit under: its
// organization's budget or included credit, its token's budget.
type Hold = models.LedgerHold

// Release is one balance a settlement moves, and what was reserved on it
// (0 for a balance only tracked, such as a budget that only alerts).
type Release = models.LedgerRelease

// Ledger keeps spending per account (an organization, or one of its
// tokens) and billing period (a calendar month in UTC) for budgets: a
// request reserves its worst case before it runs, and settles to its real
// cost after. Reserve is one atomic conditional step over every limit the
// request is under (a Redis script, a transaction of conditional UPDATEs, a
// mutex), never a check followed by an act, so concurrent requests on any
// number of nodes cannot together pass a limit, and a request refused by
// one limit holds nothing under another; only an overrun (a provider
// ignoring max_tokens) can pass one, and it is taken as debt. Spending
// starts from what the store has already billed the account in the period,
// read once per account and period (the Seed).
type Ledger interface {
	// Reserve holds amount on every hold's balance if spent + reserved +
	// amount <= limit for each: all of them or none. ok says whether it
	// did; the balances are after the call, in the holds' order (on a
	// refusal, the first whose balance is short is the one that refused).
	Reserve(ctx context.Context, period time.Time, amount money.Amount, holds ...Hold) (bs []Balance, ok bool, err error)
	// Settle releases what each balance reserved and adds actual to its
	// spending. The balances are after the call, in rs's order.
	Settle(ctx context.Context, period time.Time, actual money.Amount, rs ...Release) ([]Balance, error)
	// Balance reads the period's balance.
	Balance(ctx context.Context, a Account, period time.Time) (Balance, error)
	// Resync raises the period's spending to what the store has billed, if
	// the store knows more (spending went untracked while the account had
	// no limit, or while this ledger was unreachable), and keeps the
	// reservations in flight. Spending is only ever raised: the store lags
	// the ledger by what the recorder has not flushed yet, so a lower figure
	// is the store's lag, not an error.
	Resync(ctx context.Context, a Account, period time.Time) error
	// Reset forgets the period, so the next use starts again from the
	// store, reservations in flight and all: only after an outage, when
	// reservations may have been settled elsewhere.
	Reset(ctx context.Context, a Account, period time.Time) error
}

// Short is the first of bs whose balance cannot take amount under its
// hold's limit: the limit that refused a reservation. -1 when none is.
func Short(bs []Balance, holds []Hold, amount money.Amount) int {
	for i, h := range holds {
		if i < len(bs) && bs[i].Spent+bs[i].Reserved+amount > h.Limit {
			return i
		}
	}
	return -1
}

// Seed returns what the store has billed an account in the period so far.
type Seed func(ctx context.Context, a Account, period time.Time) (money.Amount, error)

// StoreSeed seeds ledgers from the rollups: an organization's from its
// monthly rollup, a token's from its hours.
func StoreSeed(store *models.Store) Seed {
	return func(ctx context.Context, a Account, period time.Time) (money.Amount, error) {
		if a.TokenID != 0 {
			return store.TokenSpentInMonth(ctx, a.OrgID, a.TokenID, period)
		}
		m, err := store.UsageInMonth(ctx, a.OrgID, period)
		return m.Cost, err
	}
}

// Period is the billing period (a calendar month in UTC) t falls in.
func Period(t time.Time) time.Time { return models.MonthOf(t) }

// PeriodEnd is when the period starting at period ends.
func PeriodEnd(period time.Time) time.Time { return period.AddDate(0, 1, 0) }

// MemoryLedger is the Ledger of a single node (the embedded default): a map
// under a mutex, which only organizations and tokens with a limit ever
// touch.
type MemoryLedger struct {
	seed Seed
	mu   sync.Mutex
	m    map[ledgerKey]Balance
}

type ledgerKey struct {
	account Account
	period  int64 // unix seconds of the period's start
}

func keyOf(a Account, period time.Time) ledgerKey { return ledgerKey{a, Period(period).Unix()} }

// NewMemoryLedger returns an empty ledger seeded by seed.
func NewMemoryLedger(seed Seed) *MemoryLedger {
	return &MemoryLedger{seed: seed, m: make(map[ledgerKey]Balance)}
}

// load seeds the balance if needed. The store is read without the lock
// held; a concurrent seed of the same key keeps the first.
func (l *MemoryLedger) load(ctx context.Context, a Account, period time.Time) error {
	k := keyOf(a, period)
	l.mu.Lock()
	_, ok := l.m[k]
	l.mu.Unlock()
	if ok {
		return nil
	}
	spent, err := l.seed(ctx, a, Period(period))
	if err != nil {
		return err
	}
	l.mu.Lock()
	if _, ok := l.m[k]; !ok {
		l.m[k] = Balance{Spent: spent}
	}
	l.mu.Unlock()
	return nil
}

// Reserve implements Ledger.
func (l *MemoryLedger) Reserve(ctx context.Context, period time.Time, amount money.Amount, holds ...Hold) ([]Balance, bool, error) {
	for _, h := range holds {
		if err := l.load(ctx, h.Account, period); err != nil {
			return nil, false, err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	bs := make([]Balance, len(holds))
	ok := true
	for i, h := range holds {
		bs[i] = l.m[keyOf(h.Account, period)]
		ok = ok && bs[i].Spent+bs[i].Reserved+amount <= h.Limit
	}
	if !ok {
		return bs, false, nil
	}
	for i, h := range holds {
		bs[i].Reserved += amount
		l.m[keyOf(h.Account, period)] = bs[i]
	}
	return bs, true, nil
}

// Settle implements Ledger.
func (l *MemoryLedger) Settle(ctx context.Context, period time.Time, actual money.Amount, rs ...Release) ([]Balance, error) {
	for _, r := range rs {
		if err := l.load(ctx, r.Account, period); err != nil {
			return nil, err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	bs := make([]Balance, len(rs))
	for i, r := range rs {
		k := keyOf(r.Account, period)
		b := l.m[k]
		b.Reserved = max(0, b.Reserved-r.Reserved)
		b.Spent += actual
		l.m[k], bs[i] = b, b
	}
	return bs, nil
}

// Balance implements Ledger.
func (l *MemoryLedger) Balance(ctx context.Context, a Account, period time.Time) (Balance, error) {
	if err := l.load(ctx, a, period); err != nil {
		return Balance{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m[keyOf(a, period)], nil
}

// Resync implements Ledger.
func (l *MemoryLedger) Resync(ctx context.Context, a Account, period time.Time) error {
	k := keyOf(a, period)
	l.mu.Lock()
	_, ok := l.m[k]
	l.mu.Unlock()
	if !ok {
		return nil // seeded from the store on its first use
	}
	billed, err := l.seed(ctx, a, Period(period))
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
func (l *MemoryLedger) Reset(_ context.Context, a Account, period time.Time) error {
	l.mu.Lock()
	delete(l.m, keyOf(a, period))
	l.mu.Unlock()
	return nil
}
