package models_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// describe is a month's (tier, terms version) pairs, as "tier fee/credit/
// overage: first day–last day (seconds)".
func describe(m models.MonthTerms) string {
	var parts []string
	for _, t := range m.Terms {
		var spans []string
		for _, sp := range t.Spans {
			spans = append(spans, sp.From.Format("Jan 2 15:04:05")+"–"+sp.To.Format("Jan 2 15:04:05"))
		}
		parts = append(parts, fmt.Sprintf("%s %s/%s/%s: %s (%d s)", t.Terms.TierName, t.Terms.MonthlyFee, t.Terms.IncludedCredit, t.Terms.Overage,
			strings.Join(spans, ", "), t.Seconds))
	}
	return strings.Join(parts, "; ")
}

// TestTierTermsAreVersioned: every store path that changes a tier's terms
// or an organization's tier leaves a history that agrees with the rows.
func TestTierTermsAreVersioned(t *testing.T) {
	nov := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		run  func(t *testing.T, db *models.DB, clock *clocktest.Clock, s *models.Store, admin models.User, org models.Organization)
	}{
		{"edits at once leave the tier row at the version in force", func(t *testing.T, _ *models.DB, _ *clocktest.Clock, s *models.Store, admin models.User, org models.Organization) {
			// The clock stands still: every edit is in force from the same
			// instant, and the last one applied is the one in force.
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Go(func() {
					cur, err := s.TierByName(ctx, "premium")
					if err != nil {
						t.Error(err)
						return
					}
					l := cur.Settings()
					l.MonthlyFee = money.Amount(50+i) * money.Dollar
					if _, err := s.UpdateTier(ctx, admin, "premium", l); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			tier, _ := s.TierByName(ctx, "premium")
			if _, err := s.SetOrganizationTier(ctx, admin, org.ID, "premium"); err != nil {
				t.Fatal(err)
			}
			m, err := s.MonthTerms(ctx, org.ID, nov)
			if err != nil || len(m.Terms) != 1 || m.Terms[0].Terms.MonthlyFee != tier.MonthlyFee || !tier.TermsFrom.Equal(nov) {
				t.Errorf("the tier row says %s from %v; the month: %s %v", tier.MonthlyFee, tier.TermsFrom, describe(m), err)
			}
		}},
		{"an edit of anything but the terms is no new version", func(t *testing.T, _ *models.DB, clock *clocktest.Clock, s *models.Store, admin models.User, org models.Organization) {
			clock.Advance(48 * time.Hour)
			free, _ := s.TierByName(ctx, "free")
			l := free.Settings()
			l.Capacity = 99
			got, err := s.UpdateTier(ctx, admin, "free", l)
			if err != nil || got.TermsFrom.Unix() != 0 { // the migration's version, since the epoch
				t.Fatalf("terms from %v after a capacity edit (%v)", got.TermsFrom, err)
			}
			m, _ := s.MonthTerms(ctx, org.ID, nov)
			if want := "free 0.00/1.00/block: Nov 1 00:00:00–Dec 1 00:00:00 (2592000 s)"; describe(m) != want {
				t.Errorf("the month: %s, want %s", describe(m), want)
			}
		}},
		{"a node whose clock is behind cannot put a change before the last one", func(t *testing.T, db *models.DB, clock *clocktest.Clock, s *models.Store, admin models.User, org models.Organization) {
			clock.Advance(9 * 24 * time.Hour) // November 10th
			if _, err := s.SetOrganizationTier(ctx, admin, org.ID, "premium"); err != nil {
				t.Fatal(err)
			}
			free, _ := s.TierByName(ctx, "free")
			l := free.Settings()
			l.IncludedCredit = 3 * money.Dollar
			if _, err := s.UpdateTier(ctx, admin, "free", l); err != nil {
				t.Fatal(err)
			}
			// Another node, five days behind, moves it back and edits again.
			behind := models.NewStore(db, models.WithClock(func() time.Time { return nov.AddDate(0, 0, 4) }))
			o, err := behind.SetOrganizationTier(ctx, admin, org.ID, "free")
			if err != nil || o.Tier.Name != "free" {
				t.Fatalf("%+v %v", o, err)
			}
			l.IncludedCredit = 2 * money.Dollar
			tier, err := behind.UpdateTier(ctx, admin, "free", l)
			if err != nil || !tier.TermsFrom.Equal(nov.AddDate(0, 0, 9)) {
				t.Fatalf("terms from %v: %v", tier.TermsFrom, err)
			}
			m, _ := s.MonthTerms(ctx, org.ID, nov)
			want := "free 0.00/1.00/block: Nov 1 00:00:00–Nov 10 00:00:00 (777600 s); free 0.00/2.00/block: Nov 10 00:00:00–Dec 1 00:00:00 (1814400 s)"
			if describe(m) != want {
				t.Errorf("the month: %s\nwant %s", describe(m), want)
			}
		}},
		{"a tier deleted after the organization left it is still billed for its days", func(t *testing.T, _ *models.DB, clock *clocktest.Clock, s *models.Store, admin models.User, org models.Organization) {
			if _, err := s.CreateTier(ctx, admin, "team", models.TierSettings{Capacity: 10, RefillPerSec: 1, MonthlyFee: 30 * money.Dollar}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.SetOrganizationTier(ctx, admin, org.ID, "team"); err != nil {
				t.Fatal(err)
			}
			clock.Advance(10 * 24 * time.Hour)
			if _, err := s.SetOrganizationTier(ctx, admin, org.ID, "free"); err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteTier(ctx, admin, "team"); err != nil {
				t.Fatal(err)
			}
			m, _ := s.MonthTerms(ctx, org.ID, nov)
			want := "team 30.00/0.00/block: Nov 1 00:00:00–Nov 11 00:00:00 (864000 s); free 0.00/1.00/block: Nov 11 00:00:00–Dec 1 00:00:00 (1728000 s)"
			if describe(m) != want {
				t.Errorf("the month: %s\nwant %s", describe(m), want)
			}
		}},
		{"a deleted organization is charged until its deletion, and not after", func(t *testing.T, _ *models.DB, clock *clocktest.Clock, s *models.Store, admin models.User, org models.Organization) {
			if _, err := s.SetOrganizationTier(ctx, admin, org.ID, "premium"); err != nil {
				t.Fatal(err)
			}
			clock.Advance(10*24*time.Hour + 90*time.Second)
			if _, err := s.DeleteOrganization(ctx, admin, org.ID, clock.Now().AddDate(0, 0, 30)); err != nil {
				t.Fatal(err)
			}
			m, _ := s.MonthTerms(ctx, org.ID, nov)
			if want := "premium 49.00/10.00/bill: Nov 1 00:00:00–Nov 11 00:01:30 (864090 s)"; describe(m) != want {
				t.Errorf("the month of the deletion: %s\nwant %s", describe(m), want)
			}
			if m, _ := s.MonthTerms(ctx, org.ID, nov.AddDate(0, 1, 0)); len(m.Terms) != 0 {
				t.Errorf("the month after the deletion: %s", describe(m))
			}
		}},
		{"an organization written without a membership is on its tier since its creation", func(t *testing.T, db *models.DB, _ *clocktest.Clock, s *models.Store, _ models.User, _ models.Organization) {
			if err := db.Gorm.Exec(`INSERT INTO organizations (name, tier_id, created_at) SELECT 'Bare', id, ? FROM tiers WHERE name = 'premium'`,
				nov.AddDate(0, 0, 20)).Error; err != nil {
				t.Fatal(err)
			}
			var bare models.Organization
			db.Gorm.Where("name = 'Bare'").Take(&bare)
			m, err := s.MonthTerms(ctx, bare.ID, nov)
			if want := "premium 49.00/10.00/bill: Nov 21 00:00:00–Dec 1 00:00:00 (864000 s)"; err != nil || describe(m) != want {
				t.Errorf("the month: %s (%v), want %s", describe(m), err, want)
			}
			if m, _ := s.MonthTerms(ctx, bare.ID, nov.AddDate(0, -1, 0)); len(m.Terms) != 0 {
				t.Errorf("the month before it existed: %s", describe(m))
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			testdb.Each(t, func(t *testing.T, db *models.DB) {
				clock := clocktest.New(nov)
				s := models.NewStore(db, models.WithClock(clock.Now))
				_, admin, err := s.CreateOrganizationWithOwner(ctx, "Ops", "premium", "ops@example.com", "h", models.RoleAdmin)
				if err != nil {
					t.Fatal(err)
				}
				org, _, err := s.CreateOrganizationWithOwner(ctx, "Acme", "free", "o@acme.example", "h", models.RoleOwner)
				if err != nil {
					t.Fatal(err)
				}
				tc.run(t, db, clock, s, admin.User, org)
			})
		})
	}
}
