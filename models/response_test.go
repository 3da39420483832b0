package models_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// TestStoredResponses: a stored response is its organization's alone,
// gone to readers the moment it expires, and deleted by the sweep then.
func TestStoredResponses(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		s := models.NewStore(db)
		a, _, err := s.CreateOrganizationWithOwner(ctx, "A", "free", "a@example.com", "h", models.RoleOwner)
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := s.CreateOrganizationWithOwner(ctx, "B", "free", "b@example.com", "h", models.RoleOwner)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		keep := func(id string, expires time.Time) {
			t.Helper()
			err := s.CreateStoredResponse(ctx, models.StoredResponse{ID: id, OrgID: a.ID, TokenID: 7, Model: "sluice-local",
				Conversation: `[{"role":"user","content":"hi"}]`, Response: `{"id":"` + id + `"}`, CreatedAt: now, ExpiresAt: expires})
			if err != nil {
				t.Fatal(err)
			}
		}
		keep("resp_1", now.Add(time.Hour))
		keep("resp_2", now.Add(2*time.Hour))

		got, err := s.StoredResponse(ctx, a.ID, "resp_1", now)
		if err != nil || got.Conversation != `[{"role":"user","content":"hi"}]` || got.Response != `{"id":"resp_1"}` || got.TokenID != 7 {
			t.Fatalf("read back: %+v %v", got, err)
		}
		if _, err := s.StoredResponse(ctx, b.ID, "resp_1", now); !errors.Is(err, models.ErrNoStoredResponse) {
			t.Fatalf("another organization read it: %v", err)
		}
		if err := s.DeleteStoredResponse(ctx, b.ID, "resp_1", now); !errors.Is(err, models.ErrNoStoredResponse) {
			t.Fatalf("another organization deleted it: %v", err)
		}
		// Expired: gone to readers at once, before any sweep.
		if _, err := s.StoredResponse(ctx, a.ID, "resp_1", now.Add(time.Hour)); !errors.Is(err, models.ErrNoStoredResponse) {
			t.Fatalf("an expired response was read: %v", err)
		}
		n, err := s.DeleteExpiredResponses(ctx, now.Add(time.Hour))
		if err != nil || n != 1 {
			t.Fatalf("sweep deleted %d (%v), want the one expired", n, err)
		}
		if _, err := s.StoredResponse(ctx, a.ID, "resp_2", now.Add(time.Hour)); err != nil {
			t.Fatalf("the sweep took one that had not expired: %v", err)
		}
		if err := s.DeleteStoredResponse(ctx, a.ID, "resp_2", now); err != nil {
			t.Fatal(err)
		}
		if _, err := s.StoredResponse(ctx, a.ID, "resp_2", now); !errors.Is(err, models.ErrNoStoredResponse) {
			t.Fatalf("a deleted response was read: %v", err)
		}
	})
}
