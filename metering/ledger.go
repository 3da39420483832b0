package metering

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// Balance is what an account (an organization, or one of its tokens) has
// spent in a billing period and what requests in flight hold reserved. A
// prepaid balance (PrepaidAccount) has no period, and its limit is raised
// by what the organization was credited and lowered by what was withdrawn
// by hand: what is left of it is Credited - Withdrawn - Spent - Reserved.
type Balance struct {
	Spent     money.Amount
	Reserved  money.Amount
	Credited  money.Amount
	Withdrawn money.Amount
}

// Left is what of limit the balance has not spent or reserved.
func (b Balance) Left(limit money.Amount) money.Amount {
	return limit + b.Credited - b.Withdrawn - b.Spent - b.Reserved
}

// fits says whether amount more can be reserved under limit.
func (b Balance) fits(limit, amount money.Amount) bool {
	return b.Spent+b.Reserved+amount+b.Withdrawn <= limit+b.Credited
}

// Account names a balance in the ledger: an organization's (TokenID 0),
// or one of its API tokens' (a token's own monthly budget).
type Account = models.LedgerAccount

// OrgAccount is the organization's own balance.
func OrgAccount(orgID int64) Account { return Account{OrgID: orgID} }

// TokenAccount is one token's balance.
func TokenAccount(orgID, tokenID int64) Account { return Account{OrgID: orgID, TokenID: tokenID} }

// PrepaidAccount is the organization's prepaid balance. It is held with a
// limit of 0: all it may spend is what it was credited (Balance.Credited)
// less what was withdrawn, seeded from the store (Funds) and raised by
// Resync after each credit.
func PrepaidAccount(orgID int64) Account { return Account{OrgID: orgID, Prepaid: true} }

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
		if i < len(bs) && !bs[i].fits(h.Limit, amount) {
			return i
		}
	}
	return -1
}

// Seed returns what the store has billed an account in the period so far
// (a prepaid balance: ever).
type Seed func(ctx context.Context, a Account, period time.Time) (money.Amount, error)

// Funds returns what the store says an organization's prepaid balance was
// ever credited and had withdrawn. Both only grow, so a ledger's copy is
// brought up to date by raising it to them.
type Funds func(ctx context.Context, orgID int64) (credited, withdrawn money.Amount, err error)

// StoreFunds reads funds from store's org_balances.
func StoreFunds(store *models.Store) Funds {
	return func(ctx context.Context, orgID int64) (money.Amount, money.Amount, error) {
		t, err := store.BalanceTotals(ctx, orgID)
		return t.Credited, t.Withdrawn, err
	}
}

// LedgerOption adjusts a ledger.
type LedgerOption func(*ledgerOptions)

type ledgerOptions struct{ funds Funds }

// WithFunds has prepaid balances' credits read from funds; without it a
// prepaid balance has none (nothing fits).
func WithFunds(f Funds) LedgerOption { return func(o *ledgerOptions) { o.funds = f } }

func optionsOf(opts []LedgerOption) ledgerOptions {
	o := ledgerOptions{funds: func(context.Context, int64) (money.Amount, money.Amount, error) { return 0, 0, nil }}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// StoreSeed seeds ledgers from the rollups: an organization's from its
// monthly rollup, a token's from its hours, a prepaid balance from its
// days of spending.
func StoreSeed(store *models.Store) Seed {
	return func(ctx context.Context, a Account, period time.Time) (money.Amount, error) {
		if a.Prepaid {
			t, err := store.BalanceTotals(ctx, a.OrgID)
			return t.Spent, err
		}
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
	seed  Seed
	funds Funds
	mu    sync.Mutex
	m     map[ledgerKey]Balance
}

type ledgerKey struct {
	account Account
	period  int64 // unix seconds of the period's start
}

func keyOf(a Account, period time.Time) ledgerKey {
	if a.Prepaid {
		return ledgerKey{a, 0} // no period: it never resets
	}
	return ledgerKey{a, Period(period).Unix()}
}

// NewMemoryLedger returns an empty ledger seeded by seed.
func NewMemoryLedger(seed Seed, opts ...LedgerOption) *MemoryLedger {
	return &MemoryLedger{seed: seed, funds: optionsOf(opts).funds, m: make(map[ledgerKey]Balance)}
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
	b, err := l.stored(ctx, a, period)
	if err != nil {
		return err
	}
	l.mu.Lock()
	if _, ok := l.m[k]; !ok {
		l.m[k] = b
	}
	l.mu.Unlock()
	return nil
}

// stored is what the store says of an account.
func (l *MemoryLedger) stored(ctx context.Context, a Account, period time.Time) (Balance, error) {
	spent, err := l.seed(ctx, a, Period(period))
	if err != nil || !a.Prepaid {
		return Balance{Spent: spent}, err
	}
	credited, withdrawn, err := l.funds(ctx, a.OrgID)
	return Balance{Spent: spent, Credited: credited, Withdrawn: withdrawn}, err
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
		ok = ok && bs[i].fits(h.Limit, amount)
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

// Resync implements Ledger. A prepaid balance is loaded if it was not, so
// a credit made while another request seeds it is not lost to that seed's
// older read of the store.
func (l *MemoryLedger) Resync(ctx context.Context, a Account, period time.Time) error {
	k := keyOf(a, period)
	if a.Prepaid {
		if err := l.load(ctx, a, period); err != nil {
			return err
		}
	}
	l.mu.Lock()
	_, ok := l.m[k]
	l.mu.Unlock()
	if !ok {
		return nil // seeded from the store on its first use
	}
	st, err := l.stored(ctx, a, period)
	if err != nil {
		return err
	}
	l.mu.Lock()
	if b, ok := l.m[k]; ok {
		b.Spent, b.Credited, b.Withdrawn = max(b.Spent, st.Spent), max(b.Credited, st.Credited), max(b.Withdrawn, st.Withdrawn)
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
