package models_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

func TestFreezesAndTuning(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		s := models.NewStore(db)
		_, admin, _ := s.CreateOrganizationWithOwner(ctx, "Ops", "premium", "ops@example.com", "h", models.RoleAdmin)
		o, u, _ := s.CreateOrganizationWithOwner(ctx, "Acme", "free", "a@example.com", "h", models.RoleOwner)
		tok, _, _ := s.CreateAPIToken(ctx, o.ID, u.ID, "t", nil)
		now := time.Now().UTC()
		f, err := s.CreateFreeze(ctx, models.Freeze{TokenID: tok.ID, OrgID: o.ID, Reason: "20 rejections in a minute",
			WindowCount: 20, FrozenFrom: now, FrozenUntil: now.Add(10 * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		active, _ := s.ActiveFreezes(ctx, now)
		if len(active) != 1 || active[0].ID != f.ID || !active[0].Active(now) {
			t.Fatalf("active %+v", active)
		}
		if later, _ := s.ActiveFreezes(ctx, now.Add(11*time.Minute)); len(later) != 0 {
			t.Fatalf("an expired freeze is still active: %+v", later)
		}
		if mine, _ := s.OrganizationFreezes(ctx, o.ID, 10); len(mine) != 1 {
			t.Fatalf("org freezes %+v", mine)
		}
		if others, _ := s.OrganizationFreezes(ctx, admin.OrgID, 10); len(others) != 0 {
			t.Fatalf("another org sees the freeze: %+v", others)
		}
		lifted, err := s.LiftFreeze(ctx, admin.User, f.ID)
		if err != nil || lifted.LiftedAt == nil || *lifted.LiftedBy != admin.ID {
			t.Fatalf("lift %+v %v", lifted, err)
		}
		if active, _ := s.ActiveFreezes(ctx, now); len(active) != 0 {
			t.Fatalf("a lifted freeze is still active")
		}
		if _, err := s.LiftFreeze(ctx, admin.User, 999999); apperr.CodeOf(err) != apperr.NotFound {
			t.Fatalf("lifting a missing freeze: %v", err)
		}
		log, _, _ := s.AuditEntries(ctx, models.AuditQuery{OrgID: o.ID, PageSize: 5})
		if len(log) < 2 || log[0].Action != "token.unfreeze" || log[1].Action != "token.freeze" {
			t.Fatalf("audit %+v", log)
		}

		err = s.ApplyTuning(ctx, []models.TuningEvent{{Tier: "free", FromRefill: 0.5, ToRefill: 0.3, Load: 0.91, CreatedAt: now}})
		if err != nil {
			t.Fatal(err)
		}
		free, _ := s.TierByName(ctx, "free")
		if free.EffectiveRefill() != 0.3 || free.RefillPerSec != 0.5 {
			t.Fatalf("free after tuning: %+v", free)
		}
		evs, _ := s.TuningEvents(ctx, 10)
		if len(evs) != 1 || evs[0].ToRefill != 0.3 || evs[0].Load != 0.91 {
			t.Fatalf("events %+v", evs)
		}
		// An admin's edit replaces the tuner's value.
		if _, err := s.UpdateTier(ctx, admin.User, "free", free.Settings()); err != nil {
			t.Fatal(err)
		}
		if free, _ = s.TierByName(ctx, "free"); free.EffectiveRefillPerSec != nil {
			t.Fatalf("the tuner's value survived an admin edit: %v", *free.EffectiveRefillPerSec)
		}
	})
}

func TestTierSettingsValidation(t *testing.T) {
	ok := models.TierSettings{Capacity: 30, RefillPerSec: 0.5, TokensPerMinute: 20000, FreezeThreshold: 20, FreezeMinutes: 10, Autotune: true, RefillFloor: 0.3}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := map[string]func(*models.TierSettings){
		"tokens_per_minute":    func(s *models.TierSettings) { s.TokensPerMinute = -1 },
		"freeze_threshold":     func(s *models.TierSettings) { s.FreezeThreshold = -1 },
		"freeze_minutes":       func(s *models.TierSettings) { s.FreezeMinutes = 0 },
		"refill_floor":         func(s *models.TierSettings) { s.RefillFloor = 0.6 },
		"needs a refill_floor": func(s *models.TierSettings) { s.RefillFloor = 0 },
	}
	for want, change := range bad {
		s := ok
		change(&s)
		if err := s.Validate(); err == nil || !strings.Contains(apperr.As(err).Message, want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
}

func TestOnlyOneAdvisoryLeader(t *testing.T) {
	url := testdb.PostgresURL(t)
	a, err := models.Open(ctx, url, "")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, _ := models.Open(ctx, url, "")
	defer b.Close()
	la, lb := models.NewAdvisoryLeader(a, 4242), models.NewAdvisoryLeader(b, 4242)
	if ok, err := la.Lead(ctx); !ok || err != nil {
		t.Fatalf("first node: %v %v", ok, err)
	}
	if ok, _ := lb.Lead(ctx); ok {
		t.Fatal("two leaders")
	}
	if ok, _ := la.Lead(ctx); !ok {
		t.Fatal("the leader lost the lock by asking again")
	}
	la.Resign()
	if ok, _ := lb.Lead(ctx); !ok {
		t.Fatal("no takeover after the leader resigned")
	}
	if sqlite := models.NewAdvisoryLeader(testdb.SQLite(t), 4242); func() bool { ok, _ := sqlite.Lead(ctx); return !ok }() {
		t.Fatal("a single SQLite node must lead")
	}
}

func TestUsageEventsRoundTrip(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		s := models.NewStore(db)
		o, u, _ := s.CreateOrganizationWithOwner(ctx, "A", "free", "a@example.com", "h", models.RoleOwner)
		tok, _, _ := s.CreateAPIToken(ctx, o.ID, u.ID, "t", nil)
		keyID := int64(7)
		at := time.Date(2026, 11, 29, 10, 11, 12, 345678000, time.UTC)
		in := []models.UsageEvent{
			{RequestID: "a", OrgID: o.ID, TokenID: tok.ID, Model: "gpt-4o-mini", PromptTokens: 3, CompletionTokens: 4, Status: 200,
				LatencyMs: 12, Cached: true, UpstreamKeyID: &keyID, CreatedAt: at},
			{RequestID: "b", OrgID: o.ID, TokenID: tok.ID, Model: "sluice-local", Status: 200, Fallback: true, CreatedAt: at.Add(time.Second)},
		}
		if err := s.InsertUsageEvents(ctx, in); err != nil {
			t.Fatal(err)
		}
		var out []models.UsageEvent
		if err := db.Gorm.Order("request_id").Find(&out).Error; err != nil {
			t.Fatal(err)
		}
		if len(out) != 2 {
			t.Fatalf("%d rows", len(out))
		}
		a, b := out[0], out[1]
		if !a.Cached || a.Fallback || a.UpstreamKeyID == nil || *a.UpstreamKeyID != 7 || a.PromptTokens != 3 || a.LatencyMs != 12 ||
			!a.CreatedAt.Equal(at) || a.Model != "gpt-4o-mini" {
			t.Fatalf("a: %+v", a)
		}
		if b.Cached || !b.Fallback || b.UpstreamKeyID != nil || !b.CreatedAt.Equal(at.Add(time.Second)) {
			t.Fatalf("b: %+v", b)
		}
		// UsageSince reads the hourly rollups: it counts from the hour of since.
		if got, _ := s.UsageSince(ctx, o.ID, at.Add(time.Millisecond)); got.Requests != 2 || got.PromptTokens != 3 {
			t.Fatalf("same hour: %+v", got)
		}
		if got, _ := s.UsageSince(ctx, o.ID, at.Add(time.Hour)); got.Requests != 0 {
			t.Fatalf("next hour: %+v", got)
		}
	})
}
