package payments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
)

// Tolerance is how old (or how far ahead) a signed delivery may be:
// Stripe's own default, so a captured delivery cannot be replayed later.
const Tolerance = 5 * time.Minute

// MaxEventBytes bounds a webhook body, read before its signature is
// checked. Stripe's events are far smaller (an invoice with its lines is
// a few tens of KiB).
const MaxEventBytes = 512 << 10

// Verify checks a delivery's Stripe-Signature with stripe-go's webhook
// package against the endpoint's secret, and its time against the
// service's clock (so the window is testable; stripe-go's own check reads
// the wall clock). A refusal is invalid (400), in words that never repeat
// the body.
func (s *Service) Verify(body []byte, header string) (stripe.Event, error) {
	if !s.Enabled() {
		return stripe.Event{}, apperr.WithReason(apperr.NotFound, "payments_off", "payments are off on this server: no Stripe webhook is served")
	}
	ev, err := webhook.ConstructEventWithOptions(body, header, s.cfg.WebhookSecret, webhook.ConstructEventOptions{IgnoreTolerance: true})
	if err != nil {
		msg := "the Stripe-Signature header does not match the body for this endpoint's secret"
		switch {
		case errors.Is(err, webhook.ErrNotSigned) || errors.Is(err, webhook.ErrInvalidHeader):
			msg = "the Stripe-Signature header is missing or malformed"
		case strings.Contains(err.Error(), "API version"):
			msg = fmt.Sprintf("the event's API version is not %s, which this Sluice reads: set the webhook endpoint's API version to it", stripe.APIVersion)
		}
		return stripe.Event{}, &apperr.Error{Code: apperr.Invalid, Reason: "invalid_signature", Message: msg, Cause: err}
	}
	signed, ok := signedAt(header)
	if now := s.now(); !ok || now.Sub(signed) > Tolerance || signed.Sub(now) > Tolerance {
		return stripe.Event{}, apperr.WithReason(apperr.Invalid, "stale_signature",
			"the delivery was signed more than 5 minutes from now: replays are refused")
	}
	return ev, nil
}

// signedAt reads the t= of a Stripe-Signature header.
func signedAt(header string) (time.Time, bool) {
	for _, part := range strings.Split(header, ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(part), "="); ok && k == "t" {
			n, err := strconv.ParseInt(v, 10, 64)
			return time.Unix(n, 0), err == nil
		}
	}
	return time.Time{}, false
}

// Result is what applying an event did.
type Result struct {
	// Duplicate says the event was applied before (by any node): nothing
	// changed now, and Outcome is what it did then.
	Duplicate bool
	Outcome   string
}

// Apply applies a verified event once, whichever node gets it and however
// often Stripe delivers it. An error means it was not applied: the webhook
// answers non-2xx and Stripe delivers it again.
func (s *Service) Apply(ctx context.Context, ev stripe.Event) (Result, error) {
	pe := models.PaymentEvent{EventID: ev.ID, Type: string(ev.Type), CreatedAt: time.Unix(ev.Created, 0).UTC()}
	if ev.ID == "" || ev.Data == nil {
		return Result{}, apperr.WithReason(apperr.Invalid, "invalid_event", "the event has no id or no object")
	}
	var (
		outcome string
		err     error
	)
	switch ev.Type {
	case "checkout.session.completed", "checkout.session.async_payment_succeeded":
		outcome, err = s.checkoutCompleted(ctx, pe, ev.Data.Raw)
	case "customer.subscription.created", "customer.subscription.updated", "customer.subscription.deleted":
		outcome, err = s.subscriptionChanged(ctx, pe, ev.Data.Raw)
	case "invoice.paid", "invoice.payment_failed", "invoice.voided", "invoice.marked_uncollectible":
		outcome, err = s.invoiceChanged(ctx, pe, ev.Type, ev.Data.Raw)
	case "payment_intent.succeeded", "payment_intent.payment_failed":
		outcome, err = s.paymentIntentChanged(ctx, pe, ev.Type, ev.Data.Raw)
	default:
		outcome, err = s.store.RecordPaymentEvent(ctx, pe, "ignored: Sluice does not act on "+string(ev.Type))
	}
	if errors.Is(err, models.ErrEventSeen) {
		prev, perr := s.store.PaymentEventByID(ctx, ev.ID)
		return Result{Duplicate: true, Outcome: prev.Outcome}, perr
	}
	if err != nil {
		return Result{}, err
	}
	if strings.HasPrefix(outcome, "refused") {
		// Signed by Stripe, yet not about anything Sluice made: worth an
		// operator's look, never a retry.
		s.log.Warn("stripe event refused", "event_id", ev.ID, "type", ev.Type, "outcome", outcome)
	}
	return Result{Outcome: outcome}, nil
}

// decode reads an event's object; a malformed one is recorded as refused.
func decode[T any](raw json.RawMessage) (T, error) {
	var v T
	err := json.Unmarshal(raw, &v)
	return v, err
}

// orgOf is the organization an object's metadata names, 0 for none.
func orgOf(meta map[string]string) int64 {
	id, err := strconv.ParseInt(meta["org_id"], 10, 64)
	if err != nil || id <= 0 {
		return 0
	}
	return id
}

func customerID(c *stripe.Customer) string {
	if c == nil {
		return ""
	}
	return c.ID
}

// checkoutCompleted applies a finished Checkout: a paid top-up credits the
// balance (once: the event, the session's completion and then the credit,
// idempotent on the session id); a subscription's session records the
// subscription, whose own events change the tier.
func (s *Service) checkoutCompleted(ctx context.Context, pe models.PaymentEvent, raw json.RawMessage) (string, error) {
	cs, err := decode[stripe.CheckoutSession](raw)
	if err != nil {
		return s.store.RecordPaymentEvent(ctx, pe, "refused: the session object does not parse")
	}
	pe.ObjectID = cs.ID
	org := orgOf(cs.Metadata)
	if org == 0 {
		return s.store.RecordPaymentEvent(ctx, pe, "refused: the session names no organization")
	}
	pe.OrgID = &org
	switch cs.Mode {
	case stripe.CheckoutSessionModePayment:
		if cs.PaymentStatus != stripe.CheckoutSessionPaymentStatusPaid {
			return s.store.RecordPaymentEvent(ctx, pe, "waiting: the session is "+string(cs.PaymentStatus)+", credited once its payment succeeds")
		}
		if string(cs.Currency) != s.cfg.Currency {
			return s.store.RecordPaymentEvent(ctx, pe, "refused: paid in "+string(cs.Currency)+", not "+s.cfg.Currency)
		}
		done, outcome, err := s.store.CompleteTopUp(ctx, pe, cs.ID, org, cs.AmountTotal)
		if err != nil || done.SessionID == "" {
			return outcome, err
		}
		if err := s.credit(ctx, done); err != nil {
			// The session is completed and the event recorded: the sweep
			// credits it (CreditPending), so Stripe need not retry.
			s.log.Warn("crediting a top-up failed; the sweep tries again", "session_id", done.SessionID, "org_id", org, "err", err)
			return outcome + "; credit pending", nil
		}
		return outcome + "; balance credited", nil
	case stripe.CheckoutSessionModeSubscription:
		sub := ""
		if cs.Subscription != nil {
			sub = cs.Subscription.ID
		}
		_, outcome, err := s.store.RecordSubscriptionCheckout(ctx, pe, cs.ID, org, customerID(cs.Customer), sub)
		return outcome, err
	}
	return s.store.RecordPaymentEvent(ctx, pe, "ignored: a Checkout session in "+string(cs.Mode)+" mode")
}

// credit credits a completed top-up session's amount, exactly its cents.
func (s *Service) credit(ctx context.Context, cs models.CheckoutSession) error {
	if s.balance == nil {
		return errors.New("no balance is wired to credit")
	}
	amount := FromCents(cs.AmountCents)
	if _, err := s.balance.CreditBalance(ctx, cs.OrgID, amount, TopUpKind, cs.SessionID,
		"top-up of "+amount.StringCents()+" "+s.Currency()+" through Stripe Checkout"); err != nil {
		return err
	}
	return s.store.MarkCredited(ctx, cs.SessionID)
}

// CreditPending credits the completed top-ups a stopped node left
// uncredited: completed more than a minute ago (so it does not race the
// node crediting one now; a race would credit nothing twice anyway).
func (s *Service) CreditPending(ctx context.Context) (int, error) {
	pending, err := s.store.UncreditedTopUps(ctx, s.now().Add(-time.Minute))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, cs := range pending {
		if err := s.credit(ctx, cs); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// subscriptionChanged applies a subscription's new state.
func (s *Service) subscriptionChanged(ctx context.Context, pe models.PaymentEvent, raw json.RawMessage) (string, error) {
	sub, err := decode[stripe.Subscription](raw)
	if err != nil {
		return s.store.RecordPaymentEvent(ctx, pe, "refused: the subscription object does not parse")
	}
	pe.ObjectID = sub.ID
	org, err := s.orgFor(ctx, sub.Metadata, customerID(sub.Customer))
	if err != nil || org == 0 {
		if err != nil {
			return "", err
		}
		return s.store.RecordPaymentEvent(ctx, pe, "refused: the subscription is no organization's")
	}
	pe.OrgID = &org
	price := ""
	if sub.Items != nil && len(sub.Items.Data) > 0 && sub.Items.Data[0].Price != nil {
		price = sub.Items.Data[0].Price.ID
	}
	return s.applySubscription(ctx, pe, models.SubscriptionChange{OrgID: org, SubscriptionID: sub.ID, Status: string(sub.Status),
		PriceID: price, At: pe.CreatedAt})
}

// applySubscription applies a change and tells the nodes of a tier change.
func (s *Service) applySubscription(ctx context.Context, pe models.PaymentEvent, ch models.SubscriptionChange) (string, error) {
	res, err := s.store.ApplySubscriptionEvent(ctx, pe, ch)
	if err != nil {
		return "", err
	}
	if res.TierChanged && s.orgs != nil {
		s.orgs.OrganizationChanged(ctx, ch.OrgID)
	}
	if ch.PaymentFailed && strings.Contains(res.Outcome, "until") {
		s.mail(ctx, Failure{OrgID: ch.OrgID, Kind: FailedSubscription, At: ch.At,
			Message: "The payment of your subscription failed: " + res.Outcome + ". Update your card in the Stripe customer portal."})
	}
	return res.Outcome, nil
}

// orgFor is the organization of an object: its metadata's, checked
// against the customer's when Sluice knows the customer.
func (s *Service) orgFor(ctx context.Context, meta map[string]string, customer string) (int64, error) {
	org := orgOf(meta)
	acc, err := s.store.PaymentAccountByCustomer(ctx, customer)
	switch {
	case apperr.CodeOf(err) == apperr.NotFound:
		return org, nil
	case err != nil:
		return 0, err
	case org != 0 && org != acc.OrgID:
		return 0, nil // metadata and customer disagree: trust neither
	}
	return acc.OrgID, nil
}

// invoiceChanged applies an invoice's payment: a subscription's invoice
// starts or ends the grace period; a charged Sluice invoice is marked.
func (s *Service) invoiceChanged(ctx context.Context, pe models.PaymentEvent, typ stripe.EventType, raw json.RawMessage) (string, error) {
	inv, err := decode[stripe.Invoice](raw)
	if err != nil {
		return s.store.RecordPaymentEvent(ctx, pe, "refused: the invoice object does not parse")
	}
	pe.ObjectID = inv.ID
	if inv.Parent != nil && inv.Parent.SubscriptionDetails != nil && inv.Parent.SubscriptionDetails.Subscription != nil {
		d := inv.Parent.SubscriptionDetails
		org, err := s.orgFor(ctx, d.Metadata, customerID(inv.Customer))
		if err != nil || org == 0 {
			if err != nil {
				return "", err
			}
			return s.store.RecordPaymentEvent(ctx, pe, "refused: the subscription invoice is no organization's")
		}
		pe.OrgID = &org
		ch := models.SubscriptionChange{OrgID: org, SubscriptionID: d.Subscription.ID, At: pe.CreatedAt}
		switch typ {
		case "invoice.paid":
			ch.Paid = true
		case "invoice.payment_failed", "invoice.marked_uncollectible":
			ch.PaymentFailed = true
		default:
			return s.store.RecordPaymentEvent(ctx, pe, "ignored: "+string(typ)+" of a subscription invoice")
		}
		return s.applySubscription(ctx, pe, ch)
	}
	status := map[stripe.EventType]string{"invoice.paid": models.PaymentPaid, "invoice.payment_failed": models.PaymentFailed,
		"invoice.marked_uncollectible": models.PaymentFailed, "invoice.voided": models.PaymentVoid}[typ]
	sluiceID, _ := strconv.ParseInt(inv.Metadata["sluice_invoice_id"], 10, 64)
	outcome, err := s.store.ApplyInvoicePayment(ctx, pe, models.InvoicePayment{StripeInvoiceID: inv.ID, SluiceInvoiceID: sluiceID,
		CustomerID: customerID(inv.Customer), Status: status, HostedURL: inv.HostedInvoiceURL, At: pe.CreatedAt})
	if err == nil && status == models.PaymentFailed && strings.HasSuffix(outcome, " failed") {
		if acc, aerr := s.store.PaymentAccountByCustomer(ctx, customerID(inv.Customer)); aerr == nil {
			s.mail(ctx, Failure{OrgID: acc.OrgID, Kind: FailedInvoice, At: pe.CreatedAt,
				Message: "Stripe could not charge your Sluice invoice; pay it on its page: " + inv.HostedInvoiceURL})
		}
	}
	return outcome, err
}

// mail passes a failure to the mail hook, if one is wired; a failure to
// mail is logged, never a reason to apply the event again.
func (s *Service) mail(ctx context.Context, f Failure) {
	if s.mailer == nil {
		return
	}
	if err := s.mailer.PaymentFailed(ctx, f); err != nil {
		s.log.Warn("mailing a payment failure failed", "org_id", f.OrgID, "kind", f.Kind, "err", err)
	}
}
