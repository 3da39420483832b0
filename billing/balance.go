package billing

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/quota"
)

// Prepaid balances as the API and pages use them. Every credit goes through
// CreditBalance here, not the store's alone: after the store commits it, the
// ledger is raised to the store's figures (Resync), so the credit can be
// spent on every node with the next request (the SQL ledger reads the store
// anyway; the Redis ledger is the cluster's one copy; the memory ledger is
// the one node's).

// HistoryDays is how many days of spending the balance history shows.
const HistoryDays = 30

// historyEntries is how many credits and adjustments it lists.
const historyEntries = 50

// BalanceState is an organization's prepaid balance as its members see it.
type BalanceState struct {
	// Prepaid says the organization's tier spends from the balance; on an
	// invoiced tier the balance waits for a move to a prepaid one.
	Prepaid bool
	Tier    string
	// Balance is credited - withdrawn - spent, Reserved what requests in
	// flight hold of it, Available what a new request may reserve.
	Balance, Reserved, Available money.Amount
	Credited, Withdrawn, Spent   money.Amount
	// Threshold is the low-balance alert (nil: none); Alerted says it went
	// out and has not been re-armed (the balance back above it) since.
	Threshold *money.Amount
	Alerted   bool
	// Entries are the latest credits and adjustments, newest first; Days
	// the spending of the last HistoryDays days (UTC), oldest first, one
	// per day with spending.
	Entries []models.BalanceEntry
	Days    []models.DaySpend
	// Payments says top-ups by card are set up on this server.
	Payments bool
}

// Balance reads orgID's balance: the live figures from the ledger, the
// history from the store.
func (s *Service) Balance(ctx context.Context, orgID int64) (BalanceState, error) {
	o, err := s.store.Organization(ctx, orgID)
	if err != nil {
		return BalanceState{}, err
	}
	b, err := s.ledger.Balance(ctx, metering.PrepaidAccount(orgID), s.now())
	if err != nil {
		return BalanceState{}, err
	}
	st := BalanceState{Prepaid: o.Tier.Prepaid(), Tier: o.Tier.Name, Balance: b.Credited - b.Withdrawn - b.Spent, Reserved: b.Reserved,
		Available: max(b.Left(0), 0), Credited: b.Credited, Withdrawn: b.Withdrawn, Spent: b.Spent,
		Threshold: o.LowBalanceThreshold, Payments: s.payments}
	if st.Alerted, err = s.store.LowBalanceAlerted(ctx, orgID); err != nil {
		return st, err
	}
	if st.Entries, err = s.store.BalanceEntries(ctx, orgID, historyEntries); err != nil {
		return st, err
	}
	st.Days, err = s.store.BalanceSpending(ctx, orgID, s.now().AddDate(0, 0, -(HistoryDays-1)))
	return st, err
}

// CreditBalance credits orgID's balance once per (kind, reference), as
// models.Store.CreditBalance does, and makes the credit spendable at once
// on every node. It is what payments call for a top-up.
func (s *Service) CreditBalance(ctx context.Context, orgID int64, amount money.Amount, kind, reference, note string) (bool, error) {
	applied, err := s.store.CreditBalance(ctx, orgID, amount, kind, reference, note)
	if err == nil && applied {
		s.balanceChanged(ctx, orgID)
	}
	return applied, err
}

// balanceChanged raises the ledger's copy of orgID's credits to the
// store's. A failure leaves the credit in the store, spendable once the
// ledger next seeds the balance; it is logged.
func (s *Service) balanceChanged(ctx context.Context, orgID int64) {
	if err := s.ledger.Resync(context.WithoutCancel(ctx), metering.PrepaidAccount(orgID), s.now()); err != nil {
		s.log.Warn("bringing a prepaid balance up to the store failed; the credit counts once the balance is next seeded",
			"org_id", orgID, "err", err)
	}
}

// ParseDollars reads an amount of dollars given as a decimal string
// ("5.00", "-2.50"), for the field named field.
func ParseDollars(field, s string) (money.Amount, error) {
	neg := strings.HasPrefix(s, "-")
	a, err := money.ParseAmount(strings.TrimPrefix(s, "-"))
	if err != nil || s == "" {
		return 0, apperr.Field(apperr.Invalid, "invalid_amount", field,
			field+" must be a decimal string of dollars with at most 12 decimals, like \"5.00\"")
	}
	if neg {
		a = -a
	}
	return a, nil
}

// AdjustBalance changes orgID's balance by hand, with a reason, audited.
// Money taken away is first reserved on the ledger, as a request's worst
// case is, so an adjustment never takes the balance below zero however
// many requests spend from it meanwhile.
func (s *Service) AdjustBalance(ctx context.Context, admin models.User, orgID int64, amount money.Amount, reason string) (models.BalanceEntry, error) {
	if !admin.IsAdmin() {
		return models.BalanceEntry{}, apperr.New(apperr.Forbidden, "only admins may adjust balances")
	}
	if amount == 0 {
		return models.BalanceEntry{}, apperr.Field(apperr.Invalid, "invalid_amount", "amount", "amount must not be zero")
	}
	if strings.TrimSpace(reason) == "" {
		return models.BalanceEntry{}, apperr.Field(apperr.Invalid, "missing_reason", "reason", "an adjustment needs a reason")
	}
	if _, err := s.store.Organization(ctx, orgID); err != nil {
		return models.BalanceEntry{}, err
	}
	acct := metering.PrepaidAccount(orgID)
	if amount < 0 {
		bs, ok, err := s.ledger.Reserve(ctx, s.now(), -amount, metering.Hold{Account: acct})
		if err != nil {
			return models.BalanceEntry{}, apperr.Wrap(err, "budget ledger")
		}
		if !ok {
			return models.BalanceEntry{}, apperr.WithReason(apperr.Conflict, "balance_too_low",
				"the balance has $"+max(bs[0].Left(0), 0).String()+" that requests do not hold: taking $"+(-amount).String()+
					" would put it below zero")
		}
		// The reservation goes once the withdrawal is in the ledger (or
		// failed): until then the money is held twice, never not at all.
		defer func() {
			if _, err := s.ledger.Settle(context.WithoutCancel(ctx), s.now(), 0, metering.Release{Account: acct, Reserved: -amount}); err != nil {
				s.log.Warn("releasing an adjustment's reservation failed", "org_id", orgID, "err", err)
			}
		}()
	}
	e, err := s.store.AdjustBalance(ctx, admin, orgID, amount, reason)
	if err == nil {
		s.balanceChanged(ctx, orgID)
	}
	return e, err
}

// RedeemCodeInput is a new code as an admin gives it.
type RedeemCodeInput struct {
	Amount    string // dollars, a decimal string
	Uses      int    // 0: 1
	ExpiresAt *time.Time
	Note      string
}

// CreateRedeemCode makes a redeem code; the plain code is returned this once.
func (s *Service) CreateRedeemCode(ctx context.Context, admin models.User, in RedeemCodeInput) (models.RedeemCode, string, error) {
	if !admin.IsAdmin() {
		return models.RedeemCode{}, "", apperr.New(apperr.Forbidden, "only admins may create redeem codes")
	}
	amount, err := ParseDollars("amount", in.Amount)
	if err != nil {
		return models.RedeemCode{}, "", err
	}
	if in.Uses == 0 {
		in.Uses = 1
	}
	return s.store.CreateRedeemCode(ctx, admin, amount, in.Uses, in.ExpiresAt, strings.TrimSpace(in.Note))
}

// RedeemCodes lists the codes, for admins.
func (s *Service) RedeemCodes(ctx context.Context, admin models.User) ([]models.RedeemCode, error) {
	if !admin.IsAdmin() {
		return nil, apperr.New(apperr.Forbidden, "only admins may list redeem codes")
	}
	return s.store.RedeemCodes(ctx)
}

// Redeem credits u's organization with code, once per code and
// organization. Attempts are throttled per organization and per client
// address, so codes cannot be guessed by trying many.
func (s *Service) Redeem(ctx context.Context, u models.Member, code, clientIP string) (models.RedeemCode, error) {
	if err := accounts.NeedOrganization(u); err != nil {
		return models.RedeemCode{}, err
	}
	if err := s.redeemThrottle.take(ctx, u.OrgID, clientIP); err != nil {
		return models.RedeemCode{}, err
	}
	c, err := s.store.RedeemCode(ctx, u.OrgID, u.ID, code)
	if err == nil {
		s.balanceChanged(ctx, u.OrgID)
	}
	return c, err
}

// SetLowBalanceThreshold sets (nil: removes) u's organization's
// low-balance alert; its owners may. It applies to the next request on
// every node.
func (s *Service) SetLowBalanceThreshold(ctx context.Context, u models.Member, threshold *money.Amount) error {
	if err := accounts.NeedOwner(u, "set its low-balance alert"); err != nil {
		return err
	}
	if _, err := s.store.SetLowBalanceThreshold(ctx, u.User, u.OrgID, threshold); err != nil {
		return err
	}
	s.orgChanged(ctx, u.OrgID)
	return nil
}

// PaymentsOff is what a balance says when top-ups by card are not set up.
const PaymentsOff = "top-ups by card are not set up on this server; ask your operator for a redeem code"

// redeemThrottle bounds redeem attempts: a bucket of perHour attempts per
// organization and one per client address (an IPv6 client by its /64), on
// the node's limiter (shared by every node through Redis).
type redeemThrottle struct {
	limiter quota.Limiter
	params  quota.Params
	perHour int
}

// newRedeemThrottle returns perHour attempts an hour; 0 or no limiter
// throttles nothing.
func newRedeemThrottle(limiter quota.Limiter, perHour int) *redeemThrottle {
	if limiter == nil || perHour <= 0 {
		return nil
	}
	return &redeemThrottle{limiter: limiter, perHour: perHour,
		params: quota.Params{Capacity: int64(perHour), RefillPerSec: float64(perHour) / 3600}}
}

func (t *redeemThrottle) take(ctx context.Context, orgID int64, clientIP string) error {
	if t == nil {
		return nil
	}
	for i, key := range []string{"redeem:org:" + strconv.FormatInt(orgID, 10), "redeem:ip:" + addressKey(clientIP)} {
		d, err := t.limiter.Allow(ctx, key, t.params, 1)
		if err != nil {
			return apperr.Wrap(err, "redeem throttle")
		}
		if !d.Allowed {
			if i == 1 { // the organization's attempt was charged: not made after all
				_ = t.limiter.Adjust(context.WithoutCancel(ctx), "redeem:org:"+strconv.FormatInt(orgID, 10), t.params, -1)
			}
			who := "this organization"
			if i == 1 {
				who = "your address"
			}
			secs := max(int64((d.RetryAfter+time.Second-1)/time.Second), 1)
			return &apperr.Error{Code: apperr.RateLimited, Reason: "redeem_throttled", RetryAfter: d.RetryAfter,
				Message: fmt.Sprintf("too many redeem attempts from %s (%d an hour); try again in %d seconds", who, t.perHour, secs)}
		}
	}
	return nil
}

// addressKey is a client address's bucket: the address, or an IPv6
// address's /64.
func addressKey(clientIP string) string {
	a, err := netip.ParseAddr(clientIP)
	if err != nil {
		return clientIP
	}
	if a = a.Unmap().WithZone(""); a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// HistoryLine is one line of a balance's history: a credit or debit made by
// a payment, a code or an admin, or a day's spending (Kind "spending", At
// the day's start in UTC). Amounts are signed: credits positive, debits
// negative.
type HistoryLine struct {
	Kind      string
	Amount    money.Amount
	Note      string
	Reference string
	At        time.Time
}

// KindSpending is the kind of a day's spending in the history.
const KindSpending = "spending"

// History merges a balance's entries and days of spending, newest first.
func History(st BalanceState) []HistoryLine {
	out := make([]HistoryLine, 0, len(st.Entries)+len(st.Days))
	for _, e := range st.Entries {
		out = append(out, HistoryLine{Kind: e.Kind, Amount: e.Amount, Note: e.Note, Reference: e.Reference, At: e.CreatedAt})
	}
	for _, d := range st.Days {
		out = append(out, HistoryLine{Kind: KindSpending, Amount: -d.Amount, At: d.Day})
	}
	// A day's spending is as of the day's end: after that day's credits.
	when := func(l HistoryLine) time.Time {
		if l.Kind == KindSpending {
			return l.At.Add(24*time.Hour - time.Nanosecond)
		}
		return l.At
	}
	slices.SortStableFunc(out, func(a, b HistoryLine) int { return when(b).Compare(when(a)) })
	return out
}
