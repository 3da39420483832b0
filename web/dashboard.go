package web

import (
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/templates"
)

// Dashboard shows the organization's tier, usage, spend, invoices, billing
// settings, queued jobs and batches, and latest tokens. ?range= and ?by= switch the usage charts;
// ?done= names the outcome of the billing form that redirected here.
func (p *Pages) Dashboard(c *gin.Context) {
	p.showDashboard(c, http.StatusOK, dashboardState{notice: billingFlashes[c.Query("done")]})
}

// showDashboard renders the dashboard with status and what a billing form
// adds to it.
func (p *Pages) showDashboard(c *gin.Context, status int, st dashboardState) {
	page, u, o, err := p.page(c, "Dashboard")
	if err != nil {
		p.fail(c, err)
		return
	}
	ctx := c.Request.Context()
	now := p.now()
	loc := orgZone(o)
	local := now.In(loc)
	// Today is the organization's calendar day; the month is the billing
	// period, a calendar month in UTC.
	today, err := p.store.UsageSince(ctx, u.OrgID, time.Date(local.Year(), local.Month(), local.Day(), 0, 0, 0, 0, loc))
	if err != nil {
		p.fail(c, err)
		return
	}
	month, err := p.store.UsageInMonth(ctx, u.OrgID, now) // one rollup row
	if err != nil {
		p.fail(c, err)
		return
	}
	toks, err := p.store.APITokens(ctx, u.OrgID)
	if err != nil {
		p.fail(c, err)
		return
	}
	// The token list and count are what the visitor manages (a member's
	// own); the charts name every token of the organization's.
	mine, err := p.accounts.Tokens(ctx, u)
	if err != nil {
		p.fail(c, err)
		return
	}
	view := templates.DashboardView{
		OrgName: o.Name, TierName: o.Tier.Name, Capacity: o.Tier.Capacity, RefillPerSec: formatRate(o.Tier.RefillPerSec),
		RequestsToday: today.Requests, TokensToday: today.TotalTokens(),
		RequestsMonth: month.Requests, TokensMonth: month.Tokens,
	}
	for _, t := range mine {
		if t.Status(now) == "active" {
			view.ActiveTokens++
		}
	}
	view.TokensPerMinute = o.Tier.TokensPerMinute
	if eff := o.Tier.EffectiveRefill(); eff != o.Tier.RefillPerSec {
		view.EffectiveRefill = formatRate(eff)
	}
	freezes, err := p.store.OrganizationFreezes(ctx, u.OrgID, 10)
	if err != nil {
		p.fail(c, err)
		return
	}
	view.Freezes = p.freezeRows(c, freezes, nil)
	rows := tokenRows(mine, now)
	view.Tokens = rows[:min(len(rows), 5)]
	if view.Billing, err = p.billingView(ctx, u, o, loc, parseUsageQuery(c.Request.URL.Query()), toks, st); err != nil {
		p.fail(c, err)
		return
	}
	if view.Jobs, err = p.jobsView(ctx, u.OrgID); err != nil {
		p.fail(c, err)
		return
	}
	render(c, status, templates.Dashboard(page, view))
}

func formatRate(r float64) string { return strconv.FormatFloat(r, 'g', -1, 64) }

func tokenRows(ts []models.APIToken, now time.Time) []templates.TokenRow {
	rows := make([]templates.TokenRow, len(ts))
	for i, t := range ts {
		rows[i] = templates.TokenRow{
			ID: t.ID, Name: t.Name, Prefix: t.Prefix, Created: formatTime(t.CreatedAt),
			LastUsed: formatOptionalTime(t.LastUsedAt, "never"), Expires: formatOptionalTime(t.ExpiresAt, "never"),
			Status: t.Status(now), Signed: t.SigningRequired(), Limits: tokenLimits(t.TokenControls), Form: tokenEditForm(t),
		}
	}
	return rows
}
