package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// TestPaymentsPageWithoutStripe: the embedded default has no Stripe: the
// payments page says payments are off and offers no form, posting one
// anyway is refused in words, and the dashboard still offers a paid tier
// by upgrade request, saying why.
func TestPaymentsPageWithoutStripe(t *testing.T) {
	s := newSite(t, testdb.SQLite(t))
	owner := s.signup("o@example.com", "O")
	admin := s.signedIn(s.admin)
	admin.post("/admin/tiers/premium", tierValues(map[string]string{"capacity": "200", "refill_per_sec": "5", "refill_floor": "0",
		"autotune": "-", "stripe_price_id": "price_premium", "grace_days": "3"})).expectRedirect("/admin/tiers?done=tier")
	b := s.signedIn(owner)
	r := b.get("/billing/payments")
	r.expectPage(http.StatusOK, "payments", "payments-off")
	if r.testid("top-up-form").Length() != 0 || !strings.Contains(r.text("payments-off"), "the operator has not configured Stripe") {
		t.Fatalf("the payments page without Stripe: %s", r.text("payments"))
	}
	refused := b.post("/billing/top-up", url.Values{"amount": {"25.00"}})
	refused.expectPage(http.StatusUnprocessableEntity, "payments-off", "form-error")
	if got := refused.text("form-error"); got != "payments are off on this server: the operator has not configured Stripe (SLUICE_STRIPE_SECRET_KEY)" {
		t.Fatalf("a top-up without Stripe: %q", got)
	}
	d := b.get("/dashboard")
	if got := d.text("plan-paid-tiers"); !strings.Contains(got, "are sold by subscription, but payments are off on this server") {
		t.Fatalf("the plan's paid tiers: %q", got)
	}
	if d.page().Find(`#upgrade-tier option[value=premium]`).Length() != 1 {
		t.Fatal("without Stripe the paid tier must stay available by upgrade request")
	}
}

// TestAdminSetsStripePriceAndGraceDays: the tiers page edits a tier's
// Stripe price and grace days, audited; a bad price id is refused with the
// form's message.
func TestAdminSetsStripePriceAndGraceDays(t *testing.T) {
	s := newSite(t, testdb.SQLite(t))
	admin := s.signedIn(s.admin)
	admin.post("/admin/tiers/premium", tierValues(map[string]string{"capacity": "200", "refill_per_sec": "5", "refill_floor": "0",
		"autotune": "-", "stripe_price_id": "price_1AbC", "grace_days": "3"})).expectRedirect("/admin/tiers?done=tier")
	tier, err := s.store.TierByName(context.Background(), "premium")
	if err != nil || tier.StripePriceID != "price_1AbC" || tier.GraceDays != 3 {
		t.Fatalf("premium: %+v %v", tier, err)
	}
	page := admin.get("/admin/tiers")
	if page.page().Find(`[data-testid=tier-stripe-price][value=price_1AbC]`).Length() != 1 || page.page().Find(`[data-testid=tier-grace-days][value="3"]`).Length() != 1 {
		t.Fatal("the tiers page does not show the price and grace days")
	}
	entries, _, err := s.store.AuditEntries(context.Background(), models.AuditQuery{ActionPrefix: "tier.update"})
	if err != nil || len(entries) == 0 || !strings.Contains(entries[0].Detail, "stripe_price_id  -> price_1AbC, grace_days 7 -> 3") {
		t.Fatalf("audit: %+v %v", entries, err)
	}
	r := admin.post("/admin/tiers/premium", tierValues(map[string]string{"capacity": "200", "refill_per_sec": "5", "refill_floor": "0",
		"autotune": "-", "stripe_price_id": "prod_123"}))
	if r.Code != http.StatusUnprocessableEntity || !strings.Contains(r.Body.String(), "stripe_price_id must be a Stripe price id") {
		t.Fatalf("a product id as the price: %d", r.Code)
	}
}
