package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluicehq/sluice/billing"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// shanghai is UTC+8 all year: 2027-03-14 20:00 UTC is already March 15
// there.
const shanghai = "Asia/Shanghai"

// usage stores events as the recorder would, rollups included.
func (s *site) usage(evs ...models.UsageEvent) {
	s.t.Helper()
	if err := s.store.InsertUsageEvents(context.Background(), evs); err != nil {
		s.t.Fatal(err)
	}
}

// event is one admitted request of tok costing cost.
func event(id string, tok models.APIToken, model string, at time.Time, prompt, completion int, cost money.Amount) models.UsageEvent {
	return models.UsageEvent{RequestID: id, OrgID: tok.OrgID, TokenID: tok.ID, Model: model, PromptTokens: prompt,
		CompletionTokens: completion, Cost: cost, Status: 200, CreatedAt: at}
}

// zone sets u's organization's time zone.
func (s *site) zone(u models.Member, zone string) {
	s.t.Helper()
	if err := s.billing.SetTimeZone(context.Background(), u, zone); err != nil {
		s.t.Fatal(err)
	}
}

// budget sets u's organization's budget; a nil limit removes it.
func (s *site) budget(u models.Member, limit *money.Amount, hardStop bool) {
	s.t.Helper()
	if _, err := s.billing.SetBudget(context.Background(), u, models.Budget{Limit: limit, HardStop: hardStop}); err != nil {
		s.t.Fatal(err)
	}
}

func dollarsOf(s string) *money.Amount {
	a, err := money.ParseAmount(s)
	if err != nil {
		panic(err)
	}
	return &a
}

// chart reads a usage chart's exact table: its header and, per bucket,
// the cells after the bucket's name.
func (r *response) chart(id string) (head []string, rows map[string][]string, order []string) {
	r.t.Helper()
	fig := r.page().Find("#" + id)
	if fig.Length() != 1 {
		r.t.Fatalf("chart #%s is missing", id)
	}
	fig.Find("thead th").Each(func(_ int, th *goquery.Selection) { head = append(head, strings.TrimSpace(th.Text())) })
	rows = map[string][]string{}
	fig.Find("tbody tr, tfoot tr").Each(func(_ int, tr *goquery.Selection) {
		name := strings.TrimSpace(tr.Find("th").Text())
		var cells []string
		tr.Find("td").Each(func(_ int, td *goquery.Selection) { cells = append(cells, strings.TrimSpace(td.Text())) })
		rows[name] = cells
		order = append(order, name)
	})
	return head, rows, order
}

// TestBudgetForm saves, refuses and removes a budget as its owner, and
// refuses members.
func TestBudgetForm(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		ctx := context.Background()
		owner := s.signup("ada@example.com", "Analytical Engines")
		b := s.signedIn(owner)
		current := func() string {
			st, err := s.billing.Budget(ctx, owner.OrgID)
			if err != nil {
				t.Fatal(err)
			}
			if st.Limit == nil {
				return "none"
			}
			return fmt.Sprintf("%s hard stop %v", st.Limit, st.HardStop)
		}

		w := b.get("/dashboard")
		if v := w.value(`#budget-limit`); v != "" || w.page().Find(`#budget-hard-stop[checked]`).Length() != 1 {
			t.Errorf("without a budget the form shows %q and hard stop unchecked", v)
		}
		w = b.post("/billing/budget", url.Values{"monthly_limit": {" 12.50 "}, "hard_stop": {"on"}})
		w.expectRedirect("/dashboard?done=budget#budget")
		if got := current(); got != "12.50 hard stop true" {
			t.Errorf("budget = %s", got)
		}
		w = b.get("/dashboard?done=budget")
		w.expectPage(http.StatusOK, "budget-form")
		if got := w.testid("budget-settings").Find(`[data-testid="flash"]`).Text(); got != "Budget saved. It applies from the next request." {
			t.Errorf("flash = %q", got)
		}
		if v := w.value(`#budget-limit`); v != "12.50" {
			t.Errorf("limit field = %q", v)
		}
		if got := w.text("gauge-budget"); got != "$12.50" {
			t.Errorf("gauge-budget = %q", got)
		}

		const bad = `Monthly limit must be a decimal string of dollars such as "10.00", or empty to remove the budget.`
		for _, v := range []string{"ten", "-5", "1e3", "$10", "12.3456789012345", "1000000.01"} {
			w = b.post("/billing/budget", url.Values{"monthly_limit": {v}, "hard_stop": {"on"}})
			w.expectFormError(http.StatusUnprocessableEntity, "budget-form", bad)
			if w.testid("form-error").Closest("#budget").Length() != 1 {
				t.Errorf("%q: the error is not beside the budget form", v)
			}
			if got := w.value(`#budget-limit`); got != v {
				t.Errorf("%q: the field is refilled with %q", v, got)
			}
			if got := current(); got != "12.50 hard stop true" {
				t.Errorf("%q changed the budget to %s", v, got)
			}
		}

		w = b.post("/billing/budget", url.Values{"monthly_limit": {"1000000"}})
		w.expectRedirect("/dashboard?done=budget#budget")
		if got := current(); got != "1000000.00 hard stop false" {
			t.Errorf("budget = %s, want an unchecked hard stop saved as off", got)
		}
		w = b.post("/billing/budget", url.Values{"monthly_limit": {""}, "hard_stop": {"on"}})
		w.expectRedirect("/dashboard?done=budget-removed#budget")
		if got := current(); got != "none" {
			t.Errorf("budget = %s, want none", got)
		}

		// A member sees the budget and cannot change it.
		mia := s.member("mia@example.com", "Mia's Models")
		s.budget(models.Member{User: mia.User, OrgID: mia.OrgID, Role: models.RoleOwner}, dollarsOf("5.00"), true) // as its owner would
		m := s.signedIn(mia)
		w = m.get("/dashboard")
		w.expectPage(http.StatusOK, "budget-readonly", "settings-readonly")
		for _, id := range []string{"budget-form", "time-zone-form", "webhook-form"} {
			if w.testid(id).Length() != 0 {
				t.Errorf("a member sees %s", id)
			}
		}
		for path, msg := range map[string]string{
			"/billing/budget":    "only the organization's owners may set its budget",
			"/billing/time-zone": "only the organization's owners may set its time zone",
			"/billing/webhook":   "only the organization's owners may set its webhook",
		} {
			w = m.post(path, url.Values{"monthly_limit": {"1.00"}, "time_zone": {"UTC"}, "webhook_url": {"https://hooks.example.com/x"}})
			w.expectError(http.StatusForbidden, msg)
		}
		st, err := s.billing.Budget(ctx, mia.OrgID)
		if err != nil || st.Limit == nil || *st.Limit != 5*money.Dollar {
			t.Errorf("a member's post changed the budget: %+v %v", st, err)
		}

		// An admin manages their own organization's.
		s.signedIn(s.admin).post("/billing/budget", url.Values{"monthly_limit": {"3"}}).expectRedirect("/dashboard?done=budget#budget")
	})
}

func TestTimeZoneForm(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		owner := s.signup("ada@example.com", "Analytical Engines")
		b := s.signedIn(owner)
		if v := b.get("/dashboard").value("#time-zone-name"); v != "UTC" {
			t.Errorf("time zone field = %q, want UTC by default", v)
		}
		for _, zone := range []string{"Mars/Olympus", "Local", ""} {
			w := b.post("/billing/time-zone", url.Values{"time_zone": {zone}})
			w.expectFormError(http.StatusUnprocessableEntity, "time-zone-form",
				fmt.Sprintf("%q is not an IANA time zone such as Europe/Berlin or Asia/Shanghai", zone))
			if zone != "" {
				if v := w.value("#time-zone-name"); v != zone {
					t.Errorf("field refilled with %q, want %q", v, zone)
				}
			}
		}
		b.post("/billing/time-zone", url.Values{"time_zone": {" Europe/Berlin "}}).expectRedirect("/dashboard?done=time-zone#time-zone")
		w := b.get("/dashboard?done=time-zone")
		if got := w.testid("time-zone-settings").Find(`[data-testid="flash"]`).Text(); got != "Time zone saved. The charts count days in it now." {
			t.Errorf("flash = %q", got)
		}
		if v := w.value("#time-zone-name"); v != "Europe/Berlin" {
			t.Errorf("time zone field = %q", v)
		}
		if got := w.text("usage-period"); !strings.HasSuffix(got, "days in Europe/Berlin") {
			t.Errorf("usage-period = %q", got)
		}
		if got := w.text("spend-resets"); got != "Apr 1, 2027 02:00 Europe/Berlin" {
			t.Errorf("spend-resets = %q, want the UTC month's end in Berlin summer time", got)
		}
	})
}

func TestWebhookForm(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		ctx := context.Background()
		owner := s.signup("ada@example.com", "Analytical Engines")
		b := s.signedIn(owner)

		for raw, msg := range map[string]string{
			"https://evil.example.net/hook": "webhook: host not allowed: evil.example.net is not among the hosts the operator allows",
			"ftp://hooks.example.com/x":     `webhook: "ftp://hooks.example.com/x" is not an http(s) URL`,
		} {
			w := b.post("/billing/webhook", url.Values{"webhook_url": {raw}})
			w.expectFormError(http.StatusUnprocessableEntity, "webhook-form", msg)
			if v := w.value("#webhook-url"); v != raw {
				t.Errorf("field refilled with %q, want %q", v, raw)
			}
			if w.testid("webhook-secret").Length() != 0 {
				t.Error("a refused webhook shows a secret")
			}
		}

		w := b.post("/billing/webhook", url.Values{"webhook_url": {"https://hooks.example.com/sluice"}})
		w.expectPage(http.StatusOK, "webhook-secret", "webhook-form")
		secret := w.text("webhook-secret-value")
		if !strings.HasPrefix(secret, "whsec_") {
			t.Fatalf("secret = %q", secret)
		}
		o, err := s.store.Organization(ctx, owner.OrgID)
		if err != nil {
			t.Fatal(err)
		}
		if o.WebhookURL != "https://hooks.example.com/sluice" || o.WebhookSecret == secret || strings.Contains(o.WebhookSecret, secret) {
			t.Errorf("stored %q with secret %q: want the URL, the secret sealed", o.WebhookURL, o.WebhookSecret)
		}
		if opened, err := s.billing.OpenSecret(o.WebhookSecret); err != nil || opened != secret {
			t.Errorf("the sealed secret opens to %q, %v", opened, err)
		}
		// Shown once: the next visit has the URL, not the secret.
		w = b.get("/dashboard")
		if w.testid("webhook-secret").Length() != 0 || strings.Contains(w.Body.String(), secret) {
			t.Error("the secret is shown again")
		}
		if v := w.value("#webhook-url"); v != "https://hooks.example.com/sluice" {
			t.Errorf("webhook field = %q", v)
		}

		b.post("/billing/webhook", url.Values{"webhook_url": {"  "}}).expectRedirect("/dashboard?done=webhook-off#webhook")
		if o, _ := s.store.Organization(ctx, owner.OrgID); o.WebhookURL != "" || o.WebhookSecret != "" {
			t.Errorf("webhook still set: %q", o.WebhookURL)
		}
	})
}

// TestInvoicesAndCSV shows the live draft and a finalized month, and
// downloads them; another organization's invoice is not found.
func TestInvoicesAndCSV(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		ctx := context.Background()
		u := s.signup("ada@example.com", "Analytical Engines")
		bob := s.signup("bob@example.com", "Babbage")
		s.customerSince(u, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))
		s.customerSince(bob, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))
		price, err := s.billing.SetPrice(ctx, s.admin.User, "sluice-local", billing.PriceInput{Input: "2.50", Output: "10.00"})
		if err != nil {
			t.Fatal(err)
		}
		tok := s.token(u, "ci")
		feb := event("feb", tok, "sluice-local", time.Date(2027, 2, 10, 12, 0, 0, 0, time.UTC), 1_000_000, 100_000, 3*money.Dollar+50*money.Cent)
		mar := event("mar", tok, "sluice-local", epoch.Add(-time.Hour), 200_000, 50_000, money.Dollar)
		feb.PriceID, mar.PriceID = price.ID, price.ID
		s.usage(feb, mar)
		for _, org := range []int64{u.OrgID, bob.OrgID} {
			if _, err := s.store.EnsureInvoice(ctx, org, time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.billing.FinalizeDue(ctx); err != nil {
			t.Fatal(err)
		}

		b := s.signedIn(u)
		w := b.get("/dashboard")
		w.expectPage(http.StatusOK, "draft-invoice", "past-invoices")
		if got := w.testid("draft-invoice").Find("h3").Text(); strings.Join(strings.Fields(got), " ") != "March 2027 draft" {
			t.Errorf("draft heading = %q", got)
		}
		var lines []string
		w.testid("invoice-line").Each(func(_ int, tr *goquery.Selection) {
			var cells []string
			tr.Find("th, td").Each(func(_ int, c *goquery.Selection) { cells = append(cells, strings.Join(strings.Fields(c.Text()), " ")) })
			lines = append(lines, strings.Join(cells, " | "))
		})
		want := []string{
			"sluice-local 1 request | 200,000 at $2.50/M | 50,000 at $10.00/M | 0 at $2.50/M | $1.00",
			"included credit ($1.00 a month) |  |  |  | -$1.00",
		}
		if fmt.Sprint(lines) != fmt.Sprint(want) {
			t.Errorf("draft lines =\n%q\nwant\n%q", lines, want)
		}
		if got := w.text("draft-total"); got != "$0.00" {
			t.Errorf("draft total = %q", got)
		}
		rows := w.testid("invoice-row")
		if rows.Length() != 1 {
			t.Fatalf("past invoices = %d, want February's", rows.Length())
		}
		if got := strings.Join(strings.Fields(rows.Text()), " "); got != "February 2027 final $2.50 CSV, February 2027" {
			t.Errorf("past invoice = %q", got)
		}
		csvURL, _ := rows.Find(`[data-testid="invoice-csv"]`).Attr("href")
		id, _ := rows.Attr("data-invoice-id")
		if csvURL != "/invoices/"+id+"/csv" {
			t.Errorf("CSV link = %q for invoice %s", csvURL, id)
		}

		w = b.get(csvURL)
		if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "text/csv; charset=utf-8" ||
			w.Header().Get("Content-Disposition") != `attachment; filename="sluice-invoice-2027-02.csv"` {
			t.Fatalf("CSV: %d %q %q", w.Code, w.Header().Get("Content-Type"), w.Header().Get("Content-Disposition"))
		}
		var invID int64
		fmt.Sscan(id, &invID)
		inv, err := s.billing.Invoice(ctx, u.OrgID, invID)
		if err != nil {
			t.Fatal(err)
		}
		if w.Body.String() != string(inv.CSV()) || !strings.Contains(w.Body.String(), "2027-02,total,final invoice,,,,,,,,,2.50,USD") {
			t.Errorf("CSV body =\n%s", w.Body.String())
		}
		draftLink, _ := b.get("/dashboard").testid("draft-csv").Attr("href")
		if w := b.get(draftLink); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "2027-03,usage,") {
			t.Errorf("draft CSV: %d\n%s", w.Code, w.Body.String())
		}

		// Another organization's invoice, or no invoice at all, is a 404 page.
		theirs, err := s.billing.Invoices(ctx, bob.OrgID)
		if err != nil || len(theirs) == 0 {
			t.Fatalf("bob's invoices: %v %v", theirs, err)
		}
		for _, path := range []string{fmt.Sprintf("/invoices/%d/csv", theirs[0].ID), "/invoices/999999/csv", "/invoices/abc/csv", "/invoices/0/csv"} {
			w := b.get(path)
			w.expectError(http.StatusNotFound, "No such invoice.")
		}
		s.anonymous().get(csvURL).expectRedirect("/login")
	})
}

// TestUpgradeRequestFlow asks for another tier, shows the pending request
// instead of the form, refuses a second one and follows the admin's answer.
func TestUpgradeRequestFlow(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		ctx := context.Background()
		u := s.signup("ada@example.com", "Analytical Engines")
		b := s.signedIn(u)

		w := b.get("/dashboard")
		var opts []string
		w.testid("upgrade-form").Find("option").Each(func(_ int, o *goquery.Selection) { opts = append(opts, o.AttrOr("value", "")) })
		if fmt.Sprint(opts) != "[premium]" {
			t.Errorf("upgrade options = %q, want every tier but free", opts)
		}
		if got := w.text("plan-credit"); got != "$1.00 a month" {
			t.Errorf("plan-credit = %q", got)
		}

		for _, tt := range []struct{ tier, note, msg string }{
			{"", "", "tier is required"},
			{"free", "", "the organization is already on the free tier"},
			{"gold", "", "tier gold not found"},
			{"premium", strings.Repeat("x", 501), "note must be at most 500 characters"},
		} {
			w := b.post("/billing/upgrade", url.Values{"tier": {tt.tier}, "note": {tt.note}})
			w.expectFormError(http.StatusUnprocessableEntity, "upgrade-form", tt.msg)
			if w.testid("form-error").Closest("#upgrade").Length() != 1 {
				t.Errorf("%q: the error is not beside the upgrade form", tt.msg)
			}
		}

		w = b.post("/billing/upgrade", url.Values{"tier": {"premium"}, "note": {"We launch on Monday"}})
		w.expectRedirect("/dashboard?done=upgrade#upgrade")
		w = b.get("/dashboard?done=upgrade")
		w.expectPage(http.StatusOK, "upgrade-pending")
		if w.testid("upgrade-form").Length() != 0 {
			t.Error("the form is shown while a request is pending")
		}
		if got := w.text("upgrade-pending-tier"); got != "premium" {
			t.Errorf("pending tier = %q", got)
		}
		if got := w.text("upgrade-pending"); !strings.Contains(got, "pending") || !strings.Contains(got, "We launch on Monday") {
			t.Errorf("pending = %q", got)
		}
		if got := w.testid("upgrade").Find(`[data-testid="flash"]`).Text(); got != "Upgrade requested. An admin will answer it." {
			t.Errorf("flash = %q", got)
		}

		// A second request, from a page opened earlier, is a conflict.
		w = b.post("/billing/upgrade", url.Values{"tier": {"premium"}})
		w.expectPage(http.StatusConflict, "upgrade-pending", "form-error")
		if got := w.text("form-error"); got != "the organization already has a pending request; an admin will answer it" {
			t.Errorf("conflict = %q", got)
		}
		pending, err := s.store.UpgradeRequests(ctx, u.OrgID, models.UpgradePending)
		if err != nil || len(pending) != 1 {
			t.Fatalf("pending requests = %v, %v", pending, err)
		}

		// The admin approves: the page follows.
		if _, err := s.billing.DecideUpgrade(ctx, s.admin.User, pending[0].ID, true); err != nil {
			t.Fatal(err)
		}
		w = b.get("/dashboard")
		if got := w.text("upgrade-last"); !strings.Contains(got, "Your request to move to premium was approved on") {
			t.Errorf("upgrade-last = %q", got)
		}
		opts = nil
		w.testid("upgrade-form").Find("option").Each(func(_ int, o *goquery.Selection) { opts = append(opts, o.AttrOr("value", "")) })
		if fmt.Sprint(opts) != "[free]" || w.text("plan-fee") != "$49.00" {
			t.Errorf("after the upgrade: options %q, fee %q", opts, w.text("plan-fee"))
		}

		// Upgrades are the owners': a member sees neither the form nor the
		// requests, and a post of theirs is refused.
		mia := s.member("mia@example.com", "Mia's Models")
		m := s.signedIn(mia)
		w = m.get("/dashboard")
		if got := w.text("upgrade-readonly"); got != "Only the organization's owners can request an upgrade." || w.testid("upgrade-form").Length() != 0 {
			t.Errorf("a member's plan card: %q, %d forms", got, w.testid("upgrade-form").Length())
		}
		m.post("/billing/upgrade", url.Values{"tier": {"premium"}}).expectError(http.StatusForbidden, "only the organization's owners may request an upgrade")
	})
}

// TestBillingFormsNeedASignedInSameSiteUser: anonymous posts go to the
// login page, cross-site ones are refused before they change anything.
func TestBillingFormsNeedASignedInSameSiteUser(t *testing.T) {
	t.Parallel()
	s := newSite(t, testdb.SQLite(t))
	u := s.signup("ada@example.com", "Analytical Engines")
	forms := map[string]url.Values{
		"/billing/budget":    {"monthly_limit": {"1.00"}},
		"/billing/time-zone": {"time_zone": {"Europe/Berlin"}},
		"/billing/webhook":   {"webhook_url": {"https://hooks.example.com/x"}},
		"/billing/upgrade":   {"tier": {"premium"}},
	}
	for path, form := range forms {
		s.anonymous().post(path, form).expectRedirect("/login")
		w := s.signedIn(u).do(http.MethodPost, path, form, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"})
		w.expectError(http.StatusForbidden, refusedOrigin)
	}
	o, err := s.store.Organization(context.Background(), u.OrgID)
	if err != nil {
		t.Fatal(err)
	}
	reqs, _ := s.store.UpgradeRequests(context.Background(), u.OrgID, "")
	if o.BudgetLimit != nil || o.TimeZone != "" || o.WebhookURL != "" || len(reqs) != 0 {
		t.Errorf("refused posts changed the organization: %+v, %d requests", o, len(reqs))
	}
}

// A fee edit in the admin's tiers form mid-month is two lines on the
// customer's draft and on the admin's invoice page: the month until the
// edit at the old fee, the rest at the new one.
func TestAFeeEditMidMonthIsTwoInvoiceLines(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		ctx := context.Background()
		u := s.signup("ada@example.com", "Analytical Engines")
		if _, err := s.store.SetOrganizationTier(ctx, s.admin.User, u.OrgID, "premium"); err != nil {
			t.Fatal(err)
		}
		s.customerSince(u, time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)) // a premium customer since March 1st
		admin := s.signedIn(s.admin)
		admin.post("/admin/tiers/premium", tierValues(map[string]string{"capacity": "200", "refill_per_sec": "5", "refill_floor": "0",
			"autotune": "-", "plan": "1", "monthly_fee": "59", "included_credit": "10", "overage": "bill"})).expectRedirect("/admin/tiers?done=tier")

		want := []string{
			"premium plan at $49.00 a month, 1 March 2027 00:00 – 15 March 2027 10:30 UTC (14.44 of 31 days)",
			"premium plan at $59.00 a month, 15 March 2027 10:30 – 1 April 2027 00:00 UTC (16.56 of 31 days)",
		}
		w := s.signedIn(u).get("/dashboard")
		w.expectPage(http.StatusOK, "draft-invoice")
		if got := w.texts("line-description"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("draft lines = %q\nwant %q", got, want)
		}
		if got := w.texts("line-amount"); fmt.Sprint(got) != "[$22.82 $31.52]" || w.text("draft-total") != "$54.34" {
			t.Errorf("draft amounts = %q, total %q", got, w.text("draft-total"))
		}
		invs, err := s.billing.Invoices(ctx, u.OrgID)
		if err != nil || len(invs) != 1 {
			t.Fatalf("%+v %v", invs, err)
		}
		inv := admin.get(fmt.Sprintf("/admin/organizations/%d/invoices/%d", u.OrgID, invs[0].ID))
		inv.expectPage(http.StatusOK, "admin-invoice", "invoice-line")
		var lines []string
		inv.testid("invoice-line").Each(func(_ int, row *goquery.Selection) {
			lines = append(lines, strings.TrimSpace(row.Find("td").First().Text())+" | "+strings.TrimSpace(row.Find("td").Last().Text()))
		})
		if fmt.Sprint(lines) != fmt.Sprint([]string{want[0] + " | $22.82", want[1] + " | $31.52"}) {
			t.Errorf("admin invoice lines = %q", lines)
		}
	})
}
