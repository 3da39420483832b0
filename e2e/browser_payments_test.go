package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/teststripe"
)

// TestBrowserPaymentsJourney is the top-up and the paid tier in a real
// browser against a whole Sluice whose Stripe is stripe-mock: the owner
// asks for a top-up and sees what Stripe will charge (rounded half-up to
// the cent), Checkout itself is Stripe's page, so the test follows the
// session to its success URL, which changes nothing; Stripe's signed
// event then completes it. Subscribing to the paid tier goes the same way:
// the tier changes on the subscription's event, and a failed payment
// shows the grace period's end on the dashboard. Desktop and phone width,
// screenshots of each.
func TestBrowserPaymentsJourney(t *testing.T) {
	t.Parallel()
	ctx := browserContext(t)
	mock := teststripe.Start(t)
	base, _, stop := start(t, map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4", "SLUICE_ADMIN_PASSWORD": "admin-password",
		"SLUICE_STRIPE_SECRET_KEY": teststripe.SecretKey, "SLUICE_STRIPE_WEBHOOK_SECRET": teststripe.WebhookSecret,
		"SLUICE_STRIPE_API_BASE": mock.URL})
	defer stop()
	c := client{t, base}
	var admin struct{ Token string }
	c.call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &admin)
	if r := c.call("POST", "/api/admin/tiers", admin.Token,
		`{"name":"pro","capacity":200,"refill_per_sec":5,"monthly_fee":"49.00","stripe_price_id":"price_pro","grace_days":7}`, nil); r.StatusCode != 201 {
		t.Fatalf("create the pro tier: %d", r.StatusCode)
	}
	deliver := func(id, typ string, object map[string]any) string {
		t.Helper()
		body, header := teststripe.Event(t, teststripe.WebhookSecret, id, typ, time.Now(), object, time.Now())
		status, answer, err := teststripe.Post(context.Background(), base+"/webhooks/stripe", body, header)
		if err != nil || status != 200 {
			t.Fatalf("%s: %d %s %v", id, status, answer, err)
		}
		return answer
	}

	err := chromedp.Do(ctx,
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(base+"/signup"),
		chromedp.SendKeys(chromedp.CSS(`input[name=email]`), "payer@example.com"),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "password123"),
		chromedp.SendKeys(chromedp.CSS(`input[name=organization]`), "Paying Lanterns"),
		chromedp.Click(chromedp.CSS(`[data-testid=signup-form] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=dashboard]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=nav-payments]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=top-up-form]`)),
	)
	if err != nil {
		t.Fatalf("sign up and open payments: %v", err)
	}
	var session struct{ Token string }
	c.call("POST", "/api/auth/login", "", `{"email":"payer@example.com","password":"password123"}`, &session)
	var orgs struct{ Data []struct{ ID int64 } }
	c.call("GET", "/api/organizations", session.Token, "", &orgs)
	org := fmt.Sprint(orgs.Data[0].ID)
	expectPrefix(t, ctx, `[data-testid=top-up] .hint`, "From 5.00 to 1000.00 USD")
	expectText(t, ctx, `[data-testid=recharge-needs-card]`, "Top up once through Checkout first: its card is saved for the auto-recharge.")
	screenshot(t, ctx, "payments-desktop")

	// The top-up: 25.005 is charged as 25.01.
	err = chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#top-up-amount`), "25.005"),
		chromedp.Click(chromedp.CSS(`[data-testid=top-up-form] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=checkout-link]`)),
	)
	if err != nil {
		t.Fatalf("top-up form: %v", err)
	}
	expectText(t, ctx, `[data-testid=checkout-charged]`, "25.01 USD")
	hrefAttr, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(`[data-testid=checkout-go]`), "href"))
	href := hrefAttr.Value
	if err != nil || !strings.HasPrefix(href, "https://checkout.stripe.com/") {
		t.Fatalf("the link to Checkout: %q %v", href, err)
	}
	sessionAttr, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(`[data-testid=top-up-row]`), "data-session"))
	sessionID := sessionAttr.Value
	if err != nil || !strings.HasPrefix(sessionID, "cs_") {
		t.Fatalf("the top-up's session: %q %v", sessionID, err)
	}
	screenshot(t, ctx, "payments-checkout-link-desktop")

	// Stripe's page is Stripe's: follow the session to its success URL,
	// which only says the payment is on its way.
	err = chromedp.Do(ctx, chromedp.Navigate(base+"/billing/payments?checkout=success"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=checkout-returned]`)))
	if err != nil {
		t.Fatalf("the success URL: %v", err)
	}
	expectText(t, ctx, `[data-testid=top-up-state]`, "waiting for Stripe's confirmation")
	screenshot(t, ctx, "payments-returned-desktop")
	if answer := deliver("evt_topup", "checkout.session.completed", map[string]any{"id": sessionID, "object": "checkout.session",
		"mode": "payment", "payment_status": "paid", "amount_total": 2501, "currency": "usd", "customer": "cus_x",
		"metadata": map[string]string{"org_id": org}}); !strings.Contains(answer, "top-up of 2501 cents completed") {
		t.Fatalf("the top-up's event: %s", answer)
	}
	if err := chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`[data-testid=top-ups]`))); err != nil {
		t.Fatal(err)
	}
	if state, _ := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(`[data-testid=top-up-row]`), "data-state")); state.Value == "waiting" {
		t.Fatalf("the top-up after Stripe's event is still %s", state.Value)
	}
	if n := matches(t, ctx, `[data-testid=recharge-form]`); n != 1 {
		t.Fatal("the auto-recharge form is not offered after a first top-up")
	}

	// The paid tier, on a phone.
	err = chromedp.Do(ctx,
		chromedp.EmulateViewport(390, 844),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=paid-tier][data-tier=pro]`)),
	)
	if err != nil {
		t.Fatal(err)
	}
	fitsWidth(t, ctx, 390, "payments")
	screenshot(t, ctx, "payments-phone")
	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`[data-tier=pro] [data-testid=subscribe]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=checkout-link]`)),
	)
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	screenshot(t, ctx, "payments-subscribe-phone")
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/billing/payments?checkout=success"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=checkout-returned]`))); err != nil {
		t.Fatal(err)
	}
	expectPrefix(t, ctx, `[data-testid=subscription-state]`, "You are on the Free tier.")
	deliver("evt_sub_active", "customer.subscription.created", map[string]any{"id": "sub_pro", "object": "subscription", "status": "active",
		"customer": "cus_x", "metadata": map[string]string{"org_id": org},
		"items": map[string]any{"object": "list", "data": []any{map[string]any{"id": "si_1", "object": "subscription_item",
			"price": map[string]any{"id": "price_pro", "object": "price"}}}}})
	deliver("evt_sub_failed", "invoice.payment_failed", map[string]any{"id": "in_sub", "object": "invoice", "status": "open", "customer": "cus_x",
		"parent": map[string]any{"type": "subscription_details", "subscription_details": map[string]any{"subscription": "sub_pro",
			"metadata": map[string]string{"org_id": org}}}})
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/dashboard#plan"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=plan-grace]`))); err != nil {
		t.Fatalf("the dashboard's grace period: %v", err)
	}
	end := time.Now().UTC().AddDate(0, 0, 7).Format("Jan 2, 2006")
	expectPrefix(t, ctx, `[data-testid=plan-grace-ends]`, end)
	expectPrefix(t, ctx, `[data-testid=plan-grace]`, "A payment failed: you keep the Pro tier until "+end)
	fitsWidth(t, ctx, 390, "dashboard")
	sectionShot(t, ctx, `[data-testid=plan]`, "dashboard-plan-grace-phone")
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900), chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`[data-testid=plan-grace]`))); err != nil {
		t.Fatal(err)
	}
	sectionShot(t, ctx, `[data-testid=plan]`, "dashboard-plan-grace-desktop")
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/billing/payments"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=grace]`))); err != nil {
		t.Fatal(err)
	}
	expectPrefix(t, ctx, `[data-testid=subscription-status]`, "past_due")
	screenshot(t, ctx, "payments-grace-desktop")
}
