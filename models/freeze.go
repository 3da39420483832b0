package models

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/apperr"
)

// Freeze is a token suspended for abuse until FrozenUntil, or until an admin
// lifts it.
type Freeze struct {
	ID          int64
	TokenID     int64
	OrgID       int64
	Reason      string
	WindowCount int
	FrozenFrom  time.Time
	FrozenUntil time.Time
	LiftedAt    *time.Time
	LiftedBy    *int64
}

// Active says whether the freeze still applies at now.
func (f Freeze) Active(now time.Time) bool { return f.LiftedAt == nil && now.Before(f.FrozenUntil) }

// CreateFreeze stores a freeze and its audit entry together.
func (s *Store) CreateFreeze(ctx context.Context, f Freeze) (Freeze, error) {
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&f).Error; err != nil {
			return dbErr(err, "freeze")
		}
		return audit(tx, f.OrgID, 0, "token.freeze", fmt.Sprint(f.TokenID),
			fmt.Sprintf("%s; frozen until %s", f.Reason, f.FrozenUntil.UTC().Format(time.RFC3339)))
	})
	return f, dbErr(err, "freeze")
}

// ActiveFreezes lists every freeze in force at now, for the gateway's
// in-memory set.
func (s *Store) ActiveFreezes(ctx context.Context, now time.Time) ([]Freeze, error) {
	var fs []Freeze
	err := s.db.WithContext(ctx).Where("lifted_at IS NULL AND frozen_until > ?", now.UTC()).Find(&fs).Error
	return fs, dbErr(err, "freezes")
}

// OrganizationFreezes lists an organization's latest freezes, for its dashboard.
func (s *Store) OrganizationFreezes(ctx context.Context, orgID int64, limit int) ([]Freeze, error) {
	var fs []Freeze
	err := s.db.WithContext(ctx).Where("org_id = ?", orgID).Order("id DESC").Limit(limit).Find(&fs).Error
	return fs, dbErr(err, "freezes")
}

// Freezes lists the latest freezes of every organization, for admins.
func (s *Store) Freezes(ctx context.Context, limit int) ([]Freeze, error) {
	var fs []Freeze
	err := s.db.WithContext(ctx).Order("id DESC").Limit(limit).Find(&fs).Error
	return fs, dbErr(err, "freezes")
}

// LiftFreeze ends a freeze early. Lifting one that already ended is harmless.
func (s *Store) LiftFreeze(ctx context.Context, admin User, id int64) (Freeze, error) {
	var f Freeze
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Where("id = ?", id).Take(&f).Error; err != nil {
			return dbErr(err, "freeze")
		}
		if f.LiftedAt != nil {
			return nil
		}
		now := time.Now().UTC()
		f.LiftedAt, f.LiftedBy = &now, &admin.ID
		if err := tx.Model(&f).Updates(map[string]any{"lifted_at": now, "lifted_by": admin.ID}).Error; err != nil {
			return dbErr(err, "freeze")
		}
		return audit(tx, f.OrgID, admin.ID, "token.unfreeze", fmt.Sprint(f.TokenID), fmt.Sprintf("freeze %d lifted by %s", f.ID, admin.Email))
	})
	if err != nil && apperr.CodeOf(err) == apperr.NotFound {
		return f, apperr.New(apperr.NotFound, "no such freeze")
	}
	return f, dbErr(err, "freeze")
}
