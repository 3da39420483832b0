package metering

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/mail"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// AlertPercents are the shares of a budget at which its organization hears
// about it, a fresh slice each call.
func AlertPercents() []int { return []int{50, 80, 100} }

// BudgetAlerts tells an organization when its spending crosses 50%, 80%
// and 100% of its monthly budget: once per threshold and month however
// many nodes see it (the store records each), with an audit entry and, if
// the organization set a webhook, a signed POST to it. The request path
// only queues a crossing; Run does the rest.
type BudgetAlerts struct {
	store *models.Store
	log   *slog.Logger
	now   func() time.Time
	queue chan crossing
	low   chan lowBalance
	mail  *mail.Composer // nil: no mail
	nudge func()
}

// WithMail has every alert (budget thresholds, a low prepaid balance) also
// mailed to the organization's owners, queued in the outbox with the
// alert's record; nudge wakes this node's outbox worker (nil: its next
// poll finds the mail).
func (a *BudgetAlerts) WithMail(c mail.Composer, nudge func()) *BudgetAlerts {
	a.mail, a.nudge = &c, nudge
	return a
}

// lowBalance is a prepaid balance that fell to or below its threshold.
type lowBalance struct {
	orgID              int64
	threshold, balance money.Amount
}

// BalanceLow notes that a settlement took orgID's prepaid balance to
// balance, at or below its threshold from above it. It never blocks, as
// Spent does not.
func (a *BudgetAlerts) BalanceLow(orgID int64, threshold, balance money.Amount) {
	select {
	case a.low <- lowBalance{orgID, threshold, balance}:
	default:
		a.log.Error("low-balance alert dropped: the alert queue is full", "org_id", orgID)
	}
}

// Deliver queues a signed POST of body to an organization's url: the
// webhook deliveries' queue, which posts, retries and limits each host.
type Deliver func(ctx context.Context, orgID int64, url string, body []byte) error

type crossing struct {
	orgID   int64
	period  time.Time
	percent int
	spent   money.Amount
	limit   money.Amount
}

// NewBudgetAlerts returns alerts recorded in store.
func NewBudgetAlerts(store *models.Store, log *slog.Logger, now func() time.Time) *BudgetAlerts {
	return &BudgetAlerts{store: store, log: log, now: now, queue: make(chan crossing, 1024), low: make(chan lowBalance, 1024)}
}

// Spent notes that a settlement moved orgID's spending from before to
// after against its budget limit, queuing each threshold crossed. It never
// blocks: a full queue drops the crossing with a log line (alerts are a few
// per organization per month, so that means Run is stuck).
func (a *BudgetAlerts) Spent(orgID int64, limit money.Amount, period time.Time, before, after money.Amount) {
	for _, pct := range Crossed(limit, before, after) {
		select {
		case a.queue <- crossing{orgID, Period(period), pct, after, limit}:
		default:
			a.log.Error("budget alert dropped: the alert queue is full", "org_id", orgID, "percent", pct)
		}
	}
}

// Crossed lists the thresholds a move from before to after crosses.
func Crossed(limit, before, after money.Amount) []int {
	if limit <= 0 || after <= before {
		return nil
	}
	var out []int
	for _, pct := range AlertPercents() {
		if m := mark(limit, pct); before < m && after >= m {
			out = append(out, pct)
		}
	}
	return out
}

// Reached is the highest threshold spent has reached, 0 for none: what the
// dashboard's banner says. It reads the numbers as they stand rather than
// the alerts already sent, so a raised budget clears the banner at once. A
// zero budget is reached from the start.
func Reached(limit, spent money.Amount) int {
	if limit <= 0 {
		return 100
	}
	reached := 0
	for _, pct := range AlertPercents() {
		if spent >= mark(limit, pct) {
			reached = pct
		}
	}
	return reached
}

// mark is pct percent of limit, without overflow: limit is at most
// MaxAmount.
func mark(limit money.Amount, pct int) money.Amount {
	return limit/100*money.Amount(pct) + limit%100*money.Amount(pct)/100
}

// Run records queued alerts and hands their webhooks to deliver until ctx
// ends.
func (a *BudgetAlerts) Run(ctx context.Context, deliver Deliver) {
	for {
		select {
		case <-ctx.Done():
			return
		case c := <-a.queue:
			a.send(ctx, c, deliver)
		case l := <-a.low:
			a.sendLow(ctx, l, deliver)
		}
	}
}

// alertBody is the webhook's JSON.
type alertBody struct {
	Type           string `json:"type"`
	OrganizationID int64  `json:"organization_id"`
	Period         string `json:"period"`
	Percent        int    `json:"percent"`
	Spent          string `json:"spent"`
	Limit          string `json:"monthly_limit"`
	Currency       string `json:"currency"`
	SentAt         string `json:"sent_at"`
}

func (a *BudgetAlerts) send(ctx context.Context, c crossing, deliver Deliver) {
	detail := fmt.Sprintf("spending reached %d%% of the monthly budget: %s of %s", c.percent, c.spent, c.limit)
	var compose func(owner, orgName string) models.Mail
	if a.mail != nil {
		compose = func(owner, orgName string) models.Mail {
			m := a.mail.BudgetAlert(owner, orgName, c.percent, c.spent.String(), c.limit.String(), c.period)
			return models.Mail{Kind: m.Kind, ToAddr: m.To, Subject: m.Subject, BodyText: m.Text}
		}
	}
	fresh, err := a.store.RecordBudgetAlert(ctx, c.orgID, c.period, c.percent, detail, compose)
	if err != nil || !fresh {
		if err != nil {
			a.log.Error("recording a budget alert failed", "org_id", c.orgID, "percent", c.percent, "err", err)
		}
		return
	}
	if a.nudge != nil {
		a.nudge()
	}
	o, err := a.store.Organization(ctx, c.orgID)
	if err != nil || o.WebhookURL == "" {
		return
	}
	body, _ := json.Marshal(alertBody{Type: "budget.threshold", OrganizationID: c.orgID, Period: c.period.Format("2006-01"),
		Percent: c.percent, Spent: c.spent.String(), Limit: c.limit.String(), Currency: "USD", SentAt: a.now().UTC().Format(time.RFC3339)})
	if err := deliver(ctx, c.orgID, o.WebhookURL, body); err != nil {
		a.log.Error("queueing a budget alert's webhook failed", "org_id", c.orgID, "percent", c.percent, "err", err)
	}
}

// lowBody is the low-balance webhook's JSON.
type lowBody struct {
	Type           string `json:"type"`
	OrganizationID int64  `json:"organization_id"`
	Balance        string `json:"balance"`
	Threshold      string `json:"threshold"`
	Currency       string `json:"currency"`
	SentAt         string `json:"sent_at"`
}

// sendLow records a low-balance alert, once per fall however many nodes
// see it, then posts the webhook and mails the owners.
func (a *BudgetAlerts) sendLow(ctx context.Context, l lowBalance, deliver Deliver) {
	detail := fmt.Sprintf("the prepaid balance fell to %s, at or below the alert at %s", l.balance, l.threshold)
	var compose func(owner, orgName string) models.Mail
	if a.mail != nil {
		compose = func(owner, orgName string) models.Mail {
			m := a.mail.LowBalance(owner, orgName, l.balance.String(), l.threshold.String())
			return models.Mail{Kind: m.Kind, ToAddr: m.To, Subject: m.Subject, BodyText: m.Text}
		}
	}
	fresh, err := a.store.RecordLowBalanceAlert(ctx, l.orgID, detail, compose)
	if err != nil || !fresh {
		if err != nil {
			a.log.Error("recording a low-balance alert failed", "org_id", l.orgID, "err", err)
		}
		return
	}
	if a.nudge != nil {
		a.nudge()
	}
	o, err := a.store.Organization(ctx, l.orgID)
	if err != nil || o.WebhookURL == "" {
		return
	}
	body, _ := json.Marshal(lowBody{Type: "balance.low", OrganizationID: l.orgID, Balance: l.balance.String(),
		Threshold: l.threshold.String(), Currency: "USD", SentAt: a.now().UTC().Format(time.RFC3339)})
	if err := deliver(ctx, l.orgID, o.WebhookURL, body); err != nil {
		a.log.Error("queueing a low-balance alert's webhook failed", "org_id", l.orgID, "err", err)
	}
}
