package models_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// Rollups are kept as events land, count each request id once however
// often a batch is replayed, and take rejections as counts.
func TestRollupsCountEachEventOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		s := models.NewStore(db)
		o, u, _ := s.CreateOrganizationWithOwner(ctx, "A", "free", "a@example.com", "h", models.RoleOwner)
		tok, _, _ := s.CreateAPIToken(ctx, o.ID, u.ID, "t", nil)
		h := time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC)
		ev := func(id, model string, at time.Time, prompt, completion int, cost money.Amount, cacheHit bool) models.UsageEvent {
			return models.UsageEvent{RequestID: id, OrgID: o.ID, TokenID: tok.ID, Model: model, PromptTokens: prompt,
				CompletionTokens: completion, CachedTokens: prompt / 2, Cost: cost, PriceID: 1, Status: 200, Cached: cacheHit, CreatedAt: at}
		}
		batch := []models.UsageEvent{
			ev("r1", "m", h.Add(5*time.Minute), 10, 5, 100, false),
			ev("r2", "m", h.Add(59*time.Minute), 20, 5, 200, true),
			ev("r2", "m", h.Add(59*time.Minute), 20, 5, 200, true),   // a repeat inside the batch
			ev("r3", "other", h.Add(61*time.Minute), 1, 1, 7, false), // next hour, next month
		}
		for range 2 { // the second time is a replay: nothing more
			if err := s.InsertUsageEvents(ctx, batch); err != nil {
				t.Fatal(err)
			}
		}
		// A stored event with a new one: only the new one counts.
		if err := s.InsertUsageEvents(ctx, []models.UsageEvent{batch[0], ev("r4", "m", h.Add(30*time.Minute), 4, 2, 50, false)}); err != nil {
			t.Fatal(err)
		}
		err := s.AddRejections(ctx, []models.Rejections{
			{OrgID: o.ID, TokenID: tok.ID, Model: "m", Hour: h.Add(10 * time.Minute), Requests: 3, Budget: 1},
			{OrgID: o.ID, TokenID: tok.ID, Hour: h.Add(20 * time.Minute), Frozen: 2},
		})
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.UsageHours(ctx, o.ID, h, h.Add(2*time.Hour), models.GroupNone)
		if err != nil {
			t.Fatal(err)
		}
		want := []models.UsageBucket{
			{Hour: h, Requests: 3, Rejected: 6, PromptTokens: 34, CompletionTokens: 12, CachedTokens: 17, CacheHits: 1, Cost: 350},
			{Hour: h.Add(time.Hour), Requests: 1, PromptTokens: 1, CompletionTokens: 1, Cost: 7},
		}
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("hours\n got %+v\nwant %+v", got, want)
		}
		byModel, err := s.UsageHours(ctx, o.ID, h, h.Add(time.Hour), models.GroupModel)
		if err != nil || len(byModel) != 2 || byModel[0].Group != "" || byModel[0].Rejected != 2 || byModel[1].Group != "m" || byModel[1].Requests != 3 {
			t.Fatalf("by model: %+v %v", byModel, err)
		}
		nov, _ := s.UsageInMonth(ctx, o.ID, h)
		dec, _ := s.UsageInMonth(ctx, o.ID, h.Add(2*time.Hour))
		if nov != (models.MonthlyUsage{Requests: 3, Rejected: 6, Tokens: 46, Cost: 350}) || dec != (models.MonthlyUsage{Requests: 1, Tokens: 2, Cost: 7}) {
			t.Fatalf("months: %+v %+v", nov, dec)
		}
		// The invoice's lines: per model and price, rejections not counted.
		novLines, err := s.UsageByPrice(ctx, o.ID, h)
		if err != nil || len(novLines) != 1 || novLines[0] != (models.PricedUsage{Model: "m", PriceID: 1, Requests: 3, PromptTokens: 34,
			CompletionTokens: 12, CachedTokens: 17, Cost: 350}) {
			t.Fatalf("November by price: %+v %v", novLines, err)
		}
		decLines, err := s.UsageByPrice(ctx, o.ID, h.Add(2*time.Hour))
		if err != nil || len(decLines) != 1 || decLines[0] != (models.PricedUsage{Model: "other", PriceID: 1, Requests: 1, PromptTokens: 1,
			CompletionTokens: 1, Cost: 7}) {
			t.Fatalf("December by price: %+v %v", decLines, err)
		}
	})
}

// Last-used times are stored in one statement for many tokens, and never
// move back.
func TestTouchAPITokensKeepsTheLatest(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		s := models.NewStore(db)
		o, u, _ := s.CreateOrganizationWithOwner(ctx, "A", "free", "a@example.com", "h", models.RoleOwner)
		a, _, _ := s.CreateAPIToken(ctx, o.ID, u.ID, "a", nil)
		b, _, _ := s.CreateAPIToken(ctx, o.ID, u.ID, "b", nil)
		t1 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
		if err := s.TouchAPITokens(ctx, map[int64]time.Time{a.ID: t1, b.ID: t1.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
		if err := s.TouchAPITokens(ctx, map[int64]time.Time{a.ID: t1.Add(-time.Hour), b.ID: t1.Add(2 * time.Minute)}); err != nil {
			t.Fatal(err)
		}
		toks, _ := s.APITokens(ctx, o.ID)
		got := map[int64]time.Time{}
		for _, tk := range toks {
			got[tk.ID] = tk.LastUsedAt.UTC()
		}
		if !got[a.ID].Equal(t1) || !got[b.ID].Equal(t1.Add(2*time.Minute)) {
			t.Fatalf("last used %v", got)
		}
	})
}
