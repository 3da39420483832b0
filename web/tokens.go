package web

import (
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/templates"
)

// flashes are the fixed messages a redirect may ask for by name, so a query
// string can never put arbitrary text on the page.
var flashes = map[string]string{
	"revoked":  "Token revoked. Requests using it are refused from now on.",
	"updated":  "Token saved. Its next request, on every server, follows the new settings.",
	"unsigned": "Signing turned off. The token takes unsigned requests again.",
}

// Tokens lists the API tokens the visitor manages: an owner the
// organization's, a member their own.
func (p *Pages) Tokens(c *gin.Context) {
	p.showTokens(c, http.StatusOK, "", templates.TokensView{Form: templates.TokenForm{ExpiresInDays: "0"}}, flashes[c.Query("done")])
}

// showTokens renders the tokens page with v's secret and forms; the token
// list is read here, and which of the tokens the user may change.
func (p *Pages) showTokens(c *gin.Context, status int, formErr string, v templates.TokensView, flash string) {
	page, u, o, err := p.page(c, "API tokens")
	if err != nil {
		p.fail(c, err)
		return
	}
	toks, err := p.accounts.Tokens(c.Request.Context(), u) // a member's own; every one for owners
	if err != nil {
		p.fail(c, err)
		return
	}
	page.Error, page.Flash = formErr, flash
	v.Tokens = tokenRows(toks, p.now())
	for i, t := range toks {
		v.Tokens[i].Editable = t.RevokedAt == nil && u.MayChangeToken(t)
	}
	v.MaxRate = models.TierRequestsPerMinute(o.Tier.RefillPerSec)
	render(c, status, templates.Tokens(page, v))
}

// CreateToken issues a token, with the limits the form sets, and shows
// its secret, this once.
func (p *Pages) CreateToken(c *gin.Context) {
	form := templates.TokenForm{Name: c.PostForm("name"), ExpiresInDays: strings.TrimSpace(c.PostForm("expires_in_days")),
		Models: c.PostForm("models"), MonthlyBudget: c.PostForm("monthly_budget"),
		RequestsPerMinute: c.PostForm("requests_per_minute"), AllowedIPs: c.PostForm("allowed_ips")}
	days := 0
	if form.ExpiresInDays != "" {
		n, err := strconv.Atoi(form.ExpiresInDays)
		if err != nil {
			p.showTokens(c, http.StatusUnprocessableEntity, "Expiry must be a number of days.", templates.TokensView{Form: form}, "")
			return
		}
		days = n
	}
	controls, err := formControls(form.Models, form.MonthlyBudget, form.RequestsPerMinute, form.AllowedIPs)
	if err == nil {
		u, _ := userOf(c)
		var t models.APIToken
		var secret string
		t, secret, err = p.accounts.IssueToken(c.Request.Context(), u, accounts.TokenSettings{Name: form.Name, ExpiresInDays: days, Controls: controls})
		if err == nil {
			p.showTokens(c, http.StatusCreated, "", templates.TokensView{NewToken: &templates.NewTokenView{Name: t.Name, Secret: secret},
				Form: templates.TokenForm{ExpiresInDays: "0"}}, "")
			return
		}
	}
	if status := apperr.Status(apperr.CodeOf(err)); status < 500 {
		p.showTokens(c, formStatus(status), apperr.As(err).Message, templates.TokensView{Form: form}, "")
		return
	}
	p.fail(c, err)
}

// UpdateToken saves a token's edit form: its name, expiry and limits as
// the form holds them (a blank limit removes it). An owner may change any
// token of the organization, a member only the tokens they created.
func (p *Pages) UpdateToken(c *gin.Context) {
	id, ok := p.pathID(c, "No such token.")
	if !ok {
		return
	}
	form := templates.TokenEditForm{ID: id, Name: c.PostForm("name"), ExpiresAt: strings.TrimSpace(c.PostForm("expires_at")),
		Models: c.PostForm("models"), MonthlyBudget: c.PostForm("monthly_budget"),
		RequestsPerMinute: c.PostForm("requests_per_minute"), AllowedIPs: c.PostForm("allowed_ips")}
	patch, err := formPatch(form, strings.TrimSpace(c.PostForm("expires_at_was")))
	if err == nil {
		u, _ := userOf(c)
		if _, err = p.accounts.UpdateToken(c.Request.Context(), u, id, patch); err == nil {
			c.Redirect(http.StatusSeeOther, "/tokens?done=updated")
			return
		}
	}
	switch status := apperr.Status(apperr.CodeOf(err)); {
	case status == http.StatusBadRequest || status == http.StatusUnprocessableEntity || status == http.StatusConflict:
		p.showTokens(c, formStatus(status), apperr.As(err).Message, templates.TokensView{Form: templates.TokenForm{ExpiresInDays: "0"}, Edit: &form}, "")
	default:
		p.fail(c, err) // not found, not theirs: the error page
	}
}

// formStatus is the status a refused form is answered with: the pages
// answer bad input as 422, as the other forms do.
func formStatus(status int) int {
	if status == http.StatusBadRequest {
		return http.StatusUnprocessableEntity
	}
	return status
}

// editTime is how the edit form's datetime-local input holds an expiry:
// minutes, in UTC.
const editTime = "2006-01-02T15:04"

// formPatch reads a token's edit form into a change of every field. The
// expiry changes only when the field differs from what the form was
// rendered with (was): the input holds minutes, and saving other fields
// must not move an expiry set to the second.
func formPatch(f templates.TokenEditForm, was string) (models.TokenPatch, error) {
	c, err := formControls(f.Models, f.MonthlyBudget, f.RequestsPerMinute, f.AllowedIPs)
	if err != nil {
		return models.TokenPatch{}, err
	}
	p := models.TokenPatch{
		Name:              models.Change[string]{Set: true, To: f.Name},
		Models:            models.Change[[]string]{Set: true, To: c.Models},
		MonthlyBudget:     models.Change[*money.Amount]{Set: true, To: c.MonthlyBudget},
		RequestsPerMinute: models.Change[*int64]{Set: true, To: c.RequestsPerMinute},
		AllowedIPs:        models.Change[[]string]{Set: true, To: c.AllowedIPs},
	}
	if f.ExpiresAt != was {
		p.ExpiresAt.Set = true
		if f.ExpiresAt != "" {
			t, err := time.ParseInLocation(editTime, f.ExpiresAt, time.UTC)
			if err != nil {
				return p, apperr.Field(apperr.Invalid, "invalid_expiry", "expires_at", "Expiry must be a date and time, such as 2027-01-31 00:00 (UTC).")
			}
			p.ExpiresAt.To = &t
		}
	}
	return p, nil
}

// formControls reads a form's limits: lists separated by commas (or
// spaces, or lines), a budget in dollars ("$" optional), a whole rate;
// blank fields are no limit.
func formControls(modelList, budget, rate, ips string) (models.TokenControls, error) {
	var c models.TokenControls
	c.Models = formList(modelList)
	c.AllowedIPs = formList(ips)
	if b := strings.TrimPrefix(strings.TrimSpace(budget), "$"); b != "" {
		a, err := money.ParseAmount(strings.TrimSpace(b))
		if err != nil {
			return c, apperr.Field(apperr.Invalid, "invalid_monthly_budget", "monthly_budget", "Monthly budget must be an amount of dollars, such as 12.50.")
		}
		c.MonthlyBudget = &a
	}
	if r := strings.TrimSpace(rate); r != "" {
		n, err := strconv.ParseInt(r, 10, 64)
		if err != nil {
			return c, apperr.Field(apperr.Invalid, "invalid_requests_per_minute", "requests_per_minute", "Requests per minute must be a whole number.")
		}
		c.RequestsPerMinute = &n
	}
	return c, nil
}

// formList splits a form's list on commas and white space (model names
// and networks have none); nil when it names nothing.
func formList(s string) []string {
	f := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
	if len(f) == 0 {
		return nil
	}
	return f
}

// tokenLimits are a token's controls in words, for the list.
func tokenLimits(c models.TokenControls) []string {
	var out []string
	if c.Models != nil {
		out = append(out, "models: "+strings.Join(c.Models, ", "))
	}
	if b := c.MonthlyBudget; b != nil {
		out = append(out, "$"+b.String()+" a month")
	}
	if r := c.RequestsPerMinute; r != nil {
		out = append(out, strconv.FormatInt(*r, 10)+" requests a minute")
	}
	if c.AllowedIPs != nil {
		out = append(out, "from "+strings.Join(c.AllowedIPs, ", "))
	}
	return out
}

// tokenEditForm is a token's edit form as it stands.
func tokenEditForm(t models.APIToken) templates.TokenEditForm {
	f := templates.TokenEditForm{ID: t.ID, Name: t.Name, Models: strings.Join(t.Models, ", "), AllowedIPs: strings.Join(t.AllowedIPs, ", ")}
	if t.ExpiresAt != nil {
		f.ExpiresAt = t.ExpiresAt.UTC().Format(editTime)
	}
	if b := t.MonthlyBudget; b != nil {
		f.MonthlyBudget = b.String()
	}
	if r := t.RequestsPerMinute; r != nil {
		f.RequestsPerMinute = strconv.FormatInt(*r, 10)
	}
	return f
}

// RevokeToken revokes one of the organization's tokens; another
// organization's token is a 404.
func (p *Pages) RevokeToken(c *gin.Context) {
	id, ok := p.pathID(c, "No such token.")
	if !ok {
		return
	}
	u, _ := userOf(c)
	if _, err := p.accounts.RevokeToken(c.Request.Context(), u, id); err != nil {
		p.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, "/tokens?done=revoked")
}

// SetTokenSigning makes a token require signed requests and shows the new
// signing secret this once, or (required=false) turns signing off.
func (p *Pages) SetTokenSigning(c *gin.Context) {
	id, ok := p.pathID(c, "No such token.")
	if !ok {
		return
	}
	u, _ := userOf(c)
	required := c.PostForm("required") == "true"
	t, secret, err := p.accounts.SetTokenSigning(c.Request.Context(), u, id, required)
	if err != nil {
		p.fail(c, err)
		return
	}
	if !required {
		c.Redirect(http.StatusSeeOther, "/tokens?done=unsigned")
		return
	}
	p.showTokens(c, http.StatusOK, "", templates.TokensView{SigningSecret: &templates.NewTokenView{Name: t.Name, Secret: secret},
		Form: templates.TokenForm{ExpiresInDays: "0"}}, "")
}
