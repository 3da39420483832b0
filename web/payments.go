package web

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/payments"
	"github.com/sluicehq/sluice/templates"
)

// paymentsFlashes are the fixed outcomes a redirect may name with ?done=.
var paymentsFlashes = map[string]templates.FormNotice{
	"auto-recharge":     {Form: templates.FormRecharge, Flash: "Auto-recharge saved."},
	"auto-recharge-off": {Form: templates.FormRecharge, Flash: "Auto-recharge turned off."},
}

// PaymentsPath is the payments page, where Checkout sends the owner back.
const PaymentsPath = "/billing/payments"

// CheckoutReturn are the pages Stripe Checkout returns to, on the host the
// request came to. Coming back changes nothing: the payments page only
// says Stripe's event will.
func CheckoutReturn(c *gin.Context) payments.Return {
	base := baseURL(c) + PaymentsPath
	return payments.Return{SuccessURL: base + "?checkout=success", CancelURL: base + "?checkout=cancel"}
}

// baseURL is the scheme and host the browser reached Sluice at.
func baseURL(c *gin.Context) string {
	scheme := "http"
	if OverTLS(c) {
		scheme = "https"
	}
	return scheme + "://" + c.Request.Host
}

// Payments shows the payments page. ?checkout= is where Stripe sent the
// owner back; it is only shown, never acted on.
func (p *Pages) Payments(c *gin.Context) {
	v := templates.PaymentsView{Notice: paymentsFlashes[c.Query("done")]}
	switch c.Query("checkout") {
	case "success", "cancel":
		v.Returned = c.Query("checkout")
	}
	p.showPayments(c, http.StatusOK, v)
}

// showPayments renders the payments page with what a form adds to it.
func (p *Pages) showPayments(c *gin.Context, status int, v templates.PaymentsView) {
	page, u, o, err := p.page(c, "Payments")
	if err != nil {
		p.fail(c, err)
		return
	}
	ctx := c.Request.Context()
	v.Enabled, v.CanEdit = p.payments.Enabled(), canManageBilling(u)
	v.Currency = p.payments.Currency()
	lo, hi := p.payments.TopUpBounds()
	v.Min, v.Max = lo.StringCents(), hi.StringCents()
	acc, err := p.payments.Account(ctx, o.ID)
	if err != nil {
		p.fail(c, err)
		return
	}
	v.Subscription = templates.SubscriptionView{TierName: o.Tier.Name, Status: acc.SubscriptionStatus, HasPortal: acc.CustomerID != ""}
	if acc.GraceEndsAt != nil {
		v.Subscription.GraceEnds, v.Subscription.Reason = formatIn(*acc.GraceEndsAt, orgZone(o)), upperFirst(acc.GraceReason)
	}
	tiers, err := p.store.Tiers(ctx)
	if err != nil {
		p.fail(c, err)
		return
	}
	for _, t := range tiers {
		if t.StripePriceID != "" {
			v.Subscription.PaidTiers = append(v.Subscription.PaidTiers, templates.PaidTier{Name: t.Name, Summary: tierSummary(t), Current: t.ID == o.TierID})
		}
	}
	v.Recharge = rechargeView(acc)
	tops, err := p.payments.RecentTopUps(ctx, o.ID)
	if err != nil {
		p.fail(c, err)
		return
	}
	for _, cs := range tops {
		row := templates.TopUpRow{SessionID: cs.SessionID, Started: formatTime(cs.CreatedAt),
			Amount: payments.FromCents(cs.AmountCents).StringCents() + " " + v.Currency, State: "waiting"}
		switch {
		case cs.CreditedAt != nil:
			row.State = "credited"
		case cs.Status == models.CheckoutCompleted:
			row.State = "paid"
		}
		v.TopUps = append(v.TopUps, row)
	}
	render(c, status, templates.Payments(page, v))
}

func rechargeView(acc models.PaymentAccount) templates.RechargeView {
	r := templates.RechargeView{Error: acc.RechargeError, CanSet: acc.CustomerID != ""}
	if acc.RechargeThreshold != nil && acc.RechargeAmount != nil {
		r.On, r.Threshold, r.Amount = true, acc.RechargeThreshold.StringCents(), acc.RechargeAmount.StringCents()
	}
	if acc.RechargeFailedAt != nil {
		r.FailedAt = formatTime(*acc.RechargeFailedAt)
	}
	return r
}

// TopUp creates a Checkout session for the amount asked and shows the link
// to it with the amount Stripe will charge, rounded half-up to the cent.
// (A link rather than a redirect: the pages' CSP lets forms post to Sluice
// only, and the owner sees the amount before leaving.)
func (p *Pages) TopUp(c *gin.Context) {
	u, _ := userOf(c)
	raw := strings.TrimSpace(c.PostForm("amount"))
	v := templates.PaymentsView{TopUpInput: raw}
	amount, err := money.ParseAmount(raw)
	if err != nil {
		p.paymentFailed(c, templates.FormTopUp, apperr.Field(apperr.Invalid, "invalid_amount", "amount",
			`Amount must be a decimal number of `+p.payments.Currency()+` such as "25.00".`), v)
		return
	}
	co, err := p.payments.StartTopUp(c.Request.Context(), u, amount, CheckoutReturn(c))
	if err != nil {
		p.paymentFailed(c, templates.FormTopUp, err, v)
		return
	}
	charged := payments.FromCents(co.AmountCents).StringCents() + " " + p.payments.Currency()
	v.Checkout = &templates.CheckoutLink{URL: co.URL, What: "a top-up of " + charged, Charged: charged}
	p.showPayments(c, http.StatusOK, v)
}

// Subscribe creates a Checkout session in subscription mode for a paid
// tier and shows the link to it.
func (p *Pages) Subscribe(c *gin.Context) {
	u, _ := userOf(c)
	tier := c.PostForm("tier")
	co, err := p.payments.StartSubscription(c.Request.Context(), u, tier, CheckoutReturn(c))
	if err != nil {
		p.paymentFailed(c, templates.FormSubscribe, err, templates.PaymentsView{})
		return
	}
	p.showPayments(c, http.StatusOK, templates.PaymentsView{Checkout: &templates.CheckoutLink{URL: co.URL, What: "the " + tier + " tier"}})
}

// Portal shows the link to Stripe's customer portal.
func (p *Pages) Portal(c *gin.Context) {
	u, _ := userOf(c)
	url, err := p.payments.PortalURL(c.Request.Context(), u, baseURL(c)+PaymentsPath)
	if err != nil {
		p.paymentFailed(c, templates.FormSubscribe, err, templates.PaymentsView{})
		return
	}
	p.showPayments(c, http.StatusOK, templates.PaymentsView{Checkout: &templates.CheckoutLink{URL: url, What: "Stripe's customer portal"}})
}

// SetAutoRecharge saves the auto-recharge form; both fields empty turn it
// off.
func (p *Pages) SetAutoRecharge(c *gin.Context) {
	u, _ := userOf(c)
	rawT, rawA := strings.TrimSpace(c.PostForm("threshold")), strings.TrimSpace(c.PostForm("amount"))
	var threshold, amount *money.Amount
	for _, f := range []struct {
		raw, name string
		dst       **money.Amount
	}{{rawT, "threshold", &threshold}, {rawA, "amount", &amount}} {
		if f.raw == "" {
			continue
		}
		a, err := money.ParseAmount(f.raw)
		if err != nil {
			p.paymentFailed(c, templates.FormRecharge, apperr.Field(apperr.Invalid, "invalid_amount", f.name,
				"The "+f.name+` must be a decimal number such as "10.00", or empty.`), templates.PaymentsView{})
			return
		}
		*f.dst = &a
	}
	if _, err := p.payments.SetAutoRecharge(c.Request.Context(), u, threshold, amount); err != nil {
		p.paymentFailed(c, templates.FormRecharge, err, templates.PaymentsView{})
		return
	}
	done := "auto-recharge"
	if amount == nil {
		done = "auto-recharge-off"
	}
	c.Redirect(http.StatusSeeOther, PaymentsPath+"?done="+done+"#"+templates.FormRecharge)
}

// paymentFailed shows the payments page again with a form's error beside
// it: refused input is 422 (409 for a conflict); other refusals and
// failures get the error page.
func (p *Pages) paymentFailed(c *gin.Context, form string, err error, v templates.PaymentsView) {
	e := apperr.As(err)
	status := http.StatusUnprocessableEntity
	switch e.Code {
	case apperr.Invalid, apperr.Unprocessable, apperr.NotFound:
	case apperr.Conflict:
		status = http.StatusConflict
	default:
		p.fail(c, err)
		return
	}
	v.Notice = templates.FormNotice{Form: form, Error: e.Message}
	p.showPayments(c, status, v)
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
