package handlers

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

type tierOut struct {
	Name                  string  `json:"name"`
	Capacity              int64   `json:"capacity"`
	RefillPerSec          float64 `json:"refill_per_sec"`
	EffectiveRefillPerSec float64 `json:"effective_refill_per_sec"`
	TokensPerMinute       int64   `json:"tokens_per_minute"`
	FreezeThreshold       int     `json:"freeze_threshold"`
	FreezeMinutes         int     `json:"freeze_minutes"`
	Autotune              bool    `json:"autotune"`
	RefillFloor           float64 `json:"refill_floor"`
	UpstreamFallback      string  `json:"upstream_fallback"`
	MonthlyFee            string  `json:"monthly_fee"`
	IncludedCredit        string  `json:"included_credit"`
	Overage               string  `json:"overage"`
	BillCacheHits         bool    `json:"bill_cache_hits"`
	BatchFileBytes        int64   `json:"batch_file_bytes"`
	MaxAPITokens          int     `json:"max_api_tokens"`
	MaxQueuedJobs         int64   `json:"max_queued_jobs"`
	MaxPendingBatchLines  int64   `json:"max_pending_batch_lines"`
	// CreditNeedsVerifiedEmail: no included credit until an owner of the
	// organization has verified their email (where Sluice sends mail).
	CreditNeedsVerifiedEmail bool   `json:"credit_needs_verified_email"`
	Billing                  string `json:"billing"`
	StripePriceID            string `json:"stripe_price_id"` // "" for none
	GraceDays                int    `json:"grace_days"`
	// TermsEffectiveFrom is when the fee, credit and overage took effect.
	TermsEffectiveFrom time.Time `json:"terms_effective_from"`
}

func toTierOut(t models.Tier) tierOut {
	return tierOut{t.Name, t.Capacity, t.RefillPerSec, t.EffectiveRefill(), t.TokensPerMinute, t.FreezeThreshold, t.FreezeMinutes,
		t.Autotune, t.RefillFloor, t.UpstreamFallback, t.MonthlyFee.String(), t.IncludedCredit.String(), t.Overage, t.BillCacheHits,
		t.BatchFileBytes, t.MaxAPITokens, t.MaxQueuedJobs, t.MaxPendingBatchLines, t.CreditNeedsVerifiedEmail, t.Billing, t.StripePriceID, t.GraceDays, t.TermsFrom.UTC()}
}

func (m *manage) listTiers(c *gin.Context) {
	ts, err := m.Store.Tiers(c.Request.Context())
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	out := make([]tierOut, len(ts))
	for i, t := range ts {
		out[i] = toTierOut(t)
	}
	c.JSON(http.StatusOK, gin.H{"data": out})
}

// tierIn is a tier's settings as the API takes them; omitted fields keep
// their value on update and take the defaults below on create.
type tierIn struct {
	Name            string   `json:"name"`
	Capacity        *int64   `json:"capacity"`
	RefillPerSec    *float64 `json:"refill_per_sec"`
	TokensPerMinute *int64   `json:"tokens_per_minute"`
	FreezeThreshold *int     `json:"freeze_threshold"`
	FreezeMinutes   *int     `json:"freeze_minutes"`
	Autotune        *bool    `json:"autotune"`
	RefillFloor     *float64 `json:"refill_floor"`
	Fallback        *string  `json:"upstream_fallback"`
	MonthlyFee      *string  `json:"monthly_fee"`
	IncludedCredit  *string  `json:"included_credit"`
	Overage         *string  `json:"overage"`
	BillCacheHits   *bool    `json:"bill_cache_hits"`
	BatchFileBytes  *int64   `json:"batch_file_bytes"`
	MaxAPITokens    *int     `json:"max_api_tokens"`
	MaxQueuedJobs   *int64   `json:"max_queued_jobs"`
	MaxPendingLines *int64   `json:"max_pending_batch_lines"`
	CreditNeedsMail *bool    `json:"credit_needs_verified_email"`
	Billing         *string  `json:"billing"`
	StripePriceID   *string  `json:"stripe_price_id"`
	GraceDays       *int     `json:"grace_days"`
}

// apply merges the given fields into l, reading money from decimal strings.
func (in tierIn) apply(l *models.TierSettings) error {
	set(&l.Capacity, in.Capacity)
	set(&l.RefillPerSec, in.RefillPerSec)
	set(&l.TokensPerMinute, in.TokensPerMinute)
	set(&l.FreezeThreshold, in.FreezeThreshold)
	set(&l.FreezeMinutes, in.FreezeMinutes)
	set(&l.Autotune, in.Autotune)
	set(&l.RefillFloor, in.RefillFloor)
	set(&l.UpstreamFallback, in.Fallback)
	set(&l.Overage, in.Overage)
	set(&l.BillCacheHits, in.BillCacheHits)
	set(&l.BatchFileBytes, in.BatchFileBytes)
	set(&l.MaxAPITokens, in.MaxAPITokens)
	set(&l.MaxQueuedJobs, in.MaxQueuedJobs)
	set(&l.MaxPendingBatchLines, in.MaxPendingLines)
	set(&l.CreditNeedsVerifiedEmail, in.CreditNeedsMail)
	set(&l.Billing, in.Billing)
	set(&l.StripePriceID, in.StripePriceID)
	set(&l.GraceDays, in.GraceDays)
	for _, f := range []struct {
		name string
		in   *string
		dst  *money.Amount
	}{{"monthly_fee", in.MonthlyFee, &l.MonthlyFee}, {"included_credit", in.IncludedCredit, &l.IncludedCredit}} {
		if f.in == nil {
			continue
		}
		a, err := money.ParseAmount(*f.in)
		if err != nil {
			return apperr.Field(apperr.Invalid, "invalid_amount", f.name, f.name+` must be a decimal string of dollars such as "49.00"`)
		}
		*f.dst = a
	}
	return nil
}

// updateTier changes a tier's settings; omitted fields keep their value.
func (m *manage) updateTier(c *gin.Context) {
	var in tierIn
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	ctx := c.Request.Context()
	cur, err := m.Store.TierByName(ctx, c.Param("name"))
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	l := cur.Settings()
	if err := in.apply(&l); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	t, err := m.Accounts.UpdateTier(ctx, currentUser(c).User, cur.Name, l)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, toTierOut(t))
}

// createTier adds a tier. capacity and refill_per_sec are required; the
// rest default to no tokens-per-minute limit, freezing at 20 rejections
// for 10 minutes, no auto-tuning, no fee or credit, overage blocked, batch
// files up to 1 MiB, 10 active API tokens (the free tier's; 0 lifts it),
// 100 queued jobs and 1,000 pending batch lines (the free tier's), no
// Stripe price and a grace period of 7 days.
func (m *manage) createTier(c *gin.Context) {
	var in tierIn
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	if in.Capacity == nil || in.RefillPerSec == nil {
		writeAPIError(c, m.log, apperr.New(apperr.Unprocessable, "capacity and refill_per_sec are required"))
		return
	}
	l := models.TierSettings{FreezeThreshold: 20, FreezeMinutes: 10, UpstreamFallback: "local", Overage: models.OverageBlock,
		BatchFileBytes: 1 << 20, MaxAPITokens: 10, MaxQueuedJobs: 100, MaxPendingBatchLines: 1000,
		GraceDays: models.DefaultGraceDays}
	if err := in.apply(&l); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	t, err := m.Accounts.CreateTier(c.Request.Context(), currentUser(c).User, in.Name, l)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusCreated, toTierOut(t))
}

// deleteTier removes a tier no organization is on.
func (m *manage) deleteTier(c *gin.Context) {
	name := c.Param("name")
	if err := m.Accounts.DeleteTier(c.Request.Context(), currentUser(c).User, name); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"name": name, "deleted": true})
}
