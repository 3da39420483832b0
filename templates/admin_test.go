package templates

import (
	"fmt"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"github.com/a-h/templ"
)

// adminUpgrade is a pending request as the views carry it.
func adminUpgrade(id int64) AdminUpgradeRow {
	return AdminUpgradeRow{ID: id, OrgName: "Acme", OrgURL: "/admin/organizations/3", Requester: "wile@acme.example",
		From: "free", To: "premium", Note: "launch next week", Requested: "2027-03-14 09:00 UTC",
		ApproveURL: fmt.Sprintf("/admin/upgrade-requests/%d/approve", id), DeclineURL: fmt.Sprintf("/admin/upgrade-requests/%d/decline", id)}
}

func overviewView() AdminOverviewView {
	return AdminOverviewView{
		Search: "ac", Sort: "spend", Desc: true, Period: "March 2027", Total: 120, Page: 2, Pages: 3,
		PrevURL: "/admin/organizations?dir=desc&q=ac&sort=spend", NextURL: "/admin/organizations?dir=desc&page=3&q=ac&sort=spend",
		ClearURL: "/admin/organizations",
		Columns: []AdminSortColumn{
			{Key: "name", Label: "Organization", URL: "/admin/organizations?q=ac"},
			{Key: "spend", Label: "Spend", Numeric: true, URL: "/admin/organizations?q=ac&sort=spend", Sorted: "descending"},
		},
		Rows: []AdminOrgRow{
			{ID: 3, URL: "/admin/organizations/3", Name: "Acme", OwnerEmail: "wile@acme.example", Tier: "free", Spend: "$1.000001",
				Requests: "1,234", RejectionRate: "4.2%", Freezes: 2, Created: "2026-01-03 00:00 UTC"},
			{ID: 4, URL: "/admin/organizations/4", Name: "Acme Two", Tier: "premium", Spend: "$0.00", Requests: "0", RejectionRate: "—"},
		},
		Upgrades: []AdminUpgradeRow{adminUpgrade(7)}, UpgradesTotal: 1,
	}
}

func TestAdminOverviewComponent(t *testing.T) {
	v := overviewView()
	doc, _ := render(t, AdminOverview(Page{Title: "Organizations", User: admin()}, v))
	if got := strings.Join(strings.Fields(byTestID(doc, "overview-total").Text()), " "); got != "120 organizations match “ac” · usage in March 2027 (UTC)" {
		t.Errorf("overview-total = %q", got)
	}
	rows := byTestID(doc, "overview-row")
	if rows.Length() != 2 {
		t.Fatalf("%d rows, want 2", rows.Length())
	}
	first := rows.First()
	for id, want := range map[string]string{"overview-name": "Acme", "overview-tier": "free", "overview-spend": "$1.000001",
		"overview-requests": "1,234", "overview-rate": "4.2%", "overview-freezes": "2"} {
		if got := strings.TrimSpace(first.Find(fmt.Sprintf("[data-testid=%q]", id)).Text()); got != want {
			t.Errorf("%s = %q, want %q", id, got, want)
		}
	}
	if got := attr(first.Find(`[data-testid="overview-name"]`), "href"); got != "/admin/organizations/3" {
		t.Errorf("name links to %q", got)
	}
	if !strings.Contains(first.Text(), "wile@acme.example") {
		t.Error("the owner's email is not under the name")
	}
	// The sorted column says so to screen readers, the others do not.
	sorted := doc.Find("th[aria-sort]")
	if sorted.Length() != 1 || attr(sorted, "aria-sort") != "descending" || attr(sorted.Find("a"), "href") != "/admin/organizations?q=ac&sort=spend" {
		t.Errorf("sorted column = %s", outer(sorted))
	}
	if got := attr(byTestID(doc, "sort-name"), "href"); got != "/admin/organizations?q=ac" {
		t.Errorf("name column sorts with %q", got)
	}
	// The search form keeps the search and the sort.
	form := byTestID(doc, "overview-search")
	if attr(form, "method") != "get" || attr(form.Find(`input[name="q"]`), "value") != "ac" ||
		attr(form.Find(`input[name="sort"]`), "value") != "spend" || attr(form.Find(`input[name="dir"]`), "value") != "desc" {
		t.Errorf("search form = %s", outer(form))
	}
	if got := attr(byTestID(doc, "pager-prev"), "href"); got != v.PrevURL {
		t.Errorf("prev = %q", got)
	}
	if got := attr(byTestID(doc, "pager-next"), "href"); got != v.NextURL {
		t.Errorf("next = %q", got)
	}
	if got := byTestID(doc, "pager-label").Text(); got != "Page 2 of 3" {
		t.Errorf("pager label = %q", got)
	}
	// Pending requests post their decision.
	up := byTestID(doc, "upgrade-row")
	if up.Length() != 1 || !strings.Contains(up.Text(), "launch next week") {
		t.Fatalf("upgrade rows = %s", outer(up))
	}
	for id, action := range map[string]string{"approve-upgrade": "/admin/upgrade-requests/7/approve", "decline-upgrade": "/admin/upgrade-requests/7/decline"} {
		f := up.Find(fmt.Sprintf("[data-testid=%q]", id))
		if !f.Is("form") || attr(f, "method") != "post" || attr(f, "action") != action {
			t.Errorf("%s = %s", id, outer(f))
		}
	}
	if got := byTestID(doc, "admin-nav-organizations"); attr(got, "aria-current") != "page" {
		t.Errorf("current section = %s", outer(got))
	}

	// No rows: the search says nothing matched, and there is no pager link.
	doc, _ = render(t, AdminOverview(Page{Title: "x", User: admin()}, AdminOverviewView{Search: "zz", Page: 1, Pages: 1}))
	if got := strings.TrimSpace(byTestID(doc, "overview-empty").Text()); got != "No organization matches “zz”." {
		t.Errorf("empty = %q", got)
	}
	if byTestID(doc, "pager-prev").Length()+byTestID(doc, "pager-next").Length() != 0 || byTestID(doc, "pending-upgrades").Length() != 0 {
		t.Error("an empty overview links to other pages or shows requests")
	}
}

func orgView() AdminOrgView {
	up := adminUpgrade(9)
	return AdminOrgView{ID: 3, Name: "Acme", Tier: "free", TierNames: []string{"free", "premium"}, TierURL: "/admin/organizations/3/tier",
		Created: "2026-01-03 00:00 UTC", TimeZone: "Europe/Berlin", Period: "March 2027", Spend: "$1.000001", Requests: "12",
		Rejected: "3", RejectionRate: "20%", ActiveFreezes: 1,
		Requests30d: Chart{ID: "org-requests", Title: "Requests per day", Buckets: []string{"Mar 14", "Mar 15"},
			Series: []Series{{Name: "Admitted", Values: []float64{0, 12}}, {Name: "Rejected (429)", Values: []float64{0, 3}}}},
		Cost30d: Chart{ID: "org-cost", Title: "Cost per day", Kind: ValueMoney, Buckets: []string{"Mar 14", "Mar 15"},
			Series: []Series{{Name: "Cost", Values: []float64{0, 1.000001}, Labels: []string{"$0.00", "$1.000001"}}}},
		Budget: AdminBudget{Gauge: Gauge{Title: "Spend this month", Spent: 1, Budget: 10, SpentLabel: "$1.000001", BudgetLabel: "$10.00"},
			Limit: "$10.00", HardStop: true, Reserved: "$0.00", Credit: "$1.00", Overage: "block"},
		Invoices: []AdminInvoiceRow{{ID: 5, Period: "March 2027", Status: "draft", Total: "$0.00",
			URL: "/admin/organizations/3/invoices/5", CSVURL: "/admin/organizations/3/invoices/5/csv"}},
		Tokens:   []TokenRow{{ID: 1, Name: "ci", Prefix: "sk_sluice_AbC123", LastUsed: "never", Status: "active"}},
		Users:    []AdminUserRow{{Email: "wile@acme.example", Role: "owner"}},
		Upgrade:  &up,
		AuditURL: "/admin/audit?org=3",
	}
}

func TestAdminOrganizationComponent(t *testing.T) {
	v := orgView()
	doc, _ := render(t, AdminOrganization(Page{Title: "Acme", User: admin()}, v))
	for id, want := range map[string]string{"org-title": "Acme", "org-tier": "free", "org-spend": "$1.000001", "org-requests": "12",
		"org-rejected": "3", "org-freezes": "1"} {
		if got := strings.TrimSpace(byTestID(doc, id).Text()); got != want {
			t.Errorf("%s = %q, want %q", id, got, want)
		}
	}
	if n := byTestID(doc, "org-usage").Find(`[data-testid="chart"]`).Length(); n != 2 {
		t.Errorf("%d charts, want requests and cost", n)
	}
	if !strings.Contains(byTestID(doc, "org-usage").Find(`[data-testid="chart-data"]`).Text(), "$1.000001") {
		t.Error("the cost chart's table lacks the exact cost")
	}
	if byTestID(doc, "org-budget").Find(`[data-testid="gauge"]`).Length() != 1 {
		t.Error("no budget gauge")
	}
	if got := strings.Join(strings.Fields(byTestID(doc, "org-budget-limit").Text()), " "); got != "$10.00 (hard stop)" {
		t.Errorf("budget limit = %q", got)
	}
	form := byTestID(doc, "org-tier-form-3")
	if !form.Is("form") || attr(form, "method") != "post" || attr(form, "action") != "/admin/organizations/3/tier" {
		t.Fatalf("tier form = %s", outer(form))
	}
	if sel := form.Find("option[selected]"); sel.Length() != 1 || attr(sel, "value") != "free" || form.Find("option").Length() != 2 {
		t.Errorf("tier options = %s", outer(form.Find("select")))
	}
	up := byTestID(doc, "org-upgrade")
	if !strings.Contains(up.Text(), "launch next week") || attr(up.Find(`[data-testid="approve-upgrade"]`), "action") != "/admin/upgrade-requests/9/approve" {
		t.Errorf("upgrade = %s", outer(up))
	}
	inv := byTestID(doc, "org-invoice-link")
	if attr(inv, "href") != "/admin/organizations/3/invoices/5" || strings.TrimSpace(inv.Text()) != "March 2027" {
		t.Errorf("invoice link = %s", outer(inv))
	}
	if got := adminCells(byTestID(doc, "org-token-row")); got != "sk_sluice_AbC123… ci | active | never" {
		t.Errorf("token row = %q", got)
	}
	if got := adminCells(byTestID(doc, "org-user-row")); got != "wile@acme.example | owner" {
		t.Errorf("user row = %q", got)
	}
	if attr(byTestID(doc, "org-audit-link"), "href") != "/admin/audit?org=3" {
		t.Error("no link to the organization's audit log")
	}

	v.Upgrade, v.Budget.Limit = nil, "none"
	doc, _ = render(t, AdminOrganization(Page{Title: "Acme", User: admin()}, v))
	if byTestID(doc, "org-upgrade").Length() != 0 {
		t.Error("an upgrade card without a request")
	}
	if got := strings.TrimSpace(byTestID(doc, "org-budget-limit").Text()); got != "none" {
		t.Errorf("no budget = %q", got)
	}
}

func TestAdminInvoiceComponent(t *testing.T) {
	doc, _ := render(t, AdminInvoice(Page{Title: "x", User: admin()}, AdminInvoiceView{OrgName: "Acme", OrgURL: "/admin/organizations/3",
		Period: "March 2027", Status: "final", Currency: "USD", Total: "$59.50", CSVURL: "/admin/organizations/3/invoices/5/csv",
		Lines: []AdminInvoiceLine{{Kind: "fee", Description: "premium plan", Amount: "$49.00"},
			{Kind: "usage", Description: "gpt-4o", Requests: "10", Tokens: "1,000 in · 500 out", Prices: "$0.50 / $1.50 / $0.25", Amount: "$10.50"}}}))
	if n := byTestID(doc, "invoice-line").Length(); n != 2 {
		t.Errorf("%d lines", n)
	}
	if got := byTestID(doc, "invoice-total").Text(); got != "$59.50" {
		t.Errorf("total = %q", got)
	}
	if attr(byTestID(doc, "invoice-csv"), "href") != "/admin/organizations/3/invoices/5/csv" {
		t.Error("no CSV link")
	}
}

func TestAdminPricesComponent(t *testing.T) {
	v := AdminPricesView{
		Rows: []AdminPriceRow{
			{Model: "gpt-4o", EditURL: "/admin/prices?model=gpt-4o#set-price"},
			{Model: "sluice-local", Priced: true, Input: "0.50", Output: "1.50", CachedInput: "0.25", EffectiveFrom: "2027-03-01 00:00 UTC",
				Versions: 2, EditURL: "/admin/prices?model=sluice-local#set-price"},
		},
		Unpriced: 1, Models: []string{"gpt-4o", "sluice-local"},
		Form: AdminPriceForm{Model: "gpt-4o", Input: "abc"},
	}
	doc, _ := render(t, AdminPrices(Page{Title: "Prices", User: admin()}, v))
	if got := strings.Join(strings.Fields(byTestID(doc, "unpriced-alert").Text()), " "); !strings.HasPrefix(got, "1 model has no price:") {
		t.Errorf("alert = %q", got)
	}
	missing := doc.Find(`[data-model="gpt-4o"] [data-testid="price-missing"]`)
	if strings.TrimSpace(missing.Text()) != "no price: costs nothing" {
		t.Errorf("unpriced row = %s", outer(doc.Find(`[data-model="gpt-4o"]`)))
	}
	priced := doc.Find(`[data-model="sluice-local"]`)
	if priced.Find(`[data-testid="price-missing"]`).Length() != 0 || strings.TrimSpace(priced.Find(`[data-testid="price-input"]`).Text()) != "$0.50" ||
		strings.TrimSpace(priced.Find(`[data-testid="price-cached"]`).Text()) != "$0.25" || !strings.Contains(priced.Text(), "1 earlier") {
		t.Errorf("priced row = %q", strings.Join(strings.Fields(priced.Text()), " "))
	}
	form := byTestID(doc, "set-price-form")
	if attr(form, "method") != "post" || attr(form, "action") != "/admin/prices" || attr(form.Find("#price-model"), "value") != "gpt-4o" ||
		attr(form.Find("#price-input"), "value") != "abc" || form.Find("datalist option").Length() != 2 {
		t.Errorf("form = %s", outer(form))
	}
	if n := doc.Find(`[data-testid="unpriced-alert"]`).Length(); n != 1 {
		t.Errorf("%d alerts", n)
	}
	doc, _ = render(t, AdminPrices(Page{Title: "Prices", User: admin()}, AdminPricesView{Rows: v.Rows[1:]}))
	if byTestID(doc, "unpriced-alert").Length() != 0 || byTestID(doc, "price-missing").Length() != 0 {
		t.Error("a flag with every model priced")
	}
}

func TestAdminAuditComponent(t *testing.T) {
	v := AdminAuditView{Filter: AdminAuditFilter{OrgID: "3", Action: "tier.", From: "2027-03-01", To: "2027-03-15"}, Page: 2,
		PrevURL: "/admin/audit?action=tier.", NextURL: "/admin/audit?action=tier.&page=3", ClearURL: "/admin/audit", Actions: []string{"tier."},
		Rows: []AdminAuditRow{
			{At: "2027-03-15 10:00 UTC", OrgName: "Ops", OrgURL: "/admin/organizations/1", Actor: "root@example.com", Action: "tier.update",
				Target: "free", Detail: "capacity 30 -> 31"},
			{At: "2027-03-14 10:00 UTC", Actor: "system", Action: "upstream.disable", Target: "4", Detail: "401"},
		}}
	doc, _ := render(t, AdminAudit(Page{Title: "Audit", User: admin()}, v))
	form := byTestID(doc, "audit-filter")
	for sel, want := range map[string]string{"#audit-org": "3", "#audit-action": "tier.", "#audit-from": "2027-03-01", "#audit-to": "2027-03-15"} {
		if got := attr(form.Find(sel), "value"); got != want {
			t.Errorf("%s = %q, want %q", sel, got, want)
		}
	}
	if attr(form, "method") != "get" || attr(form.Find("#audit-from"), "type") != "date" {
		t.Errorf("filter form = %s", outer(form))
	}
	rows := byTestID(doc, "audit-row")
	if rows.Length() != 2 {
		t.Fatalf("%d rows", rows.Length())
	}
	if got := adminCells(rows.First()); got != "2027-03-15 10:00 UTC | Ops | root@example.com | tier.update | free | capacity 30 -> 31" {
		t.Errorf("row = %q", got)
	}
	if attr(rows.First().Find(`[data-testid="audit-org"] a`), "href") != "/admin/organizations/1" || rows.Eq(1).Find(`[data-testid="audit-org"] a`).Length() != 0 {
		t.Error("organization links")
	}
	if attr(byTestID(doc, "pager-next"), "href") != v.NextURL || attr(byTestID(doc, "pager-prev"), "href") != v.PrevURL {
		t.Error("pager links")
	}
	if got := byTestID(doc, "pager-label").Text(); got != "Page 2" {
		t.Errorf("pager label = %q", got)
	}
}

// adminPages renders every admin component with its fields set.
func adminPages(p Page) map[string]templ.Component {
	return map[string]templ.Component{
		"tiers": AdminTiers(p, AdminTiersView{Tiers: []TierRow{{Name: "free", Capacity: 1, RefillPerSec: "1", MonthlyFee: "0.00",
			IncludedCredit: "1.00", Overage: "block", Organizations: 3}}, NewTier: AdminTierForm{Name: "gold"}}),
		"overview":     AdminOverview(p, overviewView()),
		"organization": AdminOrganization(p, orgView()),
		"invoice":      AdminInvoice(p, AdminInvoiceView{Lines: []AdminInvoiceLine{{Kind: "fee", Description: "fee", Amount: "$1.00"}}}),
		"prices":       AdminPrices(p, AdminPricesView{Rows: []AdminPriceRow{{Model: "m"}}, Unpriced: 1}),
		"audit":        AdminAudit(p, AdminAuditView{Rows: []AdminAuditRow{{Action: "a"}}, Page: 1}),
	}
}

// TestAdminPagesAreStrictCSPReady checks what a strict Content Security
// Policy and a screen reader need of every admin page: no script, no
// inline style or event handler, every control labelled, the admin
// navigation on top, forms that change state posting.
func TestAdminPagesAreStrictCSPReady(t *testing.T) {
	for name, c := range adminPages(Page{Title: "x", User: admin()}) {
		t.Run(name, func(t *testing.T) {
			doc, html := render(t, c)
			if doc.Find("script").Length() != 0 || doc.Find("[style]").Length() != 0 || strings.Contains(html, " on") && doc.Find("[onclick],[onsubmit],[onchange]").Length() != 0 {
				t.Error("script, inline style or inline handler on the page")
			}
			if byTestID(doc, "admin-nav").Length() != 1 {
				t.Error("no admin navigation")
			}
			doc.Find("input, select, textarea").Each(func(_ int, s *goquery.Selection) {
				if typ := attr(s, "type"); typ == "hidden" || typ == "submit" {
					return
				}
				id := attr(s, "id")
				if id == "" || doc.Find(fmt.Sprintf(`label[for=%q]`, id)).Length() != 1 {
					t.Errorf("control without exactly one label: %s", outer(s))
				}
			})
			ids := map[string]bool{}
			doc.Find("[id]").Each(func(_ int, s *goquery.Selection) {
				if id := attr(s, "id"); ids[id] {
					t.Errorf("id %q used twice", id)
				} else {
					ids[id] = true
				}
			})
			doc.Find("form").Each(func(_ int, f *goquery.Selection) {
				if m := attr(f, "method"); m != "post" && m != "get" {
					t.Errorf("form without a method: %s", outer(f))
				}
			})
		})
	}
}

// TestAdminPagesEscapeText puts markup in every text an admin page shows:
// it must come out as text.
func TestAdminPagesEscapeText(t *testing.T) {
	const evil = `<script>alert(1)</script>`
	const evilAttr = `"><script>alert(1)</script>`
	p := Page{Title: evil, User: admin()}
	ov := overviewView()
	ov.Search, ov.Rows[0].Name, ov.Rows[0].OwnerEmail, ov.Rows[0].Tier = evilAttr, evil, evilAttr, evil
	ov.Upgrades[0].Note, ov.Upgrades[0].OrgName = evil, evil
	org := orgView()
	org.Name, org.Users[0].Email, org.Tokens[0].Name, org.Upgrade.Note, org.TierNames = evil, evil, evil, evil, []string{evilAttr}
	pages := map[string]templ.Component{
		"overview":     AdminOverview(p, ov),
		"organization": AdminOrganization(p, org),
		"prices":       AdminPrices(p, AdminPricesView{Rows: []AdminPriceRow{{Model: evil}}, Models: []string{evilAttr}, Form: AdminPriceForm{Model: evilAttr, Input: evilAttr}}),
		"audit": AdminAudit(p, AdminAuditView{Filter: AdminAuditFilter{OrgID: evilAttr, Action: evilAttr, From: evilAttr},
			Rows: []AdminAuditRow{{At: evil, OrgName: evil, Actor: evil, Action: evil, Target: evil, Detail: evil}}}),
		"invoice": AdminInvoice(p, AdminInvoiceView{OrgName: evil, Lines: []AdminInvoiceLine{{Description: evil}}}),
		"tiers":   AdminTiers(p, AdminTiersView{NewTier: AdminTierForm{Name: evilAttr, MonthlyFee: evilAttr, Overage: evilAttr}}),
	}
	for name, c := range pages {
		t.Run(name, func(t *testing.T) {
			doc, _ := render(t, c)
			if n := doc.Find("script").Length(); n != 0 {
				t.Errorf("found %d <script> elements", n)
			}
			if !strings.Contains(doc.Find("body").Text(), evil) && name != "tiers" {
				t.Error("the text itself should still be shown, escaped")
			}
		})
	}
}

func TestAdminWaiting(t *testing.T) {
	for _, tt := range []struct {
		shown int
		total int64
		want  string
	}{
		{1, 1, "1 request waits for a decision."},
		{2, 2, "2 requests wait for a decision."},
		{20, 31, "31 requests wait for a decision; the oldest 20 are shown."},
	} {
		if got := adminWaiting(tt.shown, tt.total); got != tt.want {
			t.Errorf("adminWaiting(%d, %d) = %q, want %q", tt.shown, tt.total, got, tt.want)
		}
	}
}

// adminCells is a row's cells' texts, each with its spaces collapsed, joined by " | ".
func adminCells(row *goquery.Selection) string {
	return strings.Join(row.Find("td").Map(func(_ int, c *goquery.Selection) string {
		return strings.Join(strings.Fields(c.Text()), " ")
	}), " | ")
}
