package web

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/billing"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/templates"
)

// balanceKinds name the history's kinds of lines.
var balanceKinds = map[string]string{
	models.BalanceTopUp: "Top-up", models.BalanceRedeem: "Redeem code", models.BalanceAdjustment: "Adjustment",
	models.BalanceRefund: "Refund", billing.KindSpending: "Spending",
}

// balanceView is the dashboard's prepaid balance section.
func (p *Pages) balanceView(ctx context.Context, u models.Member, st dashboardState) (templates.BalanceView, error) {
	b, err := p.billing.Balance(ctx, u.OrgID)
	if err != nil {
		return templates.BalanceView{}, err
	}
	v := templates.BalanceView{Prepaid: b.Prepaid, TierName: b.Tier, Balance: dollars(b.Balance), Reserved: dollars(b.Reserved),
		Available: dollars(b.Available), Empty: b.Prepaid && b.Available == 0, Low: b.Alerted && b.Threshold != nil,
		CanEdit: canManageBilling(u), ThresholdInput: st.thresholdInput, RedeemInput: st.redeemInput}
	if b.Threshold != nil {
		v.Threshold, v.ThresholdAmount = dollars(*b.Threshold), b.Threshold.String()
	}
	if !b.Payments {
		v.PaymentsOff = "Top-ups by card are not set up on this server; ask your operator for a redeem code."
	}
	v.Spending = spendingChart(b.Days, p.now())
	for _, h := range billing.History(b) {
		row := templates.BalanceHistoryRow{Kind: balanceKinds[h.Kind], Note: h.Note, Credit: h.Amount > 0, Amount: dollars(h.Amount)}
		if h.Amount > 0 {
			row.Amount = "+" + row.Amount
		}
		row.When = formatTime(h.At)
		if h.Kind == billing.KindSpending {
			row.When = h.At.UTC().Format("2006-01-02") + " (UTC day)"
		}
		v.History = append(v.History, row)
	}
	return v, nil
}

// spendingChart is the balance's spending on each of the last
// billing.HistoryDays days (UTC), a bar a day.
func spendingChart(days []models.DaySpend, now time.Time) templates.Chart {
	c := templates.Chart{ID: "balance-spending", Title: "Spent from the balance per day", Kind: templates.ValueMoney, BucketName: "Day (UTC)",
		Empty: "Nothing spent from the balance in the last 30 days"}
	spent := make(map[string]money.Amount, len(days))
	for _, d := range days {
		spent[d.Day.UTC().Format(time.DateOnly)] = d.Amount
	}
	s := templates.Series{Name: "Spent"}
	var total money.Amount
	first := now.UTC().Truncate(24*time.Hour).AddDate(0, 0, -(billing.HistoryDays - 1))
	for i := range billing.HistoryDays {
		day := first.AddDate(0, 0, i)
		a := spent[day.Format(time.DateOnly)]
		total += a
		c.Buckets = append(c.Buckets, day.Format("Jan 2"))
		s.Values = append(s.Values, drawDollars(a))
		s.Labels = append(s.Labels, dollars(a))
	}
	s.Total, c.Total = dollars(total), dollars(total)
	c.Series = []templates.Series{s}
	return c
}

// Redeem credits the organization with a redeem code from the form.
func (p *Pages) Redeem(c *gin.Context) {
	u, _ := userOf(c)
	code := strings.TrimSpace(c.PostForm("code"))
	if code == "" {
		p.formFailed(c, templates.FormRedeem, apperr.Field(apperr.Invalid, "missing_code", "code", "Enter a code."), dashboardState{})
		return
	}
	rc, err := p.billing.Redeem(c.Request.Context(), u, code, c.ClientIP())
	if err != nil {
		if apperr.CodeOf(err) == apperr.RateLimited {
			// Shown beside the form, as a refusal of the input is.
			st := dashboardState{redeemInput: code, notice: templates.FormNotice{Form: templates.FormRedeem, Error: apperr.As(err).Message}}
			apperr.SetRetryAfter(c.Writer.Header(), apperr.As(err).RetryAfter)
			p.showDashboard(c, http.StatusTooManyRequests, st)
			return
		}
		p.formFailed(c, templates.FormRedeem, err, dashboardState{redeemInput: code})
		return
	}
	p.showDashboard(c, http.StatusOK, dashboardState{notice: templates.FormNotice{Form: templates.FormRedeem,
		Flash: "Code redeemed: " + dollars(rc.Amount) + " added to the balance."}})
}

// SetLowBalance saves the owner's low-balance alert; empty removes it.
func (p *Pages) SetLowBalance(c *gin.Context) {
	u, _ := userOf(c)
	if !canManageBilling(u) {
		p.fail(c, ownerOnly(u, "set its low-balance alert"))
		return
	}
	raw := strings.TrimPrefix(strings.TrimSpace(c.PostForm("low_balance_threshold")), "$")
	var th *money.Amount
	if raw != "" {
		a, err := money.ParseAmount(raw)
		if err != nil {
			p.formFailed(c, templates.FormLowBalance, apperr.Field(apperr.Invalid, "invalid_amount", "low_balance_threshold",
				`The alert must be a decimal string of dollars such as "2.00", or empty for none.`), dashboardState{thresholdInput: raw})
			return
		}
		th = &a
	}
	if err := p.billing.SetLowBalanceThreshold(c.Request.Context(), u, th); err != nil {
		p.formFailed(c, templates.FormLowBalance, err, dashboardState{thresholdInput: raw})
		return
	}
	done := "low-balance"
	if th == nil {
		done = "low-balance-off"
	}
	c.Redirect(http.StatusSeeOther, "/dashboard?done="+done+"#"+templates.FormLowBalance)
}
