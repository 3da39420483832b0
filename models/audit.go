package models

import (
	"context"
	"time"

	"gorm.io/gorm"
)

// AuditEntry records who changed what.
type AuditEntry struct {
	ID          int64
	OrgID       *int64
	ActorUserID *int64
	Action      string
	Target      string
	Detail      string
	CreatedAt   time.Time
}

// TableName keeps the table's name singular, as in the schema.
func (AuditEntry) TableName() string { return "audit_log" }

// audit writes an entry inside the caller's transaction, so a change and its
// record land together or not at all. Zero ids mean "none" (the system).
func audit(tx *gorm.DB, orgID, actorID int64, action, target, detail string) error {
	e := AuditEntry{Action: action, Target: target, Detail: detail, CreatedAt: time.Now().UTC()}
	if orgID != 0 {
		e.OrgID = &orgID
	}
	if actorID != 0 {
		e.ActorUserID = &actorID
	}
	return dbErr(tx.Create(&e).Error, "audit entry")
}

// AuditLog returns an organization's latest entries.
func (s *Store) AuditLog(ctx context.Context, orgID int64, limit int) ([]AuditEntry, error) {
	var es []AuditEntry
	err := s.db.WithContext(ctx).Where("org_id = ?", orgID).Order("id DESC").Limit(limit).Find(&es).Error
	return es, dbErr(err, "audit log")
}
