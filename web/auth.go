package web

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/templates"
)

// Home sends visitors where they belong.
func (p *Pages) Home(c *gin.Context) {
	if _, ok := userOf(c); ok {
		c.Redirect(http.StatusSeeOther, "/dashboard")
		return
	}
	c.Redirect(http.StatusSeeOther, "/login")
}

// LoginForm shows the login page; ?next= names an invitation's page to
// come back to.
func (p *Pages) LoginForm(c *gin.Context) {
	next, _ := invitationReturn(c.Query("next"))
	render(c, http.StatusOK, templates.Login(templates.Page{Title: "Sign in"}, templates.LoginView{Next: next, SSOStart: p.ssoStartURL(next)}))
}

// Login checks the password and starts a new session, in the organization
// the user last worked in; a sign-in from an invitation's page goes back
// to it.
func (p *Pages) Login(c *gin.Context) {
	email := c.PostForm("email")
	next, back := invitationReturn(c.PostForm("next"))
	u, err := p.accounts.Login(c.Request.Context(), email, c.PostForm("password"), c.ClientIP())
	if err == nil {
		err = p.setSession(c, u)
	}
	if err != nil {
		p.formError(c, err, func(page templates.Page) {
			render(c, apperr.Status(apperr.CodeOf(err)), templates.Login(page, templates.LoginView{Email: email, Next: next, SSOStart: p.ssoStartURL(next)}))
		}, "Sign in")
		return
	}
	if back {
		c.Redirect(http.StatusSeeOther, next)
		return
	}
	c.Redirect(http.StatusSeeOther, "/dashboard")
}

// SignupForm shows the signup page.
func (p *Pages) SignupForm(c *gin.Context) {
	render(c, http.StatusOK, templates.Signup(templates.Page{Title: "Create your account"}, templates.SignupView{MailOn: p.accounts.MailOn()}))
}

// Signup creates an organization on the free tier and signs its owner in;
// from an invitation's page (an invitation field) it joins that
// invitation's organization instead.
func (p *Pages) Signup(c *gin.Context) {
	if code := c.PostForm("invitation"); code != "" {
		p.signupByInvitation(c, code)
		return
	}
	view := templates.SignupView{Email: c.PostForm("email"), Organization: c.PostForm("organization"), MailOn: p.accounts.MailOn()}
	if p.accounts.MailOn() {
		p.requestSignup(c, view)
		return
	}
	u, _, err := p.accounts.Signup(c.Request.Context(), view.Email, c.PostForm("password"), view.Organization, c.ClientIP())
	if err == nil {
		err = p.setSession(c, u)
	}
	if err != nil {
		p.formError(c, err, func(page templates.Page) {
			render(c, apperr.Status(apperr.CodeOf(err)), templates.Signup(page, view))
		}, "Create your account")
		return
	}
	c.Redirect(http.StatusSeeOther, "/dashboard")
}

// requestSignup is signup where Sluice sends mail: nothing is made until
// the address is confirmed, and the page says the same for a new address
// and a taken one.
func (p *Pages) requestSignup(c *gin.Context, view templates.SignupView) {
	err := p.accounts.RequestSignup(c.Request.Context(), view.Email, c.PostForm("password"), view.Organization, c.ClientIP())
	if err != nil {
		p.formError(c, err, func(page templates.Page) {
			render(c, apperr.Status(apperr.CodeOf(err)), templates.Signup(page, view))
		}, "Create your account")
		return
	}
	render(c, http.StatusAccepted, templates.Notice(templates.Page{Title: "Check your mail"}, templates.NoticeView{Heading: "Check your mail",
		Message: "We sent a mail to " + strings.TrimSpace(view.Email) + ". Open its link, within 24 hours, to finish signing up. " +
			"(If the address already has an account, the mail says so instead.)"}))
}

// signupByInvitation makes the account an invitation's page asks for and
// signs it in, in the invitation's organization; a problem is shown on
// that page.
func (p *Pages) signupByInvitation(c *gin.Context, code string) {
	u, _, err := p.accounts.SignupByInvitation(c.Request.Context(), c.PostForm("email"), c.PostForm("password"), code, c.ClientIP())
	if err == nil {
		err = p.setSession(c, u)
	}
	if err != nil {
		status := apperr.Status(apperr.CodeOf(err))
		if status >= 500 || apperr.CodeOf(err) == apperr.NotFound {
			p.fail(c, err)
			return
		}
		if e := apperr.As(err); e.RetryAfter > 0 {
			apperr.SetRetryAfter(c.Writer.Header(), e.RetryAfter)
		}
		p.showInvitation(c, status, code, apperr.As(err).Message)
		return
	}
	c.Redirect(http.StatusSeeOther, "/dashboard")
}

// Logout ends the session on the server and clears the cookie.
func (p *Pages) Logout(c *gin.Context) {
	if err := p.endSession(c); err != nil {
		p.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, "/login")
}

// formError shows a user's mistake (or a refusal: too many signups) on the
// form they submitted, with a Retry-After when waiting helps, and anything
// else (a bug, a database outage) on the error page.
func (p *Pages) formError(c *gin.Context, err error, show func(templates.Page), title string) {
	if apperr.Status(apperr.CodeOf(err)) >= 500 {
		p.fail(c, err)
		return
	}
	e := apperr.As(err)
	if e.RetryAfter > 0 {
		apperr.SetRetryAfter(c.Writer.Header(), e.RetryAfter)
	}
	show(templates.Page{Title: title, Error: e.Message})
}
