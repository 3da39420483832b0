package web

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/billing"
	"github.com/sluicehq/sluice/templates"
)

// AdminRedeemCodes lists the redeem codes with the form that makes one.
func (p *Pages) AdminRedeemCodes(c *gin.Context) {
	p.showRedeemCodes(c, http.StatusOK, templates.AdminRedeemCodesView{}, "")
}

// showRedeemCodes renders the redeem codes page around v (a new code, a
// refilled form) with status and an error.
func (p *Pages) showRedeemCodes(c *gin.Context, status int, v templates.AdminRedeemCodesView, formErr string) {
	page, u, _, err := p.page(c, "Redeem codes")
	if err != nil {
		p.fail(c, err)
		return
	}
	codes, err := p.billing.RedeemCodes(c.Request.Context(), u.User)
	if err != nil {
		p.fail(c, err)
		return
	}
	now := p.now()
	for _, rc := range codes {
		row := templates.AdminRedeemRow{Prefix: rc.Prefix, Amount: dollars(rc.Amount), Uses: strconv.Itoa(rc.UsesLeft) + " of " + strconv.Itoa(rc.Uses),
			Expires: formatOptionalTime(rc.ExpiresAt, "never"), Note: rc.Note, Created: formatTime(rc.CreatedAt)}
		row.Spent = rc.UsesLeft == 0 || rc.ExpiresAt != nil && !rc.ExpiresAt.After(now)
		v.Codes = append(v.Codes, row)
	}
	page.Error = formErr
	render(c, status, templates.AdminRedeemCodes(page, v))
}

// CreateRedeemCode makes a code from the form and shows it, this once.
func (p *Pages) CreateRedeemCode(c *gin.Context) {
	form := templates.AdminRedeemForm{Amount: strings.TrimSpace(c.PostForm("amount")), Uses: strings.TrimSpace(c.PostForm("uses")),
		ExpiresAt: strings.TrimSpace(c.PostForm("expires_at")), Note: strings.TrimSpace(c.PostForm("note"))}
	in := billing.RedeemCodeInput{Amount: strings.TrimPrefix(form.Amount, "$"), Note: form.Note, Uses: 1}
	refuse := func(msg string) {
		p.showRedeemCodes(c, http.StatusUnprocessableEntity, templates.AdminRedeemCodesView{Form: form}, msg)
	}
	if form.Uses != "" {
		n, err := strconv.Atoi(form.Uses)
		if err != nil || n < 1 {
			refuse("Uses must be a whole number from 1.")
			return
		}
		in.Uses = n
	}
	if form.ExpiresAt != "" {
		// datetime-local sends no zone: the form says UTC.
		t, err := time.ParseInLocation("2006-01-02T15:04", form.ExpiresAt, time.UTC)
		if err != nil {
			refuse("Expires must be a date and time, e.g. 2027-01-31T23:59.")
			return
		}
		in.ExpiresAt = &t
	}
	u, _ := userOf(c)
	_, code, err := p.billing.CreateRedeemCode(c.Request.Context(), u.User, in)
	if err != nil {
		if e := apperr.As(err); e.Code == apperr.Invalid || e.Code == apperr.Unprocessable {
			refuse(e.Message)
			return
		}
		p.fail(c, err)
		return
	}
	p.showRedeemCodes(c, http.StatusCreated, templates.AdminRedeemCodesView{NewCode: code}, "")
}
