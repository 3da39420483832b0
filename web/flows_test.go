package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// TestTokenLifecycle creates a token, sees its secret once, and revokes it.
func TestTokenLifecycle(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		ada := s.signup("ada@example.com", "Analytical Engines")
		b := s.signedIn(ada)

		w := b.post("/tokens", url.Values{"name": {"  production  "}, "expires_in_days": {"0"}})
		w.expectPage(http.StatusCreated, "new-token", "new-token-secret", "token-row")
		secret := w.text("new-token-secret")
		if !strings.HasPrefix(secret, models.TokenPrefix) {
			t.Errorf("secret %q does not start with %s", secret, models.TokenPrefix)
		}
		if got := w.page().Find("#new-token-title").Text(); got != "Token “production” created" {
			t.Errorf("new token title = %q", got)
		}
		if got := w.value("#token-name"); got != "" {
			t.Errorf("the form keeps the created token's name %q; it should be empty for the next one", got)
		}
		if _, err := s.directory.Authenticate(context.Background(), secret); err != nil {
			t.Errorf("the shown secret does not authenticate: %v", err)
		}

		toks, err := s.store.APITokens(context.Background(), ada.OrgID)
		if err != nil || len(toks) != 1 {
			t.Fatalf("tokens %v, %v; want 1", toks, err)
		}
		id := strconv.FormatInt(toks[0].ID, 10)

		// The secret is shown that once.
		w = b.get("/tokens")
		w.expectPage(http.StatusOK, "token-row", "revoke")
		if strings.Contains(w.Body.String(), secret) || w.testid("new-token").Length() != 0 {
			t.Error("the token list shows the secret again")
		}
		if got := w.text("status"); got != "active" {
			t.Errorf("status = %q, want active", got)
		}

		// Another organization cannot revoke it, nor name it with nonsense.
		bob := s.signedIn(s.signup("bob@example.com", "Babbage"))
		bob.post("/tokens/"+id+"/revoke", url.Values{}).expectError(http.StatusNotFound, "token not found")
		for _, bad := range []string{"0", "-1", "abc", "99999999999999999999"} {
			b.post("/tokens/"+bad+"/revoke", url.Values{}).expectError(http.StatusNotFound, "No such token.")
		}

		b.post("/tokens/"+id+"/revoke", url.Values{}).expectRedirect("/tokens?done=revoked")
		w = b.get("/tokens?done=revoked")
		w.expectPage(http.StatusOK, "flash", "token-row")
		if got := w.text("flash"); got != "Token revoked. Requests using it are refused from now on." {
			t.Errorf("flash = %q", got)
		}
		if got := w.text("status"); got != "revoked" {
			t.Errorf("status = %q, want revoked", got)
		}
		if w.testid("revoke").Length() != 0 {
			t.Error("a revoked token still has a revoke button")
		}
		// Only known flashes are shown: a query cannot put text on the page.
		w = b.get("/tokens?done=" + url.QueryEscape("<b>Your account is locked</b>"))
		if w.testid("flash").Length() != 0 || strings.Contains(w.Body.String(), "locked") {
			t.Errorf("an unknown done= put text on the page: %q", w.text("flash"))
		}
	})
}

// TestTokenSigningToggle turns request signing on from the tokens page,
// sees the signing secret once, and turns it off again.
func TestTokenSigningToggle(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		ada := s.signup("ada@example.com", "Analytical Engines")
		b := s.signedIn(ada)
		w := b.post("/tokens", url.Values{"name": {"signed"}, "expires_in_days": {"0"}})
		token := w.text("new-token-secret")
		toks, err := s.store.APITokens(context.Background(), ada.OrgID)
		if err != nil || len(toks) != 1 {
			t.Fatalf("tokens %v, %v; want 1", toks, err)
		}
		id := strconv.FormatInt(toks[0].ID, 10)
		w = b.get("/tokens")
		w.expectPage(http.StatusOK, "token-row", "signing-on")
		if got := w.text("token-signing"); got != "off" {
			t.Errorf("signing column = %q, want off", got)
		}

		// Another organization cannot change it.
		bob := s.signedIn(s.signup("bob@example.com", "Babbage"))
		bob.post("/tokens/"+id+"/signing", url.Values{"required": {"true"}}).expectError(http.StatusNotFound, "token not found")

		w = b.post("/tokens/"+id+"/signing", url.Values{"required": {"true"}})
		w.expectPage(http.StatusOK, "signing-secret", "signing-secret-value", "signing-off")
		secret := w.text("signing-secret-value")
		if !strings.HasPrefix(secret, "sk_sluice_sign_") {
			t.Errorf("signing secret %q", secret)
		}
		if got := w.page().Find("#signing-secret-title").Text(); got != "Token “signed” now requires signed requests" {
			t.Errorf("title = %q", got)
		}
		if got := w.text("token-signing"); got != "required" {
			t.Errorf("signing column = %q, want required", got)
		}
		caller, err := s.directory.Authenticate(context.Background(), token)
		if err != nil || string(caller.SigningSecret) != secret {
			t.Errorf("the gateway's signing secret for the token = %q, %v; want the one shown", caller.SigningSecret, err)
		}
		// Shown that once.
		if w = b.get("/tokens"); strings.Contains(w.Body.String(), secret) {
			t.Error("the token list shows the signing secret again")
		}

		b.post("/tokens/"+id+"/signing", url.Values{"required": {"false"}}).expectRedirect("/tokens?done=unsigned")
		w = b.get("/tokens?done=unsigned")
		if got := w.text("flash"); got != "Signing turned off. The token takes unsigned requests again." {
			t.Errorf("flash = %q", got)
		}
		if got := w.text("token-signing"); got != "off" {
			t.Errorf("signing column = %q, want off", got)
		}
		if caller, err := s.directory.Authenticate(context.Background(), token); err != nil || caller.SigningSecret != nil {
			t.Errorf("after turning signing off the gateway still wants a signature: %v", err)
		}
	})
}

// TestAdminChangesTiersOrganizationsAndFreezes saves each admin form and
// checks the store and the page both show the change.
func TestAdminChangesTiersOrganizationsAndFreezes(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		ctx := context.Background()
		ada := s.signup("ada@example.com", "Analytical Engines")
		tok := s.token(ada, "ci")
		f := s.freeze(tok, time.Hour)
		admin := s.signedIn(s.admin)

		// Save a tier; autotune unchecked sends nothing, meaning off.
		admin.post("/admin/tiers/free", tierValues(map[string]string{"capacity": "45", "refill_per_sec": "0.75", "autotune": "-",
			"upstream_fallback": "error"})).expectRedirect("/admin/tiers?done=tier")
		tier, err := s.store.TierByName(ctx, "free")
		if err != nil {
			t.Fatal(err)
		}
		// The plan (fee, credit, overage), the batch file limit and the token
		// limit are not in these values: they keep theirs.
		if want := (models.TierSettings{Capacity: 45, RefillPerSec: 0.75, FreezeThreshold: 20, FreezeMinutes: 10,
			RefillFloor: 0.3, UpstreamFallback: "error", IncludedCredit: money.Dollar, Overage: models.OverageBlock,
			BatchFileBytes: 1 << 20, MaxAPITokens: 10, MaxQueuedJobs: 100, MaxPendingBatchLines: 1000, CreditNeedsVerifiedEmail: true, Billing: models.BillingInvoice, GraceDays: models.DefaultGraceDays}); tier.Settings() != want {
			t.Errorf("free tier = %+v, want %+v", tier.Settings(), want)
		}
		// The queue limits, when the form sends them.
		admin.post("/admin/tiers/free", tierValues(map[string]string{"capacity": "45", "refill_per_sec": "0.75", "autotune": "-",
			"upstream_fallback": "error", "max_queued_jobs": "7", "max_pending_batch_lines": "70"})).expectRedirect("/admin/tiers?done=tier")
		if tier, err := s.store.TierByName(ctx, "free"); err != nil || tier.MaxQueuedJobs != 7 || tier.MaxPendingBatchLines != 70 {
			t.Errorf("queue limits from the form: %d jobs, %d lines (%v)", tier.MaxQueuedJobs, tier.MaxPendingBatchLines, err)
		}
		admin.post("/admin/tiers/free", tierValues(map[string]string{"capacity": "45", "refill_per_sec": "0.75", "autotune": "-",
			"upstream_fallback": "error", "max_queued_jobs": "-1", "max_pending_batch_lines": "70"})).
			expectFormError(http.StatusUnprocessableEntity, "tier-form-free", "max_queued_jobs must be from 0 (no jobs) to 1000000")
		admin.post("/admin/tiers/free", tierValues(map[string]string{"capacity": "45", "refill_per_sec": "0.75", "autotune": "-",
			"upstream_fallback": "error", "max_queued_jobs": "100", "max_pending_batch_lines": "1000"})).expectRedirect("/admin/tiers?done=tier")
		w := admin.get("/admin/tiers?done=tier")
		w.expectPage(http.StatusOK, "flash", "tier-form-free")
		if got := w.text("flash"); got != "Tier saved. The next API request, on every node, uses the new settings." {
			t.Errorf("flash = %q", got)
		}
		form := w.testid("tier-form-free")
		if got, _ := form.Find(`input[name="capacity"]`).Attr("value"); got != "45" {
			t.Errorf("capacity shown = %q, want 45", got)
		}
		if _, checked := form.Find(`[data-testid="tier-autotune"]`).Attr("checked"); checked {
			t.Error("autotune is still checked")
		}
		if got, _ := form.Find(`[data-testid="tier-fallback"] option[selected]`).Attr("value"); got != "error" {
			t.Errorf("fallback shown = %q, want error", got)
		}
		admin.post("/admin/tiers/gold", tierValues(nil)).expectError(http.StatusNotFound, "tier gold not found")

		// Move an organization.
		orgPath := fmt.Sprintf("/admin/organizations/%d/tier", ada.OrgID)
		orgPage := fmt.Sprintf("/admin/organizations/%d", ada.OrgID)
		admin.post(orgPath, url.Values{"tier": {"premium"}}).expectRedirect(orgPage + "?done=tier")
		if o, err := s.store.Organization(ctx, ada.OrgID); err != nil || o.Tier.Name != "premium" {
			t.Errorf("organization tier = %q, %v; want premium", o.Tier.Name, err)
		}
		w = admin.get(orgPage + "?done=tier")
		if got := w.text("flash"); got != "Organization moved. Its next API request uses the new tier." {
			t.Errorf("flash = %q", got)
		}
		if got := w.text("org-tier"); got != "premium" {
			t.Errorf("the organization's page shows tier %q, want premium", got)
		}
		admin.post(orgPath, url.Values{"tier": {"gold"}}).expectError(http.StatusNotFound, "tier gold not found")
		admin.post("/admin/organizations/999999/tier", url.Values{"tier": {"free"}}).expectError(http.StatusNotFound, "organization not found")
		admin.post("/admin/organizations/x/tier", url.Values{"tier": {"free"}}).expectError(http.StatusNotFound, "No such organization.")

		// Lift a freeze.
		w = admin.get("/admin/tiers")
		w.expectPage(http.StatusOK, "admin-freeze-row", "lift-freeze")
		if got := w.text("freeze-status"); got != "active" {
			t.Errorf("freeze-status = %q, want active", got)
		}
		if got := w.testid("admin-freeze-row").Find("td").First().Text(); got != "Analytical Engines" {
			t.Errorf("freeze's organization = %q", got)
		}
		admin.post(fmt.Sprintf("/admin/freezes/%d/lift", f.ID), url.Values{}).expectRedirect("/admin/tiers?done=lifted")
		w = admin.get("/admin/tiers?done=lifted")
		if got := w.text("flash"); got != "Freeze lifted. The token may call the API again at once." {
			t.Errorf("flash = %q", got)
		}
		if got := w.text("freeze-status"); got != "lifted" {
			t.Errorf("freeze-status = %q, want lifted", got)
		}
		if w.testid("lift-freeze").Length() != 0 {
			t.Error("a lifted freeze still has a lift button")
		}
		admin.post("/admin/freezes/999999/lift", url.Values{}).expectError(http.StatusNotFound, "no such freeze")
	})
}

func TestAdminAddsAndDeletesProviderKeys(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		admin := s.signedIn(s.admin)
		const apiKey = "sk-test-secret-9876"

		admin.post("/admin/upstreams", upstreamValues(map[string]string{"base_url": " https://api.openai.com/v1/ ",
			"weight": "3", "rpm": "", "tpm": "90000", "models": " gpt-4o-mini, ,gpt-4o "})).expectRedirect("/admin/upstreams?done=added")
		keys, err := s.store.UpstreamKeys(context.Background())
		if err != nil || len(keys) != 1 {
			t.Fatalf("keys %v, %v; want 1", keys, err)
		}
		k := keys[0]
		if k.BaseURL != "https://api.openai.com/v1" || k.Weight != 3 || k.RPM != 0 || k.TPM != 90000 || k.Models != "gpt-4o-mini,gpt-4o" {
			t.Errorf("stored key = %+v", k)
		}
		if len(s.pool.Status()) != 1 {
			t.Error("the new key is not in the pool's rotation")
		}

		w := admin.get("/admin/upstreams?done=added")
		w.expectPage(http.StatusOK, "flash", "upstream-row", "delete-upstream")
		if got := w.text("flash"); got != "Key added and in rotation on every node." {
			t.Errorf("flash = %q", got)
		}
		if got := w.text("upstream-row"); !strings.Contains(got, "…9876") || !strings.Contains(got, "gpt-4o-mini,gpt-4o") || !strings.Contains(got, "— / 90,000") {
			t.Errorf("upstream-row = %q", got)
		}
		if strings.Contains(w.Body.String(), apiKey) {
			t.Error("the page shows the provider key")
		}

		for _, bad := range []string{"0", "abc"} {
			admin.post("/admin/upstreams/"+bad+"/delete", url.Values{}).expectError(http.StatusNotFound, "No such provider key.")
		}
		admin.post("/admin/upstreams/999999/delete", url.Values{}).expectError(http.StatusNotFound, "upstream key not found")
		admin.post(fmt.Sprintf("/admin/upstreams/%d/delete", k.ID), url.Values{}).expectRedirect("/admin/upstreams?done=deleted")
		w = admin.get("/admin/upstreams?done=deleted")
		w.expectPage(http.StatusOK, "flash", "upstreams-empty")
		if got := w.text("flash"); got != "Key deleted." {
			t.Errorf("flash = %q", got)
		}
		if len(s.pool.Status()) != 0 {
			t.Error("the deleted key is still in the pool's rotation")
		}
	})
}
