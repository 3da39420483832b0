package models

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/money"
)

// APIToken is a credential for the metered API. Only its SHA-256 is kept.
type APIToken struct {
	ID         int64
	OrgID      int64
	UserID     int64
	Name       string
	Prefix     string
	Hash       string
	CreatedAt  time.Time
	LastUsedAt *time.Time
	ExpiresAt  *time.Time
	RevokedAt  *time.Time
	// SigningSecret is set when the token requires signed requests: the
	// secret sealed with the master key (see Store.SetTokenSigning).
	SigningSecret *string
	// TokenControls are what its owner narrowed it to.
	TokenControls `gorm:"embedded"`
}

// SigningRequired reports whether the token takes only signed requests.
func (t APIToken) SigningRequired() bool { return t.SigningSecret != nil }

// Status is the token's state as its owner sees it.
func (t APIToken) Status(now time.Time) string {
	switch {
	case t.RevokedAt != nil:
		return "revoked"
	case t.ExpiresAt != nil && !now.Before(*t.ExpiresAt):
		return "expired"
	default:
		return "active"
	}
}

// TokenOwner is what the gateway needs to admit a request: the token, its
// organization's tier name and budget.
type TokenOwner struct {
	APIToken
	TierName       string
	BudgetLimit    *money.Amount
	BudgetHardStop bool
	// IncludedCredit is the organization's included credit for the month
	// it was read in, prorated over the tiers and terms in force in it
	// (MonthTerms.IncludedCredit): what a tier that blocks overage lets it
	// spend.
	IncludedCredit money.Amount `gorm:"-"`
	// UserDisabledAt is when an admin disabled the token's user, and
	// OrgDeletedAt when one deleted its organization: either stops it.
	UserDisabledAt *time.Time
	OrgDeletedAt   *time.Time
	// MemberGone says the token's user is no longer a member of its
	// organization, which also stops it (RemoveMember revokes their
	// tokens; this holds for one made as they were removed).
	MemberGone bool
	// CreditWithheld says the included credit is 0 because it waits for an
	// owner's verified email (MonthTerms.CreditWithheld).
	CreditWithheld bool `gorm:"-"`
	// LowBalanceThreshold is the organization's low-balance alert, nil for none.
	LowBalanceThreshold *money.Amount
}

const maxTokenName = 100

// CreateAPIToken issues a token for a user of orgID and returns it with the
// plain text, which is never stored. An organization holding as many
// active tokens as its tier allows (MaxAPITokens) is refused with a
// conflict; revoked and expired tokens do not count.
func (s *Store) CreateAPIToken(ctx context.Context, orgID, userID int64, name string, expiresAt *time.Time) (APIToken, string, error) {
	return s.CreateAPITokenWith(ctx, orgID, userID, name, expiresAt, TokenControls{})
}

// CreateAPITokenWith is CreateAPIToken for a token with controls, checked
// (TokenControls.Check, requests_per_minute against the tier) in the
// transaction that inserts it.
func (s *Store) CreateAPITokenWith(ctx context.Context, orgID, userID int64, name string, expiresAt *time.Time, c TokenControls) (APIToken, string, error) {
	if err := checkTokenName(name); err != nil {
		return APIToken{}, "", err
	}
	if err := c.Check(); err != nil {
		return APIToken{}, "", err
	}
	secret, err := NewTokenSecret()
	if err != nil {
		return APIToken{}, "", err
	}
	now := time.Now().UTC()
	t := APIToken{
		OrgID: orgID, UserID: userID, Name: name,
		Prefix: TokenDisplayPrefix(secret), Hash: HashToken(secret),
		CreatedAt: now, ExpiresAt: expiresAt, TokenControls: c,
	}
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := s.checkTokenLimit(tx, orgID, now); err != nil {
			return err
		}
		if err := checkTokenRate(tx, orgID, c.RequestsPerMinute); err != nil {
			return err
		}
		// The creator's membership was read when their session was; they
		// may have been removed since.
		_, err := member(tx, orgID, userID)
		if apperr.CodeOf(err) == apperr.NotFound {
			return apperr.WithReason(apperr.Forbidden, "not_a_member", "you are no longer a member of this organization")
		}
		if err != nil {
			return err
		}
		if err := tx.Create(&t).Error; err != nil {
			return dbErr(err, "token")
		}
		detail := t.Name
		if d := c.Describe(); d != "" {
			detail += ": " + d
		}
		return audit(tx, orgID, userID, "token.create", fmt.Sprint(t.ID), detail)
	})
	return t, secret, dbErr(err, "token")
}

// checkTokenLimit refuses a new token for orgID when it already holds as
// many active tokens as its tier allows. It runs in the transaction that
// inserts the token, and that transaction is the only one of the
// organization's token creations running: on Postgres the organization's
// row is locked (FOR NO KEY UPDATE, which other token creations wait for
// and foreign-key checks of usage and other rows do not), so the count
// below sees every token committed before; SQLite has one writer (one
// connection in this process, and a transaction that read before another
// wrote cannot write after it), so the count and the insert are one step.
func (s *Store) checkTokenLimit(tx *gorm.DB, orgID int64, now time.Time) error {
	q := `SELECT tiers.name, tiers.max_api_tokens FROM organizations JOIN tiers ON tiers.id = organizations.tier_id
		WHERE organizations.id = ?`
	if s.db.Dialector.Name() == "postgres" {
		q += ` FOR NO KEY UPDATE OF organizations`
	}
	var tier struct {
		Name         string
		MaxAPITokens int
	}
	res := tx.Raw(q, orgID).Scan(&tier)
	if res.Error != nil {
		return dbErr(res.Error, "organization")
	}
	if res.RowsAffected == 0 {
		return apperr.New(apperr.NotFound, "organization not found")
	}
	if tier.MaxAPITokens == 0 {
		return nil
	}
	var active int64
	err := tx.Model(&APIToken{}).Where("org_id = ? AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)", orgID, now).
		Count(&active).Error
	if err != nil {
		return dbErr(err, "tokens")
	}
	if active >= int64(tier.MaxAPITokens) {
		return apperr.WithReason(apperr.Conflict, "token_limit_reached", fmt.Sprintf(
			"the %s tier allows %d active API tokens and this organization has %d (revoked and expired ones do not count); revoke one or upgrade",
			tier.Name, tier.MaxAPITokens, active))
	}
	return nil
}

// APITokens lists an organization's tokens, newest first.
func (s *Store) APITokens(ctx context.Context, orgID int64) ([]APIToken, error) {
	var ts []APIToken
	err := s.db.WithContext(ctx).Where("org_id = ?", orgID).Order("id DESC").Find(&ts).Error
	return ts, dbErr(err, "tokens")
}

// RevokeAPIToken revokes one of orgID's tokens. Another organization's token
// is not found, never revoked. Revoking twice is harmless.
func (s *Store) RevokeAPIToken(ctx context.Context, actor User, orgID, id int64) (APIToken, error) {
	var t APIToken
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Where("org_id = ? AND id = ?", orgID, id).Take(&t).Error; err != nil {
			return dbErr(err, "token")
		}
		if t.RevokedAt != nil {
			return nil
		}
		now := time.Now().UTC()
		t.RevokedAt = &now
		if err := tx.Model(&t).Update("revoked_at", now).Error; err != nil {
			return dbErr(err, "token")
		}
		return audit(tx, orgID, actor.ID, "token.revoke", fmt.Sprint(id), t.Name)
	})
	return t, dbErr(err, "token")
}

// SetTokenSigning makes one of orgID's tokens require signed requests, with
// the secret seal returns for the token's id, or (seal nil) take unsigned
// ones again. A revoked token cannot change.
func (s *Store) SetTokenSigning(ctx context.Context, actor User, orgID, id int64, seal func(tokenID int64) string) (APIToken, error) {
	var t APIToken
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Where("org_id = ? AND id = ?", orgID, id).Take(&t).Error; err != nil {
			return dbErr(err, "token")
		}
		if t.RevokedAt != nil {
			return apperr.New(apperr.Conflict, "the token is revoked")
		}
		action := "token.signing.off"
		t.SigningSecret = nil
		if seal != nil {
			sealed := seal(t.ID)
			t.SigningSecret, action = &sealed, "token.signing.on"
		}
		if err := tx.Model(&t).Update("signing_secret", t.SigningSecret).Error; err != nil {
			return err
		}
		return audit(tx, orgID, actor.ID, action, fmt.Sprint(id), t.Name)
	})
	return t, dbErr(err, "token")
}

// TokenOwnerByHash resolves a token hash for the gateway, whatever its state;
// the caller decides what revoked or expired means.
func (s *Store) TokenOwnerByHash(ctx context.Context, hash string) (TokenOwner, error) {
	return s.tokenOwner(ctx, "api_tokens.hash = ?", hash)
}

// TokenOwnerByID resolves a token by id, for work done later on its behalf
// (a queued job), whatever its state.
func (s *Store) TokenOwnerByID(ctx context.Context, id int64) (TokenOwner, error) {
	return s.tokenOwner(ctx, "api_tokens.id = ?", id)
}

func (s *Store) tokenOwner(ctx context.Context, where string, arg any) (TokenOwner, error) {
	var o TokenOwner
	err := s.db.WithContext(ctx).Table("api_tokens").
		Select("api_tokens.*, tiers.name AS tier_name, organizations.budget_limit, organizations.budget_hard_stop, "+
			"users.disabled_at AS user_disabled_at, organizations.deleted_at AS org_deleted_at", "organizations.low_balance_threshold",
			"memberships.user_id IS NULL AS member_gone").
		Joins("JOIN organizations ON organizations.id = api_tokens.org_id").
		Joins("JOIN users ON users.id = api_tokens.user_id").
		Joins("JOIN tiers ON tiers.id = organizations.tier_id").
		Joins("LEFT JOIN memberships ON memberships.org_id = api_tokens.org_id AND memberships.user_id = api_tokens.user_id").
		Where(where, arg).Take(&o).Error
	if err != nil {
		return o, dbErr(err, "token")
	}
	m, err := s.MonthTerms(ctx, o.OrgID, s.now())
	o.IncludedCredit, o.CreditWithheld = m.IncludedCredit(), m.CreditWithheld
	return o, err
}

// TouchAPITokens records when tokens were last used, in one statement, so
// the gateway can batch what would otherwise be a write per request. A
// later time never goes back to an earlier one.
func (s *Store) TouchAPITokens(ctx context.Context, lastUsed map[int64]time.Time) error {
	if len(lastUsed) == 0 {
		return nil
	}
	ids := make([]int64, 0, len(lastUsed))
	ats := make([]time.Time, 0, len(lastUsed))
	for id, at := range lastUsed {
		ids, ats = append(ids, id), append(ats, at.UTC())
	}
	db := s.db.WithContext(ctx)
	if s.db.Dialector.Name() == "sqlite" {
		pairs := make([][2]any, len(ids))
		for i := range ids {
			pairs[i] = [2]any{ids[i], ats[i].Format(sqliteTime)}
		}
		b, err := json.Marshal(pairs)
		if err != nil {
			return err
		}
		return dbErr(db.Exec(`UPDATE api_tokens SET last_used_at = v.at
			FROM (SELECT value->>0 AS id, value->>1 AS at FROM json_each(?)) AS v
			WHERE api_tokens.id = v.id AND (api_tokens.last_used_at IS NULL OR api_tokens.last_used_at < v.at)`, string(b)).Error,
			"token last used")
	}
	// Array literals as text: gorm would spread a slice parameter into a
	// list of parameters.
	idList, atList := make([]string, len(ids)), make([]string, len(ats))
	for i := range ids {
		idList[i], atList[i] = strconv.FormatInt(ids[i], 10), `"`+ats[i].Format(time.RFC3339Nano)+`"`
	}
	return dbErr(db.Exec(`UPDATE api_tokens SET last_used_at = v.at
		FROM unnest(?::bigint[], ?::timestamptz[]) AS v(id, at)
		WHERE api_tokens.id = v.id AND (api_tokens.last_used_at IS NULL OR api_tokens.last_used_at < v.at)`,
		"{"+strings.Join(idList, ",")+"}", "{"+strings.Join(atList, ",")+"}").Error, "token last used")
}
