package web

import (
	"errors"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/templates"
)

var adminFlashes = map[string]string{
	"tier":    "Tier saved. The next API request, on every node, uses the new settings.",
	"created": "Tier created. Organizations can be moved to it from their page.",
	"deleted": "Tier deleted.",
	"lifted":  "Freeze lifted. The token may call the API again at once.",
}

// newTierDefaults fill the create-a-tier form: the settings a new tier
// gets through the API when it gives none.
var newTierDefaults = templates.AdminTierForm{TokensPerMinute: "0", FreezeThreshold: "20", FreezeMinutes: "10",
	RefillFloor: "0", UpstreamFallback: "local", MonthlyFee: "0.00", IncludedCredit: "0.00", Overage: models.OverageBlock,
	Billing: models.BillingInvoice, BatchFileMiB: "1", MaxAPITokens: "10", MaxQueuedJobs: "100", MaxPendingBatchLines: "1000",
	GraceDays: strconv.Itoa(models.DefaultGraceDays)}

// AdminTiers shows the tiers with their editable limits and plans, the
// freezes and the auto-tuner.
func (p *Pages) AdminTiers(c *gin.Context) {
	p.showAdmin(c, http.StatusOK, "", adminFlashes[c.Query("done")], newTierDefaults)
}

func (p *Pages) showAdmin(c *gin.Context, status int, formErr, flash string, newTier templates.AdminTierForm) {
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
	usage, err := p.store.TierUsage(ctx)
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
	var orgIDs []int64
	for _, f := range freezes {
		if !slices.Contains(orgIDs, f.OrgID) {
			orgIDs = append(orgIDs, f.OrgID)
		}
	}
	orgNames, err := p.store.OrganizationNames(ctx, orgIDs)
	if err != nil {
		p.fail(c, err)
		return
	}
	limiter := p.limiterStatus()
	view := templates.AdminTiersView{Limiter: templates.LimiterState{Mode: limiter.Mode, Nodes: limiter.Nodes, Degraded: limiter.Mode == "degraded"},
		NewTier: newTier}
	for _, t := range tiers {
		view.Tiers = append(view.Tiers, templates.TierRow{Name: t.Name, Capacity: t.Capacity, RefillPerSec: formatRate(t.RefillPerSec),
			EffectiveRefill: formatRate(t.EffectiveRefill()), TokensPerMinute: t.TokensPerMinute,
			FreezeThreshold: t.FreezeThreshold, FreezeMinutes: t.FreezeMinutes,
			Autotune: t.Autotune, RefillFloor: formatRate(t.RefillFloor), UpstreamFallback: t.UpstreamFallback,
			MonthlyFee: t.MonthlyFee.String(), IncludedCredit: t.IncludedCredit.String(), Overage: t.Overage, Billing: t.Billing,
			BillCacheHits: t.BillCacheHits, BatchFileMiB: formatMiB(t.BatchFileBytes), MaxAPITokens: t.MaxAPITokens,
			MaxQueuedJobs: t.MaxQueuedJobs, MaxPendingBatchLines: t.MaxPendingBatchLines, CreditNeedsVerifiedEmail: t.CreditNeedsVerifiedEmail,
			StripePriceID: t.StripePriceID, GraceDays: t.GraceDays,
			Organizations: usage[t.ID], TermsFrom: formatTermsFrom(t.TermsFrom)})
	}
	view.Freezes = p.freezeRows(c, freezes, orgNames)
	for _, e := range tuning {
		view.Tuning = append(view.Tuning, templates.TuningRow{At: formatTime(e.CreatedAt), Tier: e.Tier,
			From: formatRate(e.FromRefill), To: formatRate(e.ToRefill), Load: strconv.FormatFloat(e.Load, 'f', 2, 64)})
	}
	page.Error, page.Flash = formErr, flash
	render(c, status, templates.AdminTiers(page, view))
}

// adminFormProblem is a refused form's status and message when err is the
// user's to fix (anything below 500), and false for failures of ours.
func adminFormProblem(err error) (int, string, bool) {
	e := apperr.As(err)
	status := apperr.Status(e.Code)
	return status, e.Message, status < http.StatusInternalServerError
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
		p.showAdmin(c, http.StatusUnprocessableEntity, err.Error(), "", newTierDefaults)
		return
	}
	u, _ := userOf(c)
	_, err = p.accounts.UpdateTier(c.Request.Context(), u.User, c.Param("name"), settings)
	if err != nil {
		if code := apperr.CodeOf(err); code == apperr.Unprocessable {
			p.showAdmin(c, http.StatusUnprocessableEntity, apperr.As(err).Message, "", newTierDefaults)
			return
		}
		p.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, "/admin/tiers?done=tier")
}

// CreateTier adds a tier from the admin's create form; a refused form
// comes back filled in as it was sent.
func (p *Pages) CreateTier(c *gin.Context) {
	form := templates.AdminTierForm{Name: strings.TrimSpace(c.PostForm("name")), Capacity: c.PostForm("capacity"),
		RefillPerSec: c.PostForm("refill_per_sec"), TokensPerMinute: c.PostForm("tokens_per_minute"),
		FreezeThreshold: c.PostForm("freeze_threshold"), FreezeMinutes: c.PostForm("freeze_minutes"),
		RefillFloor: c.PostForm("refill_floor"), UpstreamFallback: c.PostForm("upstream_fallback"),
		Autotune: c.PostForm("autotune") == "on", MonthlyFee: c.PostForm("monthly_fee"), IncludedCredit: c.PostForm("included_credit"),
		Overage: c.PostForm("overage"), Billing: c.PostForm("billing"), BillCacheHits: c.PostForm("bill_cache_hits") == "on",
		BatchFileMiB: c.PostForm("batch_file_mib"),
		MaxAPITokens: c.PostForm("max_api_tokens"), MaxQueuedJobs: c.PostForm("max_queued_jobs"),
		MaxPendingBatchLines: c.PostForm("max_pending_batch_lines"), CreditNeedsVerifiedEmail: c.PostForm("credit_needs_verified_email") == "on",
		StripePriceID: c.PostForm("stripe_price_id"), GraceDays: c.PostForm("grace_days")}
	settings := models.TierSettings{GraceDays: models.DefaultGraceDays}
	if err := tierForm(c, &settings); err != nil {
		p.showAdmin(c, http.StatusUnprocessableEntity, err.Error(), "", form)
		return
	}
	u, _ := userOf(c)
	if _, err := p.accounts.CreateTier(c.Request.Context(), u.User, form.Name, settings); err != nil {
		if status, msg, ok := adminFormProblem(err); ok {
			p.showAdmin(c, status, msg, "", form)
			return
		}
		p.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, "/admin/tiers?done=created")
}

// DeleteTier removes a tier no organization is on; a tier in use stays,
// and the page says why.
func (p *Pages) DeleteTier(c *gin.Context) {
	u, _ := userOf(c)
	if err := p.accounts.DeleteTier(c.Request.Context(), u.User, c.Param("name")); err != nil {
		if apperr.CodeOf(err) == apperr.Conflict {
			p.showAdmin(c, http.StatusConflict, apperr.As(err).Message, "", newTierDefaults)
			return
		}
		p.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, "/admin/tiers?done=deleted")
}

// tierForm reads the tier form into s; every bucket field is required, as
// the form always sends them all; plan fields the form does not carry keep
// their value.
func tierForm(c *gin.Context, s *models.TierSettings) error {
	var bad, badMoney []string
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
				badMoney = append(badMoney, f.name)
			}
			*f.dst = a
		}
	}
	if v, ok := c.GetPostForm("overage"); ok {
		s.Overage = v
	}
	if v, ok := c.GetPostForm("billing"); ok {
		s.Billing = v
	}
	if _, ok := c.GetPostForm("plan"); ok { // the plan fieldset is on the form: an unchecked box means off
		s.BillCacheHits = c.PostForm("bill_cache_hits") == "on"
		s.CreditNeedsVerifiedEmail = c.PostForm("credit_needs_verified_email") == "on"
	}
	if v, ok := c.GetPostForm("batch_file_mib"); ok {
		mib, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(mib >= 0) || math.IsInf(mib, 0) {
			bad = append(bad, "batch_file_mib")
		}
		s.BatchFileBytes = int64(math.Round(mib * (1 << 20)))
	}
	if v, ok := c.GetPostForm("max_api_tokens"); ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			bad = append(bad, "max_api_tokens")
		}
		s.MaxAPITokens = n
	}
	for _, f := range []struct {
		name string
		dst  *int64
	}{{"max_queued_jobs", &s.MaxQueuedJobs}, {"max_pending_batch_lines", &s.MaxPendingBatchLines}} {
		if v, ok := c.GetPostForm(f.name); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				bad = append(bad, f.name)
			}
			*f.dst = n
		}
	}
	if v, ok := c.GetPostForm("stripe_price_id"); ok {
		s.StripePriceID = strings.TrimSpace(v)
	}
	if v, ok := c.GetPostForm("grace_days"); ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			bad = append(bad, "grace_days")
		}
		s.GraceDays = n
	}
	switch {
	case len(bad) > 0:
		return errors.New("These fields need a number: " + strings.Join(bad, ", ") + ".")
	case len(badMoney) > 0:
		return errors.New("These fields need an amount in dollars such as 49.00: " + strings.Join(badMoney, ", ") + ".")
	}
	return nil
}

// formatMiB writes a byte count in MiB, as the tier form takes it: "1", "0.5".
func formatMiB(n int64) string { return strconv.FormatFloat(float64(n)/(1<<20), 'f', -1, 64) }

// freezeRows turns freezes into rows; orgNames is nil on a user's own page,
// where every freeze is of the user's organization.
func (p *Pages) freezeRows(c *gin.Context, fs []models.Freeze, orgNames map[int64]string) []templates.FreezeRow {
	now := p.now()
	rows := make([]templates.FreezeRow, len(fs))
	var scope int64 // every organization's tokens, for admins
	if orgNames == nil && len(fs) > 0 {
		scope = fs[0].OrgID
	}
	ids := make([]int64, 0, len(fs))
	for _, f := range fs {
		ids = append(ids, f.TokenID)
	}
	prefixes, err := p.store.TokenPrefixes(c.Request.Context(), scope, ids)
	if err != nil { // the rows still show, with "unknown token"
		p.log.Warn("reading token prefixes failed", "err", err)
	}
	for i, f := range fs {
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
	if _, err := p.accounts.LiftFreeze(c.Request.Context(), u.User, id); err != nil {
		p.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, "/admin/tiers?done=lifted")
}

// formatTermsFrom is when a tier's plan terms took effect; empty for the
// terms a tier had before they were versioned (in force since the epoch).
func formatTermsFrom(t time.Time) string {
	if t.Unix() <= 0 {
		return ""
	}
	return formatTime(t)
}
