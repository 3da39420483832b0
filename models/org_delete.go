package models

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/apperr"
)

// OrgDeletion is what deleting an organization changed.
type OrgDeletion struct {
	Org                Organization
	MembersRemoved     int64
	SessionsEnded      int64
	InvitationsRevoked int64
	TokensStopped      int64 // its tokens not revoked before, which stop now
}

// DeleteOrganization deletes orgID, audited: its memberships go (it leaves
// every member's list of organizations), their sessions acting in it end,
// its pending invitations are revoked, and its tokens stop (Authenticate
// refuses a deleted organization's; the caller has every node's cache
// forget them). Its data stays until purgeAfter, for export
// (PurgeDueOrganizations deletes it then). An organization an admin
// belongs to is refused, so that the operators' own is never deleted by a
// slip; a deleted one is a conflict.
func (s *Store) DeleteOrganization(ctx context.Context, actor User, orgID int64, purgeAfter time.Time) (OrgDeletion, error) {
	var d OrgDeletion
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := lockOrganization(tx, orgID); err != nil {
			return err
		}
		var o Organization
		if err := tx.Preload("Tier").Where("id = ?", orgID).Take(&o).Error; err != nil {
			return dbErr(err, "organization")
		}
		if o.Deleted() {
			return apperr.WithReason(apperr.Conflict, "organization_deleted", fmt.Sprintf("%s was already deleted on %s", o.Name, o.DeletedAt.UTC().Format(time.DateOnly)))
		}
		var admins []string
		if err := tx.Table("memberships m").Joins("JOIN users u ON u.id = m.user_id").
			Where("m.org_id = ? AND u.role = ?", orgID, RoleAdmin).Order("u.email").Pluck("u.email", &admins).Error; err != nil {
			return dbErr(err, "memberships")
		}
		if len(admins) > 0 {
			return apperr.WithReason(apperr.Conflict, "organization_has_admin",
				fmt.Sprintf("%s has an admin among its members (%s): an admin's organization cannot be deleted", o.Name, admins[0]))
		}
		now := s.now().UTC()
		res := tx.Where("org_id = ?", orgID).Delete(&Membership{})
		if res.Error != nil {
			return dbErr(res.Error, "memberships")
		}
		d.MembersRemoved = res.RowsAffected
		res = tx.Model(&LoginSession{}).Where("org_id = ? AND revoked_at IS NULL AND expires_at > ?", orgID, now).Update("revoked_at", now)
		if res.Error != nil {
			return dbErr(res.Error, "sessions")
		}
		d.SessionsEnded = res.RowsAffected
		res = tx.Table("invitations").Where("org_id = ? AND accepted_at IS NULL AND revoked_at IS NULL AND expires_at > ?", orgID, now).
			Update("revoked_at", now)
		if res.Error != nil {
			return dbErr(res.Error, "invitations")
		}
		d.InvitationsRevoked = res.RowsAffected
		if err := tx.Model(&APIToken{}).Where("org_id = ? AND revoked_at IS NULL", orgID).Count(&d.TokensStopped).Error; err != nil {
			return dbErr(err, "tokens")
		}
		purge := purgeAfter.UTC()
		if err := tx.Model(&Organization{}).Where("id = ?", orgID).
			Updates(map[string]any{"deleted_at": now, "deleted_by": actor.ID, "purge_after": purge}).Error; err != nil {
			return dbErr(err, "organization")
		}
		o.DeletedAt, o.DeletedBy, o.PurgeAfter = &now, &actor.ID, &purge
		d.Org = o
		return audit(tx, orgID, actor.ID, "organization.delete", fmt.Sprint(orgID), fmt.Sprintf(
			"%s: %d members removed, %d sessions ended, %d invitations revoked, %d tokens stopped; data purged after %s",
			o.Name, d.MembersRemoved, d.SessionsEnded, d.InvitationsRevoked, d.TokensStopped, purge.Format(time.RFC3339)))
	})
	return d, dbErr(err, "organization")
}

// purgeSteps are the tables of an organization's data, children before
// what they reference, each with the condition that selects the
// organization's rows (its one placeholder is the organization's id).
// The organization's row stays, a tombstone that the audit log and
// users.org_id still name; the audit log stays too. A table added later
// that holds an organization's data belongs here.
var purgeSteps = []struct{ table, where string }{
	{"batch_file_chunks", "file_id IN (SELECT id FROM batch_files WHERE org_id = ?)"},
	{"batch_results", "batch_id IN (SELECT id FROM batches WHERE org_id = ?)"},
	{"batches", "org_id = ?"},
	{"batch_files", "org_id = ?"},
	{"queued_jobs", "org_id = ?"},
	{"org_queues", "org_id = ?"},
	{"stored_responses", "org_id = ?"},
	{"usage_events", "org_id = ?"},
	{"usage_hourly", "org_id = ?"},
	{"usage_monthly", "org_id = ?"},
	{"usage_monthly_models", "org_id = ?"},
	{"invoice_lines", "invoice_id IN (SELECT id FROM invoices WHERE org_id = ?)"},
	{"invoices", "org_id = ?"},
	{"budget_alerts", "org_id = ?"},
	{"budget_ledgers", "org_id = ?"},
	{"balance_entries", "org_id = ?"},
	{"balance_spending", "org_id = ?"},
	{"balance_ledgers", "org_id = ?"},
	{"org_balances", "org_id = ?"},
	{"token_budget_ledgers", "org_id = ?"},
	{"freezes", "org_id = ?"},
	{"upgrade_requests", "org_id = ?"},
	{"invitations", "org_id = ?"},
	{"tier_memberships", "org_id = ?"},
	{"api_tokens", "org_id = ?"},
}

// PurgeDueOrganizations deletes the data of every deleted organization
// whose purge_after has passed by the store's clock, batch rows at a time
// (each batch its own statement, so no transaction holds a table for
// long), then marks each purged, audited. It returns the ids it purged.
// Run again after a failure it carries on where it stopped: every step
// deletes what is left. Nodes may run it at once: the deletes are
// idempotent and only one marks an organization purged.
func (s *Store) PurgeDueOrganizations(ctx context.Context, batch int) ([]int64, error) {
	now := s.now().UTC()
	var due []Organization
	err := s.db.WithContext(ctx).Where("purge_after IS NOT NULL AND purged_at IS NULL AND purge_after <= ?", now).Order("id").Find(&due).Error
	if err != nil {
		return nil, dbErr(err, "organizations")
	}
	var purged []int64
	for _, o := range due {
		rows, err := s.purgeOrganization(ctx, o.ID, batch)
		if err != nil {
			return purged, err
		}
		first := false
		err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			// Conditional, so that of two nodes purging at once one
			// records it.
			res := tx.Model(&Organization{}).Where("id = ? AND purged_at IS NULL", o.ID).Updates(map[string]any{"purged_at": now,
				"webhook_url": "", "webhook_secret": "", "budget_limit": nil})
			if res.Error != nil || res.RowsAffected == 0 {
				return dbErr(res.Error, "organization")
			}
			first = true
			if err := tx.Model(&LoginSession{}).Where("org_id = ?", o.ID).Update("org_id", nil).Error; err != nil {
				return dbErr(err, "sessions")
			}
			return audit(tx, o.ID, 0, "organization.purge", fmt.Sprint(o.ID), fmt.Sprintf("%s: %d rows deleted", o.Name, rows))
		})
		if err != nil {
			return purged, err
		}
		if first {
			purged = append(purged, o.ID)
		}
	}
	return purged, nil
}

// purgeOrganization deletes orgID's rows of every purge step, batch at a
// time, and counts them.
func (s *Store) purgeOrganization(ctx context.Context, orgID int64, batch int) (int64, error) {
	db := s.db.WithContext(ctx)
	// A row's own address, which every table has whatever its key.
	rowID := "rowid"
	if db.Dialector.Name() == "postgres" {
		rowID = "ctid"
	}
	var total int64
	for _, st := range purgeSteps {
		q := fmt.Sprintf("DELETE FROM %s WHERE %s IN (SELECT %s FROM %s WHERE %s LIMIT ?)", st.table, rowID, rowID, st.table, st.where)
		for {
			res := db.Exec(q, orgID, batch)
			if res.Error != nil {
				return total, dbErr(res.Error, "purge "+st.table)
			}
			total += res.RowsAffected
			if res.RowsAffected < int64(batch) {
				break
			}
			if err := ctx.Err(); err != nil {
				return total, err
			}
		}
	}
	return total, nil
}
