package models

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/money"
)

// Prepaid balances. An organization's balance is what it was ever credited
// (top-ups, redeem codes, positive adjustments and refunds) less what was
// taken away by hand (negative adjustments and refunds) less what it spent
// (balance_spending, summed by the recorder from the requests debited from
// it). The first two only ever grow, so a copy of them held elsewhere (the
// Redis ledger) is brought up to date by raising it, in any order, from any
// node. Each credit is applied once per (kind, reference).

// Kinds of balance entries.
const (
	BalanceTopUp      = "topup"      // a payment (Stripe)
	BalanceRedeem     = "redeem"     // a redeem code
	BalanceAdjustment = "adjustment" // an admin, by hand, with a reason
	BalanceRefund     = "refund"     // money given back (negative) or returned to the balance (positive)
)

// BalanceEntry is one credit or debit of a balance made by a payment, a
// code or an admin (spending is summed by day in balance_spending).
type BalanceEntry struct {
	ID        int64
	OrgID     int64
	Kind      string
	Reference string
	Amount    money.Amount // positive credits, negative debits
	Note      string
	ActorID   *int64 // the user who made it; nil for the system (a payment)
	CreatedAt time.Time
}

// TableName names the table.
func (BalanceEntry) TableName() string { return "balance_entries" }

// BalanceTotals are the store's figures of an organization's balance.
type BalanceTotals struct {
	Credited  money.Amount // every credit ever
	Withdrawn money.Amount // every debit by hand ever
	Spent     money.Amount // every request debited, as stored so far
}

// Balance is what is left.
func (t BalanceTotals) Balance() money.Amount { return t.Credited - t.Withdrawn - t.Spent }

// MaxBalance is the most a balance may hold: a credit that would take it
// past this is refused.
const MaxBalance = money.MaxAmount

// CreditBalance credits (or, with a negative amount, debits) orgID's
// balance once per (kind, reference): a second call with the same pair
// changes nothing and reports applied false, however many nodes make it at
// once (a unique index; the entry and the balance change commit together).
// kind is topup, redeem, adjustment or refund; a top-up or redeem must be
// positive; a debit may not take the balance below zero. It is audited as
// the system's action ("balance.<kind>").
func (s *Store) CreditBalance(ctx context.Context, orgID int64, amount money.Amount, kind, reference, note string) (applied bool, err error) {
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		applied, err = s.creditIn(tx, balanceCredit{orgID: orgID, amount: amount, kind: kind, reference: reference, note: note})
		return err
	})
	return applied, err
}

// balanceCredit is one entry to apply.
type balanceCredit struct {
	orgID, actorID        int64
	amount                money.Amount
	kind, reference, note string
}

func (c balanceCredit) check() error {
	switch {
	case c.kind != BalanceTopUp && c.kind != BalanceRedeem && c.kind != BalanceAdjustment && c.kind != BalanceRefund:
		return apperr.New(apperr.Invalid, "a balance entry's kind is topup, redeem, adjustment or refund, not %q", c.kind)
	case c.reference == "" || len(c.reference) > 200:
		return apperr.New(apperr.Invalid, "a balance entry needs a reference of 1 to 200 characters")
	case c.amount == 0:
		return apperr.Field(apperr.Invalid, "invalid_amount", "amount", "amount must not be zero")
	case c.amount < 0 && (c.kind == BalanceTopUp || c.kind == BalanceRedeem):
		return apperr.Field(apperr.Invalid, "invalid_amount", "amount", "a "+c.kind+" must be positive")
	case c.amount > MaxBalance || c.amount < -MaxBalance:
		return apperr.Field(apperr.Invalid, "invalid_amount", "amount", "amount must be at most "+MaxBalance.String()+" either way")
	case len(c.note) > 500:
		return apperr.Field(apperr.Invalid, "invalid_note", "note", "a note is at most 500 characters")
	}
	return nil
}

// spentSQL is an organization's stored spending from its balance.
func spentSQL(orgID int64) string {
	return "(SELECT COALESCE(SUM(amount), 0) FROM balance_spending WHERE org_id = " + strconv.FormatInt(orgID, 10) + ")"
}

// creditIn applies c inside tx: the entry (or nothing, when its kind and
// reference are applied already), the totals, the low-balance alert
// re-armed when the balance is back above its threshold, the audit entry.
func (s *Store) creditIn(tx *gorm.DB, c balanceCredit) (bool, error) {
	if err := c.check(); err != nil {
		return false, err
	}
	now := s.now().UTC()
	var actor *int64
	if c.actorID != 0 {
		actor = &c.actorID
	}
	res := tx.Exec(`INSERT INTO balance_entries (org_id, kind, reference, amount, note, actor_id, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (kind, reference) DO NOTHING`, c.orgID, c.kind, c.reference, c.amount, c.note, actor, now)
	if res.Error != nil {
		return false, dbErr(res.Error, "balance entry")
	}
	if res.RowsAffected == 0 {
		return false, nil
	}
	if err := tx.Exec(`INSERT INTO org_balances (org_id, credited, withdrawn, updated_at) VALUES (?, 0, 0, ?)
		ON CONFLICT (org_id) DO NOTHING`, c.orgID, now).Error; err != nil {
		return false, dbErr(err, "balance")
	}
	left := "credited - withdrawn - " + spentSQL(c.orgID)
	if c.amount < 0 {
		res = tx.Exec(`UPDATE org_balances SET withdrawn = withdrawn + ?, updated_at = ? WHERE org_id = ? AND `+left+` >= ?`,
			-c.amount, now, c.orgID, -c.amount)
	} else {
		// Back above the owner's threshold: the next fall below it alerts again.
		res = tx.Exec(`UPDATE org_balances SET credited = credited + ?, updated_at = ?,
			low_alerted_at = CASE WHEN `+left+` + ? > COALESCE((SELECT low_balance_threshold FROM organizations WHERE id = ?), -1)
				THEN NULL ELSE low_alerted_at END
			WHERE org_id = ? AND `+left+` + ? <= ?`, c.amount, now, c.amount, c.orgID, c.orgID, c.amount, MaxBalance)
	}
	if res.Error != nil {
		return false, dbErr(res.Error, "balance")
	}
	if res.RowsAffected == 0 {
		var t BalanceTotals
		if err := tx.Raw(`SELECT credited, withdrawn, `+spentSQL(c.orgID)+` AS spent FROM org_balances WHERE org_id = ?`, c.orgID).
			Scan(&t).Error; err != nil {
			return false, dbErr(err, "balance")
		}
		if c.amount < 0 {
			return false, apperr.WithReason(apperr.Conflict, "balance_too_low",
				"the balance is $"+t.Balance().String()+": taking $"+(-c.amount).String()+" would put it below zero")
		}
		return false, apperr.WithReason(apperr.Conflict, "balance_too_high",
			"the balance is $"+t.Balance().String()+": a balance holds at most $"+MaxBalance.String())
	}
	detail := fmt.Sprintf("%s %s", signed(c.amount), c.reference)
	if c.note != "" {
		detail += ": " + c.note
	}
	return true, audit(tx, c.orgID, c.actorID, "balance."+c.kind, strconv.FormatInt(c.orgID, 10), detail)
}

// signed writes an amount with its sign, as a change.
func signed(a money.Amount) string {
	if a < 0 {
		return "-" + (-a).String()
	}
	return "+" + a.String()
}

// AdjustBalance changes orgID's balance by hand, by amount (negative takes
// money away, never below zero), with the admin's reason, audited.
func (s *Store) AdjustBalance(ctx context.Context, admin User, orgID int64, amount money.Amount, reason string) (BalanceEntry, error) {
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return BalanceEntry{}, apperr.Field(apperr.Invalid, "missing_reason", "reason", "an adjustment needs a reason")
	}
	if _, err := s.Organization(ctx, orgID); err != nil {
		return BalanceEntry{}, err
	}
	// Its own id: each adjustment is applied once, however it was asked.
	ref := "adj_" + rand.Text()
	var e BalanceEntry
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		applied, err := s.creditIn(tx, balanceCredit{orgID: orgID, actorID: admin.ID, amount: amount, kind: BalanceAdjustment,
			reference: ref, note: reason})
		if err != nil || !applied {
			return err
		}
		return dbErr(tx.Where("kind = ? AND reference = ?", BalanceAdjustment, ref).Take(&e).Error, "balance entry")
	})
	return e, err
}

// BalanceTotals reads orgID's totals (zero for an organization never credited).
func (s *Store) BalanceTotals(ctx context.Context, orgID int64) (BalanceTotals, error) {
	var t BalanceTotals
	err := s.db.WithContext(ctx).Raw(`SELECT COALESCE((SELECT credited FROM org_balances WHERE org_id = ?), 0) AS credited,
		COALESCE((SELECT withdrawn FROM org_balances WHERE org_id = ?), 0) AS withdrawn, `+spentSQL(orgID)+` AS spent`,
		orgID, orgID).Scan(&t).Error
	return t, dbErr(err, "balance")
}

// BalanceEntries lists orgID's entries, newest first, at most limit.
func (s *Store) BalanceEntries(ctx context.Context, orgID int64, limit int) ([]BalanceEntry, error) {
	var es []BalanceEntry
	err := s.db.WithContext(ctx).Where("org_id = ?", orgID).Order("created_at DESC, id DESC").Limit(limit).Find(&es).Error
	return es, dbErr(err, "balance entries")
}

// DaySpend is what an organization spent from its balance on one day (UTC).
type DaySpend struct {
	Day    time.Time
	Amount money.Amount
}

// BalanceSpending lists orgID's spending from its balance by day (UTC),
// from the day from falls in on, oldest first.
func (s *Store) BalanceSpending(ctx context.Context, orgID int64, from time.Time) ([]DaySpend, error) {
	var rows []DaySpend
	from = from.UTC().Truncate(24 * time.Hour)
	err := s.db.WithContext(ctx).Raw(`SELECT day, amount FROM balance_spending WHERE org_id = ? AND day >= ? ORDER BY day`,
		orgID, from).Scan(&rows).Error
	for i := range rows {
		rows[i].Day = rows[i].Day.UTC()
	}
	return rows, dbErr(err, "balance spending")
}

// BalanceSpentBetween is what orgID spent from its balance on the days
// (UTC) in [from, to).
func (s *Store) BalanceSpentBetween(ctx context.Context, orgID int64, from, to time.Time) (money.Amount, error) {
	var n money.Amount
	err := s.db.WithContext(ctx).Raw(`SELECT COALESCE(SUM(amount), 0) FROM balance_spending WHERE org_id = ? AND day >= ? AND day < ?`,
		orgID, from.UTC(), to.UTC()).Scan(&n).Error
	return n, dbErr(err, "balance spending")
}

// SetLowBalanceThreshold sets (nil: removes) the balance at which orgID's
// owners hear it runs low, and re-arms the alert.
func (s *Store) SetLowBalanceThreshold(ctx context.Context, actor User, orgID int64, threshold *money.Amount) (Organization, error) {
	if threshold != nil && (*threshold < 0 || *threshold > MaxBalance) {
		return Organization{}, apperr.Field(apperr.Unprocessable, "invalid_threshold", "low_balance_threshold",
			"low_balance_threshold must be from 0 to "+MaxBalance.String())
	}
	detail := "off"
	if threshold != nil {
		detail = threshold.String()
	}
	o, err := s.updateOrganization(ctx, actor, orgID, "organization.low_balance_threshold", detail,
		map[string]any{"low_balance_threshold": threshold})
	if err != nil {
		return o, err
	}
	err = s.db.WithContext(ctx).Exec(`UPDATE org_balances SET low_alerted_at = NULL WHERE org_id = ?`, orgID).Error
	return o, dbErr(err, "balance")
}

// RecordLowBalanceAlert notes that orgID's balance fell to or below its
// threshold, with an audit entry. It reports false when the alert is out
// already and not re-armed since (by this node or another), so it is sent
// once per fall. With mail, what compose writes for each owner is queued
// in the same transaction.
func (s *Store) RecordLowBalanceAlert(ctx context.Context, orgID int64, detail string, compose func(owner, orgName string) Mail) (bool, error) {
	var fresh bool
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		now := s.now().UTC()
		if err := tx.Exec(`INSERT INTO org_balances (org_id, credited, withdrawn, updated_at) VALUES (?, 0, 0, ?)
			ON CONFLICT (org_id) DO NOTHING`, orgID, now).Error; err != nil {
			return err
		}
		res := tx.Exec(`UPDATE org_balances SET low_alerted_at = ? WHERE org_id = ? AND low_alerted_at IS NULL`, now, orgID)
		if res.Error != nil {
			return res.Error
		}
		if fresh = res.RowsAffected == 1; !fresh {
			return nil
		}
		if err := s.mailOwners(tx, orgID, compose); err != nil {
			return err
		}
		return audit(tx, orgID, 0, "balance.low", strconv.FormatInt(orgID, 10), detail)
	})
	return fresh, dbErr(err, "low-balance alert")
}

// LowBalanceAlerted says whether the low-balance alert is out (and not
// re-armed since).
func (s *Store) LowBalanceAlerted(ctx context.Context, orgID int64) (bool, error) {
	var n int64
	err := s.db.WithContext(ctx).Raw(`SELECT COUNT(*) FROM org_balances WHERE org_id = ? AND low_alerted_at IS NOT NULL`, orgID).Scan(&n).Error
	return n > 0, dbErr(err, "balance")
}
