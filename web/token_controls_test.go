package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// TestTokenLimitsOnThePage sets a token's limits when it is created, sees
// them listed, changes them in its edit form (a blank field removes a
// limit; the expiry stays as it was unless its field changed), and gets a
// refused change back in the open form with the message. A member changes
// only the tokens they created.
func TestTokenLimitsOnThePage(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		ctx := context.Background()
		ada := s.signup("ada@example.com", "Analytical Engines")
		b := s.signedIn(ada)

		w := b.post("/tokens", url.Values{"name": {"ci"}, "expires_in_days": {"30"}, "models": {"gpt-4o, fast"},
			"monthly_budget": {"$12.50"}, "requests_per_minute": {"10"}, "allowed_ips": {"203.0.113.0/24\n2001:db8::/32"}})
		w.expectPage(http.StatusCreated, "new-token", "token-row", "token-limits", "token-edit")
		if got := w.text("token-limits"); got != "models: gpt-4o, fast$12.50 a month10 requests a minutefrom 203.0.113.0/24, 2001:db8::/32" {
			t.Errorf("limits listed as %q", got)
		}
		toks, _ := s.store.APITokens(ctx, ada.OrgID)
		tok := toks[0]
		if fmt.Sprint(tok.Models) != "[gpt-4o fast]" || tok.MonthlyBudget == nil || tok.MonthlyBudget.String() != "12.50" ||
			tok.RequestsPerMinute == nil || *tok.RequestsPerMinute != 10 || fmt.Sprint(tok.AllowedIPs) != "[203.0.113.0/24 2001:db8::/32]" {
			t.Fatalf("stored %+v", tok.TokenControls)
		}
		id := strconv.FormatInt(tok.ID, 10)
		field := func(w *response, name string) string { return w.value("#token-" + id + "-" + name) }
		w = b.get("/tokens")
		expires := w.value(`[data-testid=token-edit-form] input[name=expires_at]`)
		if field(w, "limit-models") != "gpt-4o, fast" || field(w, "limit-budget") != "12.50" || field(w, "limit-rate") != "10" ||
			field(w, "limit-ips") != "203.0.113.0/24, 2001:db8::/32" || field(w, "name") != "ci" || expires != tok.ExpiresAt.UTC().Format("2006-01-02T15:04") {
			t.Fatalf("the edit form holds %q %q %q %q, expiry %q", field(w, "limit-models"), field(w, "limit-budget"), field(w, "limit-rate"), field(w, "limit-ips"), expires)
		}
		if max, _ := w.page().Find("#token-" + id + "-limit-rate").Attr("max"); max != "30" {
			t.Errorf("the rate field allows up to %q, want the free tier's 30", max)
		}

		// Saved: models cleared, the rate raised, the rest kept, the expiry
		// (its field unchanged) to the second as it was.
		edit := url.Values{"name": {"ci"}, "expires_at": {expires}, "expires_at_was": {expires}, "models": {""},
			"monthly_budget": {"12.50"}, "requests_per_minute": {"20"}, "allowed_ips": {"203.0.113.0/24, 2001:db8::/32"}}
		b.post("/tokens/"+id, edit).expectRedirect("/tokens?done=updated")
		toks, _ = s.store.APITokens(ctx, ada.OrgID)
		if got := toks[0]; got.Models != nil || *got.RequestsPerMinute != 20 || got.MonthlyBudget.String() != "12.50" || !got.ExpiresAt.Equal(*tok.ExpiresAt) {
			t.Fatalf("after saving: %+v, expires %v (was %v)", got.TokenControls, got.ExpiresAt, tok.ExpiresAt)
		}
		w = b.get("/tokens?done=updated")
		if got := w.text("flash"); got != "Token saved. Its next request, on every server, follows the new settings." {
			t.Errorf("flash %q", got)
		}
		// A new expiry, then none.
		edit.Set("expires_at", "2030-01-31T12:00")
		b.post("/tokens/"+id, edit).expectRedirect("/tokens?done=updated")
		toks, _ = s.store.APITokens(ctx, ada.OrgID)
		if got := toks[0].ExpiresAt; got == nil || got.UTC().Format("2006-01-02T15:04") != "2030-01-31T12:00" {
			t.Fatalf("expiry %v", got)
		}
		edit.Set("expires_at_was", "2030-01-31T12:00")
		edit.Set("expires_at", "")
		b.post("/tokens/"+id, edit).expectRedirect("/tokens?done=updated")
		if toks, _ = s.store.APITokens(ctx, ada.OrgID); toks[0].ExpiresAt != nil {
			t.Fatalf("expiry not cleared: %v", toks[0].ExpiresAt)
		}

		// Refused: the form comes back open with what was typed.
		before := s.snapshot()
		edit.Set("requests_per_minute", "31")
		edit.Set("models", "gpt-4o-mini")
		w = b.post("/tokens/"+id, edit)
		w.expectFormError(http.StatusUnprocessableEntity, "token-edit-form",
			"requests_per_minute may be at most 30, the free tier's rate (0.5 a second); 31 is above it")
		if w.page().Find(`[data-testid=token-edit][open][data-token-id="`+id+`"]`).Length() != 1 ||
			field(w, "limit-rate") != "31" || field(w, "limit-models") != "gpt-4o-mini" {
			t.Errorf("the refused form is not open with what was typed: %q %q", field(w, "limit-rate"), field(w, "limit-models"))
		}
		w = b.post("/tokens", url.Values{"name": {"x"}, "expires_in_days": {"0"}, "monthly_budget": {"lots"}, "models": {"gpt-4o"}})
		w.expectFormError(http.StatusUnprocessableEntity, "create-token-form", "Monthly budget must be an amount of dollars, such as 12.50.")
		if got := w.value("#token-models"); got != "gpt-4o" {
			t.Errorf("the create form kept models %q", got)
		}
		w = b.post("/tokens", url.Values{"name": {"x"}, "expires_in_days": {"0"}, "allowed_ips": {"10.0.0.1/8"}})
		w.expectFormError(http.StatusUnprocessableEntity, "create-token-form",
			"allowed_ips[0] 10.0.0.1/8 has bits set past its /8: write 10.0.0.0/8 for the network or 10.0.0.1/32 for the address")
		if after := s.snapshot(); after != before {
			t.Errorf("refused forms changed the state:\n%s\n%s", before, after)
		}

		// A member of the organization changes their own tokens only.
		u := testdb.AddMember(t, db, ada.OrgID, "member@example.com", "not a bcrypt hash", models.RoleMember)
		m := s.signedIn(u)
		mine := s.token(u, "member's")
		w = m.get("/tokens")
		if n := w.testid("token-edit").Length(); n != 1 || w.page().Find(`[data-testid=token-edit][data-token-id="`+strconv.FormatInt(mine.ID, 10)+`"]`).Length() != 1 {
			t.Errorf("the member sees %d edit forms, want one, for their own token", n)
		}
		m.post("/tokens/"+id, edit).expectError(http.StatusForbidden, "members may change only the tokens they created; ask an owner of the organization")
		edit.Set("requests_per_minute", "5")
		m.post("/tokens/"+strconv.FormatInt(mine.ID, 10), edit).expectRedirect("/tokens?done=updated")
		// Another organization's token is not found.
		bob := s.signedIn(s.signup("bob@example.com", "Babbage"))
		bob.post("/tokens/"+id, edit).expectError(http.StatusNotFound, "token not found")
		if strings.Contains(bob.get("/tokens").Body.String(), "gpt-4o") {
			t.Error("another organization's page shows A's token")
		}
	})
}
