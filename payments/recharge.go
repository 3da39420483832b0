package payments

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/stripe/stripe-go/v82"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// RechargeKind marks an auto-recharge's PaymentIntent.
const RechargeKind = "auto_recharge"

// SetAutoRecharge turns the organization's auto-recharge on (below
// threshold, charge amount to the saved card, rounded half-up to the cent
// once and within the top-up bounds) or, with nil values, off. Owners may.
func (s *Service) SetAutoRecharge(ctx context.Context, u models.Member, threshold, amount *money.Amount) (models.PaymentAccount, error) {
	if err := accounts.NeedOwner(u, "set its auto-recharge"); err != nil {
		return models.PaymentAccount{}, err
	}
	if !s.Enabled() {
		return models.PaymentAccount{}, errOff
	}
	if (threshold == nil) != (amount == nil) {
		return models.PaymentAccount{}, apperr.Field(apperr.Invalid, "incomplete_recharge", "threshold",
			"give both threshold and amount to turn auto-recharge on, or neither to turn it off")
	}
	if amount != nil {
		a, t := FromCents(ToCents(*amount)), FromCents(ToCents(*threshold))
		if a < s.cfg.TopUpMin || a > s.cfg.TopUpMax {
			return models.PaymentAccount{}, apperr.Field(apperr.Unprocessable, "amount_out_of_bounds", "amount",
				fmt.Sprintf("an auto-recharge must be from %s to %s %s", s.cfg.TopUpMin.StringCents(), s.cfg.TopUpMax.StringCents(), s.Currency()))
		}
		if t < 0 || t > s.cfg.TopUpMax {
			return models.PaymentAccount{}, apperr.Field(apperr.Unprocessable, "threshold_out_of_bounds", "threshold",
				fmt.Sprintf("the threshold must be from 0.00 to %s %s", s.cfg.TopUpMax.StringCents(), s.Currency()))
		}
		acc, err := s.store.PaymentAccount(ctx, u.OrgID)
		if err != nil {
			return acc, err
		}
		if acc.CustomerID == "" {
			return acc, apperr.WithReason(apperr.Unprocessable, "no_saved_card",
				"top up once through Checkout first: its card is saved for the auto-recharge")
		}
		threshold, amount = &t, &a
	}
	return s.store.SetAutoRecharge(ctx, u, threshold, amount)
}

// Recharge charges the organization's saved card its auto-recharge amount
// when balance is below its threshold and no recharge is under way: an
// off-session PaymentIntent with the customer's default payment method.
// The balance is credited when Stripe's payment_intent.succeeded arrives;
// a refusal is kept on the account (shown on the dashboard) and passed to
// the mail hook. It reports whether a charge was made.
func (s *Service) Recharge(ctx context.Context, orgID int64, balance money.Amount) (bool, error) {
	if !s.Enabled() {
		return false, nil
	}
	acc, err := s.store.PaymentAccount(ctx, orgID)
	if err != nil || acc.RechargeThreshold == nil || acc.RechargeAmount == nil || balance >= *acc.RechargeThreshold || acc.CustomerID == "" {
		return false, err
	}
	claimed, err := s.store.StartRecharge(ctx, orgID, s.now())
	if err != nil || !claimed {
		return false, err
	}
	pi, err := s.chargeSaved(ctx, acc)
	if err != nil {
		msg := apperr.As(err).Message
		if ferr := s.store.FailRecharge(ctx, orgID, msg, s.now()); ferr != nil {
			return false, ferr
		}
		s.mail(ctx, Failure{OrgID: orgID, Kind: FailedRecharge, At: s.now(), Message: "The auto-recharge of your Sluice balance failed: " + msg})
		return false, err
	}
	s.log.Info("auto-recharge charged", "org_id", orgID, "payment_intent", pi, "cents", ToCents(*acc.RechargeAmount))
	return true, nil
}

// chargeSaved creates and confirms the off-session PaymentIntent; the
// idempotency key is the claim's, so a retried request charges once.
func (s *Service) chargeSaved(ctx context.Context, acc models.PaymentAccount) (string, error) {
	c, err := s.sc.V1Customers.Retrieve(ctx, acc.CustomerID, nil)
	if err != nil {
		return "", stripeErr(err, "reading the saved card")
	}
	pm := ""
	if c.InvoiceSettings != nil && c.InvoiceSettings.DefaultPaymentMethod != nil {
		pm = c.InvoiceSettings.DefaultPaymentMethod.ID
	}
	if pm == "" {
		for m, err := range s.sc.V1Customers.ListPaymentMethods(ctx, &stripe.CustomerListPaymentMethodsParams{Customer: stripe.String(acc.CustomerID)}) {
			if err != nil {
				return "", stripeErr(err, "reading the saved card")
			}
			pm = m.ID
			break
		}
	}
	if pm == "" {
		return "", apperr.WithReason(apperr.Unprocessable, "no_saved_card", "no card is saved: top up once through Checkout")
	}
	org := strconv.FormatInt(acc.OrgID, 10)
	params := &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(ToCents(*acc.RechargeAmount)), Currency: stripe.String(s.cfg.Currency),
		Customer: stripe.String(acc.CustomerID), PaymentMethod: stripe.String(pm), OffSession: stripe.Bool(true), Confirm: stripe.Bool(true),
		Metadata: map[string]string{"org_id": org, "kind": RechargeKind}, Description: stripe.String("Sluice auto-recharge")}
	params.SetIdempotencyKey(fmt.Sprintf("sluice-recharge-%s-%d", org, s.now().Unix()))
	pi, err := s.sc.V1PaymentIntents.Create(ctx, params)
	if err != nil {
		return "", stripeErr(err, "charging the saved card")
	}
	return pi.ID, nil
}

// paymentIntentChanged applies an auto-recharge's outcome: a success
// credits its amount, a failure is kept and mailed. The credit is asked
// before the event is recorded, so a node stopping in between leaves
// nothing uncredited; a redelivery finds the event and asks nothing, and
// two deliveries racing each other are credited once by the crediter,
// idempotent on the PaymentIntent's id.
func (s *Service) paymentIntentChanged(ctx context.Context, pe models.PaymentEvent, typ stripe.EventType, raw json.RawMessage) (string, error) {
	pi, err := decode[stripe.PaymentIntent](raw)
	if err != nil {
		return s.store.RecordPaymentEvent(ctx, pe, "refused: the payment intent does not parse")
	}
	pe.ObjectID = pi.ID
	if pi.Metadata["kind"] != RechargeKind {
		return s.store.RecordPaymentEvent(ctx, pe, "ignored: not an auto-recharge (Checkout's are applied from their session)")
	}
	org, err := s.orgFor(ctx, pi.Metadata, customerID(pi.Customer))
	if err != nil || org == 0 {
		if err != nil {
			return "", err
		}
		return s.store.RecordPaymentEvent(ctx, pe, "refused: the payment is no organization's")
	}
	pe.OrgID = &org
	if typ == "payment_intent.payment_failed" {
		msg := "the card was declined"
		if pi.LastPaymentError != nil && pi.LastPaymentError.Msg != "" {
			msg = pi.LastPaymentError.Msg
		}
		outcome, err := s.store.RecordRechargeFailure(ctx, pe, org, msg)
		if err == nil {
			s.mail(ctx, Failure{OrgID: org, Kind: FailedRecharge, At: pe.CreatedAt, Message: "The auto-recharge of your Sluice balance failed: " + msg})
		}
		return outcome, err
	}
	if string(pi.Currency) != s.cfg.Currency {
		return s.store.RecordPaymentEvent(ctx, pe, "refused: paid in "+string(pi.Currency)+", not "+s.cfg.Currency)
	}
	if s.balance == nil {
		return "", apperr.New(apperr.Unavailable, "no balance is wired to credit")
	}
	if _, err := s.store.PaymentEventByID(ctx, pe.EventID); err == nil {
		return "", models.ErrEventSeen // a redelivery: not asked to credit again
	}
	amount := FromCents(pi.AmountReceived)
	if _, err := s.balance.CreditBalance(ctx, org, amount, TopUpKind, pi.ID, "auto-recharge of "+amount.StringCents()+" "+s.Currency()); err != nil {
		return "", err
	}
	return s.store.RecordRechargeSuccess(ctx, pe, org, pi.AmountReceived)
}

// RechargeLow runs Recharge for every organization with an auto-recharge,
// at its balance now; without a BalanceReader it does nothing.
func (s *Service) RechargeLow(ctx context.Context) (int, error) {
	if !s.Enabled() || s.reader == nil {
		return 0, nil
	}
	ids, err := s.store.AutoRechargeOrgs(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		bal, err := s.reader.Balance(ctx, id)
		if err != nil {
			return n, err
		}
		charged, err := s.Recharge(ctx, id, bal)
		if err != nil && apperr.CodeOf(err) == apperr.Internal {
			return n, err
		}
		if charged {
			n++
		}
	}
	return n, nil
}
