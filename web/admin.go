package web

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/templates"
)

var adminFlashes = map[string]string{
	"tier":   "Tier saved. The next API request, on every node, uses the new settings.",
	"org":    "Organization moved. Its next API request uses the new tier.",
	"lifted": "Freeze lifted. The token may call the API again at once.",
}

// AdminTiers shows the tiers with editable limits and the organizations.
func (p *Pages) AdminTiers(c *gin.Context) {
	p.showAdmin(c, http.StatusOK, "", adminFlashes[c.Query("done")])
}

func (p *Pages) showAdmin(c *gin.Context, status int, formErr, flash string) {
	page, _, _, err := p.page(c, "Tiers")
	if err != nil {
		p.fail(c, err)
		return
	}
	ctx := c.Request.Context()
	tiers, err := p.store.Tiers(ctx)
	if err != nil {
		p.fail(c, err)
		return
	}
	orgs, err := p.store.Organizations(ctx)
	if err != nil {
		p.fail(c, err)
		return
	}
	freezes, err := p.store.Freezes(ctx, 50)
	if err != nil {
		p.fail(c, err)
		return
	}
	tuning, err := p.store.TuningEvents(ctx, 20)
	if err != nil {
		p.fail(c, err)
		return
	}
	limits := p.limits()
	view := templates.AdminTiersView{Limiter: templates.LimiterState{Mode: limits.Mode, Nodes: limits.Nodes, Degraded: limits.Mode == "degraded"}}
	for _, t := range tiers {
		view.Tiers = append(view.Tiers, templates.TierRow{Name: t.Name, Capacity: t.Capacity, RefillPerSec: formatRate(t.RefillPerSec),
			EffectiveRefill: formatRate(t.EffectiveRefill()), TokensPerMinute: t.TokensPerMinute,
			FreezeThreshold: t.FreezeThreshold, FreezeMinutes: t.FreezeMinutes,
			Autotune: t.Autotune, RefillFloor: formatRate(t.RefillFloor), UpstreamFallback: t.UpstreamFallback})
		view.TierNames = append(view.TierNames, t.Name)
	}
	orgNames := map[int64]string{}
	for _, o := range orgs {
		orgNames[o.ID] = o.Name
		view.Orgs = append(view.Orgs, templates.OrgRow{ID: o.ID, Name: o.Name, Tier: o.Tier.Name, Created: formatTime(o.CreatedAt)})
	}
	view.Freezes = p.freezeRows(c, freezes, orgNames)
	for _, e := range tuning {
		view.Tuning = append(view.Tuning, templates.TuningRow{At: formatTime(e.CreatedAt), Tier: e.Tier,
			From: formatRate(e.FromRefill), To: formatRate(e.ToRefill), Load: strconv.FormatFloat(e.Load, 'f', 2, 64)})
	}
	page.Error, page.Flash = formErr, flash
	render(c, status, templates.AdminTiers(page, view))
}

// UpdateTier saves a tier's settings from the admin form.
func (p *Pages) UpdateTier(c *gin.Context) {
	cur, err := p.store.TierByName(c.Request.Context(), c.Param("name"))
	if err != nil {
		p.fail(c, err)
		return
	}
	settings := cur.Settings()
	if err := tierForm(c, &settings); err != nil {
		p.showAdmin(c, http.StatusUnprocessableEntity, err.Error(), "")
		return
	}
	u, _ := userOf(c)
	_, err = p.accounts.UpdateTier(c.Request.Context(), u, c.Param("name"), settings)
	if err != nil {
		if code := apperr.CodeOf(err); code == apperr.Unprocessable {
			p.showAdmin(c, http.StatusUnprocessableEntity, apperr.As(err).Message, "")
			return
		}
		p.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, "/admin/tiers?done=tier")
}

// SetOrganizationTier moves an organization to another tier.
func (p *Pages) SetOrganizationTier(c *gin.Context) {
	id, ok := p.pathID(c, "No such organization.")
	if !ok {
		return
	}
	u, _ := userOf(c)
	if _, err := p.accounts.SetOrganizationTier(c.Request.Context(), u, id, c.PostForm("tier")); err != nil {
		p.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, "/admin/tiers?done=org")
}

// tierForm reads the tier form into s; every bucket field is required, as
// the form always sends them all; plan fields the form does not carry keep
// their value.
func tierForm(c *gin.Context, s *models.TierSettings) error {
	var bad []string
	num := func(name string, dst *int64) {
		n, err := strconv.ParseInt(strings.TrimSpace(c.PostForm(name)), 10, 64)
		if err != nil {
			bad = append(bad, name)
		}
		*dst = n
	}
	rate := func(name string, dst *float64) {
		f, err := strconv.ParseFloat(strings.TrimSpace(c.PostForm(name)), 64)
		if err != nil {
			bad = append(bad, name)
		}
		*dst = f
	}
	var threshold, minutes int64
	num("capacity", &s.Capacity)
	rate("refill_per_sec", &s.RefillPerSec)
	num("tokens_per_minute", &s.TokensPerMinute)
	num("freeze_threshold", &threshold)
	num("freeze_minutes", &minutes)
	rate("refill_floor", &s.RefillFloor)
	s.FreezeThreshold, s.FreezeMinutes = int(threshold), int(minutes)
	s.Autotune = c.PostForm("autotune") == "on"
	s.UpstreamFallback = c.PostForm("upstream_fallback")
	for _, f := range []struct {
		name string
		dst  *money.Amount
	}{{"monthly_fee", &s.MonthlyFee}, {"included_credit", &s.IncludedCredit}} {
		if v, ok := c.GetPostForm(f.name); ok {
			a, err := money.ParseAmount(strings.TrimSpace(v))
			if err != nil {
				bad = append(bad, f.name)
			}
			*f.dst = a
		}
	}
	if v, ok := c.GetPostForm("overage"); ok {
		s.Overage = v
	}
	if _, ok := c.GetPostForm("plan"); ok { // the plan fieldset is on the form: an unchecked box means off
		s.BillCacheHits = c.PostForm("bill_cache_hits") == "on"
	}
	if len(bad) > 0 {
		return errors.New("These fields need a number: " + strings.Join(bad, ", ") + ".")
	}
	return nil
}

// freezeRows turns freezes into rows; orgNames is nil on a user's own page.
func (p *Pages) freezeRows(c *gin.Context, fs []models.Freeze, orgNames map[int64]string) []templates.FreezeRow {
	now := p.now()
	rows := make([]templates.FreezeRow, len(fs))
	prefixes := map[int64]string{}
	for i, f := range fs {
		if _, ok := prefixes[f.TokenID]; !ok {
			if toks, err := p.store.APITokens(c.Request.Context(), f.OrgID); err == nil {
				for _, t := range toks {
					prefixes[t.ID] = t.Prefix
				}
			}
		}
		status := "expired"
		switch {
		case f.LiftedAt != nil:
			status = "lifted"
		case f.Active(now):
			status = "active"
		}
		rows[i] = templates.FreezeRow{ID: f.ID, TokenID: f.TokenID, TokenPrefix: prefixes[f.TokenID], OrgName: orgNames[f.OrgID],
			Reason: f.Reason, Count: f.WindowCount, From: formatTime(f.FrozenFrom), Until: formatTime(f.FrozenUntil), Status: status}
	}
	return rows
}

// LiftFreeze ends a freeze early from the admin page.
func (p *Pages) LiftFreeze(c *gin.Context) {
	id, ok := p.pathID(c, "No such freeze.")
	if !ok {
		return
	}
	u, _ := userOf(c)
	if _, err := p.accounts.LiftFreeze(c.Request.Context(), u, id); err != nil {
		p.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, "/admin/tiers?done=lifted")
}
