package models

import (
	"context"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/money"
)

// Budget ledgers in the database, for clusters without Redis: each change is
// one conditional statement on the organization's row, so concurrent
// reservations serialise on the row lock and can never together pass the
// limit.

// LedgerBalance is a ledger row's spending.
type LedgerBalance struct {
	Spent    money.Amount
	Reserved money.Amount
}

// LedgerReserve holds amount for orgID in period if it fits under limit,
// seeding the row with seed (what the period has billed) when it is new.
func (s *Store) LedgerReserve(ctx context.Context, orgID int64, period time.Time, amount, limit money.Amount, seed func() (money.Amount, error)) (LedgerBalance, bool, error) {
	var b LedgerBalance
	var ok bool
	err := s.withLedgerRow(ctx, orgID, period, seed, func(tx *gorm.DB) error {
		res := tx.Raw(`UPDATE budget_ledgers SET reserved = reserved + ? WHERE org_id = ? AND period = ?
			AND spent + reserved + ? <= ? RETURNING spent, reserved`, amount, orgID, period, amount, limit).Scan(&b)
		if res.Error != nil {
			return res.Error
		}
		if ok = res.RowsAffected == 1; !ok {
			return tx.Raw(`SELECT spent, reserved FROM budget_ledgers WHERE org_id = ? AND period = ?`, orgID, period).Scan(&b).Error
		}
		return nil
	})
	return b, ok, dbErr(err, "budget ledger")
}

// LedgerSettle releases reserved and adds actual to spent.
func (s *Store) LedgerSettle(ctx context.Context, orgID int64, period time.Time, reserved, actual money.Amount, seed func() (money.Amount, error)) (LedgerBalance, error) {
	var b LedgerBalance
	err := s.withLedgerRow(ctx, orgID, period, seed, func(tx *gorm.DB) error {
		return tx.Raw(`UPDATE budget_ledgers SET reserved = CASE WHEN reserved > ? THEN reserved - ? ELSE 0 END,
			spent = spent + ? WHERE org_id = ? AND period = ? RETURNING spent, reserved`,
			reserved, reserved, actual, orgID, period).Scan(&b).Error
	})
	return b, dbErr(err, "budget ledger")
}

// LedgerRead reads the period's row, seeding it if new.
func (s *Store) LedgerRead(ctx context.Context, orgID int64, period time.Time, seed func() (money.Amount, error)) (LedgerBalance, error) {
	var b LedgerBalance
	err := s.withLedgerRow(ctx, orgID, period, seed, func(tx *gorm.DB) error {
		return tx.Raw(`SELECT spent, reserved FROM budget_ledgers WHERE org_id = ? AND period = ?`, orgID, period).Scan(&b).Error
	})
	return b, dbErr(err, "budget ledger")
}

// LedgerReset deletes the period's row; the next use seeds it again.
func (s *Store) LedgerReset(ctx context.Context, orgID int64, period time.Time) error {
	err := s.db.WithContext(ctx).Exec(`DELETE FROM budget_ledgers WHERE org_id = ? AND period = ?`, orgID, MonthOf(period)).Error
	return dbErr(err, "budget ledger")
}

// LedgerRaiseSpent raises the period's spending to at least spent, keeping
// what is reserved; a period without a row is left to be seeded.
func (s *Store) LedgerRaiseSpent(ctx context.Context, orgID int64, period time.Time, spent money.Amount) error {
	err := s.db.WithContext(ctx).Exec(`UPDATE budget_ledgers SET spent = ? WHERE org_id = ? AND period = ? AND spent < ?`,
		spent, orgID, MonthOf(period), spent).Error
	return dbErr(err, "budget ledger")
}

// withLedgerRow makes sure the row exists (seeded once: a concurrent seed
// loses to the first), then runs op.
func (s *Store) withLedgerRow(ctx context.Context, orgID int64, period time.Time, seed func() (money.Amount, error), op func(*gorm.DB) error) error {
	period = MonthOf(period)
	db := s.db.WithContext(ctx)
	var n int64
	if err := db.Raw(`SELECT COUNT(*) FROM budget_ledgers WHERE org_id = ? AND period = ?`, orgID, period).Scan(&n).Error; err != nil {
		return err
	}
	if n == 0 {
		spent, err := seed()
		if err != nil {
			return err
		}
		err = db.Exec(`INSERT INTO budget_ledgers (org_id, period, spent, reserved) VALUES (?, ?, ?, 0)
			ON CONFLICT (org_id, period) DO NOTHING`, orgID, period, spent).Error
		if err != nil {
			return err
		}
	}
	return op(db)
}

// RecordBudgetAlert notes that orgID's spending crossed percent of its
// budget in period, with an audit entry. It reports false when the alert
// was already recorded (by this node or another), so each is sent once.
func (s *Store) RecordBudgetAlert(ctx context.Context, orgID int64, period time.Time, percent int, detail string) (bool, error) {
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
		return audit(tx, orgID, 0, "budget.alert", "", detail)
	})
	return fresh, dbErr(err, "budget alert")
}

// BudgetAlerts lists the thresholds orgID crossed in period.
func (s *Store) BudgetAlerts(ctx context.Context, orgID int64, period time.Time) ([]int, error) {
	var ps []int
	err := s.db.WithContext(ctx).Raw(`SELECT percent FROM budget_alerts WHERE org_id = ? AND period = ? ORDER BY percent`,
		orgID, MonthOf(period)).Scan(&ps).Error
	return ps, dbErr(err, "budget alerts")
}
