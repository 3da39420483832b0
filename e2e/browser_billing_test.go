package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/testsync"
	"github.com/sluicehq/sluice/money"
)

// TestBrowserBillingJourney is the money side in a real browser: a user
// signs up, makes a token and calls with it; the admin, in a browser of
// their own, prices the model; the dashboard then draws the usage and shows
// the cost the API reports, to the picodollar; the user sets a budget and
// asks for premium, and the admin approves it. Screenshots of the key pages
// at desktop and phone width go to SLUICE_SCREENSHOT_DIR when it is set.
func TestBrowserBillingJourney(t *testing.T) {
	t.Parallel()
	user := browserContext(t)
	// The admin has a browser context of their own: separate cookies, so
	// both stay signed in side by side.
	admin, cancelAdmin := chromedp.NewContext(user, chromedp.WithNewBrowserContext())
	defer cancelAdmin()
	failOnCSPViolations(t, admin)
	base, _, stop := start(t, map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4", "SLUICE_ADMIN_PASSWORD": "admin-password",
		// hooks.example.com is never posted to here; allowing private
		// addresses spares the save its DNS lookup.
		"SLUICE_WEBHOOK_HOSTS": "hooks.example.com", "SLUICE_WEBHOOK_ALLOW_PRIVATE": "true"})
	defer stop()
	c := client{t, base}
	const (
		email    = "ledger@example.com"
		password = "password123"
		orgName  = "Lantern Ledger 灯笼"
		inPrice  = "400.00"  // dollars per million tokens: 0.04¢ a token,
		outPrice = "1000.00" // so a handful of calls costs whole cents
	)

	// 1. Sign up and create a token, in the browser.
	err := chromedp.Do(user,
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(base+"/signup"),
		chromedp.SendKeys(chromedp.CSS(`input[name=email]`), email),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), password),
		chromedp.SendKeys(chromedp.CSS(`input[name=organization]`), orgName),
		chromedp.Click(chromedp.CSS(`[data-testid=signup-form] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=dashboard]`)),
	)
	if err != nil {
		t.Fatalf("signup: %v", err)
	}
	expectText(t, user, `[data-testid=org-name]`, orgName)
	expectPrefix(t, user, `[data-testid=tier]`, "Free tier: burst of 30 requests") // as shown: capitalized by CSS
	expectText(t, user, `[data-testid=spend-spent]`, "$0.00")
	expectText(t, user, `#usage-cost [data-testid=chart-empty]`, "Nothing spent in this period")
	expectText(t, user, `[data-testid=plan-credit]`, "$1.00 a month")
	expectText(t, user, `[data-testid=spend-budget]`, "No monthly budget is set.")

	err = chromedp.Do(user,
		chromedp.Navigate(base+"/tokens"),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=create-token-form] input[name=name]`), "ledger-bot"),
		chromedp.Click(chromedp.CSS(`[data-testid=create-token-form] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=new-token-secret]`)),
	)
	if err != nil {
		t.Fatalf("create token: %v", err)
	}
	secret := strings.TrimSpace(text(t, user, `[data-testid=new-token-secret]`))
	if !strings.HasPrefix(secret, "sk_sluice_") {
		t.Fatalf("secret on the page %q", secret)
	}
	var session struct{ Token string }
	if r := c.call("POST", "/api/auth/login", "", `{"email":"`+email+`","password":"`+password+`"}`, &session); r.StatusCode != 200 {
		t.Fatalf("API login: %d", r.StatusCode)
	}

	// 2. Calls before any price: they cost nothing.
	calls := 0
	chat := func() (prompt, completion int64) {
		t.Helper()
		calls++
		var out struct {
			Usage struct {
				Prompt     int64 `json:"prompt_tokens"`
				Completion int64 `json:"completion_tokens"`
			}
		}
		// Distinct prompts: a repeated one could be answered from the cache.
		body := fmt.Sprintf(`{"model":"sluice-local","max_tokens":48,"messages":[{"role":"user","content":"Write spring couplet number %d about lanterns"}]}`, calls)
		if r := c.call("POST", "/v1/chat/completions", secret, body, &out); r.StatusCode != 200 || out.Usage.Prompt == 0 || out.Usage.Completion == 0 {
			t.Fatalf("call %d: %d %+v", calls, r.StatusCode, out.Usage)
		}
		return out.Usage.Prompt, out.Usage.Completion
	}
	const unpricedCalls, pricedCalls = 3, 4
	for range unpricedCalls {
		chat()
	}
	budget := func() budgetState {
		t.Helper()
		var b budgetState
		if r := c.call("GET", "/api/budget", session.Token, "", &b); r.StatusCode != 200 {
			t.Fatalf("GET /api/budget: %d", r.StatusCode)
		}
		return b
	}
	testsync.WaitFor(t, 10*time.Second, "the unpriced calls recorded", func() bool { return monthRequests(t, c, session.Token) == unpricedCalls })
	// The organization was created just now (the real clock): its first
	// month's credit is the free plan's $1.00 for the part of the month
	// left, whatever day this runs.
	freeCredit := credit(t, budget().IncludedCredit, money.Dollar)
	if b := budget(); b.Spent != "0.00" || b.MonthlyLimit != nil || b.Overage != "block" {
		t.Fatalf("budget before any price: %+v", b)
	}

	// 3. The admin prices sluice-local on the prices page.
	err = chromedp.Do(admin,
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(base+"/login"),
		chromedp.SendKeys(chromedp.CSS(`input[name=email]`), "admin@localhost"),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "admin-password"),
		chromedp.Submit(chromedp.CSS(`[data-testid=login-form]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=dashboard]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=nav-admin]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=admin-overview]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=admin-nav-prices]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=admin-prices]`)),
	)
	if err != nil {
		t.Fatalf("admin opens the prices: %v", err)
	}
	expectText(t, admin, `[data-testid=price-row][data-model=sluice-local] [data-testid=price-missing]`, "no price: costs nothing")
	expectPrefix(t, admin, `[data-testid=unpriced-alert]`, "1 model has no price: every request to them costs nothing.")
	err = chromedp.Do(admin,
		chromedp.Click(chromedp.CSS(`[data-testid=price-row][data-model=sluice-local] .actions a`)),
		chromedp.WaitVisible(chromedp.CSS(`#price-model[value=sluice-local]`)), // the row's link fills the model in
		chromedp.SendKeys(chromedp.CSS(`#price-input`), inPrice),
		chromedp.SendKeys(chromedp.CSS(`#price-output`), outPrice),
		chromedp.Submit(chromedp.CSS(`[data-testid=set-price-form]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=flash]`)),
	)
	if err != nil {
		t.Fatalf("admin sets the price: %v", err)
	}
	expectText(t, admin, `[data-testid=flash]`, "Price set. Requests from now on cost the new price; usage already metered keeps its own.")
	row := `[data-testid=price-row][data-model=sluice-local] `
	expectText(t, admin, row+`[data-testid=price-input]`, "$"+inPrice)
	expectText(t, admin, row+`[data-testid=price-output]`, "$"+outPrice)
	expectText(t, admin, row+`[data-testid=price-cached]`, "$"+inPrice) // empty: the input price
	if n := matches(t, admin, `[data-testid=unpriced-alert]`); n != 0 {
		t.Errorf("the unpriced alert is still shown after pricing the only model")
	}
	var adminSession struct{ Token string }
	c.call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &adminSession)
	var prices struct {
		Data []struct {
			Model  string `json:"model"`
			Priced bool   `json:"priced"`
			In     string `json:"input_per_mtok"`
			Out    string `json:"output_per_mtok"`
			Cached string `json:"cached_input_per_mtok"`
		}
	}
	c.call("GET", "/api/admin/prices", adminSession.Token, "", &prices)
	if got := fmt.Sprintf("%+v", prices.Data); got != "[{Model:sluice-local Priced:true In:400.00 Out:1000.00 Cached:400.00}]" {
		t.Errorf("GET /api/admin/prices after the form: %s", got)
	}
	screenshot(t, admin, "desktop-admin-prices")

	// 4. Priced calls; the cost is theirs alone, to the picodollar.
	pin, _ := money.ParsePrice(inPrice)
	pout, _ := money.ParsePrice(outPrice)
	var want money.Amount
	var prompt, completion int64
	for range pricedCalls {
		p, cpl := chat()
		prompt, completion = prompt+p, completion+cpl
		want += pin.Cost(p) + pout.Cost(cpl)
	}
	spent := want.String()
	testsync.WaitFor(t, 10*time.Second, "the priced calls recorded", func() bool {
		return monthRequests(t, c, session.Token) == unpricedCalls+pricedCalls && budget().Spent == spent
	})
	if want < 5*money.Cent {
		t.Fatalf("%d calls cost only $%s: the budget step below needs a few cents", pricedCalls, spent)
	}
	b := budget()
	if b.Reserved != "0.00" || b.IncludedCredit != freeCredit.String() {
		t.Errorf("budget after the priced calls: %+v", b)
	}
	// The credit line covers the usage up to the month's share of $1.00.
	credited := min(freeCredit.RoundCents(), want.RoundCents())
	inv := draftInvoice(t, c, session.Token)
	wantLines := fmt.Sprintf("[{usage sluice-local %d requests, in  out : 0.00} {usage sluice-local %d requests, in 400.00 out 1000.00: %s} {credit  0 requests, in  out : -%s}]",
		unpricedCalls, pricedCalls, want.StringCents(), credited.StringCents())
	if got := fmt.Sprint(inv.Lines); got != wantLines || inv.Total != (want.RoundCents()-credited).StringCents() || inv.Status != "draft" {
		t.Fatalf("the draft invoice: total %s (%s), lines\n%s\nwant\n%s", inv.Total, inv.Status, got, wantLines)
	}
	if d := inv.Lines[0].Description; d != "sluice-local (not billed)" {
		t.Errorf("the unpriced calls' line: %q", d)
	}

	err = chromedp.Do(user, chromedp.Navigate(base+"/dashboard"), chromedp.WaitVisible(chromedp.CSS(`#usage-cost svg`)))
	if err != nil {
		t.Fatalf("the dashboard with usage: %v", err)
	}
	expectText(t, user, `[data-testid=spend-spent]`, "$"+spent)
	expectText(t, user, `[data-testid=gauge-spent]`, "$"+spent)
	expectText(t, user, `[data-testid=requests-month]`, strconv.Itoa(unpricedCalls+pricedCalls))
	cost := chartOf(t, user, "usage-cost")
	if cost.Title != "Cost per day" || !strings.HasPrefix(cost.Desc, "Bar chart of 30 days") || !strings.Contains(cost.Desc, "Total $"+spent+".") {
		t.Errorf("cost chart title %q, description %q", cost.Title, cost.Desc)
	}
	if cost.Total != "$"+spent {
		t.Errorf("cost chart total %q, the API says $%s", cost.Total, spent)
	}
	if len(cost.Bars) == 0 || cost.Width < 100 || cost.Height < 100 {
		t.Errorf("cost chart drawn %vx%v px with bars %q", cost.Width, cost.Height, cost.Bars)
	} else if len(cost.Bars) == 1 && !strings.HasSuffix(cost.Bars[0], " · Cost: $"+spent) { // two only across midnight
		t.Errorf("cost bar says %q, want its cost $%s", cost.Bars[0], spent)
	}
	if len(cost.YLabels) < 2 || !strings.HasPrefix(cost.YLabels[0], "$") {
		t.Errorf("cost chart's axis %q", cost.YLabels)
	}
	requests := chartOf(t, user, "usage-requests")
	if requests.Total != strconv.Itoa(unpricedCalls+pricedCalls) || len(requests.Bars) == 0 || requests.Title != "Requests per day" {
		t.Errorf("requests chart: %+v", requests)
	}
	tokens := chartOf(t, user, "usage-tokens")
	if got := strings.Join(tokens.Legend, ","); got != "Input,Output" || len(tokens.Bars) < 2 {
		t.Errorf("tokens chart legend %q, bars %q", got, tokens.Bars)
	}
	// The invoice on the page: the early calls stay unbilled at $0.00.
	lines := invoiceLines(t, user)
	wantPage := []string{
		fmt.Sprintf("usage | sluice-local %d requests | not billed | $0.00", unpricedCalls),
		fmt.Sprintf("usage | sluice-local %d requests | at $400.00/M | $%s", pricedCalls, want.StringCents()),
	}
	// The credit line names the part of the month the free plan was in
	// force, which depends on when this runs.
	if len(lines) != 3 || strings.Join(lines[:2], "\n") != strings.Join(wantPage, "\n") ||
		!strings.HasPrefix(lines[2], "credit | included credit ($1.00 a month") || !strings.HasSuffix(lines[2], " | -$"+credited.StringCents()) {
		t.Errorf("invoice lines on the page:\n%s\nwant\n%s\nand the credit", strings.Join(lines, "\n"), strings.Join(wantPage, "\n"))
	}
	expectText(t, user, `[data-testid=draft-total]`, "$"+(want.RoundCents()-credited).StringCents())
	expectNumber(t, user, `[data-testid=invoice-line][data-kind=usage]:nth-child(2) [data-testid=line-input] .invoice-count`, prompt)
	expectNumber(t, user, `[data-testid=invoice-line][data-kind=usage]:nth-child(2) [data-testid=line-output] .invoice-count`, completion)

	// 5. A monthly budget, set in the browser: a little over 1.6 times
	// what is spent, so the half-way banner shows.
	limit := ((want*16/10 + money.Cent - 1) / money.Cent * money.Cent).String()
	err = chromedp.Do(user,
		chromedp.SetValue(chromedp.CSS(`#budget-limit`), limit),
		chromedp.Submit(chromedp.CSS(`[data-testid=budget-form]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=budget-settings] [data-testid=flash]`)),
	)
	if err != nil {
		t.Fatalf("set a budget: %v", err)
	}
	expectText(t, user, `[data-testid=budget-settings] [data-testid=flash]`, "Budget saved. It applies from the next request.")
	if v, err := chromedp.Run(user, chromedp.Value(chromedp.CSS(`#budget-limit`))); err != nil || v != limit {
		t.Errorf("budget field after saving %q (%v), want %q", v, err, limit)
	}
	expectText(t, user, `[data-testid=spend-budget]`, "Monthly budget $"+limit+", with a hard stop: requests that would pass it are refused.")
	expectText(t, user, `[data-testid=gauge-budget]`, "$"+limit)
	b = budget()
	if b.MonthlyLimit == nil || *b.MonthlyLimit != limit || !b.HardStop || b.Spent != spent {
		t.Fatalf("GET /api/budget after the form: %+v", b)
	}
	resets := b.PeriodEnd.UTC().Format("Jan 2, 2006 15:04") + " UTC"
	expectText(t, user, `[data-testid=spend-resets]`, resets)
	expectText(t, user, `[data-testid=budget-banner]`,
		"Half of the budget reached. You have spent $"+spent+" of your $"+limit+" monthly budget; it resets on "+resets+".")
	if p, err := chromedp.Run(user, chromedp.AttributeValue(chromedp.CSS(`[data-testid=budget-banner]`), "data-percent")); err != nil || p.Value != "50" {
		t.Errorf("banner percent %+v %v", p, err)
	}
	screenshot(t, user, "desktop-billing")
	sectionShot(t, user, "#usage", "desktop-billing-usage")

	// 6. Premium: the user asks, the admin approves, the page follows.
	const note = "More room for the lantern festival"
	err = chromedp.Do(user,
		chromedp.SetValue(chromedp.CSS(`#upgrade-tier`), "premium"),
		chromedp.SendKeys(chromedp.CSS(`#upgrade-note`), note),
		chromedp.Submit(chromedp.CSS(`[data-testid=upgrade-form]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=upgrade-pending]`)),
	)
	if err != nil {
		t.Fatalf("request an upgrade: %v", err)
	}
	expectText(t, user, `[data-testid=upgrade] [data-testid=flash]`, "Upgrade requested. An admin will answer it.")
	expectPrefix(t, user, `[data-testid=upgrade-pending]`, "You asked to move from Free to Premium on ")
	expectText(t, user, `[data-testid=upgrade-pending-tier]`, "Premium")
	expectSuffix(t, user, `[data-testid=upgrade-pending]`, "The request is pending: an admin will answer it. Your note: “"+note+"”")
	var ups struct {
		Data []struct {
			ID     int64  `json:"id"`
			From   string `json:"from_tier"`
			To     string `json:"to_tier"`
			Note   string `json:"note"`
			Status string `json:"status"`
		}
	}
	c.call("GET", "/api/upgrade-requests", session.Token, "", &ups)
	if len(ups.Data) != 1 || ups.Data[0].From != "free" || ups.Data[0].To != "premium" || ups.Data[0].Note != note || ups.Data[0].Status != "pending" {
		t.Fatalf("GET /api/upgrade-requests: %+v", ups.Data)
	}
	request := fmt.Sprintf(`[data-testid=upgrade-row][data-request-id="%d"] `, ups.Data[0].ID)
	err = chromedp.Do(admin,
		chromedp.Click(chromedp.CSS(`[data-testid=admin-nav-organizations]`)),
		chromedp.WaitVisible(chromedp.CSS(request)),
	)
	if err != nil {
		t.Fatalf("the admin finds the request: %v", err)
	}
	expectText(t, admin, request+`[data-testid=upgrade-change]`, "free → premium")
	expectText(t, admin, request+`.admin-request-org`, orgName)
	expectText(t, admin, request+`.admin-note`, note)
	err = chromedp.Do(admin,
		chromedp.Click(chromedp.CSS(request+`[data-testid=approve-upgrade] button`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=admin-org] [data-testid=org-tier]`)),
	)
	if err != nil {
		t.Fatalf("the admin approves: %v", err)
	}
	expectText(t, admin, `[data-testid=flash]`, "Upgrade approved: the organization is on its new tier from its next request.")
	expectText(t, admin, `[data-testid=org-title]`, orgName)
	expectText(t, admin, `[data-testid=org-tier]`, "Premium") // tier names are capitalized by the style sheet
	expectText(t, admin, `[data-testid=org-spend]`, "$"+spent)
	if n := matches(t, admin, `[data-testid=org-upgrade]`); n != 0 {
		t.Errorf("the decided request is still offered on the organization's page")
	}
	screenshot(t, admin, "desktop-admin-upgrade-approved")

	err = chromedp.Do(user, chromedp.Navigate(base+"/dashboard"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=upgrade-last]`)))
	if err != nil {
		t.Fatalf("the dashboard after the approval: %v", err)
	}
	expectPrefix(t, user, `[data-testid=tier]`, "Premium tier: burst of 200 requests, refills 5 per second")
	expectPrefix(t, user, `[data-testid=upgrade-last]`, "Your request to move to Premium was approved on ")
	expectText(t, user, `[data-testid=plan-fee]`, "$49.00")
	expectText(t, user, `[data-testid=plan-credit]`, "$10.00 a month")
	expectText(t, user, `[data-testid=plan-overage]`, "usage is billed on the invoice")
	// This month's credit: the free plan's share until the approval, the
	// premium plan's from then on.
	monthCredit := credit(t, budget().IncludedCredit, 10*money.Dollar)
	if monthCredit == 10*money.Dollar {
		expectText(t, user, `[data-testid=spend-credit]`, "The Premium plan includes $10.00 of usage a month; usage past it is billed on the invoice.")
	} else {
		expectText(t, user, `[data-testid=spend-credit]`, "The Premium plan includes $10.00 of usage a month; this month, prorated, $"+
			monthCredit.String()+"; usage past it is billed on the invoice.")
	}
	expectText(t, user, `[data-testid=spend-spent]`, "$"+spent) // the month's spending goes with the organization
	if b := budget(); b.Overage != "bill" || b.Spent != spent || b.MonthlyLimit == nil || *b.MonthlyLimit != limit || monthCredit <= freeCredit {
		t.Errorf("GET /api/budget after the upgrade: %+v (the free plan's credit was %s)", b, freeCredit)
	}
	screenshot(t, user, "desktop-billing-premium")

	// 7. The same pages on a phone: nothing wider than the screen.
	for _, p := range []struct {
		ctx        context.Context
		name, wait string
	}{
		{user, "billing", `[data-testid=dashboard]`},
		{admin, "admin-upgrade-approved", `[data-testid=admin-org]`},
	} {
		if err := chromedp.Do(p.ctx, chromedp.EmulateViewport(390, 844), chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(p.wait))); err != nil {
			t.Fatalf("phone %s: %v", p.name, err)
		}
		screenshot(t, p.ctx, "phone-"+p.name)
		fitsWidth(t, p.ctx, 390, "the "+p.name+" page")
	}
	if got := chartOf(t, user, "usage-cost"); got.Total != "$"+spent || len(got.Bars) == 0 || got.Width > 390 || got.Width < 200 {
		t.Errorf("cost chart on a phone: %vpx wide, total %q, %d bars", got.Width, got.Total, len(got.Bars))
	}
	sectionShot(t, user, "#usage", "phone-billing-usage")
	if err := chromedp.Do(admin, chromedp.Navigate(base+"/admin/prices"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=prices-table]`))); err != nil {
		t.Fatal(err)
	}
	expectText(t, admin, row+`[data-testid=price-output]`, "$"+outPrice)
	screenshot(t, admin, "phone-admin-prices")
	fitsWidth(t, admin, 390, "the prices page")

	// 8. A budget alert webhook, set on the phone: its signing secret is
	// shown once, with the headers to check it by (not request signing's).
	err = chromedp.Do(user,
		chromedp.SetValue(chromedp.CSS(`#webhook-url`), "https://hooks.example.com/sluice"),
		chromedp.Submit(chromedp.CSS(`[data-testid=webhook-form]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=webhook-secret]`)),
	)
	if err != nil {
		t.Fatalf("set a webhook: %v", err)
	}
	expectText(t, user, `[data-testid=webhook-settings] [data-testid=flash]`, "Webhook saved. Budget alerts will be posted to it, signed with the secret below.")
	expectText(t, user, `[data-testid=webhook-secret] .hint`, "Check each alert with it: its X-Sluice-Webhook-Signature header is sha256= and the hex "+
		"HMAC-SHA256, under this secret, of the X-Sluice-Webhook-Timestamp header, a dot and the body.")
	fitsWidth(t, user, 390, "the webhook's signing secret")
	sectionShot(t, user, `[data-testid=webhook-settings]`, "phone-billing-webhook")
	if err := chromedp.Do(user, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatal(err)
	}
	sectionShot(t, user, `[data-testid=webhook-settings]`, "desktop-billing-webhook")
}

// credit reads GET /api/budget's included_credit: a plan's monthly credit
// prorated over the part of the month it was in force, so above zero and
// at most the whole month's.
func credit(t *testing.T, s string, month money.Amount) money.Amount {
	t.Helper()
	a, err := money.ParseAmount(s)
	if err != nil || a <= 0 || a > month {
		t.Fatalf("included_credit %q (%v), want a share of %s", s, err, month)
	}
	return a
}

// budgetState is GET /api/budget.
type budgetState struct {
	MonthlyLimit   *string   `json:"monthly_limit"`
	HardStop       bool      `json:"hard_stop"`
	Spent          string    `json:"spent"`
	Reserved       string    `json:"reserved"`
	PeriodEnd      time.Time `json:"period_end"`
	IncludedCredit string    `json:"included_credit"`
	Overage        string    `json:"overage"`
}

// monthRequests is this month's request count from GET /api/usage.
func monthRequests(t *testing.T, c client, session string) int {
	t.Helper()
	var u struct {
		Month struct {
			Requests int `json:"requests"`
		} `json:"month"`
	}
	c.call("GET", "/api/usage", session, "", &u)
	return u.Month.Requests
}

// invoiceLine is what the billing test compares of an invoice's line.
type invoiceLine struct {
	Kind     string `json:"kind"`
	Model    string `json:"model"`
	Requests int64  `json:"requests"`
	In       string `json:"input_per_mtok"`
	Out      string `json:"output_per_mtok"`
	Amount   string `json:"amount"`
	// Description is left out of the comparison: a priced line's names
	// the time the price took effect.
	Description string `json:"description"`
}

func (l invoiceLine) String() string {
	return fmt.Sprintf("{%s %s %d requests, in %s out %s: %s}", l.Kind, l.Model, l.Requests, l.In, l.Out, l.Amount)
}

// draftInvoice is this month's draft from GET /api/invoices/{id}.
func draftInvoice(t *testing.T, c client, session string) (inv struct {
	ID     int64 `json:"id"`
	Status string
	Total  string
	Lines  []invoiceLine
}) {
	t.Helper()
	var list struct {
		Data []struct {
			ID     int64 `json:"id"`
			Status string
		}
	}
	c.call("GET", "/api/invoices", session, "", &list)
	if len(list.Data) != 1 || list.Data[0].Status != "draft" {
		t.Fatalf("GET /api/invoices: %+v", list.Data)
	}
	c.call("GET", fmt.Sprintf("/api/invoices/%d", list.Data[0].ID), session, "", &inv)
	return inv
}

// svgChart is what a page's server-drawn SVG chart shows.
type svgChart struct {
	Title   string   `json:"title"`   // the SVG's <title>
	Desc    string   `json:"desc"`    // its <desc>
	Bars    []string `json:"bars"`    // each bar's tooltip (<title>)
	YLabels []string `json:"ylabels"` // the axis, top to bottom
	Legend  []string `json:"legend"`
	Total   string   `json:"total"` // the first total in the table's footer
	Width   float64  `json:"width"` // of the drawn SVG, in CSS pixels
	Height  float64  `json:"height"`
}

// chartOf reads the chart figure with id from the page.
func chartOf(t *testing.T, ctx context.Context, id string) svgChart {
	t.Helper()
	got, err := chromedp.Run(ctx, chromedp.Evaluate[svgChart](`(() => {
		const f = document.getElementById(`+strconv.Quote(id)+`), svg = f && f.querySelector("svg.chart-plot");
		if (!svg) return {};
		const r = svg.getBoundingClientRect(), txt = e => e ? e.textContent.trim() : "";
		return {
			title: txt(svg.querySelector(":scope > title")), desc: txt(svg.querySelector(":scope > desc")),
			bars: [...svg.querySelectorAll("rect.chart-bar")].filter(b => +b.getAttribute("height") > 0).map(b => txt(b.querySelector("title"))),
			ylabels: [...f.querySelectorAll(".chart-y span")].map(txt),
			legend: [...f.querySelectorAll("[data-testid=chart-legend] li")].map(txt),
			total: txt(f.querySelector("tfoot td")), width: r.width, height: r.height,
		};
	})()`))
	if err != nil {
		t.Fatalf("chart %s: %v", id, err)
	}
	if got.Title == "" {
		t.Fatalf("no SVG chart #%s on the page", id)
	}
	return got
}

// invoiceLines are the draft invoice's lines as the page shows them:
// kind | item | input tokens' price | amount.
func invoiceLines(t *testing.T, ctx context.Context) []string {
	t.Helper()
	got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("[data-testid=draft-invoice] [data-testid=invoice-line]")].map(tr => {
		const txt = sel => { const e = tr.querySelector(sel); return e ? e.textContent.replace(/\s+/g, " ").trim() : ""; };
		return [tr.dataset.kind, txt(".invoice-item"), txt("[data-testid=line-input] .invoice-price"), txt("[data-testid=line-amount]")].join(" | ");
	})`))
	if err != nil {
		t.Fatalf("invoice lines: %v", err)
	}
	for i, l := range got {
		got[i] = strings.ReplaceAll(l, "|  |", "| |")
	}
	return got
}

// words is s with its runs of white space made single spaces.
func words(s string) string { return strings.Join(strings.Fields(s), " ") }

func expectText(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	if got := words(text(t, ctx, sel)); got != want {
		t.Errorf("%s says %q, want %q", sel, got, want)
	}
}

func expectPrefix(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	if got := words(text(t, ctx, sel)); !strings.HasPrefix(got, want) {
		t.Errorf("%s says %q, want it to start %q", sel, got, want)
	}
}

func expectSuffix(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	if got := words(text(t, ctx, sel)); !strings.HasSuffix(got, want) {
		t.Errorf("%s says %q, want it to end %q", sel, got, want)
	}
}

// expectNumber checks a count the page writes with thousands separators.
func expectNumber(t *testing.T, ctx context.Context, sel string, want int64) {
	t.Helper()
	got := strings.NewReplacer(",", "", " ", "").Replace(words(text(t, ctx, sel)))
	if got != strconv.FormatInt(want, 10) {
		t.Errorf("%s says %q, want %d", sel, got, want)
	}
}

// matches is how many elements match sel, without waiting for any.
func matches(t *testing.T, ctx context.Context, sel string) int {
	t.Helper()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(`+strconv.Quote(sel)+`).length`))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// sectionShot saves a PNG of one element of the page, like screenshot.
func sectionShot(t *testing.T, ctx context.Context, sel, name string) {
	t.Helper()
	dir := os.Getenv("SLUICE_SCREENSHOT_DIR")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}
