package models

import (
	"context"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/apperr"
)

// UpgradeRequest is an organization asking an admin to move it to another
// tier.
type UpgradeRequest struct {
	ID        int64
	OrgID     int64
	UserID    int64
	FromTier  string
	ToTier    string
	Note      string
	Status    string // pending | approved | declined
	CreatedAt time.Time
	DecidedAt *time.Time
	DecidedBy *int64
}

// Upgrade request states.
const (
	UpgradePending  = "pending"
	UpgradeApproved = "approved"
	UpgradeDeclined = "declined"
)

const maxUpgradeNote = 500

// RequestUpgrade files u's organization's request to move to toTier. An
// organization has at most one pending request.
func (s *Store) RequestUpgrade(ctx context.Context, u Member, toTier, note string) (UpgradeRequest, error) {
	note = strings.TrimSpace(note)
	if len(note) > maxUpgradeNote {
		return UpgradeRequest{}, apperr.New(apperr.Unprocessable, "note must be at most %d characters", maxUpgradeNote)
	}
	var r UpgradeRequest
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var o Organization
		if err := tx.Preload("Tier").Where("id = ?", u.OrgID).Take(&o).Error; err != nil {
			return dbErr(err, "organization")
		}
		var t Tier
		if err := tx.Where("name = ?", toTier).Take(&t).Error; err != nil {
			return dbErr(err, "tier "+toTier)
		}
		if t.ID == o.TierID {
			return apperr.New(apperr.Unprocessable, "the organization is already on the %s tier", toTier)
		}
		r = UpgradeRequest{OrgID: o.ID, UserID: u.ID, FromTier: o.Tier.Name, ToTier: t.Name, Note: note,
			Status: UpgradePending, CreatedAt: time.Now().UTC()}
		if err := tx.Create(&r).Error; err != nil {
			if err := dbErr(err, "upgrade request"); apperr.CodeOf(err) == apperr.Conflict {
				return apperr.New(apperr.Conflict, "the organization already has a pending request; an admin will answer it")
			}
			return dbErr(err, "upgrade request")
		}
		return audit(tx, o.ID, u.ID, "upgrade.request", fmt.Sprint(r.ID), o.Tier.Name+" -> "+t.Name)
	})
	return r, dbErr(err, "upgrade")
}

// UpgradeRequests lists requests in a state ("" for all), oldest first,
// for admins; orgID 0 means every organization.
func (s *Store) UpgradeRequests(ctx context.Context, orgID int64, status string) ([]UpgradeRequest, error) {
	q := s.db.WithContext(ctx).Order("id")
	if orgID != 0 {
		q = q.Where("org_id = ?", orgID)
	}
	if status != "" {
		q = q.Where("status = ?", status)
	}
	var out []UpgradeRequest
	return out, dbErr(q.Find(&out).Error, "upgrade requests")
}

// DecideUpgrade approves (moving the organization to the requested tier)
// or declines a pending request, audited; a decided request is a conflict.
func (s *Store) DecideUpgrade(ctx context.Context, admin User, id int64, approve bool) (UpgradeRequest, error) {
	var r UpgradeRequest
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Where("id = ?", id).Take(&r).Error; err != nil {
			return dbErr(err, "upgrade request")
		}
		status := UpgradeDeclined
		if approve {
			status = UpgradeApproved
		}
		now := s.now().UTC()
		res := tx.Model(&UpgradeRequest{}).Where("id = ? AND status = ?", id, UpgradePending).
			Updates(map[string]any{"status": status, "decided_at": now, "decided_by": admin.ID})
		if res.Error != nil {
			return dbErr(res.Error, "upgrade request")
		}
		if res.RowsAffected == 0 {
			return apperr.New(apperr.Conflict, "this request was already %s", r.Status)
		}
		r.Status, r.DecidedAt, r.DecidedBy = status, &now, &admin.ID
		if approve {
			var t Tier
			if err := tx.Where("name = ?", r.ToTier).Take(&t).Error; err != nil {
				return dbErr(err, "tier "+r.ToTier)
			}
			var o Organization
			if err := lockedForUpdate(tx).Where("id = ?", r.OrgID).Take(&o).Error; err != nil {
				return dbErr(err, "organization")
			}
			if err := s.joinTier(tx, admin, r.OrgID, o.TierID, t.ID); err != nil {
				return err
			}
			if err := tx.Model(&Organization{}).Where("id = ?", r.OrgID).Update("tier_id", t.ID).Error; err != nil {
				return dbErr(err, "organization")
			}
		}
		return audit(tx, r.OrgID, admin.ID, "upgrade."+status, fmt.Sprint(r.ID), r.FromTier+" -> "+r.ToTier)
	})
	return r, dbErr(err, "upgrade")
}
