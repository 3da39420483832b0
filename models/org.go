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

// Organization is a tenant: it owns users, tokens and usage, and has a tier.
type Organization struct {
	ID     int64
	Name   string
	TierID int64
	Tier   Tier `gorm:"foreignKey:TierID"`
	// TimeZone is the IANA zone its days are counted in (charts); billing
	// periods are calendar months in UTC whatever it is.
	TimeZone string
	// BudgetLimit is the owner's monthly spending limit; nil for none.
	BudgetLimit *money.Amount
	// BudgetHardStop refuses requests that would pass the limit; without
	// it the limit only raises alerts.
	BudgetHardStop bool
	// WebhookURL receives budget alerts (only on hosts the operator
	// allows); WebhookSecret, sealed, signs them.
	WebhookURL    string
	WebhookSecret string
	CreatedAt     time.Time
	// DeletedAt is when an admin deleted it (nil: it is live): it has no
	// members and its tokens stop; its data stays until PurgeAfter, for
	// export, and PurgedAt says when the purge deleted it.
	DeletedAt  *time.Time
	DeletedBy  *int64
	PurgeAfter *time.Time
	PurgedAt   *time.Time
	// LowBalanceThreshold is the prepaid balance at or below which its
	// owners hear it runs low (once per fall); nil for no alert.
	LowBalanceThreshold *money.Amount
}

// Deleted says whether an admin has deleted the organization.
func (o Organization) Deleted() bool { return o.DeletedAt != nil }

// Budget is an organization's spending limit as its owner sets it.
type Budget struct {
	Limit    *money.Amount // nil: no budget
	HardStop bool
}

// SetBudget sets or (with a nil limit) removes an organization's monthly
// budget, audited.
func (s *Store) SetBudget(ctx context.Context, actor User, orgID int64, b Budget) (Organization, error) {
	if b.Limit != nil && (*b.Limit < 0 || *b.Limit > money.MaxAmount) {
		return Organization{}, apperr.New(apperr.Unprocessable, "monthly_limit must be from 0 to %s", money.MaxAmount)
	}
	detail := "no budget"
	if b.Limit != nil {
		detail = fmt.Sprintf("monthly limit %s, hard stop %v", b.Limit, b.HardStop)
	}
	return s.updateOrganization(ctx, actor, orgID, "organization.budget", detail,
		map[string]any{"budget_limit": b.Limit, "budget_hard_stop": b.HardStop})
}

// SetTimeZone sets the zone an organization's days are counted in; the
// caller has checked it names a zone.
func (s *Store) SetTimeZone(ctx context.Context, actor User, orgID int64, zone string) (Organization, error) {
	return s.updateOrganization(ctx, actor, orgID, "organization.time_zone", zone, map[string]any{"time_zone": zone})
}

// SetWebhook sets where budget alerts are posted and the sealed secret that
// signs them; an empty url turns them off.
func (s *Store) SetWebhook(ctx context.Context, actor User, orgID int64, url, sealedSecret string) (Organization, error) {
	detail := "off"
	if url != "" {
		detail = url
	}
	return s.updateOrganization(ctx, actor, orgID, "organization.webhook", detail,
		map[string]any{"webhook_url": url, "webhook_secret": sealedSecret})
}

// updateOrganization changes columns of one organization and audits it.
func (s *Store) updateOrganization(ctx context.Context, actor User, orgID int64, action, detail string, cols map[string]any) (Organization, error) {
	var o Organization
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Model(&Organization{}).Where("id = ?", orgID).Updates(cols)
		if res.Error != nil {
			return dbErr(res.Error, "organization")
		}
		if res.RowsAffected == 0 {
			return apperr.New(apperr.NotFound, "organization not found")
		}
		if err := tx.Preload("Tier").Where("id = ?", orgID).Take(&o).Error; err != nil {
			return dbErr(err, "organization")
		}
		return audit(tx, orgID, actor.ID, action, fmt.Sprint(orgID), detail)
	})
	return o, dbErr(err, "organization")
}

// Organization returns one organization with its tier.
func (s *Store) Organization(ctx context.Context, id int64) (Organization, error) {
	var o Organization
	err := s.db.WithContext(ctx).Preload("Tier").Where("id = ?", id).Take(&o).Error
	return o, dbErr(err, "organization")
}

// Organizations lists every organization with its tier, for admins.
func (s *Store) Organizations(ctx context.Context) ([]Organization, error) {
	var os []Organization
	err := s.db.WithContext(ctx).Preload("Tier").Order("id").Find(&os).Error
	return os, dbErr(err, "organizations")
}

// SetOrganizationTier moves an organization to another tier from now on,
// recorded as a membership so the months it spans bill each tier for its
// part of them.
func (s *Store) SetOrganizationTier(ctx context.Context, actor User, orgID int64, tierName string) (Organization, error) {
	var o Organization
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var t Tier
		if err := tx.Where("name = ?", tierName).Take(&t).Error; err != nil {
			return dbErr(err, "tier "+tierName)
		}
		if err := lockedForUpdate(tx).Where("id = ?", orgID).Take(&o).Error; err != nil {
			return dbErr(err, "organization")
		}
		if err := s.joinTier(tx, actor, orgID, o.TierID, t.ID); err != nil {
			return err
		}
		if err := tx.Model(&o).Update("tier_id", t.ID).Error; err != nil {
			return dbErr(err, "organization")
		}
		o.TierID, o.Tier = t.ID, t
		// Filed under the organization moved, so its audit trail shows it.
		return audit(tx, orgID, actor.ID, "organization.tier", fmt.Sprint(orgID), "tier -> "+t.Name)
	})
	return o, dbErr(err, "organization")
}

// NormalizeEmail is how emails are compared and stored: trimmed, lower case.
func NormalizeEmail(email string) string { return strings.ToLower(strings.TrimSpace(email)) }

// CreateOrganizationWithOwner creates an organization on tierName and its
// first user, its owner, in one transaction; a taken email is a conflict.
// accountRole RoleAdmin makes the bootstrap admin (who owns the operators'
// organization); any other role an ordinary user.
func (s *Store) CreateOrganizationWithOwner(ctx context.Context, orgName, tierName, email, passwordHash string, accountRole Role) (Organization, Member, error) {
	return s.createOrganizationWithOwner(ctx, orgName, tierName, email, passwordHash, accountRole, nil)
}

// createOrganizationWithOwner is CreateOrganizationWithOwner with also,
// when not nil, run in the same transaction once the owner exists (single
// sign-on links the new owner's identity).
func (s *Store) createOrganizationWithOwner(ctx context.Context, orgName, tierName, email, passwordHash string, accountRole Role,
	also func(tx *gorm.DB, m Member) error) (Organization, Member, error) {
	var (
		o Organization
		m Member
	)
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		if o, m, err = s.newOrganizationWithOwner(tx, orgName, tierName, email, passwordHash, accountRole, nil); err != nil {
			return err
		}
		if also != nil {
			return also(tx, m)
		}
		return nil
	})
	return o, m, dbErr(err, "organization")
}

// newOrganizationWithOwner is CreateOrganizationWithOwner inside tx;
// verifiedAt, when set, is when the owner's address was verified.
func (s *Store) newOrganizationWithOwner(tx *gorm.DB, orgName, tierName, email, passwordHash string, accountRole Role, verifiedAt *time.Time) (Organization, Member, error) {
	if accountRole != RoleAdmin {
		accountRole = RoleMember
	}
	var t Tier
	if err := tx.Where("name = ?", tierName).Take(&t).Error; err != nil {
		return Organization{}, Member{}, dbErr(err, "tier "+tierName)
	}
	now := s.now().UTC()
	o := Organization{Name: orgName, TierID: t.ID, CreatedAt: now}
	if err := tx.Omit("Tier").Create(&o).Error; err != nil {
		return o, Member{}, dbErr(err, "organization")
	}
	if err := tx.Create(&TierMembership{OrgID: o.ID, TierID: t.ID, EffectiveFrom: now.Truncate(time.Second)}).Error; err != nil {
		return o, Member{}, dbErr(err, "tier membership")
	}
	o.Tier = t
	u := User{LastOrgID: o.ID, Email: NormalizeEmail(email), PasswordHash: passwordHash, AccountRole: accountRole, CreatedAt: now,
		EmailVerifiedAt: verifiedAt}
	if err := createUser(tx, &u); err != nil {
		return o, Member{}, err
	}
	if err := addMembership(tx, o.ID, u.ID, RoleOwner, now); err != nil {
		return o, Member{}, err
	}
	m := Member{User: u, OrgID: o.ID, Role: RoleOwner}
	return o, m, audit(tx, o.ID, u.ID, "organization.create", o.Name, "owner "+u.Email)
}
