package handlers

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/web"
)

// overviewOut is one organization of GET /api/admin/organizations: the
// fields it always had, then this month's usage from the rollups.
type overviewOut struct {
	orgOut
	OwnerEmail    string  `json:"owner_email"`
	Spend         string  `json:"spend"` // exact, dollars
	Requests      int64   `json:"requests"`
	Rejected      int64   `json:"rejected"`
	RejectionRate float64 `json:"rejection_rate"` // rejected / (requests + rejected), 4 decimals
	ActiveFreezes int64   `json:"active_freezes"`
	// DeletedAt is when an admin deleted it, null while it is live.
	DeletedAt *time.Time `json:"deleted_at"`
}

// adminOrganizations answers GET /api/admin/organizations?q=&sort=&dir=&page=:
// a page of 50 organizations with this month's (UTC) spend, requests,
// rejections and active freezes, searched by name or a user's email,
// sorted by name (default), tier, spend, requests, rejection_rate,
// freezes or created, asc (default) or desc:
// {"data":[…],"page","pages","total","page_size","period_start"}.
func (m *manage) adminOrganizations(c *gin.Context) {
	now := m.Now()
	q := models.OverviewQuery{Search: strings.TrimSpace(c.Query("q")), Sort: c.DefaultQuery("sort", models.SortName), Now: now, Period: now}
	if !models.ValidOverviewSort(q.Sort) {
		writeAPIError(c, m.log, apperr.Field(apperr.Invalid, "invalid_sort", "sort",
			"sort must be one of "+strings.Join(models.OverviewSorts(), ", ")))
		return
	}
	switch c.DefaultQuery("dir", "asc") {
	case "asc":
	case "desc":
		q.Desc = true
	default:
		writeAPIError(c, m.log, apperr.Field(apperr.Invalid, "invalid_dir", "dir", "dir must be asc or desc"))
		return
	}
	page, err := pageParam(c)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	if len(q.Search) > models.MaxOverviewSearch || !utf8.ValidString(q.Search) {
		writeAPIError(c, m.log, apperr.Field(apperr.Invalid, "invalid_search", "q", "q must be UTF-8 text of at most 200 bytes"))
		return
	}
	q.Page = page
	res, err := m.Store.OrganizationOverview(c.Request.Context(), q)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	out := make([]overviewOut, len(res.Rows))
	for i, o := range res.Rows {
		out[i] = overviewOut{orgOut: orgOut{ID: o.ID, Name: o.Name, Tier: o.Tier, CreatedAt: o.CreatedAt}, OwnerEmail: o.OwnerEmail,
			Spend: o.Spend.String(), Requests: o.Requests, Rejected: o.Rejected,
			RejectionRate: math.Round(o.RejectionRate()*10_000) / 10_000, ActiveFreezes: o.ActiveFreezes, DeletedAt: o.DeletedAt}
	}
	c.JSON(http.StatusOK, gin.H{"data": out, "page": res.Page, "pages": res.Pages, "total": res.Total, "page_size": res.PageSize,
		"period_start": models.MonthOf(now)})
}

// pageParam reads ?page=, a whole number from 1 (1 when absent).
func pageParam(c *gin.Context) (int, error) {
	n, ok := models.ParsePage(c.Query("page"))
	if !ok {
		return 0, apperr.Field(apperr.Invalid, "invalid_page", "page", "page must be a whole number from 1 to "+strconv.Itoa(models.MaxPage))
	}
	return n, nil
}

type auditOut struct {
	ID             int64     `json:"id"`
	OrganizationID *int64    `json:"organization_id"`
	Organization   string    `json:"organization"`
	ActorUserID    *int64    `json:"actor_user_id"` // null: the system
	ActorEmail     string    `json:"actor_email"`
	Action         string    `json:"action"`
	Target         string    `json:"target"`
	Detail         string    `json:"detail"`
	CreatedAt      time.Time `json:"created_at"`
}

// adminAudit answers GET /api/admin/audit?organization_id=&action=&from=&to=&page=:
// the audit log of every organization, newest first, 50 a page; action is
// a prefix ("tier." or "price.set"), from and to are dates (UTC, to
// included) or RFC 3339 times (to excluded):
// {"data":[…],"page","page_size","has_more"}.
func (m *manage) adminAudit(c *gin.Context) {
	q, err := web.ParseAuditQuery(strings.TrimSpace(c.Query("organization_id")), strings.TrimSpace(c.Query("action")),
		strings.TrimSpace(c.Query("from")), strings.TrimSpace(c.Query("to")), c.Query("page"))
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	rows, more, err := m.Store.AuditEntries(c.Request.Context(), q)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	out := make([]auditOut, len(rows))
	for i, r := range rows {
		out[i] = auditOut{ID: r.ID, OrganizationID: r.OrgID, Organization: r.OrgName, ActorUserID: r.ActorUserID, ActorEmail: r.ActorEmail,
			Action: r.Action, Target: r.Target, Detail: r.Detail, CreatedAt: r.CreatedAt}
	}
	c.JSON(http.StatusOK, gin.H{"data": out, "page": q.Page, "page_size": models.AuditPageSize, "has_more": more})
}
