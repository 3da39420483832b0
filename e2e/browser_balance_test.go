package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/testsync"
)

// TestBrowserPrepaidBalance is a prepaid organization in a real browser,
// on the embedded default with no payment provider: the admin puts the
// free tier on prepaid billing (tiers page), makes a redeem code (shown
// once); the owner sees an empty balance and that card top-ups are off,
// redeems the code, sets a low-balance alert and spends; the dashboard
// draws the spending by day and lists the history; the admin adjusts the
// balance with a reason. Every page is shot at desktop and phone width
// (SLUICE_SCREENSHOT_DIR) and must fit a phone.
func TestBrowserPrepaidBalance(t *testing.T) {
	t.Parallel()
	user := browserContext(t)
	admin, cancelAdmin := chromedp.NewContext(user, chromedp.WithNewBrowserContext())
	defer cancelAdmin()
	failOnCSPViolations(t, admin)
	base, _, stop := start(t, map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4", "SLUICE_ADMIN_PASSWORD": "admin-password"})
	defer stop()
	c := client{t, base}
	var adminAPI struct{ Token string }
	if r := c.call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &adminAPI); r.StatusCode != 200 {
		t.Fatalf("admin login: %d", r.StatusCode)
	}
	if r := c.call("PUT", "/api/admin/prices/sluice-local", adminAPI.Token, `{"input_per_mtok":"400","output_per_mtok":"1000"}`, nil); r.StatusCode != 200 {
		t.Fatalf("price: %d", r.StatusCode)
	}

	// 1. The admin: the free tier to prepaid, on the tiers page.
	err := chromedp.Do(admin,
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(base+"/login"),
		chromedp.SendKeys(chromedp.CSS(`input[name=email]`), "admin@localhost"),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "admin-password"),
		chromedp.Submit(chromedp.CSS(`[data-testid=login-form]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=dashboard]`)),
		chromedp.Navigate(base+"/admin/tiers"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=tier-form-free]`)),
		chromedp.SetValue(chromedp.CSS(`[data-testid=tier-form-free] [data-testid=tier-billing]`), "prepaid"),
		chromedp.SetValue(chromedp.CSS(`[data-testid=tier-form-free] input[name=tokens_per_minute]`), "0"),
		chromedp.Submit(chromedp.CSS(`[data-testid=tier-form-free]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=flash]`)),
	)
	if err != nil {
		t.Fatalf("admin sets the free tier prepaid: %v", err)
	}
	var tiers struct {
		Data []struct{ Name, Billing string }
	}
	c.call("GET", "/api/admin/tiers", adminAPI.Token, "", &tiers)
	if got := fmt.Sprint(tiers.Data); !strings.Contains(got, "{free prepaid}") || !strings.Contains(got, "{premium invoice}") {
		t.Fatalf("tiers after the form: %s", got)
	}
	screenshot(t, admin, "desktop-admin-tiers-billing")

	// 2. A redeem code, shown once.
	err = chromedp.Do(admin,
		chromedp.Click(chromedp.CSS(`[data-testid=admin-nav-redeem-codes]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=redeem-code-form]`)),
		chromedp.SendKeys(chromedp.CSS(`#code-amount`), "5.00"),
		chromedp.SetValue(chromedp.CSS(`#code-uses`), "2"),
		chromedp.SendKeys(chromedp.CSS(`#code-note`), "launch week"),
		chromedp.Submit(chromedp.CSS(`[data-testid=redeem-code-form]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=new-redeem-code-value]`)),
	)
	if err != nil {
		t.Fatalf("admin makes a code: %v", err)
	}
	code := strings.TrimSpace(text(t, admin, `[data-testid=new-redeem-code-value]`))
	if !strings.HasPrefix(code, "rc_") {
		t.Fatalf("code on the page %q", code)
	}
	expectText(t, admin, `[data-testid=redeem-code-row] td:nth-child(3)`, "2 of 2")
	screenshot(t, admin, "desktop-admin-redeem-codes")
	if err := chromedp.Do(admin, chromedp.Navigate(base+"/admin/redeem-codes"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=redeem-codes-table]`))); err != nil {
		t.Fatal(err)
	}
	if n := matches(t, admin, `[data-testid=new-redeem-code]`); n != 0 || matches(t, admin, `[data-testid=redeem-code-row]`) != 1 {
		t.Error("the code is shown again on the list")
	}

	// 3. The owner signs up: an empty balance, and no card top-ups here.
	err = chromedp.Do(user,
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(base+"/signup"),
		chromedp.SendKeys(chromedp.CSS(`input[name=email]`), "prepaid@example.com"),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "password123"),
		chromedp.SendKeys(chromedp.CSS(`input[name=organization]`), "Prepaid Lanterns"),
		chromedp.Click(chromedp.CSS(`[data-testid=signup-form] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=balance]`)),
	)
	if err != nil {
		t.Fatalf("signup: %v", err)
	}
	expectText(t, user, `[data-testid=balance-billing]`, "Prepaid") // as shown: capitalized by CSS
	expectText(t, user, `[data-testid=balance-amount]`, "$0.00")
	expectPrefix(t, user, `[data-testid=balance-empty]`, "The balance is spent.")
	expectText(t, user, `[data-testid=payments-off]`, "Top-ups by card are not set up on this server; ask your operator for a redeem code.")
	var owner struct{ Token string }
	c.call("POST", "/api/auth/login", "", `{"email":"prepaid@example.com","password":"password123"}`, &owner)
	var tok struct{ Token string }
	if r := c.call("POST", "/api/tokens", owner.Token, `{"name":"spender"}`, &tok); r.StatusCode != 201 {
		t.Fatalf("token: %d", r.StatusCode)
	}
	body := func(i int) string {
		return `{"model":"sluice-local","max_tokens":40,"messages":[{"role":"user","content":"a couplet about lantern ` + strconv.Itoa(i) + `"}]}`
	}
	if r := c.chat(tok.Token, body(0)); r.status != 429 || r.code != "insufficient_quota" || r.shouldRetry != "false" {
		t.Fatalf("a call on an empty balance: %+v", r)
	}

	// 4. Redeem the code on the dashboard, set the alert, spend.
	err = chromedp.Do(user,
		chromedp.SendKeys(chromedp.CSS(`#redeem-code`), code),
		chromedp.Submit(chromedp.CSS(`[data-testid=redeem-form]`)),
		chromedp.WaitVisible(chromedp.CSS(`#redeem [data-testid=flash]`)),
	)
	if err != nil {
		t.Fatalf("redeem: %v", err)
	}
	expectText(t, user, `#redeem [data-testid=flash]`, "Code redeemed: $5.00 added to the balance.")
	expectText(t, user, `[data-testid=balance-amount]`, "$5.00")
	err = chromedp.Do(user,
		chromedp.SendKeys(chromedp.CSS(`#low-balance-threshold`), "4.99"),
		chromedp.Submit(chromedp.CSS(`[data-testid=low-balance-form]`)),
		chromedp.WaitVisible(chromedp.CSS(`#low-balance [data-testid=flash]`)),
	)
	if err != nil {
		t.Fatalf("alert: %v", err)
	}
	for i := 1; i <= 4; i++ {
		if r := c.chat(tok.Token, body(i)); r.status != 200 {
			t.Fatalf("call %d: %+v", i, r)
		}
	}
	var bal struct{ Balance, Reserved string }
	testsync.WaitFor(t, 10*time.Second, "the spending stored", func() bool {
		c.call("GET", "/api/balance", owner.Token, "", &bal)
		var hist struct{ History []struct{ Type string } }
		c.call("GET", "/api/balance", owner.Token, "", &hist)
		return len(hist.History) == 2 && hist.History[0].Type == "spending"
	})
	if err := chromedp.Do(user, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`[data-testid=balance-history]`))); err != nil {
		t.Fatal(err)
	}
	expectText(t, user, `[data-testid=balance-amount]`, "$"+bal.Balance)
	expectPrefix(t, user, `[data-testid=balance-low]`, "The balance is low.")
	if n := matches(t, user, `[data-testid=balance] svg rect:not(.chart-hit)`); n == 0 {
		t.Error("the spending chart draws nothing")
	}
	if n := matches(t, user, `[data-testid=balance-history-row]`); n != 2 {
		t.Errorf("%d history rows, want the redeem code and today's spending", n)
	}
	screenshot(t, user, "desktop-dashboard-balance")
	sectionShot(t, user, "#balance", "desktop-balance-section")

	// 5. The admin adjusts it by hand, with a reason.
	var orgs struct{ Data []struct{ ID int64 } }
	if r := c.call("GET", "/api/organizations", owner.Token, "", &orgs); r.StatusCode != 200 || len(orgs.Data) != 1 {
		t.Fatalf("organizations: %d %+v", r.StatusCode, orgs)
	}
	err = chromedp.Do(admin,
		chromedp.Navigate(base+"/admin/organizations/"+strconv.FormatInt(orgs.Data[0].ID, 10)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=org-adjust-form]`)),
		chromedp.SendKeys(chromedp.CSS(`#adjust-amount`), "-99"),
		chromedp.SendKeys(chromedp.CSS(`#adjust-reason`), "too much"),
		chromedp.Submit(chromedp.CSS(`[data-testid=org-adjust-form]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=org-adjust-error]`)),
	)
	if err != nil {
		t.Fatalf("adjust below zero: %v", err)
	}
	expectSuffix(t, admin, `[data-testid=org-adjust-error]`, "taking $99.00 would put it below zero")
	err = chromedp.Do(admin,
		chromedp.SetValue(chromedp.CSS(`#adjust-amount`), "1.50"),
		chromedp.SetValue(chromedp.CSS(`#adjust-reason`), "goodwill for the outage"),
		chromedp.Submit(chromedp.CSS(`[data-testid=org-adjust-form]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=flash]`)),
	)
	if err != nil {
		t.Fatalf("adjust: %v", err)
	}
	expectText(t, admin, `[data-testid=flash]`, "Balance adjusted. The organization sees it, with the reason, in its history.")
	screenshot(t, admin, "desktop-admin-org-balance")

	// 6. The same pages on a phone.
	if err := chromedp.Do(user, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`[data-testid=balance-history]`))); err != nil {
		t.Fatal(err)
	}
	// Newest first: today's spending (as of the day's end), the
	// adjustment, the code.
	expectText(t, user, `[data-testid=balance-history-row]:nth-child(2) td:nth-child(4)`, "goodwill for the outage")
	expectText(t, user, `[data-testid=balance-history-row]:nth-child(2) td:nth-child(3)`, "+$1.50")
	for _, p := range []struct {
		ctx              context.Context
		name, path, wait string
	}{
		{user, "dashboard-balance", "/dashboard", `[data-testid=balance]`},
		{admin, "admin-org-balance", "", `[data-testid=org-balance]`},
		{admin, "admin-redeem-codes", "/admin/redeem-codes", `[data-testid=redeem-codes-table]`},
		{admin, "admin-tiers-billing", "/admin/tiers", `[data-testid=tier-form-free]`},
	} {
		actions := []chromedp.Action[chromedp.Void]{chromedp.EmulateViewport(390, 844)}
		if p.path != "" {
			actions = append(actions, chromedp.Navigate(base+p.path))
		} else {
			actions = append(actions, chromedp.Reload())
		}
		if err := chromedp.Do(p.ctx, append(actions, chromedp.WaitVisible(chromedp.CSS(p.wait)))...); err != nil {
			t.Fatalf("phone %s: %v", p.name, err)
		}
		screenshot(t, p.ctx, "phone-"+p.name)
		fitsWidth(t, p.ctx, 390, "the "+p.name+" page")
	}
	sectionShot(t, user, "#balance", "phone-balance-section")
}
