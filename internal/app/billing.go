package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/billing"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/mail"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/payments"
	"github.com/sluicehq/sluice/secrets"
	"github.com/sluicehq/sluice/webhook"
)

// billingParts is a node's billing: the price book and budget ledger the request
// path prices and reserves with, the budget alerts it raises, and the
// billing service the API and pages use.
type billingParts struct {
	prices   *metering.PriceBook
	ledger   metering.Ledger
	alerts   *metering.BudgetAlerts
	billing  *billing.Service
	payments *payments.Service
}

// newBilling builds billing for the node, on the budget ledger its shared
// state chose.
func newBilling(cfg config.Config, store *models.Store, sh *shared, dir *accounts.Directory, box *secrets.Box, log *slog.Logger) *billingParts {
	ledger := sh.ledger
	m := &billingParts{prices: metering.NewPriceBook(), ledger: ledger}
	if cfg.WebhookAllowPrivate {
		log.Warn("SLUICE_WEBHOOK_ALLOW_PRIVATE=true: webhooks and callbacks may reach loopback, private and metadata addresses; for development only")
	}
	if cfg.WebhookAllowHTTP {
		log.Warn("SLUICE_WEBHOOK_ALLOW_HTTP=true: webhooks and callbacks may go over plain http; for development only")
	}
	webhooks := webhook.NewSender(webhook.Options{Hosts: webhook.ParseHosts(cfg.WebhookHosts),
		AllowPrivate: cfg.WebhookAllowPrivate, AllowHTTP: cfg.WebhookAllowHTTP, Now: time.Now})
	m.billing = billing.New(billing.Deps{Store: store, Directory: dir, Bus: sh.bus, Prices: m.prices, Ledger: ledger,
		Box: box, Webhooks: webhooks, Log: log, Now: time.Now, Limiter: sh.limiter, RedeemRate: cfg.RedeemRate,
		Payments: cfg.StripeSecretKey != ""})
	// Budget and low-balance alerts go by webhook, and with mail on to the
	// owners too (Build: WithMail).
	m.alerts = metering.NewBudgetAlerts(store, log, time.Now)
	// Stripe, when configured; without it payments are off and the pages
	// say so (the embedded default runs offline).
	var sc *stripe.Client
	if cfg.StripeSecretKey != "" {
		sc = payments.NewClient(cfg.StripeSecretKey, cfg.StripeAPIBase, nil)
	}
	// A top-up is credited through billing, which updates the ledger every
	// node reserves from as well as the store; the auto-recharge sweep
	// reads what is available there.
	m.payments = payments.New(payments.Config{WebhookSecret: cfg.StripeWebhookSecret, Currency: cfg.StripeCurrency,
		TopUpMin: cfg.TopUpMin, TopUpMax: cfg.TopUpMax}, payments.Deps{Stripe: sc, Store: store, Orgs: m.billing, Log: log, Now: time.Now,
		Balance: m.billing, Reader: availableBalance{m.billing}})
	return m
}

// availableBalance is an organization's prepaid balance less what its
// requests hold: what the auto-recharge compares with its threshold.
type availableBalance struct{ b *billing.Service }

func (r availableBalance) Balance(ctx context.Context, orgID int64) (money.Amount, error) {
	st, err := r.b.Balance(ctx, orgID)
	return st.Available, err
}

// paymentMail mails an organization's owners that a payment failed,
// through the outbox.
type paymentMail struct {
	store    *models.Store
	composer mail.Composer
	nudge    func()
}

func (p paymentMail) PaymentFailed(ctx context.Context, f payments.Failure) error {
	err := p.store.MailOwners(ctx, f.OrgID, func(owner, orgName string) models.Mail {
		m := p.composer.PaymentFailed(owner, orgName, f.Message)
		return models.Mail{Kind: m.Kind, ToAddr: m.To, Subject: m.Subject, BodyText: m.Text}
	})
	if err == nil && p.nudge != nil {
		p.nudge()
	}
	return err
}
