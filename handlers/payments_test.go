package handlers

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/teststripe"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// TestStripeWebhookSignature: a delivery signed with the endpoint's secret
// is applied; a changed body, a missing or foreign signature, and one
// signed more than 5 minutes before or after the (injected) clock are 400
// in the API's error shape, logged with their reason and never their body.
func TestStripeWebhookSignature(t *testing.T) {
	mock := teststripe.Start(t)
	e := newStripeEnv(t, testdb.SQLite(t), mock, &credits{})
	const marker = "body-marker-never-logged"
	obj := map[string]any{"id": "cus_1", "object": "customer", "description": marker}
	now := e.clock.Now()
	body, header := e.event("evt_good", "customer.updated", now, obj)
	if w := e.deliver(body, header); w.Code != 200 || !strings.Contains(w.Body.String(), `"outcome":"ignored: Sluice does not act on customer.updated"`) {
		t.Fatalf("a good delivery: %d %s", w.Code, w.Body.String())
	}
	stale, staleHeader := teststripe.Event(t, teststripe.WebhookSecret, "evt_stale", "customer.updated", now, obj, now.Add(-5*time.Minute-time.Second))
	ahead, aheadHeader := teststripe.Event(t, teststripe.WebhookSecret, "evt_ahead", "customer.updated", now, obj, now.Add(5*time.Minute+time.Second))
	edge, edgeHeader := teststripe.Event(t, teststripe.WebhookSecret, "evt_edge", "customer.updated", now, obj, now.Add(-5*time.Minute+time.Second))
	foreign, foreignHeader := teststripe.Event(t, "whsec_someone_else", "evt_foreign", "customer.updated", now, obj, now)
	for _, c := range []struct {
		name, body, header string
		status             int
		code, message      string
	}{
		{"changed body", strings.Replace(string(body), "evt_good", "evt_other", 1), header, 400, "invalid_signature", "does not match the body"},
		{"no signature", string(body), "", 400, "invalid_signature", "missing or malformed"},
		{"another secret", string(foreign), foreignHeader, 400, "invalid_signature", "does not match the body"},
		{"signed 5m01s ago", string(stale), staleHeader, 400, "stale_signature", "more than 5 minutes from now"},
		{"signed 5m01s ahead", string(ahead), aheadHeader, 400, "stale_signature", "more than 5 minutes from now"},
		{"signed 4m59s ago", string(edge), edgeHeader, 200, "", "ignored"},
	} {
		w := e.deliver([]byte(c.body), c.header)
		if w.Code != c.status || !strings.Contains(w.Body.String(), c.message) || c.code != "" && errorCode(t, w) != c.code {
			t.Errorf("%s: %d %s, want %d %s %q", c.name, w.Code, w.Body.String(), c.status, c.code, c.message)
		}
	}
	logs := e.logs.String()
	if strings.Contains(logs, marker) || strings.Contains(logs, teststripe.WebhookSecret) {
		t.Fatalf("a refused delivery's body or the secret reached the logs:\n%s", logs)
	}
	if n := strings.Count(logs, "stripe webhook refused"); n != 5 || !strings.Contains(logs, "reason=stale_signature") {
		t.Fatalf("want 5 refusals logged with their reasons, got %d:\n%s", n, logs)
	}
}

// TestStripeWebhookOffWithoutStripe: the embedded default has no Stripe:
// the webhook says payments are off, in the API's shape.
func TestStripeWebhookOffWithoutStripe(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	w := e.do(request{method: "POST", path: "/webhooks/stripe", body: `{}`, header: map[string]string{"Stripe-Signature": "t=1,v1=00"}})
	if w.Code != 404 || errorCode(t, w) != "payments_off" || !strings.Contains(w.Body.String(), "payments are off on this server") {
		t.Fatalf("%d %s", w.Code, w.Body.String())
	}
	owner := e.signup("o@example.com", "O")
	w = e.do(request{method: "POST", path: "/api/payments/top-ups", bearer: owner, body: `{"amount":"25.00"}`})
	if w.Code != 422 || errorCode(t, w) != "payments_off" || !strings.Contains(w.Body.String(), "SLUICE_STRIPE_SECRET_KEY") {
		t.Fatalf("a top-up without Stripe: %d %s", w.Code, w.Body.String())
	}
}

// TestTopUpCheckoutAtStripeMock: the owner's amount is rounded half-up to
// the cent once, and that is what the Checkout session asks Stripe to
// charge (accepted by stripe-mock), with the card saved for off-session
// use; out-of-bounds and malformed amounts and members are refused in
// words.
func TestTopUpCheckoutAtStripeMock(t *testing.T) {
	mock := teststripe.Start(t)
	e := newStripeEnv(t, testdb.SQLite(t), mock, &credits{})
	owner := e.signup("o@example.com", "O")
	w := e.do(request{method: "POST", path: "/api/payments/top-ups", bearer: owner, body: `{"amount":"25.005"}`})
	if w.Code != 201 {
		t.Fatalf("top-up: %d %s", w.Code, w.Body.String())
	}
	m := decode(t, w)
	if m["amount"] != "25.01" || m["amount_cents"].(float64) != 2501 || !strings.HasPrefix(m["checkout_url"].(string), "https://checkout.stripe.com/") {
		t.Fatalf("top-up answer: %v", m)
	}
	sessions := e.requests.To("POST", "/v1/checkout/sessions")
	if len(sessions) != 1 || sessions[0].Status != 200 {
		t.Fatalf("Checkout requests: %+v", sessions)
	}
	f := sessions[0].Form
	for k, want := range map[string]string{"mode": "payment", "line_items[0][price_data][unit_amount]": "2501",
		"line_items[0][price_data][currency]": "usd", "payment_intent_data[setup_future_usage]": "off_session",
		"metadata[org_id]": fmt.Sprint(e.orgID(owner)), "success_url": "http://example.com/billing/payments?checkout=success"} {
		if got := f.Get(k); got != want {
			t.Errorf("Checkout %s = %q, want %q", k, got, want)
		}
	}
	cs, err := e.store.CheckoutSessionByID(context.Background(), m["session_id"].(string))
	if err != nil || cs.AmountCents != 2501 || cs.Status != models.CheckoutOpen {
		t.Fatalf("stored session: %+v %v", cs, err)
	}
	if n := len(e.requests.To("POST", "/v1/customers")); n != 1 {
		t.Fatalf("customers created: %d", n)
	}
	// A second top-up reuses the organization's customer.
	e.do(request{method: "POST", path: "/api/payments/top-ups", bearer: owner, body: `{"amount":"5"}`})
	if n := len(e.requests.To("POST", "/v1/customers")); n != 1 {
		t.Fatalf("customers created after a second top-up: %d", n)
	}
	for _, c := range []struct{ body, code, message string }{
		{`{"amount":"4.99"}`, "amount_out_of_bounds", "a top-up must be from 5.00 to 1000.00 USD"},
		{`{"amount":"1000.01"}`, "amount_out_of_bounds", "a top-up must be from 5.00 to 1000.00 USD"},
		{`{"amount":"4.995"}`, "", "5.00"}, // rounds up into the bounds
		{`{"amount":"ten"}`, "invalid_amount", `amount must be a decimal string such as \"25.00\"`},
		{`{}`, "missing_amount", "amount is required"},
	} {
		w := e.do(request{method: "POST", path: "/api/payments/top-ups", bearer: owner, body: c.body})
		if c.code == "" {
			if w.Code != 201 || !strings.Contains(w.Body.String(), `"amount":"`+c.message+`"`) {
				t.Errorf("%s: %d %s", c.body, w.Code, w.Body.String())
			}
			continue
		}
		if w.Code/100 != 4 || errorCode(t, w) != c.code || !strings.Contains(w.Body.String(), c.message) {
			t.Errorf("%s: %d %s, want %s %q", c.body, w.Code, w.Body.String(), c.code, c.message)
		}
	}
}

// TestTopUpCreditedOnceAcrossDeliveries: Stripe delivers the same paid
// session's event ten times at once, to two nodes sharing Postgres (one
// node with ten at once on SQLite): the balance is credited once, with
// exactly the session's cents, referenced by the session id; every other
// delivery is answered 200 as a duplicate, and redelivering later changes
// nothing.
func TestTopUpCreditedOnceAcrossDeliveries(t *testing.T) {
	mock := teststripe.Start(t)
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		cr := &credits{}
		a := newStripeEnv(t, db, mock, cr)
		nodes := []*stripeEnv{a}
		if db.Dialect == "postgres" {
			other, err := models.Open(context.Background(), testdb.URL(db), "")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { other.Close() })
			nodes = append(nodes, newStripeEnv(t, other, mock, cr))
		}
		owner := a.signup("o@example.com", "O")
		org := a.orgID(owner)
		w := a.do(request{method: "POST", path: "/api/payments/top-ups", bearer: owner, body: `{"amount":"25.00"}`})
		if w.Code != 201 {
			t.Fatalf("top-up: %d %s", w.Code, w.Body.String())
		}
		session := decode(t, w)["session_id"].(string)
		if len(cr.Calls()) != 0 {
			t.Fatal("credited before Stripe's event")
		}
		body, header := a.event("evt_paid_1", "checkout.session.completed", a.clock.Now(), topUpSession(session, org, 2500))
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			answers []*httptest.ResponseRecorder
		)
		for i := range 10 {
			wg.Add(1)
			go func(n *stripeEnv) {
				defer wg.Done()
				w := n.deliver(body, header)
				mu.Lock()
				answers = append(answers, w)
				mu.Unlock()
			}(nodes[i%len(nodes)])
		}
		wg.Wait()
		applied := 0
		for _, w := range answers {
			switch {
			case w.Code == 200 && strings.Contains(w.Body.String(), `"duplicate":false`):
				applied++
				if !strings.Contains(w.Body.String(), "top-up of 2500 cents completed; balance credited") {
					t.Errorf("the applied delivery: %s", w.Body.String())
				}
			case w.Code == 200 && strings.Contains(w.Body.String(), `"duplicate":true`):
			default:
				t.Errorf("a delivery: %d %s", w.Code, w.Body.String())
			}
		}
		want := credit{OrgID: org, Amount: 25 * money.Dollar, Kind: "topup", Reference: session}
		if calls := cr.Calls(); applied != 1 || len(calls) != 1 || calls[0] != want {
			t.Fatalf("applied %d times; credit calls %+v, want one %+v", applied, calls, want)
		}
		w = a.deliver(body, header)
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"duplicate":true`) || len(cr.Calls()) != 1 {
			t.Fatalf("a later redelivery: %d %s, %d credit calls", w.Code, w.Body.String(), len(cr.Calls()))
		}
		// Another event for the same session (Stripe's async success after
		// the completion) is a new event, and still credits nothing twice.
		body2, header2 := a.event("evt_paid_2", "checkout.session.async_payment_succeeded", a.clock.Now(), topUpSession(session, org, 2500))
		if w := a.deliver(body2, header2); w.Code != 200 || !strings.Contains(w.Body.String(), "refused: the session was already completed") || len(cr.Calls()) != 1 {
			t.Fatalf("a second event for the session: %d %s, %d credit calls", w.Code, w.Body.String(), len(cr.Calls()))
		}
	})
}

// TestTopUpEventsNotTrusted: a signed event is applied only to a session
// Sluice created, for its organization and amount, paid, in the currency;
// anything else is recorded as refused (200, so Stripe stops retrying)
// and credits nothing.
func TestTopUpEventsNotTrusted(t *testing.T) {
	mock := teststripe.Start(t)
	cr := &credits{}
	e := newStripeEnv(t, testdb.SQLite(t), mock, cr)
	owner := e.signup("o@example.com", "O")
	org := e.orgID(owner)
	other := e.orgID(e.signup("p@example.com", "P"))
	w := e.do(request{method: "POST", path: "/api/payments/top-ups", bearer: owner, body: `{"amount":"25.00"}`})
	session := decode(t, w)["session_id"].(string)
	unpaid := topUpSession(session, org, 2500)
	unpaid["payment_status"] = "unpaid"
	euros := topUpSession(session, org, 2500)
	euros["currency"] = "eur"
	for i, c := range []struct {
		object  map[string]any
		outcome string
	}{
		{topUpSession("cs_test_made_up", org, 2500), "refused: a Checkout session Sluice did not create"},
		{topUpSession(session, other, 2500), fmt.Sprintf("refused: the session is organization %d's, the event names %d", org, other)},
		{topUpSession(session, org, 250000), "refused: the session was created for 2500 cents, Stripe reports 250000"},
		{unpaid, "waiting: the session is unpaid"},
		{euros, "refused: paid in eur, not usd"},
	} {
		body, header := e.event(fmt.Sprintf("evt_bad_%d", i), "checkout.session.completed", e.clock.Now(), c.object)
		if w := e.deliver(body, header); w.Code != 200 || !strings.Contains(w.Body.String(), c.outcome) {
			t.Errorf("%d: %d %s, want %q", i, w.Code, w.Body.String(), c.outcome)
		}
	}
	if calls := cr.Calls(); len(calls) != 0 {
		t.Fatalf("credited: %+v", calls)
	}
	if !strings.Contains(e.logs.String(), "stripe event refused") {
		t.Fatal("refused events are not logged for the operator")
	}
}

// TestAStripeTopUpIsSpendable: a paid Checkout session's event, delivered
// twice, credits the organization's real prepaid balance once, to the
// cent, and a request that the empty balance refused is admitted at once
// after it. Without the wiring of payments to billing nothing would be
// credited (or only the store, not the ledger requests reserve from).
func TestAStripeTopUpIsSpendable(t *testing.T) {
	mock := teststripe.Start(t)
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newStripeEnv(t, db, mock, nil)
		_, owner, key, org := prepaidEnv(t, e.env, "")
		chat := func() *httptest.ResponseRecorder {
			return e.do(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: prepaidBody})
		}
		if w := chat(); w.Code != 429 || !strings.Contains(w.Body.String(), "insufficient_quota") {
			t.Fatalf("before the top-up: %d %s", w.Code, w.Body.String())
		}
		w := e.do(request{method: "POST", path: "/api/payments/top-ups", bearer: owner, body: `{"amount":"25.00"}`})
		if w.Code != 201 {
			t.Fatalf("top-up: %d %s", w.Code, w.Body.String())
		}
		session := decode(t, w)["session_id"].(string)
		body, header := e.event("evt_spendable_1", "checkout.session.completed", e.clock.Now(), topUpSession(session, org, 2500))
		for range 2 {
			if w := e.deliver(body, header); w.Code != 200 {
				t.Fatalf("delivery: %d %s", w.Code, w.Body.String())
			}
		}
		if b := getBalance(t, e.env, owner); b.Balance != "25.00" || len(b.History) != 1 || b.History[0].Type != "topup" {
			t.Fatalf("balance after the top-up: %+v", b)
		}
		if w := chat(); w.Code != 200 {
			t.Fatalf("after the top-up: %d %s", w.Code, w.Body.String())
		}
	})
}
