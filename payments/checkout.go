package payments

import (
	"context"
	"fmt"
	"strconv"

	"github.com/stripe/stripe-go/v82"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// errOff is every action's answer while Stripe is not configured.
var errOff = apperr.WithReason(apperr.Unprocessable, "payments_off",
	"payments are off on this server: the operator has not configured Stripe (SLUICE_STRIPE_SECRET_KEY)")

// Checkout is a Checkout session to send the owner to.
type Checkout struct {
	SessionID   string
	URL         string
	AmountCents int64 // a top-up's, what Stripe charges and the balance gets
}

// Return are the pages Stripe sends the owner back to. Success must not
// change anything: the event does.
type Return struct {
	SuccessURL, CancelURL string
}

// StartTopUp creates a Checkout session for a top-up of amount, rounded
// half-up to the cent (the amount shown, charged and credited), within the
// operator's bounds. The card is saved for the organization's
// auto-recharge. Owners may.
func (s *Service) StartTopUp(ctx context.Context, u models.Member, amount money.Amount, ret Return) (Checkout, error) {
	if err := s.ready(u, "top up its balance"); err != nil {
		return Checkout{}, err
	}
	cents := ToCents(amount)
	if charged := FromCents(cents); charged < s.cfg.TopUpMin || charged > s.cfg.TopUpMax {
		return Checkout{}, apperr.Field(apperr.Unprocessable, "amount_out_of_bounds", "amount",
			fmt.Sprintf("a top-up must be from %s to %s %s", s.cfg.TopUpMin.StringCents(), s.cfg.TopUpMax.StringCents(), s.Currency()))
	}
	customer, err := s.customer(ctx, u.OrgID)
	if err != nil {
		return Checkout{}, err
	}
	org := strconv.FormatInt(u.OrgID, 10)
	meta := map[string]string{"org_id": org, "kind": TopUpKind}
	params := &stripe.CheckoutSessionCreateParams{
		Mode: stripe.String(string(stripe.CheckoutSessionModePayment)), Customer: stripe.String(customer),
		ClientReferenceID: stripe.String(org), Metadata: meta,
		SuccessURL: stripe.String(ret.SuccessURL), CancelURL: stripe.String(ret.CancelURL),
		// Saved for off-session charges: the auto-recharge uses it.
		PaymentIntentData: &stripe.CheckoutSessionCreatePaymentIntentDataParams{SetupFutureUsage: stripe.String("off_session"), Metadata: meta},
		LineItems: []*stripe.CheckoutSessionCreateLineItemParams{{Quantity: stripe.Int64(1),
			PriceData: &stripe.CheckoutSessionCreateLineItemPriceDataParams{Currency: stripe.String(s.cfg.Currency), UnitAmount: stripe.Int64(cents),
				ProductData: &stripe.CheckoutSessionCreateLineItemPriceDataProductDataParams{Name: stripe.String("Sluice prepaid credit")}}}},
	}
	cs, err := s.sc.V1CheckoutSessions.Create(ctx, params)
	if err != nil {
		return Checkout{}, stripeErr(err, "creating a Checkout session")
	}
	if err := s.store.RecordCheckoutSession(ctx, u, models.CheckoutSession{SessionID: cs.ID, Mode: models.CheckoutPayment, AmountCents: cents}); err != nil {
		return Checkout{}, err
	}
	return Checkout{SessionID: cs.ID, URL: cs.URL, AmountCents: cents}, nil
}

// StartSubscription creates a Checkout session in subscription mode for a
// tier with a Stripe price. The tier changes when Stripe says the
// subscription is active, not now. Owners may.
func (s *Service) StartSubscription(ctx context.Context, u models.Member, tierName string, ret Return) (Checkout, error) {
	if err := s.ready(u, "subscribe to a tier"); err != nil {
		return Checkout{}, err
	}
	if tierName == "" {
		return Checkout{}, apperr.Field(apperr.Invalid, "missing_tier", "tier", "tier is required")
	}
	t, err := s.store.TierByName(ctx, tierName)
	if err != nil {
		return Checkout{}, err
	}
	if t.StripePriceID == "" {
		return Checkout{}, apperr.WithReason(apperr.Unprocessable, "tier_not_for_sale",
			"the "+t.Name+" tier has no Stripe price: ask an admin for it with an upgrade request")
	}
	acc, err := s.store.PaymentAccount(ctx, u.OrgID)
	if err != nil {
		return Checkout{}, err
	}
	if acc.SubscriptionID != "" && acc.SubscriptionStatus != "canceled" && acc.SubscriptionStatus != "" {
		return Checkout{}, apperr.WithReason(apperr.Conflict, "already_subscribed",
			"the organization already has a subscription: change or cancel it in the Stripe customer portal")
	}
	customer, err := s.customer(ctx, u.OrgID)
	if err != nil {
		return Checkout{}, err
	}
	org := strconv.FormatInt(u.OrgID, 10)
	meta := map[string]string{"org_id": org, "tier": t.Name}
	cs, err := s.sc.V1CheckoutSessions.Create(ctx, &stripe.CheckoutSessionCreateParams{
		Mode: stripe.String(string(stripe.CheckoutSessionModeSubscription)), Customer: stripe.String(customer),
		ClientReferenceID: stripe.String(org), Metadata: meta,
		SuccessURL: stripe.String(ret.SuccessURL), CancelURL: stripe.String(ret.CancelURL),
		SubscriptionData: &stripe.CheckoutSessionCreateSubscriptionDataParams{Metadata: meta},
		LineItems:        []*stripe.CheckoutSessionCreateLineItemParams{{Price: stripe.String(t.StripePriceID), Quantity: stripe.Int64(1)}},
	})
	if err != nil {
		return Checkout{}, stripeErr(err, "creating a Checkout session")
	}
	if err := s.store.RecordCheckoutSession(ctx, u, models.CheckoutSession{SessionID: cs.ID, Mode: models.CheckoutSubscription, TierID: &t.ID}); err != nil {
		return Checkout{}, err
	}
	return Checkout{SessionID: cs.ID, URL: cs.URL}, nil
}

// PortalURL opens Stripe's customer portal for the organization: cards,
// invoices, and changing or cancelling the subscription. Owners may.
func (s *Service) PortalURL(ctx context.Context, u models.Member, returnURL string) (string, error) {
	if err := s.ready(u, "manage its payments"); err != nil {
		return "", err
	}
	acc, err := s.store.PaymentAccount(ctx, u.OrgID)
	if err != nil {
		return "", err
	}
	if acc.CustomerID == "" {
		return "", apperr.WithReason(apperr.Unprocessable, "no_customer",
			"the organization has not paid through Stripe yet: the customer portal opens after its first payment")
	}
	p, err := s.sc.V1BillingPortalSessions.Create(ctx, &stripe.BillingPortalSessionCreateParams{
		Customer: stripe.String(acc.CustomerID), ReturnURL: stripe.String(returnURL)})
	if err != nil {
		return "", stripeErr(err, "opening the customer portal")
	}
	if err := s.store.AuditPayment(ctx, u, "payments.portal", acc.CustomerID, "opened the Stripe customer portal"); err != nil {
		return "", err
	}
	return p.URL, nil
}

// Account is the organization's payment account, for its pages.
func (s *Service) Account(ctx context.Context, orgID int64) (models.PaymentAccount, error) {
	return s.store.PaymentAccount(ctx, orgID)
}

// RecentTopUps are the organization's latest top-ups and their state.
func (s *Service) RecentTopUps(ctx context.Context, orgID int64) ([]models.CheckoutSession, error) {
	return s.store.RecentTopUps(ctx, orgID, 10)
}

// ready refuses while payments are off, and to anyone but an owner.
func (s *Service) ready(u models.Member, what string) error {
	if err := accounts.NeedOwner(u, what); err != nil {
		return err
	}
	if !s.Enabled() {
		return errOff
	}
	return nil
}

// customer is the organization's Stripe customer, created on first use.
// The idempotency key makes two first uses at once (two nodes, two tabs)
// get the same customer from Stripe.
func (s *Service) customer(ctx context.Context, orgID int64) (string, error) {
	acc, err := s.store.PaymentAccount(ctx, orgID)
	if err != nil || acc.CustomerID != "" {
		return acc.CustomerID, err
	}
	o, err := s.store.Organization(ctx, orgID)
	if err != nil {
		return "", err
	}
	params := &stripe.CustomerCreateParams{Name: stripe.String(o.Name), Metadata: map[string]string{"org_id": strconv.FormatInt(orgID, 10)}}
	params.SetIdempotencyKey("sluice-customer-" + strconv.FormatInt(orgID, 10))
	c, err := s.sc.V1Customers.Create(ctx, params)
	if err != nil {
		return "", stripeErr(err, "creating the Stripe customer")
	}
	return s.store.SetStripeCustomer(ctx, orgID, c.ID)
}

// stripeErr is a failed Stripe call as the user sees it: Stripe's own
// message for a card or a request it refused (it is written for people and
// holds no secret), unavailable for the rest, the cause kept for the logs.
func stripeErr(err error, doing string) error {
	if se, ok := err.(*stripe.Error); ok {
		switch se.Type {
		case stripe.ErrorTypeCard:
			return &apperr.Error{Code: apperr.Unprocessable, Reason: "card_error", Message: "Stripe: " + se.Msg, Cause: err}
		case stripe.ErrorTypeInvalidRequest:
			return &apperr.Error{Code: apperr.BadUpstream, Reason: "stripe_refused", Message: "Stripe refused " + doing + ": " + se.Msg, Cause: err}
		}
	}
	return &apperr.Error{Code: apperr.Unavailable, Reason: "stripe_unavailable",
		Message: "Stripe could not be reached while " + doing + "; try again shortly", Cause: fmt.Errorf("%s: %w", doing, err)}
}
