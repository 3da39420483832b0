package web

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/billing"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/templates"
)

// billingFlashes are the fixed outcomes a redirect may name with ?done=,
// each shown beside its form.
var billingFlashes = map[string]templates.FormNotice{
	"budget":          {Form: templates.FormBudget, Flash: "Budget saved. It applies from the next request."},
	"budget-removed":  {Form: templates.FormBudget, Flash: "Budget removed: spending is no longer limited by a budget."},
	"time-zone":       {Form: templates.FormTimeZone, Flash: "Time zone saved. The charts count days in it now."},
	"webhook-off":     {Form: templates.FormWebhook, Flash: "Webhook removed: budget alerts are no longer posted."},
	"upgrade":         {Form: templates.FormUpgrade, Flash: "Upgrade requested. An admin will answer it."},
	"low-balance":     {Form: templates.FormLowBalance, Flash: "Alert saved. It applies from the next request."},
	"low-balance-off": {Form: templates.FormLowBalance, Flash: "Alert removed: a low balance is no longer announced."},
}

// dashboardState is what a billing form's answer adds to the dashboard:
// the form's outcome, what to refill it with, and a new webhook's secret.
type dashboardState struct {
	notice        templates.FormNotice
	budget        *templates.BudgetForm
	timeZone      string
	webhookURL    string
	webhookSecret string
	upgrade       templates.UpgradeForm
	// The balance's forms, refilled after a refusal.
	redeemInput, thresholdInput string
}

// canManageBilling says whether u may change the organization's budget,
// time zone, webhook and plan: its owners may.
func canManageBilling(u models.Member) bool { return u.IsOwner() }

// ownerOnly refuses a member before their form is even read, in the words
// the billing service uses.
func ownerOnly(u models.Member, what string) error { return accounts.NeedOwner(u, what) }

// SetBudget saves the monthly budget form: a limit in dollars (empty
// removes the budget) and whether it is a hard stop.
func (p *Pages) SetBudget(c *gin.Context) {
	u, _ := userOf(c)
	if !canManageBilling(u) {
		p.fail(c, ownerOnly(u, "set its budget"))
		return
	}
	form := templates.BudgetForm{MonthlyLimit: strings.TrimSpace(c.PostForm("monthly_limit")), HardStop: c.PostForm("hard_stop") != ""}
	b := models.Budget{HardStop: form.HardStop}
	if form.MonthlyLimit != "" {
		a, err := money.ParseAmount(form.MonthlyLimit)
		if err != nil {
			p.formFailed(c, templates.FormBudget, apperr.Field(apperr.Invalid, "invalid_amount", "monthly_limit",
				`Monthly limit must be a decimal string of dollars such as "10.00", or empty to remove the budget.`), dashboardState{budget: &form})
			return
		}
		b.Limit = &a
	}
	if _, err := p.billing.SetBudget(c.Request.Context(), u, b); err != nil {
		p.formFailed(c, templates.FormBudget, err, dashboardState{budget: &form})
		return
	}
	done := "budget"
	if b.Limit == nil {
		done = "budget-removed"
	}
	c.Redirect(http.StatusSeeOther, "/dashboard?done="+done+"#"+templates.FormBudget)
}

// SetTimeZone saves the IANA zone the charts count days in.
func (p *Pages) SetTimeZone(c *gin.Context) {
	u, _ := userOf(c)
	if !canManageBilling(u) {
		p.fail(c, ownerOnly(u, "set its time zone"))
		return
	}
	zone := strings.TrimSpace(c.PostForm("time_zone"))
	if err := p.billing.SetTimeZone(c.Request.Context(), u, zone); err != nil {
		p.formFailed(c, templates.FormTimeZone, err, dashboardState{timeZone: zone})
		return
	}
	c.Redirect(http.StatusSeeOther, "/dashboard?done=time-zone#"+templates.FormTimeZone)
}

// SetWebhook saves where budget alerts are posted and shows the new
// signing secret, this once; an empty URL turns the webhook off.
func (p *Pages) SetWebhook(c *gin.Context) {
	u, _ := userOf(c)
	if !canManageBilling(u) {
		p.fail(c, ownerOnly(u, "set its webhook"))
		return
	}
	raw := strings.TrimSpace(c.PostForm("webhook_url"))
	secret, err := p.billing.SetWebhook(c.Request.Context(), u, raw)
	if err != nil {
		p.formFailed(c, templates.FormWebhook, err, dashboardState{webhookURL: raw})
		return
	}
	if secret == "" {
		c.Redirect(http.StatusSeeOther, "/dashboard?done=webhook-off#"+templates.FormWebhook)
		return
	}
	p.showDashboard(c, http.StatusOK, dashboardState{webhookSecret: secret, notice: templates.FormNotice{Form: templates.FormWebhook,
		Flash: "Webhook saved. Budget alerts will be posted to it, signed with the secret below."}})
}

// RequestUpgrade files the organization's request to move to another tier.
func (p *Pages) RequestUpgrade(c *gin.Context) {
	u, _ := userOf(c)
	if !canManageBilling(u) {
		p.fail(c, ownerOnly(u, "request an upgrade"))
		return
	}
	form := templates.UpgradeForm{Tier: c.PostForm("tier"), Note: c.PostForm("note")}
	if _, err := p.billing.RequestUpgrade(c.Request.Context(), u, form.Tier, form.Note); err != nil {
		p.formFailed(c, templates.FormUpgrade, err, dashboardState{upgrade: form})
		return
	}
	c.Redirect(http.StatusSeeOther, "/dashboard?done=upgrade#"+templates.FormUpgrade)
}

// InvoiceCSV downloads one of the organization's invoices as CSV; another
// organization's invoice is not found.
func (p *Pages) InvoiceCSV(c *gin.Context) {
	const missing = "No such invoice."
	id, ok := p.pathID(c, missing)
	if !ok {
		return
	}
	u, _ := userOf(c)
	inv, err := p.billing.Invoice(c.Request.Context(), u.OrgID, id)
	if err != nil {
		if apperr.CodeOf(err) == apperr.NotFound {
			err = apperr.New(apperr.NotFound, missing)
		}
		p.fail(c, err)
		return
	}
	c.Header("Content-Disposition", `attachment; filename="sluice-invoice-`+inv.PeriodStart.Format("2006-01")+`.csv"`)
	c.Header("Cache-Control", "no-store")
	c.Data(http.StatusOK, "text/csv; charset=utf-8", inv.CSV())
}

// formFailed shows the dashboard again with a billing form's error beside
// it: input the service refused is 422 (409 for a conflict); refusals of
// the user, and failures, get the error page.
func (p *Pages) formFailed(c *gin.Context, form string, err error, st dashboardState) {
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
	st.notice = templates.FormNotice{Form: form, Error: e.Message}
	p.showDashboard(c, status, st)
}

// billingView gathers the dashboard's money side.
func (p *Pages) billingView(ctx context.Context, u models.Member, o models.Organization, loc *time.Location, q usageQuery,
	toks []models.APIToken, st dashboardState) (*templates.BillingView, error) {
	// The chart's hours, the budget and the draft invoice each read the
	// rollups: they go at once, each on its own connection, so the page
	// waits for the slowest rather than their sum.
	var (
		wg                                           sync.WaitGroup
		usage                                        templates.UsageView
		budget                                       billing.BudgetState
		invoices                                     templates.InvoicesView
		balance                                      templates.BalanceView
		usageErr, budgetErr, invoicesErr, balanceErr error
	)
	wg.Add(4)
	go func() { defer wg.Done(); usage, usageErr = p.usageView(ctx, o.ID, loc, q, toks) }()
	go func() { defer wg.Done(); budget, budgetErr = p.billing.Budget(ctx, o.ID) }()
	go func() { defer wg.Done(); invoices, invoicesErr = p.invoicesView(ctx, o.ID) }()
	go func() { defer wg.Done(); balance, balanceErr = p.balanceView(ctx, u, st) }()
	plan, planErr := p.planView(ctx, o, st.upgrade)
	wg.Wait()
	if err := cmp.Or(usageErr, budgetErr, invoicesErr, balanceErr, planErr); err != nil {
		return nil, err
	}
	plan.ReadOnly = !canManageBilling(u)
	v := &templates.BillingView{Usage: usage, Spend: spendView(budget, o.Tier.Name, loc, u.IsOwner()), Invoices: invoices, Plan: plan, Notice: st.notice,
		Balance: balance}
	if o.Tier.Prepaid() {
		v.Spend.CreditUsedUp = false // the balance limits spending, not the included credit
	}
	v.Settings = templates.SettingsView{CanEdit: canManageBilling(u), TimeZone: loc.String(), TimeZoneInput: st.timeZone,
		WebhookURL: o.WebhookURL, WebhookInput: st.webhookURL, WebhookSecret: st.webhookSecret,
		Budget: templates.BudgetForm{HardStop: true}}
	if budget.Limit != nil {
		v.Settings.Budget = templates.BudgetForm{MonthlyLimit: budget.Limit.String(), HardStop: budget.HardStop}
	}
	if st.budget != nil {
		v.Settings.Budget = *st.budget
	}
	return v, nil
}

// spendView is this month's spending in words, on the gauge and, past
// 50%, 80% or 100% of the budget, in a banner.
func spendView(st billing.BudgetState, tier string, loc *time.Location, owner bool) templates.SpendView {
	v := templates.SpendView{Spent: dollars(st.Spent), HardStop: st.HardStop, Overage: st.Overage, Resets: formatIn(st.PeriodEnd, loc),
		TierName: tier}
	if st.Reserved != 0 {
		v.Reserved = dollars(st.Reserved)
	}
	v.Gauge = spendGauge("spend-gauge", st)
	if st.CreditWithheld && st.TierCredit > 0 {
		v.WithheldCredit, v.Owner = dollars(st.TierCredit), owner
	}
	if st.Credit > 0 {
		v.Credit = dollars(st.Credit)
		if st.TierCredit != st.Credit {
			v.PlanCredit = dollars(st.TierCredit)
		}
		v.CreditUsedUp = st.Overage == models.OverageBlock && st.Spent >= st.Credit
	}
	if st.Limit != nil {
		v.Budget = dollars(*st.Limit)
		if pct := metering.Reached(*st.Limit, st.Spent); pct > 0 {
			v.Banner = &templates.BudgetBanner{Percent: pct, Spent: v.Spent, Budget: v.Budget, HardStop: st.HardStop, Resets: v.Resets}
		}
	}
	return v
}

// spendGauge draws this month's spending against the included credit and
// the budget, where there are any: the dashboard's and the admin's gauge.
func spendGauge(id string, st billing.BudgetState) templates.Gauge {
	g := templates.Gauge{ID: id, Title: "Spend this month", Spent: drawDollars(st.Spent), SpentLabel: dollars(st.Spent)}
	if st.Credit > 0 {
		g.Credit, g.CreditLabel = drawDollars(st.Credit), dollars(st.Credit)
	}
	if st.Limit != nil {
		g.Budget, g.BudgetLabel = drawDollars(*st.Limit), dollars(*st.Limit)
	}
	return g
}

// invoicesView is the current month's draft with its lines, and the rest.
func (p *Pages) invoicesView(ctx context.Context, orgID int64) (templates.InvoicesView, error) {
	invs, err := p.billing.Invoices(ctx, orgID)
	if err != nil {
		return templates.InvoicesView{}, err
	}
	var v templates.InvoicesView
	current := metering.Period(p.now())
	for _, inv := range invs {
		if v.Draft == nil && inv.Status == billing.Draft && inv.PeriodStart.Equal(current) {
			v.Draft = invoiceView(inv) // a draft comes with its lines
			continue
		}
		v.Past = append(v.Past, templates.InvoiceRow{ID: inv.ID, Period: inv.PeriodStart.Format("January 2006"), Status: inv.Status,
			Total: cents(inv.Total), CSVURL: invoiceCSVURL(inv.ID), Payment: inv.PaymentStatus, HostedURL: inv.HostedURL})
	}
	return v, nil
}

func invoiceView(inv billing.Invoice) *templates.InvoiceView {
	v := &templates.InvoiceView{ID: inv.ID, Period: inv.PeriodStart.Format("January 2006"), Status: inv.Status, Total: cents(inv.Total),
		CSVURL: invoiceCSVURL(inv.ID)}
	for _, l := range inv.Lines {
		row := templates.InvoiceLineRow{Kind: l.Kind, Description: l.Description, Model: l.Model, Requests: l.Requests,
			Input: l.PromptTokens, Output: l.CompletionTokens, Cached: l.CachedTokens, Amount: cents(l.Amount)}
		if l.Billed() {
			row.InputPrice, row.OutputPrice, row.CachedPrice = "$"+l.InputPrice.String(), "$"+l.OutputPrice.String(), "$"+l.CachedInputPrice.String()
		}
		v.Lines = append(v.Lines, row)
	}
	return v
}

func invoiceCSVURL(id int64) string { return fmt.Sprintf("/invoices/%d/csv", id) }

// planView is the tier's plan, the tiers one may ask for and the state of
// the organization's upgrade requests.
func (p *Pages) planView(ctx context.Context, o models.Organization, form templates.UpgradeForm) (templates.PlanView, error) {
	t := o.Tier
	v := templates.PlanView{TierName: t.Name, Fee: cents(t.MonthlyFee), Credit: dollars(t.IncludedCredit), Overage: t.Overage, Form: form}
	tiers, err := p.store.Tiers(ctx)
	if err != nil {
		return v, err
	}
	for _, other := range tiers {
		switch {
		case other.ID == t.ID:
		case other.StripePriceID != "":
			// Sold by subscription on the payments page; asked for by
			// request only while Stripe is off.
			v.PaidTiers = append(v.PaidTiers, other.Name)
			if !p.payments.Enabled() {
				v.Tiers = append(v.Tiers, templates.TierOption{Name: other.Name, Summary: tierSummary(other)})
			}
		default:
			v.Tiers = append(v.Tiers, templates.TierOption{Name: other.Name, Summary: tierSummary(other)})
		}
	}
	v.PaymentsOff = !p.payments.Enabled()
	acc, err := p.payments.Account(ctx, o.ID)
	if err != nil {
		return v, err
	}
	if acc.GraceEndsAt != nil {
		v.GraceEnds, v.GraceReason = formatIn(*acc.GraceEndsAt, orgZone(o)), upperFirst(acc.GraceReason)
	}
	reqs, err := p.store.UpgradeRequests(ctx, o.ID, "")
	if err != nil {
		return v, err
	}
	for _, r := range reqs { // oldest first: the latest of each kind wins
		row := &templates.UpgradeRow{FromTier: r.FromTier, ToTier: r.ToTier, Note: r.Note, Status: r.Status, Requested: formatTime(r.CreatedAt)}
		switch {
		case r.Status == models.UpgradePending:
			v.Pending = row
		case r.DecidedAt != nil:
			row.Decided = formatTime(*r.DecidedAt)
			v.Last = row
		}
	}
	return v, nil
}

// tierSummary says what a tier costs and allows, in one line.
func tierSummary(t models.Tier) string {
	fee := "no monthly fee"
	if t.MonthlyFee > 0 {
		fee = cents(t.MonthlyFee) + " a month"
	}
	s := fmt.Sprintf("%s, %s included credit, burst of %d requests, refills %s per second", fee, dollars(t.IncludedCredit), t.Capacity,
		formatRate(t.RefillPerSec))
	if t.Overage == models.OverageBlock {
		s += ", no overage"
	}
	return s
}

// orgZone is the organization's time zone, UTC when unset or unknown (as
// billing counts it).
func orgZone(o models.Organization) *time.Location {
	if loc, err := time.LoadLocation(o.TimeZone); err == nil && o.TimeZone != "" {
		return loc
	}
	return time.UTC
}

// formatIn writes t in loc and names the zone: "Apr 1, 2027 08:00 Asia/Shanghai".
func formatIn(t time.Time, loc *time.Location) string {
	return t.In(loc).Format("Jan 2, 2006 15:04") + " " + loc.String()
}

// float is an amount in dollars for drawing, never for arithmetic.
func drawDollars(a money.Amount) float64 { return float64(a) / float64(money.Dollar) }
