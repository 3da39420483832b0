package web

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/templates"
)

// adminUsersPage is how many users a page of the users list shows.
const adminUsersPage = 50

// adminUsersFlashes are the users page's messages after a change.
var adminUsersFlashes = map[string]string{
	"disabled": "User disabled: their sessions have ended and their API tokens stopped, on every node.",
	"enabled":  "User enabled: they can sign in, and their API tokens that were not revoked work again.",
	"reset":    "A password reset link is on its way to the user: it works once, for an hour, and their earlier links no longer work.",
}

// AdminUsers lists users, searched by email (?q=), a page at a time
// (?cursor= the last id of the page before).
func (p *Pages) AdminUsers(c *gin.Context) { p.adminUsers(c, nil) }

// adminUsers is the users list, with a reset link just made for one of
// them when reset is not nil.
func (p *Pages) adminUsers(c *gin.Context, reset *templates.AdminUserReset) {
	page, admin, _, err := p.page(c, "Users")
	if err != nil {
		p.fail(c, err)
		return
	}
	search := strings.TrimSpace(c.Query("q"))
	if len(search) > models.MaxOverviewSearch || !utf8.ValidString(search) {
		p.fail(c, apperr.New(apperr.Invalid, "The search must be text of at most 200 bytes."))
		return
	}
	var cursor int64
	if s := c.Query("cursor"); s != "" {
		if cursor, err = strconv.ParseInt(s, 10, 64); err != nil || cursor < 0 {
			p.fail(c, apperr.New(apperr.Invalid, "That page link is not valid; start from the first page."))
			return
		}
	}
	users, next, err := p.accounts.AdminUsers(c.Request.Context(), admin.User, models.AdminUserQuery{Search: search, Limit: adminUsersPage, Cursor: cursor})
	if err != nil {
		p.fail(c, err)
		return
	}
	view := templates.AdminUsersView{Search: search, Label: fmt.Sprintf("%d shown", len(users))}
	if len(users) == 1 {
		view.Label = "1 shown"
	}
	if cursor != 0 {
		view.FirstURL = adminUsersURL(search, 0, "")
	}
	if next != 0 {
		view.NextURL = adminUsersURL(search, next, "")
	}
	for _, u := range users {
		row := templates.AdminUserListRow{ID: u.ID, Email: u.Email, Admin: u.Admin, You: u.ID == admin.ID,
			LastSignIn: formatOptionalTime(u.LastLoginAt, "never"), Created: formatTime(u.CreatedAt),
			DisableURL: adminUserActionURL(u.ID, "disable", search), EnableURL: adminUserActionURL(u.ID, "enable", search),
			ResetURL: adminUserActionURL(u.ID, "password-reset", search)}
		if u.DisabledAt != nil {
			row.Disabled = "disabled " + formatTime(*u.DisabledAt)
		}
		for _, o := range u.Orgs {
			row.Orgs = append(row.Orgs, templates.AdminUserOrgCell{Name: o.Name, Role: string(o.Role), URL: adminOrgURL(o.ID)})
		}
		view.Rows = append(view.Rows, row)
	}
	page.Flash = adminUsersFlashes[c.Query("done")]
	view.Reset = reset
	render(c, http.StatusOK, templates.AdminUsers(page, view))
}

// SendUserReset makes a password reset link for a user: mailed to them,
// or on a Sluice without mail shown to the admin this once, above the
// list, to pass on.
func (p *Pages) SendUserReset(c *gin.Context) {
	id, ok := p.pathID(c, "No such user.")
	if !ok {
		return
	}
	u, _ := userOf(c)
	token, mailed, err := p.accounts.AdminPasswordReset(c.Request.Context(), u.User, id)
	if apperr.CodeOf(err) == apperr.NotFound {
		err = apperr.New(apperr.NotFound, "No such user.")
	}
	if err != nil {
		p.fail(c, err)
		return
	}
	if mailed {
		c.Redirect(http.StatusSeeOther, adminUsersURL(c.Query("q"), 0, "reset"))
		return
	}
	target, err := p.store.User(c.Request.Context(), id)
	if err != nil {
		p.fail(c, err)
		return
	}
	p.adminUsers(c, &templates.AdminUserReset{Email: target.Email, URL: Link(c, p.publicURL, "/password-reset/"+token)})
}

// adminUsersURL is a page of the users list.
func adminUsersURL(search string, cursor int64, done string) string {
	q := url.Values{}
	if search != "" {
		q.Set("q", search)
	}
	if cursor != 0 {
		q.Set("cursor", strconv.FormatInt(cursor, 10))
	}
	if done != "" {
		q.Set("done", done)
	}
	if len(q) == 0 {
		return "/admin/users"
	}
	return "/admin/users?" + q.Encode()
}

// adminUserActionURL is where a user's disable or enable form posts; the
// search comes along, so the list comes back as it was.
func adminUserActionURL(id int64, action, search string) string {
	u := fmt.Sprintf("/admin/users/%d/%s", id, action)
	if search != "" {
		u += "?q=" + url.QueryEscape(search)
	}
	return u
}

// DisableUser disables a user and goes back to the list.
func (p *Pages) DisableUser(c *gin.Context) { p.switchUser(c, true) }

// EnableUser enables a disabled user and goes back to the list.
func (p *Pages) EnableUser(c *gin.Context) { p.switchUser(c, false) }

func (p *Pages) switchUser(c *gin.Context, disable bool) {
	id, ok := p.pathID(c, "No such user.")
	if !ok {
		return
	}
	u, _ := userOf(c)
	var err error
	done := "enabled"
	if disable {
		done = "disabled"
		_, err = p.accounts.DisableUser(c.Request.Context(), u.User, id)
	} else {
		_, err = p.accounts.EnableUser(c.Request.Context(), u.User, id)
	}
	if apperr.CodeOf(err) == apperr.NotFound {
		err = apperr.New(apperr.NotFound, "No such user.")
	}
	if err != nil {
		p.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, adminUsersURL(c.Query("q"), 0, done))
}

// DeleteOrganization deletes an organization and goes back to its page,
// which says when its data goes and still offers its export.
func (p *Pages) DeleteOrganization(c *gin.Context) {
	id, ok := p.pathID(c, "No such organization.")
	if !ok {
		return
	}
	u, _ := userOf(c)
	_, err := p.accounts.DeleteOrganization(c.Request.Context(), u.User, id)
	if apperr.CodeOf(err) == apperr.NotFound {
		err = apperr.New(apperr.NotFound, "No such organization.")
	}
	if err != nil {
		p.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, adminOrgURL(id)+"?done=deleted")
}

// AdminOrgExport downloads an organization's invoices and usage as a zip
// (billing.Service.Export), live or deleted, until it is purged.
func (p *Pages) AdminOrgExport(c *gin.Context) {
	o, ok := p.adminPathOrg(c)
	if !ok {
		return
	}
	body, err := p.billing.Export(c.Request.Context(), o.ID)
	if err != nil {
		p.fail(c, err)
		return
	}
	c.Header("Cache-Control", "no-store")
	c.Header("Content-Disposition", fmt.Sprintf(`attachment; filename="sluice-organization-%d.zip"`, o.ID))
	c.Data(http.StatusOK, "application/zip", body)
}

// deletedText says when an organization was deleted and when its data
// goes (or went); "" while it is live.
func deletedText(o models.Organization) string {
	switch {
	case o.DeletedAt == nil:
		return ""
	case o.PurgedAt != nil:
		return fmt.Sprintf("Deleted %s; its data was purged %s. Only the audit log remembers it.", formatTime(*o.DeletedAt), formatTime(*o.PurgedAt))
	default:
		return fmt.Sprintf("Deleted %s: it has no members and its API tokens no longer answer. Its invoices and usage can be downloaded until %s, when its data is purged.",
			formatTime(*o.DeletedAt), formatOptionalTime(o.PurgeAfter, "its purge"))
	}
}

// retentionText is a retention in days (or hours, below two days).
func retentionText(d time.Duration) string {
	if d < 48*time.Hour {
		return fmt.Sprintf("%d hours", int(d/time.Hour))
	}
	return fmt.Sprintf("%d days", int(d/(24*time.Hour)))
}
