package web

import (
	"cmp"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/templates"
)

// adminAuditActions are the action prefixes the filter suggests.
var adminAuditActions = []string{"tier.", "price.", "organization.", "upgrade.", "token.", "upstream.", "alias.", "budget."}

// AdminAudit shows the audit log, newest first, filtered by
// ?org=&action=&from=&to= (dates in UTC, both included) a page at a time
// (&page=). A filter it cannot read is said above the form.
func (p *Pages) AdminAudit(c *gin.Context) {
	page, _, _, err := p.page(c, "Audit log")
	if err != nil {
		p.fail(c, err)
		return
	}
	f := templates.AdminAuditFilter{OrgID: strings.TrimSpace(c.Query("org")), Action: strings.TrimSpace(c.Query("action")),
		From: strings.TrimSpace(c.Query("from")), To: strings.TrimSpace(c.Query("to"))}
	view := templates.AdminAuditView{Filter: f, Page: 1, Actions: adminAuditActions}
	if f != (templates.AdminAuditFilter{}) {
		view.ClearURL = "/admin/audit"
	}
	q, err := ParseAuditQuery(f.OrgID, f.Action, f.From, f.To, c.Query("page"))
	if err != nil {
		page.Error = apperr.As(err).Message
		render(c, http.StatusBadRequest, templates.AdminAudit(page, view))
		return
	}
	rows, more, err := p.store.AuditEntries(c.Request.Context(), q)
	if err != nil {
		if status, msg, ok := adminFormProblem(err); ok {
			page.Error = msg
			render(c, status, templates.AdminAudit(page, view))
			return
		}
		p.fail(c, err)
		return
	}
	view.Page = q.Page
	link := func(n int) string {
		v := url.Values{}
		for k, x := range map[string]string{"org": f.OrgID, "action": f.Action, "from": f.From, "to": f.To} {
			if x != "" {
				v.Set(k, x)
			}
		}
		if n > 1 {
			v.Set("page", strconv.Itoa(n))
		}
		if len(v) == 0 {
			return "/admin/audit"
		}
		return "/admin/audit?" + v.Encode()
	}
	if q.Page > 1 {
		view.PrevURL = link(q.Page - 1)
	}
	if more {
		view.NextURL = link(q.Page + 1)
	}
	for _, r := range rows {
		row := templates.AdminAuditRow{At: formatTime(r.CreatedAt), OrgName: r.OrgName, Actor: cmp.Or(r.ActorEmail, "system"),
			Action: r.Action, Target: r.Target, Detail: r.Detail}
		if r.OrgID != nil {
			row.OrgURL = adminOrgURL(*r.OrgID)
			if row.OrgName == "" {
				row.OrgName = "#" + strconv.FormatInt(*r.OrgID, 10)
			}
		}
		view.Rows = append(view.Rows, row)
	}
	render(c, http.StatusOK, templates.AdminAudit(page, view))
}

// ParseAuditQuery reads the audit log's filters as the page and the API take
// them: an organization id, an action prefix, from and to as dates
// (YYYY-MM-DD, UTC; to is included) or RFC 3339 times (to excluded), and a
// page number from 1. Empty values do not filter.
func ParseAuditQuery(org, action, from, to, page string) (models.AuditQuery, error) {
	var q models.AuditQuery
	if org != "" {
		id, err := strconv.ParseInt(org, 10, 64)
		if err != nil || id <= 0 {
			return q, apperr.Field(apperr.Invalid, "invalid_organization", "organization_id", "The organization must be given by its id, a whole number such as 42.")
		}
		q.OrgID = id
	}
	q.ActionPrefix = action
	for _, b := range []struct {
		name, value string
		dst         *time.Time
		end         bool
	}{{"from", from, &q.From, false}, {"to", to, &q.To, true}} {
		if b.value == "" {
			continue
		}
		if t, err := time.Parse(time.RFC3339, b.value); err == nil {
			*b.dst = t
			continue
		}
		t, err := time.Parse(time.DateOnly, b.value)
		if err != nil {
			return q, apperr.Field(apperr.Invalid, "invalid_date", b.name, "“"+b.name+"” must be a date such as 2027-03-15.")
		}
		if b.end { // a date "to" includes its whole day
			t = t.AddDate(0, 0, 1)
		}
		*b.dst = t
	}
	if !q.From.IsZero() && !q.To.IsZero() && !q.To.After(q.From) {
		return q, apperr.Field(apperr.Invalid, "invalid_range", "from", "“from” must be before “to”.")
	}
	n, ok := models.ParsePage(page)
	if !ok {
		return q, apperr.Field(apperr.Invalid, "invalid_page", "page", "The page must be a whole number from 1 to "+strconv.Itoa(models.MaxPage)+".")
	}
	q.Page = n
	return q, nil
}
