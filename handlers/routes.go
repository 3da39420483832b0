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
	"github.com/sluicehq/sluice/providers"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/respcache"
	"github.com/sluicehq/sluice/sessions"
	"github.com/sluicehq/sluice/upstream"
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

	// Admission extras; New fills the zero ones with in-process defaults.
	Detector         *quota.Detector      // counts rejections toward freezes
	Freezer          Freezer              // default: Accounts
	Scorer           *quota.ValueScorer   // prices low-value prompts
	PriorityWeights  map[string]int64     // X-Sluice-Priority -> weight
	DefaultMaxTokens int64                // completion estimate without max_tokens
	InFlight         *quota.InFlight      // load signal for the auto-tuner
	Latency          *quota.LatencyWindow // load signal for the auto-tuner
	Limits           func() LimiterStatus // where bucket state lives, for admins; nil: in process
	Metrics          http.Handler         // Prometheus /metrics; nil: not served

	// Generation extras; nil ones are off.
	Upstream      Upstream        // provider key pool
	Cache         respcache.Cache // response cache
	CacheTTL      time.Duration
	Conversations sessions.Store // X-Sluice-Session histories
	SessionBudget int            // tokens of history kept in front of a request
	Providers     *providers.Service
	PoolStatus    func() []upstream.KeyStatus
}

// LimiterStatus says where the rate limiter keeps its state.
type LimiterStatus struct {
	Mode  string `json:"mode"` // local | shared | degraded
	Nodes int    `json:"expected_nodes"`
}

// withDefaults fills what a caller (typically a test) left out.
func (d Deps) withDefaults() Deps {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Detector == nil {
		d.Detector = quota.NewDetector(quota.NewMemoryWindow(d.Now))
	}
	if d.Freezer == nil {
		d.Freezer = d.Accounts
	}
	if d.Scorer == nil {
		d.Scorer = quota.NewValueScorer(quota.DefaultValueRules(), d.Now)
	}
	if d.PriorityWeights == nil {
		d.PriorityWeights = map[string]int64{"low": 1, "normal": 1, "high": 2}
	}
	if d.DefaultMaxTokens == 0 {
		d.DefaultMaxTokens = 512
	}
	if d.InFlight == nil {
		d.InFlight = &quota.InFlight{}
	}
	if d.Latency == nil {
		d.Latency = quota.NewLatencyWindow(1024, time.Minute, d.Now)
	}
	if d.CacheTTL == 0 {
		d.CacheTTL = respcache.DefaultTTL
	}
	if d.SessionBudget == 0 {
		d.SessionBudget = 4096
	}
	if d.PoolStatus == nil {
		d.PoolStatus = func() []upstream.KeyStatus { return nil }
	}
	if d.Limits == nil {
		d.Limits = func() LimiterStatus { return LimiterStatus{Mode: "local", Nodes: 1} }
	}
	return d
}

// New returns the whole HTTP handler.
func New(d Deps) http.Handler {
	d = d.withDefaults()
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

	if d.Metrics != nil {
		r.GET("/metrics", gin.WrapH(d.Metrics))
	}

	// The metered, OpenAI-compatible API. Bearer = an API token.
	a := &api{log: d.Log, dir: d.Directory, limiter: d.Limiter, detector: d.Detector, freezer: d.Freezer, scorer: d.Scorer,
		priorityWeights: d.PriorityWeights, defaultMaxTokens: d.DefaultMaxTokens,
		model: d.Model, upstream: d.Upstream, cache: d.Cache, cacheTTL: d.CacheTTL, sessions: d.Conversations, sessionBudget: d.SessionBudget,
		usage: d.Usage, maxBodyBytes: d.MaxBodyBytes, now: d.Now}
	v1 := r.Group("/v1", a.authenticateToken, measureLoad(d.InFlight, d.Latency))
	v1.POST("/chat/completions", a.chatCompletions)
	v1.GET("/models", a.admit, a.listModels)
	v1.GET("/sessions/:id", a.admit, a.getSession)
	v1.DELETE("/sessions/:id", a.admit, a.deleteSession)

	// The management API. Bearer = a session JWT from /api/auth/*.
	m := &manage{log: d.Log, store: d.Store, accounts: d.Accounts, sessions: d.Sessions, maxBodyBytes: d.MaxBodyBytes, now: d.Now, limits: d.Limits,
		providers: d.Providers, poolStatus: d.PoolStatus}
	r.POST("/api/auth/signup", m.signup)
	r.POST("/api/auth/login", m.login)
	authed := r.Group("/api", m.authenticateSession)
	authed.POST("/tokens", m.createToken)
	authed.GET("/tokens", m.listTokens)
	authed.DELETE("/tokens/:id", m.revokeToken)
	authed.GET("/usage", m.usage)
	authed.GET("/freezes", m.myFreezes)
	admin := authed.Group("/admin", m.requireAdmin)
	admin.GET("/tiers", m.listTiers)
	admin.PUT("/tiers/:name", m.updateTier)
	admin.GET("/organizations", m.listOrganizations)
	admin.PUT("/organizations/:id/tier", m.setOrganizationTier)
	admin.GET("/freezes", m.listFreezes)
	admin.DELETE("/freezes/:id", m.liftFreeze)
	admin.GET("/tuning", m.listTuning)
	admin.GET("/limiter", m.limiterState)
	admin.GET("/upstreams", m.listUpstreams)
	admin.POST("/upstreams", m.createUpstream)
	admin.DELETE("/upstreams/:id", m.deleteUpstream)

	// The browser. Bearer = the session cookie; forms are origin-checked.
	p := web.New(web.Deps{Log: d.Log, Store: d.Store, Accounts: d.Accounts, Sessions: d.Sessions,
		Providers: d.Providers, PoolStatus: d.PoolStatus, Now: d.Now,
		Limits: func() web.LimiterState {
			l := d.Limits()
			return web.LimiterState{Mode: l.Mode, Nodes: l.Nodes}
		}})
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
	adminPages.POST("/freezes/:id/lift", p.LiftFreeze)
	adminPages.GET("/upstreams", p.AdminUpstreams)
	adminPages.POST("/upstreams", p.CreateUpstream)
	adminPages.POST("/upstreams/:id/delete", p.DeleteUpstream)

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
