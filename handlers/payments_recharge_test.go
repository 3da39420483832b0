package handlers

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/teststripe"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/payments"
)

// mails is the mail hook as payments sees it: the failures it was given.
type mails struct {
	mu   sync.Mutex
	sent []payments.Failure
}

func (m *mails) PaymentFailed(_ context.Context, f payments.Failure) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sent = append(m.sent, f)
	return nil
}

// TestAutoRecharge: after a first top-up saved a card, the owner sets the
// auto-recharge; a balance below the threshold charges the saved card
// off-session (the PaymentIntent stripe-mock accepts), once while it is
// under way; Stripe's failure is kept for the page and mailed, its success
// credits the PaymentIntent's cents once.
func TestAutoRecharge(t *testing.T) {
	mock := teststripe.Start(t)
	cr := &credits{}
	e := newStripeEnv(t, testdb.SQLite(t), mock, cr)
	m := &mails{}
	pay := payments.New(payments.Config{WebhookSecret: teststripe.WebhookSecret, Currency: "usd", TopUpMin: 5 * money.Dollar, TopUpMax: 1000 * money.Dollar},
		payments.Deps{Stripe: payments.NewClient(teststripe.SecretKey, mock.URL, httpClient(e.requests)), Store: e.store, Balance: cr,
			Orgs: e.bill, Mailer: m, Log: discardLog(), Now: e.clock.Now})
	e.pay, e.deps.Payments = pay, pay
	e.rebuild()
	owner := e.signup("o@example.com", "O")
	org := e.orgID(owner)
	w := e.do(request{method: "PUT", path: "/api/payments/auto-recharge", bearer: owner, body: `{"threshold":"5.00","amount":"20.00"}`})
	if w.Code != 422 || errorCode(t, w) != "no_saved_card" {
		t.Fatalf("before a first top-up: %d %s", w.Code, w.Body.String())
	}
	e.do(request{method: "POST", path: "/api/payments/top-ups", bearer: owner, body: `{"amount":"25.00"}`}) // makes the customer
	w = e.do(request{method: "PUT", path: "/api/payments/auto-recharge", bearer: owner, body: `{"threshold":"5.00","amount":"20.005"}`})
	if w.Code != 200 || !strings.Contains(w.Body.String(), `{"auto_recharge":{"threshold":"5.00","amount":"20.01"}}`) {
		t.Fatalf("set: %d %s", w.Code, w.Body.String())
	}
	if w := e.do(request{method: "PUT", path: "/api/payments/auto-recharge", bearer: owner, body: `{"threshold":"5.00"}`}); w.Code != 400 || errorCode(t, w) != "incomplete_recharge" {
		t.Fatalf("a threshold alone: %d %s", w.Code, w.Body.String())
	}
	ctx := context.Background()
	if charged, err := pay.Recharge(ctx, org, 5*money.Dollar); charged || err != nil {
		t.Fatalf("at the threshold: %v %v", charged, err)
	}
	if charged, err := pay.Recharge(ctx, org, 499*money.Cent); !charged || err != nil {
		t.Fatalf("below the threshold: %v %v", charged, err)
	}
	pis := e.requests.To("POST", "/v1/payment_intents")
	if len(pis) != 1 || pis[0].Status != 200 || pis[0].Form.Get("amount") != "2001" || pis[0].Form.Get("off_session") != "true" ||
		pis[0].Form.Get("confirm") != "true" || pis[0].Form.Get("payment_method") == "" {
		t.Fatalf("PaymentIntent requests: %+v", pis)
	}
	if charged, _ := pay.Recharge(ctx, org, 0); charged {
		t.Fatal("charged again while the first recharge is under way")
	}
	pi := map[string]any{"id": "pi_recharge_1", "object": "payment_intent", "amount": 2001, "amount_received": 0, "currency": "usd",
		"customer": "cus_x", "metadata": map[string]string{"org_id": orgStr(org), "kind": "auto_recharge"},
		"last_payment_error": map[string]any{"type": "card_error", "message": "Your card was declined."}}
	body, header := e.event("evt_pi_failed", "payment_intent.payment_failed", e.clock.Now(), pi)
	if w := e.deliver(body, header); w.Code != 200 || !strings.Contains(w.Body.String(), "auto-recharge failed: Your card was declined.") {
		t.Fatalf("failed: %d %s", w.Code, w.Body.String())
	}
	if w := e.do(request{method: "GET", path: "/api/payments", bearer: owner}); !strings.Contains(w.Body.String(), `"auto_recharge_error":"Your card was declined."`) {
		t.Fatalf("the failure is not shown: %s", w.Body.String())
	}
	if len(m.sent) != 1 || m.sent[0].Kind != payments.FailedRecharge || m.sent[0].OrgID != org || !strings.Contains(m.sent[0].Message, "Your card was declined.") {
		t.Fatalf("mailed: %+v", m.sent)
	}
	// The next attempt may run; this time Stripe says it succeeded.
	if charged, err := pay.Recharge(ctx, org, 0); !charged || err != nil {
		t.Fatalf("after the failure: %v %v", charged, err)
	}
	pi["id"], pi["amount_received"] = "pi_recharge_2", 2001
	delete(pi, "last_payment_error")
	body, header = e.event("evt_pi_ok", "payment_intent.succeeded", e.clock.Now(), pi)
	for range 2 {
		if w := e.deliver(body, header); w.Code != 200 {
			t.Fatalf("succeeded: %d %s", w.Code, w.Body.String())
		}
	}
	want := credit{OrgID: org, Amount: 2001 * money.Cent, Kind: "topup", Reference: "pi_recharge_2"}
	var got []credit
	for _, c := range cr.Calls() {
		if c.Reference == "pi_recharge_2" {
			got = append(got, c)
		}
	}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("credits of the recharge: %+v, want one %+v", got, want)
	}
	if w := e.do(request{method: "GET", path: "/api/payments", bearer: owner}); strings.Contains(w.Body.String(), "auto_recharge_error") {
		t.Fatalf("the failure is still shown after a success: %s", w.Body.String())
	}
}
