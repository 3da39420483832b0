// Package handlers is Sluice's HTTP surface: the metered /v1 API, the
// management /api, and — wired here, served by package web — the browser
// pages. This file lists every route.
package handlers

import (
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/upstream/local"
	"github.com/sluicehq/sluice/web"
)

// Deps are everything the HTTP layer needs, built by run.
type Deps struct {
	Log          *slog.Logger
	Store        *models.Store
	Accounts     *accounts.Service
	Sessions     *accounts.Sessions
	Directory    *accounts.Directory
	Limiter      quota.Limiter
	Model        *local.Model
	Usage        UsageRecorder
	MaxBodyBytes int64
	Now          func() time.Time
	Health       func() error // nil when healthy
}

// New returns the whole HTTP handler.
func New(d Deps) http.Handler {
	if d.Now == nil {
		d.Now = time.Now
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	// Client addresses come from the connection, not from X-Forwarded-For
	// headers anyone can send; the login throttle keys on them.
	_ = r.SetTrustedProxies(nil)
	r.HandleMethodNotAllowed = true
	r.Use(withRequestID, accessLog(d.Log), recoverer(d.Log))
	r.NoRoute(func(c *gin.Context) {
		writeErrorFor(c, d.Log, apperr.New(apperr.NotFound, "no route for %s %s", c.Request.Method, c.Request.URL.Path))
	})
	r.NoMethod(func(c *gin.Context) {
		writeErrorFor(c, d.Log, apperr.New(apperr.NotAllowed, "method %s is not supported here", c.Request.Method))
	})

	r.GET("/healthz", func(c *gin.Context) {
		if d.Health != nil {
			if err := d.Health(); err != nil {
				d.Log.Error("health check failed", "err", err)
				c.JSON(http.StatusServiceUnavailable, gin.H{"status": "unhealthy"})
				return
			}
		}
		c.JSON(http.StatusOK, gin.H{"status": "ok"})
	})

	// The metered, OpenAI-compatible API. Bearer = an API token.
	a := &api{log: d.Log, dir: d.Directory, limiter: d.Limiter, model: d.Model, usage: d.Usage, maxBodyBytes: d.MaxBodyBytes, now: d.Now}
	v1 := r.Group("/v1", a.authenticateToken, a.admit)
	v1.POST("/chat/completions", a.chatCompletions)
	v1.GET("/models", a.listModels)

	// The management API. Bearer = a session JWT from /api/auth/*.
	m := &manage{log: d.Log, store: d.Store, accounts: d.Accounts, sessions: d.Sessions, maxBodyBytes: d.MaxBodyBytes, now: d.Now}
	r.POST("/api/auth/signup", m.signup)
	r.POST("/api/auth/login", m.login)
	authed := r.Group("/api", m.authenticateSession)
	authed.POST("/tokens", m.createToken)
	authed.GET("/tokens", m.listTokens)
	authed.DELETE("/tokens/:id", m.revokeToken)
	authed.GET("/usage", m.usage)
	admin := authed.Group("/admin", m.requireAdmin)
	admin.GET("/tiers", m.listTiers)
	admin.PUT("/tiers/:name", m.updateTier)
	admin.GET("/organizations", m.listOrganizations)
	admin.PUT("/organizations/:id/tier", m.setOrganizationTier)

	// The browser. Bearer = the session cookie; forms are origin-checked.
	p := web.New(d.Log, d.Store, d.Accounts, d.Sessions, d.Now)
	r.StaticFS("/static", web.Static())
	b := r.Group("/", p.LoadUser, p.GuardOrigin)
	b.GET("/", p.Home)
	b.GET("/login", p.LoginForm)
	b.POST("/login", p.Login)
	b.GET("/signup", p.SignupForm)
	b.POST("/signup", p.Signup)
	b.POST("/logout", p.Logout)
	member := b.Group("/", p.RequireUser)
	member.GET("/dashboard", p.Dashboard)
	member.GET("/tokens", p.Tokens)
	member.POST("/tokens", p.CreateToken)
	member.POST("/tokens/:id/revoke", p.RevokeToken)
	adminPages := b.Group("/admin", p.RequireAdmin)
	adminPages.GET("/tiers", p.AdminTiers)
	adminPages.POST("/tiers/:name", p.UpdateTier)
	adminPages.POST("/organizations/:id/tier", p.SetOrganizationTier)

	return r
}

// writeErrorFor answers in the shape the path's clients expect.
func writeErrorFor(c *gin.Context, log *slog.Logger, err error) {
	switch path := c.Request.URL.Path; {
	case strings.HasPrefix(path, "/v1/") || path == "/v1":
		writeOpenAIError(c, log, err)
	case strings.HasPrefix(path, "/api/") || path == "/api":
		writeAPIError(c, log, err)
	default:
		web.RenderError(c, log, err)
	}
}
