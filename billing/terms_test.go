package billing

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/chat"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// change is one thing that happens to the plan at a time: new terms for a
// tier (fee and credit as decimal strings, "" keeping the value), or the
// customer's move to another tier by an admin or an approved request.
type change struct {
	at          time.Time
	tier        string // whose terms change; with neither fee nor credit, the customer moves to it
	fee, credit string
	upgrade     bool // the move is a request the customer filed and an admin approved
}

// apply makes the change at its time.
func (f *fixture) apply(org models.Organization, owner models.Member, c change) {
	f.t.Helper()
	ctx := context.Background()
	f.to(c.at)
	switch {
	case c.fee != "" || c.credit != "":
		cur, err := f.store.TierByName(ctx, c.tier)
		if err != nil {
			f.t.Fatal(err)
		}
		l := cur.Settings()
		if c.fee != "" {
			l.MonthlyFee = dollars(f.t, c.fee)
		}
		if c.credit != "" {
			l.IncludedCredit = dollars(f.t, c.credit)
		}
		if _, err := f.acc.UpdateTier(ctx, f.admin, c.tier, l); err != nil {
			f.t.Fatal(err)
		}
	case c.upgrade:
		r, err := f.svc.RequestUpgrade(ctx, owner, c.tier, "")
		if err != nil {
			f.t.Fatal(err)
		}
		if _, err := f.svc.DecideUpgrade(ctx, f.admin, r.ID, true); err != nil {
			f.t.Fatal(err)
		}
	default:
		if _, err := f.acc.SetOrganizationTier(ctx, f.admin, org.ID, c.tier); err != nil {
			f.t.Fatal(err)
		}
	}
}

// to moves the clock forward to at.
func (f *fixture) to(at time.Time) {
	f.t.Helper()
	if d := at.Sub(f.clock.Now()); d < 0 {
		f.t.Fatalf("the clock cannot go back from %v to %v", f.clock.Now(), at)
	} else {
		f.clock.Advance(d)
	}
}

func dollars(t *testing.T, s string) money.Amount {
	t.Helper()
	a, err := money.ParseAmount(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// lines are an invoice's lines as "kind | description | amount", and its
// total.
func lines(inv Invoice) []string {
	out := make([]string, 0, len(inv.Lines)+1)
	for _, l := range inv.Lines {
		out = append(out, l.Kind+" | "+l.Description+" | "+l.Amount.StringCents())
	}
	return append(out, "total | "+inv.Status+" | "+inv.Total.StringCents())
}

// invoiceOf is orgID's invoice for the month starting at period, as the
// API shows it.
func (f *fixture) invoiceOf(orgID int64, period time.Time) Invoice {
	f.t.Helper()
	ctx := context.Background()
	r, err := f.store.EnsureInvoice(ctx, orgID, period)
	if err != nil {
		f.t.Fatal(err)
	}
	inv, err := f.svc.Invoice(ctx, orgID, r.ID)
	if err != nil {
		f.t.Fatal(err)
	}
	return inv
}

func day(y int, m time.Month, d, h, min int) time.Time {
	return time.Date(y, m, d, h, min, 0, 0, time.UTC)
}

// The usage line of every case: $100 of gpt-x, so every credit line is
// whole (the credit is capped by usage).
const usageLine = "usage | gpt-x at 1.00 in / 1.00 out per million tokens, from %s 00:00 UTC | 100.00"

// An invoice bills each (tier, terms version) pair in force during the
// month for its share of the month, exactly, as a line of its own rounded
// once; no change rewrites the time before it.
func TestInvoicesKeepTheTermsInForce(t *testing.T) {
	cases := []struct {
		name    string
		tier    string // the customer's at the start
		start   time.Time
		changes []change
		months  map[time.Time][]string // each month's lines
	}{{
		name: "a fee edit mid-month: two lines, each rounded once (5.005 and 10.005), so the total is 105.02 where the exact sum is 105.01",
		tier: "premium", start: day(2026, 11, 1, 0, 0),
		changes: []change{{at: day(2026, 11, 1, 0, 0), tier: "premium", fee: "10.01"}, {at: day(2026, 11, 16, 0, 0), tier: "premium", fee: "20.01"}},
		months: map[time.Time][]string{day(2026, 11, 1, 0, 0): {
			"fee | premium plan at $10.01 a month, 1–15 November 2026 (15 of 30 days) | 5.01",
			"fee | premium plan at $20.01 a month, 16–30 November 2026 (15 of 30 days) | 10.01",
			fmt.Sprintf(usageLine, "2026-11-01"),
			"credit | included credit ($10.00 a month, premium plan), 1–15 November 2026 (15 of 30 days) | -5.00",
			"credit | included credit ($10.00 a month, premium plan), 16–30 November 2026 (15 of 30 days) | -5.00",
			"total | draft | 105.02"}},
	}, {
		name: "two edits in one day: three versions, to the second",
		tier: "premium", start: day(2026, 11, 1, 0, 0),
		changes: []change{{at: day(2026, 11, 10, 9, 0), tier: "premium", fee: "59"}, {at: day(2026, 11, 10, 17, 30), tier: "premium", fee: "69"}},
		months: map[time.Time][]string{day(2026, 11, 1, 0, 0): {
			"fee | premium plan at $49.00 a month, 1 November 2026 00:00 – 10 November 2026 09:00 UTC (9.38 of 30 days) | 15.31",
			"fee | premium plan at $59.00 a month, 10 November 2026 09:00 – 10 November 2026 17:30 UTC (0.35 of 30 days) | 0.70",
			"fee | premium plan at $69.00 a month, 10 November 2026 17:30 – 1 December 2026 00:00 UTC (20.27 of 30 days) | 46.62",
			fmt.Sprintf(usageLine, "2026-11-01"),
			"credit | included credit ($10.00 a month, premium plan), 1 November 2026 00:00 – 10 November 2026 09:00 UTC (9.38 of 30 days) | -3.13",
			"credit | included credit ($10.00 a month, premium plan), 10 November 2026 09:00 – 10 November 2026 17:30 UTC (0.35 of 30 days) | -0.12",
			"credit | included credit ($10.00 a month, premium plan), 10 November 2026 17:30 – 1 December 2026 00:00 UTC (20.27 of 30 days) | -6.76",
			"total | draft | 152.62"}},
	}, {
		name: "an admin moves the customer from free to premium on the 11th",
		tier: "free", start: day(2026, 11, 1, 0, 0),
		changes: []change{{at: day(2026, 11, 11, 0, 0), tier: "premium"}},
		months: map[time.Time][]string{day(2026, 11, 1, 0, 0): {
			"fee | premium plan at $49.00 a month, 11–30 November 2026 (20 of 30 days) | 32.67",
			fmt.Sprintf(usageLine, "2026-11-01"),
			"credit | included credit ($1.00 a month, free plan), 1–10 November 2026 (10 of 30 days) | -0.33",
			"credit | included credit ($10.00 a month, premium plan), 11–30 November 2026 (20 of 30 days) | -6.67",
			"total | draft | 125.67"}},
	}, {
		name: "an approved upgrade at noon",
		tier: "free", start: day(2026, 11, 1, 0, 0),
		changes: []change{{at: day(2026, 11, 21, 12, 0), tier: "premium", upgrade: true}},
		months: map[time.Time][]string{day(2026, 11, 1, 0, 0): {
			"fee | premium plan at $49.00 a month, 21 November 2026 12:00 – 1 December 2026 00:00 UTC (9.50 of 30 days) | 15.52",
			fmt.Sprintf(usageLine, "2026-11-01"),
			"credit | included credit ($1.00 a month, free plan), 1 November 2026 00:00 – 21 November 2026 12:00 UTC (20.50 of 30 days) | -0.68",
			"credit | included credit ($10.00 a month, premium plan), 21 November 2026 12:00 – 1 December 2026 00:00 UTC (9.50 of 30 days) | -3.17",
			"total | draft | 111.67"}},
	}, {
		name: "a leap-year February has 29 days",
		tier: "premium", start: day(2028, 2, 1, 0, 0),
		changes: []change{{at: day(2028, 2, 15, 0, 0), tier: "premium", fee: "59", credit: "5"}},
		months: map[time.Time][]string{day(2028, 2, 1, 0, 0): {
			"fee | premium plan at $49.00 a month, 1–14 February 2028 (14 of 29 days) | 23.66",
			"fee | premium plan at $59.00 a month, 15–29 February 2028 (15 of 29 days) | 30.52",
			fmt.Sprintf(usageLine, "2028-02-01"),
			"credit | included credit ($10.00 a month, premium plan), 1–14 February 2028 (14 of 29 days) | -4.83",
			"credit | included credit ($5.00 a month, premium plan), 15–29 February 2028 (15 of 29 days) | -2.59",
			"total | draft | 146.76"}},
	}, {
		name: "a 31-day month",
		tier: "premium", start: day(2027, 1, 1, 0, 0),
		changes: []change{{at: day(2027, 1, 11, 0, 0), tier: "premium", fee: "59"}},
		months: map[time.Time][]string{day(2027, 1, 1, 0, 0): {
			"fee | premium plan at $49.00 a month, 1–10 January 2027 (10 of 31 days) | 15.81",
			"fee | premium plan at $59.00 a month, 11–31 January 2027 (21 of 31 days) | 39.97",
			fmt.Sprintf(usageLine, "2027-01-01"),
			"credit | included credit ($10.00 a month, premium plan), 1–10 January 2027 (10 of 31 days) | -3.23",
			"credit | included credit ($10.00 a month, premium plan), 11–31 January 2027 (21 of 31 days) | -6.77",
			"total | draft | 145.78"}},
	}, {
		name: "an edit exactly at the month's boundary: each month whole at its own terms, no line of no time",
		tier: "premium", start: day(2026, 11, 1, 0, 0),
		changes: []change{{at: day(2026, 12, 1, 0, 0), tier: "premium", fee: "59", credit: "12"}},
		months: map[time.Time][]string{
			day(2026, 11, 1, 0, 0): {
				"fee | premium plan, November 2026 | 49.00",
				fmt.Sprintf(usageLine, "2026-11-01"),
				"credit | included credit ($10.00 a month) | -10.00",
				"total | draft | 139.00"},
			day(2026, 12, 1, 0, 0): {
				"fee | premium plan, December 2026 | 59.00",
				"total | draft | 59.00"}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			testdb.Each(t, func(t *testing.T, db *models.DB) {
				ctx := context.Background()
				f := newFixture(t, db, tc.start)
				org, owner, err := f.store.CreateOrganizationWithOwner(ctx, "Acme", tc.tier, "owner@acme.example", "h", models.RoleOwner)
				if err != nil {
					t.Fatal(err)
				}
				tok, _, err := f.store.CreateAPIToken(ctx, org.ID, owner.ID, "t", nil)
				if err != nil {
					t.Fatal(err)
				}
				f.setPrice("gpt-x", "1.00", "1.00", "1.00")
				f.event(org, tok, "big", "gpt-x", tc.start.Add(time.Hour), chat.Usage{PromptTokens: 100_000_000}, false)
				for _, c := range tc.changes {
					f.apply(org, owner, c)
				}
				for month, want := range tc.months {
					if got := lines(f.invoiceOf(org.ID, month)); strings.Join(got, "\n") != strings.Join(want, "\n") {
						t.Errorf("%s:\n%s\nwant\n%s", month.Format("January 2006"), strings.Join(got, "\n"), strings.Join(want, "\n"))
					}
				}
			})
		})
	}
}

// A closed month's invoice is never touched: an edit of the terms and a
// move after it closed change neither its lines nor its stored rows, and
// apply to the month they happen in.
func TestAnEditAfterTheMonthClosedLeavesItsInvoice(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		ctx := context.Background()
		nov := day(2026, 11, 1, 0, 0)
		f := newFixture(t, db, nov)
		org, owner, _ := f.store.CreateOrganizationWithOwner(ctx, "Acme", "premium", "owner@acme.example", "h", models.RoleOwner)
		tok, _, _ := f.store.CreateAPIToken(ctx, org.ID, owner.ID, "t", nil)
		f.setPrice("gpt-x", "1.00", "1.00", "1.00")
		f.event(org, tok, "big", "gpt-x", nov.Add(time.Hour), chat.Usage{PromptTokens: 100_000_000}, false)
		f.to(day(2026, 12, 1, 0, 20))
		if n, err := f.svc.FinalizeDue(ctx); err != nil || n < 1 {
			t.Fatalf("finalized %d: %v", n, err)
		}
		closed := f.invoiceOf(org.ID, nov)
		_, stored, err := f.store.InvoiceByID(ctx, org.ID, closed.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"fee | premium plan, November 2026 | 49.00", fmt.Sprintf(usageLine, "2026-11-01"),
			"credit | included credit ($10.00 a month) | -10.00", "total | final | 139.00"}
		if got := lines(closed); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("November as closed:\n%s", strings.Join(got, "\n"))
		}

		f.apply(org, owner, change{at: day(2026, 12, 1, 6, 0), tier: "premium", fee: "99", credit: "1"})
		f.apply(org, owner, change{at: day(2026, 12, 1, 12, 0), tier: "free"})
		if got := lines(f.invoiceOf(org.ID, nov)); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("November after the edit:\n%s", strings.Join(got, "\n"))
		}
		_, after, err := f.store.InvoiceByID(ctx, org.ID, closed.ID)
		if err != nil || fmt.Sprintf("%+v", after) != fmt.Sprintf("%+v", stored) {
			t.Errorf("November's stored lines changed (%v):\n%+v\nwere\n%+v", err, after, stored)
		}
		dec := []string{
			"fee | premium plan at $49.00 a month, 1 December 2026 00:00 – 1 December 2026 06:00 UTC (0.25 of 31 days) | 0.40",
			"fee | premium plan at $99.00 a month, 1 December 2026 06:00 – 1 December 2026 12:00 UTC (0.25 of 31 days) | 0.80",
			"total | draft | 1.20"}
		if got := lines(f.invoiceOf(org.ID, day(2026, 12, 1, 0, 0))); strings.Join(got, "\n") != strings.Join(dec, "\n") {
			t.Errorf("December:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(dec, "\n"))
		}
	})
}

// An edit of the terms racing the close of the month before it: whichever
// lands first, the closed month has its lines once each, at the terms in
// force in it, and the new month starts with the edit.
func TestAnEditRacingTheCloseOfAMonth(t *testing.T) {
	for _, order := range []string{"edit first", "close first", "together"} {
		t.Run(order, func(t *testing.T) {
			testdb.Each(t, func(t *testing.T, db *models.DB) {
				ctx := context.Background()
				nov := day(2026, 11, 1, 0, 0)
				f := newFixture(t, db, nov)
				org, owner, _ := f.store.CreateOrganizationWithOwner(ctx, "Acme", "premium", "owner@acme.example", "h", models.RoleOwner)
				tok, _, _ := f.store.CreateAPIToken(ctx, org.ID, owner.ID, "t", nil)
				f.setPrice("gpt-x", "1.00", "1.00", "1.00")
				f.event(org, tok, "big", "gpt-x", nov.Add(time.Hour), chat.Usage{PromptTokens: 100_000_000}, false)
				f.to(day(2026, 12, 1, 0, 20))
				edit := func() error {
					cur, err := f.store.TierByName(ctx, "premium")
					if err != nil {
						return err
					}
					l := cur.Settings()
					l.MonthlyFee, l.IncludedCredit = 99*money.Dollar, money.Dollar
					_, err = f.store.UpdateTier(ctx, f.admin, "premium", l)
					return err
				}
				closeMonth := func() error {
					_, err := f.svc.FinalizeDue(ctx)
					return err
				}
				var errs [2]error
				switch order {
				case "edit first":
					errs[0], errs[1] = edit(), closeMonth()
				case "close first":
					errs[1], errs[0] = closeMonth(), edit()
				default:
					var wg sync.WaitGroup
					wg.Go(func() { errs[0] = edit() })
					wg.Go(func() { errs[1] = closeMonth() })
					wg.Wait()
				}
				if errs[0] != nil || errs[1] != nil {
					t.Fatalf("edit: %v, close: %v", errs[0], errs[1])
				}
				want := []string{"fee | premium plan, November 2026 | 49.00", fmt.Sprintf(usageLine, "2026-11-01"),
					"credit | included credit ($10.00 a month) | -10.00", "total | final | 139.00"}
				closed := f.invoiceOf(org.ID, nov)
				if got := lines(closed); strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("November:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
				if _, stored, _ := f.store.InvoiceByID(ctx, org.ID, closed.ID); len(stored) != 3 {
					t.Errorf("November has %d stored lines, want 3: %+v", len(stored), stored)
				}
				dec := []string{
					"fee | premium plan at $49.00 a month, 1 December 2026 00:00 – 1 December 2026 00:20 UTC (0.01 of 31 days) | 0.02",
					"fee | premium plan at $99.00 a month, 1 December 2026 00:20 – 1 January 2027 00:00 UTC (30.99 of 31 days) | 98.96",
					"total | draft | 98.98"}
				if got := lines(f.invoiceOf(org.ID, day(2026, 12, 1, 0, 0))); strings.Join(got, "\n") != strings.Join(dec, "\n") {
					t.Errorf("December:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(dec, "\n"))
				}
			})
		})
	}
}

// The request path's limit on a tier that blocks overage is the month's
// included credit prorated for the organization: the versions so far and
// the current one until the month's end. The budget state shows the same
// figure.
func TestTheBlockingCreditLimitIsTheProratedCredit(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		ctx := context.Background()
		nov := day(2026, 11, 1, 0, 0)
		f := newFixture(t, db, nov)
		f.apply(models.Organization{}, models.Member{}, change{at: nov, tier: "free", credit: "10"})
		org, owner, _ := f.store.CreateOrganizationWithOwner(ctx, "Acme", "free", "owner@acme.example", "h", models.RoleOwner)
		_, secret, err := f.store.CreateAPIToken(ctx, org.ID, owner.ID, "t", nil)
		if err != nil {
			t.Fatal(err)
		}
		limit := func() string {
			t.Helper()
			c, err := f.svc.dir.Authenticate(ctx, secret)
			if err != nil {
				t.Fatal(err)
			}
			limit, what, ok := c.SpendLimit()
			switch {
			case !ok:
				return "none"
			case what != "the free tier's included credit":
				return limit.String() + ", " + what
			}
			return limit.String()
		}
		steps := []struct {
			name   string
			at     time.Time
			change *change
			want   string // the limit, exact
		}{
			{name: "all month at $10", at: day(2026, 11, 10, 0, 0), want: "10.00"},
			{name: "cut to $4 on the 16th: half the month at each", at: day(2026, 11, 16, 0, 0),
				change: &change{tier: "free", credit: "4"}, want: "7.00"},
			{name: "raised to $4.30 a second later: (10 × 1296000 + 4 × 1 + 4.30 × 1295999) / 2592000, rounded down to the picodollar once",
				at: day(2026, 11, 16, 0, 0).Add(time.Second), change: &change{tier: "free", credit: "4.30"}, want: "7.149999884259"},
			{name: "moved to premium on the 21st: it bills overage, so nothing limits spending", at: day(2026, 11, 21, 0, 0),
				change: &change{tier: "premium"}, want: "none"},
			{name: "back to free on the 26th: premium's $10 counts for its five days", at: day(2026, 11, 26, 0, 0),
				change: &change{tier: "free"}, want: "8.099999884259"},
			{name: "December: the current terms all month", at: day(2026, 12, 1, 0, 0), want: "4.30"},
		}
		for _, st := range steps {
			f.to(st.at)
			before := limit() // cached: the change must reach the cache at once
			if st.change != nil {
				c := *st.change
				c.at = st.at
				f.apply(org, owner, c)
			}
			if got := limit(); got != st.want {
				t.Errorf("%s: the limit is %s, want %s (before the change: %s)", st.name, got, st.want, before)
			}
			b, err := f.svc.Budget(ctx, org.ID)
			if err != nil {
				t.Fatal(err)
			}
			if st.want != "none" && b.Credit.String() != st.want {
				t.Errorf("%s: the budget shows %s of included credit, want %s", st.name, b.Credit, st.want)
			}
		}
	})
}
