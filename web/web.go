// Package web serves the browser side of Sluice: signup and login, the
// dashboard, API tokens and the admin pages, rendered with templ. Sessions
// are HS256 JWTs in an HttpOnly cookie, each backed by a row that signing
// out revokes; state-changing forms are guarded against cross-site requests
// by Go's CrossOriginProtection; pages keep to a strict CSP (no scripts).
package web

import (
	"embed"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/a-h/templ"
	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/billing"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/payments"
	"github.com/sluicehq/sluice/providers"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/templates"
	"github.com/sluicehq/sluice/upstream"
)

//go:embed static
var static embed.FS

// Static is the file system of /static/: CSS and other assets.
func Static() http.FileSystem {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embed pattern above guarantees the directory
	}
	return http.FS(sub)
}

// Pages holds the browser handlers' dependencies.
type Pages struct {
	log           *slog.Logger
	store         *models.Store
	accounts      *accounts.Service
	sessions      *accounts.Sessions
	providers     *providers.Service
	aliases       *providers.Aliases
	billing       *billing.Service
	payments      *payments.Service
	models        func() []string
	poolStatus    func() []upstream.KeyStatus
	now           func() time.Time
	origins       *http.CrossOriginProtection
	limiterStatus func() quota.LimiterStatus
	jobs          JobReader
	batches       BatchReader
	sso           *accounts.SSO // nil: single sign-on is off
	publicURL     string
	queueWait     time.Duration // how long the admin console waits for the queue's depth
}

// Deps are the services the pages use. Package handlers builds them once
// and shares them with the management API and the /v1 routes.
type Deps struct {
	Store         *models.Store
	Accounts      *accounts.Service
	Sessions      *accounts.Sessions
	Providers     *providers.Service
	Aliases       *providers.Aliases // the model aliases, kept on every node
	Billing       *billing.Service
	Payments      *payments.Service           // Stripe; its Enabled is false when not configured
	Models        func() []string             // the models provider keys serve
	PoolStatus    func() []upstream.KeyStatus // live state of provider keys
	LimiterStatus func() quota.LimiterStatus  // where the rate limiter keeps its state
	Now           func() time.Time
	SSO           *accounts.SSO // single sign-on (SLUICE_OIDC_*); nil: off, no button and no routes
	// PublicURL is where people reach Sluice (SLUICE_PUBLIC_URL), the base
	// of links shown to be passed on; "" uses the host of the request.
	PublicURL string
	// QueueStatsWait bounds the admin console's read of the job queue's
	// depth, past which its panel says the queue could not be read rather
	// than holding up the page; 0 is DefaultQueueStatsWait.
	QueueStatsWait time.Duration
}

// DefaultQueueStatsWait is how long the admin console waits for the job
// queue's depth by default: a console is still usable with a stuck queue.
const DefaultQueueStatsWait = 2 * time.Second

// New returns the browser handlers over d; the dashboard and the admin
// console also read the job queue and the Batch API.
func New(log *slog.Logger, d Deps, jobs JobReader, batches BatchReader) *Pages {
	queueWait := d.QueueStatsWait
	if queueWait <= 0 {
		queueWait = DefaultQueueStatsWait
	}
	return &Pages{log: log, store: d.Store, accounts: d.Accounts, sessions: d.Sessions, providers: d.Providers, aliases: d.Aliases,
		billing: d.Billing, payments: d.Payments, models: d.Models, poolStatus: d.PoolStatus, now: d.Now, origins: http.NewCrossOriginProtection(),
		limiterStatus: d.LimiterStatus, jobs: jobs, batches: batches, sso: d.SSO, publicURL: d.PublicURL, queueWait: queueWait}
}

// render writes a component with status.
func render(c *gin.Context, status int, comp templ.Component) {
	c.Header("Content-Type", "text/html; charset=utf-8")
	c.Header("Cache-Control", "no-store")
	c.Status(status)
	if err := comp.Render(c.Request.Context(), c.Writer); err != nil {
		c.Error(err)
	}
}

// RenderError answers a browser request with the error page, through the
// same mapping as the API (apperr.Publish). A 5xx page shows the request id,
// which the router's first middleware put in the X-Request-Id header, so a
// report can be matched to the log line.
func RenderError(c *gin.Context, log *slog.Logger, err error) {
	rid := c.Writer.Header().Get("X-Request-Id")
	r := apperr.Publish(log, apperr.Request{Method: c.Request.Method, Route: c.FullPath(), ID: rid}, err)
	r.SetRetryAfter(c.Writer.Header())
	msg := r.Message
	if r.Err.Code == apperr.Internal {
		msg = "Something went wrong on our side. Please try again."
	}
	if r.Status < 500 {
		rid = ""
	}
	page := templates.Page{Title: strconv.Itoa(r.Status) + " " + http.StatusText(r.Status)}
	if u, ok := userOf(c); ok {
		page.User = &templates.UserNav{Email: u.Email, IsAdmin: u.IsAdmin(), NoOrganization: !u.HasOrganization()}
	}
	render(c, r.Status, templates.ErrorPage(page, r.Status, msg, rid))
	c.Abort()
}

func (p *Pages) fail(c *gin.Context, err error) { RenderError(c, p.log, err) }

// GuardOrigin rejects cross-site form posts before they reach a handler.
func (p *Pages) GuardOrigin(c *gin.Context) {
	if err := p.origins.Check(c.Request); err != nil {
		p.fail(c, apperr.New(apperr.Forbidden, "This form was submitted from another site, so it was refused. Reload the page and try again."))
		return
	}
	c.Next()
}

func formatTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

func formatOptionalTime(t *time.Time, none string) string {
	if t == nil {
		return none
	}
	return formatTime(*t)
}

// pathID reads the positive id of a path like /tokens/{id}/revoke; anything
// else cannot name a row, so it answers the 404 page with notFound.
func (p *Pages) pathID(c *gin.Context, notFound string) (int64, bool) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		p.fail(c, apperr.New(apperr.NotFound, "%s", notFound))
		return 0, false
	}
	return id, true
}
