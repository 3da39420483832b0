-- Payments through Stripe: top-ups by Checkout, paid tiers as
-- subscriptions, Sluice invoices charged as Stripe invoices, and the
-- webhook events that drive them, each applied once.

-- A tier may carry a Stripe price: choosing it is a subscription. After a
-- failed payment or the subscription's end the organization keeps the
-- tier for grace_days, then goes back to free.
ALTER TABLE tiers ADD COLUMN stripe_price_id TEXT NOT NULL DEFAULT '';
ALTER TABLE tiers ADD COLUMN grace_days INTEGER NOT NULL DEFAULT 7 CHECK (grace_days BETWEEN 0 AND 365);

-- Every Stripe event applied, by its id: inserting the id and applying its
-- effect share one transaction, so a redelivery (to any node) finds the
-- row and changes nothing.
CREATE TABLE payment_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id    TEXT NOT NULL UNIQUE,
    type        TEXT NOT NULL,
    object_id   TEXT NOT NULL DEFAULT '',
    org_id      BIGINT REFERENCES organizations (id) ON DELETE SET NULL,
    created_at  DATETIME NOT NULL, -- the event's own time at Stripe
    applied_at  DATETIME NOT NULL,
    outcome     TEXT NOT NULL DEFAULT ''
);

-- An organization's side at Stripe: its customer (made at its first
-- Checkout), its subscription's last applied state, the grace period, and
-- the owner's auto-recharge.
CREATE TABLE payment_accounts (
    org_id                BIGINT PRIMARY KEY REFERENCES organizations (id) ON DELETE CASCADE,
    customer_id           TEXT NOT NULL DEFAULT '',
    subscription_id       TEXT NOT NULL DEFAULT '',
    subscription_status   TEXT NOT NULL DEFAULT '',
    subscription_tier_id  BIGINT,
    -- The Stripe time of the last state applied to the subscription: an
    -- older event arriving late is ignored.
    subscription_state_at DATETIME,
    grace_ends_at         DATETIME,
    grace_reason          TEXT NOT NULL DEFAULT '',
    recharge_threshold    BIGINT CHECK (recharge_threshold >= 0),
    recharge_amount       BIGINT CHECK (recharge_amount > 0),
    -- A recharge under way (one at a time), and the last one's failure.
    recharge_started_at   DATETIME,
    recharge_error        TEXT NOT NULL DEFAULT '',
    recharge_failed_at    DATETIME,
    updated_at            DATETIME NOT NULL
);
CREATE UNIQUE INDEX payment_accounts_customer ON payment_accounts (customer_id) WHERE customer_id <> '';
CREATE INDEX payment_accounts_grace ON payment_accounts (grace_ends_at) WHERE grace_ends_at IS NOT NULL;

-- The Checkout sessions Sluice created: a completed session is applied
-- only if it is one of these, for the organization and amount stored here.
CREATE TABLE checkout_sessions (
    session_id   TEXT PRIMARY KEY,
    org_id       BIGINT NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    user_id      BIGINT NOT NULL,
    mode         TEXT NOT NULL CHECK (mode IN ('payment', 'subscription')),
    amount_cents BIGINT NOT NULL DEFAULT 0, -- a top-up's; 0 for a subscription
    tier_id      BIGINT,                    -- a subscription's
    status       TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'completed')),
    created_at   DATETIME NOT NULL,
    completed_at DATETIME,
    -- When the balance was credited: a completed top-up not yet credited
    -- (a node stopped in between) is credited by the next sweep.
    credited_at  DATETIME
);
CREATE INDEX checkout_sessions_org ON checkout_sessions (org_id, created_at);

-- A final Sluice invoice charged through Stripe: its Stripe invoice, the
-- payment state Stripe last reported (open, paid, failed, void), its hosted
-- page, and the Stripe time of that state, so an older event is ignored.
ALTER TABLE invoices ADD COLUMN stripe_invoice_id TEXT NOT NULL DEFAULT '';
ALTER TABLE invoices ADD COLUMN payment_status TEXT NOT NULL DEFAULT '';
ALTER TABLE invoices ADD COLUMN hosted_invoice_url TEXT NOT NULL DEFAULT '';
ALTER TABLE invoices ADD COLUMN payment_state_at DATETIME;
CREATE UNIQUE INDEX invoices_stripe ON invoices (stripe_invoice_id) WHERE stripe_invoice_id <> '';
