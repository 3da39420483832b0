package models_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// orgRows counts orgID's rows in the tables the purge empties.
func orgRows(t *testing.T, db *models.DB, orgID int64) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, table := range []string{"usage_events", "usage_hourly", "usage_monthly", "usage_monthly_models", "invoices", "api_tokens",
		"freezes", "invitations", "tier_memberships"} {
		var n int64
		if err := db.Gorm.Table(table).Where("org_id = ?", orgID).Count(&n).Error; err != nil {
			t.Fatal(err)
		}
		out[table] = n
	}
	return out
}

// TestPurgeDeletesADeletedOrganizationsDataAfterItsRetention: a deleted
// organization's data stays until purge_after by the store's clock, then
// goes, batch by batch, and the purge is audited once; another
// organization's data is untouched and the tombstone row stays.
func TestPurgeDeletesADeletedOrganizationsDataAfterItsRetention(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		tm := newTeam(t, db)
		s := tm.s
		keep, keepOwner, err := s.CreateOrganizationWithOwner(ctx, "Keep", "free", "owner@keep.example", "h", models.RoleMember)
		if err != nil {
			t.Fatal(err)
		}
		admin := testdb.AddMember(t, db, keep.ID, "root@example.com", "h", models.RoleOwner)
		fill := func(orgID, userID int64, name string) {
			tok, _, err := s.CreateAPIToken(ctx, orgID, userID, name, nil)
			if err != nil {
				t.Fatal(err)
			}
			var evs []models.UsageEvent
			for i := range 7 { // more than a batch of 2
				evs = append(evs, models.UsageEvent{RequestID: fmt.Sprintf("%s-%d", name, i), OrgID: orgID, TokenID: tok.ID, Model: "m",
					PromptTokens: 3, CompletionTokens: 4, Status: 200, CreatedAt: tm.clock.Now().Add(time.Duration(i) * time.Hour)})
			}
			if err := s.InsertUsageEvents(ctx, evs); err != nil {
				t.Fatal(err)
			}
			if _, err := s.EnsureInvoice(ctx, orgID, tm.clock.Now()); err != nil {
				t.Fatal(err)
			}
		}
		fill(tm.org.ID, tm.owner.ID, "doomed")
		fill(keep.ID, keepOwner.ID, "kept")
		keepBefore := orgRows(t, db, keep.ID)

		d, err := s.DeleteOrganization(ctx, admin.User, tm.org.ID, tm.clock.Now().Add(30*24*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if d.MembersRemoved != 1 || d.TokensStopped != 1 || !d.Org.Deleted() {
			t.Fatalf("deletion %+v", d)
		}
		tm.clock.Advance(30*24*time.Hour - time.Second)
		if ids, err := s.PurgeDueOrganizations(ctx, 2); err != nil || len(ids) != 0 {
			t.Fatalf("a second early: purged %v %v", ids, err)
		}
		if n := orgRows(t, db, tm.org.ID)["usage_events"]; n != 7 {
			t.Fatalf("before purge_after the data is there to export: %d events", n)
		}
		tm.clock.Advance(time.Second)
		ids, err := s.PurgeDueOrganizations(ctx, 2)
		if err != nil || len(ids) != 1 || ids[0] != tm.org.ID {
			t.Fatalf("purge: %v %v", ids, err)
		}
		for table, n := range orgRows(t, db, tm.org.ID) {
			if n != 0 {
				t.Errorf("%s still holds %d of the purged organization's rows", table, n)
			}
		}
		if after := orgRows(t, db, keep.ID); fmt.Sprint(after) != fmt.Sprint(keepBefore) {
			t.Errorf("another organization's data changed:\n%v\n%v", keepBefore, after)
		}
		o, err := s.Organization(ctx, tm.org.ID)
		if err != nil || o.PurgedAt == nil || !o.PurgedAt.Equal(tm.clock.Now()) {
			t.Fatalf("tombstone %+v %v", o, err)
		}
		if ids, err := s.PurgeDueOrganizations(ctx, 2); err != nil || len(ids) != 0 {
			t.Fatalf("purged twice: %v %v", ids, err)
		}
		entries, _, err := s.AuditEntries(ctx, models.AuditQuery{ActionPrefix: "organization.purge"})
		if err != nil || len(entries) != 1 || entries[0].ActorUserID != nil ||
			entries[0].Detail != fmt.Sprintf("Acme: %d rows deleted", 7+7+1+1+1+1+1) {
			t.Fatalf("audit %+v %v", entries, err)
		}
	})
}

// TestTwoAdminsDisablingEachOtherLeaveOne: an admin may disable another,
// never the last one enabled: run at once, one of the two disables wins
// and the other is refused with last_admin.
func TestTwoAdminsDisablingEachOtherLeaveOne(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		s := models.NewStore(db)
		for round := range 5 {
			var admins [2]models.User
			for i := range admins {
				_, m, err := s.CreateOrganizationWithOwner(ctx, "Ops", "premium", fmt.Sprintf("ops%d-%d@example.com", round, i), "h", models.RoleAdmin)
				if err != nil {
					t.Fatal(err)
				}
				admins[i] = m.User
			}
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i := range 2 {
				wg.Go(func() { _, errs[i] = s.DisableUser(ctx, admins[i], admins[1-i].ID) })
			}
			wg.Wait()
			ok, refused := 0, 0
			for _, err := range errs {
				switch {
				case err == nil:
					ok++
				case apperr.As(err).Reason == "last_admin":
					refused++
				default:
					t.Fatalf("round %d: %v", round, err)
				}
			}
			if ok != 1 || refused != 1 {
				t.Fatalf("round %d: %d disables, %d refusals (%v)", round, ok, refused, errs)
			}
			// The next round starts again from two enabled admins.
			if err := db.Gorm.Exec("UPDATE users SET role = 'member' WHERE role = 'admin'").Error; err != nil {
				t.Fatal(err)
			}
		}
	})
}
