package models

import (
	"context"
	"errors"
	"strconv"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/money"
)

// Budget ledgers in the database, for clusters without Redis: each change is
// one conditional statement on a balance's row, so concurrent reservations
// serialise on the row lock and can never together pass the limit. An
// organization's balances are rows of budget_ledgers, its tokens' rows of
// token_budget_ledgers; a request limited by both reserves on both in one
// transaction, both or neither.

// LedgerBalance is a ledger row's spending. A prepaid balance's row also
// carries what the organization was credited and had withdrawn (read from
// org_balances), which its limit is raised and lowered by.
type LedgerBalance struct {
	Spent     money.Amount
	Reserved  money.Amount
	Credited  money.Amount
	Withdrawn money.Amount
}

// LedgerAccount names a balance: an organization's (TokenID 0) or one of
// its API tokens', or with Prepaid the organization's prepaid balance,
// which has no period (it never resets).
type LedgerAccount struct {
	OrgID   int64
	TokenID int64
	Prepaid bool
}

// LedgerHold is one limit a reservation must fit under.
type LedgerHold struct {
	Account LedgerAccount
	Limit   money.Amount
}

// LedgerRelease is one balance a settlement moves: what was reserved on it.
type LedgerRelease struct {
	Account  LedgerAccount
	Reserved money.Amount
}

// LedgerSeed is what an account has been billed in a period so far, where
// a new row starts.
type LedgerSeed func(LedgerAccount) (money.Amount, error)

// ledgerRow is where an account's balance is kept in period: the table,
// the condition that picks its row and the condition's arguments, and what
// the row's statements return (spent, reserved, credited, withdrawn) and
// its limit is raised (credited) and lowered (withdrawn) by.
type ledgerRowSQL struct {
	table, where        string
	args                []any
	credited, withdrawn string
	returning           string
}

func ledgerRow(a LedgerAccount, period time.Time) ledgerRowSQL {
	switch {
	case a.Prepaid:
		org := strconv.FormatInt(a.OrgID, 10)
		r := ledgerRowSQL{table: "balance_ledgers", where: "org_id = ?", args: []any{a.OrgID},
			credited:  "COALESCE((SELECT credited FROM org_balances WHERE org_id = " + org + "), 0)",
			withdrawn: "COALESCE((SELECT withdrawn FROM org_balances WHERE org_id = " + org + "), 0)"}
		r.returning = "spent, reserved, " + r.credited + " AS credited, " + r.withdrawn + " AS withdrawn"
		return r
	case a.TokenID != 0:
		return ledgerRowSQL{table: "token_budget_ledgers", where: "token_id = ? AND period = ?", args: []any{a.TokenID, period},
			credited: "0", withdrawn: "0", returning: "spent, reserved"}
	}
	return ledgerRowSQL{table: "budget_ledgers", where: "org_id = ? AND period = ?", args: []any{a.OrgID, period},
		credited: "0", withdrawn: "0", returning: "spent, reserved"}
}

// errLedgerShort rolls back a reservation one of whose limits refused it.
var errLedgerShort = errors.New("a ledger limit refused the reservation")

// LedgerReserve holds amount on every hold's balance in period if each
// stays within its limit (spent + reserved + amount <= limit), all of them
// or none, seeding new rows with seed. The balances are as the call left
// them, in the holds' order: on a refusal, none holds amount.
func (s *Store) LedgerReserve(ctx context.Context, period time.Time, amount money.Amount, holds []LedgerHold, seed LedgerSeed) ([]LedgerBalance, bool, error) {
	period = MonthOf(period)
	for _, h := range holds {
		if err := s.seedLedgerRow(ctx, h.Account, period, seed); err != nil {
			return nil, false, dbErr(err, "budget ledger")
		}
	}
	bs := make([]LedgerBalance, len(holds))
	short := -1
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		for i, h := range holds {
			r := ledgerRow(h.Account, period)
			args := append(append([]any{amount}, r.args...), amount, h.Limit)
			// The casts keep Postgres from typing the amounts by the 0 of a
			// budget's credits (int4).
			res := tx.Raw(`UPDATE `+r.table+` SET reserved = reserved + ? WHERE `+r.where+`
				AND spent + reserved + CAST(? AS BIGINT) + `+r.withdrawn+` <= CAST(? AS BIGINT) + `+r.credited+` RETURNING `+r.returning, args...).Scan(&bs[i])
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected == 1 {
				continue
			}
			short = i
			if err := tx.Raw(`SELECT `+r.returning+` FROM `+r.table+` WHERE `+r.where, r.args...).Scan(&bs[i]).Error; err != nil {
				return err
			}
			return errLedgerShort
		}
		return nil
	})
	if errors.Is(err, errLedgerShort) {
		for i := range short {
			bs[i].Reserved -= amount // rolled back
		}
		return bs, false, nil
	}
	if err != nil {
		return nil, false, dbErr(err, "budget ledger")
	}
	return bs, true, nil
}

// LedgerSettle releases what each balance reserved and adds actual to its
// spending, in one transaction. The balances are in rs's order.
func (s *Store) LedgerSettle(ctx context.Context, period time.Time, actual money.Amount, rs []LedgerRelease, seed LedgerSeed) ([]LedgerBalance, error) {
	period = MonthOf(period)
	for _, r := range rs {
		if err := s.seedLedgerRow(ctx, r.Account, period, seed); err != nil {
			return nil, dbErr(err, "budget ledger")
		}
	}
	bs := make([]LedgerBalance, len(rs))
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		for i, rel := range rs {
			r := ledgerRow(rel.Account, period)
			args := append([]any{rel.Reserved, rel.Reserved, actual}, r.args...)
			err := tx.Raw(`UPDATE `+r.table+` SET reserved = CASE WHEN reserved > ? THEN reserved - ? ELSE 0 END,
				spent = spent + ? WHERE `+r.where+` RETURNING `+r.returning, args...).Scan(&bs[i]).Error
			if err != nil {
				return err
			}
		}
		return nil
	})
	return bs, dbErr(err, "budget ledger")
}

// LedgerRead reads an account's row for the period, seeding it if new.
func (s *Store) LedgerRead(ctx context.Context, a LedgerAccount, period time.Time, seed LedgerSeed) (LedgerBalance, error) {
	period = MonthOf(period)
	var b LedgerBalance
	if err := s.seedLedgerRow(ctx, a, period, seed); err != nil {
		return b, dbErr(err, "budget ledger")
	}
	r := ledgerRow(a, period)
	err := s.db.WithContext(ctx).Raw(`SELECT `+r.returning+` FROM `+r.table+` WHERE `+r.where, r.args...).Scan(&b).Error
	return b, dbErr(err, "budget ledger")
}

// LedgerReset deletes an account's row for the period; the next use seeds
// it again.
func (s *Store) LedgerReset(ctx context.Context, a LedgerAccount, period time.Time) error {
	r := ledgerRow(a, MonthOf(period))
	err := s.db.WithContext(ctx).Exec(`DELETE FROM `+r.table+` WHERE `+r.where, r.args...).Error
	return dbErr(err, "budget ledger")
}

// LedgerRaiseSpent raises an account's spending in the period to at least
// spent, keeping what is reserved; a period without a row is left to be
// seeded.
func (s *Store) LedgerRaiseSpent(ctx context.Context, a LedgerAccount, period time.Time, spent money.Amount) error {
	r := ledgerRow(a, MonthOf(period))
	args := append(append([]any{spent}, r.args...), spent)
	err := s.db.WithContext(ctx).Exec(`UPDATE `+r.table+` SET spent = ? WHERE `+r.where+` AND spent < ?`, args...).Error
	return dbErr(err, "budget ledger")
}

// seedLedgerRow makes sure the account's row exists (seeded once: a
// concurrent seed loses to the first).
func (s *Store) seedLedgerRow(ctx context.Context, a LedgerAccount, period time.Time, seed LedgerSeed) error {
	r := ledgerRow(a, period)
	db := s.db.WithContext(ctx)
	var n int64
	if err := db.Raw(`SELECT COUNT(*) FROM `+r.table+` WHERE `+r.where, r.args...).Scan(&n).Error; err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	spent, err := seed(a)
	if err != nil {
		return err
	}
	if a.Prepaid {
		return db.Exec(`INSERT INTO balance_ledgers (org_id, spent, reserved) VALUES (?, ?, 0)
			ON CONFLICT (org_id) DO NOTHING`, a.OrgID, spent).Error
	}
	if a.TokenID != 0 {
		return db.Exec(`INSERT INTO token_budget_ledgers (token_id, period, org_id, spent, reserved) VALUES (?, ?, ?, ?, 0)
			ON CONFLICT (token_id, period) DO NOTHING`, a.TokenID, period, a.OrgID, spent).Error
	}
	return db.Exec(`INSERT INTO budget_ledgers (org_id, period, spent, reserved) VALUES (?, ?, ?, 0)
		ON CONFLICT (org_id, period) DO NOTHING`, a.OrgID, period, spent).Error
}

// RecordBudgetAlert notes that orgID's spending crossed percent of its
// budget in period, with an audit entry. It reports false when the alert
// was already recorded (by this node or another), so each is sent once.
// With mail, the mail compose writes for each owner of the organization
// (by their address and the organization's name) is queued in the same
// transaction.
func (s *Store) RecordBudgetAlert(ctx context.Context, orgID int64, period time.Time, percent int, detail string,
	mail func(owner, orgName string) Mail) (bool, error) {
	var fresh bool
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Exec(`INSERT INTO budget_alerts (org_id, period, percent, created_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (org_id, period, percent) DO NOTHING`, orgID, MonthOf(period), percent, time.Now().UTC())
		if res.Error != nil {
			return res.Error
		}
		if fresh = res.RowsAffected == 1; !fresh {
			return nil
		}
		if err := s.mailOwners(tx, orgID, mail); err != nil {
			return err
		}
		return audit(tx, orgID, 0, "budget.alert", "", detail)
	})
	return fresh, dbErr(err, "budget alert")
}

// MailOwners queues the mail compose writes for each owner of orgID (by
// their address and the organization's name).
func (s *Store) MailOwners(ctx context.Context, orgID int64, compose func(owner, orgName string) Mail) error {
	return dbErr(s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return s.mailOwners(tx, orgID, compose) }), "mail")
}

// mailOwners queues, in tx, the mail compose writes for each owner of
// orgID (by their address and the organization's name); nil compose
// queues none.
func (s *Store) mailOwners(tx *gorm.DB, orgID int64, compose func(owner, orgName string) Mail) error {
	if compose == nil {
		return nil
	}
	var owners []struct{ Email, OrgName string }
	err := tx.Table("memberships").Select("users.email, organizations.name AS org_name").
		Joins("JOIN users ON users.id = memberships.user_id").Joins("JOIN organizations ON organizations.id = memberships.org_id").
		Where("memberships.org_id = ? AND memberships.role = ?", orgID, RoleOwner).Order("users.id").Scan(&owners).Error
	if err != nil {
		return dbErr(err, "owners")
	}
	for _, o := range owners {
		if err := enqueueMail(tx, s.now(), compose(o.Email, o.OrgName)); err != nil {
			return err
		}
	}
	return nil
}

// BudgetAlerts lists the thresholds orgID crossed in period.
func (s *Store) BudgetAlerts(ctx context.Context, orgID int64, period time.Time) ([]int, error) {
	var ps []int
	err := s.db.WithContext(ctx).Raw(`SELECT percent FROM budget_alerts WHERE org_id = ? AND period = ? ORDER BY percent`,
		orgID, MonthOf(period)).Scan(&ps).Error
	return ps, dbErr(err, "budget alerts")
}
