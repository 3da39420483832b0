package handlers

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/teststripe"
	"github.com/sluicehq/sluice/models"
)

// subscribed is an owner of an organization that went through Checkout for
// the pro tier (a Stripe price, 7 days' grace); the subscription exists at
// Stripe as sub_pro, and Stripe has not said yet it is active.
type subscribed struct {
	*stripeEnv
	owner string
	org   int64
}

func newSubscribed(t *testing.T, db *models.DB, mock *teststripe.Mock) subscribed {
	t.Helper()
	e := newStripeEnv(t, db, mock, &credits{})
	admin := e.login("admin@example.com", "admin-password")
	if w := e.do(request{method: "POST", path: "/api/admin/tiers", bearer: admin,
		body: `{"name":"pro","capacity":100,"refill_per_sec":2,"stripe_price_id":"price_pro","monthly_fee":"49.00"}`}); w.Code != 201 ||
		!strings.Contains(w.Body.String(), `"stripe_price_id":"price_pro","grace_days":7`) {
		t.Fatalf("create pro: %d %s", w.Code, w.Body.String())
	}
	owner := e.signup("o@example.com", "O")
	s := subscribed{stripeEnv: e, owner: owner, org: e.orgID(owner)}
	w := e.do(request{method: "POST", path: "/api/payments/subscriptions", bearer: owner, body: `{"tier":"pro"}`})
	if w.Code != 201 {
		t.Fatalf("subscribe: %d %s", w.Code, w.Body.String())
	}
	session := decode(t, w)["session_id"].(string)
	body, header := e.event("evt_sub_checkout", "checkout.session.completed", e.clock.Now(), map[string]any{
		"id": session, "object": "checkout.session", "mode": "subscription", "payment_status": "paid", "currency": "usd",
		"customer": "cus_pro", "subscription": "sub_pro", "metadata": map[string]string{"org_id": orgStr(s.org), "tier": "pro"}})
	if w := e.deliver(body, header); w.Code != 200 || !strings.Contains(w.Body.String(), "subscription sub_pro recorded") {
		t.Fatalf("checkout completed: %d %s", w.Code, w.Body.String())
	}
	if tier := s.tier(); tier != "free" {
		t.Fatalf("the tier changed at Checkout's completion, before the subscription is active: %s", tier)
	}
	return s
}

func orgStr(n int64) string { return strconv.FormatInt(n, 10) }

// tier is the organization's tier now.
func (s subscribed) tier() string {
	s.t.Helper()
	o, err := s.store.Organization(context.Background(), s.org)
	if err != nil {
		s.t.Fatal(err)
	}
	return o.Tier.Name
}

// subEvent delivers a customer.subscription.* event of the given status
// and Stripe time, and returns the outcome.
func (s subscribed) subEvent(id, typ, status string, at time.Time) string {
	s.t.Helper()
	body, header := s.event(id, typ, at, map[string]any{"id": "sub_pro", "object": "subscription", "status": status, "customer": "cus_pro",
		"metadata": map[string]string{"org_id": orgStr(s.org), "tier": "pro"},
		"items":    map[string]any{"object": "list", "data": []any{map[string]any{"id": "si_1", "object": "subscription_item", "price": map[string]any{"id": "price_pro", "object": "price"}}}}})
	w := s.deliver(body, header)
	if w.Code != 200 {
		s.t.Fatalf("%s: %d %s", id, w.Code, w.Body.String())
	}
	return decode(s.t, w)["outcome"].(string)
}

// invoiceEvent delivers an invoice.* event of the subscription's invoice.
func (s subscribed) invoiceEvent(id, typ string, at time.Time) string {
	s.t.Helper()
	body, header := s.event(id, typ, at, map[string]any{"id": "in_" + id, "object": "invoice", "status": "open", "customer": "cus_pro",
		"parent": map[string]any{"type": "subscription_details", "subscription_details": map[string]any{"subscription": "sub_pro",
			"metadata": map[string]string{"org_id": orgStr(s.org)}}}})
	w := s.deliver(body, header)
	if w.Code != 200 {
		s.t.Fatalf("%s: %d %s", id, w.Code, w.Body.String())
	}
	return decode(s.t, w)["outcome"].(string)
}

// graceEnds is the organization's grace period's end, zero for none.
func (s subscribed) graceEnds() time.Time {
	s.t.Helper()
	a, err := s.store.PaymentAccount(context.Background(), s.org)
	if err != nil {
		s.t.Fatal(err)
	}
	if a.GraceEndsAt == nil {
		return time.Time{}
	}
	return a.GraceEndsAt.UTC()
}

// TestSubscriptionCheckoutAtStripeMock: subscribing sends stripe-mock a
// Checkout session in subscription mode for the tier's price; a tier
// without a price is refused (the upgrade request is for it).
func TestSubscriptionCheckoutAtStripeMock(t *testing.T) {
	s := newSubscribed(t, testdb.SQLite(t), teststripe.Start(t))
	reqs := s.requests.To("POST", "/v1/checkout/sessions")
	if len(reqs) != 1 || reqs[0].Status != 200 || reqs[0].Form.Get("mode") != "subscription" ||
		reqs[0].Form.Get("line_items[0][price]") != "price_pro" || reqs[0].Form.Get("subscription_data[metadata][org_id]") != orgStr(s.org) {
		t.Fatalf("Checkout request: %+v", reqs)
	}
	w := s.do(request{method: "POST", path: "/api/payments/subscriptions", bearer: s.owner, body: `{"tier":"premium"}`})
	if w.Code != 422 || errorCode(t, w) != "tier_not_for_sale" || !strings.Contains(w.Body.String(), "ask an admin for it with an upgrade request") {
		t.Fatalf("a tier without a price: %d %s", w.Code, w.Body.String())
	}
	// The upgrade request an admin approves stays for it.
	if w := s.do(request{method: "POST", path: "/api/upgrade-requests", bearer: s.owner, body: `{"tier":"premium"}`}); w.Code != 201 {
		t.Fatalf("upgrade request: %d %s", w.Code, w.Body.String())
	}
	w = s.do(request{method: "POST", path: "/api/payments/portal", bearer: s.owner})
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"url":"https://`) || len(s.requests.To("POST", "/v1/billing_portal/sessions")) != 1 {
		t.Fatalf("portal: %d %s", w.Code, w.Body.String())
	}
}

// TestSubscriptionEventsOutOfOrder: Stripe's events are applied by the
// subscription's state at their Stripe time, whatever order they arrive
// in: an older one arriving after a newer one is ignored.
func TestSubscriptionEventsOutOfOrder(t *testing.T) {
	mock := teststripe.Start(t)
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		s := newSubscribed(t, db, mock)
		t0 := s.clock.Now().Truncate(time.Second)
		// Active, then a failed payment, then the end: delivered newest first.
		if out := s.subEvent("evt_deleted", "customer.subscription.deleted", "canceled", t0.Add(30*time.Second)); !strings.Contains(out, "the subscription ended") {
			t.Fatalf("deleted: %s", out)
		}
		end := t0.Add(30*time.Second).AddDate(0, 0, 7)
		for _, ev := range []struct{ id, typ, status string }{
			{"evt_past_due", "customer.subscription.updated", "past_due"},
			{"evt_active", "customer.subscription.updated", "active"},
		} {
			at := t0.Add(20 * time.Second)
			if ev.status == "active" {
				at = t0.Add(10 * time.Second)
			}
			if out := s.subEvent(ev.id, ev.typ, ev.status, at); !strings.HasPrefix(out, "ignored: older") {
				t.Fatalf("%s after the deletion: %s", ev.id, out)
			}
		}
		if out := s.invoiceEvent("evt_inv_paid_old", "invoice.paid", t0.Add(5*time.Second)); !strings.HasPrefix(out, "ignored: older") {
			t.Fatalf("an old invoice.paid: %s", out)
		}
		if got := s.graceEnds(); !got.Equal(end) {
			t.Fatalf("grace ends %v, want %v (the deletion's time + 7 days)", got, end)
		}
		// The org never was made active by the late "active": still free.
		if tier := s.tier(); tier != "free" {
			t.Fatalf("tier %s", tier)
		}
	})
}

// TestSubscriptionGracePeriod: active puts the organization on the paid
// tier; a failed payment starts the tier's grace period (failure time +
// grace_days), shown with its end date; paying ends it; failing again and
// letting it run out moves the organization back to free at the end (the
// injected clock), once, audited.
func TestSubscriptionGracePeriod(t *testing.T) {
	s := newSubscribed(t, testdb.SQLite(t), teststripe.Start(t))
	t0 := s.clock.Now().Truncate(time.Second)
	if out := s.subEvent("evt_1", "customer.subscription.updated", "active", t0); out != "subscription active: on the pro tier" || s.tier() != "pro" {
		t.Fatalf("active: %s, tier %s", out, s.tier())
	}
	if out := s.invoiceEvent("evt_2", "invoice.payment_failed", t0.Add(time.Minute)); !strings.HasPrefix(out, "a payment failed: on the tier until") {
		t.Fatalf("failed: %s", out)
	}
	if got, want := s.graceEnds(), t0.Add(time.Minute).AddDate(0, 0, 7); !got.Equal(want) {
		t.Fatalf("grace ends %v, want %v", got, want)
	}
	w := s.do(request{method: "GET", path: "/api/payments", bearer: s.owner})
	if !strings.Contains(w.Body.String(), `"grace_ends_at":"`+t0.Add(time.Minute).AddDate(0, 0, 7).Format(time.RFC3339)) {
		t.Fatalf("GET /api/payments: %s", w.Body.String())
	}
	if out := s.invoiceEvent("evt_3", "invoice.paid", t0.Add(2*time.Minute)); out != "subscription active: on the pro tier" || !s.graceEnds().IsZero() {
		t.Fatalf("paid: %s, grace %v", out, s.graceEnds())
	}
	s.subEvent("evt_4", "customer.subscription.updated", "past_due", t0.Add(3*time.Minute))
	end := t0.Add(3*time.Minute).AddDate(0, 0, 7)
	s.clock.Advance(end.Sub(s.clock.Now()) - time.Second)
	if moved, err := s.pay.EndGracePeriods(context.Background()); err != nil || len(moved) != 0 || s.tier() != "pro" {
		t.Fatalf("a second before the end: moved %v %v, tier %s", moved, err, s.tier())
	}
	s.clock.Advance(time.Second)
	moved, err := s.pay.EndGracePeriods(context.Background())
	if err != nil || len(moved) != 1 || moved[0] != s.org || s.tier() != "free" || !s.graceEnds().IsZero() {
		t.Fatalf("at the end: moved %v %v, tier %s", moved, err, s.tier())
	}
	if moved, _ := s.pay.EndGracePeriods(context.Background()); len(moved) != 0 {
		t.Fatalf("moved again: %v", moved)
	}
	entries, _, err := s.store.AuditEntries(context.Background(), models.AuditQuery{OrgID: s.org, ActionPrefix: "payments.grace_ended"})
	if err != nil || len(entries) != 1 || !strings.Contains(entries[0].Detail, "back on the free tier") {
		t.Fatalf("audit: %+v %v", entries, err)
	}
}
