-- Billing: prices, exact costs, plans, budgets, hourly rollups, invoices
-- and upgrade requests. Money columns are BIGINT picodollars (10^-12 USD);
-- prices are BIGINT microdollars per million tokens (= picodollars per
-- token). See package money.

-- Included credit replaces the token quota nothing used.
ALTER TABLE tiers DROP COLUMN monthly_token_quota;
ALTER TABLE tiers ADD COLUMN monthly_fee BIGINT NOT NULL DEFAULT 0 CHECK (monthly_fee >= 0);
ALTER TABLE tiers ADD COLUMN included_credit BIGINT NOT NULL DEFAULT 0 CHECK (included_credit >= 0);
ALTER TABLE tiers ADD COLUMN overage TEXT NOT NULL DEFAULT 'block' CHECK (overage IN ('bill', 'block'));
ALTER TABLE tiers ADD COLUMN bill_cache_hits BOOLEAN NOT NULL DEFAULT 0;
UPDATE tiers SET included_credit = 1000000000000, overage = 'block' WHERE name = 'free';
UPDATE tiers SET monthly_fee = 49000000000000, included_credit = 10000000000000, overage = 'bill' WHERE name = 'premium';

ALTER TABLE organizations ADD COLUMN time_zone TEXT NOT NULL DEFAULT 'UTC';
ALTER TABLE organizations ADD COLUMN budget_limit BIGINT CHECK (budget_limit >= 0); -- NULL: no budget
ALTER TABLE organizations ADD COLUMN budget_hard_stop BOOLEAN NOT NULL DEFAULT 1;
ALTER TABLE organizations ADD COLUMN webhook_url TEXT NOT NULL DEFAULT '';
ALTER TABLE organizations ADD COLUMN webhook_secret TEXT NOT NULL DEFAULT ''; -- sealed under SLUICE_MASTER_KEY

-- Effective-dated: the price in force at t is the latest row with
-- effective_from <= t. Rows are never updated, so history keeps its price.
CREATE TABLE model_prices (
    id                    INTEGER PRIMARY KEY AUTOINCREMENT,
    model                 TEXT NOT NULL,
    input_per_mtok        BIGINT NOT NULL CHECK (input_per_mtok >= 0),
    output_per_mtok       BIGINT NOT NULL CHECK (output_per_mtok >= 0),
    cached_input_per_mtok BIGINT NOT NULL CHECK (cached_input_per_mtok >= 0),
    effective_from        DATETIME NOT NULL,
    created_by            BIGINT REFERENCES users (id),
    UNIQUE (model, effective_from)
);

-- usage_events is append-only and nothing reads it on a hot path (pages
-- read the rollups): the request id is all it needs an index on.
DROP INDEX usage_events_org_time;
ALTER TABLE usage_events ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_events ADD COLUMN cost BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_events ADD COLUMN price_id BIGINT NOT NULL DEFAULT 0; -- 0: not billed (no price, or a free cache hit)

-- Usage per organization, token, model, price and UTC hour, maintained as
-- events land (only newly stored events count, so a replayed batch adds
-- nothing); rejected requests are counted here without a row each.
CREATE TABLE usage_hourly (
    org_id            BIGINT NOT NULL,
    hour              DATETIME NOT NULL,
    token_id          BIGINT NOT NULL,
    model             TEXT NOT NULL,
    price_id          BIGINT NOT NULL,
    requests          BIGINT NOT NULL DEFAULT 0,
    prompt_tokens     BIGINT NOT NULL DEFAULT 0,
    completion_tokens BIGINT NOT NULL DEFAULT 0,
    cached_tokens     BIGINT NOT NULL DEFAULT 0,
    cache_hits        BIGINT NOT NULL DEFAULT 0,
    cost              BIGINT NOT NULL DEFAULT 0,
    rejected_requests BIGINT NOT NULL DEFAULT 0,
    rejected_tokens   BIGINT NOT NULL DEFAULT 0,
    rejected_frozen   BIGINT NOT NULL DEFAULT 0,
    rejected_budget   BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (org_id, hour, token_id, model, price_id)
);

-- Every model ever metered, so the prices page can flag the unpriced.
CREATE TABLE metered_models (
    model TEXT PRIMARY KEY
);

-- The same per organization and calendar month (UTC), for the admin
-- overview of every organization and for seeding budgets.
CREATE TABLE usage_monthly (
    period   DATETIME NOT NULL,
    org_id   BIGINT NOT NULL,
    requests BIGINT NOT NULL DEFAULT 0,
    rejected BIGINT NOT NULL DEFAULT 0,
    tokens   BIGINT NOT NULL DEFAULT 0,
    cost     BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (period, org_id)
);

-- Budget spending when there is no Redis: reserved before a request,
-- settled after, with conditional updates.
CREATE TABLE budget_ledgers (
    org_id   BIGINT NOT NULL,
    period   DATETIME NOT NULL,
    spent    BIGINT NOT NULL DEFAULT 0,
    reserved BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (org_id, period)
);

-- One row per budget threshold crossed, so each alert is sent once.
CREATE TABLE budget_alerts (
    org_id     BIGINT NOT NULL,
    period     DATETIME NOT NULL,
    percent    INTEGER NOT NULL,
    created_at DATETIME NOT NULL,
    PRIMARY KEY (org_id, period, percent)
);

CREATE TABLE invoices (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id       BIGINT NOT NULL REFERENCES organizations (id),
    period_start DATETIME NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('draft', 'final')),
    total        BIGINT NOT NULL DEFAULT 0,
    currency     TEXT NOT NULL DEFAULT 'USD',
    created_at   DATETIME NOT NULL,
    finalized_at DATETIME,
    UNIQUE (org_id, period_start)
);

CREATE TABLE invoice_lines (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    invoice_id        BIGINT NOT NULL REFERENCES invoices (id),
    position          INTEGER NOT NULL,
    kind              TEXT NOT NULL CHECK (kind IN ('fee', 'usage', 'credit')),
    description       TEXT NOT NULL,
    model             TEXT NOT NULL DEFAULT '',
    requests          BIGINT NOT NULL DEFAULT 0,
    prompt_tokens     BIGINT NOT NULL DEFAULT 0,
    completion_tokens BIGINT NOT NULL DEFAULT 0,
    cached_tokens     BIGINT NOT NULL DEFAULT 0,
    input_per_mtok    BIGINT NOT NULL DEFAULT 0,
    output_per_mtok   BIGINT NOT NULL DEFAULT 0,
    cached_input_per_mtok BIGINT NOT NULL DEFAULT 0,
    amount            BIGINT NOT NULL
);
CREATE INDEX invoice_lines_invoice ON invoice_lines (invoice_id, position);

CREATE TABLE upgrade_requests (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id     BIGINT NOT NULL REFERENCES organizations (id),
    user_id    BIGINT NOT NULL REFERENCES users (id),
    from_tier  TEXT NOT NULL,
    to_tier    TEXT NOT NULL,
    note       TEXT NOT NULL DEFAULT '',
    status     TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'declined')),
    created_at DATETIME NOT NULL,
    decided_at DATETIME,
    decided_by BIGINT REFERENCES users (id)
);
CREATE INDEX upgrade_requests_status ON upgrade_requests (status, created_at);
CREATE UNIQUE INDEX upgrade_requests_one_pending ON upgrade_requests (org_id) WHERE status = 'pending';

CREATE INDEX audit_log_time ON audit_log (created_at);
CREATE INDEX audit_log_action ON audit_log (action, created_at);
CREATE INDEX organizations_name ON organizations (lower(name));
