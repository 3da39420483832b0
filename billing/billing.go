// Package billing is the business side of metering: prices, budgets,
// usage over time and invoices, as the management API and the pages use
// them. It keeps every node's price book and budget ledgers in step with
// what admins and owners change. The request path's own parts (the price
// book, the ledger, the recorder) live in metering; this package never runs
// on the request path.
package billing

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/secrets"
	"github.com/sluicehq/sluice/webhook"
)

// webhookSealContext binds sealed webhook secrets to this use.
const webhookSealContext = "sluice budget webhook v1"

// Service is billing for the management API and the pages.
type Service struct {
	store    *models.Store
	dir      *accounts.Directory
	bus      cluster.Bus
	prices   *metering.PriceBook
	ledger   metering.Ledger
	box      *secrets.Box
	webhooks *webhook.Sender
	log      *slog.Logger
	now      func() time.Time

	redeemThrottle *redeemThrottle
	payments       bool
}

// Deps are what a Service is built from.
type Deps struct {
	Store     *models.Store
	Directory *accounts.Directory
	Bus       cluster.Bus
	Prices    *metering.PriceBook
	Ledger    metering.Ledger
	Box       *secrets.Box
	Webhooks  *webhook.Sender // signs and sends budget webhooks and job callbacks, to allowed hosts only
	Log       *slog.Logger
	Now       func() time.Time
	// Limiter holds the redeem attempts' buckets, RedeemRate of them an
	// hour per organization and per client address; nil or 0: unthrottled.
	Limiter    quota.Limiter
	RedeemRate int
	// Payments says top-ups by card (Stripe) are set up; off, the balance
	// pages say so and point to redeem codes.
	Payments bool
}

// New returns the billing service.
func New(d Deps) *Service {
	return &Service{store: d.Store, dir: d.Directory, bus: d.Bus, prices: d.Prices, ledger: d.Ledger, box: d.Box,
		webhooks: d.Webhooks, log: d.Log, now: d.Now, redeemThrottle: newRedeemThrottle(d.Limiter, d.RedeemRate), payments: d.Payments}
}

// OpenSecret opens a sealed webhook secret, for the alerts that sign with it.
func (s *Service) OpenSecret(sealed string) (string, error) {
	return s.box.Open(sealed, webhookSealContext)
}

// PriceInput is a new price as an admin gives it: decimal strings of
// dollars per million tokens. An empty cached price is the input price.
// Empty cache-creation and reasoning prices are the input and the output
// price, and stay so when those change.
type PriceInput struct {
	Input, Output, CachedInput, CacheCreation, Reasoning string
}

// SetPrice puts a new price for model in force now, on every node.
func (s *Service) SetPrice(ctx context.Context, admin models.User, model string, in PriceInput) (models.ModelPrice, error) {
	if !admin.IsAdmin() {
		return models.ModelPrice{}, apperr.New(apperr.Forbidden, "only admins may set prices")
	}
	if in.CachedInput == "" {
		in.CachedInput = in.Input
	}
	var p models.ModelPrice
	var err error
	for _, f := range []struct {
		name, value string
		dst         *money.Price
	}{{"input_per_mtok", in.Input, &p.InputPerMTok}, {"output_per_mtok", in.Output, &p.OutputPerMTok},
		{"cached_input_per_mtok", in.CachedInput, &p.CachedInputPerMTok}} {
		if *f.dst, err = money.ParsePrice(f.value); err != nil {
			return p, apperr.Field(apperr.Invalid, "invalid_price", f.name,
				f.name+" must be a decimal string of dollars per million tokens, from 0 to 1000 with at most 6 decimals, like \"0.50\"")
		}
	}
	for _, f := range []struct {
		name, value string
		dst         **money.Price
	}{{"cache_creation_per_mtok", in.CacheCreation, &p.CacheCreationPerMTok}, {"reasoning_per_mtok", in.Reasoning, &p.ReasoningPerMTok}} {
		if f.value == "" {
			continue
		}
		v, err := money.ParsePrice(f.value)
		if err != nil {
			return p, apperr.Field(apperr.Invalid, "invalid_price", f.name,
				f.name+" must be a decimal string of dollars per million tokens, from 0 to 1000 with at most 6 decimals, like \"0.50\"")
		}
		*f.dst = &v
	}
	p.Model = model
	p, err = s.store.SetModelPrice(ctx, admin, p, s.now())
	if err != nil {
		return p, err
	}
	s.publish(ctx, cluster.Event{Kind: cluster.PricesChanged})
	return p, s.prices.Load(ctx, s.store)
}

// ReloadPrices refreshes this node's price book from the store.
func (s *Service) ReloadPrices(ctx context.Context) error { return s.prices.Load(ctx, s.store) }

// PriceRow is a model's current price, or the fact that it has none.
type PriceRow struct {
	Model    string
	Current  *models.ModelPrice // nil: unpriced, so it costs nothing
	Versions int
}

// Prices lists every priced model's current price, and every model Sluice
// serves or has metered without one (flagged: never silently free).
func (s *Service) Prices(ctx context.Context, served []string) ([]PriceRow, error) {
	ps, err := s.store.ModelPrices(ctx)
	if err != nil {
		return nil, err
	}
	seen, err := s.store.MeteredModels(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now()
	rows := map[string]*PriceRow{}
	for _, m := range append(append(served, seen...), "sluice-local") {
		if m != "" && m != "*" {
			rows[m] = &PriceRow{Model: m}
		}
	}
	for i := range ps {
		p := ps[i]
		r := rows[p.Model]
		if r == nil {
			r = &PriceRow{Model: p.Model}
			rows[p.Model] = r
		}
		r.Versions++
		if !p.EffectiveFrom.After(now) && (r.Current == nil || p.EffectiveFrom.After(r.Current.EffectiveFrom)) {
			r.Current = &p
		}
	}
	out := make([]PriceRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	sortRows(out)
	return out, nil
}

// BudgetState is an organization's budget and where its spending stands
// this month.
type BudgetState struct {
	Limit       *money.Amount
	HardStop    bool
	Spent       money.Amount
	Reserved    money.Amount
	PeriodStart time.Time
	PeriodEnd   time.Time
	// Credit is the month's included credit, prorated over the tiers and
	// terms in force in it (the limit when the tier blocks overage), and
	// Overage how usage beyond it is treated, for the dashboard's gauge.
	Credit  money.Amount
	Overage string
	// CreditWithheld says the tier's credit waits for an owner's verified
	// email (models.MonthTerms.CreditWithheld): Credit is 0 until then.
	CreditWithheld bool
	TierCredit     money.Amount // the current tier's credit for a whole month
	Alerts         []int        // thresholds crossed this month
}

// Budget reads orgID's budget and spending this month: from the ledger
// when the organization's spending is tracked there, else from the monthly
// rollup.
func (s *Service) Budget(ctx context.Context, orgID int64) (BudgetState, error) {
	o, err := s.store.Organization(ctx, orgID)
	if err != nil {
		return BudgetState{}, err
	}
	period := metering.Period(s.now())
	plan, err := s.store.MonthTerms(ctx, orgID, period)
	if err != nil {
		return BudgetState{}, err
	}
	st := BudgetState{Limit: o.BudgetLimit, HardStop: o.BudgetHardStop, PeriodStart: period, PeriodEnd: metering.PeriodEnd(period),
		Credit: plan.IncludedCredit(), CreditWithheld: plan.CreditWithheld, TierCredit: o.Tier.IncludedCredit, Overage: o.Tier.Overage}
	c := accounts.Caller{Tier: &o.Tier, IncludedCredit: st.Credit, Budget: models.Budget{Limit: o.BudgetLimit, HardStop: o.BudgetHardStop}}
	if c.TracksSpending() {
		b, err := s.ledger.Balance(ctx, metering.OrgAccount(orgID), period)
		if err != nil {
			return st, err
		}
		st.Spent, st.Reserved = b.Spent, b.Reserved
	} else {
		m, err := s.store.UsageInMonth(ctx, orgID, period)
		if err != nil {
			return st, err
		}
		st.Spent = m.Cost
	}
	st.Alerts, err = s.store.BudgetAlerts(ctx, orgID, period)
	return st, err
}

// SetBudget sets or removes u's organization's monthly budget. Its owners
// may; the change applies to the next request on every node.
func (s *Service) SetBudget(ctx context.Context, u models.Member, b models.Budget) (BudgetState, error) {
	if err := accounts.NeedOwner(u, "set its budget"); err != nil {
		return BudgetState{}, err
	}
	if _, err := s.store.SetBudget(ctx, u.User, u.OrgID, b); err != nil {
		return BudgetState{}, err
	}
	s.orgChanged(ctx, u.OrgID)
	return s.Budget(ctx, u.OrgID)
}

// SetTimeZone sets the IANA zone u's organization's days are counted in.
func (s *Service) SetTimeZone(ctx context.Context, u models.Member, zone string) error {
	if err := accounts.NeedOwner(u, "set its time zone"); err != nil {
		return err
	}
	if _, err := time.LoadLocation(zone); err != nil || zone == "" || zone == "Local" {
		return apperr.Field(apperr.Invalid, "invalid_time_zone", "time_zone", fmt.Sprintf("%q is not an IANA time zone such as Europe/Berlin or Asia/Shanghai", zone))
	}
	_, err := s.store.SetTimeZone(ctx, u.User, u.OrgID, zone)
	return err
}

// SetWebhook sets where u's organization's budget alerts are posted, on a
// host the operator allows, and returns the signing secret, shown this
// once. An empty url turns alerts by webhook off.
func (s *Service) SetWebhook(ctx context.Context, u models.Member, url string) (string, error) {
	if err := accounts.NeedOwner(u, "set its webhook"); err != nil {
		return "", err
	}
	if url == "" {
		_, err := s.store.SetWebhook(ctx, u.User, u.OrgID, "", "")
		return "", err
	}
	if err := s.webhooks.Check(ctx, url); err != nil {
		return "", apperr.Field(apperr.Invalid, "webhook_not_allowed", "webhook_url", err.Error())
	}
	secret := webhook.NewSecret()
	_, err := s.store.SetWebhook(ctx, u.User, u.OrgID, url, s.box.Seal(secret, webhookSealContext))
	return secret, err
}

// CheckCallback says whether a job of orgID may call url back: a host the
// operator allows at public addresses (webhook.Sender.Check), and a
// webhook secret of the organization's to sign with.
func (s *Service) CheckCallback(ctx context.Context, orgID int64, url string) error {
	if err := s.webhooks.Check(ctx, url); err != nil {
		return apperr.Field(apperr.Invalid, "callback_not_allowed", "callback_url", err.Error())
	}
	o, err := s.store.Organization(ctx, orgID)
	if err != nil {
		return err
	}
	if o.WebhookSecret == "" {
		return apperr.Field(apperr.Invalid, "no_signing_secret", "callback_url",
			"callbacks are signed with the organization's webhook secret: set a webhook URL first (dashboard, or PUT /api/organization)")
	}
	return nil
}

// Notify posts body to url once, signed with orgID's webhook secret: one
// attempt of a webhook delivery.
func (s *Service) Notify(ctx context.Context, orgID int64, url string, body []byte) error {
	o, err := s.store.Organization(ctx, orgID)
	if err != nil {
		return err
	}
	secret, err := s.OpenSecret(o.WebhookSecret)
	if err != nil {
		return fmt.Errorf("opening the webhook secret: %w", err)
	}
	return s.webhooks.Post(ctx, url, secret, body)
}

// orgChanged makes every node forget the organization's cached tokens (so
// the next request sees its new budget) and brings its ledger balance up to
// what the store has billed (spending may have gone untracked while the
// organization had no limit), keeping the reservations in flight: a limit
// changed under load must not free what running requests hold.
func (s *Service) orgChanged(ctx context.Context, orgID int64) {
	s.dir.ForgetOrganization(orgID)
	s.publish(ctx, cluster.Event{Kind: cluster.OrgChanged, ID: orgID})
	if err := s.ledger.Resync(ctx, metering.OrgAccount(orgID), s.now()); err != nil {
		s.log.Warn("bringing a budget balance up to the store failed; the balance is kept as it was", "org_id", orgID, "err", err)
	}
}

// OrganizationChanged is orgChanged for the payments service, which moves
// organizations between tiers when Stripe says so.
func (s *Service) OrganizationChanged(ctx context.Context, orgID int64) { s.orgChanged(ctx, orgID) }

// publish tells the other nodes; a lost message is caught up by their
// periodic reload.
func (s *Service) publish(ctx context.Context, e cluster.Event) { _ = s.bus.Publish(ctx, e) }

// sortRows orders prices by model.
func sortRows(rows []PriceRow) {
	slices.SortFunc(rows, func(a, b PriceRow) int { return strings.Compare(a.Model, b.Model) })
}

// RequestUpgrade files u's organization's request to move to tier; its
// owners may.
func (s *Service) RequestUpgrade(ctx context.Context, u models.Member, tier, note string) (models.UpgradeRequest, error) {
	if err := accounts.NeedOwner(u, "request an upgrade"); err != nil {
		return models.UpgradeRequest{}, err
	}
	if tier == "" {
		return models.UpgradeRequest{}, apperr.Field(apperr.Invalid, "missing_tier", "tier", "tier is required")
	}
	return s.store.RequestUpgrade(ctx, u, tier, note)
}

// DecideUpgrade approves or declines a pending request; an approval moves
// the organization at once, on every node.
func (s *Service) DecideUpgrade(ctx context.Context, admin models.User, id int64, approve bool) (models.UpgradeRequest, error) {
	if !admin.IsAdmin() {
		return models.UpgradeRequest{}, apperr.New(apperr.Forbidden, "only admins may decide upgrade requests")
	}
	r, err := s.store.DecideUpgrade(ctx, admin, id, approve)
	if err == nil && approve {
		s.orgChanged(ctx, r.OrgID)
	}
	return r, err
}
