package web

import (
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/templates"
)

// Dashboard shows the organization's tier, usage and latest tokens.
func (p *Pages) Dashboard(c *gin.Context) {
	page, u, o, err := p.page(c, "Dashboard")
	if err != nil {
		p.fail(c, err)
		return
	}
	ctx := c.Request.Context()
	now := p.now().UTC()
	today, err := p.store.UsageSince(ctx, u.OrgID, time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC))
	if err != nil {
		p.fail(c, err)
		return
	}
	month, err := p.store.UsageSince(ctx, u.OrgID, time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		p.fail(c, err)
		return
	}
	toks, err := p.store.APITokens(ctx, u.OrgID)
	if err != nil {
		p.fail(c, err)
		return
	}
	view := templates.DashboardView{
		OrgName: o.Name, TierName: o.Tier.Name, Capacity: o.Tier.Capacity, RefillPerSec: formatRate(o.Tier.RefillPerSec),
		RequestsToday: today.Requests, TokensToday: today.TotalTokens(),
		RequestsMonth: month.Requests, TokensMonth: month.TotalTokens(),
	}
	for _, t := range toks {
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
	rows := tokenRows(toks, now)
	view.Tokens = rows[:min(len(rows), 5)]
	render(c, http.StatusOK, templates.Dashboard(page, view))
}

func formatRate(r float64) string { return strconv.FormatFloat(r, 'g', -1, 64) }

func tokenRows(ts []models.APIToken, now time.Time) []templates.TokenRow {
	rows := make([]templates.TokenRow, len(ts))
	for i, t := range ts {
		rows[i] = templates.TokenRow{
			ID: t.ID, Name: t.Name, Prefix: t.Prefix, Created: formatTime(t.CreatedAt),
			LastUsed: formatOptionalTime(t.LastUsedAt, "never"), Expires: formatOptionalTime(t.ExpiresAt, "never"),
			Status: t.Status(now),
		}
	}
	return rows
}
