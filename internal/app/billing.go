package app

import (
	"log/slog"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/billing"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/models"
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
		Box: box, Webhooks: webhooks, Log: log, Now: time.Now})
	m.alerts = metering.NewBudgetAlerts(store, log, time.Now)
	// Stripe, when configured; without it payments are off and the pages
	// say so (the embedded default runs offline).
	var sc *stripe.Client
	if cfg.StripeSecretKey != "" {
		sc = payments.NewClient(cfg.StripeSecretKey, cfg.StripeAPIBase, nil)
	}
	// The prepaid balance (the store's CreditBalance) and the owners' mail
	// are built on other branches: the balance is taken from the store as
	// soon as it has one; the mail hook is wired when mail merges. Without
	// a balance a paid top-up is recorded as completed and left for the
	// sweep to credit.
	balance, _ := any(store).(payments.BalanceCrediter)
	reader, _ := any(store).(payments.BalanceReader)
	m.payments = payments.New(payments.Config{WebhookSecret: cfg.StripeWebhookSecret, Currency: cfg.StripeCurrency,
		TopUpMin: cfg.TopUpMin, TopUpMax: cfg.TopUpMax}, payments.Deps{Stripe: sc, Store: store, Orgs: m.billing, Log: log, Now: time.Now,
		Balance: balance, Reader: reader, Mailer: nil})
	return m
}
