package models

import (
	"context"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/apperr"
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

// AuditPageSize is how many entries a page of the admin's audit log shows.
const AuditPageSize = 50

// AuditQuery filters the audit log of every organization, for admins.
type AuditQuery struct {
	OrgID int64 // 0: every organization
	// ActionPrefix keeps actions starting with it: "tier." for every tier
	// change, "price.set" for one action. Lower-case letters, digits, '.',
	// '_' and '-' only.
	ActionPrefix string
	From, To     time.Time // entries in [From, To); a zero time is no bound
	Page         int       // from 1; below 1 is the first
	PageSize     int       // 0 is AuditPageSize
}

// AuditRecord is an audit entry with the names an admin reads it by.
type AuditRecord struct {
	ID          int64
	OrgID       *int64
	OrgName     string // "" when the entry has no organization or it is gone
	ActorUserID *int64
	ActorEmail  string // "" for the system
	Action      string
	Target      string
	Detail      string
	CreatedAt   time.Time
}

// maxActionPrefix bounds an action filter; actions are short dotted words.
const maxActionPrefix = 64

// validActionPrefix: a prefix is compared byte-wise, so only plain ASCII
// that needs no escaping is accepted.
func validActionPrefix(p string) bool {
	if len(p) > maxActionPrefix {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// AuditEntries reads a page of the audit log, newest first, filtered as q
// says, and whether older entries follow. An action prefix is a byte-wise
// range (prefix <= action < the prefix with its last byte raised), so the
// (action, created_at) index serves it; on Postgres it compares in the C
// collation, which is byte-wise whatever the database's collation. The
// organization and the time range use (org_id, created_at) and (created_at).
func (s *Store) AuditEntries(ctx context.Context, q AuditQuery) ([]AuditRecord, bool, error) {
	if !validActionPrefix(q.ActionPrefix) {
		return nil, false, apperr.Field(apperr.Invalid, "invalid_action", "action",
			"action must be a prefix of an action such as tier. or price.set: lower-case letters, digits, '.', '_' and '-'")
	}
	if q.PageSize <= 0 {
		q.PageSize = AuditPageSize
	}
	q.Page = max(q.Page, 1)
	// The page is cut from audit_log alone, and only its rows are joined
	// to their organization and actor, so a deep page does not join the
	// rows it skips.
	page := s.db.Table("audit_log").Select("id, org_id, actor_user_id, action, target, detail, created_at")
	if q.OrgID != 0 {
		page = page.Where("org_id = ?", q.OrgID)
	}
	if p := q.ActionPrefix; p != "" {
		action := "action"
		if s.db.Dialector.Name() == "postgres" {
			action = `action COLLATE "C"`
		}
		next := p[:len(p)-1] + string(p[len(p)-1]+1) // every byte is ASCII, so this stays one byte
		page = page.Where(action+" >= ? AND "+action+" < ?", p, next)
	}
	if !q.From.IsZero() {
		page = page.Where("created_at >= ?", q.From.UTC())
	}
	if !q.To.IsZero() {
		page = page.Where("created_at < ?", q.To.UTC())
	}
	page = page.Order("created_at DESC, id DESC").Limit(q.PageSize + 1).Offset((q.Page - 1) * q.PageSize)
	var out []AuditRecord
	err := s.db.WithContext(ctx).Table("(?) a", page).
		Select(`a.id, a.org_id, COALESCE(o.name, '') AS org_name, a.actor_user_id, COALESCE(u.email, '') AS actor_email,
			a.action, a.target, a.detail, a.created_at`).
		Joins("LEFT JOIN organizations o ON o.id = a.org_id").
		Joins("LEFT JOIN users u ON u.id = a.actor_user_id").
		Order("a.created_at DESC, a.id DESC").Scan(&out).Error
	if err != nil {
		return nil, false, dbErr(err, "audit log")
	}
	more := len(out) > q.PageSize
	out = out[:min(len(out), q.PageSize)]
	for i := range out {
		out[i].CreatedAt = out[i].CreatedAt.UTC()
	}
	return out, more, nil
}
