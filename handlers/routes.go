// Package handlers is Sluice's HTTP surface: the metered /v1 API, the
// management /api, and — wired here, served by package web — the browser
// pages. This file lists every route.
package handlers

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/batches"
	"github.com/sluicehq/sluice/completion"
	"github.com/sluicehq/sluice/conversations"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/signing"
	"github.com/sluicehq/sluice/web"
)

// Ops are the operator's routes and what the request path reports.
type Ops struct {
	// Ready runs the readiness checks: each name with its error, nil when
	// it passed.
	Ready func(ctx context.Context) []Check
	// Metrics serves Prometheus /metrics on this address; nil: not here
	// (SLUICE_METRICS_ADDR serves it on its own address).
	Metrics http.Handler
	// MetricsToken, when set, is the bearer token /metrics requires.
	MetricsToken string
	// Gateway counts requests; nil counts nothing.
	Gateway *metrics.Gateway
	// TrustedProxies are the addresses whose X-Forwarded-For and
	// X-Forwarded-Proto are believed (SLUICE_TRUSTED_PROXIES); none: the
	// connection's own address and scheme are the client's.
	TrustedProxies []netip.Prefix
}

// Deps are what the HTTP surface uses, built once: the services the pages
// share with the management API and the /v1 routes, and what the /v1
// routes add.
type Deps struct {
	web.Deps // the pages' services; /api uses the same

	Directory     *accounts.Directory
	Pipeline      *completion.Pipeline
	Conversations conversations.Store // the X-Sluice-Session histories /v1/sessions reads
	Jobs          JobQueue            // /v1/jobs, batches' lines, and the jobs the pages show
	Batches       *batches.Service    // /v1/files and /v1/batches, and the files the pages offer
	Callbacks     Callbacks           // vets a job's callback URL
	TokenUse      TokenToucher        // marks a token used by a call that is not metered
	Signatures    *signing.Verifier   // checks the requests of tokens that require signing
	MaxBodyBytes  int64               // the most a body of /v1 or /api may be, and a Responses conversation
	// ResponseRetention is how long a stored Responses API response is
	// kept (SLUICE_RESPONSE_RETENTION).
	ResponseRetention time.Duration
	InFlight          *quota.InFlight      // load signal for the auto-tuner
	Latency           *quota.LatencyWindow // load signal for the auto-tuner
}

// Check is one readiness check's outcome.
type Check struct {
	Name string
	Err  error
}

// New returns the whole HTTP handler: the operator's routes, the /v1 API,
// the management /api and the browser pages.
func New(log *slog.Logger, ops Ops, d Deps) http.Handler {
	r := gin.New()
	// Client addresses come from the connection, or from X-Forwarded-For
	// only when a trusted proxy sent it: the login throttle keys on them.
	trustProxies(r, ops.TrustedProxies)
	r.HandleMethodNotAllowed = true
	r.Use(withRequestID, accessLog(log, ops.Gateway), recoverer(log), hardened(ops.TrustedProxies))
	r.NoRoute(func(c *gin.Context) {
		writeErrorFor(c, log, apperr.New(apperr.NotFound, "no route for %s %s", c.Request.Method, c.Request.URL.Path))
	})
	r.NoMethod(func(c *gin.Context) {
		writeErrorFor(c, log, apperr.New(apperr.NotAllowed, "method %s is not supported here", c.Request.Method))
	})

	// Liveness: the process serves. Readiness: it can do its work.
	r.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	r.GET("/readyz", readiness(log, ops.Ready))
	if ops.Metrics != nil {
		r.GET("/metrics", requireBearer(ops.MetricsToken), gin.WrapH(ops.Metrics))
	}

	// The metered, OpenAI-compatible API. Bearer = an API token.
	// A signed request's body is read and its signature checked before the
	// route's handlers, up to SLUICE_MAX_BODY_BYTES; an upload's handler
	// streams its body instead, after the rate limit, and checks the
	// signature before it stores the file.
	a := &api{Deps: d, log: log, streamed: streamedBodies{"POST /v1/files": uploadBody}}
	v1 := r.Group("/v1", a.authenticateToken, measureLoad(a.InFlight, a.Latency))
	v1.POST("/chat/completions", a.chatCompletions)
	// OpenAI's Responses API, through the same pipeline. Reading and
	// deleting a stored response cost one request, as a session's do.
	v1.POST("/responses", a.createResponse)
	v1.GET("/responses/:id", a.admit, a.getResponse)
	v1.DELETE("/responses/:id", a.admit, a.deleteResponse)
	// Anthropic's Messages API, through the same pipeline; counting a
	// prompt's tokens costs one request and asks no provider.
	v1.POST("/messages", a.createMessage)
	v1.POST("/messages/count_tokens", a.admit, a.countMessageTokens)
	v1.POST("/embeddings", a.embeddings)
	v1.GET("/models", a.admit, a.listModels)
	v1.GET("/sessions/:id", a.admit, a.getConversation)
	v1.DELETE("/sessions/:id", a.admit, a.deleteConversation)
	// Queueing a job costs one request of the organization's bucket (and
	// a place in its queue); the job pays its completion when it runs.
	// Polling a job costs nothing, so it never meets a 429; listing them
	// reads up to 100 jobs with their bodies and answers, and costs one
	// request.
	v1.POST("/jobs", a.createJob)
	v1.GET("/jobs", a.admit, a.listJobs)
	v1.GET("/jobs/:id", a.getJob)
	v1.DELETE("/jobs/:id", a.cancelJob)
	// OpenAI's Batch API: an upload, a download and a batch's creation
	// each cost one request; a batch's lines, like jobs, pay when they run.
	v1.POST("/files", a.admit, a.uploadFile)
	v1.GET("/files", a.listFiles)
	v1.GET("/files/:id", a.getFile)
	v1.GET("/files/:id/content", a.admit, a.fileContent)
	v1.DELETE("/files/:id", a.deleteFile)
	v1.POST("/batches", a.admit, a.createBatch)
	v1.GET("/batches", a.listBatches)
	v1.GET("/batches/:id", a.getBatch)
	v1.POST("/batches/:id/cancel", a.cancelBatch)
	ops.Gateway.KnowRoutes(v1Routes(r))

	// The management API. Bearer = a session JWT from /api/auth/*.
	m := &manage{Deps: d, log: log}
	// Stripe's events: its signature is the authentication, checked
	// against the raw body before anything else.
	r.POST("/webhooks/stripe", m.stripeWebhook)
	r.POST("/api/auth/signup", m.signup)
	r.POST("/api/auth/login", m.login)
	r.POST("/api/auth/verify-email", m.verifyEmail)
	r.POST("/api/auth/password-reset", m.requestPasswordReset)
	r.POST("/api/auth/password-reset/confirm", m.confirmPasswordReset)
	authed := r.Group("/api", m.authenticateSession)
	authed.POST("/auth/logout", m.logout)
	// The user's own account, whatever organization they act in (or none).
	authed.GET("/account", m.account)
	authed.PUT("/account/password", m.changePassword)
	authed.POST("/account/verification", m.sendVerification)
	// A user who belongs to no organization may still see that, and join one.
	authed.GET("/organizations", m.listOrganizations)
	authed.PUT("/session/organization", m.switchOrganization)
	authed.POST("/invitations/:code/accept", m.acceptInvitation)
	// The session's organization: members use it, owners manage it (the
	// services check again who may, inside their transactions).
	org := authed.Group("", m.requireOrganization)
	org.POST("/tokens", m.createToken)
	org.GET("/tokens", m.listTokens)                  // a member's own; every token for owners
	org.PATCH("/tokens/:id", m.updateToken)           // a member's own; any for owners
	org.DELETE("/tokens/:id", m.revokeToken)          // a member's own; any for owners
	org.PUT("/tokens/:id/signing", m.setTokenSigning) // a member's own; any for owners
	org.GET("/usage", m.usage)
	org.GET("/usage/series", m.usageSeries)
	org.GET("/freezes", m.myFreezes)
	org.GET("/budget", m.getBudget)
	org.PUT("/budget", m.ownersMay("set its budget"), m.putBudget)
	org.GET("/balance", m.getBalance)
	org.PUT("/balance", m.ownersMay("set its low-balance alert"), m.putBalance)
	org.POST("/balance/redeem", m.redeem) // members too: a code credits the organization
	org.PUT("/organization", m.ownersMay("change its settings"), m.putOrganization)
	org.GET("/organization/members", m.listMembers)
	org.PUT("/organization/members/:user_id", m.ownersMay("change members' roles"), m.setMemberRole)
	org.DELETE("/organization/members/:user_id", m.removeMember) // owners, or a member leaving
	org.POST("/organization/invitations", m.ownersMay("invite people"), m.createInvitation)
	org.GET("/organization/invitations", m.ownersMay("see invitations"), m.listInvitations)
	org.DELETE("/organization/invitations/:id", m.ownersMay("revoke invitations"), m.revokeInvitation)
	org.GET("/invoices", m.listInvoices)
	org.GET("/invoices/:id", m.getInvoice)
	org.GET("/invoices/:id/csv", m.invoiceCSV)
	org.GET("/upgrade-requests", m.ownersMay("see upgrade requests"), m.listUpgrades)
	org.POST("/upgrade-requests", m.ownersMay("request an upgrade"), m.requestUpgrade)
	org.GET("/payments", m.getPayments)
	org.POST("/payments/top-ups", m.ownersMay("top up its balance"), m.createTopUp)
	org.POST("/payments/subscriptions", m.ownersMay("subscribe to a tier"), m.createSubscription)
	org.POST("/payments/portal", m.ownersMay("manage its payments"), m.openPortal)
	org.PUT("/payments/auto-recharge", m.ownersMay("set its auto-recharge"), m.putAutoRecharge)
	admin := authed.Group("/admin", m.requireAdmin)
	admin.GET("/tiers", m.listTiers)
	admin.POST("/tiers", m.createTier)
	admin.PUT("/tiers/:name", m.updateTier)
	admin.DELETE("/tiers/:name", m.deleteTier)
	admin.GET("/prices", m.listPrices)
	admin.PUT("/prices/*model", m.setPrice)
	admin.GET("/upgrade-requests", m.listUpgrades)
	admin.POST("/upgrade-requests/:id/approve", m.decideUpgrade(true))
	admin.POST("/upgrade-requests/:id/decline", m.decideUpgrade(false))
	admin.GET("/organizations", m.adminOrganizations)
	admin.PUT("/organizations/:id/tier", m.setOrganizationTier)
	admin.DELETE("/organizations/:id", m.deleteOrganization)
	admin.GET("/organizations/:id/export", m.exportOrganization)
	admin.GET("/users", m.adminUsers)
	admin.POST("/users/:id/disable", m.disableUser)
	admin.POST("/users/:id/enable", m.enableUser)
	admin.POST("/organizations/:id/balance-adjustments", m.adjustBalance)
	admin.GET("/redeem-codes", m.listRedeemCodes)
	admin.POST("/redeem-codes", m.createRedeemCode)
	admin.GET("/audit", m.adminAudit)
	admin.GET("/freezes", m.listFreezes)
	admin.DELETE("/freezes/:id", m.liftFreeze)
	admin.GET("/tuning", m.listTuning)
	admin.GET("/limiter", m.limiterState)
	admin.GET("/upstreams", m.listUpstreams)
	admin.POST("/upstreams", m.createUpstream)
	admin.DELETE("/upstreams/:id", m.deleteUpstream)
	admin.POST("/users/:id/password-reset", m.adminPasswordReset)
	admin.GET("/aliases", m.listAliases)
	admin.POST("/aliases", m.createAlias)
	admin.PUT("/aliases/:name", m.updateAlias)
	admin.DELETE("/aliases/:name", m.deleteAlias)

	// The browser. Bearer = the session cookie; forms are origin-checked.
	p := web.New(log, d.Deps, d.Jobs, d.Batches)
	r.StaticFS("/static", web.Static())
	b := r.Group("/", p.LoadUser, p.GuardOrigin)
	b.GET("/", p.Home)
	b.GET("/login", p.LoginForm)
	b.POST("/login", p.Login)
	b.GET("/signup", p.SignupForm)
	b.POST("/signup", p.Signup)
	b.POST("/logout", p.Logout)
	if d.SSO != nil {
		// Single sign-on; without its settings these are 404 like any
		// unknown path.
		b.GET("/auth/oidc/start", p.SSOStart)
		b.GET("/auth/oidc/callback", p.SSOCallback)
	}
	// Links from mails (or, without mail, from an admin): each shows a
	// form, and only its POST uses the link, so a mail scanner opening
	// links uses up none.
	b.GET("/password-reset", p.PasswordResetForm)
	b.POST("/password-reset", p.RequestPasswordReset)
	b.GET("/password-reset/:token", p.PasswordResetConfirmForm)
	b.POST("/password-reset/:token", p.ConfirmPasswordReset)
	b.GET("/verify-email/:token", p.VerifyEmailForm)
	b.POST("/verify-email/:token", p.VerifyEmail)
	// An invitation's link: anyone holding it may see whom it invites.
	b.GET("/invitations/:code", p.Invitation)
	member := b.Group("/", p.RequireUser)
	member.POST("/invitations/:code/accept", p.AcceptInvitation)
	member.POST("/session/organization", p.SwitchOrganization)
	member.GET("/account", p.Account)
	member.POST("/account/password", p.ChangePassword)
	member.POST("/account/verification", p.SendVerification)
	member.GET("/organization", p.Team) // the member list for everyone in it; management for owners
	member.POST("/organization/invitations", p.Invite)
	member.POST("/organization/invitations/:id/revoke", p.RevokeInvitation)
	member.POST("/organization/members/:user_id/role", p.SetMemberRole)
	member.POST("/organization/members/:user_id/remove", p.RemoveMember) // owners, or a member leaving
	member.GET("/dashboard", p.Dashboard)
	member.GET("/tokens", p.Tokens)
	member.POST("/tokens", p.CreateToken)
	member.POST("/tokens/:id", p.UpdateToken)
	member.POST("/tokens/:id/revoke", p.RevokeToken)
	member.POST("/tokens/:id/signing", p.SetTokenSigning)
	member.GET("/invoices/:id/csv", p.InvoiceCSV)
	member.GET("/files/:id", p.DownloadFile)
	member.GET("/jobs/:id/result", p.JobResult)
	member.POST("/billing/budget", p.SetBudget)
	member.POST("/billing/time-zone", p.SetTimeZone)
	member.POST("/billing/webhook", p.SetWebhook)
	member.POST("/billing/upgrade", p.RequestUpgrade)
	member.POST("/billing/redeem", p.Redeem)             // members too: a code credits the organization
	member.POST("/billing/low-balance", p.SetLowBalance) // owners
	member.GET(web.PaymentsPath, p.Payments)             // also where Stripe Checkout returns: it only shows, never credits
	member.POST("/billing/top-up", p.TopUp)
	member.POST("/billing/subscribe", p.Subscribe)
	member.POST("/billing/portal", p.Portal)
	member.POST("/billing/auto-recharge", p.SetAutoRecharge)
	adminPages := b.Group("/admin", p.RequireAdmin)
	adminPages.GET("", p.AdminHome)
	adminPages.GET("/organizations", p.AdminOverview)
	adminPages.GET("/organizations/:id", p.AdminOrganization)
	adminPages.GET("/organizations/:id/invoices/:invoice", p.AdminInvoice)
	adminPages.GET("/organizations/:id/invoices/:invoice/csv", p.AdminInvoiceCSV)
	adminPages.POST("/organizations/:id/tier", p.SetOrganizationTier)
	adminPages.POST("/organizations/:id/delete", p.DeleteOrganization)
	adminPages.GET("/organizations/:id/export", p.AdminOrgExport)
	adminPages.GET("/users", p.AdminUsers)
	adminPages.POST("/users/:id/disable", p.DisableUser)
	adminPages.POST("/users/:id/password-reset", p.SendUserReset)
	adminPages.POST("/users/:id/enable", p.EnableUser)
	adminPages.POST("/organizations/:id/balance-adjustments", p.AdjustBalance)
	adminPages.GET("/redeem-codes", p.AdminRedeemCodes)
	adminPages.POST("/redeem-codes", p.CreateRedeemCode)
	adminPages.POST("/upgrade-requests/:id/approve", p.DecideUpgrade(true))
	adminPages.POST("/upgrade-requests/:id/decline", p.DecideUpgrade(false))
	adminPages.GET("/tiers", p.AdminTiers)
	adminPages.POST("/tiers", p.CreateTier)
	adminPages.POST("/tiers/:name", p.UpdateTier)
	adminPages.POST("/tiers/:name/delete", p.DeleteTier)
	adminPages.POST("/freezes/:id/lift", p.LiftFreeze)
	adminPages.GET("/prices", p.AdminPrices)
	adminPages.POST("/prices", p.SetPrice)
	adminPages.GET("/audit", p.AdminAudit)
	adminPages.GET("/upstreams", p.AdminUpstreams)
	adminPages.POST("/upstreams", p.CreateUpstream)
	adminPages.POST("/upstreams/:id/delete", p.DeleteUpstream)
	adminPages.GET("/aliases", p.AdminAliases)
	adminPages.POST("/aliases", p.CreateAlias)
	adminPages.POST("/aliases/:name", p.UpdateAlias)
	adminPages.POST("/aliases/:name/delete", p.DeleteAlias)

	return r
}

// v1Routes are the templates of the API's routes, which the metrics
// export at 0 before any request.
func v1Routes(r *gin.Engine) []string {
	var out []string
	for _, route := range r.Routes() {
		if strings.HasPrefix(route.Path, "/v1/") && !slices.Contains(out, route.Path) {
			out = append(out, route.Path)
		}
	}
	return out
}

// writeErrorFor answers in the shape the path's clients expect. It runs
// outside any route (no route, a panic), where the API's clock is not at
// hand: the wall clock dates the rate-limit resets.
func writeErrorFor(c *gin.Context, log *slog.Logger, err error) {
	switch path := c.Request.URL.Path; {
	case messagesPath(path):
		writeAnthropicError(c, log, err, time.Now())
	case strings.HasPrefix(path, "/v1/") || path == "/v1":
		writeOpenAIError(c, log, err)
	case strings.HasPrefix(path, "/api/") || path == "/api" || strings.HasPrefix(path, "/webhooks/"):
		writeAPIError(c, log, err)
	default:
		web.RenderError(c, log, err)
	}
}
