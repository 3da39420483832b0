package handlers

import (
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/web"
)

// The answers that must not tell whether an address has an account: the
// same status and body for both.
const (
	signupMailedMessage = "check your mail: open the link we sent to finish signing up (if the address already has an account, the mail says so instead)"
	resetMailedMessage  = "if an account has this address, a link to reset its password is on its way; it works once, for an hour"
	resetNoMailMessage  = "this Sluice sends no mail: ask an admin to reset your password, and they will give you a link"
)

// requestSignup answers a signup where Sluice sends mail: 202, the same
// for a new address and a taken one (RequestSignup).
func (m *manage) requestSignup(c *gin.Context, email, password, org string) {
	if err := m.Accounts.RequestSignup(c.Request.Context(), email, password, org, c.ClientIP()); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusAccepted, gin.H{"status": "confirmation_sent", "message": signupMailedMessage})
}

// verifyEmail answers POST /api/auth/verify-email {token}: a signup's link
// makes the account and signs it in (201, as a signup without mail
// answers); a verification link verifies the address (200).
func (m *manage) verifyEmail(c *gin.Context) {
	var in struct {
		Token string `json:"token"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	conf, err := m.Accounts.ConfirmEmail(c.Request.Context(), in.Token)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	if !conf.Created {
		c.JSON(http.StatusOK, gin.H{"email": conf.Member.Email, "email_verified": true})
		return
	}
	tok, expires, err := m.Sessions.Start(c.Request.Context(), m.Store, conf.Member)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusCreated, gin.H{"token": tok, "expires_at": expires.UTC(), "user": toUserOut(conf.Member), "organization": toOrgOut(conf.Organization)})
}

// requestPasswordReset answers POST /api/auth/password-reset {email}:
// always 202 with the same body, whether or not the address has an
// account.
func (m *manage) requestPasswordReset(c *gin.Context) {
	var in struct {
		Email string `json:"email"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	if err := m.Accounts.RequestPasswordReset(c.Request.Context(), in.Email); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	msg := resetMailedMessage
	if !m.Accounts.MailOn() {
		msg = resetNoMailMessage
	}
	c.JSON(http.StatusAccepted, gin.H{"status": "accepted", "message": msg})
}

// confirmPasswordReset answers POST /api/auth/password-reset/confirm
// {token, new_password}: the password is set and every session of the
// user ends (sign in again with the new one).
func (m *manage) confirmPasswordReset(c *gin.Context) {
	var in struct {
		Token       string `json:"token"`
		NewPassword string `json:"new_password"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	if _, err := m.Accounts.ConfirmPasswordReset(c.Request.Context(), in.Token, in.NewPassword); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "password_changed", "message": "your password is changed and every session of yours has ended: sign in with the new one"})
}

// account answers GET /api/account: who the session's user is and
// whether their address is verified.
func (m *manage) account(c *gin.Context) {
	u, err := m.Store.User(c.Request.Context(), currentUser(c).ID)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"id": u.ID, "email": u.Email, "email_verified": u.EmailVerifiedAt != nil,
		"email_verified_at": u.EmailVerifiedAt, "mail_enabled": m.Accounts.MailOn()})
}

// changePassword answers PUT /api/account/password {current_password,
// new_password}: every other session of the user ends at once, on every
// node; this one goes on.
func (m *manage) changePassword(c *gin.Context) {
	var in struct {
		Current string `json:"current_password"`
		New     string `json:"new_password"`
	}
	if err := m.decode(c, &in); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	keep := m.Sessions.StoredID(bearer(c.Request))
	ended, err := m.Accounts.ChangePassword(c.Request.Context(), currentUser(c), in.Current, in.New, keep, c.ClientIP())
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "password_changed", "other_sessions_ended": ended})
}

// sendVerification answers POST /api/account/verification: 202, a link
// that verifies the user's address is on its way.
func (m *manage) sendVerification(c *gin.Context) {
	u := currentUser(c)
	if err := m.Accounts.SendVerification(c.Request.Context(), u.User); err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	c.JSON(http.StatusAccepted, gin.H{"status": "verification_sent", "message": "a link that verifies " + u.Email + " is on its way; it works once, for 24 hours"})
}

// adminPasswordReset answers POST /api/admin/users/{id}/password-reset:
// with mail, 202 and the link goes to the user; without, 201 with the
// one-time link for the admin to pass on, shown this once. Either way the
// user's earlier links stop working, and it is audited.
func (m *manage) adminPasswordReset(c *gin.Context) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		writeAPIError(c, m.log, apperr.WithReason(apperr.NotFound, "user_not_found", "no user has this id"))
		return
	}
	token, mailed, err := m.Accounts.AdminPasswordReset(c.Request.Context(), currentUser(c).User, id)
	if err != nil {
		writeAPIError(c, m.log, err)
		return
	}
	expires := m.Store.Now().Add(models.PasswordResetTTL).UTC().Truncate(time.Second)
	if mailed {
		c.JSON(http.StatusAccepted, gin.H{"user_id": id, "mailed": true, "expires_at": expires,
			"message": "a reset link is on its way to the user; it works once, for an hour"})
		return
	}
	c.JSON(http.StatusCreated, gin.H{"user_id": id, "mailed": false, "expires_at": expires,
		"reset_url": web.Link(c, m.PublicURL, "/password-reset/"+token),
		"message":   "this Sluice sends no mail: pass this link on to the user yourself; it works once, for an hour, and is shown only now"})
}
