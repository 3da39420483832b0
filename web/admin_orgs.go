package web

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/billing"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/templates"
)

// adminOrgFlashes are the organization page's messages after a change.
var adminOrgFlashes = map[string]string{
	"tier":     "Organization moved. Its next API request uses the new tier.",
	"approved": "Upgrade approved: the organization is on its new tier from its next request.",
	"declined": "Upgrade request declined.",
	"deleted":  "Organization deleted: its API tokens stopped and its members' sessions in it ended, on every node.",
	"adjusted": "Balance adjusted. The organization sees it, with the reason, in its history.",
}

// adminOverviewColumns are the overview's columns, in order, with their sort keys.
var adminOverviewColumns = []struct {
	key, label string
	numeric    bool
	desc       bool // sorted descending first: the biggest matter most
}{
	{models.SortName, "Organization", false, false},
	{models.SortTier, "Tier", false, false},
	{models.SortSpend, "Spend", true, true},
	{models.SortRequests, "Requests", true, true},
	{models.SortRejectionRate, "429 rate", true, true},
	{models.SortFreezes, "Active freezes", true, true},
	{models.SortCreated, "Created", false, true},
}

// AdminHome sends admins to the organization overview.
func (p *Pages) AdminHome(c *gin.Context) {
	c.Redirect(http.StatusSeeOther, "/admin/organizations")
}

// AdminOverview lists every organization, a page at a time, with this
// month's spend, requests, 429 rate and active freezes, searched and sorted
// as the query says (?q=&sort=&dir=&page=); a value it cannot use falls
// back to the default rather than failing the page.
func (p *Pages) AdminOverview(c *gin.Context) {
	page, _, _, err := p.page(c, "Organizations")
	if err != nil {
		p.fail(c, err)
		return
	}
	ctx := c.Request.Context()
	q := models.OverviewQuery{Search: strings.TrimSpace(c.Query("q")), Sort: c.Query("sort"), Desc: c.Query("dir") == "desc",
		Now: p.now(), Period: p.now()}
	// A page forgives what the API refuses: a search too long is cut, at
	// a character, and bytes that are not UTF-8 (the database would
	// refuse them) are dropped.
	if len(q.Search) > models.MaxOverviewSearch {
		q.Search = q.Search[:models.MaxOverviewSearch]
	}
	q.Search = strings.ToValidUTF8(q.Search, "")
	switch {
	case q.Sort == "":
		q.Sort = models.SortName
	case !models.ValidOverviewSort(q.Sort):
		q.Sort, q.Desc = models.SortName, false
	}
	q.Page, _ = models.ParsePage(c.Query("page")) // a bad page shows the first
	res, err := p.store.OrganizationOverview(ctx, q)
	if err != nil {
		p.fail(c, err)
		return
	}
	upgrades, upgradesTotal, err := p.store.PendingUpgrades(ctx, 20)
	if err != nil {
		p.fail(c, err)
		return
	}
	link := func(sort string, desc bool, pageNo int) string {
		v := url.Values{}
		if q.Search != "" {
			v.Set("q", q.Search)
		}
		if sort != models.SortName {
			v.Set("sort", sort)
		}
		if desc {
			v.Set("dir", "desc")
		}
		if pageNo > 1 {
			v.Set("page", strconv.Itoa(pageNo))
		}
		if len(v) == 0 {
			return "/admin/organizations"
		}
		return "/admin/organizations?" + v.Encode()
	}
	view := templates.AdminOverviewView{Search: q.Search, Sort: q.Sort, Desc: q.Desc, Period: models.MonthOf(q.Period).Format("January 2006"),
		Total: res.Total, Page: res.Page, Pages: res.Pages, UpgradesTotal: upgradesTotal, Queue: p.adminQueue(ctx)}
	if q.Search != "" {
		view.ClearURL = "/admin/organizations"
	}
	for _, col := range adminOverviewColumns {
		h := templates.AdminSortColumn{Key: col.key, Label: col.label, Numeric: col.numeric, URL: link(col.key, col.desc, 1)}
		if col.key == q.Sort {
			h.Sorted, h.URL = "ascending", link(col.key, !q.Desc, 1)
			if q.Desc {
				h.Sorted = "descending"
			}
		}
		view.Columns = append(view.Columns, h)
	}
	if res.Page > 1 {
		view.PrevURL = link(q.Sort, q.Desc, min(res.Page-1, res.Pages))
	}
	if res.Page < res.Pages {
		view.NextURL = link(q.Sort, q.Desc, res.Page+1)
	}
	for _, o := range res.Rows {
		view.Rows = append(view.Rows, templates.AdminOrgRow{ID: o.ID, URL: adminOrgURL(o.ID), Name: o.Name, OwnerEmail: o.OwnerEmail,
			Tier: o.Tier, Spend: dollars(o.Spend), Requests: templates.FormatCount(o.Requests), RejectionRate: adminRate(o.Requests, o.Rejected),
			Freezes: o.ActiveFreezes, Created: formatTime(o.CreatedAt)})
	}
	for _, u := range upgrades {
		view.Upgrades = append(view.Upgrades, adminUpgradeRow(u.ID, u.OrgID, u.OrgName, u.RequesterEmail, u.FromTier, u.ToTier, u.Note, u.CreatedAt))
	}
	render(c, http.StatusOK, templates.AdminOverview(page, view))
}

// AdminOrganization is one organization's page: this month, 30 days of
// usage, budget, invoices, tokens, users, its tier and its pending upgrade
// request.
func (p *Pages) AdminOrganization(c *gin.Context) {
	p.showAdminOrganization(c, http.StatusOK, templates.AdminBalance{})
}

// showAdminOrganization renders an organization's page with status and
// the balance adjust form as it was sent (with its error after a refusal).
func (p *Pages) showAdminOrganization(c *gin.Context, status int, form templates.AdminBalance) {
	o, ok := p.adminPathOrg(c)
	if !ok {
		return
	}
	page, _, _, err := p.page(c, o.Name)
	if err != nil {
		p.fail(c, err)
		return
	}
	ctx := c.Request.Context()
	now := p.now()
	view := templates.AdminOrgView{ID: o.ID, Name: o.Name, Tier: o.Tier.Name, TierURL: fmt.Sprintf("/admin/organizations/%d/tier", o.ID),
		Created: formatTime(o.CreatedAt), TimeZone: cmp.Or(o.TimeZone, "UTC"), Period: models.MonthOf(now).Format("January 2006"),
		AuditURL: "/admin/audit?org=" + strconv.FormatInt(o.ID, 10), Deleted: deletedText(o),
		PurgeIn: retentionText(p.accounts.DeletedOrgRetention())}
	if o.PurgedAt == nil {
		view.ExportURL = fmt.Sprintf("/admin/organizations/%d/export", o.ID)
	}
	if !o.Deleted() {
		view.DeleteURL = fmt.Sprintf("/admin/organizations/%d/delete", o.ID)
	}

	month, err := p.store.UsageInMonth(ctx, o.ID, now)
	if err != nil {
		p.fail(c, err)
		return
	}
	view.Spend, view.Requests, view.Rejected = dollars(month.Cost), templates.FormatCount(month.Requests), templates.FormatCount(month.Rejected)
	view.RejectionRate = adminRate(month.Requests, month.Rejected)
	freezes, err := p.store.OrganizationFreezes(ctx, o.ID, 50)
	if err != nil {
		p.fail(c, err)
		return
	}
	for _, f := range freezes {
		if f.Active(now) {
			view.ActiveFreezes++
		}
	}
	// The charts, the budget and the invoices read the most rollup rows
	// (a month or more of hours); they go meanwhile, each on its own
	// connection, and the page waits for the slowest rather than their sum.
	var (
		wg                                sync.WaitGroup
		chartsErr, budgetErr, invoicesErr error
		requests30d, cost30d              templates.Chart
		budget                            templates.AdminBudget
		invoices                          []billing.Invoice
	)
	wg.Add(3)
	go func() { defer wg.Done(); requests30d, cost30d, chartsErr = p.adminUsageCharts(ctx, o) }()
	go func() { defer wg.Done(); budget, budgetErr = p.adminBudget(ctx, o.ID) }()
	go func() { defer wg.Done(); invoices, invoicesErr = p.billing.Invoices(ctx, o.ID) }()
	defer wg.Wait() // on an early return, too: nothing outlives the request

	bal, err := p.billing.Balance(ctx, o.ID)
	if err != nil {
		p.fail(c, err)
		return
	}
	form.Billing, form.Balance, form.Reserved = o.Tier.Billing, dollars(bal.Balance), dollars(bal.Reserved)
	form.AdjustURL = adminOrgURL(o.ID) + "/balance-adjustments"
	view.Balance = form

	toks, err := p.store.APITokens(ctx, o.ID)
	if err != nil {
		p.fail(c, err)
		return
	}
	for _, t := range toks {
		status := t.Status(now)
		switch {
		case status == "active" && o.Deleted():
			status = "stopped" // its organization's deletion stopped it
		case status == "active":
			view.ActiveTokens++
		}
		view.Tokens = append(view.Tokens, templates.TokenRow{ID: t.ID, Name: t.Name, Prefix: t.Prefix, Created: formatTime(t.CreatedAt),
			LastUsed: formatOptionalTime(t.LastUsedAt, "never"), Expires: formatOptionalTime(t.ExpiresAt, "never"), Status: status})
	}
	users, err := p.store.OrganizationUsers(ctx, o.ID)
	if err != nil {
		p.fail(c, err)
		return
	}
	for _, u := range users {
		view.Users = append(view.Users, templates.AdminUserRow{Email: u.Email, Role: string(u.Role), Created: formatTime(u.JoinedAt)})
	}
	tiers, err := p.store.Tiers(ctx)
	if err != nil {
		p.fail(c, err)
		return
	}
	for _, t := range tiers {
		view.TierNames = append(view.TierNames, t.Name)
	}
	pending, err := p.store.UpgradeRequests(ctx, o.ID, models.UpgradePending)
	if err != nil {
		p.fail(c, err)
		return
	}
	if len(pending) > 0 {
		r := pending[0]
		requester := ""
		if u, err := p.store.User(ctx, r.UserID); err == nil {
			requester = u.Email
		}
		row := adminUpgradeRow(r.ID, o.ID, o.Name, requester, r.FromTier, r.ToTier, r.Note, r.CreatedAt)
		view.Upgrade = &row
	}
	wg.Wait()
	if err := errors.Join(chartsErr, budgetErr, invoicesErr); err != nil {
		p.fail(c, err)
		return
	}
	view.Requests30d, view.Cost30d, view.Budget = requests30d, cost30d, budget
	for _, inv := range invoices {
		u := fmt.Sprintf("/admin/organizations/%d/invoices/%d", o.ID, inv.ID)
		view.Invoices = append(view.Invoices, templates.AdminInvoiceRow{ID: inv.ID, Period: inv.PeriodStart.Format("January 2006"),
			Status: inv.Status, Total: cents(inv.Total), URL: u, CSVURL: u + "/csv"})
	}
	page.Flash = adminOrgFlashes[c.Query("done")]
	render(c, status, templates.AdminOrganization(page, view))
}

// AdjustBalance changes an organization's prepaid balance by hand, with a
// reason; a refused adjustment comes back on the page, filled in.
func (p *Pages) AdjustBalance(c *gin.Context) {
	id, ok := p.pathID(c, "No such organization.")
	if !ok {
		return
	}
	form := templates.AdminBalance{AmountInput: strings.TrimSpace(c.PostForm("amount")), ReasonInput: strings.TrimSpace(c.PostForm("reason"))}
	u, _ := userOf(c)
	amount, err := billing.ParseDollars("amount", strings.TrimPrefix(form.AmountInput, "$"))
	if err == nil {
		_, err = p.billing.AdjustBalance(c.Request.Context(), u.User, id, amount, form.ReasonInput)
	}
	if err != nil {
		switch apperr.CodeOf(err) {
		case apperr.Invalid, apperr.Conflict:
			form.Error = apperr.As(err).Message
			p.showAdminOrganization(c, http.StatusUnprocessableEntity, form)
		default:
			p.fail(c, err)
		}
		return
	}
	c.Redirect(http.StatusSeeOther, adminOrgURL(id)+"?done=adjusted#balance")
}

// adminUsageCharts are an organization's requests (admitted and rejected) and
// cost per day over the last 30 days in its time zone, from the rollups, in
// the dashboard's buckets; days without usage are there as zeros.
func (p *Pages) adminUsageCharts(ctx context.Context, o models.Organization) (requests, cost templates.Chart, err error) {
	b := usageBuckets(p.now(), orgZone(o), range30d)
	points, err := p.billing.Series(ctx, o.ID, b.granularity, b.from, b.to, models.GroupNone)
	if err != nil {
		return requests, cost, err
	}
	n := len(b.labels)
	admitted := templates.Series{Name: "Admitted", Values: make([]float64, n)}
	rejected := templates.Series{Name: "Rejected (429)", Values: make([]float64, n)}
	perDay := make([]money.Amount, n)
	for _, pt := range points {
		if i, ok := b.index[pt.Start.Unix()]; ok {
			admitted.Values[i] += float64(pt.Requests)
			rejected.Values[i] += float64(pt.Rejected)
			perDay[i] += pt.Cost
		}
	}
	spent := templates.Series{Name: "Cost"}
	var total money.Amount
	for _, c := range perDay {
		spent.Values = append(spent.Values, drawDollars(c))
		spent.Labels = append(spent.Labels, dollars(c))
		total += c
	}
	spent.Total = dollars(total)
	requests = templates.Chart{ID: "org-requests", Title: "Requests per day", Unit: "requests", BucketName: "Day",
		Buckets: b.labels, Empty: "No requests in the last 30 days", Series: []templates.Series{admitted, rejected}}
	cost = templates.Chart{ID: "org-cost", Title: "Cost per day", Kind: templates.ValueMoney, BucketName: "Day",
		Buckets: b.labels, Empty: "Nothing spent in the last 30 days", Series: []templates.Series{spent}, Total: dollars(total)}
	return requests, cost, nil
}

// adminBudget is an organization's budget and spend this month.
func (p *Pages) adminBudget(ctx context.Context, orgID int64) (templates.AdminBudget, error) {
	st, err := p.billing.Budget(ctx, orgID)
	if err != nil {
		return templates.AdminBudget{}, err
	}
	b := templates.AdminBudget{Limit: "none", HardStop: st.HardStop, Reserved: dollars(st.Reserved), Credit: dollars(st.Credit),
		Overage: st.Overage}
	if st.Limit != nil {
		b.Limit = dollars(*st.Limit)
	}
	var alerts []string
	for _, a := range st.Alerts {
		alerts = append(alerts, strconv.Itoa(a)+"%")
	}
	b.Alerts, b.Gauge = strings.Join(alerts, ", "), spendGauge("org-budget", st)
	return b, nil
}

// adminPathOrg reads the organization the path names; an id that
// names none is the 404 page.
func (p *Pages) adminPathOrg(c *gin.Context) (models.Organization, bool) {
	id, ok := p.pathID(c, "No such organization.")
	if !ok {
		return models.Organization{}, false
	}
	o, err := p.store.Organization(c.Request.Context(), id)
	if apperr.CodeOf(err) == apperr.NotFound {
		err = apperr.New(apperr.NotFound, "No such organization.")
	}
	if err != nil {
		p.fail(c, err)
		return o, false
	}
	return o, true
}

// AdminInvoice shows one of an organization's invoices with its lines; an
// invoice of another organization is not found.
func (p *Pages) AdminInvoice(c *gin.Context) {
	o, inv, ok := p.adminPathInvoice(c)
	if !ok {
		return
	}
	page, _, _, err := p.page(c, o.Name+" · invoice")
	if err != nil {
		p.fail(c, err)
		return
	}
	u := fmt.Sprintf("/admin/organizations/%d/invoices/%d", o.ID, inv.ID)
	view := templates.AdminInvoiceView{OrgName: o.Name, OrgURL: adminOrgURL(o.ID), Period: inv.PeriodStart.Format("January 2006"),
		Status: inv.Status, Currency: inv.Currency, Total: cents(inv.Total), CSVURL: u + "/csv"}
	for _, l := range inv.Lines {
		line := templates.AdminInvoiceLine{Kind: l.Kind, Description: l.Description, Amount: cents(l.Amount)}
		if l.Kind == billing.LineUsage {
			line.Requests = templates.FormatCount(l.Requests)
			line.Tokens = templates.FormatCount(l.PromptTokens) + " in"
			if l.CachedTokens > 0 {
				line.Tokens += " (" + templates.FormatCount(l.CachedTokens) + " cached)"
			}
			line.Tokens += " · " + templates.FormatCount(l.CompletionTokens) + " out"
			line.Prices = "not billed"
			if l.Billed() {
				line.Prices = "$" + l.InputPrice.String() + " / $" + l.OutputPrice.String() + " / $" + l.CachedInputPrice.String()
			}
		}
		view.Lines = append(view.Lines, line)
	}
	render(c, http.StatusOK, templates.AdminInvoice(page, view))
}

// AdminInvoiceCSV downloads one of an organization's invoices.
func (p *Pages) AdminInvoiceCSV(c *gin.Context) {
	o, inv, ok := p.adminPathInvoice(c)
	if !ok {
		return
	}
	c.Header("Cache-Control", "no-store")
	c.Header("Content-Disposition", fmt.Sprintf(`attachment; filename="sluice-invoice-%d-%s.csv"`, o.ID, inv.PeriodStart.Format("2006-01")))
	c.Data(http.StatusOK, "text/csv; charset=utf-8", inv.CSV())
}

// adminPathInvoice reads the organization and its invoice the path names.
func (p *Pages) adminPathInvoice(c *gin.Context) (models.Organization, billing.Invoice, bool) {
	o, ok := p.adminPathOrg(c)
	if !ok {
		return o, billing.Invoice{}, false
	}
	id, err := strconv.ParseInt(c.Param("invoice"), 10, 64)
	if err != nil || id <= 0 {
		p.fail(c, apperr.New(apperr.NotFound, "No such invoice."))
		return o, billing.Invoice{}, false
	}
	inv, err := p.billing.Invoice(c.Request.Context(), o.ID, id)
	if apperr.CodeOf(err) == apperr.NotFound {
		err = apperr.New(apperr.NotFound, "No such invoice.")
	}
	if err != nil {
		p.fail(c, err)
		return o, inv, false
	}
	return o, inv, true
}

// SetOrganizationTier moves an organization to another tier.
func (p *Pages) SetOrganizationTier(c *gin.Context) {
	id, ok := p.pathID(c, "No such organization.")
	if !ok {
		return
	}
	u, _ := userOf(c)
	if _, err := p.accounts.SetOrganizationTier(c.Request.Context(), u.User, id, c.PostForm("tier")); err != nil {
		p.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, adminOrgURL(id)+"?done=tier")
}

// DecideUpgrade approves or declines a pending upgrade request and goes
// back to the organization's page; a request already decided is a
// conflict, so a second click changes nothing.
func (p *Pages) DecideUpgrade(approve bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		id, ok := p.pathID(c, "No such upgrade request.")
		if !ok {
			return
		}
		u, _ := userOf(c)
		r, err := p.billing.DecideUpgrade(c.Request.Context(), u.User, id, approve)
		if apperr.CodeOf(err) == apperr.NotFound {
			err = apperr.New(apperr.NotFound, "No such upgrade request.")
		}
		if err != nil {
			p.fail(c, err)
			return
		}
		done := "declined"
		if approve {
			done = "approved"
		}
		c.Redirect(http.StatusSeeOther, adminOrgURL(r.OrgID)+"?done="+done)
	}
}

// adminUpgradeRow is an upgrade request as the pages show it.
func adminUpgradeRow(id, orgID int64, orgName, requester, from, to, note string, at time.Time) templates.AdminUpgradeRow {
	return templates.AdminUpgradeRow{ID: id, OrgName: orgName, OrgURL: adminOrgURL(orgID), Requester: requester, From: from, To: to,
		Note: note, Requested: formatTime(at), ApproveURL: fmt.Sprintf("/admin/upgrade-requests/%d/approve", id),
		DeclineURL: fmt.Sprintf("/admin/upgrade-requests/%d/decline", id)}
}

func adminOrgURL(id int64) string { return "/admin/organizations/" + strconv.FormatInt(id, 10) }

// adminRate is the share of requests refused, "—" when there were none.
func adminRate(requests, rejected int64) string {
	if requests+rejected <= 0 {
		return "—"
	}
	pct := float64(rejected) / float64(requests+rejected) * 100
	if pct > 0 && pct < 0.1 {
		return "<0.1%"
	}
	return strconv.FormatFloat(math.Round(pct*10)/10, 'f', -1, 64) + "%"
}
