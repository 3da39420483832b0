package handlers

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/billing"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// Money crosses the API as decimal strings of dollars; times as RFC 3339.

type priceOut struct {
	Model              string `json:"model"`
	Priced             bool   `json:"priced"` // false: the model costs nothing until an admin sets a price
	InputPerMTok       string `json:"input_per_mtok,omitempty"`
	OutputPerMTok      string `json:"output_per_mtok,omitempty"`
	CachedInputPerMTok string `json:"cached_input_per_mtok,omitempty"`
	// Absent when the model has none: the input and the output price apply.
	CacheCreationPerMTok string     `json:"cache_creation_per_mtok,omitempty"`
	ReasoningPerMTok     string     `json:"reasoning_per_mtok,omitempty"`
	EffectiveFrom        *time.Time `json:"effective_from,omitempty"`
}

func toPriceOut(model string, p *models.ModelPrice) priceOut {
	out := priceOut{Model: model}
	if p != nil {
		from := p.EffectiveFrom.UTC()
		out = priceOut{Model: model, Priced: true, InputPerMTok: p.InputPerMTok.String(), OutputPerMTok: p.OutputPerMTok.String(),
			CachedInputPerMTok: p.CachedInputPerMTok.String(), EffectiveFrom: &from}
		if v := p.CacheCreationPerMTok; v != nil {
			out.CacheCreationPerMTok = v.String()
		}
		if v := p.ReasoningPerMTok; v != nil {
			out.ReasoningPerMTok = v.String()
		}
	}
	return out
}

// listPrices answers GET /api/admin/prices: every model's current price,
// and the models served or metered without one.
func (m *manage) listPrices(c *gin.Context) {
	rows, err := m.Billing.Prices(c.Request.Context(), m.Models())
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	out := make([]priceOut, len(rows))
	for i, r := range rows {
		out[i] = toPriceOut(r.Model, r.Current)
	}
	c.JSON(http.StatusOK, gin.H{"data": out})
}

// setPrice answers PUT /api/admin/prices/{model}: a new price in force from
// now on. Model names may contain slashes ("meta-llama/Llama-3-8B").
func (m *manage) setPrice(c *gin.Context) {
	var in struct {
		Input         string `json:"input_per_mtok"`
		Output        string `json:"output_per_mtok"`
		CachedInput   string `json:"cached_input_per_mtok"`
		CacheCreation string `json:"cache_creation_per_mtok"`
		Reasoning     string `json:"reasoning_per_mtok"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	model := strings.TrimPrefix(c.Param("model"), "/")
	p, err := m.Billing.SetPrice(c.Request.Context(), currentUser(c).User, model, billing.PriceInput{Input: in.Input, Output: in.Output,
		CachedInput: in.CachedInput, CacheCreation: in.CacheCreation, Reasoning: in.Reasoning})
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, toPriceOut(p.Model, &p))
}

type budgetOut struct {
	MonthlyLimit   *string   `json:"monthly_limit"`
	HardStop       bool      `json:"hard_stop"`
	Spent          string    `json:"spent"`
	Reserved       string    `json:"reserved"`
	PeriodStart    time.Time `json:"period_start"`
	PeriodEnd      time.Time `json:"period_end"`
	IncludedCredit string    `json:"included_credit"`
	Overage        string    `json:"overage"`
	AlertsSent     []int     `json:"alerts_sent"` // thresholds (percent of the budget) crossed this month
}

func toBudgetOut(b billing.BudgetState) budgetOut {
	out := budgetOut{HardStop: b.HardStop, Spent: b.Spent.String(), Reserved: b.Reserved.String(), PeriodStart: b.PeriodStart,
		PeriodEnd: b.PeriodEnd, IncludedCredit: b.Credit.String(), Overage: b.Overage, AlertsSent: b.Alerts}
	if b.Limit != nil {
		s := b.Limit.String()
		out.MonthlyLimit = &s
	}
	if out.AlertsSent == nil {
		out.AlertsSent = []int{}
	}
	return out
}

// getBudget answers GET /api/budget.
func (m *manage) getBudget(c *gin.Context) {
	b, err := m.Billing.Budget(c.Request.Context(), currentUser(c).OrgID)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, toBudgetOut(b))
}

// putBudget answers PUT /api/budget {"monthly_limit": "10.00" | null,
// "hard_stop": true}. hard_stop defaults to true: a budget that blocks is
// what most owners mean.
func (m *manage) putBudget(c *gin.Context) {
	var in struct {
		MonthlyLimit json.RawMessage `json:"monthly_limit"`
		HardStop     *bool           `json:"hard_stop"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	b := models.Budget{HardStop: true}
	if in.HardStop != nil {
		b.HardStop = *in.HardStop
	}
	if len(in.MonthlyLimit) == 0 {
		writeAPIError(c, m.log, apperr.Field(apperr.Invalid, "missing_monthly_limit", "monthly_limit", `monthly_limit is required: a decimal string such as "10.00", or null to remove the budget`))
		return
	}
	if string(in.MonthlyLimit) != "null" {
		var s string
		a, err := money.Amount(0), json.Unmarshal(in.MonthlyLimit, &s)
		if err == nil {
			a, err = money.ParseAmount(s)
		}
		if err != nil {
			writeAPIError(c, m.log, apperr.Field(apperr.Invalid, "invalid_amount", "monthly_limit", `monthly_limit must be a decimal string of dollars such as "10.00", or null`))
			return
		}
		b.Limit = &a
	}
	st, err := m.Billing.SetBudget(c.Request.Context(), currentUser(c), b)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, toBudgetOut(st))
}

// putOrganization answers PUT /api/organization: the owner's settings, the
// time zone days are counted in and where budget alerts are posted. A new
// webhook's signing secret is in the answer, this once.
func (m *manage) putOrganization(c *gin.Context) {
	var in struct {
		TimeZone   *string `json:"time_zone"`
		WebhookURL *string `json:"webhook_url"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	ctx, u := c.Request.Context(), currentUser(c)
	out := gin.H{}
	if in.TimeZone != nil {
		if err := m.Billing.SetTimeZone(ctx, u, *in.TimeZone); err != nil {
			writeAPIError(c, m.log, err)
			return
		}
	}
	if in.WebhookURL != nil {
		secret, err := m.Billing.SetWebhook(ctx, u, strings.TrimSpace(*in.WebhookURL))
		if err != nil {
			writeAPIError(c, m.log, err)
			return
		}
		if secret != "" {
			out["webhook_secret"] = secret
		}
	}
	o, err := m.Store.Organization(ctx, u.OrgID)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	out["organization"] = toOrgOut(o)
	out["time_zone"] = o.TimeZone
	out["webhook_url"] = o.WebhookURL
	c.JSON(http.StatusOK, out)
}

type pointOut struct {
	Start            time.Time `json:"start"`
	Model            *string   `json:"model,omitempty"`
	TokenID          *int64    `json:"token_id,omitempty"`
	Requests         int64     `json:"requests"`
	Rejected         int64     `json:"rejected"`
	PromptTokens     int64     `json:"prompt_tokens"`
	CompletionTokens int64     `json:"completion_tokens"`
	CachedTokens     int64     `json:"cached_tokens"`
	Cost             string    `json:"cost"`
}

// usageSeries answers GET /api/usage/series?granularity=hour|day&from=…
// &to=…&group_by=model|token. from and to are RFC 3339 or dates
// (YYYY-MM-DD, in the organization's time zone); by default the last 30
// days by day, or the last 48 hours by hour.
func (m *manage) usageSeries(c *gin.Context) {
	ctx, orgID := c.Request.Context(), currentUser(c).OrgID
	gran := c.DefaultQuery("granularity", billing.Day)
	loc, err := m.Billing.Zone(ctx, orgID)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	now := m.Now().In(loc)
	to := now
	from := time.Date(now.Year(), now.Month(), now.Day()-29, 0, 0, 0, 0, loc)
	if gran == billing.Hour {
		from = now.Truncate(time.Hour).Add(-47 * time.Hour)
	}
	for _, q := range []struct {
		name string
		dst  *time.Time
	}{{"from", &from}, {"to", &to}} {
		if v := c.Query(q.name); v != "" {
			t, err := parseWhen(v, loc)
			if err != nil {
				writeAPIError(c, m.log, apperr.Field(apperr.Invalid, "invalid_time", q.name, q.name+" must be an RFC 3339 time or a date like 2026-11-30"))
				return
			}
			*q.dst = t
		}
	}
	group := c.Query("group_by")
	points, err := m.Billing.Series(ctx, orgID, gran, from, to, group)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	out := make([]pointOut, len(points))
	for i, p := range points {
		out[i] = pointOut{Start: p.Start, Requests: p.Requests, Rejected: p.Rejected, PromptTokens: p.PromptTokens,
			CompletionTokens: p.CompletionTokens, CachedTokens: p.CachedTokens, Cost: p.Cost.String()}
		switch group {
		case models.GroupModel:
			model := p.Group
			out[i].Model = &model
		case models.GroupToken:
			id, _ := strconv.ParseInt(p.Group, 10, 64)
			out[i].TokenID = &id
		}
	}
	c.JSON(http.StatusOK, gin.H{"data": out, "granularity": gran, "from": from, "to": to, "time_zone": loc.String()})
}

// parseWhen reads an RFC 3339 time or a date in loc.
func parseWhen(v string, loc *time.Location) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	return time.ParseInLocation("2006-01-02", v, loc)
}

type invoiceLineOut struct {
	Kind               string `json:"kind"`
	Description        string `json:"description"`
	Model              string `json:"model,omitempty"`
	Requests           int64  `json:"requests,omitempty"`
	PromptTokens       int64  `json:"prompt_tokens,omitempty"`
	CompletionTokens   int64  `json:"completion_tokens,omitempty"`
	CachedTokens       int64  `json:"cached_tokens,omitempty"`
	InputPerMTok       string `json:"input_per_mtok,omitempty"`
	OutputPerMTok      string `json:"output_per_mtok,omitempty"`
	CachedInputPerMTok string `json:"cached_input_per_mtok,omitempty"`
	Amount             string `json:"amount"`
}

type invoiceOut struct {
	ID          int64     `json:"id"`
	PeriodStart time.Time `json:"period_start"`
	PeriodEnd   time.Time `json:"period_end"`
	Status      string    `json:"status"`
	Total       string    `json:"total"`
	Currency    string    `json:"currency"`
	// PaymentStatus is what Stripe said of the charged invoice (open,
	// paid, failed, void); "" while it is not charged through Stripe.
	PaymentStatus    string           `json:"payment_status"`
	HostedInvoiceURL string           `json:"hosted_invoice_url,omitempty"`
	Lines            []invoiceLineOut `json:"lines,omitempty"`
}

func toInvoiceOut(inv billing.Invoice) invoiceOut {
	out := invoiceOut{ID: inv.ID, PeriodStart: inv.PeriodStart, PeriodEnd: inv.PeriodEnd, Status: inv.Status,
		Total: inv.Total.StringCents(), Currency: inv.Currency, PaymentStatus: inv.PaymentStatus, HostedInvoiceURL: inv.HostedURL}
	for _, l := range inv.Lines {
		lo := invoiceLineOut{Kind: l.Kind, Description: l.Description, Model: l.Model, Requests: l.Requests,
			PromptTokens: l.PromptTokens, CompletionTokens: l.CompletionTokens, CachedTokens: l.CachedTokens, Amount: l.Amount.StringCents()}
		if l.Billed() {
			lo.InputPerMTok, lo.OutputPerMTok, lo.CachedInputPerMTok = l.InputPrice.String(), l.OutputPrice.String(), l.CachedInputPrice.String()
		}
		out.Lines = append(out.Lines, lo)
	}
	return out
}

// listInvoices answers GET /api/invoices: this month's live draft and the
// past months'.
func (m *manage) listInvoices(c *gin.Context) {
	invs, err := m.Billing.Invoices(c.Request.Context(), currentUser(c).OrgID)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	out := make([]invoiceOut, len(invs))
	for i, inv := range invs {
		inv.Lines = nil // the list is totals; GET /api/invoices/{id} has the lines
		out[i] = toInvoiceOut(inv)
	}
	c.JSON(http.StatusOK, gin.H{"data": out})
}

// invoiceOf reads the path's invoice of the caller's organization.
func (m *manage) invoiceOf(c *gin.Context) (billing.Invoice, bool) {
	id, err := pathID(c, "id")
	if err == nil {
		var inv billing.Invoice
		if inv, err = m.Billing.Invoice(c.Request.Context(), currentUser(c).OrgID, id); err == nil {
			return inv, true
		}
	}
	writeAPIError(c, m.log, err)
	return billing.Invoice{}, false
}

// getInvoice answers GET /api/invoices/{id} with its lines.
func (m *manage) getInvoice(c *gin.Context) {
	if inv, ok := m.invoiceOf(c); ok {
		c.JSON(http.StatusOK, toInvoiceOut(inv))
	}
}

// invoiceCSV answers GET /api/invoices/{id}/csv, a download.
func (m *manage) invoiceCSV(c *gin.Context) {
	if inv, ok := m.invoiceOf(c); ok {
		c.Header("Content-Disposition", `attachment; filename="sluice-invoice-`+inv.PeriodStart.Format("2006-01")+`.csv"`)
		c.Data(http.StatusOK, "text/csv; charset=utf-8", inv.CSV())
	}
}

type upgradeOut struct {
	ID        int64      `json:"id"`
	OrgID     int64      `json:"organization_id"`
	FromTier  string     `json:"from_tier"`
	ToTier    string     `json:"to_tier"`
	Note      string     `json:"note"`
	Status    string     `json:"status"`
	CreatedAt time.Time  `json:"created_at"`
	DecidedAt *time.Time `json:"decided_at"`
}

func toUpgradeOut(r models.UpgradeRequest) upgradeOut {
	return upgradeOut{r.ID, r.OrgID, r.FromTier, r.ToTier, r.Note, r.Status, r.CreatedAt, r.DecidedAt}
}

// requestUpgrade answers POST /api/upgrade-requests {"tier", "note"}.
func (m *manage) requestUpgrade(c *gin.Context) {
	var in struct {
		Tier string `json:"tier"`
		Note string `json:"note"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	r, err := m.Billing.RequestUpgrade(c.Request.Context(), currentUser(c), in.Tier, in.Note)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusCreated, toUpgradeOut(r))
}

// listUpgrades answers GET /api/upgrade-requests (the caller's
// organization's) and GET /api/admin/upgrade-requests?status=… (all).
func (m *manage) listUpgrades(c *gin.Context) {
	u := currentUser(c)
	org := u.OrgID
	if strings.HasPrefix(c.FullPath(), "/api/admin/") {
		org = 0
	}
	rs, err := m.Store.UpgradeRequests(c.Request.Context(), org, c.Query("status"))
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	out := make([]upgradeOut, len(rs))
	for i, r := range rs {
		out[i] = toUpgradeOut(r)
	}
	c.JSON(http.StatusOK, gin.H{"data": out})
}

// decideUpgrade answers POST /api/admin/upgrade-requests/{id}/approve and
// …/decline.
func (m *manage) decideUpgrade(approve bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		id, err := pathID(c, "id")
		if err != nil {
			writeAPIError(c, m.log, err)
			return
		}
		r, err := m.Billing.DecideUpgrade(c.Request.Context(), currentUser(c).User, id, approve)
		if err != nil {
			writeAPIError(c, m.log, err)
			return
		}
		c.JSON(http.StatusOK, toUpgradeOut(r))
	}
}
