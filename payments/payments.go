// Package payments takes money through Stripe: top-ups paid in Checkout
// and credited to the prepaid balance, paid tiers as Stripe subscriptions
// with a grace period, final Sluice invoices charged as Stripe invoices,
// and the signed webhook events that drive all of it, each applied once.
//
// Nothing is trusted from the browser: a Checkout's return URL only shows
// a page; balances, tiers and invoices change when Stripe's signed event
// says so, and only for sessions and objects Sluice created.
//
// Amounts at Stripe are whole cents. A top-up asked for in dollars is
// rounded half-up to the cent once, when its Checkout session is created,
// and that amount is shown, charged and credited; invoice lines are
// already rounded half-up to the cent (billing), so each becomes the same
// number of cents at Stripe. Cents become money.Amount exactly.
package payments

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// BalanceCrediter credits an organization's prepaid balance, idempotent on
// (kind, reference): a second call with the same pair credits nothing and
// reports applied false. Top-ups are kind "topup", their reference the
// Checkout session's (or an auto-recharge's PaymentIntent's) id.
type BalanceCrediter interface {
	CreditBalance(ctx context.Context, orgID int64, amount money.Amount, kind, reference, note string) (applied bool, err error)
}

// BalanceReader reads an organization's prepaid balance, for the
// auto-recharge's sweep. It is wired where the balance is built; nil: the
// sweep does not run, and Recharge is the balance's own hook to call.
type BalanceReader interface {
	Balance(ctx context.Context, orgID int64) (money.Amount, error)
}

// OrgNotifier hears that an organization moved to another tier, so every
// node forgets what it cached of it.
type OrgNotifier interface {
	OrganizationChanged(ctx context.Context, orgID int64)
}

// Failure is a payment that did not go through, for the owners' mail.
type Failure struct {
	OrgID   int64
	Kind    string // FailedSubscription, FailedInvoice or FailedRecharge
	Message string // what happened, in words for the owner
	At      time.Time
}

// Failure kinds.
const (
	FailedSubscription = "subscription_payment_failed"
	FailedInvoice      = "invoice_payment_failed"
	FailedRecharge     = "auto_recharge_failed"
)

// FailureMailer mails an organization's owners about a failed payment. It
// is the mail hook: nil sends nothing (the dashboard shows the failure
// either way).
type FailureMailer interface {
	PaymentFailed(ctx context.Context, f Failure) error
}

// TopUpKind is the balance entry kind of a top-up.
const TopUpKind = "topup"

// Config is how payments are set up (SLUICE_STRIPE_*, SLUICE_TOPUP_*).
type Config struct {
	WebhookSecret      string
	Currency           string // lower-case ISO code of a currency with cents
	TopUpMin, TopUpMax money.Amount
}

// Deps are what a Service works with. A nil Stripe client turns payments
// off: the pages say so and every action is refused.
type Deps struct {
	Stripe  *stripe.Client
	Store   *models.Store
	Balance BalanceCrediter
	Reader  BalanceReader
	Orgs    OrgNotifier
	Mailer  FailureMailer
	Log     *slog.Logger
	Now     func() time.Time
}

// Service is payments for the API, the pages and the webhook.
type Service struct {
	sc      *stripe.Client
	store   *models.Store
	balance BalanceCrediter
	reader  BalanceReader
	orgs    OrgNotifier
	mailer  FailureMailer
	log     *slog.Logger
	now     func() time.Time
	cfg     Config
}

// New returns the payments service.
func New(cfg Config, d Deps) *Service {
	return &Service{sc: d.Stripe, store: d.Store, balance: d.Balance, reader: d.Reader, orgs: d.Orgs, mailer: d.Mailer, log: d.Log, now: d.Now, cfg: cfg}
}

// WithMailer has payment failures mailed to the owners too.
func (s *Service) WithMailer(m FailureMailer) *Service {
	s.mailer = m
	return s
}

// NewClient returns a Stripe client of its own (never stripe-go's global
// key and backends) whose API is at apiBase: api.stripe.com, or
// stripe-mock in tests. stripe-go's own logging is off: errors come back
// to the caller, which logs them without secrets.
func NewClient(secretKey, apiBase string, hc *http.Client) *stripe.Client {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	base := strings.TrimRight(apiBase, "/")
	backends := stripe.NewBackendsWithConfig(&stripe.BackendConfig{URL: stripe.String(base), HTTPClient: hc,
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}, MaxNetworkRetries: stripe.Int64(2)})
	return stripe.NewClient(secretKey, stripe.WithBackends(backends))
}

// Enabled says whether payments are configured.
func (s *Service) Enabled() bool { return s != nil && s.sc != nil }

// Currency is the currency charged, upper case for people.
func (s *Service) Currency() string { return strings.ToUpper(s.cfg.Currency) }

// TopUpBounds are the smallest and largest top-up, whole cents.
func (s *Service) TopUpBounds() (money.Amount, money.Amount) { return s.cfg.TopUpMin, s.cfg.TopUpMax }

// ToCents is an amount in whole cents at Stripe: rounded half-up to the
// cent, once.
func ToCents(a money.Amount) int64 { return a.Cents() }

// FromCents is an amount Stripe reports in cents, exactly.
func FromCents(c int64) money.Amount { return money.Amount(c) * money.Cent }
