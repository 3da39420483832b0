package models

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/apperr"
)

// AccountLink is a one-time link: a password reset, an email
// verification, or a signup waiting for its address to be confirmed. Only
// its token's SHA-256 is kept; it works once, until ExpiresAt.
type AccountLink struct {
	ID        int64
	Purpose   string
	TokenHash string
	UserID    *int64 // nil for a signup: its account does not exist yet
	Email     string
	// PasswordHash and OrgName are what a signup link makes when used.
	PasswordHash string
	OrgName      string
	CreatedBy    *int64 // the admin who made a reset; nil when the user asked
	Mailed       bool   // it went by mail to Email, so using it proves the address
	CreatedAt    time.Time
	ExpiresAt    time.Time
	UsedAt       *time.Time
}

// TableName is the links' table.
func (AccountLink) TableName() string { return "account_links" }

// What a link is for, and how long each works.
const (
	LinkPasswordReset = "password_reset"
	LinkVerification  = "email_verification"
	LinkSignup        = "signup"

	PasswordResetTTL = time.Hour
	VerificationTTL  = 24 * time.Hour

	linkTokenPrefix = "lnk_"
)

// NewLinkToken returns a fresh link token in plain text: "lnk_" and 130
// random bits.
func NewLinkToken() string { return linkTokenPrefix + rand.Text() }

// LinkTokenShaped says whether s could be a link token at all, so a
// mangled link is refused without a query.
func LinkTokenShaped(s string) bool {
	if len(s) != len(linkTokenPrefix)+invitationCodeTextSize || !strings.HasPrefix(s, linkTokenPrefix) {
		return false
	}
	for _, c := range s[len(linkTokenPrefix):] {
		if !('A' <= c && c <= 'Z' || '2' <= c && c <= '7') {
			return false
		}
	}
	return true
}

func linkNotFound(what string) error {
	return apperr.WithReason(apperr.NotFound, "link_not_found", "this "+what+" link is not valid: check that it was copied whole, or ask for a new one")
}

// claimLink uses the link of token for purpose inside tx: one conditional
// update, so of two uses at once exactly one succeeds and the other is
// told the link was used. Every refusal says why.
func claimLink(tx *gorm.DB, purpose, what, token string, now time.Time) (AccountLink, error) {
	l, err := findLink(tx, purpose, what, token, now)
	if err != nil {
		return l, err
	}
	res := tx.Model(&AccountLink{}).Where("id = ? AND used_at IS NULL AND expires_at > ?", l.ID, now).Update("used_at", now)
	if res.Error != nil {
		return l, dbErr(res.Error, "link")
	}
	if res.RowsAffected == 0 {
		return l, linkUsed(what) // another use got there first
	}
	l.UsedAt = &now
	return l, nil
}

func linkUsed(what string) error {
	return apperr.WithReason(apperr.Conflict, "link_used", "this "+what+" link has already been used (each works once); ask for a new one")
}

// findLink is token's link for purpose, if it can still be used, with
// claimLink's errors.
func findLink(tx *gorm.DB, purpose, what, token string, now time.Time) (AccountLink, error) {
	var l AccountLink
	if !LinkTokenShaped(token) {
		return l, linkNotFound(what)
	}
	var found []AccountLink
	if err := tx.Where("token_hash = ? AND purpose = ?", HashToken(token), purpose).Limit(1).Find(&found).Error; err != nil {
		return l, dbErr(err, "link")
	}
	if len(found) == 0 {
		return l, linkNotFound(what)
	}
	l = found[0]
	switch {
	case l.UsedAt != nil:
		return l, linkUsed(what)
	case !now.Before(l.ExpiresAt):
		return l, apperr.WithReason(apperr.Conflict, "link_expired", fmt.Sprintf("this %s link expired at %s (links work for %s); ask for a new one",
			what, l.ExpiresAt.UTC().Format("2006-01-02 15:04 UTC"), ttlWords(l.ExpiresAt.Sub(l.CreatedAt))))
	}
	return l, nil
}

func ttlWords(d time.Duration) string {
	if d.Round(time.Hour) == time.Hour {
		return "an hour"
	}
	return fmt.Sprintf("%d hours", int(d.Round(time.Hour)/time.Hour))
}

// LinkKeep is how long a link is kept once it is used or expired: long
// enough to be told "already used" or "expired" rather than "not valid"
// by a late click, short enough that an abandoned signup's password hash
// and address do not stay for good.
const LinkKeep = 7 * 24 * time.Hour

// DeleteStaleLinks deletes the links used or expired more than LinkKeep
// before now, and says how many.
func (s *Store) DeleteStaleLinks(ctx context.Context, now time.Time) (int64, error) {
	before := now.UTC().Add(-LinkKeep)
	res := s.db.WithContext(ctx).Where("expires_at <= ? OR used_at <= ?", before, before).Delete(&AccountLink{})
	return res.RowsAffected, dbErr(res.Error, "stale links")
}

// createLink inserts a link for token inside tx.
func createLink(tx *gorm.DB, l AccountLink, token string, now time.Time, ttl time.Duration) error {
	l.TokenHash, l.Email = HashToken(token), NormalizeEmail(l.Email)
	l.CreatedAt, l.ExpiresAt = now, now.Add(ttl)
	return dbErr(tx.Create(&l).Error, "link")
}

// CreatePasswordReset makes a password reset link of token for u, valid
// for PasswordResetTTL; the reset links u had before stop working. With
// mail, the mail is queued in the same transaction: for a reset u asked
// for (by nil), at most MailsPerAddressHour an hour, past which nothing is
// made and made is false. by is the admin who made it, audited.
func (s *Store) CreatePasswordReset(ctx context.Context, u User, token string, by *User, mail *Mail) (made bool, err error) {
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		now := s.now().UTC()
		if mail != nil && by == nil {
			if made, err = enqueueBoundedMail(tx, now, *mail); err != nil || !made {
				return err
			}
		} else if mail != nil {
			if err := enqueueMail(tx, now, *mail); err != nil {
				return err
			}
		}
		made = true
		if err := tx.Model(&AccountLink{}).Where("user_id = ? AND purpose = ? AND used_at IS NULL", u.ID, LinkPasswordReset).
			Update("used_at", now).Error; err != nil {
			return dbErr(err, "links")
		}
		l := AccountLink{Purpose: LinkPasswordReset, UserID: &u.ID, Email: u.Email, Mailed: mail != nil}
		actor, detail := u.ID, "asked for by the user"
		if by != nil {
			l.CreatedBy, actor, detail = &by.ID, by.ID, "made by admin "+by.Email
			if mail != nil {
				detail += ", mailed"
			} else {
				detail += ", link shown to the admin"
			}
		}
		if err := createLink(tx, l, token, now, PasswordResetTTL); err != nil {
			return err
		}
		return audit(tx, u.LastOrgID, actor, "user.password_reset.create", fmt.Sprint(u.ID), u.Email+": "+detail)
	})
	return made, dbErr(err, "password reset")
}

// CheckPasswordReset says whether token is a password reset link that can
// still be used, with ResetPassword's errors: asked before the new
// password is hashed, so a made-up link costs no hash.
func (s *Store) CheckPasswordReset(ctx context.Context, token string) error {
	_, err := findLink(s.db.WithContext(ctx), LinkPasswordReset, "password reset", token, s.now().UTC())
	return err
}

// ResetPassword uses a password reset link: the user's password becomes
// passwordHash and every session of theirs ends, on every node at once.
// A link that went by mail also verifies the address. It returns the user
// and how many sessions ended.
func (s *Store) ResetPassword(ctx context.Context, token, passwordHash string) (User, int64, error) {
	var (
		u     User
		ended int64
	)
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		now := s.now().UTC()
		l, err := claimLink(tx, LinkPasswordReset, "password reset", token, now)
		if err != nil {
			return err
		}
		if err := tx.Where("id = ?", *l.UserID).Take(&u).Error; err != nil {
			return dbErr(err, "user")
		}
		set := map[string]any{"password_hash": passwordHash}
		if l.Mailed && u.EmailVerifiedAt == nil {
			set["email_verified_at"] = now
			u.EmailVerifiedAt = &now
		}
		if err := tx.Model(&User{}).Where("id = ?", u.ID).Updates(set).Error; err != nil {
			return dbErr(err, "user")
		}
		u.PasswordHash = passwordHash
		if ended, err = endSessions(tx, u.ID, "", now); err != nil {
			return err
		}
		return audit(tx, u.LastOrgID, u.ID, "user.password_reset.use", fmt.Sprint(u.ID), fmt.Sprintf("%s: %d sessions ended", u.Email, ended))
	})
	return u, ended, dbErr(err, "password reset")
}

// ChangePassword sets u's password to passwordHash and ends every session
// of theirs but keep (the session that asked; "" ends all), on every node
// at once, audited. It returns how many sessions ended.
func (s *Store) ChangePassword(ctx context.Context, u User, passwordHash, keep string) (int64, error) {
	var ended int64
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		now := s.now().UTC()
		if err := tx.Model(&User{}).Where("id = ?", u.ID).Update("password_hash", passwordHash).Error; err != nil {
			return dbErr(err, "user")
		}
		var err error
		if ended, err = endSessions(tx, u.ID, keep, now); err != nil {
			return err
		}
		// A pending reset link was asked for with the old password
		// forgotten; it must not undo this one.
		if err := tx.Model(&AccountLink{}).Where("user_id = ? AND purpose = ? AND used_at IS NULL", u.ID, LinkPasswordReset).
			Update("used_at", now).Error; err != nil {
			return dbErr(err, "links")
		}
		return audit(tx, u.LastOrgID, u.ID, "user.password.change", fmt.Sprint(u.ID), fmt.Sprintf("%s: %d other sessions ended", u.Email, ended))
	})
	return ended, dbErr(err, "password")
}

// endSessions revokes every open session of userID but keep inside tx.
func endSessions(tx *gorm.DB, userID int64, keep string, now time.Time) (int64, error) {
	res := tx.Model(&LoginSession{}).Where("user_id = ? AND revoked_at IS NULL AND id <> ?", userID, keep).Update("revoked_at", now)
	return res.RowsAffected, dbErr(res.Error, "sessions")
}

// CreateVerification makes an email verification link of token for u,
// valid for VerificationTTL, and queues its mail in the same transaction,
// at most MailsPerAddressHour an hour (made is false past it).
func (s *Store) CreateVerification(ctx context.Context, u User, token string, mail Mail) (made bool, err error) {
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		now := s.now().UTC()
		if made, err = enqueueBoundedMail(tx, now, mail); err != nil || !made {
			return err
		}
		return createLink(tx, AccountLink{Purpose: LinkVerification, UserID: &u.ID, Email: u.Email, Mailed: true}, token, now, VerificationTTL)
	})
	return made, dbErr(err, "verification")
}

// CreatePendingSignup keeps a signup until its address is confirmed: a
// link of token that makes the organization orgName with email (and
// passwordHash) as its owner when used, valid for VerificationTTL, and its
// mail, queued in the same transaction, at most MailsPerAddressHour an
// hour (made is false past it). No account exists until then, so whether
// the address is taken cannot be learnt by signing in.
func (s *Store) CreatePendingSignup(ctx context.Context, email, passwordHash, orgName, token string, mail Mail) (made bool, err error) {
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		now := s.now().UTC()
		if made, err = enqueueBoundedMail(tx, now, mail); err != nil || !made {
			return err
		}
		return createLink(tx, AccountLink{Purpose: LinkSignup, Email: email, PasswordHash: passwordHash, OrgName: orgName, Mailed: true},
			token, now, VerificationTTL)
	})
	return made, dbErr(err, "signup")
}

// EnqueueBoundedMail queues m unless its address got MailsPerAddressHour
// of its kind in the last hour, and says whether it did.
func (s *Store) EnqueueBoundedMail(ctx context.Context, m Mail) (bool, error) {
	return enqueueBoundedMail(s.db.WithContext(ctx), s.now(), m)
}

// Confirmation is what using an email link did.
type Confirmation struct {
	// Created says a signup link made its account: Member is its owner,
	// acting in Organization. Otherwise an existing user's address was
	// verified.
	Created      bool
	Member       Member
	Organization Organization
}

// ConfirmEmail uses an email link: a verification link marks its user's
// address verified; a signup link makes its organization and owner, the
// address verified. A signup whose address got an account meanwhile is a
// conflict that says to sign in.
func (s *Store) ConfirmEmail(ctx context.Context, token string) (Confirmation, error) {
	var c Confirmation
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		now := s.now().UTC()
		purpose := LinkVerification
		var found []AccountLink
		if LinkTokenShaped(token) {
			if err := tx.Where("token_hash = ?", HashToken(token)).Limit(1).Find(&found).Error; err != nil {
				return dbErr(err, "link")
			}
		}
		if len(found) == 1 && found[0].Purpose == LinkSignup {
			purpose = LinkSignup
		}
		l, err := claimLink(tx, purpose, "email confirmation", token, now)
		if err != nil {
			return err
		}
		if purpose == LinkSignup {
			o, m, err := s.newOrganizationWithOwner(tx, l.OrgName, "free", l.Email, l.PasswordHash, RoleMember, &now)
			if apperr.As(err).Reason == "email_taken" {
				return apperr.WithReason(apperr.Conflict, "email_taken", "an account with this email already exists: sign in, or reset its password")
			}
			c = Confirmation{Created: true, Member: m, Organization: o}
			return err
		}
		var u User
		if err := tx.Where("id = ?", *l.UserID).Take(&u).Error; err != nil {
			return dbErr(err, "user")
		}
		if u.EmailVerifiedAt == nil {
			if err := tx.Model(&User{}).Where("id = ?", u.ID).Update("email_verified_at", now).Error; err != nil {
				return dbErr(err, "user")
			}
			u.EmailVerifiedAt = &now
		}
		c.Member = Member{User: u}
		return audit(tx, u.LastOrgID, u.ID, "user.email.verify", fmt.Sprint(u.ID), u.Email)
	})
	return c, dbErr(err, "email confirmation")
}

// OwnedOrganizationIDs lists the organizations userID owns, whose cached
// tokens a change of theirs (a verified address) concerns.
func (s *Store) OwnedOrganizationIDs(ctx context.Context, userID int64) ([]int64, error) {
	var ids []int64
	err := s.db.WithContext(ctx).Model(&Membership{}).Where("user_id = ? AND role = ?", userID, RoleOwner).Pluck("org_id", &ids).Error
	return ids, dbErr(err, "memberships")
}
