package handlers

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
)

// adminUserOut is one user of GET /api/admin/users.
type adminUserOut struct {
	ID            int64            `json:"id"`
	Email         string           `json:"email"`
	Admin         bool             `json:"admin"`
	Disabled      bool             `json:"disabled"`
	DisabledAt    *time.Time       `json:"disabled_at"`
	LastLoginAt   *time.Time       `json:"last_login_at"`
	CreatedAt     time.Time        `json:"created_at"`
	Organizations []adminUserOrgIn `json:"organizations"`
}

type adminUserOrgIn struct {
	ID   int64       `json:"id"`
	Name string      `json:"name"`
	Role models.Role `json:"role"`
}

// adminUsers answers GET /api/admin/users?q=&limit=&cursor=: users whose
// email contains q (case-insensitive), by id, limit of them (50 by
// default, at most 200) after the cursor of the page before, each with
// their organizations and roles, disabled state and last sign-in:
// {"data":[…],"next_cursor": "<id>" | null}.
func (m *manage) adminUsers(c *gin.Context) {
	q := models.AdminUserQuery{Search: strings.TrimSpace(c.Query("q")), Limit: 50}
	if len(q.Search) > models.MaxOverviewSearch || !utf8.ValidString(q.Search) {
		writeAPIError(c, m.log, apperr.Field(apperr.Invalid, "invalid_search", "q", "q must be UTF-8 text of at most 200 bytes"))
		return
	}
	if s := c.Query("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > models.AdminUsersMaxLimit {
			writeAPIError(c, m.log, apperr.Field(apperr.Invalid, "invalid_limit", "limit",
				fmt.Sprintf("limit must be a whole number from 1 to %d", models.AdminUsersMaxLimit)))
			return
		}
		q.Limit = n
	}
	if s := c.Query("cursor"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			writeAPIError(c, m.log, apperr.Field(apperr.Invalid, "invalid_cursor", "cursor", "cursor must be the next_cursor of the page before"))
			return
		}
		q.Cursor = n
	}
	users, next, err := m.Accounts.AdminUsers(c.Request.Context(), currentUser(c).User, q)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	out := make([]adminUserOut, len(users))
	for i, u := range users {
		out[i] = adminUserOut{ID: u.ID, Email: u.Email, Admin: u.Admin, Disabled: u.DisabledAt != nil, DisabledAt: u.DisabledAt,
			LastLoginAt: u.LastLoginAt, CreatedAt: u.CreatedAt, Organizations: make([]adminUserOrgIn, len(u.Orgs))}
		for j, o := range u.Orgs {
			out[i].Organizations[j] = adminUserOrgIn{ID: o.ID, Name: o.Name, Role: o.Role}
		}
	}
	var cursor *string
	if next != 0 {
		s := strconv.FormatInt(next, 10)
		cursor = &s
	}
	c.JSON(http.StatusOK, gin.H{"data": out, "next_cursor": cursor})
}

// switchedUserOut is the user a disable or an enable changed.
func switchedUserOut(sw models.UserSwitch) gin.H {
	return gin.H{"id": sw.User.ID, "email": sw.User.Email, "admin": sw.User.IsAdmin(), "disabled": sw.User.Disabled(),
		"disabled_at": utc(sw.User.DisabledAt)}
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// disableUser answers POST /api/admin/users/{id}/disable: the user's
// sessions end and the API tokens they created stop, on every node →
// {user, sessions_ended, tokens_stopped}; 409 cannot_disable_self,
// last_admin, user_disabled.
func (m *manage) disableUser(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		writeAPIError(c, m.log, apperr.WithReason(apperr.NotFound, "user_not_found", "no such user"))
		return
	}
	sw, err := m.Accounts.DisableUser(c.Request.Context(), currentUser(c).User, id)
	if err != nil {
		writeAPIError(c, m.log, notFoundAs(err, "user_not_found", "no such user"))
		return
	}
	c.JSON(http.StatusOK, gin.H{"user": switchedUserOut(sw), "sessions_ended": sw.SessionsEnded, "tokens_stopped": len(sw.TokenHashes)})
}

// enableUser answers POST /api/admin/users/{id}/enable: the user may sign
// in again and their tokens not revoked meanwhile work again →
// {user, tokens_restored}; 409 user_enabled.
func (m *manage) enableUser(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		writeAPIError(c, m.log, apperr.WithReason(apperr.NotFound, "user_not_found", "no such user"))
		return
	}
	sw, err := m.Accounts.EnableUser(c.Request.Context(), currentUser(c).User, id)
	if err != nil {
		writeAPIError(c, m.log, notFoundAs(err, "user_not_found", "no such user"))
		return
	}
	c.JSON(http.StatusOK, gin.H{"user": switchedUserOut(sw), "tokens_restored": len(sw.TokenHashes)})
}

// deleteOrganization answers DELETE /api/admin/organizations/{id}: its
// tokens stop at once on every node, its members leave it and their
// sessions in it end; its data is kept until purge_after, for the export
// → {organization, members_removed, sessions_ended, invitations_revoked,
// tokens_stopped, export_url}; 409 organization_deleted,
// organization_has_admin.
func (m *manage) deleteOrganization(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		writeAPIError(c, m.log, apperr.WithReason(apperr.NotFound, "organization_not_found", "no such organization"))
		return
	}
	d, err := m.Accounts.DeleteOrganization(c.Request.Context(), currentUser(c).User, id)
	if err != nil {
		writeAPIError(c, m.log, notFoundAs(err, "organization_not_found", "no such organization"))
		return
	}
	c.JSON(http.StatusOK, gin.H{
		"organization":    gin.H{"id": d.Org.ID, "name": d.Org.Name, "deleted_at": utc(d.Org.DeletedAt), "purge_after": utc(d.Org.PurgeAfter)},
		"members_removed": d.MembersRemoved, "sessions_ended": d.SessionsEnded, "invitations_revoked": d.InvitationsRevoked,
		"tokens_stopped": d.TokensStopped, "export_url": fmt.Sprintf("/api/admin/organizations/%d/export", d.Org.ID),
	})
}

// exportOrganization answers GET /api/admin/organizations/{id}/export: a
// zip of its invoices with their lines (JSON and CSV) and its usage per
// day and model (CSV), live or deleted until it is purged (404
// organization_purged after).
func (m *manage) exportOrganization(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		writeAPIError(c, m.log, apperr.WithReason(apperr.NotFound, "organization_not_found", "no such organization"))
		return
	}
	body, err := m.Billing.Export(c.Request.Context(), id)
	if err != nil {
		writeAPIError(c, m.log, notFoundAs(err, "organization_not_found", "no such organization"))
		return
	}
	c.Header("Cache-Control", "no-store")
	c.Header("Content-Disposition", fmt.Sprintf(`attachment; filename="sluice-organization-%d.zip"`, id))
	c.Data(http.StatusOK, "application/zip", body)
}

// notFoundAs gives a bare not-found error (the store's "user not found")
// the route's reason and message; others pass unchanged.
func notFoundAs(err error, reason, message string) error {
	if e := apperr.As(err); e.Code == apperr.NotFound && e.Reason == "" {
		return apperr.WithReason(apperr.NotFound, reason, message)
	}
	return err
}
