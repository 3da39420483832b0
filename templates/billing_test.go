package templates

import (
	"fmt"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
)

// text is the whitespace-collapsed text of s.
func text(s *goquery.Selection) string { return strings.Join(strings.Fields(s.Text()), " ") }

// cells is the text of each of s's children matching sel, joined by spaces.
func cells(s *goquery.Selection, sel string) string {
	var out []string
	s.Find(sel).Each(func(_ int, c *goquery.Selection) { out = append(out, text(c)) })
	return strings.Join(out, " ")
}

// sampleBilling is a premium organization's money side: a budget at 82%,
// a draft invoice with a fee, usage at two prices and the credit, one past
// invoice and an owner's settings.
func sampleBilling() *BillingView {
	day := Chart{ID: "usage-requests", Title: "Requests per day", Unit: "requests", BucketName: "Day",
		Buckets: []string{"Mar 14", "Mar 15"}, Series: []Series{{Name: "Requests", Values: []float64{3, 5}}}}
	return &BillingView{
		Usage: UsageView{
			Ranges: []UsageLink{{Label: "Last 30 days", URL: "/dashboard?by=none&range=30d#usage", Current: true, TestID: "range-30d"},
				{Label: "Last 48 hours", URL: "/dashboard?by=none&range=48h#usage", TestID: "range-48h"}},
			Groupings: []UsageLink{{Label: "Total", URL: "/dashboard?by=none&range=30d#usage", Current: true, TestID: "by-none"},
				{Label: "By model", URL: "/dashboard?by=model&range=30d#usage", TestID: "by-model"}},
			Period:   "Last 30 days, Feb 14 to Mar 15, days in Asia/Shanghai",
			Requests: day,
			Tokens:   Chart{ID: "usage-tokens", Title: "Tokens per day", Buckets: day.Buckets},
			Rejections: Chart{ID: "usage-rejections", Title: "Rejected requests per day", Buckets: day.Buckets,
				Empty: "No rejections in this period"},
			Cost: Chart{ID: "usage-cost", Title: "Cost per day", Kind: ValueMoney, Buckets: day.Buckets,
				Series: []Series{{Name: "Cost", Values: []float64{0.25, 0.000761}, Labels: []string{"$0.25", "$0.000761"}}}},
		},
		Spend: SpendView{
			Gauge: Gauge{ID: "spend-gauge", Title: "Spend this month", Spent: 8.2, Credit: 10, Budget: 10, SpentLabel: "$8.20", CreditLabel: "$10.00", BudgetLabel: "$10.00"},
			Spent: "$8.20", Reserved: "$0.05", Credit: "$10.00", Budget: "$10.00", HardStop: true, Overage: "bill", TierName: "premium",
			Resets: "Apr 1, 2027 08:00 Asia/Shanghai",
			Banner: &BudgetBanner{Percent: 80, Spent: "$8.20", Budget: "$10.00", HardStop: true, Resets: "Apr 1, 2027 08:00 Asia/Shanghai"},
		},
		Invoices: InvoicesView{
			Draft: &InvoiceView{ID: 7, Period: "March 2027", Status: "draft", Total: "$49.35", CSVURL: "/invoices/7/csv", Lines: []InvoiceLineRow{
				{Kind: "fee", Description: "premium plan, March 2027", Amount: "$49.00"},
				{Kind: "usage", Model: "gpt-4o", Requests: 1200, Input: 1_200_000, Output: 300_000, Cached: 100_000,
					InputPrice: "$2.50", OutputPrice: "$10.00", CachedPrice: "$1.25", Amount: "$6.12"},
				{Kind: "usage", Model: "sluice-local", Requests: 3, Input: 30, Output: 12, Amount: "$0.00"},
				{Kind: "credit", Description: "included credit (10.00 a month)", Amount: "-$5.77"},
			}},
			Past: []InvoiceRow{{ID: 3, Period: "February 2027", Status: "final", Total: "$52.10", CSVURL: "/invoices/3/csv"}},
		},
		Settings: SettingsView{CanEdit: true, Budget: BudgetForm{MonthlyLimit: "10.00", HardStop: true}, TimeZone: "Asia/Shanghai",
			WebhookURL: "https://hooks.example.com/sluice"},
		Plan: PlanView{TierName: "premium", Fee: "$49.00", Credit: "$10.00", Overage: "bill",
			Tiers: []TierOption{{Name: "free", Summary: "no monthly fee"}, {Name: "enterprise", Summary: "$499.00 a month"}}},
	}
}

func renderDashboard(t *testing.T, b *BillingView) (*goquery.Document, string) {
	t.Helper()
	return render(t, Dashboard(Page{Title: "Dashboard", User: member()}, DashboardView{OrgName: "Acme", TierName: "premium", Billing: b}))
}

func TestDashboardBillingSections(t *testing.T) {
	sections := []string{"section-nav", "spend", "usage", "invoices", "settings", "plan"}
	t.Run("without billing", func(t *testing.T) {
		doc, _ := renderDashboard(t, nil)
		for _, id := range sections {
			if byTestID(doc, id).Length() != 0 {
				t.Errorf("%s shown without a billing view", id)
			}
		}
	})
	t.Run("with billing", func(t *testing.T) {
		doc, html := renderDashboard(t, sampleBilling())
		assertCSPSafe(t, html)
		for _, id := range sections {
			if byTestID(doc, id).Length() != 1 {
				t.Errorf("%s: found %d, want 1", id, byTestID(doc, id).Length())
			}
		}
		// The section links land on sections that exist, and no id repeats.
		byTestID(doc, "section-nav").Find("a").Each(func(_ int, a *goquery.Selection) {
			if id := strings.TrimPrefix(attr(a, "href"), "#"); doc.Find("#"+id).Length() != 1 {
				t.Errorf("section link %q has no target", attr(a, "href"))
			}
		})
		ids := map[string]bool{}
		doc.Find("[id]").Each(func(_ int, s *goquery.Selection) {
			if id := attr(s, "id"); ids[id] {
				t.Errorf("duplicate id %q", id)
			} else {
				ids[id] = true
			}
		})
		if n := byTestID(doc, "usage").Find(`[data-testid="chart"]`).Length(); n != 4 {
			t.Errorf("usage charts = %d, want requests, tokens, rejections and cost", n)
		}
		if got := text(byTestID(doc, "usage-period")); got != "Last 30 days, Feb 14 to Mar 15, days in Asia/Shanghai" {
			t.Errorf("usage period = %q", got)
		}
	})
}

// TestBudgetBanner shows the highest threshold reached, worded for it.
func TestBudgetBanner(t *testing.T) {
	const resets = "Apr 1, 2027 08:00 Asia/Shanghai"
	tests := []struct {
		name     string
		banner   *BudgetBanner
		class    string
		role     string
		contains []string
		absent   []string
	}{
		{name: "none"},
		{name: "50%", banner: &BudgetBanner{Percent: 50, Spent: "$5.00", Budget: "$10.00", HardStop: true, Resets: resets},
			class: "notice-info", role: "status",
			contains: []string{"Half of the budget reached.", "You have spent $5.00 of your $10.00 monthly budget; it resets on " + resets + "."},
			absent:   []string{"refused"}},
		{name: "80% hard stop", banner: &BudgetBanner{Percent: 80, Spent: "$8.00", Budget: "$10.00", HardStop: true, Resets: resets},
			class: "notice-warning", role: "status",
			contains: []string{"80% of the budget reached.", "$8.00 of your $10.00", "Requests that would take spending past it are refused until " + resets + "."}},
		{name: "80% alerts only", banner: &BudgetBanner{Percent: 80, Spent: "$8.00", Budget: "$10.00", Resets: resets},
			class: "notice-warning", role: "status",
			contains: []string{"80% of the budget reached.", "Hard stop is off: requests continue past the budget."},
			absent:   []string{"refused"}},
		{name: "100% hard stop", banner: &BudgetBanner{Percent: 100, Spent: "$10.000001", Budget: "$10.00", HardStop: true, Resets: resets},
			class: "notice-error", role: "alert",
			contains: []string{"Budget reached.", "You have spent $10.000001 of your $10.00 monthly budget, so API requests are refused until " + resets + ".",
				"Raise or remove the budget"}},
		{name: "100% alerts only", banner: &BudgetBanner{Percent: 100, Spent: "$12.00", Budget: "$10.00", Resets: resets},
			class: "notice-error", role: "alert",
			contains: []string{"Budget reached.", "Hard stop is off, so requests are still served"},
			absent:   []string{"refused"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := sampleBilling()
			b.Spend.Banner = tt.banner
			doc, _ := renderDashboard(t, b)
			banner := byTestID(doc, "budget-banner")
			if tt.banner == nil {
				if banner.Length() != 0 {
					t.Fatalf("banner without a threshold: %s", outer(banner))
				}
				return
			}
			if banner.Length() != 1 {
				t.Fatalf("banners = %d, want 1", banner.Length())
			}
			if !banner.HasClass("notice") || !banner.HasClass(tt.class) || attr(banner, "role") != tt.role {
				t.Errorf("banner class %q role %q, want %s and %s", attr(banner, "class"), attr(banner, "role"), tt.class, tt.role)
			}
			if got := attr(banner, "data-percent"); got != fmt.Sprint(tt.banner.Percent) {
				t.Errorf("data-percent = %q", got)
			}
			got := text(banner)
			for _, want := range tt.contains {
				if !strings.Contains(got, want) {
					t.Errorf("banner = %q\nwant it to contain %q", got, want)
				}
			}
			for _, bad := range tt.absent {
				if strings.Contains(got, bad) {
					t.Errorf("banner = %q, must not say %q", got, bad)
				}
			}
		})
	}
}

func TestSpendCard(t *testing.T) {
	t.Run("budget, credit and reservation", func(t *testing.T) {
		doc, _ := renderDashboard(t, sampleBilling())
		spend := byTestID(doc, "spend")
		if spend.Find(`[data-testid="gauge"]`).Length() != 1 {
			t.Fatal("no gauge in the spend card")
		}
		if got := attr(byTestID(doc, "gauge"), "data-state"); got != "warn" {
			t.Errorf("gauge state = %q, want warn at 82%%", got)
		}
		for id, want := range map[string]string{
			"gauge-spent": "$8.20", "gauge-credit": "$10.00", "gauge-budget": "$10.00",
			"spend-spent": "$8.20", "spend-reserved": "$0.05", "spend-resets": "Apr 1, 2027 08:00 Asia/Shanghai",
			"spend-credit": "The premium plan includes $10.00 of usage a month; usage past it is billed on the invoice.",
			"spend-budget": "Monthly budget $10.00, with a hard stop: requests that would pass it are refused.",
		} {
			if got := text(byTestID(doc, id)); got != want {
				t.Errorf("%s = %q, want %q", id, got, want)
			}
		}
	})
	t.Run("nothing reserved, no budget, credit that blocks", func(t *testing.T) {
		b := sampleBilling()
		b.Spend = SpendView{Gauge: Gauge{Title: "Spend this month", Spent: 1.2, Credit: 1, SpentLabel: "$1.20", CreditLabel: "$1.00"},
			Spent: "$1.20", Credit: "$1.00", Overage: "block", TierName: "free", Resets: "Apr 1, 2027 00:00 UTC", CreditUsedUp: true}
		doc, _ := renderDashboard(t, b)
		if byTestID(doc, "spend-reserved").Length() != 0 {
			t.Error("nothing reserved, yet a reservation is mentioned")
		}
		if got := text(byTestID(doc, "spend-budget")); got != "No monthly budget is set." {
			t.Errorf("spend-budget = %q", got)
		}
		if got := text(byTestID(doc, "spend-credit")); !strings.Contains(got, "past it, requests to priced models are refused") {
			t.Errorf("spend-credit = %q", got)
		}
		if byTestID(doc, "budget-banner").Length() != 0 {
			t.Error("budget banner without a budget")
		}
		credit := byTestID(doc, "credit-banner")
		want := "Included credit used up. The free tier's $1.00 of included credit for this month is spent, so requests to priced models are refused until Apr 1, 2027 00:00 UTC. Request an upgrade to keep going."
		if got := text(credit); got != want {
			t.Errorf("credit banner = %q\nwant %q", got, want)
		}
		if attr(credit.Find("a"), "href") != "#plan" {
			t.Errorf("credit banner links to %q, want #plan", attr(credit.Find("a"), "href"))
		}
	})
}

func TestUsageSwitches(t *testing.T) {
	doc, _ := renderDashboard(t, sampleBilling())
	for id, want := range map[string]struct {
		href    string
		current bool
	}{
		"range-30d": {"/dashboard?by=none&range=30d#usage", true},
		"range-48h": {"/dashboard?by=none&range=48h#usage", false},
		"by-none":   {"/dashboard?by=none&range=30d#usage", true},
		"by-model":  {"/dashboard?by=model&range=30d#usage", false},
	} {
		a := byTestID(doc, id)
		if !a.Is("a") || attr(a, "href") != want.href {
			t.Errorf("%s = %s, want a link to %s", id, outer(a), want.href)
		}
		if cur := attr(a, "aria-current") == "true"; cur != want.current || a.HasClass("switch-current") != want.current {
			t.Errorf("%s current = %v, want %v", id, cur, want.current)
		}
	}
	if byTestID(doc, "usage").Find("form, script").Length() != 0 {
		t.Error("the switches must be plain links")
	}
	// A chart without usage says so; one with usage has its table.
	rej := byTestID(doc, "usage").Find("#usage-rejections")
	if got := text(rej.Find(`[data-testid="chart-empty"]`)); got != "No rejections in this period" {
		t.Errorf("empty rejections chart = %q", got)
	}
	cost := byTestID(doc, "usage").Find("#usage-cost")
	if got := cells(cost.Find("tbody tr").Last(), "th, td"); got != "Mar 15 $0.000761" {
		t.Errorf("cost row = %q, want the exact label", got)
	}
	if got := text(byTestID(doc, "usage-folded")); got != "" {
		t.Errorf("folded note without folding: %q", got)
	}
	b := sampleBilling()
	b.Usage.Folded = 3
	doc, _ = renderDashboard(t, b)
	if got := text(byTestID(doc, "usage-folded")); got != "The smallest 3 series are added up as “Other”." {
		t.Errorf("folded note = %q", got)
	}
}

func TestInvoicesCard(t *testing.T) {
	doc, _ := renderDashboard(t, sampleBilling())
	draft := byTestID(doc, "draft-invoice")
	if got := text(draft.Find("h3")); got != "March 2027 draft" {
		t.Errorf("draft heading = %q", got)
	}
	if a := byTestID(doc, "draft-csv"); attr(a, "href") != "/invoices/7/csv" {
		t.Errorf("draft CSV link = %s", outer(a))
	}
	type line struct{ kind, item, input, output, cached, amount string }
	var got []line
	draft.Find(`[data-testid="invoice-line"]`).Each(func(_ int, tr *goquery.Selection) {
		got = append(got, line{attr(tr, "data-kind"), text(tr.Find("th")), text(tr.Find(`[data-testid="line-input"]`)),
			text(tr.Find(`[data-testid="line-output"]`)), text(tr.Find(`[data-testid="line-cached"]`)), text(tr.Find(`[data-testid="line-amount"]`))})
	})
	want := []line{
		{"fee", "premium plan, March 2027", "", "", "", "$49.00"},
		{"usage", "gpt-4o 1,200 requests", "1,200,000 at $2.50/M", "300,000 at $10.00/M", "100,000 at $1.25/M", "$6.12"},
		{"usage", "sluice-local 3 requests", "30 not billed", "12 not billed", "0 not billed", "$0.00"},
		{"credit", "included credit (10.00 a month)", "", "", "", "-$5.77"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("lines =\n%q\nwant\n%q", got, want)
	}
	if got := text(byTestID(doc, "draft-total")); got != "$49.35" {
		t.Errorf("total = %q", got)
	}
	// On a phone each figure is labelled by its column.
	draft.Find(`tbody td.num`).Each(func(_ int, td *goquery.Selection) {
		if attr(td, "data-label") == "" {
			t.Errorf("cell without data-label: %s", outer(td))
		}
	})
	row := byTestID(doc, "invoice-row")
	if row.Length() != 1 || attr(row, "data-invoice-id") != "3" || text(row.Find(`[data-testid="invoice-total"]`)) != "$52.10" ||
		attr(row.Find(`[data-testid="invoice-csv"]`), "href") != "/invoices/3/csv" {
		t.Errorf("past invoice = %s", outer(row))
	}

	b := sampleBilling()
	b.Invoices = InvoicesView{Draft: &InvoiceView{ID: 1, Period: "March 2027", Status: "draft", Total: "$0.00", CSVURL: "/invoices/1/csv"}}
	doc, _ = renderDashboard(t, b)
	for _, id := range []string{"draft-empty", "past-invoices-empty"} {
		if byTestID(doc, id).Length() != 1 {
			t.Errorf("%s missing from an empty invoice list", id)
		}
	}
	if doc.Find("table.invoice-lines").Length() != 0 {
		t.Error("an empty draft has a table")
	}
}

func TestBillingSettings(t *testing.T) {
	t.Run("owner", func(t *testing.T) {
		doc, html := renderDashboard(t, sampleBilling())
		assertCSPSafe(t, html)
		forms := map[string]struct {
			action string
			fields map[string]string // name -> value
		}{
			"budget-form":    {"/billing/budget#budget", map[string]string{"monthly_limit": "10.00", "hard_stop": "on"}},
			"time-zone-form": {"/billing/time-zone#time-zone", map[string]string{"time_zone": "Asia/Shanghai"}},
			"webhook-form":   {"/billing/webhook#webhook", map[string]string{"webhook_url": "https://hooks.example.com/sluice"}},
			"upgrade-form":   {"/billing/upgrade#upgrade", map[string]string{"tier": "", "note": ""}},
		}
		for id, want := range forms {
			f := byTestID(doc, id)
			if !f.Is("form") || attr(f, "method") != "post" || attr(f, "action") != want.action {
				t.Errorf("%s = %s, want a POST form to %s", id, outer(f), want.action)
				continue
			}
			for name, value := range want.fields {
				in := f.Find(fmt.Sprintf(`[name=%q]`, name))
				if in.Length() != 1 {
					t.Errorf("%s: field %s found %d times", id, name, in.Length())
					continue
				}
				if in.Is("input") && attr(in, "type") != "checkbox" && attr(in, "value") != value {
					t.Errorf("%s: %s = %q, want %q", id, name, attr(in, "value"), value)
				}
			}
		}
		if _, ok := byTestID(doc, "budget-form").Find(`input[name="hard_stop"]`).Attr("checked"); !ok {
			t.Error("hard stop not checked")
		}
		if byTestID(doc, "settings-readonly").Length() != 0 || byTestID(doc, "webhook-secret").Length() != 0 {
			t.Error("owner sees the read-only note or a secret nobody just made")
		}
		// Every control is named by a label.
		doc.Find("#settings, #plan").Find("input, select, textarea").Each(func(_ int, s *goquery.Selection) {
			id := attr(s, "id")
			if id == "" || doc.Find(fmt.Sprintf(`label[for=%q]`, id)).Length() != 1 {
				t.Errorf("control without a label: %s", outer(s))
			}
		})
		if n := doc.Find("#time-zone-list option").Length(); n < 10 {
			t.Errorf("time zone suggestions = %d", n)
		}
	})
	t.Run("member", func(t *testing.T) {
		b := sampleBilling()
		b.Settings.CanEdit = false
		doc, _ := renderDashboard(t, b)
		for _, id := range []string{"budget-form", "time-zone-form", "webhook-form"} {
			if byTestID(doc, id).Length() != 0 {
				t.Errorf("member sees %s", id)
			}
		}
		if got := cells(byTestID(doc, "budget-readonly"), "dt, dd"); got != "Limit $10.00 Hard stop on" {
			t.Errorf("budget-readonly = %q", got)
		}
		for id, want := range map[string]string{
			"settings-readonly":  "Only the organization's owners can change these settings.",
			"time-zone-readonly": "Days are counted in Asia/Shanghai.",
			"webhook-readonly":   "Budget alerts are also posted to a webhook.",
		} {
			if got := text(byTestID(doc, id)); got != want {
				t.Errorf("%s = %q, want %q", id, got, want)
			}
		}
		if strings.Contains(doc.Text(), "hooks.example.com") {
			t.Error("members see the webhook URL")
		}
		// Anyone in the organization may ask for an upgrade.
		if byTestID(doc, "upgrade-form").Length() != 1 {
			t.Error("member has no upgrade form")
		}
	})
	t.Run("new webhook secret", func(t *testing.T) {
		b := sampleBilling()
		b.Settings.WebhookSecret = "whsec_abc123"
		b.Notice = FormNotice{Form: FormWebhook, Flash: "Webhook saved."}
		doc, _ := renderDashboard(t, b)
		if got := text(byTestID(doc, "webhook-secret-value")); got != "whsec_abc123" {
			t.Errorf("secret = %q", got)
		}
		if !byTestID(doc, "webhook-settings").Find(`[data-testid="flash"]`).Is("[role=status]") {
			t.Error("the flash is not beside the webhook form")
		}
	})
}

// TestFormNoticeBesideItsForm puts a form's outcome next to that form only.
func TestFormNoticeBesideItsForm(t *testing.T) {
	for _, form := range []string{FormBudget, FormTimeZone, FormWebhook, FormUpgrade} {
		t.Run(form, func(t *testing.T) {
			b := sampleBilling()
			b.Notice = FormNotice{Form: form, Error: "That did not work."}
			doc, _ := renderDashboard(t, b)
			errs := byTestID(doc, "form-error")
			if errs.Length() != 1 || text(errs) != "That did not work." || attr(errs, "role") != "alert" {
				t.Fatalf("form errors = %d: %q", errs.Length(), text(errs))
			}
			if errs.Closest("#"+form).Length() != 1 {
				t.Errorf("the error is not inside #%s", form)
			}
		})
	}
}

func TestUpgradeRequest(t *testing.T) {
	t.Run("form", func(t *testing.T) {
		b := sampleBilling()
		b.Plan.Form = UpgradeForm{Tier: "enterprise", Note: "more <b>burst</b>"}
		doc, _ := renderDashboard(t, b)
		var opts []string
		byTestID(doc, "upgrade-form").Find("option").Each(func(_ int, o *goquery.Selection) {
			_, sel := o.Attr("selected")
			opts = append(opts, fmt.Sprintf("%s=%s selected=%v", attr(o, "value"), text(o), sel))
		})
		want := []string{"free=free: no monthly fee selected=false", "enterprise=enterprise: $499.00 a month selected=true"}
		if fmt.Sprint(opts) != fmt.Sprint(want) {
			t.Errorf("options = %q, want %q", opts, want)
		}
		if got := byTestID(doc, "upgrade-form").Find("textarea").Text(); got != "more <b>burst</b>" {
			t.Errorf("note refilled as %q", got)
		}
		for id, want := range map[string]string{"plan-fee": "$49.00", "plan-credit": "$10.00 a month", "plan-overage": "usage is billed on the invoice"} {
			if got := text(byTestID(doc, id)); got != want {
				t.Errorf("%s = %q, want %q", id, got, want)
			}
		}
	})
	t.Run("pending", func(t *testing.T) {
		b := sampleBilling()
		b.Plan.Pending = &UpgradeRow{FromTier: "premium", ToTier: "enterprise", Status: "pending", Requested: "2027-03-15 10:30 UTC", Note: "please"}
		b.Plan.Last = &UpgradeRow{ToTier: "enterprise", Status: "declined", Decided: "2027-03-01 09:00 UTC"}
		doc, _ := renderDashboard(t, b)
		if byTestID(doc, "upgrade-form").Length() != 0 || byTestID(doc, "upgrade-last").Length() != 0 {
			t.Error("the form or an old decision is shown while a request is pending")
		}
		want := "You asked to move from premium to enterprise on 2027-03-15 10:30 UTC. The request is pending: an admin will answer it. Your note: “please”"
		if got := text(byTestID(doc, "upgrade-pending")); got != want {
			t.Errorf("pending = %q\nwant %q", got, want)
		}
	})
	t.Run("declined, no other tier", func(t *testing.T) {
		b := sampleBilling()
		b.Plan.Tiers = nil
		b.Plan.Last = &UpgradeRow{ToTier: "enterprise", Status: "declined", Decided: "2027-03-01 09:00 UTC"}
		doc, _ := renderDashboard(t, b)
		if got := text(byTestID(doc, "upgrade-last")); got != "Your request to move to enterprise was declined on 2027-03-01 09:00 UTC." {
			t.Errorf("last = %q", got)
		}
		if byTestID(doc, "upgrade-none").Length() != 1 || byTestID(doc, "upgrade-form").Length() != 0 {
			t.Error("want the no-other-tier note instead of the form")
		}
	})
}

// A month whose included credit differs from the plan's (the organization
// joined, moved or had its terms changed during it) says both figures; the
// tiers page says since when a tier's terms are in force.
func TestProratedCreditAndTermsInForce(t *testing.T) {
	spend := []struct {
		name       string
		planCredit string
		want       string
	}{
		{"the plan's credit all month", "", "The free plan includes $7.00 of usage a month; past it, requests to priced models are refused."},
		{"a month of changed terms", "$4.00",
			"The free plan includes $4.00 of usage a month; this month, prorated, $7.00; past it, requests to priced models are refused."},
	}
	for _, tc := range spend {
		b := sampleBilling()
		b.Spend = SpendView{Spent: "$1.20", Credit: "$7.00", PlanCredit: tc.planCredit, Overage: "block", TierName: "free", Resets: "Apr 1, 2027 00:00 UTC"}
		doc, _ := renderDashboard(t, b)
		if got := text(byTestID(doc, "spend-credit")); got != tc.want {
			t.Errorf("%s: spend-credit = %q\nwant %q", tc.name, got, tc.want)
		}
	}
	tiers := []struct {
		from, want string
	}{
		{"2026-11-16 09:30 UTC", "Plan terms in force since 2026-11-16 09:30 UTC."},
		{"", "Plan terms in force as they were when Sluice began dating them."},
	}
	for _, tc := range tiers {
		doc, _ := render(t, AdminTiers(Page{Title: "Tiers", User: member()}, AdminTiersView{Tiers: []TierRow{{Name: "free", Capacity: 1,
			RefillPerSec: "1", MonthlyFee: "0.00", IncludedCredit: "4.00", Overage: "block", TermsFrom: tc.from}}}))
		if got := text(byTestID(doc, "tier-terms-from")); !strings.HasPrefix(got, tc.want) ||
			!strings.HasSuffix(got, "invoices bill the time before it at the terms it had.") {
			t.Errorf("tier-terms-from = %q, want it to start %q", got, tc.want)
		}
	}
}
