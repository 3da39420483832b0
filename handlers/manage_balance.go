package handlers

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/billing"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// balanceOut is GET /api/balance: money as decimal strings of dollars.
type balanceOut struct {
	Billing   string `json:"billing"` // the tier's: invoice or prepaid
	Balance   string `json:"balance"`
	Reserved  string `json:"reserved"`
	Available string `json:"available"`
	Currency  string `json:"currency"`
	// LowBalanceThreshold is the owner's alert, null for none.
	LowBalanceThreshold *string            `json:"low_balance_threshold"`
	LowBalanceAlerted   bool               `json:"low_balance_alerted"`
	Payments            balancePaymentsOut `json:"payments"`
	History             []historyItem      `json:"history"`
}

// balancePaymentsOut says whether the balance can be topped up by card.
type balancePaymentsOut struct {
	Enabled bool   `json:"enabled"`
	Message string `json:"message,omitempty"`
}

// historyItem is one line of a balance's history: a credit or an
// adjustment (at its time), or a day's spending (type "spending", at the
// day's start, UTC). Newest first.
type historyItem struct {
	Type      string    `json:"type"` // topup, redeem, adjustment, refund, spending
	Amount    string    `json:"amount"`
	Note      string    `json:"note,omitempty"`
	Reference string    `json:"reference,omitempty"`
	At        time.Time `json:"at"`
}

func toBalanceOut(st billing.BalanceState) balanceOut {
	out := balanceOut{Billing: models.BillingInvoice, Balance: st.Balance.String(), Reserved: st.Reserved.String(),
		Available: st.Available.String(), Currency: "USD", LowBalanceAlerted: st.Alerted,
		Payments: balancePaymentsOut{Enabled: st.Payments}, History: []historyItem{}}
	if st.Prepaid {
		out.Billing = models.BillingPrepaid
	}
	if !st.Payments {
		out.Payments.Message = billing.PaymentsOff
	}
	if st.Threshold != nil {
		s := st.Threshold.String()
		out.LowBalanceThreshold = &s
	}
	for _, h := range billing.History(st) {
		item := historyItem{Type: h.Kind, Amount: h.Amount.String(), Note: h.Note, At: h.At.UTC()}
		if h.Kind == models.BalanceTopUp {
			item.Reference = h.Reference // a payment's, to match a receipt
		}
		out.History = append(out.History, item)
	}
	return out
}

// getBalance answers GET /api/balance.
func (m *manage) getBalance(c *gin.Context) {
	st, err := m.Billing.Balance(c.Request.Context(), currentUser(c).OrgID)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, toBalanceOut(st))
}

// putBalance answers PUT /api/balance {"low_balance_threshold": "2.00" |
// null}: the owner's low-balance alert.
func (m *manage) putBalance(c *gin.Context) {
	var in struct {
		Threshold json.RawMessage `json:"low_balance_threshold"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	th, err := optionalDollars("low_balance_threshold", in.Threshold)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	ctx := c.Request.Context()
	if err := m.Billing.SetLowBalanceThreshold(ctx, currentUser(c), th); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	m.getBalance(c)
}

// optionalDollars reads a required field that is a decimal string of
// dollars or null.
func optionalDollars(field string, raw json.RawMessage) (*money.Amount, error) {
	if len(raw) == 0 {
		return nil, apperr.Field(apperr.Invalid, "missing_"+field, field, field+` is required: a decimal string such as "2.00", or null for none`)
	}
	if string(raw) == "null" {
		return nil, nil
	}
	var s string
	a, err := money.Amount(0), json.Unmarshal(raw, &s)
	if err == nil {
		a, err = money.ParseAmount(s)
	}
	if err != nil {
		return nil, apperr.Field(apperr.Invalid, "invalid_amount", field, field+` must be a decimal string of dollars such as "2.00", or null`)
	}
	return &a, nil
}

// redeem answers POST /api/balance/redeem {"code"}.
func (m *manage) redeem(c *gin.Context) {
	var in struct {
		Code string `json:"code"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	if in.Code == "" {
		writeAPIError(c, m.log, apperr.Field(apperr.Invalid, "missing_code", "code", "code is required"))
		return
	}
	u := currentUser(c)
	rc, err := m.Billing.Redeem(c.Request.Context(), u, in.Code, c.ClientIP())
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	st, err := m.Billing.Balance(c.Request.Context(), u.OrgID)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"credited": rc.Amount.String(), "balance": toBalanceOut(st)})
}

// redeemCodeOut is a redeem code as admins see it; Code only in the answer
// that made it.
type redeemCodeOut struct {
	ID        int64      `json:"id"`
	Code      string     `json:"code,omitempty"`
	Prefix    string     `json:"prefix"`
	Amount    string     `json:"amount"`
	Uses      int        `json:"uses"`
	UsesLeft  int        `json:"uses_left"`
	ExpiresAt *time.Time `json:"expires_at"`
	Note      string     `json:"note"`
	CreatedAt time.Time  `json:"created_at"`
}

func toRedeemCodeOut(rc models.RedeemCode, code string) redeemCodeOut {
	return redeemCodeOut{ID: rc.ID, Code: code, Prefix: rc.Prefix, Amount: rc.Amount.String(), Uses: rc.Uses, UsesLeft: rc.UsesLeft,
		ExpiresAt: rc.ExpiresAt, Note: rc.Note, CreatedAt: rc.CreatedAt.UTC()}
}

// createRedeemCode answers POST /api/admin/redeem-codes {"amount": "5.00",
// "uses": 1, "expires_at": RFC 3339 or null, "note"} with 201 and the code,
// shown this once.
func (m *manage) createRedeemCode(c *gin.Context) {
	var in struct {
		Amount    string     `json:"amount"`
		Uses      *int       `json:"uses"`
		ExpiresAt *time.Time `json:"expires_at"`
		Note      string     `json:"note"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	r := billing.RedeemCodeInput{Amount: in.Amount, ExpiresAt: in.ExpiresAt, Note: in.Note, Uses: 1}
	if in.Uses != nil {
		if r.Uses = *in.Uses; r.Uses < 1 {
			writeAPIError(c, m.log, apperr.Field(apperr.Invalid, "invalid_uses", "uses", "uses must be from 1 to "+strconv.Itoa(models.MaxRedeemUses)))
			return
		}
	}
	rc, code, err := m.Billing.CreateRedeemCode(c.Request.Context(), currentUser(c).User, r)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusCreated, toRedeemCodeOut(rc, code))
}

// listRedeemCodes answers GET /api/admin/redeem-codes.
func (m *manage) listRedeemCodes(c *gin.Context) {
	cs, err := m.Billing.RedeemCodes(c.Request.Context(), currentUser(c).User)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	out := make([]redeemCodeOut, len(cs))
	for i, rc := range cs {
		out[i] = toRedeemCodeOut(rc, "")
	}
	c.JSON(http.StatusOK, gin.H{"data": out})
}

// adjustBalance answers POST /api/admin/organizations/{id}/balance-adjustments
// {"amount": "-2.50", "reason"} with 201 and the entry.
func (m *manage) adjustBalance(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	var in struct {
		Amount string `json:"amount"`
		Reason string `json:"reason"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	amount, err := billing.ParseDollars("amount", in.Amount)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	ctx := c.Request.Context()
	e, err := m.Billing.AdjustBalance(ctx, currentUser(c).User, id, amount, in.Reason)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	st, err := m.Billing.Balance(ctx, id)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusCreated, gin.H{"id": e.ID, "organization_id": id, "amount": e.Amount.String(), "reason": e.Note,
		"created_at": e.CreatedAt.UTC(), "balance": st.Balance.String()})
}
