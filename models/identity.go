package models

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/apperr"
)

// UserIdentity is a user's account at an OpenID Connect provider: the
// provider's issuer and the account's subject name it for good, while the
// email it asserts may change.
type UserIdentity struct {
	Issuer  string `gorm:"primaryKey"`
	Subject string `gorm:"primaryKey"`
	UserID  int64
	// Email is the verified address the provider last asserted, lower
	// case; the user's own email stays what it was when they joined.
	Email        string
	CreatedAt    time.Time
	LastSignInAt time.Time
}

// HasPassword says whether the user can sign in with a password: one made
// by single sign-on has none (its hash is empty, which no bcrypt hash is)
// and signs in at the provider only.
//
// Password change and reset are being added separately: whether an SSO
// user may set a password there (and so sign in both ways) is for that
// change to decide, with this as the check.
func (u User) HasPassword() bool { return u.PasswordHash != "" }

// IdentityUser returns the user linked to the provider's account (issuer,
// subject), recording email as the address it asserts now and the time as
// its last sign-in. An account not linked yet is not found.
func (s *Store) IdentityUser(ctx context.Context, issuer, subject, email string) (User, error) {
	var u User
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Model(&UserIdentity{}).Where("issuer = ? AND subject = ?", issuer, subject).
			Updates(map[string]any{"email": NormalizeEmail(email), "last_sign_in_at": s.now().UTC()})
		if res.Error != nil {
			return dbErr(res.Error, "identity")
		}
		if res.RowsAffected == 0 {
			return apperr.New(apperr.NotFound, "identity not found")
		}
		return tx.Joins("JOIN user_identities i ON i.user_id = users.id").
			Where("i.issuer = ? AND i.subject = ?", issuer, subject).Take(&u).Error
	})
	return u, dbErr(err, "identity")
}

// LinkIdentity links the provider's account id to the existing user of
// its email, audited, and returns that user; no user with the email is not
// found. A user already linked to another account at the same provider is
// refused: an address the provider has handed on to someone else must not
// open the first holder's account.
//
// The provider has verified the address. A user whose address Sluice never
// verified may have been made by someone else, who signed up with it
// before its owner came (with no mail, nothing stops that): their
// password is dropped, their sessions end and their API tokens are
// revoked (revoked holds the tokens' hashes, for the gateways to forget),
// so the account is the address owner's alone from here (password reset
// gives them a password again). A verified user keeps all of it, and so
// does an admin (whom an operator or another admin made).
func (s *Store) LinkIdentity(ctx context.Context, id UserIdentity) (u User, revoked []string, err error) {
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Where("email = ?", NormalizeEmail(id.Email)).Take(&u).Error; err != nil {
			return dbErr(err, "user")
		}
		id.UserID = u.ID
		now := s.now().UTC()
		if err := linkIdentity(tx, id, now); err != nil {
			return err
		}
		detail := u.Email + " signed in by single sign-on (" + id.Issuer + ") for the first time"
		if u.EmailVerifiedAt == nil && !u.IsAdmin() {
			if err := tx.Model(&User{}).Where("id = ?", u.ID).
				Updates(map[string]any{"password_hash": "", "email_verified_at": now}).Error; err != nil {
				return dbErr(err, "user")
			}
			ended, err := endSessions(tx, u.ID, "", now)
			if err != nil {
				return err
			}
			toks, err := revokeTokens(tx, now, "user_id = ?", u.ID)
			if err != nil {
				return err
			}
			for _, t := range toks {
				revoked = append(revoked, t.Hash)
			}
			detail += fmt.Sprintf("; the address was never verified, so its password was dropped, %d sessions ended and %d API tokens were revoked",
				ended, len(toks))
			u.PasswordHash, u.EmailVerifiedAt = "", &now
		}
		return audit(tx, 0, u.ID, "identity.link", fmt.Sprint(u.ID), detail)
	})
	return u, revoked, dbErr(err, "user")
}

// CreateIdentityMember makes a new user, without a password, for the
// provider's account id and a member of orgID, audited: the first sign-in
// of someone whose email domain the operator gave to that organization. A
// taken email is a conflict; a missing organization is not found.
func (s *Store) CreateIdentityMember(ctx context.Context, id UserIdentity, orgID int64) (Member, error) {
	var m Member
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := lockOrganization(tx, orgID); err != nil {
			return err
		}
		now := s.now().UTC()
		u := User{Email: NormalizeEmail(id.Email), AccountRole: RoleMember, LastOrgID: orgID, CreatedAt: now}
		if err := createUser(tx, &u); err != nil {
			return err
		}
		if err := addMembership(tx, orgID, u.ID, RoleMember, now); err != nil {
			return err
		}
		id.UserID = u.ID
		if err := linkIdentity(tx, id, now); err != nil {
			return err
		}
		m = Member{User: u, OrgID: orgID, Role: RoleMember}
		return audit(tx, orgID, u.ID, "member.join", fmt.Sprint(u.ID), u.Email+" as member, by single sign-on ("+id.Issuer+")")
	})
	return m, dbErr(err, "user")
}

// CreateIdentityOrganization makes a new organization on tierName with a
// new user, without a password, as its owner, linked to the provider's
// account id: a first sign-in that no organization claims, which gets an
// organization of its own as a password signup does.
func (s *Store) CreateIdentityOrganization(ctx context.Context, id UserIdentity, orgName, tierName string) (Organization, Member, error) {
	return s.createOrganizationWithOwner(ctx, orgName, tierName, id.Email, "", RoleMember, func(tx *gorm.DB, m Member) error {
		id.UserID = m.ID
		return linkIdentity(tx, id, s.now())
	})
}

// linkIdentity inserts id inside tx. The account already linked (two first
// sign-ins at once) is a conflict with reason identity_taken; the user
// already linked to another account at the provider is refused.
func linkIdentity(tx *gorm.DB, id UserIdentity, now time.Time) error {
	var other int64
	if err := tx.Model(&UserIdentity{}).Where("user_id = ? AND issuer = ? AND subject <> ?", id.UserID, id.Issuer, id.Subject).
		Count(&other).Error; err != nil {
		return dbErr(err, "identity")
	}
	if other > 0 {
		return apperr.WithReason(apperr.Forbidden, "sso_other_account",
			"the Sluice account of "+NormalizeEmail(id.Email)+" signs in with another account at your identity provider; sign in with that one")
	}
	id.Email, id.CreatedAt, id.LastSignInAt = NormalizeEmail(id.Email), now.UTC(), now.UTC()
	if err := tx.Create(&id).Error; err != nil {
		if err := dbErr(err, "identity"); apperr.CodeOf(err) == apperr.Conflict {
			return apperr.WithReason(apperr.Conflict, "identity_taken", "this account at the identity provider is already linked")
		}
		return dbErr(err, "identity")
	}
	return nil
}
