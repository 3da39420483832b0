-- Prepaid balances: an organization on a tier whose billing is 'prepaid'
-- spends from a balance of money it paid in advance (top-ups, redeem codes,
-- adjustments) instead of being invoiced. Money is picodollars, as
-- everywhere.
ALTER TABLE tiers ADD COLUMN billing TEXT NOT NULL DEFAULT 'invoice' CHECK (billing IN ('invoice', 'prepaid'));
-- The owner's low-balance alert: posted once when a settlement takes the
-- balance to or below it; NULL: no alert.
ALTER TABLE organizations ADD COLUMN low_balance_threshold BIGINT CHECK (low_balance_threshold >= 0);
-- A request that was debited from its organization's balance: the recorder
-- adds its cost to balance_spending in the same transaction that stores it.
ALTER TABLE usage_events ADD COLUMN prepaid BOOLEAN NOT NULL DEFAULT 0;

-- What an organization was ever credited and had taken away by hand, both
-- only ever growing (so any node may raise its copy to them in any order);
-- its balance is credited - withdrawn - the sum of balance_spending.
CREATE TABLE org_balances (
    org_id         BIGINT PRIMARY KEY REFERENCES organizations (id),
    credited       BIGINT NOT NULL DEFAULT 0 CHECK (credited >= 0),
    withdrawn      BIGINT NOT NULL DEFAULT 0 CHECK (withdrawn >= 0),
    low_alerted_at DATETIME, -- the low-balance alert went out; NULL: armed
    updated_at     DATETIME NOT NULL
);

-- Each credit or debit made by hand or by a payment, applied once per
-- (kind, reference): a payment provider's event id, a redeem code and
-- organization, an adjustment's own id.
CREATE TABLE balance_entries (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id     BIGINT NOT NULL REFERENCES organizations (id),
    kind       TEXT NOT NULL CHECK (kind IN ('topup', 'redeem', 'adjustment', 'refund')),
    reference  TEXT NOT NULL,
    amount     BIGINT NOT NULL CHECK (amount <> 0),
    note       TEXT NOT NULL DEFAULT '',
    actor_id   BIGINT REFERENCES users (id),
    created_at DATETIME NOT NULL
);
CREATE UNIQUE INDEX balance_entries_once ON balance_entries (kind, reference);
CREATE INDEX balance_entries_org ON balance_entries (org_id, created_at);

-- Spending from balances by organization and day (UTC): one row a day,
-- summed by the recorder's batches, never a row per request.
CREATE TABLE balance_spending (
    org_id BIGINT NOT NULL,
    day    DATETIME NOT NULL,
    amount BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (org_id, day)
);

-- A balance's spending and reservations when there is no Redis, as
-- budget_ledgers is a budget's: seeded from balance_spending, reserved
-- before a request (in the same transaction as its budgets), settled after.
CREATE TABLE balance_ledgers (
    org_id   BIGINT PRIMARY KEY,
    spent    BIGINT NOT NULL DEFAULT 0,
    reserved BIGINT NOT NULL DEFAULT 0
);

-- Codes an admin hands out that credit a balance; only the SHA-256 of a
-- code is kept. An organization redeems a code once.
CREATE TABLE redeem_codes (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    code_hash  TEXT NOT NULL UNIQUE,
    prefix     TEXT NOT NULL,
    amount     BIGINT NOT NULL CHECK (amount > 0),
    uses       INTEGER NOT NULL CHECK (uses >= 1),
    uses_left  INTEGER NOT NULL CHECK (uses_left >= 0),
    expires_at DATETIME,
    note       TEXT NOT NULL DEFAULT '',
    created_by BIGINT NOT NULL REFERENCES users (id),
    created_at DATETIME NOT NULL
);
