package web

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/templates"
)

// accountFlashes are the fixed outcomes a redirect to the account page may
// name with ?done=.
var accountFlashes = map[string]string{
	"password":     "Password changed. Every other session of yours has ended; this one stays signed in.",
	"verification": "A verification link is on its way. It works once, for 24 hours.",
	"verified":     "Your email address is verified.",
}

// Account shows the user's address, whether it is verified, and the
// password form. A user in no organization has one too.
func (p *Pages) Account(c *gin.Context) {
	p.showAccount(c, http.StatusOK, accountFlashes[c.Query("done")], "")
}

func (p *Pages) showAccount(c *gin.Context, status int, flash, passwordErr string) {
	u, _ := userOf(c)
	page := templates.Page{Title: "Your account", User: &templates.UserNav{Email: u.Email, IsAdmin: u.IsAdmin(), NoOrganization: !u.HasOrganization()}}
	if u.HasOrganization() {
		var err error
		if page, _, _, err = p.page(c, "Your account"); err != nil {
			p.fail(c, err)
			return
		}
	}
	page.Flash = flash
	fresh, err := p.store.User(c.Request.Context(), u.ID)
	if err != nil {
		p.fail(c, err)
		return
	}
	v := templates.AccountView{Email: fresh.Email, Verified: fresh.EmailVerifiedAt != nil, MailOn: p.accounts.MailOn(), PasswordError: passwordErr}
	if fresh.EmailVerifiedAt != nil {
		v.VerifiedAt = formatTime(*fresh.EmailVerifiedAt)
	}
	render(c, status, templates.Account(page, v))
}

// ChangePassword changes the signed-in user's password; their other
// sessions end, this one goes on.
func (p *Pages) ChangePassword(c *gin.Context) {
	u, _ := userOf(c)
	keep := ""
	if ck, err := c.Request.Cookie(sessionCookie); err == nil {
		keep = p.sessions.StoredID(ck.Value)
	}
	_, err := p.accounts.ChangePassword(c.Request.Context(), u, c.PostForm("current_password"), c.PostForm("new_password"), keep, c.ClientIP())
	if err != nil {
		if apperr.Status(apperr.CodeOf(err)) >= 500 {
			p.fail(c, err)
			return
		}
		e := apperr.As(err)
		if e.RetryAfter > 0 {
			apperr.SetRetryAfter(c.Writer.Header(), e.RetryAfter)
		}
		p.showAccount(c, apperr.Status(e.Code), "", e.Message)
		return
	}
	c.Redirect(http.StatusSeeOther, "/account?done=password")
}

// SendVerification mails the signed-in user a verification link.
func (p *Pages) SendVerification(c *gin.Context) {
	u, _ := userOf(c)
	if err := p.accounts.SendVerification(c.Request.Context(), u.User); err != nil {
		p.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, "/account?done=verification")
}

// PasswordResetForm asks for the address to mail a reset link to, or,
// without mail, says an admin resets passwords.
func (p *Pages) PasswordResetForm(c *gin.Context) {
	render(c, http.StatusOK, templates.PasswordResetRequest(p.anonPage(c, "Reset your password"), templates.ResetRequestView{MailOn: p.accounts.MailOn()}))
}

// resetSentMessage is the answer to every reset request, whether or not
// the address has an account.
const resetSentMessage = "If an account has this address, a link to reset its password is on its way. It works once, for an hour."

// RequestPasswordReset mails a reset link and says so in the same words
// whether or not the address has an account.
func (p *Pages) RequestPasswordReset(c *gin.Context) {
	v := templates.ResetRequestView{Email: strings.TrimSpace(c.PostForm("email")), MailOn: p.accounts.MailOn()}
	if err := p.accounts.RequestPasswordReset(c.Request.Context(), v.Email); err != nil {
		p.formError(c, err, func(page templates.Page) {
			render(c, apperr.Status(apperr.CodeOf(err)), templates.PasswordResetRequest(page, v))
		}, "Reset your password")
		return
	}
	v.Sent, v.Message = v.MailOn, resetSentMessage
	render(c, http.StatusAccepted, templates.PasswordResetRequest(p.anonPage(c, "Reset your password"), v))
}

// PasswordResetConfirmForm is where a reset link leads: a form for the
// new password. The link is used only when the form is sent.
func (p *Pages) PasswordResetConfirmForm(c *gin.Context) {
	token := c.Param("token")
	if !models.LinkTokenShaped(token) {
		p.fail(c, apperr.New(apperr.NotFound, "This password reset link is not valid: check that it was copied whole, or ask for a new one."))
		return
	}
	render(c, http.StatusOK, templates.PasswordResetConfirm(p.anonPage(c, "Choose a new password"), templates.ResetConfirmView{Token: token}))
}

// ConfirmPasswordReset sets the new password with the link; every session
// of the user ends, this browser's too, and they sign in again.
func (p *Pages) ConfirmPasswordReset(c *gin.Context) {
	token := c.Param("token")
	_, err := p.accounts.ConfirmPasswordReset(c.Request.Context(), token, c.PostForm("new_password"))
	if err != nil {
		if e := apperr.As(err); e.Code == apperr.Unprocessable && models.LinkTokenShaped(token) {
			page := p.anonPage(c, "Choose a new password")
			page.Error = e.Message
			render(c, http.StatusUnprocessableEntity, templates.PasswordResetConfirm(page, templates.ResetConfirmView{Token: token}))
			return
		}
		p.fail(c, err)
		return
	}
	p.clearSession(c)
	render(c, http.StatusOK, templates.Notice(templates.Page{Title: "Password changed"}, templates.NoticeView{Heading: "Password changed",
		Message: "Your password is changed and every session of yours has ended. Sign in with the new one.", LinkURL: "/login", LinkText: "Sign in"}))
}

// VerifyEmailForm is where a confirmation link leads: a button that
// confirms the address.
func (p *Pages) VerifyEmailForm(c *gin.Context) {
	token := c.Param("token")
	if !models.LinkTokenShaped(token) {
		p.fail(c, apperr.New(apperr.NotFound, "This email confirmation link is not valid: check that it was copied whole, or ask for a new one."))
		return
	}
	render(c, http.StatusOK, templates.VerifyEmail(p.anonPage(c, "Confirm your email address"), templates.VerifyView{Token: token}))
}

// VerifyEmail uses a confirmation link: a signup's makes the account and
// signs it in; a verification's verifies the address.
func (p *Pages) VerifyEmail(c *gin.Context) {
	conf, err := p.accounts.ConfirmEmail(c.Request.Context(), c.Param("token"))
	if err != nil {
		p.fail(c, err)
		return
	}
	if conf.Created {
		if err := p.setSession(c, conf.Member); err != nil {
			p.fail(c, err)
			return
		}
		c.Redirect(http.StatusSeeOther, "/dashboard")
		return
	}
	if u, ok := userOf(c); ok && u.ID == conf.Member.ID {
		c.Redirect(http.StatusSeeOther, "/account?done=verified")
		return
	}
	render(c, http.StatusOK, templates.Notice(p.anonPage(c, "Address verified"), templates.NoticeView{Heading: "Address verified",
		Message: conf.Member.Email + " is verified.", LinkURL: "/login", LinkText: "Sign in"}))
}

// anonPage is the frame of a page anyone may open: the header shows the
// visitor signed in, if they are.
func (p *Pages) anonPage(c *gin.Context, title string) templates.Page {
	page := templates.Page{Title: title}
	if u, ok := userOf(c); ok {
		page.User = &templates.UserNav{Email: u.Email, IsAdmin: u.IsAdmin()}
	}
	return page
}
