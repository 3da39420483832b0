package billing

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/chat"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/secrets"
	"github.com/sluicehq/sluice/webhook"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// fixture is a billing service on a real database with a hand-moved clock.
type fixture struct {
	t     *testing.T
	store *models.Store
	clock *clocktest.Clock
	svc   *Service
	acc   *accounts.Service // tier edits and moves, as the admin API makes them
	book  *metering.PriceBook
	admin models.User
}

func newFixture(t *testing.T, db *models.DB, start time.Time) *fixture {
	t.Helper()
	ctx := context.Background()
	clk := clocktest.New(start)
	store := models.NewStore(db, models.WithClock(clk.Now))
	dir, err := accounts.NewDirectory(ctx, store, time.Minute, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	box, _ := secrets.NewBox(bytes.Repeat([]byte{5}, 32))
	book := metering.NewPriceBook()
	f := &fixture{t: t, store: store, clock: clk, book: book}
	f.svc = New(Deps{Store: store, Directory: dir, Bus: cluster.None{}, Prices: book,
		Ledger: metering.NewMemoryLedger(metering.StoreSeed(store), metering.WithFunds(metering.StoreFunds(store))), Box: box, Webhooks: webhook.NewSender(webhook.Options{Hosts: webhook.Hosts{"hooks.example.com"}, Now: clk.Now,
			// A public address for the allowed name, without asking DNS.
			Lookup: func(context.Context, string) ([]netip.Addr, error) {
				return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
			}}),
		Log: slog.New(slog.DiscardHandler), Now: clk.Now})
	_, admin, err := store.CreateOrganizationWithOwner(ctx, "Ops", "premium", "ops@example.com", "h", models.RoleAdmin)
	f.admin = admin.User
	if err != nil {
		t.Fatal(err)
	}
	if f.acc, err = accounts.NewService(store, dir, cluster.None{}, accounts.NewLoginThrottle(clk.Now), bcrypt.MinCost); err != nil {
		t.Fatal(err)
	}
	return f
}

// customer makes a premium organization, Acme, with an owner and a token.
func (f *fixture) customer() (models.Organization, models.APIToken) {
	f.t.Helper()
	ctx := context.Background()
	org, owner, err := f.store.CreateOrganizationWithOwner(ctx, "Acme", "premium", "owner@acme.example", "h", models.RoleOwner)
	if err != nil {
		f.t.Fatal(err)
	}
	tok, _, err := f.store.CreateAPIToken(ctx, org.ID, owner.ID, "t", nil)
	if err != nil {
		f.t.Fatal(err)
	}
	return org, tok
}

// setPrice sets a price at the clock's time.
func (f *fixture) setPrice(model, in, out, cached string) {
	f.t.Helper()
	if _, err := f.svc.SetPrice(context.Background(), f.admin, model, PriceInput{Input: in, Output: out, CachedInput: cached}); err != nil {
		f.t.Fatal(err)
	}
}

// event stores one request as the pipeline would: priced at its time.
func (f *fixture) event(org models.Organization, tok models.APIToken, id, model string, at time.Time, u chat.Usage, cacheHit bool) {
	f.t.Helper()
	ev := models.UsageEvent{RequestID: id, OrgID: org.ID, TokenID: tok.ID, Model: model, PromptTokens: u.PromptTokens,
		CompletionTokens: u.CompletionTokens, CachedTokens: u.CachedTokens, Status: 200, Cached: cacheHit, CreatedAt: at}
	if p, ok := f.book.At(model, at); ok && !(cacheHit && !org.Tier.BillCacheHits) {
		ev.Cost, ev.PriceID = metering.Cost(p, u), p.ID
	}
	if err := f.store.InsertUsageEvents(context.Background(), []models.UsageEvent{ev}); err != nil {
		f.t.Fatal(err)
	}
}

// The invoice of a month with a price change in the middle, a cached-prompt
// discount, a free cache hit, an unpriced model, half cents to round and the
// included credit, from real events through the rollups; then closed once,
// and never changed again.
func TestInvoiceGolden(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		ctx := context.Background()
		nov := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
		f := newFixture(t, db, nov)
		org, tok := f.customer()
		f.setPrice("gpt-x", "0.50", "1.50", "0.25")
		// Before the change: 10M uncached + 2M cached prompt, 4.23M completion,
		// over ten requests: 5.00 + 0.50 + 6.345 = 11.845, rounded once to 11.85.
		for i := range 10 {
			f.event(org, tok, fmt.Sprint("a", i), "gpt-x", nov.Add(time.Duration(i)*time.Hour),
				chat.Usage{PromptTokens: 1_200_000, CachedTokens: 200_000, CompletionTokens: 423_000}, false)
		}
		// A response-cache hit: free on this tier.
		f.event(org, tok, "hit", "gpt-x", nov.Add(48*time.Hour), chat.Usage{PromptTokens: 999, CompletionTokens: 999}, true)
		f.clock.Advance(14*24*time.Hour + 12*time.Hour) // 2026-11-15 12:00
		f.setPrice("gpt-x", "0.60", "1.80", "0.30")
		// After: 3.00 + 1.80 = 4.80, and one token more (0.0000006): 4.80.
		f.event(org, tok, "b1", "gpt-x", f.clock.Now(), chat.Usage{PromptTokens: 5_000_000, CompletionTokens: 1_000_000}, false)
		f.event(org, tok, "b2", "gpt-x", f.clock.Now().Add(time.Hour), chat.Usage{PromptTokens: 1}, false)
		f.event(org, tok, "local", "sluice-local", f.clock.Now(), chat.Usage{PromptTokens: 100, CompletionTokens: 20}, false)
		// The month's last second counts; the next month's first does not.
		f.event(org, tok, "last", "sluice-local", nov.AddDate(0, 1, 0).Add(-time.Second), chat.Usage{PromptTokens: 1}, false)
		f.event(org, tok, "dec", "gpt-x", nov.AddDate(0, 1, 0), chat.Usage{PromptTokens: 1_000_000}, false)

		// Still November: a live draft.
		list, err := f.svc.Invoices(ctx, org.ID)
		if err != nil || len(list) != 1 || list[0].Status != Draft || list[0].Total.StringCents() != "55.65" {
			t.Fatalf("draft list: %+v %v", list, err)
		}
		// December 1st, 00:20: November closes, once.
		f.clock.Advance(15*24*time.Hour + 12*time.Hour + 20*time.Minute)
		n, err := f.svc.FinalizeDue(ctx)
		if err != nil || n < 1 {
			t.Fatalf("finalized %d: %v", n, err)
		}
		if n, _ := f.svc.FinalizeDue(ctx); n != 0 {
			t.Fatalf("finalized %d more on the second run", n)
		}
		inv, err := f.svc.Invoice(ctx, org.ID, list[0].ID)
		if err != nil || inv.Status != Final {
			t.Fatalf("%+v %v", inv, err)
		}
		golden(t, "invoice-2026-11.csv", inv.CSV())

		// Nothing changes it afterwards: not a late event, not a new price.
		f.event(org, tok, "late", "gpt-x", nov.Add(29*24*time.Hour), chat.Usage{PromptTokens: 50_000_000}, false)
		f.setPrice("gpt-x", "9", "9", "9")
		again, _ := f.svc.Invoice(ctx, org.ID, list[0].ID)
		if string(again.CSV()) != string(inv.CSV()) {
			t.Fatal("a final invoice changed")
		}
		// Another tenant's id is not found.
		other, _, _ := f.store.CreateOrganizationWithOwner(ctx, "Other", "free", "o@other.example", "h", models.RoleOwner)
		if _, err := f.svc.Invoice(ctx, other.ID, list[0].ID); apperr.CodeOf(err) != apperr.NotFound {
			t.Fatalf("another tenant's invoice: %v", err)
		}
	})
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs:\n got:\n%s\nwant:\n%s", name, got, want)
	}
}

func TestBuildRoundsEachLineOnceAndCreditsUpToUsage(t *testing.T) {
	period := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	half := money.Cent / 2
	inv := Build(wholeMonth(period, models.TierTerms{TierName: "free", IncludedCredit: money.Dollar}), []Usage{
		{Model: "a", PriceID: 1, Cost: 10*money.Cent + half},     // 0.105 -> 0.11
		{Model: "b", PriceID: 2, Cost: 20*money.Cent + half - 1}, // just under 0.205 -> 0.20
	})
	if inv.Total != 0 || len(inv.Lines) != 3 || inv.Lines[2].Amount != -31*money.Cent {
		t.Fatalf("%+v", inv)
	}
	// Usage beyond the credit is what is left to pay.
	inv = Build(wholeMonth(period, models.TierTerms{TierName: "premium", MonthlyFee: 49 * money.Dollar, IncludedCredit: 10 * money.Dollar}),
		[]Usage{{Model: "a", PriceID: 1, Cost: 12*money.Dollar + money.Picodollar}})
	if inv.Total.StringCents() != "51.00" {
		t.Fatalf("total %s", inv.Total.StringCents())
	}
}

// wholeMonth is a month with one pair of terms in force all of it.
func wholeMonth(period time.Time, terms models.TierTerms) models.MonthTerms {
	end := period.AddDate(0, 1, 0)
	secs := end.Unix() - period.Unix()
	return models.MonthTerms{Period: period, Seconds: secs,
		Terms: []models.TermsInForce{{Terms: terms, Spans: []models.Span{{From: period, To: end}}, Seconds: secs}}}
}

// Days are the organization's: the same two events are one UTC day but two
// days in Shanghai; a day with a daylight-saving change has 25 hours.
func TestDaysAreCountedInTheOrganizationsTimeZone(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, testdb.SQLite(t), time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	org, owner, _ := f.store.CreateOrganizationWithOwner(ctx, "Acme", "free", "o@acme.example", "h", models.RoleOwner)
	tok, _, _ := f.store.CreateAPIToken(ctx, org.ID, owner.ID, "t", nil)
	u := chat.Usage{PromptTokens: 1}
	f.event(org, tok, "a", "m", time.Date(2026, 11, 30, 15, 30, 0, 0, time.UTC), u, false) // 23:30 in Shanghai
	f.event(org, tok, "b", "m", time.Date(2026, 11, 30, 16, 30, 0, 0, time.UTC), u, false) // 00:30 on Dec 1 there
	days := func() []string {
		t.Helper()
		ps, err := f.svc.Series(ctx, org.ID, Day, time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), f.clock.Now(), models.GroupNone)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range ps {
			out = append(out, fmt.Sprintf("%s:%d", p.Start.Format("2006-01-02T15:04Z07:00"), p.Requests))
		}
		return out
	}
	if got := fmt.Sprint(days()); got != "[2026-11-30T00:00Z:2]" {
		t.Fatalf("UTC days %s", got)
	}
	if err := f.svc.SetTimeZone(ctx, owner, "Asia/Shanghai"); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(days()); got != "[2026-11-30T00:00+08:00:1 2026-12-01T00:00+08:00:1]" {
		t.Fatalf("Shanghai days %s", got)
	}
	// New York leaves daylight saving on 2026-11-01: that day has 25 hours,
	// and all 25 are counted in it.
	if err := f.svc.SetTimeZone(ctx, owner, "America/New_York"); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 1, 4, 0, 0, 0, time.UTC) // midnight in New York (EDT)
	for h := range 26 {
		f.event(org, tok, fmt.Sprint("ny", h), "m", start.Add(time.Duration(h)*time.Hour), u, false)
	}
	ps, err := f.svc.Series(ctx, org.ID, Day, start, start.Add(26*time.Hour), models.GroupNone)
	if err != nil || len(ps) != 2 || ps[0].Requests != 25 || ps[1].Requests != 1 {
		t.Fatalf("the 25-hour day: %+v %v", ps, err)
	}
	if err := f.svc.SetTimeZone(ctx, owner, "Not/AZone"); apperr.As(err).Reason != "invalid_time_zone" {
		t.Fatalf("bad zone: %v", err)
	}
}

// leads is a Leader that leads or not, as told.
type leads bool

func (l leads) Lead(context.Context) (bool, error) { return bool(l), nil }

// A node that does not lead closes no month; the leading node does.
func TestOnlyTheLeadingNodeClosesAMonth(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		ctx := context.Background()
		nov := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
		f := newFixture(t, db, nov)
		org, tok := f.customer()
		f.setPrice("gpt-x", "0.50", "1.50", "0.25")
		f.event(org, tok, "a", "gpt-x", nov.Add(time.Hour), chat.Usage{PromptTokens: 1000, CompletionTokens: 100}, false)
		status := func() string { // November's
			list, err := f.svc.Invoices(ctx, org.ID)
			if err != nil || len(list) == 0 {
				t.Fatalf("%+v %v", list, err)
			}
			return list[len(list)-1].Status
		}
		if status() != Draft {
			t.Fatal("November's live draft")
		}
		f.clock.Advance(30*24*time.Hour + time.Hour) // December 1st, 01:00
		if n, err := f.svc.FinalizeIfLeading(ctx, leads(false)); err != nil || n != 0 || status() != Draft {
			t.Fatalf("a node that does not lead: finalized %d (%v), November %s", n, err, status())
		}
		if n, err := f.svc.FinalizeIfLeading(ctx, leads(true)); err != nil || n < 1 || status() != Final {
			t.Fatalf("the leading node: finalized %d (%v), November %s", n, err, status())
		}
	})
}

// A cluster down from before a month's end until after the next one's still
// closes both months once it is back: every month with usage gets its
// invoice, the earlier one included.
func TestMonthsNoNodeClosedAreClosedLater(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		ctx := context.Background()
		oct := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
		f := newFixture(t, db, oct)
		org, tok := f.customer()
		f.setPrice("gpt-x", "0.50", "1.50", "0.25")
		f.event(org, tok, "oct", "gpt-x", oct.Add(time.Hour), chat.Usage{PromptTokens: 1000, CompletionTokens: 100}, false)
		f.event(org, tok, "nov", "gpt-x", oct.AddDate(0, 1, 0).Add(time.Hour), chat.Usage{PromptTokens: 1000, CompletionTokens: 100}, false)
		f.clock.Advance(61*24*time.Hour + time.Hour) // December 1st, 01:00: nobody ran in between
		if _, err := f.svc.FinalizeDue(ctx); err != nil {
			t.Fatal(err)
		}
		list, err := f.svc.Invoices(ctx, org.ID)
		if err != nil {
			t.Fatal(err)
		}
		closed := map[string]string{}
		for _, inv := range list {
			closed[inv.PeriodStart.Format("2006-01")] = inv.Status
		}
		if closed["2026-10"] != Final || closed["2026-11"] != Final {
			t.Fatalf("months after the outage: %v, want October and November final", closed)
		}
	})
}

// Usage paid from a prepaid balance is taken off the invoice, never more
// than the usage, so it is not paid twice; the fee stays.
func TestUsagePaidFromTheBalanceIsNotInvoicedAgain(t *testing.T) {
	period := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	terms := wholeMonth(period, models.TierTerms{TierName: "prepaid", MonthlyFee: 5 * money.Dollar})
	inv := BuildPaid(terms, []Usage{{Model: "a", PriceID: 1, Cost: 12*money.Dollar + money.Picodollar}}, 12*money.Dollar+money.Picodollar)
	if inv.Total != 5*money.Dollar || len(inv.Lines) != 3 || inv.Lines[2].Kind != LinePrepaid || inv.Lines[2].Amount != -12*money.Dollar {
		t.Fatalf("%+v", inv)
	}
	// More paid than used this month (usage a later rollup lags): no credit beyond the usage.
	if inv := BuildPaid(terms, []Usage{{Model: "a", PriceID: 1, Cost: money.Dollar}}, 3*money.Dollar); inv.Total != 5*money.Dollar {
		t.Fatalf("total %s", inv.Total)
	}
}
