package web

import (
	"net/http"

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

// LoginForm shows the login page.
func (p *Pages) LoginForm(c *gin.Context) {
	render(c, http.StatusOK, templates.Login(templates.Page{Title: "Sign in"}, templates.LoginView{}))
}

// Login checks the password and starts a new session.
func (p *Pages) Login(c *gin.Context) {
	email := c.PostForm("email")
	u, err := p.accounts.Login(c.Request.Context(), email, c.PostForm("password"), c.ClientIP())
	if err == nil {
		err = p.setSession(c, u)
	}
	if err != nil {
		p.formError(c, err, func(page templates.Page) {
			render(c, apperr.Status(apperr.CodeOf(err)), templates.Login(page, templates.LoginView{Email: email}))
		}, "Sign in")
		return
	}
	c.Redirect(http.StatusSeeOther, "/dashboard")
}

// SignupForm shows the signup page.
func (p *Pages) SignupForm(c *gin.Context) {
	render(c, http.StatusOK, templates.Signup(templates.Page{Title: "Create your account"}, templates.SignupView{}))
}

// Signup creates an organization on the free tier and signs its owner in.
func (p *Pages) Signup(c *gin.Context) {
	view := templates.SignupView{Email: c.PostForm("email"), Organization: c.PostForm("organization")}
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
