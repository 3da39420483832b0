package models_test

import (
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// setTokenLimit sets the tier's max_api_tokens as an admin would.
func setTokenLimit(t *testing.T, s *models.Store, admin models.User, tier string, limit int) {
	t.Helper()
	cur, err := s.TierByName(ctx, tier)
	if err != nil {
		t.Fatal(err)
	}
	l := cur.Settings()
	l.MaxAPITokens = limit
	if _, err := s.UpdateTier(ctx, admin, tier, l); err != nil {
		t.Fatal(err)
	}
}

// TestTokenLimit: an organization holds at most its tier's max_api_tokens
// active tokens; revoked and expired ones do not count, 0 is no limit, and
// the refusal says what the limit is and what to do.
func TestTokenLimit(t *testing.T) {
	const full = "the free tier allows 3 active API tokens and this organization has 3 (revoked and expired ones do not count); revoke one or upgrade"
	tests := []struct {
		name string
		run  func(t *testing.T, db *models.DB, s *models.Store, admin models.User, o models.Organization, u models.User)
	}{
		{"the defaults are 10 and 200", func(t *testing.T, _ *models.DB, s *models.Store, _ models.User, _ models.Organization, _ models.User) {
			free, _ := s.TierByName(ctx, "free")
			premium, _ := s.TierByName(ctx, "premium")
			if free.MaxAPITokens != 10 || premium.MaxAPITokens != 200 {
				t.Fatalf("free %d, premium %d", free.MaxAPITokens, premium.MaxAPITokens)
			}
		}},
		{"the limit refuses the next token with a conflict that says why", func(t *testing.T, _ *models.DB, s *models.Store, admin models.User, o models.Organization, u models.User) {
			setTokenLimit(t, s, admin, "free", 3)
			for range 3 {
				if _, _, err := s.CreateAPIToken(ctx, o.ID, u.ID, "t", nil); err != nil {
					t.Fatal(err)
				}
			}
			_, _, err := s.CreateAPIToken(ctx, o.ID, u.ID, "one too many", nil)
			if e := apperr.As(err); e.Code != apperr.Conflict || e.Reason != "token_limit_reached" || e.Message != full {
				t.Fatalf("the 4th token: %v", err)
			}
			if toks, _ := s.APITokens(ctx, o.ID); len(toks) != 3 {
				t.Fatalf("%d tokens stored", len(toks))
			}
		}},
		{"revoked and expired tokens do not count", func(t *testing.T, db *models.DB, s *models.Store, admin models.User, o models.Organization, u models.User) {
			setTokenLimit(t, s, admin, "free", 3)
			var toks []models.APIToken
			for range 3 {
				tok, _, err := s.CreateAPIToken(ctx, o.ID, u.ID, "t", nil)
				if err != nil {
					t.Fatal(err)
				}
				toks = append(toks, tok)
			}
			if _, err := s.RevokeAPIToken(ctx, u, o.ID, toks[0].ID); err != nil {
				t.Fatal(err)
			}
			if err := db.Gorm.Exec("UPDATE api_tokens SET expires_at = ? WHERE id = ?", time.Now().UTC().Add(-time.Second), toks[1].ID).Error; err != nil {
				t.Fatal(err)
			}
			soon := time.Now().UTC().Add(time.Hour) // not expired yet: counts
			for range 2 {
				if _, _, err := s.CreateAPIToken(ctx, o.ID, u.ID, "replacement", &soon); err != nil {
					t.Fatalf("with one revoked and one expired: %v", err)
				}
			}
			if _, _, err := s.CreateAPIToken(ctx, o.ID, u.ID, "one too many", nil); apperr.As(err).Message != full {
				t.Fatalf("past the limit again: %v", err)
			}
		}},
		{"0 is no limit", func(t *testing.T, _ *models.DB, s *models.Store, admin models.User, o models.Organization, u models.User) {
			setTokenLimit(t, s, admin, "free", 0)
			for i := range 12 {
				if _, _, err := s.CreateAPIToken(ctx, o.ID, u.ID, "t", nil); err != nil {
					t.Fatalf("token %d: %v", i+1, err)
				}
			}
		}},
		{"the limit is per organization and read from its tier", func(t *testing.T, _ *models.DB, s *models.Store, admin models.User, o models.Organization, u models.User) {
			setTokenLimit(t, s, admin, "free", 1)
			setTokenLimit(t, s, admin, "premium", 2)
			other, ou, _ := s.CreateOrganizationWithOwner(ctx, "B", "free", "b@example.com", "h", models.RoleOwner)
			for _, owner := range []struct {
				org, user int64
			}{{o.ID, u.ID}, {other.ID, ou.ID}} {
				if _, _, err := s.CreateAPIToken(ctx, owner.org, owner.user, "t", nil); err != nil {
					t.Fatal(err)
				}
			}
			if _, _, err := s.CreateAPIToken(ctx, o.ID, u.ID, "t", nil); apperr.CodeOf(err) != apperr.Conflict {
				t.Fatalf("past free's 1: %v", err)
			}
			if _, err := s.SetOrganizationTier(ctx, admin, o.ID, "premium"); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.CreateAPIToken(ctx, o.ID, u.ID, "t", nil); err != nil {
				t.Fatalf("on premium: %v", err)
			}
			_, _, err := s.CreateAPIToken(ctx, o.ID, u.ID, "t", nil)
			if want := "the premium tier allows 2 active API tokens and this organization has 2 (revoked and expired ones do not count); revoke one or upgrade"; apperr.As(err).Message != want {
				t.Fatalf("past premium's 2: %v", err)
			}
		}},
		{"an unknown organization is not found", func(t *testing.T, _ *models.DB, s *models.Store, _ models.User, _ models.Organization, u models.User) {
			if _, _, err := s.CreateAPIToken(ctx, 999999, u.ID, "t", nil); apperr.CodeOf(err) != apperr.NotFound {
				t.Fatalf("got %v", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testdb.Each(t, func(t *testing.T, db *models.DB) {
				s := models.NewStore(db)
				_, admin, _ := s.CreateOrganizationWithOwner(ctx, "Ops", "premium", "ops@example.com", "h", models.RoleAdmin)
				o, u, _ := s.CreateOrganizationWithOwner(ctx, "A", "free", "a@example.com", "h", models.RoleOwner)
				tt.run(t, db, s, admin.User, o, u.User)
			})
		})
	}
}

// TestTokenLimitUnderConcurrency: with room for one more token, 20
// creations at once make exactly one; the count and the insert are one
// step per organization, so none of the others passes a stale count.
func TestTokenLimitUnderConcurrency(t *testing.T) {
	const limit, racers = 5, 20
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		s := models.NewStore(db)
		_, admin, _ := s.CreateOrganizationWithOwner(ctx, "Ops", "premium", "ops@example.com", "h", models.RoleAdmin)
		o, u, _ := s.CreateOrganizationWithOwner(ctx, "A", "free", "a@example.com", "h", models.RoleOwner)
		setTokenLimit(t, s, admin.User, "free", limit)
		for range limit - 1 {
			if _, _, err := s.CreateAPIToken(ctx, o.ID, u.ID, "t", nil); err != nil {
				t.Fatal(err)
			}
		}
		// A few rounds, each after a revocation made room for one: a race
		// lost once in a while would still show.
		for round := range 3 {
			var (
				wg      sync.WaitGroup
				start   = make(chan struct{})
				errs    = make([]error, racers)
				created []models.APIToken
				mu      sync.Mutex
			)
			for i := range racers {
				wg.Go(func() {
					<-start
					tok, _, err := s.CreateAPIToken(ctx, o.ID, u.ID, "racer", nil)
					errs[i] = err
					if err == nil {
						mu.Lock()
						created = append(created, tok)
						mu.Unlock()
					}
				})
			}
			close(start)
			wg.Wait()
			for i, err := range errs {
				if e := apperr.As(err); err != nil && (e.Code != apperr.Conflict || e.Reason != "token_limit_reached") {
					t.Errorf("round %d, racer %d: %v", round, i, err)
				}
			}
			active := 0
			toks, err := s.APITokens(ctx, o.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, tok := range toks {
				if tok.RevokedAt == nil {
					active++
				}
			}
			if len(created) != 1 || active != limit {
				t.Fatalf("round %d: %d of %d racers made a token, %d active; want exactly 1 and %d", round, len(created), racers, active, limit)
			}
			if _, err := s.RevokeAPIToken(ctx, u.User, o.ID, created[0].ID); err != nil {
				t.Fatal(err)
			}
		}
	})
}
