package web

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/accounts"
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
func (p *Pages) setSession(c *gin.Context, m models.Member) error {
	ctx := c.Request.Context()
	if ck, err := c.Request.Cookie(sessionCookie); err == nil && ck.Value != "" {
		if err := p.sessions.End(ctx, p.store, ck.Value); err != nil {
			return err
		}
	}
	tok, expires, err := p.sessions.Start(ctx, p.store, m)
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

// userOf is the signed-in visitor acting in their session's organization.
func userOf(c *gin.Context) (models.Member, bool) {
	v, ok := c.Get(userKey)
	if !ok {
		return models.Member{}, false
	}
	return v.(models.Member), true
}

// page builds the frame of a signed-in page acting in the session's
// organization: the header's organization switcher lists the visitor's
// others. A visitor who belongs to no organization is told so.
func (p *Pages) page(c *gin.Context, title string) (templates.Page, models.Member, models.Organization, error) {
	u, _ := userOf(c)
	if err := accounts.NeedOrganization(u); err != nil {
		return templates.Page{}, u, models.Organization{}, err
	}
	ctx := c.Request.Context()
	o, err := p.store.Organization(ctx, u.OrgID)
	if err != nil {
		return templates.Page{}, u, o, err
	}
	orgs, err := p.store.UserOrganizations(ctx, u.ID)
	if err != nil {
		return templates.Page{}, u, o, err
	}
	nav := &templates.UserNav{Email: u.Email, OrgName: o.Name, Role: string(u.Role), IsAdmin: u.IsAdmin()}
	for _, uo := range orgs {
		nav.Orgs = append(nav.Orgs, templates.OrgChoice{ID: uo.ID, Name: uo.Name, Role: string(uo.Role), Current: uo.ID == u.OrgID})
	}
	return templates.Page{Title: title, User: nav}, u, o, nil
}
