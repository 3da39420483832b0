package web

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/templates"
)

// teamFlashes are the fixed outcomes a redirect to the team page may name
// with ?done=.
var teamFlashes = map[string]string{
	"role":               "Role changed. It applies from their next request.",
	"removed":            "Member removed: their sessions here ended and the API tokens they created here were revoked.",
	"invitation-revoked": "Invitation revoked: its link no longer works.",
	"joined":             "Invitation accepted: you are now a member of this organization.",
}

// Link is the address of path to show someone who passes it on (an
// invitation's link to an owner, a reset link to an admin): under
// publicURL (SLUICE_PUBLIC_URL) when set, else on the host they reached
// Sluice by, over TLS when they did; the one it is shown to chose that
// host. Links in mails never come from here: they are always under the
// public URL.
func Link(c *gin.Context, publicURL, path string) string {
	if publicURL != "" {
		return publicURL + path
	}
	scheme := "http"
	if OverTLS(c) {
		scheme = "https"
	}
	return scheme + "://" + c.Request.Host + path
}

// Team shows the organization's members and, to owners, its invitations.
func (p *Pages) Team(c *gin.Context) {
	p.showTeam(c, http.StatusOK, templates.TeamView{Flash: teamFlashes[c.Query("done")]})
}

// showTeam renders the team page with v's link, form and notices; the
// members and invitations are read here.
func (p *Pages) showTeam(c *gin.Context, status int, v templates.TeamView) {
	page, u, o, err := p.page(c, "Team")
	if err != nil {
		p.fail(c, err)
		return
	}
	ctx := c.Request.Context()
	members, err := p.accounts.Members(ctx, u)
	if err != nil {
		p.fail(c, err)
		return
	}
	toks, err := p.store.APITokens(ctx, u.OrgID)
	if err != nil {
		p.fail(c, err)
		return
	}
	now := p.now()
	active := map[int64]int{}
	for _, t := range toks {
		if t.Status(now) == "active" {
			active[t.UserID]++
		}
	}
	owners := 0
	for _, m := range members {
		if m.Role == models.RoleOwner {
			owners++
		}
	}
	v.OrgName, v.CanManage, v.MailOn = o.Name, u.IsOwner(), p.accounts.MailOn()
	for _, m := range members {
		v.Members = append(v.Members, templates.MemberRow{UserID: m.UserID, Email: m.Email, Role: string(m.Role),
			Joined: formatTime(m.JoinedAt), You: m.UserID == u.ID, LastOwner: m.Role == models.RoleOwner && owners == 1,
			ActiveTokens: active[m.UserID]})
	}
	if v.CanManage {
		invs, err := p.accounts.Invitations(ctx, u)
		if err != nil {
			p.fail(c, err)
			return
		}
		for _, i := range invs {
			v.Invitations = append(v.Invitations, templates.InvitationRow{ID: i.ID, Email: i.Email, Role: string(i.Role),
				Status: i.Status(now), Created: formatTime(i.CreatedAt), Expires: formatTime(i.ExpiresAt), InvitedBy: i.InviterEmail})
		}
		v.Bounds = fmt.Sprintf("A link works once, for its address, for %d days. Up to %d invitations may wait at once, and %d may be made an hour.",
			int(models.InvitationTTL.Hours()/24), models.MaxPendingInvitations, models.MaxInvitationsPerHour)
	}
	render(c, status, templates.Team(page, v))
}

// Invite makes an invitation and shows its link, this once, or (with
// mail) that it was mailed.
func (p *Pages) Invite(c *gin.Context) {
	u, _ := userOf(c)
	form := templates.InviteForm{Email: strings.TrimSpace(c.PostForm("email")), Role: c.PostForm("role")}
	inv, code, err := p.accounts.Invite(c.Request.Context(), u, form.Email, models.Role(form.Role))
	if err != nil {
		if status := apperr.Status(apperr.CodeOf(err)); status < 500 && status != http.StatusForbidden {
			e := apperr.As(err)
			if e.RetryAfter > 0 {
				apperr.SetRetryAfter(c.Writer.Header(), e.RetryAfter)
			}
			p.showTeam(c, status, templates.TeamView{Form: form, Error: e.Message})
			return
		}
		p.fail(c, err)
		return
	}
	n := &templates.NewInvitationView{Email: inv.Email, Role: string(inv.Role), Expires: formatTime(inv.ExpiresAt), Mailed: inv.Mailed}
	if !inv.Mailed {
		n.URL = Link(c, p.publicURL, "/invitations/"+code)
	}
	p.showTeam(c, http.StatusCreated, templates.TeamView{NewInvitation: n})
}

// RevokeInvitation ends a pending invitation of the organization.
func (p *Pages) RevokeInvitation(c *gin.Context) {
	id, ok := p.pathID(c, "No such invitation.")
	if !ok {
		return
	}
	u, _ := userOf(c)
	if _, err := p.accounts.RevokeInvitation(c.Request.Context(), u, id); err != nil {
		p.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, "/organization?done=invitation-revoked#invitations")
}

// memberID reads {user_id} of a member's form.
func (p *Pages) memberID(c *gin.Context) (int64, bool) {
	id, err := strconv.ParseInt(c.Param("user_id"), 10, 64)
	if err != nil || id <= 0 {
		p.fail(c, apperr.New(apperr.NotFound, "No such member."))
		return 0, false
	}
	return id, true
}

// SetMemberRole makes a member an owner or a member.
func (p *Pages) SetMemberRole(c *gin.Context) {
	id, ok := p.memberID(c)
	if !ok {
		return
	}
	u, _ := userOf(c)
	if _, err := p.accounts.SetMemberRole(c.Request.Context(), u, id, models.Role(c.PostForm("role"))); err != nil {
		p.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, "/organization?done=role")
}

// RemoveMember takes a member out of the organization (or the visitor,
// leaving). Leaving ends the visitor's own session here, so they are sent
// to sign in again, which starts in another organization of theirs.
func (p *Pages) RemoveMember(c *gin.Context) {
	id, ok := p.memberID(c)
	if !ok {
		return
	}
	u, _ := userOf(c)
	if _, err := p.accounts.RemoveMember(c.Request.Context(), u, id); err != nil {
		p.fail(c, err)
		return
	}
	if id == u.ID {
		p.clearSession(c)
		c.Redirect(http.StatusSeeOther, "/login")
		return
	}
	c.Redirect(http.StatusSeeOther, "/organization?done=removed")
}

// SwitchOrganization makes the session act in another of the visitor's
// organizations: the header's switcher posts here.
func (p *Pages) SwitchOrganization(c *gin.Context) {
	u, _ := userOf(c)
	id, err := strconv.ParseInt(c.PostForm("id"), 10, 64)
	if err != nil || id <= 0 {
		p.fail(c, apperr.New(apperr.NotFound, "No such organization among yours."))
		return
	}
	if _, err := p.sessions.SwitchOrganization(c.Request.Context(), p.store, sessionToken(c), u.User, id); err != nil {
		p.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, "/dashboard")
}

// Invitation shows the page an invitation's link opens, to anyone holding
// the link.
func (p *Pages) Invitation(c *gin.Context) {
	p.showInvitation(c, http.StatusOK, c.Param("code"), "")
}

// showInvitation renders the invitation of code with a form's problem.
func (p *Pages) showInvitation(c *gin.Context, status int, code, formErr string) {
	inv, err := p.store.InvitationByCode(c.Request.Context(), code)
	if err != nil {
		p.fail(c, err)
		return
	}
	v := templates.InvitationView{Code: code, OrgName: inv.OrgName, Email: inv.Email, Role: string(inv.Role),
		InvitedBy: inv.InviterEmail, Expires: formatTime(inv.ExpiresAt), Error: formErr}
	page := templates.Page{Title: "Join " + inv.OrgName}
	if u, ok := userOf(c); ok {
		v.SignedInAs = u.Email
		v.WrongAccount = models.NormalizeEmail(u.Email) != inv.Email
		page.User = &templates.UserNav{Email: u.Email, IsAdmin: u.IsAdmin()}
	}
	if err := inv.Usable(p.store.Now(), inv.Email); err != nil {
		v.Problem = apperr.As(err).Message
	}
	render(c, status, templates.Invitation(page, v))
}

// AcceptInvitation makes the signed-in visitor a member of the
// invitation's organization and moves their session there.
func (p *Pages) AcceptInvitation(c *gin.Context) {
	u, _ := userOf(c)
	ctx := c.Request.Context()
	code := c.Param("code")
	joined, err := p.accounts.AcceptInvitation(ctx, u.User, code)
	if err != nil {
		if status := apperr.Status(apperr.CodeOf(err)); status < 500 && status != http.StatusNotFound {
			p.showInvitation(c, status, code, apperr.As(err).Message)
			return
		}
		p.fail(c, err)
		return
	}
	if _, err := p.sessions.SwitchOrganization(ctx, p.store, sessionToken(c), u.User, joined.OrgID); err != nil {
		p.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, "/organization?done=joined")
}

// sessionToken is the session cookie's value; "" without one.
func sessionToken(c *gin.Context) string {
	if ck, err := c.Request.Cookie(sessionCookie); err == nil {
		return ck.Value
	}
	return ""
}

// invitationReturn is where a sign-in started from an invitation's page
// goes back to: only such a page, so next is never an open redirect.
func invitationReturn(next string) (string, bool) {
	code, ok := strings.CutPrefix(next, "/invitations/")
	if !ok || !models.InvitationCodeShaped(code) {
		return "", false
	}
	return "/invitations/" + code, true
}
