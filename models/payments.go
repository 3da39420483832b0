package models

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/money"
)

// PaymentAccount is an organization's side at Stripe: its customer, the
// last applied state of its subscription, a grace period running out, and
// the owner's auto-recharge.
type PaymentAccount struct {
	OrgID              int64 `gorm:"primaryKey"`
	CustomerID         string
	SubscriptionID     string
	SubscriptionStatus string // Stripe's: active, past_due, canceled, …; "" for none
	SubscriptionTierID *int64
	// SubscriptionStateAt is the Stripe time of the last event applied to
	// the subscription; an older one arriving later is ignored.
	SubscriptionStateAt *time.Time
	// GraceEndsAt is when the organization goes back to the free tier,
	// after a failed payment or the subscription's end; nil: no grace
	// period runs.
	GraceEndsAt *time.Time
	GraceReason string
	// RechargeThreshold and RechargeAmount are the owner's auto-recharge:
	// below the threshold, the saved card is charged the amount. Both nil:
	// off.
	RechargeThreshold *money.Amount
	RechargeAmount    *money.Amount
	RechargeStartedAt *time.Time // a recharge under way
	RechargeError     string     // the last recharge's failure, shown until one succeeds
	RechargeFailedAt  *time.Time
	UpdatedAt         time.Time
}

// CheckoutSession is a Stripe Checkout session Sluice created: a completed
// session is applied only if it is one of these, for its organization and
// amount.
type CheckoutSession struct {
	SessionID   string `gorm:"primaryKey"`
	OrgID       int64
	UserID      int64
	Mode        string // payment (a top-up) or subscription
	AmountCents int64  // a top-up's
	TierID      *int64 // a subscription's
	Status      string // open | completed
	CreatedAt   time.Time
	CompletedAt *time.Time
	CreditedAt  *time.Time // when the balance was credited
}

// Checkout modes and states.
const (
	CheckoutPayment      = "payment"
	CheckoutSubscription = "subscription"
	CheckoutOpen         = "open"
	CheckoutCompleted    = "completed"
)

// PaymentEvent is one Stripe event as applied: its id is unique, so an
// event is applied once however often it is delivered.
type PaymentEvent struct {
	ID        int64
	EventID   string
	Type      string
	ObjectID  string
	OrgID     *int64
	CreatedAt time.Time // the event's own time at Stripe
	AppliedAt time.Time
	Outcome   string // what applying it did, for operators
}

// ErrEventSeen says an event was applied before: a redelivery.
var ErrEventSeen = errors.New("payment event already applied")

// PaymentAccount returns orgID's account at Stripe; an organization that
// has none yet gets an empty one.
func (s *Store) PaymentAccount(ctx context.Context, orgID int64) (PaymentAccount, error) {
	var a PaymentAccount
	err := s.db.WithContext(ctx).Where("org_id = ?", orgID).Limit(1).Find(&a).Error
	if a.OrgID == 0 {
		a.OrgID = orgID
	}
	return a, dbErr(err, "payment account")
}

// PaymentAccountByCustomer returns the account of a Stripe customer.
func (s *Store) PaymentAccountByCustomer(ctx context.Context, customerID string) (PaymentAccount, error) {
	var a PaymentAccount
	if customerID == "" {
		return a, apperr.New(apperr.NotFound, "payment account not found")
	}
	err := s.db.WithContext(ctx).Where("customer_id = ?", customerID).Take(&a).Error
	return a, dbErr(err, "payment account")
}

// SetStripeCustomer stores orgID's Stripe customer unless it has one
// already, and returns the one stored: two first Checkouts at once keep
// the same customer (they asked Stripe with the same idempotency key).
func (s *Store) SetStripeCustomer(ctx context.Context, orgID int64, customerID string) (string, error) {
	db := s.db.WithContext(ctx)
	err := db.Exec(`INSERT INTO payment_accounts (org_id, customer_id, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (org_id) DO UPDATE SET customer_id = CASE WHEN payment_accounts.customer_id = '' THEN excluded.customer_id
		ELSE payment_accounts.customer_id END`, orgID, customerID, s.now().UTC()).Error
	if err != nil {
		return "", dbErr(err, "payment account")
	}
	a, err := s.PaymentAccount(ctx, orgID)
	return a.CustomerID, err
}

// RecordCheckoutSession stores a session Sluice created, audited as the
// owner's.
func (s *Store) RecordCheckoutSession(ctx context.Context, actor Member, cs CheckoutSession) error {
	cs.OrgID, cs.UserID, cs.Status, cs.CreatedAt = actor.OrgID, actor.ID, CheckoutOpen, s.now().UTC()
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&cs).Error; err != nil {
			return dbErr(err, "checkout session")
		}
		detail := fmt.Sprintf("top-up of %d cents", cs.AmountCents)
		if cs.Mode == CheckoutSubscription {
			detail = fmt.Sprintf("subscription to tier %d", *cs.TierID)
		}
		return audit(tx, actor.OrgID, actor.ID, "payments.checkout", cs.SessionID, detail)
	})
}

// CheckoutSessionByID returns a session Sluice created.
func (s *Store) CheckoutSessionByID(ctx context.Context, id string) (CheckoutSession, error) {
	var cs CheckoutSession
	err := s.db.WithContext(ctx).Where("session_id = ?", id).Take(&cs).Error
	return cs, dbErr(err, "checkout session")
}

// SetAutoRecharge sets (or, with nil values, turns off) orgID's
// auto-recharge, audited; a new setting clears the last failure.
func (s *Store) SetAutoRecharge(ctx context.Context, actor Member, threshold, amount *money.Amount) (PaymentAccount, error) {
	detail := "off"
	if threshold != nil && amount != nil {
		detail = fmt.Sprintf("below %s, charge %s", threshold, amount)
	}
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		err := tx.Exec(`INSERT INTO payment_accounts (org_id, recharge_threshold, recharge_amount, updated_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (org_id) DO UPDATE SET recharge_threshold = excluded.recharge_threshold,
			recharge_amount = excluded.recharge_amount, recharge_error = '', recharge_failed_at = NULL, updated_at = excluded.updated_at`,
			actor.OrgID, threshold, amount, s.now().UTC()).Error
		if err != nil {
			return dbErr(err, "payment account")
		}
		return audit(tx, actor.OrgID, actor.ID, "payments.auto_recharge", fmt.Sprint(actor.OrgID), detail)
	})
	if err != nil {
		return PaymentAccount{}, err
	}
	return s.PaymentAccount(ctx, actor.OrgID)
}

// onceForEvent records ev and runs apply in the same transaction: a
// delivery that finds the event recorded changes nothing and returns
// ErrEventSeen. On Postgres a second delivery racing the first waits on
// the unique index until the first commits, then finds its row; on SQLite
// the one writer orders them. An error from apply rolls back the record
// too, so Stripe's retry applies the event again.
func (s *Store) onceForEvent(ctx context.Context, ev PaymentEvent, apply func(tx *gorm.DB) (string, error)) (string, error) {
	var outcome string
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Exec(`INSERT INTO payment_events (event_id, type, object_id, org_id, created_at, applied_at, outcome)
			VALUES (?, ?, ?, ?, ?, ?, '') ON CONFLICT (event_id) DO NOTHING`,
			ev.EventID, ev.Type, ev.ObjectID, ev.OrgID, ev.CreatedAt.UTC(), s.now().UTC())
		if res.Error != nil {
			return dbErr(res.Error, "payment event")
		}
		if res.RowsAffected == 0 {
			return ErrEventSeen
		}
		var err error
		if outcome, err = apply(tx); err != nil {
			return err
		}
		return dbErr(tx.Exec(`UPDATE payment_events SET outcome = ? WHERE event_id = ?`, outcome, ev.EventID).Error, "payment event")
	})
	return outcome, err
}

// PaymentEventByID returns an applied event, for its outcome.
func (s *Store) PaymentEventByID(ctx context.Context, eventID string) (PaymentEvent, error) {
	var e PaymentEvent
	err := s.db.WithContext(ctx).Where("event_id = ?", eventID).Take(&e).Error
	return e, dbErr(err, "payment event")
}

// RecordPaymentEvent records an event that changes nothing (a type Sluice
// does not act on, or one it refuses), so its outcome can be looked up and
// a redelivery is known as one.
func (s *Store) RecordPaymentEvent(ctx context.Context, ev PaymentEvent, outcome string) (string, error) {
	return s.onceForEvent(ctx, ev, func(*gorm.DB) (string, error) { return outcome, nil })
}

// CompleteTopUp applies a paid top-up session once: the event and the
// session's completion land together. The session must be one Sluice
// created, in payment mode, for orgID and amountCents; otherwise the event
// is recorded as refused and nothing else changes. It returns the session
// to credit, or a zero one with the refusal as the outcome.
func (s *Store) CompleteTopUp(ctx context.Context, ev PaymentEvent, sessionID string, orgID, amountCents int64) (CheckoutSession, string, error) {
	var cs CheckoutSession
	outcome, err := s.onceForEvent(ctx, ev, func(tx *gorm.DB) (string, error) {
		var found CheckoutSession
		if err := tx.Where("session_id = ?", sessionID).Limit(1).Find(&found).Error; err != nil {
			return "", dbErr(err, "checkout session")
		}
		switch {
		case found.SessionID == "":
			return "refused: a Checkout session Sluice did not create", nil
		case found.Mode != CheckoutPayment:
			return "refused: the session is not a top-up", nil
		case found.OrgID != orgID:
			return fmt.Sprintf("refused: the session is organization %d's, the event names %d", found.OrgID, orgID), nil
		case found.AmountCents != amountCents:
			return fmt.Sprintf("refused: the session was created for %d cents, Stripe reports %d", found.AmountCents, amountCents), nil
		}
		at := s.now().UTC()
		res := tx.Exec(`UPDATE checkout_sessions SET status = ?, completed_at = ? WHERE session_id = ? AND status = ?`,
			CheckoutCompleted, at, sessionID, CheckoutOpen)
		if res.Error != nil {
			return "", dbErr(res.Error, "checkout session")
		}
		if res.RowsAffected == 0 {
			// Another event (a second one for the same session) did it.
			return "refused: the session was already completed", nil
		}
		found.Status, found.CompletedAt, cs = CheckoutCompleted, &at, found
		if err := audit(tx, orgID, 0, "payments.top_up", sessionID, fmt.Sprintf("%d cents paid at Stripe (event %s)", amountCents, ev.EventID)); err != nil {
			return "", err
		}
		return fmt.Sprintf("top-up of %d cents completed", amountCents), nil
	})
	return cs, outcome, err
}

// UncreditedTopUps lists completed top-up sessions whose balance was not
// credited, completed before before: a node that stopped between
// completing a session and crediting it leaves it to the next sweep (the
// crediter is idempotent on the session, so a sweep racing the first
// attempt credits nothing twice).
func (s *Store) UncreditedTopUps(ctx context.Context, before time.Time) ([]CheckoutSession, error) {
	var out []CheckoutSession
	err := s.db.WithContext(ctx).Where("mode = ? AND status = ? AND credited_at IS NULL AND completed_at < ?",
		CheckoutPayment, CheckoutCompleted, before.UTC()).Order("completed_at").Limit(100).Find(&out).Error
	return out, dbErr(err, "checkout sessions")
}

// MarkCredited records that a completed top-up's balance was credited.
func (s *Store) MarkCredited(ctx context.Context, sessionID string) error {
	err := s.db.WithContext(ctx).Exec(`UPDATE checkout_sessions SET credited_at = ? WHERE session_id = ? AND credited_at IS NULL`,
		s.now().UTC(), sessionID).Error
	return dbErr(err, "checkout session")
}

// AuditPayment records an owner's payment action that changes nothing
// stored (opening Stripe's customer portal).
func (s *Store) AuditPayment(ctx context.Context, actor Member, action, target, detail string) error {
	return audit(s.db.WithContext(ctx), actor.OrgID, actor.ID, action, target, detail)
}

// RechargeLease is how long an auto-recharge under way holds off the next:
// its outcome arrives by webhook, usually within seconds.
const RechargeLease = time.Hour

// StartRecharge claims orgID's next auto-recharge, unless one is under way
// (within RechargeLease): a conditional update, so one node charges.
func (s *Store) StartRecharge(ctx context.Context, orgID int64, now time.Time) (bool, error) {
	res := s.db.WithContext(ctx).Exec(`UPDATE payment_accounts SET recharge_started_at = ?, updated_at = ?
		WHERE org_id = ? AND (recharge_started_at IS NULL OR recharge_started_at < ?)`,
		now.UTC(), now.UTC(), orgID, now.Add(-RechargeLease).UTC())
	return res.RowsAffected == 1, dbErr(res.Error, "payment account")
}

// FailRecharge keeps an auto-recharge's failure for the dashboard and
// frees the next attempt.
func (s *Store) FailRecharge(ctx context.Context, orgID int64, msg string, at time.Time) error {
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`UPDATE payment_accounts SET recharge_started_at = NULL, recharge_error = ?, recharge_failed_at = ?, updated_at = ?
			WHERE org_id = ?`, msg, at.UTC(), at.UTC(), orgID).Error; err != nil {
			return dbErr(err, "payment account")
		}
		return audit(tx, orgID, 0, "payments.auto_recharge_failed", fmt.Sprint(orgID), msg)
	})
	return err
}

// RecordRechargeFailure applies, once, Stripe's word that an auto-recharge
// failed.
func (s *Store) RecordRechargeFailure(ctx context.Context, ev PaymentEvent, orgID int64, msg string) (string, error) {
	return s.onceForEvent(ctx, ev, func(tx *gorm.DB) (string, error) {
		at := ev.CreatedAt.UTC()
		if err := tx.Exec(`UPDATE payment_accounts SET recharge_started_at = NULL, recharge_error = ?, recharge_failed_at = ?, updated_at = ?
			WHERE org_id = ?`, msg, at, s.now().UTC(), orgID).Error; err != nil {
			return "", dbErr(err, "payment account")
		}
		return "auto-recharge failed: " + msg, audit(tx, orgID, 0, "payments.auto_recharge_failed", ev.ObjectID, msg)
	})
}

// RecordRechargeSuccess applies, once, Stripe's word that an auto-recharge
// was paid (its credit was asked for already): the failure shown clears
// and the next recharge may run.
func (s *Store) RecordRechargeSuccess(ctx context.Context, ev PaymentEvent, orgID, cents int64) (string, error) {
	return s.onceForEvent(ctx, ev, func(tx *gorm.DB) (string, error) {
		if err := tx.Exec(`UPDATE payment_accounts SET recharge_started_at = NULL, recharge_error = '', recharge_failed_at = NULL, updated_at = ?
			WHERE org_id = ?`, s.now().UTC(), orgID).Error; err != nil {
			return "", dbErr(err, "payment account")
		}
		outcome := fmt.Sprintf("auto-recharge of %d cents credited", cents)
		return outcome, audit(tx, orgID, 0, "payments.auto_recharge", ev.ObjectID, outcome)
	})
}

// RecentTopUps lists orgID's latest top-up sessions, newest first, for its
// payments page.
func (s *Store) RecentTopUps(ctx context.Context, orgID int64, limit int) ([]CheckoutSession, error) {
	var out []CheckoutSession
	err := s.db.WithContext(ctx).Where("org_id = ? AND mode = ?", orgID, CheckoutPayment).Order("created_at DESC").Limit(limit).Find(&out).Error
	return out, dbErr(err, "checkout sessions")
}

// AutoRechargeOrgs lists the organizations with an auto-recharge on, for
// the sweep (StartRecharge keeps one from running twice).
func (s *Store) AutoRechargeOrgs(ctx context.Context) ([]int64, error) {
	var ids []int64
	err := s.db.WithContext(ctx).Model(&PaymentAccount{}).
		Where("recharge_amount IS NOT NULL AND recharge_threshold IS NOT NULL AND customer_id <> ''").
		Order("org_id").Limit(1000).Pluck("org_id", &ids).Error
	return ids, dbErr(err, "payment accounts")
}
