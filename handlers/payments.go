package handlers

import (
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/payments"
	"github.com/sluicehq/sluice/web"
)

// stripeWebhook is POST /webhooks/stripe, outside every authentication:
// Stripe's signature is the authentication. The body is read whole, up to
// payments.MaxEventBytes, before anything else, since the signature is
// over its exact bytes. A refused delivery is logged with its reason and
// size, never its body; an event that could not be applied is answered
// 5xx, so Stripe delivers it again.
func (m *manage) stripeWebhook(c *gin.Context) {
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, payments.MaxEventBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeAPIError(c, m.log, apperr.New(apperr.TooLarge, "a Stripe event is at most %d bytes", payments.MaxEventBytes))
			return
		}
		writeAPIError(c, m.log, apperr.New(apperr.Invalid, "the body could not be read"))
		return
	}
	ev, err := m.Payments.Verify(body, c.GetHeader("Stripe-Signature"))
	if err != nil {
		e := apperr.As(err)
		m.log.Warn("stripe webhook refused", "reason", e.Reason, "bytes", len(body), "client", c.ClientIP(), "request_id", requestID(c))
		writeAPIError(c, m.log, err)
		return
	}
	res, err := m.Payments.Apply(c.Request.Context(), ev)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"received": true, "event_id": ev.ID, "type": ev.Type, "duplicate": res.Duplicate, "outcome": res.Outcome})
}

// paymentsOut is the organization's payments as the API shows them.
type paymentsOut struct {
	Enabled      bool          `json:"enabled"`
	Currency     string        `json:"currency"`
	TopUpMin     string        `json:"top_up_min"`
	TopUpMax     string        `json:"top_up_max"`
	Customer     bool          `json:"stripe_customer"`
	Subscription *subscription `json:"subscription"`
	GraceEndsAt  *time.Time    `json:"grace_ends_at"`
	GraceReason  string        `json:"grace_reason,omitempty"`
	AutoRecharge *autoRecharge `json:"auto_recharge"`
	RechargeErr  string        `json:"auto_recharge_error,omitempty"`
}

type subscription struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

type autoRecharge struct {
	Threshold string `json:"threshold"`
	Amount    string `json:"amount"`
}

// getPayments is GET /api/payments.
func (m *manage) getPayments(c *gin.Context) {
	u := currentUser(c)
	acc, err := m.Payments.Account(c.Request.Context(), u.OrgID)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	lo, hi := m.Payments.TopUpBounds()
	out := paymentsOut{Enabled: m.Payments.Enabled(), Currency: m.Payments.Currency(), TopUpMin: lo.StringCents(), TopUpMax: hi.StringCents(),
		Customer: acc.CustomerID != "", GraceEndsAt: acc.GraceEndsAt, GraceReason: acc.GraceReason, RechargeErr: acc.RechargeError}
	if acc.SubscriptionID != "" {
		out.Subscription = &subscription{ID: acc.SubscriptionID, Status: acc.SubscriptionStatus}
	}
	if acc.RechargeThreshold != nil && acc.RechargeAmount != nil {
		out.AutoRecharge = &autoRecharge{Threshold: acc.RechargeThreshold.StringCents(), Amount: acc.RechargeAmount.StringCents()}
	}
	c.JSON(http.StatusOK, out)
}

// createTopUp is POST /api/payments/top-ups {amount}: a Checkout session
// for the amount rounded half-up to the cent, which the answer shows.
func (m *manage) createTopUp(c *gin.Context) {
	var in struct {
		Amount *string `json:"amount"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	if in.Amount == nil {
		writeAPIError(c, m.log, apperr.Field(apperr.Invalid, "missing_amount", "amount", `amount is required, a decimal string such as "25.00"`))
		return
	}
	amount, err := money.ParseAmount(*in.Amount)
	if err != nil {
		writeAPIError(c, m.log, apperr.Field(apperr.Invalid, "invalid_amount", "amount", `amount must be a decimal string such as "25.00"`))
		return
	}
	co, err := m.Payments.StartTopUp(c.Request.Context(), currentUser(c), amount, web.CheckoutReturn(c))
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusCreated, gin.H{"session_id": co.SessionID, "checkout_url": co.URL,
		"amount": payments.FromCents(co.AmountCents).StringCents(), "amount_cents": co.AmountCents, "currency": m.Payments.Currency()})
}

// createSubscription is POST /api/payments/subscriptions {tier}.
func (m *manage) createSubscription(c *gin.Context) {
	var in struct {
		Tier string `json:"tier"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	co, err := m.Payments.StartSubscription(c.Request.Context(), currentUser(c), in.Tier, web.CheckoutReturn(c))
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusCreated, gin.H{"session_id": co.SessionID, "checkout_url": co.URL, "tier": in.Tier})
}

// openPortal is POST /api/payments/portal: a link to Stripe's customer
// portal, returning to the payments page.
func (m *manage) openPortal(c *gin.Context) {
	url, err := m.Payments.PortalURL(c.Request.Context(), currentUser(c), web.CheckoutReturn(c).CancelURL)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"url": url})
}

// putAutoRecharge is PUT /api/payments/auto-recharge {threshold, amount}:
// both decimal strings to turn it on, both null to turn it off.
func (m *manage) putAutoRecharge(c *gin.Context) {
	var in struct {
		Threshold *string `json:"threshold"`
		Amount    *string `json:"amount"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	parse := func(name string, s *string) (*money.Amount, error) {
		if s == nil {
			return nil, nil
		}
		a, err := money.ParseAmount(*s)
		if err != nil {
			return nil, apperr.Field(apperr.Invalid, "invalid_amount", name, name+` must be a decimal string such as "10.00", or null`)
		}
		return &a, nil
	}
	threshold, err := parse("threshold", in.Threshold)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	amount, err := parse("amount", in.Amount)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	acc, err := m.Payments.SetAutoRecharge(c.Request.Context(), currentUser(c), threshold, amount)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	out := gin.H{"auto_recharge": nil}
	if acc.RechargeThreshold != nil && acc.RechargeAmount != nil {
		out["auto_recharge"] = autoRecharge{Threshold: acc.RechargeThreshold.StringCents(), Amount: acc.RechargeAmount.StringCents()}
	}
	c.JSON(http.StatusOK, out)
}
