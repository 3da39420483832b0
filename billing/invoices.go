package billing

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/models"
)

// FinalizeAfter is how long after a month ends its invoices are closed: the
// usage of the month's last seconds is still on its way from the recorders
// (which flush every second) and must land first.
const FinalizeAfter = 10 * time.Minute

// Invoices lists orgID's invoices, newest first: the current month's live
// draft, then past months. A draft's total is computed now, and it comes
// with the lines it was computed from; a final one's total was fixed when
// the month closed, and its lines are read with Invoice.
func (s *Service) Invoices(ctx context.Context, orgID int64) ([]Invoice, error) {
	if _, err := s.store.EnsureInvoice(ctx, orgID, s.now()); err != nil {
		return nil, err
	}
	rows, err := s.store.Invoices(ctx, orgID)
	if err != nil {
		return nil, err
	}
	out := make([]Invoice, 0, len(rows))
	for _, r := range rows {
		inv, err := s.invoice(ctx, r, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, inv)
	}
	return out, nil
}

// Invoice returns one of orgID's invoices with its lines; another
// organization's is not found.
func (s *Service) Invoice(ctx context.Context, orgID, id int64) (Invoice, error) {
	r, lines, err := s.store.InvoiceByID(ctx, orgID, id)
	if err != nil {
		return Invoice{}, err
	}
	return s.invoice(ctx, r, lines)
}

// invoice is a stored invoice with its lines: the stored ones when final,
// computed from the rollups when a draft.
func (s *Service) invoice(ctx context.Context, r models.Invoice, stored []models.InvoiceLine) (Invoice, error) {
	if r.Status == Final {
		inv := Invoice{ID: r.ID, PeriodStart: r.PeriodStart.UTC(), PeriodEnd: r.PeriodStart.UTC().AddDate(0, 1, 0),
			Status: Final, Currency: r.Currency, Total: r.Total, PaymentStatus: r.PaymentStatus, HostedURL: r.HostedInvoiceURL}
		for _, l := range stored {
			inv.Lines = append(inv.Lines, Line{Kind: l.Kind, Description: l.Description, Model: l.Model, Requests: l.Requests,
				PromptTokens: l.PromptTokens, CompletionTokens: l.CompletionTokens, CachedTokens: l.CachedTokens,
				InputPrice: l.InputPerMTok, OutputPrice: l.OutputPerMTok, CachedInputPrice: l.CachedInputPerMTok, Amount: l.Amount})
		}
		return inv, nil
	}
	inv, err := s.build(ctx, r.OrgID, r.PeriodStart.UTC())
	inv.ID = r.ID
	return inv, err
}

// build computes orgID's invoice for a month from the rollups and the
// terms of the tiers it was on, each for its part of the month.
func (s *Service) build(ctx context.Context, orgID int64, period time.Time) (Invoice, error) {
	plan, err := s.store.MonthTerms(ctx, orgID, period)
	if err != nil {
		return Invoice{}, err
	}
	used, err := s.store.UsageByPrice(ctx, orgID, period)
	if err != nil {
		return Invoice{}, err
	}
	ps, err := s.store.ModelPrices(ctx)
	if err != nil {
		return Invoice{}, err
	}
	byID := make(map[int64]models.ModelPrice, len(ps))
	for _, p := range ps {
		byID[p.ID] = p
	}
	usage := make([]Usage, len(used))
	for i, u := range used {
		p := byID[u.PriceID]
		usage[i] = Usage{Model: u.Model, PriceID: u.PriceID, Requests: u.Requests, PromptTokens: u.PromptTokens,
			CompletionTokens: u.CompletionTokens, CachedTokens: u.CachedTokens, Cost: u.Cost,
			InputPrice: p.InputPerMTok, OutputPrice: p.OutputPerMTok, CachedInputPrice: p.CachedInputPerMTok, EffectiveFrom: p.EffectiveFrom}
	}
	prepaid, err := s.store.BalanceSpentBetween(ctx, orgID, period, period.AddDate(0, 1, 0))
	if err != nil {
		return Invoice{}, err
	}
	return BuildPaid(plan, usage, prepaid), nil
}

// FinalizeIfLeading runs FinalizeDue when this node leads, so one node
// builds the invoices of a month (FinalizeDue's conditional update would
// keep the outcome single anyway).
func (s *Service) FinalizeIfLeading(ctx context.Context, leader Leader) (int, error) {
	lead, err := leader.Lead(ctx)
	if err != nil || !lead {
		return 0, err
	}
	return s.FinalizeDue(ctx)
}

// FinalizeDue closes every month that ended at least FinalizeAfter ago:
// each organization's draft gets its lines and total stored and becomes
// final. The leading node runs it (FinalizeIfLeading); a draft is finalized
// once whoever runs it (a conditional update), and a restart simply finds
// what is still due. It returns how many invoices this call finalized.
func (s *Service) FinalizeDue(ctx context.Context) (int, error) {
	cutoff := s.now().Add(-FinalizeAfter)
	last := metering.Period(cutoff).AddDate(0, -1, 0) // the latest month that has ended by the cutoff
	if err := s.store.EnsureInvoicesFor(ctx, last); err != nil {
		return 0, err
	}
	// Every ended month of the last year with usage gets its draft too:
	// months no node closed (a cluster down past a month's end).
	if err := s.store.EnsureInvoicesForUsage(ctx, last.AddDate(-1, 0, 0), metering.Period(cutoff)); err != nil {
		return 0, err
	}
	drafts, err := s.store.DraftsEndedBy(ctx, metering.Period(cutoff))
	if err != nil {
		return 0, err
	}
	done := 0
	for _, d := range drafts {
		inv, err := s.build(ctx, d.OrgID, d.PeriodStart.UTC())
		if err != nil {
			return done, err
		}
		lines := make([]models.InvoiceLine, len(inv.Lines))
		for i, l := range inv.Lines {
			lines[i] = models.InvoiceLine{Kind: l.Kind, Description: l.Description, Model: l.Model, Requests: l.Requests,
				PromptTokens: l.PromptTokens, CompletionTokens: l.CompletionTokens, CachedTokens: l.CachedTokens,
				InputPerMTok: l.InputPrice, OutputPerMTok: l.OutputPrice, CachedInputPerMTok: l.CachedInputPrice, Amount: l.Amount}
		}
		ok, err := s.store.FinalizeInvoice(ctx, d.ID, inv.Total, lines)
		if err != nil {
			return done, err
		}
		if ok {
			done++
		}
	}
	return done, nil
}

// Leader elects the one node that closes months (a Postgres advisory lock
// in a cluster; a single node always leads).
type Leader interface {
	Lead(ctx context.Context) (bool, error)
}

// RunFinalizer finalizes due invoices every interval, while this node
// leads, until ctx ends.
func (s *Service) RunFinalizer(ctx context.Context, interval time.Duration, leader Leader) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if n, err := s.FinalizeIfLeading(ctx, leader); err != nil && ctx.Err() == nil {
			s.log.Warn("finalizing invoices failed; retrying at the next interval", "err", err)
		} else if n > 0 {
			s.log.Info("invoices finalized", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
