package models_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// TestStore runs every store behaviour on SQLite and on Postgres.
func TestStore(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, s *models.Store)
	}{
		{"seeded tiers", func(t *testing.T, s *models.Store) {
			free, err := s.TierByName(ctx, "free")
			if err != nil {
				t.Fatal(err)
			}
			premium, err := s.TierByName(ctx, "premium")
			if err != nil {
				t.Fatal(err)
			}
			if free.Capacity != 30 || free.RefillPerSec != 0.5 || !free.Autotune || free.RefillFloor != 0.3 || free.FreezeThreshold != 20 || free.FreezeMinutes != 10 {
				t.Errorf("free tier %+v", free)
			}
			if premium.Capacity != 200 || premium.RefillPerSec != 5 || premium.Autotune {
				t.Errorf("premium tier %+v", premium)
			}
			if _, err := s.TierByName(ctx, "gold"); apperr.CodeOf(err) != apperr.NotFound {
				t.Errorf("unknown tier: %v", err)
			}
		}},
		{"signup creates org on tier with owner", func(t *testing.T, s *models.Store) {
			o, u, err := s.CreateOrganizationWithOwner(ctx, "Acme", "free", " Ada@Example.com ", "hash", models.RoleOwner)
			if err != nil {
				t.Fatal(err)
			}
			if u.Email != "ada@example.com" || u.OrgID != o.ID || o.Tier.Name != "free" {
				t.Fatalf("org %+v user %+v", o, u)
			}
			got, err := s.UserByEmail(ctx, "ADA@example.COM")
			if err != nil || got.ID != u.ID {
				t.Fatalf("lookup by other case: %+v %v", got, err)
			}
		}},
		{"email unique case-insensitively, nothing half-written", func(t *testing.T, s *models.Store) {
			if _, _, err := s.CreateOrganizationWithOwner(ctx, "A", "free", "bo@example.com", "h", models.RoleOwner); err != nil {
				t.Fatal(err)
			}
			_, _, err := s.CreateOrganizationWithOwner(ctx, "B", "free", "BO@example.com", "h", models.RoleOwner)
			if e := apperr.As(err); e.Code != apperr.Conflict || e.Reason != "email_taken" {
				t.Fatalf("duplicate email: %v", err)
			}
			orgs, _ := s.Organizations(ctx)
			if len(orgs) != 1 {
				t.Fatalf("the failed signup left an organization behind: %d orgs", len(orgs))
			}
		}},
		{"tokens are hashed, listed per org, revoked per org", func(t *testing.T, s *models.Store) {
			a, ua, _ := s.CreateOrganizationWithOwner(ctx, "A", "free", "a@example.com", "h", models.RoleOwner)
			b, ub, _ := s.CreateOrganizationWithOwner(ctx, "B", "premium", "b@example.com", "h", models.RoleOwner)
			ta, secret, err := s.CreateAPIToken(ctx, a.ID, ua.ID, "ci", nil)
			if err != nil {
				t.Fatal(err)
			}
			if !models.CheckTokenSyntax(secret) || ta.Hash != models.HashToken(secret) || strings.Contains(ta.Hash, secret) || !strings.HasPrefix(secret, ta.Prefix) {
				t.Fatalf("token %+v secret %q", ta, secret)
			}
			if _, _, err := s.CreateAPIToken(ctx, b.ID, ub.ID, "other", nil); err != nil {
				t.Fatal(err)
			}
			list, _ := s.APITokens(ctx, a.ID)
			if len(list) != 1 || list[0].ID != ta.ID {
				t.Fatalf("org A sees %+v", list)
			}
			if _, err := s.RevokeAPIToken(ctx, ub.User, b.ID, ta.ID); apperr.CodeOf(err) != apperr.NotFound {
				t.Fatalf("org B revoking A's token: %v", err)
			}
			owner, err := s.TokenOwnerByHash(ctx, ta.Hash)
			if err != nil || owner.RevokedAt != nil || owner.TierName != "free" || owner.OrgID != a.ID {
				t.Fatalf("owner %+v %v", owner, err)
			}
			if _, err := s.RevokeAPIToken(ctx, ua.User, a.ID, ta.ID); err != nil {
				t.Fatal(err)
			}
			owner, _ = s.TokenOwnerByHash(ctx, ta.Hash)
			if owner.RevokedAt == nil || owner.Status(time.Now()) != "revoked" {
				t.Fatalf("not revoked: %+v", owner)
			}
			log, _, _ := s.AuditEntries(ctx, models.AuditQuery{OrgID: a.ID, PageSize: 10})
			if len(log) < 2 || log[0].Action != "token.revoke" {
				t.Fatalf("audit log %+v", log)
			}
			if _, _, err := s.CreateAPIToken(ctx, a.ID, ua.ID, "", nil); apperr.CodeOf(err) != apperr.Unprocessable {
				t.Fatalf("empty name: %v", err)
			}
		}},
		{"unknown token hash is not found", func(t *testing.T, s *models.Store) {
			if _, err := s.TokenOwnerByHash(ctx, strings.Repeat("0", 64)); apperr.CodeOf(err) != apperr.NotFound {
				t.Fatal(err)
			}
		}},
		{"tier limits validated, updated and audited", func(t *testing.T, s *models.Store) {
			o, admin, _ := s.CreateOrganizationWithOwner(ctx, "Ops", "premium", "ops@example.com", "h", models.RoleAdmin)
			for _, bad := range []models.TierSettings{{Capacity: 0, RefillPerSec: 1}, {Capacity: 10, RefillPerSec: 0}, {Capacity: 10, RefillPerSec: -1}} {
				if _, err := s.UpdateTier(ctx, admin.User, "free", bad); apperr.CodeOf(err) != apperr.Unprocessable {
					t.Errorf("%+v: %v", bad, err)
				}
			}
			free, _ := s.TierByName(ctx, "free")
			settings := free.Settings()
			settings.Capacity, settings.RefillPerSec = 40, 1.5
			tier, err := s.UpdateTier(ctx, admin.User, "free", settings)
			if err != nil || tier.Capacity != 40 || tier.RefillPerSec != 1.5 {
				t.Fatalf("%+v %v", tier, err)
			}
			again, _ := s.TierByName(ctx, "free")
			if again.Capacity != 40 || again.RefillPerSec != 1.5 || !again.Autotune || again.TokensPerMinute != 20000 {
				t.Fatalf("stored %+v", again)
			}
			if _, err := s.UpdateTier(ctx, admin.User, "gold", models.TierSettings{Capacity: 1, RefillPerSec: 1}); apperr.CodeOf(err) != apperr.NotFound {
				t.Fatal(err)
			}
			log, _, _ := s.AuditEntries(ctx, models.AuditQuery{OrgID: o.ID, PageSize: 1})
			if len(log) != 1 || log[0].Action != "tier.update" || !strings.Contains(log[0].Detail, "30 -> 40") {
				t.Fatalf("audit %+v", log)
			}
		}},
		{"organization tier change", func(t *testing.T, s *models.Store) {
			_, admin, _ := s.CreateOrganizationWithOwner(ctx, "Ops", "premium", "ops@example.com", "h", models.RoleAdmin)
			o, _, _ := s.CreateOrganizationWithOwner(ctx, "Acme", "free", "a@example.com", "h", models.RoleOwner)
			got, err := s.SetOrganizationTier(ctx, admin.User, o.ID, "premium")
			if err != nil || got.Tier.Name != "premium" {
				t.Fatalf("%+v %v", got, err)
			}
			again, _ := s.Organization(ctx, o.ID)
			if again.Tier.Name != "premium" {
				t.Fatalf("stored %+v", again)
			}
			if _, err := s.SetOrganizationTier(ctx, admin.User, 999999, "premium"); apperr.CodeOf(err) != apperr.NotFound {
				t.Fatal(err)
			}
			if _, err := s.SetOrganizationTier(ctx, admin.User, o.ID, "gold"); apperr.CodeOf(err) != apperr.NotFound {
				t.Fatal(err)
			}
		}},
		{"setting is initialised once", func(t *testing.T, s *models.Store) {
			v, err := s.SettingOrInit(ctx, "session_secret", "first")
			if err != nil || v != "first" {
				t.Fatal(v, err)
			}
			v, err = s.SettingOrInit(ctx, "session_secret", "second")
			if err != nil || v != "first" {
				t.Fatal(v, err)
			}
		}},
		{"usage is summed per organization since a time", func(t *testing.T, s *models.Store) {
			a, ua, _ := s.CreateOrganizationWithOwner(ctx, "A", "free", "a@example.com", "h", models.RoleOwner)
			b, ub, _ := s.CreateOrganizationWithOwner(ctx, "B", "free", "b@example.com", "h", models.RoleOwner)
			ta, _, _ := s.CreateAPIToken(ctx, a.ID, ua.ID, "t", nil)
			tb, _, _ := s.CreateAPIToken(ctx, b.ID, ub.ID, "t", nil)
			now := time.Now().UTC()
			evs := []models.UsageEvent{
				{RequestID: "1", OrgID: a.ID, TokenID: ta.ID, Model: "m", PromptTokens: 1, CompletionTokens: 2, Status: 200, CreatedAt: now},
				{RequestID: "2", OrgID: a.ID, TokenID: ta.ID, Model: "m", PromptTokens: 10, CompletionTokens: 20, Status: 200, CreatedAt: now.Add(-48 * time.Hour)},
				{RequestID: "3", OrgID: b.ID, TokenID: tb.ID, Model: "m", PromptTokens: 100, CompletionTokens: 200, Status: 200, CreatedAt: now},
			}
			if err := s.InsertUsageEvents(ctx, evs); err != nil {
				t.Fatal(err)
			}
			if err := s.InsertUsageEvents(ctx, evs[:1]); err != nil {
				t.Fatalf("re-inserting a stored request id must be a no-op: %v", err)
			}
			day, _ := s.UsageSince(ctx, a.ID, now.Add(-time.Hour))
			all, _ := s.UsageSince(ctx, a.ID, now.Add(-72*time.Hour))
			if day.Requests != 1 || day.TotalTokens() != 3 || all.Requests != 2 || all.TotalTokens() != 33 {
				t.Fatalf("day %+v all %+v", day, all)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testdb.Each(t, func(t *testing.T, db *models.DB) { tt.run(t, models.NewStore(db)) })
		})
	}
}

var ctx = context.Background()

func TestTokenSyntax(t *testing.T) {
	secret, err := models.NewTokenSecret()
	if err != nil {
		t.Fatal(err)
	}
	flip := []byte(secret)
	flip[20] ^= 1 // a typo in the body breaks the checksum
	cases := map[string]bool{
		secret:                          true,
		string(flip):                    false,
		"":                              false,
		"sk_sluice_":                    false,
		secret[:len(secret)-1]:          false,
		"sk_other_" + secret[9:]:        false,
		secret[:30] + "!" + secret[31:]: false,
	}
	for s, want := range cases {
		if got := models.CheckTokenSyntax(s); got != want {
			t.Errorf("CheckTokenSyntax(%q) = %v, want %v", s, got, want)
		}
	}
	other, _ := models.NewTokenSecret()
	if other == secret || models.HashToken(other) == models.HashToken(secret) {
		t.Fatal("two tokens collided")
	}
	if n := testing.AllocsPerRun(100, func() { models.CheckTokenSyntax(secret) }); n != 0 {
		t.Fatalf("CheckTokenSyntax allocates %v times", n)
	}
}

func BenchmarkCheckTokenSyntax(b *testing.B) {
	secret, _ := models.NewTokenSecret()
	b.ReportAllocs()
	for b.Loop() {
		if !models.CheckTokenSyntax(secret) {
			b.Fatal("rejected")
		}
	}
}

// BenchmarkInsertUsageEvents measures the recorder's batch insert, the
// biggest CPU cost of a metered request on the embedded database.
func BenchmarkInsertUsageEvents(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) { benchmarkInsertUsageEvents(b, testdb.SQLite(b)) })
	b.Run("postgres", func(b *testing.B) { benchmarkInsertUsageEvents(b, testdb.Postgres(b)) })
}

func benchmarkInsertUsageEvents(b *testing.B, db *models.DB) {
	s := models.NewStore(db)
	o, u, _ := s.CreateOrganizationWithOwner(ctx, "A", "free", "a@example.com", "h", models.RoleOwner)
	tok, _, _ := s.CreateAPIToken(ctx, o.ID, u.ID, "t", nil)
	evs := make([]models.UsageEvent, 256)
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		for i := range evs {
			n++
			evs[i] = models.UsageEvent{RequestID: "r" + strconv.Itoa(n), OrgID: o.ID, TokenID: tok.ID, Model: "m", Status: 200, CreatedAt: time.Now()}
		}
		if err := s.InsertUsageEvents(ctx, evs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/event")
}
