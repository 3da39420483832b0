package web

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/templates"
)

const (
	sessionCookie = "sluice_session"
	userKey       = "sluice.web_user"
)

// setSession signs u in with a new session in the cookie: HttpOnly so
// scripts cannot read it, SameSite=Lax so other sites cannot send it with
// their posts, and Secure whenever the browser's connection was encrypted
// (OverTLS). A session the browser already holds is ended first, so one
// planted before sign-in (session fixation) is never the one signed in,
// and signing in again leaves no second session open.
func (p *Pages) setSession(c *gin.Context, u models.User) error {
	ctx := c.Request.Context()
	if ck, err := c.Request.Cookie(sessionCookie); err == nil && ck.Value != "" {
		if err := p.sessions.End(ctx, p.store, ck.Value); err != nil {
			return err
		}
	}
	tok, expires, err := p.sessions.Start(ctx, p.store, u)
	if err != nil {
		return err
	}
	http.SetCookie(c.Writer, &http.Cookie{
		Name: sessionCookie, Value: tok, Path: "/", Expires: expires,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: OverTLS(c),
	})
	return nil
}

// endSession signs the browser out: the session is revoked on the server,
// so a copy of the cookie stops working on every node at once, then the
// cookie is cleared. When the revocation fails the cookie is kept, so
// signing out can be tried again.
func (p *Pages) endSession(c *gin.Context) error {
	if ck, err := c.Request.Cookie(sessionCookie); err == nil && ck.Value != "" {
		if err := p.sessions.End(c.Request.Context(), p.store, ck.Value); err != nil {
			return err
		}
	}
	p.clearSession(c)
	return nil
}

func (p *Pages) clearSession(c *gin.Context) {
	http.SetCookie(c.Writer, &http.Cookie{
		Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, Expires: time.Unix(0, 0),
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: OverTLS(c),
	})
}

// LoadUser puts the signed-in user, if any, in the context.
func (p *Pages) LoadUser(c *gin.Context) {
	ck, err := c.Request.Cookie(sessionCookie)
	if err != nil || ck.Value == "" {
		c.Next()
		return
	}
	u, err := p.sessions.Resume(c.Request.Context(), p.store, ck.Value)
	if err != nil {
		if apperr.CodeOf(err) != apperr.Unauthorized {
			p.fail(c, err)
			return
		}
		p.clearSession(c)
		c.Next()
		return
	}
	c.Set(userKey, u)
	c.Next()
}

// RequireUser sends anonymous visitors to the login page.
func (p *Pages) RequireUser(c *gin.Context) {
	if _, ok := userOf(c); !ok {
		c.Redirect(http.StatusSeeOther, "/login")
		c.Abort()
		return
	}
	c.Next()
}

// RequireAdmin lets only admins through.
func (p *Pages) RequireAdmin(c *gin.Context) {
	u, ok := userOf(c)
	if !ok {
		c.Redirect(http.StatusSeeOther, "/login")
		c.Abort()
		return
	}
	if !u.IsAdmin() {
		p.fail(c, apperr.New(apperr.Forbidden, "This page is for Sluice admins."))
		return
	}
	c.Next()
}

func userOf(c *gin.Context) (models.User, bool) {
	v, ok := c.Get(userKey)
	if !ok {
		return models.User{}, false
	}
	return v.(models.User), true
}

// page builds the frame of a signed-in page.
func (p *Pages) page(c *gin.Context, title string) (templates.Page, models.User, models.Organization, error) {
	u, _ := userOf(c)
	o, err := p.store.Organization(c.Request.Context(), u.OrgID)
	if err != nil {
		return templates.Page{}, u, o, err
	}
	return templates.Page{Title: title, User: &templates.UserNav{Email: u.Email, OrgName: o.Name, IsAdmin: u.IsAdmin()}}, u, o, nil
}
