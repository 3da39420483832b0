package accounts

import (
	"context"
	"strings"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
)

// NeedOrganization refuses work in an organization from a user who
// belongs to none (removed from their last one): they may still sign in,
// list their organizations (none) and accept an invitation.
func NeedOrganization(m models.Member) error {
	if !m.HasOrganization() {
		return apperr.WithReason(apperr.Forbidden, "no_organization",
			"you belong to no organization: ask an owner to invite you, then open the invitation's link")
	}
	return nil
}

// NeedOwner refuses a member an owner's work before anything is read
// (what says what is refused: "set its budget"); the stores check again
// inside their transactions, where it counts.
func NeedOwner(m models.Member, what string) error {
	if err := NeedOrganization(m); err != nil {
		return err
	}
	if !m.IsOwner() {
		return apperr.WithReason(apperr.Forbidden, "owner_required", "only the organization's owners may "+what)
	}
	return nil
}

// Invite asks email into m's organization as role ("" is member) and
// returns the invitation with its code, shown this once. Owners only.
// Where Sluice sends mail the invitation is mailed, in the transaction
// that makes it, and its code is shown to nobody else (the code returned
// is ""): using it then proves the invitee's address.
func (s *Service) Invite(ctx context.Context, m models.Member, email string, role models.Role) (models.Invitation, string, error) {
	if err := NeedOwner(m, "invite people"); err != nil {
		return models.Invitation{}, "", err
	}
	email = strings.TrimSpace(email)
	if err := ValidateEmail(email); err != nil {
		return models.Invitation{}, "", apperr.Field(apperr.Unprocessable, "invalid_email", "email", apperr.As(err).Message)
	}
	if role == "" {
		role = models.RoleMember
	}
	if s.mail == nil {
		return s.store.CreateInvitation(ctx, m, email, role)
	}
	o, err := s.store.Organization(ctx, m.OrgID)
	if err != nil {
		return models.Invitation{}, "", err
	}
	expires := s.store.Now().Add(models.InvitationTTL)
	inv, _, err := s.store.CreateMailedInvitation(ctx, m, email, role, func(code string) models.Mail {
		return queued(s.mail.Composer.Invitation(email, o.Name, m.Email, string(role), code, expires))
	})
	if err == nil {
		s.nudge()
	}
	return inv, "", err
}

// Invitations lists m's organization's recent invitations. Owners only:
// they carry addresses of people who are not members (yet).
func (s *Service) Invitations(ctx context.Context, m models.Member) ([]models.OrgInvitation, error) {
	if err := NeedOwner(m, "see invitations"); err != nil {
		return nil, err
	}
	return s.store.Invitations(ctx, m.OrgID)
}

// RevokeInvitation ends a pending invitation of m's organization: its link
// stops working at once. Owners only.
func (s *Service) RevokeInvitation(ctx context.Context, m models.Member, id int64) (models.Invitation, error) {
	if err := NeedOwner(m, "revoke invitations"); err != nil {
		return models.Invitation{}, err
	}
	return s.store.RevokeInvitation(ctx, m, id)
}

// AcceptInvitation makes u a member of the organization code invites them
// to. The session they accept with keeps acting where it did; switching
// is theirs to ask for.
func (s *Service) AcceptInvitation(ctx context.Context, u models.User, code string) (models.Member, error) {
	return s.store.AcceptInvitation(ctx, u, code)
}

// Members lists m's organization's members; any member may read them.
func (s *Service) Members(ctx context.Context, m models.Member) ([]models.OrgMember, error) {
	if err := NeedOrganization(m); err != nil {
		return nil, err
	}
	return s.store.Members(ctx, m.OrgID)
}

// SetMemberRole makes a member of m's organization a member or an owner.
// Owners only; the last owner stays one.
func (s *Service) SetMemberRole(ctx context.Context, m models.Member, userID int64, role models.Role) (models.OrgMember, error) {
	if err := NeedOwner(m, "change members' roles"); err != nil {
		return models.OrgMember{}, err
	}
	return s.store.SetMemberRole(ctx, m, userID, role)
}

// RemoveMember takes userID out of m's organization: an owner removes
// anyone, a member only themselves. Their sessions in the organization end
// at once (the next request of any of them is refused, on every node) and
// the API tokens they created in it are revoked and forgotten by every
// node's gateway, as RevokeToken does. The last owner cannot go.
func (s *Service) RemoveMember(ctx context.Context, m models.Member, userID int64) (models.Removal, error) {
	if userID != m.ID {
		if err := NeedOwner(m, "remove members"); err != nil {
			return models.Removal{}, err
		}
	} else if err := NeedOrganization(m); err != nil {
		return models.Removal{}, err
	}
	r, err := s.store.RemoveMember(ctx, m, userID)
	if err != nil {
		return r, err
	}
	s.forgetTokens(ctx, r.TokenHashes...)
	return r, nil
}
