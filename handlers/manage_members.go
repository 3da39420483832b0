package handlers

import (
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/web"
)

// Teams: the user's organizations and the session's current one, an
// organization's members and its invitations.

type userOrgOut struct {
	ID       int64       `json:"id"`
	Name     string      `json:"name"`
	Tier     string      `json:"tier"`
	Role     models.Role `json:"role"`
	JoinedAt time.Time   `json:"joined_at"`
	// Current marks the organization the session acts in.
	Current bool `json:"current"`
}

// listOrganizations answers GET /api/organizations: every organization the
// user belongs to, the session's current one marked.
func (m *manage) listOrganizations(c *gin.Context) {
	u := currentUser(c)
	orgs, err := m.Store.UserOrganizations(c.Request.Context(), u.ID)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	out := make([]userOrgOut, len(orgs))
	for i, o := range orgs {
		out[i] = userOrgOut{ID: o.ID, Name: o.Name, Tier: o.Tier, Role: o.Role, JoinedAt: o.JoinedAt, Current: o.ID == u.OrgID}
	}
	c.JSON(http.StatusOK, gin.H{"data": out})
}

// switchOrganization answers PUT /api/session/organization {id}: the
// session acts in that organization from its next request on (the same
// token; its row says where it acts). One the user is not a member of is
// a 404, like any organization that is not theirs.
func (m *manage) switchOrganization(c *gin.Context) {
	var in struct {
		ID int64 `json:"id"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	if in.ID <= 0 {
		writeAPIError(c, m.log, apperr.Field(apperr.Invalid, "missing_id", "id", "id must be the id of one of your organizations (GET /api/organizations)"))
		return
	}
	ctx := c.Request.Context()
	u, err := m.Sessions.SwitchOrganization(ctx, m.Store, bearer(c.Request), currentUser(c).User, in.ID)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	o, err := m.Store.Organization(ctx, u.OrgID)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"organization": toOrgOut(o), "role": u.Role})
}

type invitationOut struct {
	ID         int64       `json:"id"`
	Email      string      `json:"email"`
	Role       models.Role `json:"role"`
	Status     string      `json:"status"` // pending | accepted | revoked | expired
	InvitedBy  string      `json:"invited_by,omitempty"`
	CreatedAt  time.Time   `json:"created_at"`
	ExpiresAt  time.Time   `json:"expires_at"`
	AcceptedAt *time.Time  `json:"accepted_at"`
	RevokedAt  *time.Time  `json:"revoked_at"`
}

func (m *manage) toInvitationOut(i models.Invitation, inviter string) invitationOut {
	return invitationOut{ID: i.ID, Email: i.Email, Role: i.Role, Status: i.Status(m.Store.Now()), InvitedBy: inviter,
		CreatedAt: i.CreatedAt, ExpiresAt: i.ExpiresAt, AcceptedAt: i.AcceptedAt, RevokedAt: i.RevokedAt}
}

// createInvitation answers POST /api/organization/invitations {email,
// role}: 201 with the code and the link to send, shown this once (only
// its hash is kept). Without mail the owner passes the link on; with mail
// it is mailed (mailed: true) and shown to nobody, so using it proves
// the invitee's address.
func (m *manage) createInvitation(c *gin.Context) {
	var in struct {
		Email string      `json:"email"`
		Role  models.Role `json:"role"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	inv, code, err := m.Accounts.Invite(c.Request.Context(), currentUser(c), in.Email, in.Role)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	out := gin.H{"id": inv.ID, "email": inv.Email, "role": inv.Role, "status": inv.Status(m.Store.Now()), "mailed": inv.Mailed,
		"expires_at": inv.ExpiresAt}
	if !inv.Mailed {
		out["code"], out["accept_url"] = code, web.Link(c, m.PublicURL, "/invitations/"+code)
	}
	c.JSON(http.StatusCreated, out)
}

// listInvitations answers GET /api/organization/invitations: those of the
// last 30 days, newest first, whatever their state.
func (m *manage) listInvitations(c *gin.Context) {
	invs, err := m.Accounts.Invitations(c.Request.Context(), currentUser(c))
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	out := make([]invitationOut, len(invs))
	for i, inv := range invs {
		out[i] = m.toInvitationOut(inv.Invitation, inv.InviterEmail)
	}
	c.JSON(http.StatusOK, gin.H{"data": out})
}

// revokeInvitation answers DELETE /api/organization/invitations/{id}: its
// link stops working at once.
func (m *manage) revokeInvitation(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	inv, err := m.Accounts.RevokeInvitation(c.Request.Context(), currentUser(c), id)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, m.toInvitationOut(inv, ""))
}

// acceptInvitation answers POST /api/invitations/{code}/accept: the
// signed-in user, whose email the invitation is for, joins its
// organization. The session keeps acting where it did; PUT
// /api/session/organization moves it.
func (m *manage) acceptInvitation(c *gin.Context) {
	ctx := c.Request.Context()
	joined, err := m.Accounts.AcceptInvitation(ctx, currentUser(c).User, c.Param("code"))
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	o, err := m.Store.Organization(ctx, joined.OrgID)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"organization": toOrgOut(o), "role": joined.Role})
}

type memberOut struct {
	UserID   int64       `json:"user_id"`
	Email    string      `json:"email"`
	Role     models.Role `json:"role"`
	JoinedAt time.Time   `json:"joined_at"`
}

func toMemberOut(o models.OrgMember) memberOut {
	return memberOut{UserID: o.UserID, Email: o.Email, Role: o.Role, JoinedAt: o.JoinedAt}
}

// listMembers answers GET /api/organization/members: owners first.
func (m *manage) listMembers(c *gin.Context) {
	ms, err := m.Accounts.Members(c.Request.Context(), currentUser(c))
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	out := make([]memberOut, len(ms))
	for i, o := range ms {
		out[i] = toMemberOut(o)
	}
	c.JSON(http.StatusOK, gin.H{"data": out})
}

// memberID reads {user_id}; anything but a positive integer names nobody.
func memberID(c *gin.Context) (int64, error) {
	id, err := strconv.ParseInt(c.Param("user_id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, apperr.WithReason(apperr.NotFound, "member_not_found", "no such member of this organization")
	}
	return id, nil
}

// setMemberRole answers PUT /api/organization/members/{user_id} {role}.
func (m *manage) setMemberRole(c *gin.Context) {
	id, err := memberID(c)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	var in struct {
		Role models.Role `json:"role"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	out, err := m.Accounts.SetMemberRole(c.Request.Context(), currentUser(c), id, in.Role)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, toMemberOut(out))
}

// removeMember answers DELETE /api/organization/members/{user_id}: their
// sessions in the organization end and their tokens in it are revoked, at
// once and on every node. A member may remove themselves (leave).
func (m *manage) removeMember(c *gin.Context) {
	id, err := memberID(c)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	r, err := m.Accounts.RemoveMember(c.Request.Context(), currentUser(c), id)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"user_id": r.Member.UserID, "email": r.Member.Email, "role": r.Member.Role,
		"sessions_ended": r.SessionsEnded, "tokens_revoked": len(r.TokenHashes)})
}
