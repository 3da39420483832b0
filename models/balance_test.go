package models_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// balanceOrg makes an organization with an owner and returns both.
func balanceOrg(t *testing.T, s *models.Store, name string) (models.Organization, models.Member) {
	t.Helper()
	o, m, err := s.CreateOrganizationWithOwner(context.Background(), name, "free", strings.ToLower(name)+"@example.com", "x", models.RoleOwner)
	if err != nil {
		t.Fatal(err)
	}
	return o, m
}

// A credit is applied once per (kind, reference), however many callers
// make it at once: a payment provider delivering its event twice, on two
// nodes, credits once.
func TestCreditBalanceIsIdempotentUnderConcurrency(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		s := models.NewStore(db)
		o, _ := balanceOrg(t, s, "Payer")
		var applied atomic.Int64
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				ok, err := s.CreditBalance(context.Background(), o.ID, 5*money.Dollar, models.BalanceTopUp, "evt_1", "checkout")
				if err != nil {
					t.Error(err)
				}
				if ok {
					applied.Add(1)
				}
			})
		}
		wg.Wait()
		if n := applied.Load(); n != 1 {
			t.Fatalf("applied %d times", n)
		}
		tot, err := s.BalanceTotals(context.Background(), o.ID)
		if err != nil || tot.Balance() != 5*money.Dollar || tot.Credited != 5*money.Dollar {
			t.Fatalf("totals %+v %v", tot, err)
		}
		es, _ := s.BalanceEntries(context.Background(), o.ID, 10)
		if len(es) != 1 || es[0].Reference != "evt_1" || es[0].Amount != 5*money.Dollar {
			t.Fatalf("entries %+v", es)
		}
		// Refusals say why.
		for _, c := range []struct {
			amount     money.Amount
			kind, want string
		}{
			{-money.Dollar, models.BalanceTopUp, "a topup must be positive"},
			{money.Dollar, "gift", `kind is topup, redeem, adjustment or refund, not "gift"`},
			{0, models.BalanceAdjustment, "amount must not be zero"},
			{-6 * money.Dollar, models.BalanceRefund, "the balance is $5.00: taking $6.00 would put it below zero"},
		} {
			_, err := s.CreditBalance(context.Background(), o.ID, c.amount, c.kind, "r"+strconv.Itoa(int(c.amount)), "")
			if err == nil || !strings.Contains(apperr.As(err).Message, c.want) {
				t.Errorf("%s %s: %v, want %q", c.kind, c.amount, err, c.want)
			}
		}
	})
}

// Many organizations redeeming a 3-use code at once: exactly three are
// credited; one organization redeems a code once; a wrong, used-up or
// expired code gets the one answer.
func TestRedeemCodeUsesUnderConcurrency(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		ctx := context.Background()
		clock := time.Date(2026, 11, 14, 9, 0, 0, 0, time.UTC)
		s := models.NewStore(db, models.WithClock(func() time.Time { return clock }))
		_, op := balanceOrg(t, s, "Operators")
		admin := op.User
		until := clock.Add(time.Hour)
		code, plain, err := s.CreateRedeemCode(ctx, admin, 5*money.Dollar, 3, &until, "launch")
		if err != nil || !strings.HasPrefix(plain, "rc_") || code.CodeHash == plain || !strings.HasPrefix(plain, code.Prefix) {
			t.Fatalf("create: %+v %q %v", code, plain, err)
		}
		orgs := make([]models.Organization, 8)
		for i := range orgs {
			orgs[i], _ = balanceOrg(t, s, "Org"+strconv.Itoa(i))
		}
		var ok atomic.Int64
		var wg sync.WaitGroup
		for _, o := range orgs {
			wg.Go(func() {
				_, err := s.RedeemCode(ctx, o.ID, 0, plain)
				switch {
				case err == nil:
					ok.Add(1)
				case err != models.ErrNoSuchRedeemCode:
					t.Errorf("redeem: %v", err)
				}
			})
		}
		wg.Wait()
		if n := ok.Load(); n != 3 {
			t.Fatalf("%d redeemed a 3-use code", n)
		}
		codes, _ := s.RedeemCodes(ctx)
		if len(codes) != 1 || codes[0].UsesLeft != 0 {
			t.Fatalf("codes %+v", codes)
		}
		var total money.Amount
		for _, o := range orgs {
			tot, _ := s.BalanceTotals(ctx, o.ID)
			total += tot.Balance()
		}
		if total != 15*money.Dollar {
			t.Fatalf("credited %s in all", total)
		}

		// One organization, one redemption of a multi-use code.
		two, plain2, _ := s.CreateRedeemCode(ctx, admin, money.Dollar, 2, nil, "")
		if _, err := s.RedeemCode(ctx, orgs[0].ID, 0, " "+plain2+"\n"); err != nil {
			t.Fatal(err)
		}
		_, err = s.RedeemCode(ctx, orgs[0].ID, 0, plain2)
		if e := apperr.As(err); e.Code != apperr.Conflict || e.Reason != "redeem_code_used" {
			t.Fatalf("second redemption: %v", err)
		}
		if codes, _ := s.RedeemCodes(ctx); codes[0].ID != two.ID || codes[0].UsesLeft != 1 {
			t.Fatalf("a refused second redemption took a use: %+v", codes[0])
		}
		// Wrong, and expired: the one answer.
		for _, c := range []string{"rc_NOTACODE", "hello", plain} {
			if _, err := s.RedeemCode(ctx, orgs[7].ID, 0, c); err != models.ErrNoSuchRedeemCode {
				t.Errorf("%q: %v", c, err)
			}
		}
		clock = clock.Add(2 * time.Hour)
		late, plain3, _ := s.CreateRedeemCode(ctx, admin, money.Dollar, 1, ptrTime(clock.Add(time.Minute)), "")
		clock = clock.Add(time.Minute)
		if _, err := s.RedeemCode(ctx, orgs[7].ID, 0, plain3); err != models.ErrNoSuchRedeemCode {
			t.Fatalf("expired code %+v: %v", late, err)
		}
	})
}

func ptrTime(t time.Time) *time.Time { return &t }

// Requests debited from a balance are summed by day as the recorder stores
// them, once even when a batch is stored again; others are not.
func TestStoredPrepaidUsageIsSpendingByDay(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		ctx := context.Background()
		s := models.NewStore(db)
		o, m := balanceOrg(t, s, "Spender")
		tok, _, err := s.CreateAPIToken(ctx, o.ID, m.User.ID, "t", nil)
		if err != nil {
			t.Fatal(err)
		}
		day := time.Date(2026, 11, 14, 23, 30, 0, 0, time.UTC)
		ev := func(id string, at time.Time, cost money.Amount, prepaid bool) models.UsageEvent {
			return models.UsageEvent{RequestID: id, OrgID: o.ID, TokenID: tok.ID, Model: "m", Cost: cost, Status: 200,
				Prepaid: prepaid, CreatedAt: at}
		}
		batch := []models.UsageEvent{ev("a", day, 3*money.Cent, true), ev("b", day.Add(10*time.Minute), money.Cent+1, true),
			ev("c", day, money.Dollar, false)}
		if err := s.InsertUsageEvents(ctx, batch); err != nil {
			t.Fatal(err)
		}
		// Stored again (a retried flush) with one new event: only it is added.
		if err := s.InsertUsageEvents(ctx, append(batch, ev("d", day.Add(time.Hour), 2*money.Cent, true))); err != nil {
			t.Fatal(err)
		}
		days, err := s.BalanceSpending(ctx, o.ID, day.AddDate(0, 0, -3))
		if err != nil || len(days) != 2 || days[0].Amount != 4*money.Cent+1 || days[1].Amount != 2*money.Cent ||
			!days[0].Day.Equal(time.Date(2026, 11, 14, 0, 0, 0, 0, time.UTC)) || !days[1].Day.Equal(time.Date(2026, 11, 15, 0, 0, 0, 0, time.UTC)) {
			t.Fatalf("days %+v %v", days, err)
		}
		tot, _ := s.BalanceTotals(ctx, o.ID)
		if tot.Spent != 6*money.Cent+1 {
			t.Fatalf("spent %s", tot.Spent)
		}
	})
}

// The low-balance alert is recorded once per fall, and re-armed by a
// credit that takes the balance back above the threshold (or a new
// threshold).
func TestLowBalanceAlertIsOncePerFall(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		ctx := context.Background()
		s := models.NewStore(db)
		o, m := balanceOrg(t, s, "Alerted")
		th := 2 * money.Dollar
		if _, err := s.SetLowBalanceThreshold(ctx, m.User, o.ID, &th); err != nil {
			t.Fatal(err)
		}
		for i, want := range []bool{true, false, false} {
			if fresh, err := s.RecordLowBalanceAlert(ctx, o.ID, "low", nil); err != nil || fresh != want {
				t.Fatalf("alert %d: %v %v", i, fresh, err)
			}
		}
		// A credit that leaves the balance at the threshold keeps it
		// disarmed; one above re-arms it.
		if _, err := s.CreditBalance(ctx, o.ID, 2*money.Dollar, models.BalanceTopUp, "t1", ""); err != nil {
			t.Fatal(err)
		}
		if alerted, _ := s.LowBalanceAlerted(ctx, o.ID); !alerted {
			t.Fatal("a balance at the threshold re-armed the alert")
		}
		if _, err := s.CreditBalance(ctx, o.ID, money.Picodollar, models.BalanceTopUp, "t2", ""); err != nil {
			t.Fatal(err)
		}
		if alerted, _ := s.LowBalanceAlerted(ctx, o.ID); alerted {
			t.Fatal("a balance above the threshold did not re-arm the alert")
		}
		if fresh, _ := s.RecordLowBalanceAlert(ctx, o.ID, "low again", nil); !fresh {
			t.Fatal("a re-armed alert did not fire")
		}
	})
}
