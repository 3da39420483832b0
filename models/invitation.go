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

// Invitation asks one email address into an organization with a role. Its
// code is shown once, to the owner who made it; only the code's SHA-256 is
// kept. It works once, until it expires or is revoked.
type Invitation struct {
	ID         int64
	OrgID      int64
	Email      string
	Role       Role
	CodeHash   string
	InvitedBy  *int64
	CreatedAt  time.Time
	ExpiresAt  time.Time
	AcceptedAt *time.Time
	AcceptedBy *int64
	RevokedAt  *time.Time
	// Mailed says the code went by mail to Email (and was shown to nobody),
	// so using it proves the address.
	Mailed bool
}

// The bounds of invitations: how long a code works, and how many an
// organization may have waiting and make in an hour, so an owner cannot
// flood addresses with them once they are mailed.
const (
	InvitationTTL          = 7 * 24 * time.Hour
	MaxPendingInvitations  = 100
	MaxInvitationsPerHour  = 20
	invitationListDays     = 30
	maxInvitationsListed   = 200
	invitationCodePrefix   = "inv_"
	invitationCodeTextSize = 26 // rand.Text: 26 base32 characters, 130 bits
)

// Invitation states, as Status names them.
const (
	InvitationPending  = "pending"
	InvitationAccepted = "accepted"
	InvitationRevoked  = "revoked"
	InvitationExpired  = "expired"
)

// Status is the invitation's state at now.
func (i Invitation) Status(now time.Time) string {
	switch {
	case i.AcceptedAt != nil:
		return InvitationAccepted
	case i.RevokedAt != nil:
		return InvitationRevoked
	case !now.Before(i.ExpiresAt):
		return InvitationExpired
	default:
		return InvitationPending
	}
}

// Now is the store's clock: what invitations are stamped and judged by.
func (s *Store) Now() time.Time { return s.now() }

// NewInvitationCode returns a fresh code in plain text: "inv_" and 130
// random bits.
func NewInvitationCode() string { return invitationCodePrefix + rand.Text() }

// InvitationCodeShaped says whether s could be a code at all, so a
// mistyped link is refused without a query.
func InvitationCodeShaped(s string) bool {
	if len(s) != len(invitationCodePrefix)+invitationCodeTextSize || !strings.HasPrefix(s, invitationCodePrefix) {
		return false
	}
	for _, c := range s[len(invitationCodePrefix):] {
		if !('A' <= c && c <= 'Z' || '2' <= c && c <= '7') {
			return false
		}
	}
	return true
}

// OrgInvitation is an invitation with the names it is shown by.
type OrgInvitation struct {
	Invitation
	OrgName      string
	InviterEmail string // "" when the inviter's account is gone
}

// CreateInvitation invites email into actor's organization as role and
// returns the invitation and its code, shown this once. Only owners may; an
// email that already belongs to a member is a conflict, and a pending
// invitation to the same address is revoked (replaced) by the new one. The
// organization's row is locked first, so the bounds (MaxPendingInvitations
// waiting, MaxInvitationsPerHour made) hold however many owners invite at
// once. The caller has checked the address's syntax.
func (s *Store) CreateInvitation(ctx context.Context, actor Member, email string, role Role) (Invitation, string, error) {
	return s.createInvitation(ctx, actor, email, role, nil)
}

// CreateMailedInvitation is CreateInvitation for an invitation that goes
// by mail: compose's mail (of the code) is queued in the same
// transaction, and the invitation is marked mailed.
func (s *Store) CreateMailedInvitation(ctx context.Context, actor Member, email string, role Role, compose func(code string) Mail) (Invitation, string, error) {
	return s.createInvitation(ctx, actor, email, role, compose)
}

func (s *Store) createInvitation(ctx context.Context, actor Member, email string, role Role, compose func(code string) Mail) (Invitation, string, error) {
	if !ValidMembershipRole(role) {
		return Invitation{}, "", apperr.Field(apperr.Unprocessable, "invalid_role", "role", `role must be "member" or "owner"`)
	}
	email = NormalizeEmail(email)
	code := NewInvitationCode()
	now := s.now().UTC()
	inv := Invitation{OrgID: actor.OrgID, Email: email, Role: role, CodeHash: HashToken(code), InvitedBy: &actor.ID,
		CreatedAt: now, ExpiresAt: now.Add(InvitationTTL), Mailed: compose != nil}
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := lockOrganization(tx, actor.OrgID); err != nil {
			return err
		}
		if err := requireOwner(tx, actor, "invite people"); err != nil {
			return err
		}
		var members int64
		err := tx.Table("memberships m").Joins("JOIN users u ON u.id = m.user_id").
			Where("m.org_id = ? AND u.email = ?", actor.OrgID, email).Count(&members).Error
		if err != nil {
			return dbErr(err, "members")
		}
		if members > 0 {
			return apperr.Field(apperr.Conflict, "already_member", "email", email+" is already a member of this organization")
		}
		// The one pending invitation to this address is replaced: the owner
		// lost its link, or changed its role.
		var replaced []Invitation
		if err := tx.Where("org_id = ? AND email = ? AND accepted_at IS NULL AND revoked_at IS NULL AND expires_at > ?", actor.OrgID, email, now).
			Find(&replaced).Error; err != nil {
			return dbErr(err, "invitations")
		}
		for _, r := range replaced {
			if err := tx.Model(&Invitation{}).Where("id = ?", r.ID).Update("revoked_at", now).Error; err != nil {
				return dbErr(err, "invitation")
			}
			if err := audit(tx, actor.OrgID, actor.ID, "invitation.revoke", fmt.Sprint(r.ID), r.Email+" (replaced by a new invitation)"); err != nil {
				return err
			}
		}
		var pending int64
		if err := tx.Model(&Invitation{}).Where("org_id = ? AND accepted_at IS NULL AND revoked_at IS NULL AND expires_at > ?", actor.OrgID, now).
			Count(&pending).Error; err != nil {
			return dbErr(err, "invitations")
		}
		if pending >= MaxPendingInvitations {
			return apperr.WithReason(apperr.Conflict, "invitation_limit_reached", fmt.Sprintf(
				"this organization has %d pending invitations, the most it may have; revoke some or wait for them to be accepted or to expire", pending))
		}
		var recent []time.Time
		if err := tx.Model(&Invitation{}).Where("org_id = ? AND created_at > ?", actor.OrgID, now.Add(-time.Hour)).
			Order("created_at").Pluck("created_at", &recent).Error; err != nil {
			return dbErr(err, "invitations")
		}
		if len(recent) >= MaxInvitationsPerHour {
			wait := recent[len(recent)-MaxInvitationsPerHour].UTC().Add(time.Hour).Sub(now)
			return &apperr.Error{Code: apperr.RateLimited, Reason: "invitations_throttled", RetryAfter: max(wait, time.Second),
				Message: fmt.Sprintf("this organization made %d invitations in the last hour, the most it may; try again in %s",
					len(recent), wait.Round(time.Minute).String())}
		}
		if err := tx.Create(&inv).Error; err != nil {
			return dbErr(err, "invitation")
		}
		detail := fmt.Sprintf("%s as %s", email, role)
		if compose != nil {
			if err := enqueueMail(tx, now, compose(code)); err != nil {
				return err
			}
			detail += ", mailed"
		}
		return audit(tx, actor.OrgID, actor.ID, "invitation.create", fmt.Sprint(inv.ID), detail)
	})
	if err != nil {
		return Invitation{}, "", dbErr(err, "invitation")
	}
	return inv, code, nil
}

// Invitations lists orgID's invitations of the last 30 days (every pending
// one among them), newest first, with their inviters.
func (s *Store) Invitations(ctx context.Context, orgID int64) ([]OrgInvitation, error) {
	var out []OrgInvitation
	since := s.now().UTC().AddDate(0, 0, -invitationListDays)
	err := s.db.WithContext(ctx).Table("invitations i").
		Select("i.*, o.name AS org_name, COALESCE(u.email, '') AS inviter_email").
		Joins("JOIN organizations o ON o.id = i.org_id").
		Joins("LEFT JOIN users u ON u.id = i.invited_by").
		Where("i.org_id = ? AND i.created_at > ?", orgID, since).
		Order("i.created_at DESC, i.id DESC").Limit(maxInvitationsListed).Scan(&out).Error
	for i := range out {
		out[i].utc()
	}
	return out, dbErr(err, "invitations")
}

func (i *Invitation) utc() {
	i.CreatedAt, i.ExpiresAt = i.CreatedAt.UTC(), i.ExpiresAt.UTC()
	for _, t := range []**time.Time{&i.AcceptedAt, &i.RevokedAt} {
		if *t != nil {
			u := (**t).UTC()
			*t = &u
		}
	}
}

// RevokeInvitation ends one of actor's organization's invitations,
// audited; only owners may. Another organization's is not found; revoking
// one that is no longer pending is a conflict saying what it is.
func (s *Store) RevokeInvitation(ctx context.Context, actor Member, id int64) (Invitation, error) {
	var inv Invitation
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := requireOwner(tx, actor, "revoke invitations"); err != nil {
			return err
		}
		if err := tx.Where("org_id = ? AND id = ?", actor.OrgID, id).Take(&inv).Error; err != nil {
			return dbErr(err, "invitation")
		}
		now := s.now().UTC()
		res := tx.Model(&Invitation{}).Where("id = ? AND accepted_at IS NULL AND revoked_at IS NULL", id).Update("revoked_at", now)
		if res.Error != nil {
			return dbErr(res.Error, "invitation")
		}
		if res.RowsAffected == 0 {
			return apperr.WithReason(apperr.Conflict, "invitation_not_pending", "this invitation is already "+inv.Status(now))
		}
		inv.RevokedAt = &now
		return audit(tx, actor.OrgID, actor.ID, "invitation.revoke", fmt.Sprint(id), inv.Email)
	})
	inv.utc()
	return inv, dbErr(err, "invitation")
}

// InvitationByCode finds the invitation a code opens, whatever its state,
// for the page a link leads to. A code that opens none is not found.
func (s *Store) InvitationByCode(ctx context.Context, code string) (OrgInvitation, error) {
	if !InvitationCodeShaped(code) {
		return OrgInvitation{}, invitationNotFound()
	}
	var out []OrgInvitation
	err := s.db.WithContext(ctx).Table("invitations i").
		Select("i.*, o.name AS org_name, COALESCE(u.email, '') AS inviter_email").
		Joins("JOIN organizations o ON o.id = i.org_id").
		Joins("LEFT JOIN users u ON u.id = i.invited_by").
		Where("i.code_hash = ?", HashToken(code)).Scan(&out).Error
	if err != nil {
		return OrgInvitation{}, dbErr(err, "invitation")
	}
	if len(out) == 0 {
		return OrgInvitation{}, invitationNotFound()
	}
	out[0].utc()
	return out[0], nil
}

func invitationNotFound() error {
	return apperr.WithReason(apperr.NotFound, "invitation_not_found",
		"this invitation link is not valid: check that it was copied whole, or ask an owner for a new one")
}

// Usable says why inv cannot be accepted at now by email, or nil when it
// can: the one wording of every refusal, for the page and the API alike.
func (inv Invitation) Usable(now time.Time, email string) error {
	switch inv.Status(now) {
	case InvitationAccepted:
		return apperr.WithReason(apperr.Conflict, "invitation_used", "this invitation has already been used; ask an owner for a new one")
	case InvitationRevoked:
		return apperr.WithReason(apperr.Conflict, "invitation_revoked", "this invitation was revoked; ask an owner for a new one")
	case InvitationExpired:
		return apperr.WithReason(apperr.Conflict, "invitation_expired",
			"this invitation expired on "+inv.ExpiresAt.UTC().Format("2006-01-02 15:04 UTC")+"; ask an owner for a new one")
	}
	if NormalizeEmail(email) != inv.Email {
		return apperr.WithReason(apperr.Forbidden, "invitation_email_mismatch",
			"this invitation is for another email address: sign in, or sign up, with the address it was sent to")
	}
	return nil
}

// claimInvitation uses the invitation of code for email inside tx: one
// conditional update, so of two accepts at once exactly one claims it and
// the other is told it was used.
func (s *Store) claimInvitation(tx *gorm.DB, code, email string, userID *int64, now time.Time) (Invitation, error) {
	var inv Invitation
	if !InvitationCodeShaped(code) {
		return inv, invitationNotFound()
	}
	if err := tx.Where("code_hash = ?", HashToken(code)).Take(&inv).Error; err != nil {
		if apperr.CodeOf(dbErr(err, "invitation")) == apperr.NotFound {
			return inv, invitationNotFound()
		}
		return inv, dbErr(err, "invitation")
	}
	if err := inv.Usable(now, email); err != nil {
		return inv, err
	}
	res := tx.Model(&Invitation{}).
		Where("id = ? AND accepted_at IS NULL AND revoked_at IS NULL AND expires_at > ?", inv.ID, now).
		Updates(map[string]any{"accepted_at": now, "accepted_by": userID})
	if res.Error != nil {
		return inv, dbErr(res.Error, "invitation")
	}
	if res.RowsAffected == 0 {
		// Another accept, or a revocation, got there first.
		var again Invitation
		if err := tx.Where("id = ?", inv.ID).Take(&again).Error; err != nil {
			return inv, dbErr(err, "invitation")
		}
		if err := again.Usable(now, email); err != nil {
			return inv, err
		}
		return inv, apperr.WithReason(apperr.Conflict, "invitation_used", "this invitation has already been used; ask an owner for a new one")
	}
	inv.AcceptedAt, inv.AcceptedBy = &now, userID
	return inv, nil
}

// AcceptInvitation makes u a member of the organization code invites them
// to, with its role, audited; the code is used up. The invitation must be
// pending and for u's email; a user already in the organization is a
// conflict, and the code stays unused.
func (s *Store) AcceptInvitation(ctx context.Context, u User, code string) (Member, error) {
	var m Member
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		now := s.now().UTC()
		inv, err := s.claimInvitation(tx, code, u.Email, &u.ID, now)
		if err != nil {
			return err
		}
		if err := addMembership(tx, inv.OrgID, u.ID, inv.Role, now); err != nil {
			return err
		}
		if inv.Mailed && u.EmailVerifiedAt == nil {
			// The code came by mail to u's address: they read it there.
			if err := tx.Model(&User{}).Where("id = ?", u.ID).Update("email_verified_at", now).Error; err != nil {
				return dbErr(err, "user")
			}
			u.EmailVerifiedAt = &now
		}
		m = Member{User: u, OrgID: inv.OrgID, Role: inv.Role}
		return audit(tx, inv.OrgID, u.ID, "member.join", fmt.Sprint(u.ID), fmt.Sprintf("%s as %s (invitation %d)", u.Email, inv.Role, inv.ID))
	})
	return m, dbErr(err, "invitation")
}

// CreateInvitedUser makes a new account for the email an invitation was
// sent to, a member of its organization with its role, in one
// transaction with the code's use: signing up through an invitation joins
// that organization instead of creating one. A taken email is a conflict.
func (s *Store) CreateInvitedUser(ctx context.Context, code, email, passwordHash string) (Organization, Member, error) {
	var (
		o Organization
		m Member
	)
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		now := s.now().UTC()
		inv, err := s.claimInvitation(tx, code, email, nil, now)
		if err != nil {
			return err
		}
		u := User{Email: NormalizeEmail(email), PasswordHash: passwordHash, AccountRole: RoleMember, LastOrgID: inv.OrgID, CreatedAt: now}
		if inv.Mailed {
			u.EmailVerifiedAt = &now // the code came by mail to this address
		}
		if err := createUser(tx, &u); err != nil {
			return err
		}
		if err := tx.Model(&Invitation{}).Where("id = ?", inv.ID).Update("accepted_by", u.ID).Error; err != nil {
			return dbErr(err, "invitation")
		}
		if err := addMembership(tx, inv.OrgID, u.ID, inv.Role, now); err != nil {
			return err
		}
		if err := tx.Preload("Tier").Where("id = ?", inv.OrgID).Take(&o).Error; err != nil {
			return dbErr(err, "organization")
		}
		m = Member{User: u, OrgID: inv.OrgID, Role: inv.Role}
		return audit(tx, inv.OrgID, u.ID, "member.join", fmt.Sprint(u.ID), fmt.Sprintf("%s as %s, signed up (invitation %d)", u.Email, inv.Role, inv.ID))
	})
	return o, m, dbErr(err, "user")
}

// createUser inserts u inside tx; a taken email is a conflict saying so.
func createUser(tx *gorm.DB, u *User) error {
	if err := tx.Create(u).Error; err != nil {
		if err := dbErr(err, "user"); apperr.CodeOf(err) == apperr.Conflict {
			return apperr.WithReason(apperr.Conflict, "email_taken", "an account with this email already exists")
		}
		return dbErr(err, "user")
	}
	return nil
}
