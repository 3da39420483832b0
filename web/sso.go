package web

import (
	"net/http"
	"net/url"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/templates"
)

// ssoCookie keeps one single sign-on's sealed flow (state, nonce, PKCE
// verifier) from its start to its callback: only the callback's path gets
// it, scripts cannot read it, and SameSite=Lax still sends it on the
// provider's redirect back, a top-level GET from another site.
const (
	ssoCookie     = "sluice_sso"
	ssoCookiePath = "/auth/oidc/"
)

// ssoStartURL is the "Sign in with SSO" link of a login page going back to
// next once signed in; "" when single sign-on is off.
func (p *Pages) ssoStartURL(next string) string {
	if p.sso == nil {
		return ""
	}
	if next == "" {
		return "/auth/oidc/start"
	}
	return "/auth/oidc/start?next=" + url.QueryEscape(next)
}

// SSOStart sends the browser to the identity provider, keeping the flow it
// must come back with in a short-lived cookie; ?next= names an
// invitation's page to go back to.
func (p *Pages) SSOStart(c *gin.Context) {
	next, _ := invitationReturn(c.Query("next"))
	to, flow, err := p.sso.Begin(c.Request.Context(), next)
	if err != nil {
		p.ssoFailed(c, err, next)
		return
	}
	p.setSSOCookie(c, flow, p.sso.FlowTTL())
	c.Redirect(http.StatusFound, to)
}

// SSOCallback finishes a sign-in the provider sent back: the flow's cookie
// is used up whatever happens, and once the provider's answer checks out
// the browser gets a new session, as a password sign-in gives.
func (p *Pages) SSOCallback(c *gin.Context) {
	var flow string
	if ck, err := c.Request.Cookie(ssoCookie); err == nil {
		flow = ck.Value
	}
	p.setSSOCookie(c, "", -1)
	cb := accounts.SSOCallback{State: c.Query("state"), Code: c.Query("code"), Error: c.Query("error")}
	m, next, err := p.sso.Finish(c.Request.Context(), flow, cb, c.ClientIP())
	if err == nil {
		err = p.setSession(c, m)
	}
	if err != nil {
		p.ssoFailed(c, err, next)
		return
	}
	if next == "" {
		next = "/dashboard"
	}
	c.Redirect(http.StatusSeeOther, next)
}

// ssoFailed shows a refused single sign-on on the login page, with its
// status and message, so password sign-in is at hand; a bug is the error
// page, as everywhere.
func (p *Pages) ssoFailed(c *gin.Context, err error, next string) {
	e := apperr.As(err)
	if e.Code == apperr.Internal {
		p.fail(c, err)
		return
	}
	if e.RetryAfter > 0 {
		apperr.SetRetryAfter(c.Writer.Header(), e.RetryAfter)
	}
	render(c, apperr.Status(e.Code), templates.Login(templates.Page{Title: "Sign in", Error: e.Message},
		templates.LoginView{Next: next, SSOStart: p.ssoStartURL(next)}))
}

// setSSOCookie keeps flow for ttl; a negative ttl deletes the cookie.
func (p *Pages) setSSOCookie(c *gin.Context, flow string, ttl time.Duration) {
	ck := &http.Cookie{Name: ssoCookie, Value: flow, Path: ssoCookiePath, MaxAge: int(ttl / time.Second),
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: OverTLS(c)}
	if ttl < 0 {
		ck.MaxAge, ck.Expires = -1, time.Unix(0, 0)
	}
	http.SetCookie(c.Writer, ck)
}
