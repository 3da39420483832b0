package templates

import (
	"fmt"

	"github.com/a-h/templ"
)

// TeamView is the organization page: its members for everyone in it and,
// for owners, the controls that manage them and the invitations.
type TeamView struct {
	OrgName string
	// CanManage is set for owners: role changes, removals, invitations.
	CanManage bool
	Members   []MemberRow
	// Invitations are the last 30 days' (owners only).
	Invitations []InvitationRow
	// NewInvitation is an invitation just made: mailed, or (without
	// mail) its link, shown this once for the owner to pass on.
	NewInvitation *NewInvitationView
	// MailOn: Sluice mails invitations; otherwise the owner gets links.
	MailOn bool
	Form   InviteForm
	// Bounds says how many invitations may wait and be made an hour.
	Bounds string
	Flash  string // a form's outcome, shown beside the members
	Error  string // a form's problem, shown beside the invitation form
}

// MemberRow is one member of the organization.
type MemberRow struct {
	UserID int64
	Email  string
	Role   string // member | owner
	Joined string
	You    bool // the visitor's own row
	// LastOwner is the only owner: they can be neither demoted nor
	// removed until another member is an owner.
	LastOwner bool
	// ActiveTokens are the API tokens they created here that still work:
	// removing them revokes those.
	ActiveTokens int
}

// InvitationRow is one invitation as its organization's owners see it.
type InvitationRow struct {
	ID        int64
	Email     string
	Role      string
	Status    string // pending | accepted | revoked | expired
	Created   string
	Expires   string
	InvitedBy string // "" when the account is gone
}

// NewInvitationView is an invitation just made, with its link.
type NewInvitationView struct {
	Email   string
	Role    string
	URL     string // "" when it was mailed
	Expires string
	Mailed  bool
}

// InviteForm refills the invitation form after a failed attempt.
type InviteForm struct {
	Email string
	Role  string
}

// InvitationView is the page an invitation's link opens: who invites whom
// into what, and the way in that fits the visitor.
type InvitationView struct {
	Code      string
	OrgName   string
	Email     string // the address it was sent to
	Role      string
	InvitedBy string
	Expires   string
	// Problem says why it cannot be used (used, revoked, expired); empty
	// while it can.
	Problem string
	// SignedInAs is the visitor's email when signed in; empty otherwise.
	SignedInAs string
	// WrongAccount: signed in with another address than the invited one.
	WrongAccount bool
	// Error is a problem with the submitted form.
	Error string
}

// memberRoleURL is where a member's role form posts.
func memberRoleURL(id int64) templ.SafeURL {
	return templ.URL(fmt.Sprintf("/organization/members/%d/role", id))
}

// memberRemoveURL is where a member's removal posts.
func memberRemoveURL(id int64) templ.SafeURL {
	return templ.URL(fmt.Sprintf("/organization/members/%d/remove", id))
}

// invitationRevokeURL is where an invitation's revocation posts.
func invitationRevokeURL(id int64) templ.SafeURL {
	return templ.URL(fmt.Sprintf("/organization/invitations/%d/revoke", id))
}

// invitationAcceptURL is where accepting an invitation posts.
func invitationAcceptURL(code string) templ.SafeURL {
	return templ.URL("/invitations/" + code + "/accept")
}

// invitationLoginURL signs in and comes back to the invitation.
func invitationLoginURL(code string) templ.SafeURL {
	return templ.URL("/login?next=/invitations/" + code)
}

// invitationBadgeClass picks a badge style for an invitation's state.
func invitationBadgeClass(status string) string {
	switch status {
	case "pending":
		return "badge-active"
	case "revoked":
		return "badge-revoked"
	case "expired":
		return "badge-expired"
	default:
		return "badge-neutral"
	}
}

// activeWord says how many of a member's tokens still work: "none
// active", "1 active".
func activeWord(n int) string {
	if n == 0 {
		return "none active"
	}
	return fmt.Sprintf("%d active", n)
}
