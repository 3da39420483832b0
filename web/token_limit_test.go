package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// TestTierFormSetsTheTokenLimit: the tier forms show and take
// max_api_tokens; a bad value comes back with a message.
func TestTierFormSetsTheTokenLimit(t *testing.T) {
	s := newSite(t, testdb.SQLite(t))
	admin := s.signedIn(s.admin)
	w := admin.get("/admin/tiers")
	for tier, want := range map[string]string{"free": "10", "premium": "200"} {
		if got := w.value(`[data-testid="tier-form-` + tier + `"] [data-testid=tier-max-tokens]`); got != want {
			t.Errorf("%s tier's token limit shown as %q, want %q", tier, got, want)
		}
	}
	if got := w.value(`[data-testid="create-tier-form"] input[name=max_api_tokens]`); got != "10" {
		t.Errorf("a new tier's token limit starts at %q, want 10", got)
	}
	admin.post("/admin/tiers/free", tierValues(map[string]string{"max_api_tokens": "3"})).expectRedirect("/admin/tiers?done=tier")
	if tier, err := s.store.TierByName(context.Background(), "free"); err != nil || tier.MaxAPITokens != 3 {
		t.Fatalf("stored %d, %v", tier.MaxAPITokens, err)
	}
	if got := admin.get("/admin/tiers").value(`[data-testid="tier-form-free"] [data-testid=tier-max-tokens]`); got != "3" {
		t.Errorf("shown as %q after saving 3", got)
	}
	for _, tt := range []struct{ value, message string }{
		{"many", "These fields need a number: max_api_tokens."},
		{"2.5", "These fields need a number: max_api_tokens."},
		{"-1", "max_api_tokens must be from 0 (no limit) to 100000"},
		{"100001", "max_api_tokens must be from 0 (no limit) to 100000"},
	} {
		admin.post("/admin/tiers/free", tierValues(map[string]string{"max_api_tokens": tt.value})).
			expectFormError(http.StatusUnprocessableEntity, "tier-form-free", tt.message)
	}
	form := url.Values{"name": {"team"}, "capacity": {"50"}, "refill_per_sec": {"1"}, "tokens_per_minute": {"0"}, "freeze_threshold": {"20"},
		"freeze_minutes": {"10"}, "refill_floor": {"0"}, "upstream_fallback": {"local"}, "batch_file_mib": {"1"}, "max_api_tokens": {"0"}}
	admin.post("/admin/tiers", form).expectRedirect("/admin/tiers?done=created")
	if tier, err := s.store.TierByName(context.Background(), "team"); err != nil || tier.MaxAPITokens != 0 {
		t.Fatalf("created with %d, %v", tier.MaxAPITokens, err)
	}
	form.Set("name", "team2")
	form.Set("max_api_tokens", "lots")
	w = admin.post("/admin/tiers", form)
	w.expectFormError(http.StatusUnprocessableEntity, "create-tier-form", "These fields need a number: max_api_tokens.")
	if got := w.value(`[data-testid="create-tier-form"] input[name=max_api_tokens]`); got != "lots" {
		t.Errorf("the refused form kept %q", got)
	}
}

// TestTokensPageAtTheLimit: past the tier's limit the tokens page says so
// (409) and makes nothing; a revocation makes room.
func TestTokensPageAtTheLimit(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		s := newSite(t, db)
		ada := s.signup("ada@example.com", "Acme")
		free, _ := s.store.TierByName(context.Background(), "free")
		l := free.Settings()
		l.MaxAPITokens = 2
		if _, err := s.store.UpdateTier(context.Background(), s.admin.User, "free", l); err != nil {
			t.Fatal(err)
		}
		b := s.signedIn(ada)
		for _, name := range []string{"one", "two"} {
			b.post("/tokens", url.Values{"name": {name}, "expires_in_days": {"0"}}).expectPage(http.StatusCreated, "new-token")
		}
		w := b.post("/tokens", url.Values{"name": {"three"}, "expires_in_days": {"0"}})
		w.expectFormError(http.StatusConflict, "create-token-form",
			"the free tier allows 2 active API tokens and this organization has 2 (revoked and expired ones do not count); revoke one or upgrade")
		if w.testid("new-token").Length() != 0 || len(w.texts("token-row")) != 2 {
			t.Errorf("a refused token was shown or listed: %d rows", len(w.texts("token-row")))
		}
		if got := w.value(`[data-testid="create-token-form"] input[name=name]`); got != "three" {
			t.Errorf("the form kept the name %q", got)
		}
		toks, _ := s.store.APITokens(context.Background(), ada.OrgID)
		b.post(fmt.Sprintf("/tokens/%d/revoke", toks[0].ID), nil).expectRedirect("/tokens?done=revoked")
		b.post("/tokens", url.Values{"name": {"three"}, "expires_in_days": {"0"}}).expectPage(http.StatusCreated, "new-token")
	})
}
