package web

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/templates"
)

// flashes are the fixed messages a redirect may ask for by name, so a query
// string can never put arbitrary text on the page.
var flashes = map[string]string{
	"revoked":  "Token revoked. Requests using it are refused from now on.",
	"unsigned": "Signing turned off. The token takes unsigned requests again.",
}

// Tokens lists the API tokens the visitor manages: an owner the
// organization's, a member their own.
func (p *Pages) Tokens(c *gin.Context) {
	p.showTokens(c, http.StatusOK, "", templates.TokensView{Form: templates.TokenForm{ExpiresInDays: "0"}}, flashes[c.Query("done")])
}

// showTokens renders the tokens page with v's secret and form; the token
// list is read here.
func (p *Pages) showTokens(c *gin.Context, status int, formErr string, v templates.TokensView, flash string) {
	page, u, _, err := p.page(c, "API tokens")
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
	render(c, status, templates.Tokens(page, v))
}

// CreateToken issues a token and shows its secret, this once.
func (p *Pages) CreateToken(c *gin.Context) {
	form := templates.TokenForm{Name: c.PostForm("name"), ExpiresInDays: strings.TrimSpace(c.PostForm("expires_in_days"))}
	days := 0
	if form.ExpiresInDays != "" {
		n, err := strconv.Atoi(form.ExpiresInDays)
		if err != nil {
			p.showTokens(c, http.StatusUnprocessableEntity, "Expiry must be a number of days.", templates.TokensView{Form: form}, "")
			return
		}
		days = n
	}
	u, _ := userOf(c)
	t, secret, err := p.accounts.CreateToken(c.Request.Context(), u, form.Name, days)
	if err != nil {
		if status := apperr.Status(apperr.CodeOf(err)); status < 500 {
			p.showTokens(c, status, apperr.As(err).Message, templates.TokensView{Form: form}, "")
			return
		}
		p.fail(c, err)
		return
	}
	p.showTokens(c, http.StatusCreated, "", templates.TokensView{NewToken: &templates.NewTokenView{Name: t.Name, Secret: secret},
		Form: templates.TokenForm{ExpiresInDays: "0"}}, "")
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
