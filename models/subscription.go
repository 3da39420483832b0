package models

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/apperr"
)

// FreeTier is the tier every organization starts on, and the one a paid
// tier's grace period ends on.
const FreeTier = "free"

// SubscriptionChange is what one Stripe event says of an organization's
// subscription, at the event's time.
type SubscriptionChange struct {
	OrgID          int64
	SubscriptionID string
	// Status is Stripe's status of the subscription (active, trialing,
	// past_due, unpaid, canceled, incomplete, incomplete_expired).
	Status string
	// PriceID is the subscription's price, which names its tier.
	PriceID string
	// PaymentFailed and Paid come from the subscription's invoices: a
	// failed payment starts the grace period, a paid one ends it.
	PaymentFailed, Paid bool
	At                  time.Time // the event's time at Stripe
}

// SubscriptionResult is what applying a change did.
type SubscriptionResult struct {
	Outcome     string
	TierChanged bool // the organization moved to another tier: its nodes must hear of it
}

// ApplySubscriptionEvent applies ev's change to the organization's
// subscription once, in one transaction with the event's record. Events
// may arrive in any order: one older than the state already applied (by
// Stripe's time) is recorded and ignored. An active subscription puts the
// organization on its price's tier and ends any grace period; a failed
// payment, a past-due or unpaid subscription, or its end starts a grace
// period of the tier's grace_days, after which EndGracePeriods moves the
// organization back to the free tier.
func (s *Store) ApplySubscriptionEvent(ctx context.Context, ev PaymentEvent, ch SubscriptionChange) (SubscriptionResult, error) {
	var res SubscriptionResult
	outcome, err := s.onceForEvent(ctx, ev, func(tx *gorm.DB) (string, error) {
		var o Organization
		if err := lockedForUpdate(tx).Where("id = ?", ch.OrgID).Take(&o).Error; err != nil {
			return "", dbErr(err, "organization")
		}
		var a PaymentAccount
		if err := tx.Where("org_id = ?", ch.OrgID).Limit(1).Find(&a).Error; err != nil {
			return "", dbErr(err, "payment account")
		}
		a.OrgID = ch.OrgID
		at := ch.At.UTC()
		if a.SubscriptionStateAt != nil && at.Before(*a.SubscriptionStateAt) {
			return fmt.Sprintf("ignored: older (%s) than the subscription state applied (%s)",
				at.Format(time.RFC3339), a.SubscriptionStateAt.UTC().Format(time.RFC3339)), nil
		}
		active := (ch.Status == "active" || ch.Status == "trialing" || ch.Paid) && !ch.PaymentFailed
		if a.SubscriptionID != "" && a.SubscriptionID != ch.SubscriptionID && !active {
			return "ignored: about subscription " + ch.SubscriptionID + ", not the organization's current " + a.SubscriptionID, nil
		}
		var outcome string
		a.SubscriptionID, a.SubscriptionStateAt = ch.SubscriptionID, &at
		switch {
		case active:
			t, err := s.subscriptionTier(tx, a, ch.PriceID)
			if err != nil {
				return "", err
			}
			if t.ID == 0 {
				return "ignored: the subscription's price " + ch.PriceID + " is on no tier", nil
			}
			if err := s.joinTier(tx, User{}, o.ID, o.TierID, t.ID); err != nil {
				return "", err
			}
			if err := tx.Model(&Organization{}).Where("id = ?", o.ID).Update("tier_id", t.ID).Error; err != nil {
				return "", dbErr(err, "organization")
			}
			res.TierChanged = o.TierID != t.ID
			a.SubscriptionStatus, a.SubscriptionTierID, a.GraceEndsAt, a.GraceReason = "active", &t.ID, nil, ""
			outcome = "subscription active: on the " + t.Name + " tier"
		case ch.PaymentFailed || ch.Status == "past_due" || ch.Status == "unpaid" ||
			ch.Status == "canceled" || ch.Status == "incomplete_expired":
			reason := "a payment failed"
			a.SubscriptionStatus = ch.Status
			switch {
			case ch.Status == "canceled" || ch.Status == "incomplete_expired":
				reason, a.SubscriptionStatus = "the subscription ended", "canceled"
			case ch.PaymentFailed && a.SubscriptionStatus == "":
				a.SubscriptionStatus = "past_due"
			}
			if a.GraceEndsAt == nil || reason == "the subscription ended" && a.GraceReason != reason {
				var t Tier
				if err := tx.Where("id = ?", o.TierID).Take(&t).Error; err != nil {
					return "", dbErr(err, "tier")
				}
				end := at.AddDate(0, 0, t.GraceDays)
				if a.GraceEndsAt != nil && a.GraceEndsAt.Before(end) {
					end = *a.GraceEndsAt // a grace period already running is never lengthened
				}
				a.GraceEndsAt, a.GraceReason = &end, reason
			}
			outcome = fmt.Sprintf("%s: on the tier until %s", reason, a.GraceEndsAt.UTC().Format(time.RFC3339))
		default:
			a.SubscriptionStatus = ch.Status
			outcome = "subscription " + ch.Status + ": nothing changes"
		}
		a.UpdatedAt = s.now().UTC()
		if err := tx.Save(&a).Error; err != nil {
			return "", dbErr(err, "payment account")
		}
		return outcome, audit(tx, o.ID, 0, "payments.subscription", ch.SubscriptionID, outcome+" (event "+ev.EventID+")")
	})
	res.Outcome = outcome
	return res, err
}

// subscriptionTier is the tier of a subscription: the one whose Stripe
// price it is, or failing that (a price since changed on the tier) the one
// it was created for. A zero tier: none.
func (s *Store) subscriptionTier(tx *gorm.DB, a PaymentAccount, priceID string) (Tier, error) {
	var t Tier
	if priceID != "" {
		if err := tx.Where("stripe_price_id = ?", priceID).Limit(1).Find(&t).Error; err != nil || t.ID != 0 {
			return t, dbErr(err, "tier")
		}
	}
	if a.SubscriptionTierID != nil {
		err := tx.Where("id = ?", *a.SubscriptionTierID).Limit(1).Find(&t).Error
		return t, dbErr(err, "tier")
	}
	return t, nil
}

// RecordSubscriptionCheckout notes, once per event, the subscription a
// completed Checkout session made and the tier it was for, so the
// subscription's own events find the organization. It refuses a session
// Sluice did not create for orgID.
func (s *Store) RecordSubscriptionCheckout(ctx context.Context, ev PaymentEvent, sessionID string, orgID int64, customerID, subscriptionID string) (CheckoutSession, string, error) {
	var cs CheckoutSession
	outcome, err := s.onceForEvent(ctx, ev, func(tx *gorm.DB) (string, error) {
		var found CheckoutSession
		if err := tx.Where("session_id = ?", sessionID).Limit(1).Find(&found).Error; err != nil {
			return "", dbErr(err, "checkout session")
		}
		switch {
		case found.SessionID == "":
			return "refused: a Checkout session Sluice did not create", nil
		case found.Mode != CheckoutSubscription || found.TierID == nil:
			return "refused: the session is not a subscription", nil
		case found.OrgID != orgID:
			return fmt.Sprintf("refused: the session is organization %d's, the event names %d", found.OrgID, orgID), nil
		}
		now := s.now().UTC()
		if err := tx.Exec(`UPDATE checkout_sessions SET status = ?, completed_at = ? WHERE session_id = ? AND status = ?`,
			CheckoutCompleted, now, sessionID, CheckoutOpen).Error; err != nil {
			return "", dbErr(err, "checkout session")
		}
		err := tx.Exec(`INSERT INTO payment_accounts (org_id, customer_id, subscription_id, subscription_tier_id, updated_at)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT (org_id) DO UPDATE SET subscription_id = excluded.subscription_id,
			subscription_tier_id = excluded.subscription_tier_id,
			customer_id = CASE WHEN payment_accounts.customer_id = '' THEN excluded.customer_id ELSE payment_accounts.customer_id END,
			updated_at = excluded.updated_at`, orgID, customerID, subscriptionID, *found.TierID, now).Error
		if err != nil {
			return "", dbErr(err, "payment account")
		}
		cs = found
		return "subscription " + subscriptionID + " recorded", audit(tx, orgID, 0, "payments.subscription", subscriptionID,
			fmt.Sprintf("Checkout completed for tier %d (event %s)", *found.TierID, ev.EventID))
	})
	return cs, outcome, err
}

// EndGracePeriods moves every organization whose grace period ended by
// now back to the free tier, audited, and returns their ids. Each move is a
// conditional update of its own, so nodes running this at once move each
// organization once.
func (s *Store) EndGracePeriods(ctx context.Context, now time.Time) ([]int64, error) {
	var due []PaymentAccount
	db := s.db.WithContext(ctx)
	if err := db.Where("grace_ends_at IS NOT NULL AND grace_ends_at <= ?", now.UTC()).Order("org_id").Limit(500).Find(&due).Error; err != nil {
		return nil, dbErr(err, "payment accounts")
	}
	var free Tier
	if len(due) > 0 {
		if err := db.Where("name = ?", FreeTier).Take(&free).Error; err != nil {
			return nil, dbErr(err, "tier "+FreeTier)
		}
	}
	var moved []int64
	for _, a := range due {
		err := db.Transaction(func(tx *gorm.DB) error {
			res := tx.Exec(`UPDATE payment_accounts SET grace_ends_at = NULL, subscription_tier_id = NULL, updated_at = ?
				WHERE org_id = ? AND grace_ends_at = ?`, now.UTC(), a.OrgID, a.GraceEndsAt.UTC())
			if res.Error != nil || res.RowsAffected == 0 {
				return dbErr(res.Error, "payment account")
			}
			var o Organization
			if err := lockedForUpdate(tx).Where("id = ?", a.OrgID).Take(&o).Error; err != nil {
				return dbErr(err, "organization")
			}
			if err := s.joinTier(tx, User{}, o.ID, o.TierID, free.ID); err != nil {
				return err
			}
			if err := tx.Model(&Organization{}).Where("id = ?", o.ID).Update("tier_id", free.ID).Error; err != nil {
				return dbErr(err, "organization")
			}
			moved = append(moved, o.ID)
			return audit(tx, o.ID, 0, "payments.grace_ended", fmt.Sprint(o.ID), a.GraceReason+"; the grace period ended: back on the free tier")
		})
		if err != nil {
			return moved, err
		}
	}
	return moved, nil
}

// InvoicePayment is what a Stripe event says of a charged invoice.
type InvoicePayment struct {
	StripeInvoiceID string
	// SluiceInvoiceID is the invoice's id in Stripe's metadata: how an
	// event finds an invoice whose Stripe id was not stored yet.
	SluiceInvoiceID int64
	CustomerID      string
	Status          string // paid | failed | void | open
	HostedURL       string
	At              time.Time
}

// Payment states of a charged invoice.
const (
	PaymentOpen   = "open"
	PaymentPaid   = "paid"
	PaymentFailed = "failed"
	PaymentVoid   = "void"
)

// ApplyInvoicePayment marks a charged Sluice invoice from a Stripe event,
// once. An event older than the state applied is ignored, and paid and
// void are final: no later failure undoes them. The invoice must be the
// customer's organization's.
func (s *Store) ApplyInvoicePayment(ctx context.Context, ev PaymentEvent, p InvoicePayment) (string, error) {
	return s.onceForEvent(ctx, ev, func(tx *gorm.DB) (string, error) {
		var inv Invoice
		q := tx.Where("stripe_invoice_id = ?", p.StripeInvoiceID)
		if err := q.Limit(1).Find(&inv).Error; err != nil {
			return "", dbErr(err, "invoice")
		}
		if inv.ID == 0 && p.SluiceInvoiceID != 0 {
			var a PaymentAccount
			if err := tx.Where("customer_id = ?", p.CustomerID).Limit(1).Find(&a).Error; err != nil {
				return "", dbErr(err, "payment account")
			}
			if err := tx.Where("id = ? AND org_id = ? AND stripe_invoice_id = ''", p.SluiceInvoiceID, a.OrgID).Limit(1).Find(&inv).Error; err != nil {
				return "", dbErr(err, "invoice")
			}
		}
		if inv.ID == 0 {
			return "ignored: not an invoice Sluice charged", nil
		}
		at := p.At.UTC()
		switch {
		case inv.PaymentStateAt != nil && at.Before(*inv.PaymentStateAt):
			return "ignored: older than the invoice's state applied", nil
		case inv.PaymentStatus == PaymentPaid || inv.PaymentStatus == PaymentVoid:
			return "ignored: the invoice is already " + inv.PaymentStatus, nil
		}
		hosted := inv.HostedInvoiceURL
		if p.HostedURL != "" {
			hosted = p.HostedURL
		}
		err := tx.Exec(`UPDATE invoices SET payment_status = ?, payment_state_at = ?, stripe_invoice_id = ?, hosted_invoice_url = ? WHERE id = ?`,
			p.Status, at, p.StripeInvoiceID, hosted, inv.ID).Error
		if err != nil {
			return "", dbErr(err, "invoice")
		}
		outcome := fmt.Sprintf("invoice %d %s", inv.ID, p.Status)
		return outcome, audit(tx, inv.OrgID, 0, "payments.invoice", fmt.Sprint(inv.ID), outcome+" (event "+ev.EventID+")")
	})
}

// InvoicesToCharge lists final invoices with something to pay that were
// not sent to Stripe yet, finalized since since (turning payments on does
// not charge months long closed), of organizations on invoiced tiers: a
// prepaid tier's organizations pay as they go, from their balance.
func (s *Store) InvoicesToCharge(ctx context.Context, since time.Time, limit int) ([]Invoice, error) {
	var out []Invoice
	err := s.db.WithContext(ctx).Where("status = 'final' AND total > 0 AND stripe_invoice_id = '' AND finalized_at >= ?", since.UTC()).
		Where("org_id IN (SELECT organizations.id FROM organizations JOIN tiers ON tiers.id = organizations.tier_id WHERE tiers.billing = ?)", BillingInvoice).
		Order("id").Limit(limit).Find(&out).Error
	return out, dbErr(err, "invoices")
}

// SetInvoiceCharged records the Stripe invoice a Sluice invoice became,
// unless a Stripe event marked it already.
func (s *Store) SetInvoiceCharged(ctx context.Context, id int64, stripeID, hostedURL string) error {
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var inv Invoice
		if err := tx.Where("id = ?", id).Take(&inv).Error; err != nil {
			return dbErr(err, "invoice")
		}
		status := inv.PaymentStatus
		if status == "" {
			status = PaymentOpen
		}
		if hostedURL == "" {
			hostedURL = inv.HostedInvoiceURL
		}
		res := tx.Exec(`UPDATE invoices SET stripe_invoice_id = ?, hosted_invoice_url = ?, payment_status = ? WHERE id = ? AND stripe_invoice_id IN ('', ?)`,
			stripeID, hostedURL, status, id, stripeID)
		if res.Error != nil {
			return dbErr(res.Error, "invoice")
		}
		if res.RowsAffected == 0 {
			return apperr.New(apperr.Conflict, "invoice %d was charged as another Stripe invoice", id)
		}
		return audit(tx, inv.OrgID, 0, "payments.invoice", fmt.Sprint(id), "charged as Stripe invoice "+stripeID)
	})
	return err
}
