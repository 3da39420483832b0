package payments

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/sluicehq/sluice/models"
)

// ChargeSince is how far back a final invoice is still charged: turning
// payments on does not charge months long closed.
const ChargeSince = 40 * 24 * time.Hour

// ChargeInvoices turns the final invoices not yet charged into Stripe
// invoices for their organizations' customers: one invoice item per Sluice
// line, each line's amount (already rounded half-up to the cent) in the
// same whole cents, then finalized so Stripe charges the saved card (or
// the customer pays on the hosted page). Every request carries an
// idempotency key of the Sluice invoice and line, so a retry after a crash
// creates nothing twice. It returns how many it charged.
func (s *Service) ChargeInvoices(ctx context.Context) (int, error) {
	if !s.Enabled() {
		return 0, nil
	}
	due, err := s.store.InvoicesToCharge(ctx, s.now().Add(-ChargeSince), 50)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, inv := range due {
		_, lines, err := s.store.InvoiceByID(ctx, inv.OrgID, inv.ID)
		if err != nil {
			return n, err
		}
		if err := s.chargeInvoice(ctx, inv, lines); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// chargeInvoice makes one Sluice invoice a Stripe invoice.
func (s *Service) chargeInvoice(ctx context.Context, inv models.Invoice, lines []models.InvoiceLine) error {
	var sum int64
	for _, l := range lines {
		sum += ToCents(l.Amount)
	}
	if sum != ToCents(inv.Total) {
		// Cannot happen while lines are rounded before they are summed;
		// charging a different total than the invoice shows must not.
		return fmt.Errorf("invoice %d: its lines add up to %d cents, its total is %d", inv.ID, sum, ToCents(inv.Total))
	}
	customer, err := s.customer(ctx, inv.OrgID)
	if err != nil {
		return err
	}
	key := "sluice-invoice-" + strconv.FormatInt(inv.ID, 10)
	period := inv.PeriodStart.UTC().Format("January 2006")
	meta := map[string]string{"sluice_invoice_id": strconv.FormatInt(inv.ID, 10), "org_id": strconv.FormatInt(inv.OrgID, 10)}
	create := &stripe.InvoiceCreateParams{Customer: stripe.String(customer), Currency: stripe.String(s.cfg.Currency),
		CollectionMethod: stripe.String("charge_automatically"), AutoAdvance: stripe.Bool(true),
		// Only this invoice's lines: nothing else pending on the customer.
		PendingInvoiceItemsBehavior: stripe.String("exclude"), Description: stripe.String("Sluice usage, " + period), Metadata: meta}
	create.SetIdempotencyKey(key)
	si, err := s.sc.V1Invoices.Create(ctx, create)
	if err != nil {
		return stripeErr(err, "creating the Stripe invoice")
	}
	for i, l := range lines {
		item := &stripe.InvoiceItemCreateParams{Customer: stripe.String(customer), Invoice: stripe.String(si.ID),
			Amount: stripe.Int64(ToCents(l.Amount)), Currency: stripe.String(s.cfg.Currency), Description: stripe.String(l.Description),
			Metadata: map[string]string{"sluice_invoice_id": meta["sluice_invoice_id"], "position": strconv.Itoa(i)}}
		item.SetIdempotencyKey(key + "-line-" + strconv.Itoa(i))
		if _, err := s.sc.V1InvoiceItems.Create(ctx, item); err != nil {
			return stripeErr(err, "adding a line to the Stripe invoice")
		}
	}
	fin := &stripe.InvoiceFinalizeInvoiceParams{AutoAdvance: stripe.Bool(true)}
	fin.SetIdempotencyKey(key + "-finalize")
	done, err := s.sc.V1Invoices.FinalizeInvoice(ctx, si.ID, fin)
	if err != nil {
		return stripeErr(err, "finalizing the Stripe invoice")
	}
	s.log.Info("invoice charged through Stripe", "invoice_id", inv.ID, "org_id", inv.OrgID, "stripe_invoice", si.ID, "cents", sum)
	return s.store.SetInvoiceCharged(ctx, inv.ID, si.ID, done.HostedInvoiceURL)
}

// EndGracePeriods moves the organizations whose grace period ended back
// to the free tier, and tells every node.
func (s *Service) EndGracePeriods(ctx context.Context) ([]int64, error) {
	moved, err := s.store.EndGracePeriods(ctx, s.now())
	for _, id := range moved {
		if s.orgs != nil {
			s.orgs.OrganizationChanged(ctx, id)
		}
	}
	return moved, err
}

// Leader says whether this node runs the cluster's once-only work.
type Leader interface {
	Lead(ctx context.Context) (bool, error)
}

// Run does payments' periodic work every interval until ctx ends: on every
// node, ending grace periods and crediting top-ups a stopped node left (both
// conditional, so nodes at once do each once); on the leading node only,
// charging final invoices (idempotent at Stripe too). Payments off: nothing.
func (s *Service) Run(ctx context.Context, interval time.Duration, leader Leader) {
	if !s.Enabled() {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.tick(ctx, leader)
	}
}

func (s *Service) tick(ctx context.Context, leader Leader) {
	warn := func(what string, err error) {
		if err != nil && ctx.Err() == nil {
			s.log.Warn(what+" failed; the next run tries again", "err", err)
		}
	}
	moved, err := s.EndGracePeriods(ctx)
	warn("ending grace periods", err)
	if len(moved) > 0 {
		s.log.Info("grace periods ended: back on the free tier", slog.Any("organizations", moved))
	}
	_, err = s.CreditPending(ctx)
	warn("crediting pending top-ups", err)
	_, err = s.RechargeLow(ctx)
	warn("auto-recharging low balances", err)
	if lead, err := leader.Lead(ctx); err != nil || !lead {
		warn("taking the payments lead", err)
		return
	}
	_, err = s.ChargeInvoices(ctx)
	warn("charging invoices", err)
}
