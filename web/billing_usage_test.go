package web_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// TestDashboardChartsCountDaysInTheOrganizationsZone seeds usage around a
// Shanghai midnight and reads every chart's numbers back.
func TestDashboardChartsCountDaysInTheOrganizationsZone(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		u := s.signup("ada@example.com", "Analytical Engines")
		s.zone(u, shanghai)
		tok := s.token(u, "ci")
		other := s.token(s.signup("bob@example.com", "Babbage"), "other")
		s.usage(
			// 04:00 on March 15 in Shanghai, still March 14 in UTC.
			event("late-utc", tok, "sluice-local", time.Date(2027, 3, 14, 20, 0, 0, 0, time.UTC), 100, 50, 761_000_000), // $0.000761
			event("today", tok, "sluice-local", epoch.Add(-time.Hour), 10, 5, 2*money.Dollar+5*money.Cent),
			// 23:00 on March 14 in Shanghai.
			event("yesterday", tok, "sluice-local", time.Date(2027, 3, 14, 15, 0, 0, 0, time.UTC), 7, 3, money.Picodollar),
			// 00:30 on February 14, the first day shown; 23:00 the day before is not shown.
			event("first-day", tok, "sluice-local", time.Date(2027, 2, 13, 16, 30, 0, 0, time.UTC), 1, 1, 0),
			event("too-old", tok, "sluice-local", time.Date(2027, 2, 13, 15, 0, 0, 0, time.UTC), 1000, 1000, money.Dollar),
			event("not-hers", other, "sluice-local", epoch.Add(-time.Hour), 5000, 5000, 9*money.Dollar),
		)
		if err := s.store.AddRejections(context.Background(), []models.Rejections{{OrgID: tok.OrgID, TokenID: tok.ID, Model: "sluice-local",
			Hour: time.Date(2027, 3, 14, 21, 0, 0, 0, time.UTC), Requests: 3, Frozen: 1}}); err != nil {
			t.Fatal(err)
		}
		b := s.signedIn(u)
		w := b.get("/dashboard")
		w.expectPage(http.StatusOK, "usage", "spend", "invoices", "settings", "plan")
		// Ready for a strict Content Security Policy: no inline style or script.
		for _, bad := range []string{"style=", "<style", "<script", "javascript:"} {
			if strings.Contains(strings.ToLower(w.Body.String()), bad) {
				t.Errorf("the dashboard contains %q", bad)
			}
		}
		if got := w.text("usage-period"); got != "Last 30 days, Feb 14 to Mar 15, days in Asia/Shanghai" {
			t.Errorf("usage-period = %q", got)
		}
		if got := w.text("requests-today"); got != "2" {
			t.Errorf("requests-today = %q, want the 2 of March 15 in Shanghai", got)
		}
		for _, id := range []string{"range-30d", "by-none"} {
			if cur, _ := w.testid(id).Attr("aria-current"); cur != "true" {
				t.Errorf("%s is not the current switch", id)
			}
		}

		head, rows, order := w.chart("usage-requests")
		if fmt.Sprint(head) != "[Day Requests]" {
			t.Errorf("requests head = %q", head)
		}
		// Every day is there, with or without usage, oldest first.
		if len(order) != 31 || order[0] != "Feb 14" || order[29] != "Mar 15" || order[30] != "Total" {
			t.Fatalf("days = %q, want Feb 14 … Mar 15 and the total", order)
		}
		for day, want := range map[string]string{"Mar 15": "2", "Mar 14": "1", "Feb 14": "1", "Mar 1": "0", "Total": "4"} {
			if got := fmt.Sprint(rows[day]); got != "["+want+"]" {
				t.Errorf("requests on %s = %s, want %s", day, got, want)
			}
		}
		head, rows, _ = w.chart("usage-tokens")
		if fmt.Sprint(head) != "[Day Input Output Total]" || fmt.Sprint(rows["Mar 15"]) != "[110 55 165]" || fmt.Sprint(rows["Total"]) != "[118 59 177]" {
			t.Errorf("tokens: head %q, Mar 15 %q, total %q", head, rows["Mar 15"], rows["Total"])
		}
		_, rows, _ = w.chart("usage-rejections")
		if fmt.Sprint(rows["Mar 15"]) != "[4]" || fmt.Sprint(rows["Mar 14"]) != "[0]" || fmt.Sprint(rows["Total"]) != "[4]" {
			t.Errorf("rejections: Mar 15 %q, Mar 14 %q, total %q", rows["Mar 15"], rows["Mar 14"], rows["Total"])
		}
		// Money is exact, down to the picodollar.
		_, rows, _ = w.chart("usage-cost")
		for day, want := range map[string]string{"Mar 15": "$2.050761", "Mar 14": "$0.000000000001", "Mar 1": "$0.00", "Total": "$2.050761000001"} {
			if got := fmt.Sprint(rows[day]); got != "["+want+"]" {
				t.Errorf("cost on %s = %s, want %s", day, got, want)
			}
		}

		// The last 48 hours, labelled in Shanghai time.
		w = b.get("/dashboard?range=48h")
		w.expectPage(http.StatusOK, "usage")
		if cur, _ := w.testid("range-48h").Attr("aria-current"); cur != "true" {
			t.Error("range-48h is not the current switch")
		}
		if got := w.text("usage-period"); got != "Last 48 hours, Mar 13 19:00 to Mar 15 18:00, Asia/Shanghai time" {
			t.Errorf("usage-period = %q", got)
		}
		_, rows, order = w.chart("usage-requests")
		if len(order) != 49 || order[0] != "Sat 19:00" || order[47] != "Mon 18:00" {
			t.Fatalf("hours = %q, want Sat 19:00 … Mon 18:00", order)
		}
		for hour, want := range map[string]string{"Mon 04:00": "1", "Mon 17:00": "1", "Sun 23:00": "1", "Mon 18:00": "0", "Total": "3"} {
			if got := fmt.Sprint(rows[hour]); got != "["+want+"]" {
				t.Errorf("requests at %s = %s, want %s", hour, got, want)
			}
		}

		// In UTC the late event is on March 14 instead.
		s.zone(u, "UTC")
		_, rows, _ = b.get("/dashboard").chart("usage-requests")
		if fmt.Sprint(rows["Mar 15"]) != "[1]" || fmt.Sprint(rows["Mar 14"]) != "[2]" {
			t.Errorf("in UTC: Mar 15 %q, Mar 14 %q, want 1 and 2", rows["Mar 15"], rows["Mar 14"])
		}
	})
}

// TestDashboardChartsByModelAndToken switches the grouping with plain
// links; tokens are named by name and prefix, never by their secret, and
// the long tail folds into "Other".
func TestDashboardChartsByModelAndToken(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		u := s.signup("ada@example.com", "Analytical Engines")
		ctx := context.Background()
		ci, ciSecret, err := s.accounts.CreateToken(ctx, u, "ci", 0)
		if err != nil {
			t.Fatal(err)
		}
		laptop, laptopSecret, err := s.accounts.CreateToken(ctx, u, "laptop", 0)
		if err != nil {
			t.Fatal(err)
		}
		// Two tokens named alike are told apart by their prefixes.
		old, _, err := s.accounts.CreateToken(ctx, u, "laptop", 0)
		if err != nil {
			t.Fatal(err)
		}
		at := epoch.Add(-time.Hour)
		var evs []models.UsageEvent
		for i := range 3 {
			evs = append(evs, event(fmt.Sprint("ci-gpt-", i), ci, "gpt-4o", at, 10, 10, money.Cent))
		}
		evs = append(evs, event("ci-local", ci, "sluice-local", at, 10, 10, 0), event("laptop-local", laptop, "sluice-local", at, 10, 10, 0),
			event("old-laptop-1", old, "gpt-4o", at.Add(-24*time.Hour), 10, 10, 0), event("old-laptop-2", old, "gpt-4o", at.Add(-24*time.Hour), 10, 10, 0))
		s.usage(evs...)
		b := s.signedIn(u)

		w := b.get("/dashboard?by=model")
		w.expectPage(http.StatusOK, "chart-legend")
		if cur, _ := w.testid("by-model").Attr("aria-current"); cur != "true" {
			t.Error("by-model is not the current switch")
		}
		head, rows, _ := w.chart("usage-requests")
		if fmt.Sprint(head) != "[Day gpt-4o sluice-local Total]" || fmt.Sprint(rows["Mar 15"]) != "[3 2 5]" || fmt.Sprint(rows["Mar 14"]) != "[2 0 2]" {
			t.Errorf("by model: head %q, Mar 15 %q", head, rows["Mar 15"])
		}
		_, rows, _ = w.chart("usage-cost")
		if fmt.Sprint(rows["Mar 15"]) != "[$0.03 $0.00 $0.03]" {
			t.Errorf("cost by model on Mar 15 = %q", rows["Mar 15"])
		}
		// The switches keep the other choice.
		if href, _ := w.testid("range-48h").Attr("href"); href != "/dashboard?by=model&range=48h#usage" {
			t.Errorf("range-48h links to %q", href)
		}

		w = b.get("/dashboard?by=token&range=30d")
		head, rows, _ = w.chart("usage-requests")
		want := []string{"Day", "ci", "laptop (" + old.Prefix + "…)", "laptop (" + laptop.Prefix + "…)", "Total"}
		if fmt.Sprint(head) != fmt.Sprint(want) || fmt.Sprint(rows["Mar 15"]) != "[4 0 1 5]" || fmt.Sprint(rows["Mar 14"]) != "[0 2 0 2]" {
			t.Errorf("by token: head %q, want %q; Mar 15 %q, Mar 14 %q", head, want, rows["Mar 15"], rows["Mar 14"])
		}
		for _, secret := range []string{ciSecret, laptopSecret} {
			if strings.Contains(w.Body.String(), secret) {
				t.Error("a token's secret is on the dashboard")
			}
		}

		// Unknown switches fall back to the defaults.
		w = b.get("/dashboard?by=secret&range=1y")
		if head, _, _ := w.chart("usage-requests"); fmt.Sprint(head) != "[Day Requests]" {
			t.Errorf("unknown switches: head %q", head)
		}

		// Ten models: the five busiest, then the other five as one.
		evs = nil
		for m := range 8 {
			for i := range 20 - m {
				evs = append(evs, event(fmt.Sprintf("m%d-%d", m, i), ci, fmt.Sprintf("model-%d", m), at.Add(-48*time.Hour), 1, 1, 0))
			}
		}
		s.usage(evs...)
		w = b.get("/dashboard?by=model")
		head, rows, _ = w.chart("usage-requests")
		if fmt.Sprint(head) != "[Day model-0 model-1 model-2 model-3 model-4 Other Total]" {
			t.Errorf("folded head = %q", head)
		}
		if fmt.Sprint(rows["Mar 13"]) != "[20 19 18 17 16 42 132]" {
			t.Errorf("folded Mar 13 = %q, want Other = 15+14+13", rows["Mar 13"])
		}
		if fmt.Sprint(rows["Mar 15"]) != "[0 0 0 0 0 5 5]" || fmt.Sprint(rows["Mar 14"]) != "[0 0 0 0 0 2 2]" {
			t.Errorf("folded Mar 15 = %q, want gpt-4o and sluice-local in Other", rows["Mar 15"])
		}
		if got := w.text("usage-folded"); got != "The smallest 5 series are added up as “Other”." {
			t.Errorf("usage-folded = %q", got)
		}
	})
}

// TestSpendGaugeAndBudgetBanner moves one month's spending against
// budgets of several sizes.
func TestSpendGaugeAndBudgetBanner(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		t.Parallel()
		s := newSite(t, db)
		ctx := context.Background()
		u := s.signup("ada@example.com", "Analytical Engines")
		s.zone(u, shanghai)
		// Premium bills overage, so only the budget speaks.
		if _, err := s.store.SetOrganizationTier(ctx, s.admin.User, u.OrgID, "premium"); err != nil {
			t.Fatal(err)
		}
		tok := s.token(u, "ci")
		s.usage(event("a", tok, "sluice-local", epoch.Add(-time.Hour), 10, 10, 9*money.Dollar+99*money.Cent),
			event("b", tok, "sluice-local", time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC), 10, 10, money.Cent),
			event("last-month", tok, "sluice-local", time.Date(2027, 2, 28, 23, 59, 0, 0, time.UTC), 10, 10, 50*money.Dollar))
		const resets = "Apr 1, 2027 08:00 Asia/Shanghai"
		tests := []struct {
			limit    string // "" for none
			hardStop bool
			state    string // the gauge's
			percent  string // the banner's; "" for none
			says     string
		}{
			{limit: "", state: "none"},
			{limit: "25.00", hardStop: true, state: "ok"},
			{limit: "20.00", hardStop: true, state: "ok", percent: "50", says: "You have spent $10.00 of your $20.00 monthly budget; it resets on " + resets + "."},
			{limit: "12.50", hardStop: true, state: "warn", percent: "80", says: "Requests that would take spending past it are refused until " + resets + "."},
			{limit: "12.50", state: "warn", percent: "80", says: "Hard stop is off: requests continue past the budget."},
			{limit: "10.00", hardStop: true, state: "danger", percent: "100",
				says: "Budget reached. You have spent $10.00 of your $10.00 monthly budget, so API requests are refused until " + resets + "."},
			{limit: "8.00", state: "danger", percent: "100", says: "Hard stop is off, so requests are still served"},
		}
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s hard stop %v", tt.limit, tt.hardStop), func(t *testing.T) {
				var limit *money.Amount
				if tt.limit != "" {
					limit = dollarsOf(tt.limit)
				}
				s.budget(u, limit, tt.hardStop)
				w := s.signedIn(u).get("/dashboard")
				w.t = t
				w.expectPage(http.StatusOK, "gauge", "spend")
				if got, _ := w.testid("gauge").Attr("data-state"); got != tt.state {
					t.Errorf("gauge state = %q, want %q", got, tt.state)
				}
				if got := w.text("gauge-spent"); got != "$10.00" {
					t.Errorf("gauge-spent = %q, want this month's $10.00", got)
				}
				if got := w.text("spend-resets"); got != resets {
					t.Errorf("spend-resets = %q", got)
				}
				banner := w.testid("budget-banner")
				if tt.percent == "" {
					if banner.Length() != 0 {
						t.Errorf("banner below 50%%: %q", w.text("budget-banner"))
					}
					return
				}
				if got, _ := banner.Attr("data-percent"); got != tt.percent {
					t.Errorf("banner percent = %q, want %s", got, tt.percent)
				}
				if got := w.text("budget-banner"); !strings.Contains(got, tt.says) {
					t.Errorf("banner = %q\nwant it to say %q", got, tt.says)
				}
				if w.testid("credit-banner").Length() != 0 {
					t.Error("premium bills overage, yet the credit banner shows")
				}
			})
		}

		// The free tier blocks past its $1.00 credit.
		free := s.signup("bob@example.com", "Babbage")
		s.customerSince(free, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))
		s.usage(event("bob", s.token(free, "ci"), "sluice-local", epoch.Add(-time.Hour), 10, 10, money.Dollar))
		w := s.signedIn(free).get("/dashboard")
		w.expectPage(http.StatusOK, "credit-banner")
		want := "Included credit used up. The free tier's $1.00 of included credit for this month is spent, so requests to priced models are refused until Apr 1, 2027 00:00 UTC. Request an upgrade to keep going."
		if got := w.text("credit-banner"); got != want {
			t.Errorf("credit banner = %q\nwant %q", got, want)
		}

		// An organization that signs up now, on March 15th at 10:30, has
		// the free plan's credit for the rest of the month: $1.00 ×
		// 1431000 / 2678400 seconds, to the picodollar.
		late := s.signup("cy@example.com", "Late Starters")
		w = s.signedIn(late).get("/dashboard")
		w.expectPage(http.StatusOK, "spend-credit")
		if got, want := w.text("spend-credit"), "The free plan includes $1.00 of usage a month; this month, prorated, $0.534274193548; "+
			"past it, requests to priced models are refused."; got != want {
			t.Errorf("spend-credit = %q\nwant %q", got, want)
		}
		if got := w.text("gauge-credit"); got != "$0.534274193548" {
			t.Errorf("gauge-credit = %q, want the month's share", got)
		}
	})
}

// TestWithheldCreditSaysHowToGetIt: on a Sluice that sends mail, an
// organization whose plan's credit waits for a verified owner is told so
// on its dashboard, with the way to its owner's account page (it read as a
// plan with no credit at all); once the address is verified the line
// gives way to the credit itself.
func TestWithheldCreditSaysHowToGetIt(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		s := newSite(t, db, models.WithEmailVerification())
		ada := s.signup("ada@example.com", "Acme")
		s.customerSince(ada, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))
		w := s.signedIn(ada).get("/dashboard")
		w.expectPage(http.StatusOK, "spend-credit-withheld")
		want := "The free plan includes $1.00 of usage a month once an owner's email address is verified: verify yours on your account page."
		if got := w.text("spend-credit-withheld"); got != want {
			t.Errorf("spend-credit-withheld = %q\nwant %q", got, want)
		}
		if w.testid("spend-credit-withheld").Find(`a[href="/account"]`).Length() != 1 {
			t.Error("the line does not link to the account page")
		}
		if w.testid("spend-credit").Length() != 0 {
			t.Error("a withheld credit is shown as credit")
		}
		// A member's own address would not release it: they are sent to an owner.
		bob := s.member("bob@example.com", "Acme")
		w = s.signedIn(bob).get("/dashboard")
		if got, want := w.text("spend-credit-withheld"), "The free plan includes $1.00 of usage a month once an owner's email address is verified: "+
			"ask an owner to verify theirs on their account page."; got != want {
			t.Errorf("a member's spend-credit-withheld = %q\nwant %q", got, want)
		}

		if err := db.Gorm.Exec(`UPDATE users SET email_verified_at = ? WHERE email = ?`, s.clock.Now(), "ada@example.com").Error; err != nil {
			t.Fatal(err)
		}
		w = s.signedIn(ada).get("/dashboard")
		w.expectPage(http.StatusOK, "spend-credit")
		if w.testid("spend-credit-withheld").Length() != 0 {
			t.Error("the withheld line stays after the owner's address is verified")
		}
	})
}
