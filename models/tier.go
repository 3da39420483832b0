package models

import (
	"context"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/money"
)

// Tier is a plan: the shape of every token bucket of its organizations, and
// what they pay.
type Tier struct {
	ID              int64
	Name            string
	Capacity        int64
	RefillPerSec    float64
	TokensPerMinute int64 // 0: no tokens-per-minute limit
	FreezeThreshold int   // rejections in a minute that freeze a token; 0: never
	FreezeMinutes   int
	Autotune        bool
	RefillFloor     float64
	// EffectiveRefillPerSec is the auto-tuner's current refill, nil when the
	// tier runs as configured.
	EffectiveRefillPerSec *float64
	// UpstreamFallback is what the tier gets when every provider key is
	// unavailable: "local" (sluice-local answers) or "error" (503).
	UpstreamFallback string
	// MonthlyFee is the plan's price per month.
	MonthlyFee money.Amount
	// IncludedCredit is the usage cost the fee covers each month.
	IncludedCredit money.Amount
	// Overage is what happens past the included credit: "bill" it on the
	// invoice, or "block" requests until the month ends.
	Overage string
	// TermsFrom is when the fee, credit and overage above took effect: the
	// latest of the tier's versions (TierTerms), which invoices prorate.
	TermsFrom time.Time
	// BillCacheHits says whether an answer from Sluice's response cache
	// costs what the model would have (true) or nothing (false).
	BillCacheHits bool
	// BatchFileBytes is the largest batch input file (POST /v1/files) an
	// organization on the tier may upload; 0 refuses uploads.
	BatchFileBytes int64
	// MaxAPITokens is the most active API tokens (neither revoked nor
	// expired) an organization on the tier may hold; 0: no limit.
	MaxAPITokens int
	// MaxQueuedJobs is the most jobs an organization on the tier may have
	// queued and not yet finished; 0 refuses jobs.
	MaxQueuedJobs int64
	// MaxPendingBatchLines is the most batch lines an organization on the
	// tier may have pending across its batches; 0 refuses batches.
	MaxPendingBatchLines int64
	// CreditNeedsVerifiedEmail withholds the included credit from an
	// organization until one of its owners has verified their email (on
	// for free: its credit is what a throwaway address would be after).
	// In force only where Sluice sends mail (Store WithEmailVerification).
	CreditNeedsVerifiedEmail bool
	// Billing is how the tier's organizations pay: "invoice" (usage on a
	// monthly invoice) or "prepaid" (every priced request is reserved from,
	// and settled against, the organization's balance).
	Billing string
	// StripePriceID is the Stripe price of a paid tier: choosing it is a
	// subscription through Checkout. Empty: no price (an admin approves
	// upgrade requests to it).
	StripePriceID string
	// GraceDays is how long an organization keeps the tier after a failed
	// payment or its subscription's end, before it goes back to free.
	GraceDays int
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Overage choices of a tier.
const (
	OverageBill  = "bill"
	OverageBlock = "block"
)

// Billing choices of a tier.
const (
	BillingInvoice = "invoice"
	BillingPrepaid = "prepaid"
)

// Prepaid says the tier's organizations spend from a prepaid balance.
func (t Tier) Prepaid() bool { return t.Billing == BillingPrepaid }

// EffectiveRefill is the refill the gateway applies now.
func (t Tier) EffectiveRefill() float64 {
	if t.EffectiveRefillPerSec != nil {
		return *t.EffectiveRefillPerSec
	}
	return t.RefillPerSec
}

// TierSettings are the admin-editable settings of a tier.
type TierSettings struct {
	Capacity        int64
	RefillPerSec    float64
	TokensPerMinute int64
	FreezeThreshold int
	FreezeMinutes   int
	Autotune        bool
	RefillFloor     float64
	// UpstreamFallback: "local" or "error"; empty keeps the tier's current
	// choice (callers that predate it send none).
	UpstreamFallback string
	MonthlyFee       money.Amount
	IncludedCredit   money.Amount
	Overage          string // "bill" or "block"; empty keeps the tier's current choice
	BillCacheHits    bool
	BatchFileBytes   int64
	MaxAPITokens     int // 0: no limit
	// MaxQueuedJobs and MaxPendingBatchLines bound an organization's
	// queues; 0 refuses jobs or batches.
	MaxQueuedJobs        int64
	MaxPendingBatchLines int64
	// CreditNeedsVerifiedEmail: no included credit until an owner's email
	// is verified.
	CreditNeedsVerifiedEmail bool
	// Billing: "invoice" or "prepaid"; empty keeps the tier's current
	// choice (a new tier's is invoice).
	Billing       string
	StripePriceID string // "" for none
	GraceDays     int
}

// DefaultGraceDays is a new tier's grace period.
const DefaultGraceDays = 7

// Settings returns the tier's editable settings, to merge a partial update into.
func (t Tier) Settings() TierSettings {
	return TierSettings{t.Capacity, t.RefillPerSec, t.TokensPerMinute, t.FreezeThreshold, t.FreezeMinutes, t.Autotune, t.RefillFloor,
		t.UpstreamFallback, t.MonthlyFee, t.IncludedCredit, t.Overage, t.BillCacheHits, t.BatchFileBytes, t.MaxAPITokens,
		t.MaxQueuedJobs, t.MaxPendingBatchLines, t.CreditNeedsVerifiedEmail, t.Billing, t.StripePriceID, t.GraceDays}
}

// MaxBatchFileBytes bounds a tier's batch file limit: an upload is held in
// memory while it is stored.
const MaxBatchFileBytes = 256 << 20

// MaxTierAPITokens bounds a tier's API token limit.
const MaxTierAPITokens = 100_000

// MaxTierQueuedJobs and MaxTierPendingBatchLines bound a tier's queue
// limits: every queue has a bound.
const (
	MaxTierQueuedJobs        = 1_000_000
	MaxTierPendingBatchLines = 10_000_000
)

// Validate says what is wrong with the settings, in words for the admin.
func (l TierSettings) Validate() error {
	switch {
	case l.Capacity < 1 || l.Capacity > 1_000_000:
		return apperr.New(apperr.Unprocessable, "capacity must be between 1 and 1000000")
	case !(l.RefillPerSec > 0) || l.RefillPerSec > 1_000_000:
		return apperr.New(apperr.Unprocessable, "refill_per_sec must be greater than 0 and at most 1000000")
	case l.TokensPerMinute < 0 || l.TokensPerMinute > 1_000_000_000:
		return apperr.New(apperr.Unprocessable, "tokens_per_minute must be from 0 (no limit) to 1000000000")
	case l.FreezeThreshold < 0 || l.FreezeThreshold > 1000: // quota.MaxFreezeThreshold: the shared window counts up to it
		return apperr.New(apperr.Unprocessable, "freeze_threshold must be from 0 (never freeze) to 1000")
	case l.FreezeMinutes < 0 || l.FreezeMinutes > 7*24*60 || l.FreezeThreshold > 0 && l.FreezeMinutes < 1:
		return apperr.New(apperr.Unprocessable, "freeze_minutes must be from 1 to 10080 (a week) when freezing is on")
	case !(l.RefillFloor >= 0) || l.RefillFloor > l.RefillPerSec:
		return apperr.New(apperr.Unprocessable, "refill_floor must be from 0 to refill_per_sec")
	case l.Autotune && !(l.RefillFloor > 0):
		return apperr.New(apperr.Unprocessable, "an autotuned tier needs a refill_floor above 0")
	case l.UpstreamFallback != "" && l.UpstreamFallback != "local" && l.UpstreamFallback != "error":
		return apperr.New(apperr.Unprocessable, "upstream_fallback must be local or error")
	case l.MonthlyFee < 0 || l.MonthlyFee > money.MaxAmount:
		return apperr.New(apperr.Unprocessable, "monthly_fee must be from 0 to %s", money.MaxAmount)
	case l.IncludedCredit < 0 || l.IncludedCredit > money.MaxAmount:
		return apperr.New(apperr.Unprocessable, "included_credit must be from 0 to %s", money.MaxAmount)
	case l.Overage != "" && l.Overage != OverageBill && l.Overage != OverageBlock:
		return apperr.New(apperr.Unprocessable, "overage must be bill or block")
	case l.BatchFileBytes < 0 || l.BatchFileBytes > MaxBatchFileBytes:
		return apperr.New(apperr.Unprocessable, "batch_file_bytes must be from 0 (no batch files) to %d (256 MiB)", MaxBatchFileBytes)
	case l.MaxAPITokens < 0 || l.MaxAPITokens > MaxTierAPITokens:
		return apperr.New(apperr.Unprocessable, "max_api_tokens must be from 0 (no limit) to %d", MaxTierAPITokens)
	case l.MaxQueuedJobs < 0 || l.MaxQueuedJobs > MaxTierQueuedJobs:
		return apperr.New(apperr.Unprocessable, "max_queued_jobs must be from 0 (no jobs) to %d", MaxTierQueuedJobs)
	case l.MaxPendingBatchLines < 0 || l.MaxPendingBatchLines > MaxTierPendingBatchLines:
		return apperr.New(apperr.Unprocessable, "max_pending_batch_lines must be from 0 (no batches) to %d", MaxTierPendingBatchLines)
	case l.Billing != "" && l.Billing != BillingInvoice && l.Billing != BillingPrepaid:
		return apperr.New(apperr.Unprocessable, "billing must be invoice or prepaid")
	case !validPriceID(l.StripePriceID):
		return apperr.New(apperr.Unprocessable, `stripe_price_id must be a Stripe price id such as "price_1Abc…" (letters, digits and _, at most 255), or empty for none`)
	case l.GraceDays < 0 || l.GraceDays > 365:
		return apperr.New(apperr.Unprocessable, "grace_days must be from 0 to 365")
	}
	return nil
}

// validPriceID: a Stripe price id, or empty.
func validPriceID(id string) bool {
	if id == "" {
		return true
	}
	if len(id) > 255 || !strings.HasPrefix(id, "price_") && !strings.HasPrefix(id, "plan_") {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// validTierName: a tier's name is part of URLs and forms.
func validTierName(name string) bool {
	if len(name) == 0 || len(name) > 32 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// CreateTier adds a tier with the given settings, audited.
func (s *Store) CreateTier(ctx context.Context, actor User, name string, l TierSettings) (Tier, error) {
	if !validTierName(name) {
		return Tier{}, apperr.New(apperr.Unprocessable, "name must be 1 to 32 lower-case letters, digits, - or _")
	}
	if l.UpstreamFallback == "" {
		l.UpstreamFallback = "local"
	}
	if l.Overage == "" {
		l.Overage = OverageBlock
	}
	if l.Billing == "" {
		l.Billing = BillingInvoice
	}
	if err := l.Validate(); err != nil {
		return Tier{}, err
	}
	now := s.now().UTC()
	t := Tier{Name: name, Capacity: l.Capacity, RefillPerSec: l.RefillPerSec, TokensPerMinute: l.TokensPerMinute,
		FreezeThreshold: l.FreezeThreshold, FreezeMinutes: l.FreezeMinutes, Autotune: l.Autotune, RefillFloor: l.RefillFloor,
		UpstreamFallback: l.UpstreamFallback, MonthlyFee: l.MonthlyFee, IncludedCredit: l.IncludedCredit,
		Overage: l.Overage, BillCacheHits: l.BillCacheHits, BatchFileBytes: l.BatchFileBytes, CreatedAt: now, UpdatedAt: now,
		MaxAPITokens: l.MaxAPITokens, MaxQueuedJobs: l.MaxQueuedJobs, MaxPendingBatchLines: l.MaxPendingBatchLines,
		CreditNeedsVerifiedEmail: l.CreditNeedsVerifiedEmail, Billing: l.Billing,
		StripePriceID: l.StripePriceID, GraceDays: l.GraceDays}
	t.TermsFrom = now.Truncate(time.Second)
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&t).Error; err != nil {
			return dbErr(err, "tier "+name)
		}
		if err := tx.Create(ptr(t.terms(actor, t.TermsFrom))).Error; err != nil {
			return dbErr(err, "tier terms")
		}
		return audit(tx, actor.LastOrgID, actor.ID, "tier.create", name, describeChange(TierSettings{}, l))
	})
	return t, err
}

// DeleteTier removes a tier no organization is on; a tier in use is a
// conflict, so no organization is ever left without limits.
func (s *Store) DeleteTier(ctx context.Context, actor User, name string) error {
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var t Tier
		if err := tx.Where("name = ?", name).Take(&t).Error; err != nil {
			return dbErr(err, "tier "+name)
		}
		var users int64
		if err := tx.Model(&Organization{}).Where("tier_id = ?", t.ID).Count(&users).Error; err != nil {
			return dbErr(err, "tier "+name)
		}
		if users > 0 {
			return apperr.New(apperr.Conflict, "the %s tier is in use by %d organizations; move them to another tier first", name, users)
		}
		if err := tx.Delete(&t).Error; err != nil {
			return dbErr(err, "tier "+name)
		}
		return audit(tx, actor.LastOrgID, actor.ID, "tier.delete", name, "")
	})
}

// Tiers lists every tier by name.
func (s *Store) Tiers(ctx context.Context) ([]Tier, error) {
	var ts []Tier
	err := s.db.WithContext(ctx).Order("capacity, name").Find(&ts).Error
	return ts, dbErr(err, "tiers")
}

// TierByName returns one tier.
func (s *Store) TierByName(ctx context.Context, name string) (Tier, error) {
	var t Tier
	err := s.db.WithContext(ctx).Where("name = ?", name).Take(&t).Error
	return t, dbErr(err, "tier "+name)
}

// UpdateTier changes a tier's settings and records who did it. The
// auto-tuner's adjustment is dropped: the admin's values apply as given.
// New plan terms (fee, credit, overage) are a new version from now on,
// written with the tier row; earlier versions stay as they were.
func (s *Store) UpdateTier(ctx context.Context, actor User, name string, l TierSettings) (Tier, error) {
	if err := l.Validate(); err != nil {
		return Tier{}, err
	}
	var t Tier
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := lockedForUpdate(tx).Where("name = ?", name).Take(&t).Error; err != nil {
			return dbErr(err, "tier "+name)
		}
		before, was := t.Settings(), t
		t.Capacity, t.RefillPerSec, t.TokensPerMinute = l.Capacity, l.RefillPerSec, l.TokensPerMinute
		t.FreezeThreshold, t.FreezeMinutes, t.Autotune, t.RefillFloor = l.FreezeThreshold, l.FreezeMinutes, l.Autotune, l.RefillFloor
		if l.UpstreamFallback != "" {
			t.UpstreamFallback = l.UpstreamFallback
		}
		if l.Overage != "" {
			t.Overage = l.Overage
		}
		if l.Billing != "" {
			t.Billing = l.Billing
		}
		t.MonthlyFee, t.IncludedCredit, t.BillCacheHits = l.MonthlyFee, l.IncludedCredit, l.BillCacheHits
		t.BatchFileBytes = l.BatchFileBytes
		t.MaxAPITokens = l.MaxAPITokens
		t.MaxQueuedJobs, t.MaxPendingBatchLines = l.MaxQueuedJobs, l.MaxPendingBatchLines
		t.CreditNeedsVerifiedEmail = l.CreditNeedsVerifiedEmail
		t.StripePriceID, t.GraceDays = l.StripePriceID, l.GraceDays
		t.EffectiveRefillPerSec, t.UpdatedAt = nil, s.now().UTC()
		if !sameTerms(was, t) {
			// Never before the version in force, whatever this node's clock says.
			t.TermsFrom = maxTime(t.UpdatedAt.Truncate(time.Second), was.TermsFrom)
			if err := tx.Create(ptr(t.terms(actor, t.TermsFrom))).Error; err != nil {
				return dbErr(err, "tier terms")
			}
		}
		err := tx.Model(&t).Select("capacity", "refill_per_sec", "tokens_per_minute", "freeze_threshold", "freeze_minutes",
			"autotune", "refill_floor", "upstream_fallback", "monthly_fee", "included_credit", "overage", "bill_cache_hits",
			"batch_file_bytes", "effective_refill_per_sec", "updated_at", "terms_from", "max_api_tokens",
			"max_queued_jobs", "max_pending_batch_lines", "credit_needs_verified_email", "billing", "stripe_price_id", "grace_days").Updates(&t).Error
		if err != nil {
			return dbErr(err, "tier "+name)
		}
		return audit(tx, actor.LastOrgID, actor.ID, "tier.update", name, describeChange(before, l))
	})
	return t, err
}

// describeChange lists the settings that changed, for the audit log.
func describeChange(a, b TierSettings) string {
	var parts []string
	add := func(name string, from, to any) {
		if from != to {
			parts = append(parts, fmt.Sprintf("%s %v -> %v", name, from, to))
		}
	}
	add("capacity", a.Capacity, b.Capacity)
	add("refill_per_sec", a.RefillPerSec, b.RefillPerSec)
	add("tokens_per_minute", a.TokensPerMinute, b.TokensPerMinute)
	add("freeze_threshold", a.FreezeThreshold, b.FreezeThreshold)
	add("freeze_minutes", a.FreezeMinutes, b.FreezeMinutes)
	add("autotune", a.Autotune, b.Autotune)
	add("refill_floor", a.RefillFloor, b.RefillFloor)
	if b.UpstreamFallback != "" {
		add("upstream_fallback", a.UpstreamFallback, b.UpstreamFallback)
	}
	add("monthly_fee", a.MonthlyFee.String(), b.MonthlyFee.String())
	add("included_credit", a.IncludedCredit.String(), b.IncludedCredit.String())
	if b.Overage != "" {
		add("overage", a.Overage, b.Overage)
	}
	add("bill_cache_hits", a.BillCacheHits, b.BillCacheHits)
	add("batch_file_bytes", a.BatchFileBytes, b.BatchFileBytes)
	add("max_api_tokens", a.MaxAPITokens, b.MaxAPITokens)
	add("max_queued_jobs", a.MaxQueuedJobs, b.MaxQueuedJobs)
	add("max_pending_batch_lines", a.MaxPendingBatchLines, b.MaxPendingBatchLines)
	add("credit_needs_verified_email", a.CreditNeedsVerifiedEmail, b.CreditNeedsVerifiedEmail)
	if b.Billing != "" {
		add("billing", a.Billing, b.Billing)
	}
	add("stripe_price_id", a.StripePriceID, b.StripePriceID)
	add("grace_days", a.GraceDays, b.GraceDays)
	if len(parts) == 0 {
		return "no change"
	}
	return strings.Join(parts, ", ")
}
