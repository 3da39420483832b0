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

// RedeemCode is a code an admin hands out that credits the balance of each
// organization that redeems it, until its uses run out or it expires. Only
// the code's SHA-256 is kept; Prefix is what may be shown of it again.
type RedeemCode struct {
	ID        int64
	CodeHash  string
	Prefix    string
	Amount    money.Amount
	Uses      int
	UsesLeft  int
	ExpiresAt *time.Time
	Note      string
	CreatedBy int64
	CreatedAt time.Time
}

// TableName names the table.
func (RedeemCode) TableName() string { return "redeem_codes" }

// Limits of a redeem code.
const (
	MaxRedeemUses   = 100_000
	redeemPrefixLen = len("rc_") + 6
)

// ErrNoSuchRedeemCode is the one answer to a code that is wrong, expired or
// used up: telling them apart would tell a guesser which codes exist.
var ErrNoSuchRedeemCode = apperr.WithReason(apperr.NotFound, "redeem_code_not_found",
	"no such redeem code: it is mistyped, expired or used up")

// CreateRedeemCode makes a code worth amount for uses organizations, until
// expiresAt (nil: no end), audited. The plain code is returned this once.
func (s *Store) CreateRedeemCode(ctx context.Context, admin User, amount money.Amount, uses int, expiresAt *time.Time, note string) (RedeemCode, string, error) {
	now := s.now().UTC()
	switch {
	case amount <= 0 || amount > MaxBalance:
		return RedeemCode{}, "", apperr.Field(apperr.Invalid, "invalid_amount", "amount",
			"amount must be a decimal string of dollars above 0 and at most "+MaxBalance.String()+", like \"5.00\"")
	case uses < 1 || uses > MaxRedeemUses:
		return RedeemCode{}, "", apperr.Field(apperr.Invalid, "invalid_uses", "uses", fmt.Sprintf("uses must be from 1 to %d", MaxRedeemUses))
	case expiresAt != nil && !expiresAt.After(now):
		return RedeemCode{}, "", apperr.Field(apperr.Invalid, "invalid_expires_at", "expires_at", "expires_at must be in the future")
	case len(note) > 200:
		return RedeemCode{}, "", apperr.Field(apperr.Invalid, "invalid_note", "note", "a note is at most 200 characters")
	}
	code := "rc_" + rand.Text() // 130 random bits
	c := RedeemCode{CodeHash: HashToken(code), Prefix: code[:redeemPrefixLen], Amount: amount, Uses: uses, UsesLeft: uses,
		Note: note, CreatedBy: admin.ID, CreatedAt: now}
	if expiresAt != nil {
		t := expiresAt.UTC()
		c.ExpiresAt = &t
	}
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&c).Error; err != nil {
			return dbErr(err, "redeem code")
		}
		detail := fmt.Sprintf("%s x %d", amount, uses)
		if c.ExpiresAt != nil {
			detail += ", until " + c.ExpiresAt.Format(time.RFC3339)
		}
		return audit(tx, admin.LastOrgID, admin.ID, "redeem_code.create", c.Prefix, detail)
	})
	return c, code, err
}

// RedeemCodes lists every code, newest first.
func (s *Store) RedeemCodes(ctx context.Context) ([]RedeemCode, error) {
	var cs []RedeemCode
	err := s.db.WithContext(ctx).Order("created_at DESC, id DESC").Limit(500).Find(&cs).Error
	return cs, dbErr(err, "redeem codes")
}

// RedeemCode credits orgID's balance with code's amount, for userID, in one
// transaction: a use taken only while one is left and the code has not
// expired (a conditional update, so n uses admit n redemptions however
// many arrive at once), and the credit, applied once per code and
// organization (an organization redeems a code once; a second try is a
// conflict and takes no use).
func (s *Store) RedeemCode(ctx context.Context, orgID, userID int64, code string) (RedeemCode, error) {
	code = strings.TrimSpace(code)
	if !strings.HasPrefix(code, "rc_") || len(code) > 64 {
		return RedeemCode{}, ErrNoSuchRedeemCode
	}
	var c RedeemCode
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Where("code_hash = ?", HashToken(code)).Take(&c).Error; err != nil {
			if apperr.CodeOf(dbErr(err, "redeem code")) == apperr.NotFound {
				return ErrNoSuchRedeemCode
			}
			return dbErr(err, "redeem code")
		}
		res := tx.Exec(`UPDATE redeem_codes SET uses_left = uses_left - 1 WHERE id = ? AND uses_left > 0
			AND (expires_at IS NULL OR expires_at > ?)`, c.ID, s.now().UTC())
		if res.Error != nil {
			return dbErr(res.Error, "redeem code")
		}
		if res.RowsAffected == 0 {
			return ErrNoSuchRedeemCode
		}
		applied, err := s.creditIn(tx, balanceCredit{orgID: orgID, actorID: userID, amount: c.Amount, kind: BalanceRedeem,
			reference: RedeemReference(c.ID, orgID), note: "redeem code " + c.Prefix + "…"})
		if err != nil {
			return err
		}
		if !applied {
			return apperr.WithReason(apperr.Conflict, "redeem_code_used",
				"this organization has redeemed this code already; a code credits each organization once")
		}
		c.UsesLeft--
		return nil
	})
	return c, err
}

// RedeemReference is the balance entry reference of code id redeemed by
// orgID: the pair, so one organization redeems one code once.
func RedeemReference(codeID, orgID int64) string {
	return "code:" + strconv.FormatInt(codeID, 10) + ":org:" + strconv.FormatInt(orgID, 10)
}
