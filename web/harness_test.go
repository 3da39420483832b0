package web_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/batches"
	"github.com/sluicehq/sluice/billing"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/handlers"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/testjobs"
	"github.com/sluicehq/sluice/internal/testsync"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/payments"
	"github.com/sluicehq/sluice/providers"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/secrets"
	"github.com/sluicehq/sluice/upstream"
	"github.com/sluicehq/sluice/web"
	"github.com/sluicehq/sluice/webhook"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode) // no route dump on stdout
	os.Exit(m.Run())
}

// epoch is the test clock's start: a fixed instant, so day and month
// boundaries on the dashboard are known.
var epoch = time.Date(2027, time.March, 15, 10, 30, 0, 0, time.UTC)

const (
	sessionTTL    = 12 * time.Hour
	adminEmail    = "admin@example.com"
	adminPassword = "admin-password"
	password      = "password123" // every signed-up test user's
	cookieName    = "sluice_session"
	webhookHost   = "hooks.example.com" // the one host budget webhooks may be posted to
	refusedOrigin = "This form was submitted from another site, so it was refused. Reload the page and try again."
	genericError  = "Something went wrong on our side. Please try again."
)

// site is the browser side of Sluice on a real database with a hand-moved
// clock: the pages of package web behind a router wired like
// handlers/routes.go wires them.
type site struct {
	t         *testing.T
	h         http.Handler
	db        *models.DB
	store     *models.Store
	clock     *clocktest.Clock
	accounts  *accounts.Service
	directory *accounts.Directory
	sessions  *accounts.Sessions
	providers *providers.Service
	aliases   *providers.Aliases
	pool      *upstream.Pool
	billing   *billing.Service
	logs      *testsync.Buffer
	deps      handlers.Deps // kept so a test can swap one part and rebuild
	admin     models.Member // the bootstrap admin, in the operators' organization
}

func newSite(t *testing.T, db *models.DB, storeOpts ...models.StoreOption) *site {
	t.Helper()
	ctx := context.Background()
	clk := clocktest.New(epoch)
	store := models.NewStore(db, append([]models.StoreOption{models.WithClock(clk.Now)}, storeOpts...)...)
	box, err := secrets.NewBox(bytes.Repeat([]byte{3}, 32))
	if err != nil {
		t.Fatal(err)
	}
	dir, err := accounts.NewDirectory(ctx, store, time.Minute, clk.Now, accounts.WithSigningSecrets(box))
	if err != nil {
		t.Fatal(err)
	}
	acc, err := accounts.NewService(store, dir, cluster.None{}, accounts.NewLoginThrottle(clk.Now), 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := acc.EnsureAdmin(ctx, adminEmail, adminPassword); err != nil {
		t.Fatal(err)
	}
	adminUser, err := store.UserByEmail(ctx, adminEmail)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := store.StartingMember(ctx, adminUser)
	if err != nil {
		t.Fatal(err)
	}
	logs := &testsync.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	pool := upstream.NewPool(upstream.PoolOptions{Now: clk.Now})
	prov := providers.New(store, box, pool, cluster.None{}, log)
	aliases := providers.NewAliases(store, cluster.None{}, log)
	if err := aliases.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	sessions := accounts.NewSessions([]byte("0123456789abcdef0123456789abcdef"), sessionTTL, clk.Now)
	// Billing as main builds it: budget webhooks may only go to the hosts
	// of webhookHost.
	bill := billing.New(billing.Deps{Store: store, Directory: dir, Bus: cluster.None{}, Prices: metering.NewPriceBook(),
		Ledger: metering.NewMemoryLedger(metering.StoreSeed(store), metering.WithFunds(metering.StoreFunds(store))), Box: box, Webhooks: webhook.NewSender(webhook.Options{Hosts: webhook.Hosts{webhookHost}, Now: clk.Now,
			// A public address for the allowed name, without asking DNS.
			Lookup: func(context.Context, string) ([]netip.Addr, error) {
				return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
			}}), Log: log, Now: clk.Now})
	s := &site{t: t, db: db, store: store, clock: clk, accounts: acc, directory: dir, sessions: sessions, providers: prov, aliases: aliases, pool: pool,
		billing: bill, logs: logs, admin: admin}
	s.deps = handlers.Deps{
		Deps: web.Deps{Store: store, Accounts: acc, Sessions: sessions, Providers: prov, Aliases: aliases, Billing: bill, PoolStatus: pool.Status, Models: pool.Models,
			Payments: paymentsOff(store, log, clk.Now), Now: clk.Now, LimiterStatus: func() quota.LimiterStatus { return quota.LimiterStatus{Mode: "local", Nodes: 1} },
			// The queue's first read migrates River's tables (testjobs
			// opens it lazily), on a SQLite that a loaded CI host under
			// -race makes take far longer than the console's 2 s: a
			// wait that bounds a failure, never a pass, so a generous one.
			QueueStatsWait: time.Minute},
		// The pages' services, and what /v1 shares with them. No test here
		// sends an API request, so the pipeline is not built.
		Directory: dir, Jobs: testjobs.Queue(t, db, dir, clk.Now), Callbacks: bill, MaxBodyBytes: 1 << 20,
		Batches: batches.New(batches.Deps{Store: store, Log: log}, batches.Config{FileRetention: 30 * 24 * time.Hour, Now: clk.Now}),
	}
	s.rebuild()
	return s
}

// paymentsOff is payments as `go run .` has them: Stripe not configured.
func paymentsOff(store *models.Store, log *slog.Logger, now func() time.Time) *payments.Service {
	return payments.New(payments.Config{Currency: "usd", TopUpMin: 5 * money.Dollar, TopUpMax: 1000 * money.Dollar},
		payments.Deps{Store: store, Log: log, Now: now})
}

// rebuild makes the handler from s.deps, after a test changed one.
func (s *site) rebuild() { s.h = s.router(s.deps) }

// router is the real router (handlers.New) over d: the same paths and
// middleware a browser meets.
func (s *site) router(d handlers.Deps) http.Handler {
	log := slog.New(slog.NewTextHandler(s.logs, nil))
	return handlers.New(log, handlers.Ops{}, d)
}

// signup creates an organization on the free tier with its owner.
func (s *site) signup(email, org string) models.Member {
	s.t.Helper()
	u, _, err := s.accounts.Signup(context.Background(), email, password, org, "192.0.2.1")
	if err != nil {
		s.t.Fatalf("signup %s: %v", email, err)
	}
	return u
}

// customerSince dates u's organization's creation, and so its first tier
// membership, back to at: an organization that has been a customer since
// then, billed for whole months (the clock cannot go back to sign it up).
func (s *site) customerSince(u models.Member, at time.Time) {
	s.t.Helper()
	for _, q := range []string{"UPDATE organizations SET created_at = ? WHERE id = ?", "UPDATE tier_memberships SET effective_from = ? WHERE org_id = ?"} {
		if err := s.db.Gorm.Exec(q, at.UTC(), u.OrgID).Error; err != nil {
			s.t.Fatal(err)
		}
	}
}

// member creates an organization whose owner is someone else and makes
// email a plain member of it (signup makes owners).
func (s *site) member(email, org string) models.Member {
	s.t.Helper()
	o, _, err := s.store.CreateOrganizationWithOwner(context.Background(), org, "free", "owner-of-"+email, "not a bcrypt hash", models.RoleMember)
	if err != nil {
		s.t.Fatalf("create %s: %v", org, err)
	}
	return testdb.AddMember(s.t, s.db, o.ID, email, "not a bcrypt hash", models.RoleMember)
}

// token issues an API token for u's organization.
func (s *site) token(u models.Member, name string) models.APIToken {
	s.t.Helper()
	tok, _, err := s.accounts.CreateToken(context.Background(), u, name, 0)
	if err != nil {
		s.t.Fatalf("create token %s: %v", name, err)
	}
	return tok
}

// freeze freezes tok from the clock's now for d.
func (s *site) freeze(tok models.APIToken, d time.Duration) models.Freeze {
	s.t.Helper()
	now := s.clock.Now()
	f, err := s.store.CreateFreeze(context.Background(), models.Freeze{TokenID: tok.ID, OrgID: tok.OrgID,
		Reason: "25 requests were rejected within one minute", WindowCount: 25, FrozenFrom: now, FrozenUntil: now.Add(d)})
	if err != nil {
		s.t.Fatal(err)
	}
	return f
}

// upstreamKey adds a provider key as an admin would.
func (s *site) upstreamKey(name, apiKey string) models.UpstreamKey {
	s.t.Helper()
	k, err := s.providers.Create(context.Background(), s.admin.User, models.UpstreamKeyInput{Name: name,
		BaseURL: "https://api.example.com/v1", APIKey: apiKey, Weight: 1})
	if err != nil {
		s.t.Fatalf("create upstream key %s: %v", name, err)
	}
	return k
}

// browser is one visitor: it keeps the session cookie between requests the
// way a browser does, dropping it when the server clears it.
type browser struct {
	s      *site
	cookie *http.Cookie
}

func (s *site) anonymous() *browser { return &browser{s: s} }

// signedIn is a browser holding a fresh session for m, acting in m's
// organization.
func (s *site) signedIn(m models.Member) *browser {
	s.t.Helper()
	tok, _, err := s.sessions.Start(context.Background(), s.store, m)
	if err != nil {
		s.t.Fatal(err)
	}
	return &browser{s: s, cookie: &http.Cookie{Name: cookieName, Value: tok}}
}

// login signs in through the login form.
func (s *site) login(email, pw string) *browser {
	s.t.Helper()
	b := s.anonymous()
	w := b.post("/login", url.Values{"email": {email}, "password": {pw}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/dashboard" || b.cookie == nil {
		s.t.Fatalf("login %s: %d %s", email, w.Code, w.Body.String())
	}
	return b
}

func (b *browser) get(target string) *response { return b.do(http.MethodGet, target, nil, nil) }

// post submits form as a same-origin browser form would.
func (b *browser) post(target string, form url.Values) *response {
	return b.do(http.MethodPost, target, form, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://example.com"})
}

// do sends one request to the site; target may be a full https:// URL to
// arrive over TLS. httptest requests have the host example.com.
func (b *browser) do(method, target string, form url.Values, header map[string]string) *response {
	b.s.t.Helper()
	var body string
	if form != nil {
		body = form.Encode()
	}
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if b.cookie != nil {
		req.AddCookie(b.cookie)
	}
	w := httptest.NewRecorder()
	b.s.h.ServeHTTP(w, req)
	r := &response{ResponseRecorder: w, t: b.s.t}
	if c := r.sessionCookie(); c != nil {
		if c.MaxAge < 0 {
			b.cookie = nil
		} else {
			b.cookie = c
		}
	}
	return r
}

// response is a recorded answer with its page parsed on demand.
type response struct {
	*httptest.ResponseRecorder
	t   *testing.T
	doc *goquery.Document
}

// page parses the body as HTML.
func (r *response) page() *goquery.Document {
	r.t.Helper()
	if r.doc == nil {
		doc, err := goquery.NewDocumentFromReader(bytes.NewReader(r.Body.Bytes()))
		if err != nil {
			r.t.Fatalf("parse page: %v", err)
		}
		r.doc = doc
	}
	return r.doc
}

// testid finds the elements with a data-testid.
func (r *response) testid(id string) *goquery.Selection {
	r.t.Helper()
	return r.page().Find(fmt.Sprintf("[data-testid=%q]", id))
}

// text is the trimmed, whitespace-collapsed text of the elements with a
// data-testid.
func (r *response) text(id string) string {
	r.t.Helper()
	return strings.Join(strings.Fields(r.testid(id).Text()), " ")
}

// texts is the text of each element with a data-testid, in page order.
func (r *response) texts(id string) []string {
	r.t.Helper()
	var out []string
	r.testid(id).Each(func(_ int, e *goquery.Selection) {
		out = append(out, strings.Join(strings.Fields(e.Text()), " "))
	})
	return out
}

// value is the value attribute of the element selector finds.
func (r *response) value(selector string) string {
	r.t.Helper()
	v, _ := r.page().Find(selector).Attr("value")
	return v
}

// sessionCookie is the session cookie the response sets, or nil.
func (r *response) sessionCookie() *http.Cookie {
	for _, c := range r.Result().Cookies() {
		if c.Name == cookieName {
			return c
		}
	}
	return nil
}

// expectPage checks a page's status and that every data-testid in ids is
// on it; on failure it shows the body, which says what went wrong.
func (r *response) expectPage(status int, ids ...string) {
	r.t.Helper()
	if r.Code != status {
		r.t.Fatalf("status = %d, want %d; body:\n%s", r.Code, status, r.Body.String())
	}
	if ct := r.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		r.t.Errorf("Content-Type = %q, want text/html", ct)
	}
	for _, id := range ids {
		if r.testid(id).Length() == 0 {
			r.t.Errorf("data-testid=%q is missing from the page", id)
		}
	}
}

// expectRedirect checks a 303 to location.
func (r *response) expectRedirect(location string) {
	r.t.Helper()
	if r.Code != http.StatusSeeOther || r.Header().Get("Location") != location {
		r.t.Fatalf("got %d to %q, want 303 to %q; body:\n%s", r.Code, r.Header().Get("Location"), location, r.Body.String())
	}
}

// expectError checks the error page: its status, shown status and message.
func (r *response) expectError(status int, message string) {
	r.t.Helper()
	r.expectPage(status, "error-page")
	if got := r.text("error-status"); got != fmt.Sprint(status) {
		r.t.Errorf("error-status = %q, want %d", got, status)
	}
	if got := r.text("error-message"); got != message {
		r.t.Errorf("error-message = %q, want %q", got, message)
	}
}

// expectFormError checks a form re-rendered with status and message.
func (r *response) expectFormError(status int, form, message string) {
	r.t.Helper()
	r.expectPage(status, form, "form-error")
	if got := r.text("form-error"); got != message {
		r.t.Errorf("form-error = %q, want %q", got, message)
	}
	if r.testid("error-page").Length() != 0 {
		r.t.Error("a form error was shown on the error page instead of the form")
	}
}

// snapshot describes the state a rejected form must not change.
func (s *site) snapshot() string {
	s.t.Helper()
	ctx := context.Background()
	var b strings.Builder
	orgs, err := s.store.Organizations(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, o := range orgs {
		toks, err := s.store.APITokens(ctx, o.ID)
		if err != nil {
			s.t.Fatal(err)
		}
		fmt.Fprintf(&b, "org %d %s tier=%s tokens=%d\n", o.ID, o.Name, o.Tier.Name, len(toks))
		for _, t := range toks {
			fmt.Fprintf(&b, "  token %d %s %s\n", t.ID, t.Name, t.Status(s.clock.Now()))
		}
	}
	tiers, err := s.store.Tiers(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, t := range tiers {
		fmt.Fprintf(&b, "tier %+v\n", t.Settings())
	}
	keys, err := s.store.UpstreamKeys(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, k := range keys {
		fmt.Fprintf(&b, "upstream %d %s\n", k.ID, k.Name)
	}
	fs, err := s.store.Freezes(ctx, 100)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, f := range fs {
		fmt.Fprintf(&b, "freeze %d lifted=%v\n", f.ID, f.LiftedAt != nil)
	}
	return b.String()
}
