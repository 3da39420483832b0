package models

import (
	"context"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/apperr"
)

// Organization is a tenant: it owns users, tokens and usage, and has a tier.
type Organization struct {
	ID        int64
	Name      string
	TierID    int64
	Tier      Tier `gorm:"foreignKey:TierID"`
	CreatedAt time.Time
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

// SetOrganizationTier moves an organization to another tier.
func (s *Store) SetOrganizationTier(ctx context.Context, actor User, orgID int64, tierName string) (Organization, error) {
	var o Organization
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var t Tier
		if err := tx.Where("name = ?", tierName).Take(&t).Error; err != nil {
			return dbErr(err, "tier "+tierName)
		}
		if err := tx.Where("id = ?", orgID).Take(&o).Error; err != nil {
			return dbErr(err, "organization")
		}
		if err := tx.Model(&o).Update("tier_id", t.ID).Error; err != nil {
			return dbErr(err, "organization")
		}
		o.TierID, o.Tier = t.ID, t
		return audit(tx, actor.OrgID, actor.ID, "organization.tier", fmt.Sprint(orgID), "tier -> "+t.Name)
	})
	return o, err
}

// NormalizeEmail is how emails are compared and stored: trimmed, lower case.
func NormalizeEmail(email string) string { return strings.ToLower(strings.TrimSpace(email)) }

// CreateOrganizationWithOwner creates an organization on tierName and its
// first user, in one transaction; a taken email is a conflict.
func (s *Store) CreateOrganizationWithOwner(ctx context.Context, orgName, tierName, email, passwordHash string, role Role) (Organization, User, error) {
	var (
		o Organization
		u User
	)
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var t Tier
		if err := tx.Where("name = ?", tierName).Take(&t).Error; err != nil {
			return dbErr(err, "tier "+tierName)
		}
		now := time.Now().UTC()
		o = Organization{Name: orgName, TierID: t.ID, CreatedAt: now}
		if err := tx.Omit("Tier").Create(&o).Error; err != nil {
			return dbErr(err, "organization")
		}
		o.Tier = t
		u = User{OrgID: o.ID, Email: NormalizeEmail(email), PasswordHash: passwordHash, Role: role, CreatedAt: now}
		if err := tx.Create(&u).Error; err != nil {
			if err := dbErr(err, "user"); apperr.CodeOf(err) == apperr.Conflict {
				return apperr.WithReason(apperr.Conflict, "email_taken", "an account with this email already exists")
			}
			return dbErr(err, "user")
		}
		return audit(tx, o.ID, u.ID, "organization.create", o.Name, "owner "+u.Email)
	})
	return o, u, err
}
