package metering

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/money"
)

// FallbackLedger is the shared ledger while it answers, and a per-node
// ledger while it does not, so losing Redis never stops budgeted traffic
// and never lifts a budget either: each node then allows 1/Share of what
// was left when it lost the shared ledger (what the store had billed, as
// seeded, less what the node has spent since), of each of a request's
// limits. When the shared ledger
// answers again, the balances this node settled on its own are reset there,
// to be seeded again from the store, which by then holds those requests.
// A reservation made on one side and settled on the other after a switch
// releases nothing where it was made: balances are then conservative (too
// much reserved) until the period's balance is next reset.
type FallbackLedger struct {
	shared   Ledger
	local    *MemoryLedger
	expected int64        // the least share: the expected node count
	share    atomic.Int64 // the share in force: max(expected, the nodes last seen)
	log      *slog.Logger

	down    atomic.Bool
	mu      sync.Mutex
	touched map[ledgerKey]time.Time // balances settled locally, by period
}

// NewFallbackLedger wraps shared; share is the expected node count.
func NewFallbackLedger(shared Ledger, seed Seed, share int, log *slog.Logger, opts ...LedgerOption) *FallbackLedger {
	l := &FallbackLedger{shared: shared, local: NewMemoryLedger(seed, opts...), expected: int64(max(share, 1)), log: log,
		touched: make(map[ledgerKey]time.Time)}
	l.share.Store(l.expected)
	return l
}

// ObserveNodes tells the ledger how many nodes were last seen sharing the
// budgets: while it is down each keeps 1/n of what is left, never more
// than 1/share (the expected node count, the least).
func (l *FallbackLedger) ObserveNodes(n int) { l.share.Store(max(l.expected, int64(n))) }

// Reserve implements Ledger.
func (l *FallbackLedger) Reserve(ctx context.Context, period time.Time, amount money.Amount, holds ...Hold) ([]Balance, bool, error) {
	bs, ok, err := l.shared.Reserve(ctx, period, amount, holds...)
	if l.answered(ctx, err) {
		return bs, ok, err
	}
	shares := make([]Hold, len(holds))
	for i, h := range holds {
		local, err := l.local.Balance(ctx, h.Account, period)
		if err != nil {
			return nil, false, err
		}
		// What is left (a prepaid balance counts its credits), shared.
		left := max(local.Left(h.Limit)+local.Reserved, 0) / money.Amount(l.share.Load())
		shares[i] = Hold{Account: h.Account, Limit: local.Spent + left - local.Credited + local.Withdrawn}
	}
	return l.local.Reserve(ctx, period, amount, shares...)
}

// Settle implements Ledger.
func (l *FallbackLedger) Settle(ctx context.Context, period time.Time, actual money.Amount, rs ...Release) ([]Balance, error) {
	bs, err := l.shared.Settle(ctx, period, actual, rs...)
	if l.answered(ctx, err) {
		return bs, err
	}
	l.mu.Lock()
	for _, r := range rs {
		l.touched[keyOf(r.Account, period)] = Period(period)
	}
	l.mu.Unlock()
	return l.local.Settle(ctx, period, actual, rs...)
}

// Balance implements Ledger.
func (l *FallbackLedger) Balance(ctx context.Context, a Account, period time.Time) (Balance, error) {
	b, err := l.shared.Balance(ctx, a, period)
	if l.answered(ctx, err) {
		return b, err
	}
	return l.local.Balance(ctx, a, period)
}

// Resync implements Ledger.
func (l *FallbackLedger) Resync(ctx context.Context, a Account, period time.Time) error {
	_ = l.local.Resync(ctx, a, period)
	return l.shared.Resync(ctx, a, period)
}

// Reset implements Ledger.
func (l *FallbackLedger) Reset(ctx context.Context, a Account, period time.Time) error {
	_ = l.local.Reset(ctx, a, period)
	return l.shared.Reset(ctx, a, period)
}

// Degraded reports whether the node is on its own ledger.
func (l *FallbackLedger) Degraded() bool { return l.down.Load() }

// answered reports whether the shared ledger's answer stands (it answered,
// or the caller gave up), and notes the transitions.
func (l *FallbackLedger) answered(ctx context.Context, err error) bool {
	if err == nil {
		if l.down.CompareAndSwap(true, false) {
			l.recovered(ctx)
		}
		return true
	}
	if ctx.Err() != nil {
		return true // the caller left: not an outage
	}
	if l.down.CompareAndSwap(false, true) {
		l.log.Warn("budget ledger unavailable; budgets are enforced per node at a 1/N share of what is left", "nodes", l.share.Load(), "err", err)
	}
	return false
}

// recovered resets in the shared ledger what this node settled alone.
func (l *FallbackLedger) recovered(ctx context.Context) {
	l.mu.Lock()
	touched := l.touched
	l.touched = make(map[ledgerKey]time.Time)
	l.mu.Unlock()
	for k, period := range touched {
		if err := l.shared.Reset(ctx, k.account, period); err != nil {
			l.log.Warn("resetting a budget balance after the ledger came back failed", "org_id", k.account.OrgID,
				"token_id", k.account.TokenID, "err", err)
		}
		_ = l.local.Reset(ctx, k.account, period)
	}
	l.log.Info("budget ledger back", "balances_reset", len(touched))
}
