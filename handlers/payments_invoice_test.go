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
	"github.com/sluicehq/sluice/money"
)

// TestInvoicesChargedThroughStripe: a closed month's Sluice invoice
// becomes one Stripe invoice for the organization's customer, one invoice
// item per Sluice line with the same integer cents (lines are rounded
// half-up to the cent when the month closes), finalized; stripe-mock
// accepts every request. Stripe's events then mark it failed and paid;
// paid is final, an older or later failure does not undo it, and the
// invoice list shows the state and the hosted link.
func TestInvoicesChargedThroughStripe(t *testing.T) {
	mock := teststripe.Start(t)
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newStripeEnv(t, db, mock, &credits{})
		owner := e.signup("o@example.com", "O")
		org := e.orgID(owner)
		ctx := context.Background()
		inv, err := e.store.EnsureInvoice(ctx, org, e.clock.Now().AddDate(0, -1, 0))
		if err != nil {
			t.Fatal(err)
		}
		lines := []models.InvoiceLine{
			{Kind: "fee", Description: "premium plan", Amount: 4900 * money.Cent},
			{Kind: "usage", Description: "gpt-4o", Model: "gpt-4o", Amount: 1235 * money.Cent},
			{Kind: "usage", Description: "sluice-local (not billed)", Model: "sluice-local", Amount: 0},
		}
		if ok, err := e.store.FinalizeInvoice(ctx, inv.ID, 6135*money.Cent, lines); !ok || err != nil {
			t.Fatalf("finalize: %v %v", ok, err)
		}
		n, err := e.pay.ChargeInvoices(ctx)
		if err != nil || n != 1 {
			t.Fatalf("charged %d: %v", n, err)
		}
		created := e.requests.To("POST", "/v1/invoices")
		items := e.requests.To("POST", "/v1/invoiceitems")
		if len(created) != 2 || created[0].Form.Get("metadata[sluice_invoice_id]") != strconv.FormatInt(inv.ID, 10) ||
			created[0].Form.Get("pending_invoice_items_behavior") != "exclude" || !strings.HasSuffix(created[1].Path, "/finalize") {
			t.Fatalf("invoice requests: %+v", created)
		}
		if len(items) != 3 {
			t.Fatalf("invoice items: %+v", items)
		}
		for i, want := range []string{"4900", "1235", "0"} {
			if got := items[i].Form.Get("amount"); got != want || items[i].Status != 200 || items[i].Form.Get("description") != lines[i].Description {
				t.Errorf("item %d: amount %s (%d), want %s", i, got, items[i].Status, want)
			}
		}
		for _, r := range append(created, items...) {
			if r.Status != 200 {
				t.Errorf("stripe-mock refused %s %s: %d", r.Method, r.Path, r.Status)
			}
		}
		if n, _ := e.pay.ChargeInvoices(ctx); n != 0 {
			t.Fatalf("charged again: %d", n)
		}
		got, _, err := e.store.InvoiceByID(ctx, org, inv.ID)
		if err != nil || got.StripeInvoiceID == "" || got.PaymentStatus != models.PaymentOpen {
			t.Fatalf("after charging: %+v %v", got, err)
		}
		stripeID := got.StripeInvoiceID
		t0 := e.clock.Now().Truncate(time.Second)
		deliver := func(id, typ string, at time.Time) string {
			body, header := e.event(id, typ, at, map[string]any{"id": stripeID, "object": "invoice", "status": "open",
				"customer": "cus_x", "hosted_invoice_url": "https://invoice.stripe.com/i/acct_1/test_" + id,
				"metadata": map[string]string{"sluice_invoice_id": strconv.FormatInt(inv.ID, 10)}})
			w := e.deliver(body, header)
			if w.Code != 200 {
				t.Fatalf("%s: %d %s", id, w.Code, w.Body.String())
			}
			return decode(t, w)["outcome"].(string)
		}
		if out := deliver("evt_fail", "invoice.payment_failed", t0.Add(time.Minute)); out != "invoice "+strconv.FormatInt(inv.ID, 10)+" failed" {
			t.Fatalf("failed: %s", out)
		}
		if out := deliver("evt_paid", "invoice.paid", t0.Add(2*time.Minute)); !strings.HasSuffix(out, " paid") {
			t.Fatalf("paid: %s", out)
		}
		if out := deliver("evt_fail_old", "invoice.payment_failed", t0.Add(90*time.Second)); out != "ignored: older than the invoice's state applied" {
			t.Fatalf("an older failure: %s", out)
		}
		if out := deliver("evt_void_late", "invoice.voided", t0.Add(3*time.Minute)); out != "ignored: the invoice is already paid" {
			t.Fatalf("a later void: %s", out)
		}
		w := e.do(request{method: "GET", path: "/api/invoices", bearer: owner})
		if !strings.Contains(w.Body.String(), `"payment_status":"paid"`) || !strings.Contains(w.Body.String(), `"hosted_invoice_url":"https://invoice.stripe.com/i/acct_1/test_evt_paid"`) {
			t.Fatalf("GET /api/invoices: %s", w.Body.String())
		}
	})
}

// TestAPrepaidTiersInvoicesAreNotCharged: an organization on a prepaid
// tier pays as it goes from its balance, so its closed month's invoice is
// not sent to Stripe; moved to an invoiced tier, it is.
func TestAPrepaidTiersInvoicesAreNotCharged(t *testing.T) {
	mock := teststripe.Start(t)
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newStripeEnv(t, db, mock, &credits{})
		admin, _, _, org := prepaidEnv(t, e.env, "")
		ctx := context.Background()
		inv, err := e.store.EnsureInvoice(ctx, org, e.clock.Now().AddDate(0, -1, 0))
		if err != nil {
			t.Fatal(err)
		}
		lines := []models.InvoiceLine{{Kind: "fee", Description: "plan", Amount: 900 * money.Cent}}
		if ok, err := e.store.FinalizeInvoice(ctx, inv.ID, 900*money.Cent, lines); !ok || err != nil {
			t.Fatalf("finalize: %v %v", ok, err)
		}
		if n, err := e.pay.ChargeInvoices(ctx); err != nil || n != 0 || len(e.requests.To("POST", "/v1/invoices")) != 0 {
			t.Fatalf("a prepaid organization's invoice was charged: %d %v", n, err)
		}
		if w := e.do(request{method: "PUT", path: "/api/admin/tiers/free", bearer: admin, body: `{"billing":"invoice"}`}); w.Code != 200 {
			t.Fatalf("tier: %d %s", w.Code, w.Body.String())
		}
		if n, err := e.pay.ChargeInvoices(ctx); err != nil || n != 1 {
			t.Fatalf("on an invoiced tier: charged %d, %v", n, err)
		}
	})
}
