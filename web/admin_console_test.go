package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// adminUsage stores n admitted requests of tok at at, each costing cost, and
// rejected refusals, through the recorder's store calls.
func (s *site) adminUsage(tok models.APIToken, at time.Time, n int, cost money.Amount, rejected int64) {
	s.t.Helper()
	var evs []models.UsageEvent
	for i := range n {
		evs = append(evs, models.UsageEvent{RequestID: fmt.Sprintf("req-%d-%d-%d", tok.ID, at.UnixNano(), i), OrgID: tok.OrgID, TokenID: tok.ID,
			Model: "sluice-local", PromptTokens: 10, CompletionTokens: 5, Cost: cost, Status: 200, CreatedAt: at})
	}
	ctx := context.Background()
	if err := s.store.InsertUsageEvents(ctx, evs); err != nil {
		s.t.Fatal(err)
	}
	if rejected > 0 {
		if err := s.store.AddRejections(ctx, []models.Rejections{{OrgID: tok.OrgID, TokenID: tok.ID, Model: "sluice-local", Hour: at, Requests: rejected}}); err != nil {
			s.t.Fatal(err)
		}
	}
}

// adminRowOf is the overview row of an organization.
func adminRowOf(w *response, orgID int64) *goquery.Selection {
	return w.page().Find(`[data-testid="overview-row"][data-org-id="` + strconv.FormatInt(orgID, 10) + `"]`)
}

func adminCellText(row *goquery.Selection, id string) string {
	return strings.Join(strings.Fields(row.Find(`[data-testid="`+id+`"]`).Text()), " ")
}

func TestAdminOverviewShowsSortsSearchesAndPages(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		ctx := context.Background()
		ada := s.signup("ada@example.com", "Analytical Engines")
		bob := s.signup("bob@example.com", "Babbage & Co")
		tok := s.token(ada, "ci")
		s.adminUsage(tok, epoch.Add(-time.Hour), 3, money.Dollar/2, 1)
		s.adminUsage(tok, epoch.AddDate(0, -1, 0), 7, money.Dollar, 0) // last month: not this month's
		s.freeze(tok, time.Hour)
		if _, err := s.billing.RequestUpgrade(ctx, ada, "premium", "more please"); err != nil {
			t.Fatal(err)
		}
		admin := s.signedIn(s.admin)

		w := admin.get("/admin/organizations")
		w.expectPage(http.StatusOK, "admin-overview", "overview-table", "pending-upgrades")
		row := adminRowOf(w, ada.OrgID)
		for id, want := range map[string]string{"overview-name": "Analytical Engines", "overview-tier": "free", "overview-spend": "$1.50",
			"overview-requests": "3", "overview-rate": "25%", "overview-freezes": "1"} {
			if got := adminCellText(row, id); got != want {
				t.Errorf("%s = %q, want %q", id, got, want)
			}
		}
		if got := adminCellText(adminRowOf(w, bob.OrgID), "overview-rate"); got != "—" {
			t.Errorf("an idle organization's 429 rate = %q, want —", got)
		}
		if got := w.text("overview-total"); got != "3 organizations · usage in March 2027 (UTC)" {
			t.Errorf("overview-total = %q", got)
		}
		if got, _ := w.testid("sort-spend").Attr("href"); got != "/admin/organizations?dir=desc&sort=spend" {
			t.Errorf("spend sorts with %q, want the biggest first", got)
		}
		if got, _ := w.page().Find("th[aria-sort]").Attr("aria-sort"); got != "ascending" {
			t.Errorf("default sort aria-sort = %q", got)
		}
		up := w.testid("upgrade-row")
		if up.Length() != 1 || !strings.Contains(up.Text(), "Analytical Engines") || !strings.Contains(up.Text(), "free → premium") {
			t.Errorf("pending upgrades = %q", up.Text())
		}

		// Sorted by spend, biggest first; by name, descending.
		w = admin.get("/admin/organizations?sort=spend&dir=desc")
		if got := w.texts("overview-name"); len(got) != 3 || got[0] != "Analytical Engines" {
			t.Errorf("by spend: %v", got)
		}
		if got, _ := w.testid("sort-spend").Attr("href"); got != "/admin/organizations?sort=spend" {
			t.Errorf("the sorted column flips to %q", got)
		}
		w = admin.get("/admin/organizations?dir=desc")
		if got := w.texts("overview-name"); strings.Join(got, ",") != "Sluice operators,Babbage & Co,Analytical Engines" {
			t.Errorf("by name, descending: %v", got)
		}
		// A sort it does not know is by name, not an error.
		admin.get("/admin/organizations?sort=password_hash&page=x").expectPage(http.StatusOK, "overview-row")

		// Search by name and by email, ignoring case.
		for q, want := range map[string]string{"BABBAGE": "Babbage & Co", "ada@EXAMPLE": "Analytical Engines"} {
			w = admin.get("/admin/organizations?q=" + url.QueryEscape(q))
			if got := w.texts("overview-name"); len(got) != 1 || got[0] != want {
				t.Errorf("search %q: %v, want %s", q, got, want)
			}
			if w.testid("overview-clear").Length() != 1 {
				t.Errorf("search %q: no way to clear it", q)
			}
		}
		w = admin.get("/admin/organizations?q=nobody")
		w.expectPage(http.StatusOK, "overview-empty")
		// A search too long is cut at a character, and bytes that are not
		// UTF-8 are dropped: an empty result, never an error page.
		for _, q := range []string{strings.Repeat("灯", 100), "\xff\xfeAnalytical"} {
			w = admin.get("/admin/organizations?q=" + url.QueryEscape(q))
			if w.Code != http.StatusOK {
				t.Errorf("search %q: %d", q, w.Code)
			}
		}
		if got := admin.get("/admin/organizations?q=" + url.QueryEscape("\xffAnalytical")).texts("overview-name"); len(got) != 1 || got[0] != "Analytical Engines" {
			t.Errorf("search with a stray byte: %v", got)
		}

		// Fifty a page.
		for i := range 55 {
			if _, _, err := s.store.CreateOrganizationWithOwner(ctx, fmt.Sprintf("Org %02d", i), "free", fmt.Sprintf("o%d@example.com", i), "h", models.RoleOwner); err != nil {
				t.Fatal(err)
			}
		}
		w = admin.get("/admin/organizations")
		if n := w.testid("overview-row").Length(); n != 50 {
			t.Errorf("page 1 has %d rows, want 50", n)
		}
		if got := w.text("pager-label"); got != "Page 1 of 2" {
			t.Errorf("pager = %q", got)
		}
		next, _ := w.testid("pager-next").Attr("href")
		if next != "/admin/organizations?page=2" || w.testid("pager-prev").Length() != 0 {
			t.Fatalf("next = %q", next)
		}
		w = admin.get(next)
		if n := w.testid("overview-row").Length(); n != 8 {
			t.Errorf("page 2 has %d rows, want 8", n)
		}
		if prev, _ := w.testid("pager-prev").Attr("href"); prev != "/admin/organizations" || w.testid("pager-next").Length() != 0 {
			t.Errorf("prev = %q", prev)
		}
		// A search and a sort survive paging.
		w = admin.get("/admin/organizations?q=org&sort=created&dir=desc")
		if next, _ := w.testid("pager-next").Attr("href"); next != "/admin/organizations?dir=desc&page=2&q=org&sort=created" {
			t.Errorf("next keeps the query: %q", next)
		}
		admin.get("/admin").expectRedirect("/admin/organizations")
	})
}

func TestAdminOrganizationPage(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		ctx := context.Background()
		ada := s.signup("ada@example.com", "Analytical Engines")
		bob := s.signup("bob@example.com", "Babbage & Co")
		tok, secret, err := s.accounts.CreateToken(ctx, ada, "ci", 0)
		if err != nil {
			t.Fatal(err)
		}
		s.adminUsage(tok, epoch.Add(-time.Hour), 4, 125*money.Dollar/1_000_000, 2) // today: 4 requests of $0.000125
		s.adminUsage(tok, epoch.AddDate(0, 0, -2), 1, money.Dollar, 0)             // two days ago
		s.adminUsage(tok, epoch.AddDate(0, 0, -40), 1, money.Dollar, 0)            // before the chart
		limit := 10 * money.Dollar
		if _, err := s.billing.SetBudget(ctx, ada, models.Budget{Limit: &limit, HardStop: true}); err != nil {
			t.Fatal(err)
		}
		admin := s.signedIn(s.admin)
		page := fmt.Sprintf("/admin/organizations/%d", ada.OrgID)

		w := admin.get(page)
		w.expectPage(http.StatusOK, "admin-org", "org-usage", "org-budget", "org-invoices", "org-tokens", "org-users", "admin-nav")
		for id, want := range map[string]string{"org-title": "Analytical Engines", "org-tier": "free", "org-spend": "$1.0005",
			"org-requests": "5", "org-rejected": "2", "org-freezes": "0", "org-budget-limit": "$10.00 (hard stop)"} {
			if got := w.text(id); got != want {
				t.Errorf("%s = %q, want %q", id, got, want)
			}
		}
		// Two charts of 30 days each, empty days included, exact costs in
		// their tables.
		charts := w.testid("org-usage").Find(`[data-testid="chart"]`)
		if charts.Length() != 2 {
			t.Fatalf("%d charts", charts.Length())
		}
		charts.Each(func(i int, c *goquery.Selection) {
			if n := c.Find("tbody tr").Length(); n != 30 {
				t.Errorf("chart %d has %d days, want 30", i, n)
			}
			if first := strings.TrimSpace(c.Find("tbody tr th").First().Text()); first != "Feb 14" {
				t.Errorf("chart %d starts %q, want Feb 14", i, first)
			}
		})
		cost := charts.Eq(1).Find("tbody tr").Last()
		if got := adminCells(cost); got != "Mar 15 | $0.0005" {
			t.Errorf("today's cost = %q", got)
		}
		if got := adminCells(charts.Eq(0).Find("tbody tr").Last()); got != "Mar 15 | 4 | 2 | 6" {
			t.Errorf("today's requests = %q, want 4 admitted, 2 rejected, 6", got)
		}
		if got := adminCells(charts.Eq(1).Find("tbody tr").Eq(27)); got != "Mar 13 | $1.00" {
			t.Errorf("two days ago = %q", got)
		}
		// Tokens by prefix, never the secret; users without their hash.
		if !strings.Contains(w.text("org-tokens"), tok.Prefix) || strings.Contains(w.Body.String(), secret) {
			t.Error("the token is not shown by its prefix, or its secret is on the page")
		}
		if got := adminCells(w.testid("org-user-row")); got != "ada@example.com | owner" {
			t.Errorf("users = %q", got)
		}
		if strings.Contains(w.Body.String(), "$2a$") {
			t.Error("a password hash is on the page")
		}

		// Its invoice, linked, with lines and a CSV.
		link := w.testid("org-invoice-link")
		href, _ := link.Attr("href")
		if link.Length() != 1 || !strings.HasPrefix(href, page+"/invoices/") {
			t.Fatalf("invoice link = %q", href)
		}
		inv := admin.get(href)
		inv.expectPage(http.StatusOK, "admin-invoice", "invoice-line", "invoice-total")
		if got := inv.text("invoice-status"); got != "draft" {
			t.Errorf("invoice status = %q", got)
		}
		var lines []string
		inv.testid("invoice-line").Each(func(_ int, row *goquery.Selection) { lines = append(lines, adminCells(row)) })
		// A line with no price says so, not "$0.00 / $0.00 / $0.00".
		if len(lines) != 2 || lines[0] != "sluice-local (not billed) | 5 | 50 in · 25 out | not billed | $1.00" {
			t.Errorf("invoice lines = %q", lines)
		}
		csv := admin.get(href + "/csv")
		if csv.Code != http.StatusOK || !strings.HasPrefix(csv.Header().Get("Content-Type"), "text/csv") ||
			!strings.Contains(csv.Header().Get("Content-Disposition"), "attachment") {
			t.Errorf("csv: %d %v", csv.Code, csv.Header())
		}
		// Another organization's invoice is not under this one.
		bobInvoices, err := s.billing.Invoices(ctx, bob.OrgID)
		if err != nil || len(bobInvoices) == 0 {
			t.Fatal(err)
		}
		admin.get(fmt.Sprintf("%s/invoices/%d", page, bobInvoices[0].ID)).expectError(http.StatusNotFound, "No such invoice.")
		admin.get(page+"/invoices/x").expectError(http.StatusNotFound, "No such invoice.")

		// Unknown organizations.
		admin.get("/admin/organizations/999999").expectError(http.StatusNotFound, "No such organization.")
		admin.get("/admin/organizations/0").expectError(http.StatusNotFound, "No such organization.")
	})
}

func TestAdminDecidesUpgradeRequests(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		ctx := context.Background()
		ada := s.signup("ada@example.com", "Analytical Engines")
		bob := s.signup("bob@example.com", "Babbage & Co")
		r, err := s.billing.RequestUpgrade(ctx, ada, "premium", "launching")
		if err != nil {
			t.Fatal(err)
		}
		rb, err := s.billing.RequestUpgrade(ctx, bob, "premium", "")
		if err != nil {
			t.Fatal(err)
		}
		admin := s.signedIn(s.admin)
		page := fmt.Sprintf("/admin/organizations/%d", ada.OrgID)
		w := admin.get(page)
		w.expectPage(http.StatusOK, "org-upgrade", "approve-upgrade", "decline-upgrade")
		if got := w.text("org-upgrade-note"); got != "launching" {
			t.Errorf("note = %q", got)
		}
		action, _ := w.testid("approve-upgrade").Attr("action")
		admin.post(action, url.Values{}).expectRedirect(page + "?done=approved")
		if o, _ := s.store.Organization(ctx, ada.OrgID); o.Tier.Name != "premium" {
			t.Errorf("after approval ada is on %q", o.Tier.Name)
		}
		w = admin.get(page + "?done=approved")
		w.expectPage(http.StatusOK, "flash")
		if w.testid("org-upgrade").Length() != 0 || w.text("org-tier") != "premium" {
			t.Error("the approved request is still shown, or the tier did not change")
		}
		// A second click changes nothing.
		admin.post(action, url.Values{}).expectError(http.StatusConflict, "this request was already approved")

		admin.post(fmt.Sprintf("/admin/upgrade-requests/%d/decline", rb.ID), url.Values{}).
			expectRedirect(fmt.Sprintf("/admin/organizations/%d?done=declined", bob.OrgID))
		if o, _ := s.store.Organization(ctx, bob.OrgID); o.Tier.Name != "free" {
			t.Errorf("after declining bob is on %q", o.Tier.Name)
		}
		rs, _ := s.store.UpgradeRequests(ctx, 0, "")
		if len(rs) != 2 || rs[0].ID != r.ID || rs[0].Status != models.UpgradeApproved || rs[1].Status != models.UpgradeDeclined {
			t.Errorf("requests = %+v", rs)
		}
		admin.post("/admin/upgrade-requests/999999/approve", url.Values{}).expectError(http.StatusNotFound, "No such upgrade request.")
		admin.post("/admin/upgrade-requests/x/decline", url.Values{}).expectError(http.StatusNotFound, "No such upgrade request.")
	})
}

// planValues is a valid create-a-tier form with changes applied.
func planValues(changes map[string]string) url.Values {
	v := tierValues(map[string]string{"autotune": "-"})
	v.Set("refill_floor", "0")
	for k, x := range map[string]string{"name": "team", "plan": "1", "monthly_fee": "19.99", "included_credit": "5", "overage": "bill",
		"bill_cache_hits": "on"} {
		v.Set(k, x)
	}
	for k, x := range changes {
		if x == "-" {
			v.Del(k)
			continue
		}
		v.Set(k, x)
	}
	return v
}

func TestAdminTierFormsCreateEditAndDelete(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		ctx := context.Background()
		s.signup("ada@example.com", "Analytical Engines")
		admin := s.signedIn(s.admin)

		w := admin.get("/admin/tiers")
		w.expectPage(http.StatusOK, "create-tier-form", "plan-fields", "tier-delete-free")
		free := w.testid("tier-form-free")
		if v, _ := free.Find(`input[name="monthly_fee"]`).Attr("value"); v != "0.00" {
			t.Errorf("free fee shown = %q", v)
		}
		if v, _ := free.Find(`input[name="included_credit"]`).Attr("value"); v != "1.00" {
			t.Errorf("free credit shown = %q", v)
		}
		if v, _ := free.Find(`[data-testid="tier-overage"] option[selected]`).Attr("value"); v != "block" {
			t.Errorf("free overage shown = %q", v)
		}
		if v, _ := free.Find(`input[name="plan"]`).Attr("type"); v != "hidden" {
			t.Error("the plan fieldset does not mark itself present")
		}
		if got := w.texts("tier-orgs"); len(got) != 2 || got[0] != "1 organization is on this tier." {
			t.Errorf("tier usage = %v", got)
		}
		if got := w.texts("tier-terms-from"); len(got) != 2 || !strings.HasPrefix(got[0], "Plan terms in force as they were when Sluice began dating them.") {
			t.Errorf("the seeded tiers' terms = %q", got)
		}

		// Create.
		admin.post("/admin/tiers", planValues(nil)).expectRedirect("/admin/tiers?done=created")
		team, err := s.store.TierByName(ctx, "team")
		if err != nil {
			t.Fatal(err)
		}
		if want := (models.TierSettings{Capacity: 30, RefillPerSec: 0.5, FreezeThreshold: 20, FreezeMinutes: 10, UpstreamFallback: "local",
			MonthlyFee: 1999 * money.Cent, IncludedCredit: 5 * money.Dollar, Overage: models.OverageBill, BillCacheHits: true,
			Billing: models.BillingInvoice, GraceDays: models.DefaultGraceDays}); team.Settings() != want {
			t.Errorf("team = %+v, want %+v", team.Settings(), want)
		}
		w = admin.get("/admin/tiers?done=created")
		w.expectPage(http.StatusOK, "flash", "tier-form-team")
		if v, _ := w.testid("tier-form-team").Find(`input[name="monthly_fee"]`).Attr("value"); v != "19.99" {
			t.Errorf("team fee shown = %q", v)
		}
		if got := w.testid("tier-form-team").Find(`[data-testid="tier-terms-from"]`).Text(); !strings.Contains(got, "in force since "+team.TermsFrom.Format("2006-01-02 15:04 UTC")) {
			t.Errorf("team terms = %q, want them in force since its creation", got)
		}

		// Refused creations keep what was typed.
		tests := []struct {
			name    string
			form    url.Values
			status  int
			message string
		}{
			{"bad fee", planValues(map[string]string{"name": "bad", "monthly_fee": "lots"}), 422,
				"These fields need an amount in dollars such as 49.00: monthly_fee."},
			{"bad number", planValues(map[string]string{"name": "bad", "capacity": "many"}), 422, "These fields need a number: capacity."},
			{"bad name", planValues(map[string]string{"name": "Bad Name"}), 422, "name must be 1 to 32 lower-case letters, digits, - or _"},
			{"taken name", planValues(nil), 409, "tier team already exists"},
			{"zero refill", planValues(map[string]string{"name": "bad", "refill_per_sec": "0"}), 422,
				"refill_per_sec must be greater than 0 and at most 1000000"},
			{"floor above refill", planValues(map[string]string{"name": "bad", "refill_floor": "9"}), 422, "refill_floor must be from 0 to refill_per_sec"},
			{"unknown overage", planValues(map[string]string{"name": "bad", "overage": "maybe"}), 422, "overage must be bill or block"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				w := admin.post("/admin/tiers", tt.form)
				w.t = t
				w.expectFormError(tt.status, "create-tier-form", tt.message)
				if got := w.value("#new-tier-name"); got != tt.form.Get("name") {
					t.Errorf("name kept as %q", got)
				}
				if got := w.value("#new-tier-fee"); got != tt.form.Get("monthly_fee") {
					t.Errorf("fee kept as %q", got)
				}
			})
		}
		if _, err := s.store.TierByName(ctx, "bad"); err == nil {
			t.Error("a refused tier was stored")
		}

		// Edit the plan: an unchecked box on a form with the plan is off.
		form := tierValues(map[string]string{"plan": "1", "monthly_fee": "1.25", "included_credit": "0.5", "overage": "bill"})
		admin.post("/admin/tiers/team", form).expectRedirect("/admin/tiers?done=tier")
		team, _ = s.store.TierByName(ctx, "team")
		if team.MonthlyFee != 125*money.Cent || team.IncludedCredit != money.Dollar/2 || team.Overage != "bill" || team.BillCacheHits {
			t.Errorf("team after edit = %+v", team.Settings())
		}
		admin.post("/admin/tiers/team", tierValues(map[string]string{"plan": "1", "monthly_fee": "1.2.3", "included_credit": "0"})).
			expectFormError(http.StatusUnprocessableEntity, "tier-form-team", "These fields need an amount in dollars such as 49.00: monthly_fee.")

		// Delete: a tier in use stays and says why; an unused one goes.
		admin.post("/admin/tiers/free/delete", url.Values{}).
			expectFormError(http.StatusConflict, "tier-form-free", "the free tier is in use by 1 organizations; move them to another tier first")
		admin.post("/admin/tiers/team/delete", url.Values{}).expectRedirect("/admin/tiers?done=deleted")
		if _, err := s.store.TierByName(ctx, "team"); err == nil {
			t.Error("the deleted tier is still there")
		}
		admin.post("/admin/tiers/gold/delete", url.Values{}).expectError(http.StatusNotFound, "tier gold not found")
	})
}

func TestAdminPricesPage(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		s.deps.Models = func() []string { return []string{"gpt-4o", "meta-llama/Llama-3-8B"} }
		s.rebuild()
		admin := s.signedIn(s.admin)

		w := admin.get("/admin/prices")
		w.expectPage(http.StatusOK, "admin-prices", "unpriced-alert", "set-price-form")
		if got := w.text("unpriced-alert"); !strings.HasPrefix(got, "3 models have no price:") {
			t.Errorf("alert = %q", got)
		}
		for _, m := range []string{"gpt-4o", "meta-llama/Llama-3-8B", "sluice-local"} {
			if got := strings.TrimSpace(w.page().Find(`[data-model="` + m + `"] [data-testid="price-missing"]`).Text()); got != "no price: costs nothing" {
				t.Errorf("%s is not flagged: %q", m, got)
			}
		}

		set := url.Values{"model": {"meta-llama/Llama-3-8B"}, "input_per_mtok": {"0.20"}, "output_per_mtok": {"0.6"}, "cached_input_per_mtok": {""}}
		admin.post("/admin/prices", set).expectRedirect("/admin/prices?done=price")
		w = admin.get("/admin/prices?done=price")
		w.expectPage(http.StatusOK, "flash")
		row := w.page().Find(`[data-model="meta-llama/Llama-3-8B"]`)
		if adminCellText(row, "price-input") != "$0.20" || adminCellText(row, "price-output") != "$0.60" || adminCellText(row, "price-cached") != "$0.20" ||
			row.Find(`[data-testid="price-missing"]`).Length() != 0 {
			t.Errorf("priced row = %q", strings.Join(strings.Fields(row.Text()), " "))
		}
		if got := w.text("unpriced-alert"); !strings.HasPrefix(got, "2 models have no price:") {
			t.Errorf("alert after pricing = %q", got)
		}
		// "Change" fills the form with the current price.
		href, _ := row.Find("a").Attr("href")
		href, _, _ = strings.Cut(href, "#") // browsers do not send the fragment
		w = admin.get(href)
		if w.value("#price-model") != "meta-llama/Llama-3-8B" || w.value("#price-input") != "0.20" || w.value("#price-output") != "0.60" {
			t.Errorf("change form = %q %q %q", w.value("#price-model"), w.value("#price-input"), w.value("#price-output"))
		}

		// Cache-write and reasoning prices are set, shown under the cached
		// price, and refill the change form; a bad one is refused by name.
		claude := url.Values{"model": {"gpt-4o"}, "input_per_mtok": {"3"}, "output_per_mtok": {"15"},
			"cache_creation_per_mtok": {"3.75"}, "reasoning_per_mtok": {"20"}}
		admin.post("/admin/prices", claude).expectRedirect("/admin/prices?done=price")
		w = admin.get("/admin/prices?model=gpt-4o")
		row = w.page().Find(`[data-model="gpt-4o"]`)
		if adminCellText(row, "price-cache-creation") != "cache write $3.75" || adminCellText(row, "price-reasoning") != "reasoning $20.00" ||
			w.value("#price-cache-creation") != "3.75" || w.value("#price-reasoning") != "20.00" {
			t.Errorf("cache write and reasoning: row %q, form %q %q", strings.Join(strings.Fields(row.Text()), " "),
				w.value("#price-cache-creation"), w.value("#price-reasoning"))
		}
		for _, tt := range []struct {
			form    url.Values
			status  int
			message string
		}{
			{url.Values{"model": {"gpt-4o"}, "input_per_mtok": {"1"}, "output_per_mtok": {"1"}, "reasoning_per_mtok": {"lots"}}, 400,
				`reasoning_per_mtok must be a decimal string of dollars per million tokens, from 0 to 1000 with at most 6 decimals, like "0.50"`},
			{url.Values{"model": {"gpt-4o"}, "input_per_mtok": {"1.2345678"}, "output_per_mtok": {"1"}}, 400,
				`input_per_mtok must be a decimal string of dollars per million tokens, from 0 to 1000 with at most 6 decimals, like "0.50"`},
			{url.Values{"model": {"gpt-4o"}, "input_per_mtok": {"1"}, "output_per_mtok": {"-1"}}, 400,
				`output_per_mtok must be a decimal string of dollars per million tokens, from 0 to 1000 with at most 6 decimals, like "0.50"`},
			{url.Values{"model": {""}, "input_per_mtok": {"1"}, "output_per_mtok": {"1"}}, 422, "model must be 1 to 200 characters"},
		} {
			w := admin.post("/admin/prices", tt.form)
			w.expectFormError(tt.status, "set-price-form", tt.message)
			if w.value("#price-model") != tt.form.Get("model") || w.value("#price-input") != tt.form.Get("input_per_mtok") {
				t.Errorf("form not kept: %q %q", w.value("#price-model"), w.value("#price-input"))
			}
		}
	})
}

func TestAdminAuditPage(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		ada := s.signup("ada@example.com", "Analytical Engines")
		admin := s.signedIn(s.admin)
		admin.post("/admin/tiers/free", tierValues(map[string]string{"capacity": "31"})).expectRedirect("/admin/tiers?done=tier")
		admin.post("/admin/prices", url.Values{"model": {"sluice-local"}, "input_per_mtok": {"1"}, "output_per_mtok": {"2"}}).
			expectRedirect("/admin/prices?done=price")
		admin.post(fmt.Sprintf("/admin/organizations/%d/tier", ada.OrgID), url.Values{"tier": {"premium"}}).
			expectRedirect(fmt.Sprintf("/admin/organizations/%d?done=tier", ada.OrgID))

		w := admin.get("/admin/audit")
		w.expectPage(http.StatusOK, "audit-table", "audit-filter")
		if got := w.texts("audit-action"); len(got) < 3 || strings.Join(got[:3], ",") != "organization.tier,price.set,tier.update" {
			t.Errorf("newest first: %v", got)
		}
		first := w.testid("audit-row").First()
		if adminCellText(first, "audit-actor") != adminEmail || adminCellText(first, "audit-org") != "Analytical Engines" ||
			adminCellText(first, "audit-target") != strconv.FormatInt(ada.OrgID, 10) {
			t.Errorf("first row = %q", strings.Join(strings.Fields(first.Text()), " "))
		}

		today := time.Now().UTC().Format(time.DateOnly)
		for q, want := range map[string]string{
			"action=price.":                           "price.set",
			"action=tier.&from=" + today:              "tier.update",
			"org=" + strconv.FormatInt(ada.OrgID, 10): "organization.tier,organization.create",
			"action=tier.&to=2000-01-01":              "",
		} {
			w := admin.get("/admin/audit?" + q)
			w.expectPage(http.StatusOK, "admin-audit")
			if got := strings.Join(w.texts("audit-action"), ","); got != want {
				t.Errorf("%s: %q, want %q", q, got, want)
			}
			if w.testid("audit-clear").Length() != 1 {
				t.Errorf("%s: no way to clear the filter", q)
			}
		}
		w = admin.get("/admin/audit?action=price.&org=" + strconv.FormatInt(ada.OrgID, 10))
		w.expectPage(http.StatusOK, "audit-empty")
		if got := w.value("#audit-action"); got != "price." {
			t.Errorf("filter kept as %q", got)
		}

		for q, msg := range map[string]string{
			"from=yesterday":                "“from” must be a date such as 2027-03-15.",
			"org=acme":                      "The organization must be given by its id, a whole number such as 42.",
			"action=Tier":                   "action must be a prefix of an action such as tier. or price.set: lower-case letters, digits, '.', '_' and '-'",
			"from=2027-03-02&to=2027-03-01": "“from” must be before “to”.",
			"page=0":                        "The page must be a whole number from 1 to 100000.",
		} {
			w := admin.get("/admin/audit?" + q)
			w.expectFormError(http.StatusBadRequest, "audit-filter", msg)
		}

		// Fifty a page, older ones on the next.
		for i := range 60 {
			if err := db.Gorm.Exec(`INSERT INTO audit_log (org_id, actor_user_id, action, target, detail, created_at) VALUES (?, NULL, 'test.bulk', ?, '', ?)`,
				ada.OrgID, strconv.Itoa(i), time.Date(2026, 1, 1, 0, i, 0, 0, time.UTC)).Error; err != nil {
				t.Fatal(err)
			}
		}
		w = admin.get("/admin/audit?action=test.")
		if n := w.testid("audit-row").Length(); n != 50 || w.testid("pager-prev").Length() != 0 {
			t.Fatalf("page 1: %d rows", n)
		}
		if got := w.texts("audit-target"); got[0] != "59" || got[49] != "10" {
			t.Errorf("page 1 runs %s..%s", got[0], got[49])
		}
		next, _ := w.testid("pager-next").Attr("href")
		if next != "/admin/audit?action=test.&page=2" {
			t.Fatalf("next = %q", next)
		}
		w = admin.get(next)
		if n := w.testid("audit-row").Length(); n != 10 || w.testid("pager-next").Length() != 0 {
			t.Errorf("page 2: %d rows", n)
		}
		if prev, _ := w.testid("pager-prev").Attr("href"); prev != "/admin/audit?action=test." {
			t.Errorf("prev = %q", prev)
		}
	})
}

// TestEveryAdminPageActionIsAudited does each change an admin can make
// from the pages and finds its audit entry: the admin as actor, the thing
// changed as target.
func TestEveryAdminPageActionIsAudited(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		ctx := context.Background()
		ada := s.signup("ada@example.com", "Analytical Engines")
		bob := s.signup("bob@example.com", "Babbage & Co")
		tok := s.token(ada, "ci")
		f := s.freeze(tok, time.Hour)
		ra, err := s.billing.RequestUpgrade(ctx, ada, "premium", "")
		if err != nil {
			t.Fatal(err)
		}
		rb, err := s.billing.RequestUpgrade(ctx, bob, "premium", "")
		if err != nil {
			t.Fatal(err)
		}
		admin := s.signedIn(s.admin)
		id := func(n int64) string { return strconv.FormatInt(n, 10) }

		steps := []struct {
			action, path string
			form         url.Values
			target       func() string
		}{
			{"tier.update", "/admin/tiers/free", tierValues(map[string]string{"capacity": "33"}), func() string { return "free" }},
			{"tier.create", "/admin/tiers", planValues(nil), func() string { return "team" }},
			{"tier.delete", "/admin/tiers/team/delete", url.Values{}, func() string { return "team" }},
			{"organization.tier", "/admin/organizations/" + id(bob.OrgID) + "/tier", url.Values{"tier": {"premium"}}, func() string { return id(bob.OrgID) }},
			{"token.unfreeze", "/admin/freezes/" + id(f.ID) + "/lift", url.Values{}, func() string { return id(tok.ID) }},
			{"price.set", "/admin/prices", url.Values{"model": {"gpt-4o"}, "input_per_mtok": {"1"}, "output_per_mtok": {"2"}}, func() string { return "gpt-4o" }},
			{"upgrade.approved", "/admin/upgrade-requests/" + id(ra.ID) + "/approve", url.Values{}, func() string { return id(ra.ID) }},
			{"upgrade.declined", "/admin/upgrade-requests/" + id(rb.ID) + "/decline", url.Values{}, func() string { return id(rb.ID) }},
			{"alias.create", "/admin/aliases", url.Values{"name": {"fast"}, "targets": {"sluice-local"}}, func() string { return "fast" }},
			{"alias.update", "/admin/aliases/fast", url.Values{"targets": {"sluice-local=2"}}, func() string { return "fast" }},
			{"alias.delete", "/admin/aliases/fast/delete", url.Values{}, func() string { return "fast" }},
			{"upstream.create", "/admin/upstreams", upstreamValues(nil), func() string {
				keys, _ := s.store.UpstreamKeys(ctx)
				return id(keys[0].ID)
			}},
		}
		for _, st := range steps {
			if w := admin.post(st.path, st.form); w.Code != http.StatusSeeOther {
				t.Fatalf("%s: %d %s", st.action, w.Code, w.Body.String())
			}
			expectAudited(t, s, st.action, st.target())
		}
		keys, _ := s.store.UpstreamKeys(ctx)
		admin.post("/admin/upstreams/"+id(keys[0].ID)+"/delete", url.Values{}).expectRedirect("/admin/upstreams?done=deleted")
		expectAudited(t, s, "upstream.delete", id(keys[0].ID))
	})
}

// expectAudited finds the newest entry of action and checks it names the
// admin as actor and target as what changed.
func expectAudited(t *testing.T, s *site, action, target string) {
	t.Helper()
	rs, _, err := s.store.AuditEntries(context.Background(), models.AuditQuery{ActionPrefix: action})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) == 0 || rs[0].Action != action {
		t.Errorf("%s: no audit entry", action)
		return
	}
	e := rs[0]
	if e.ActorUserID == nil || *e.ActorUserID != s.admin.ID || e.ActorEmail != adminEmail || e.Target != target {
		t.Errorf("%s: entry %+v, want actor %d and target %q", action, e, s.admin.ID, target)
	}
}

// adminCells is a row's header and data cells' texts, spaces collapsed,
// joined by " | ".
func adminCells(row *goquery.Selection) string {
	return strings.Join(row.Find("th, td").Map(func(_ int, c *goquery.Selection) string {
		return strings.Join(strings.Fields(c.Text()), " ")
	}), " | ")
}
