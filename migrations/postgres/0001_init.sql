-- Foundation schema: tiers, tenants, users, API tokens, usage, audit, settings.

CREATE TABLE tiers (
    id                BIGSERIAL PRIMARY KEY,
    name              TEXT NOT NULL UNIQUE,
    capacity          BIGINT NOT NULL CHECK (capacity > 0),
    refill_per_sec    DOUBLE PRECISION NOT NULL CHECK (refill_per_sec > 0),
    tokens_per_minute BIGINT NOT NULL DEFAULT 0 CHECK (tokens_per_minute >= 0),
    monthly_token_quota BIGINT NOT NULL DEFAULT 0 CHECK (monthly_token_quota >= 0),
    freeze_threshold  INTEGER NOT NULL DEFAULT 20 CHECK (freeze_threshold >= 0),
    freeze_minutes    INTEGER NOT NULL DEFAULT 10 CHECK (freeze_minutes >= 0),
    autotune          BOOLEAN NOT NULL DEFAULT FALSE,
    refill_floor      DOUBLE PRECISION NOT NULL DEFAULT 0 CHECK (refill_floor >= 0),
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at        TIMESTAMPTZ NOT NULL DEFAULT now()
);

INSERT INTO tiers (name, capacity, refill_per_sec, freeze_threshold, freeze_minutes, autotune, refill_floor)
VALUES ('free', 30, 0.5, 20, 10, TRUE, 0.3),
       ('premium', 200, 5, 20, 10, FALSE, 0);

CREATE TABLE organizations (
    id         BIGSERIAL PRIMARY KEY,
    name       TEXT NOT NULL,
    tier_id    BIGINT NOT NULL REFERENCES tiers (id),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE users (
    id            BIGSERIAL PRIMARY KEY,
    org_id        BIGINT NOT NULL REFERENCES organizations (id),
    email         TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    role          TEXT NOT NULL CHECK (role IN ('member', 'owner', 'admin')),
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX users_email_unique ON users (lower(email));
CREATE INDEX users_org ON users (org_id);

CREATE TABLE api_tokens (
    id           BIGSERIAL PRIMARY KEY,
    org_id       BIGINT NOT NULL REFERENCES organizations (id),
    user_id      BIGINT NOT NULL REFERENCES users (id),
    name         TEXT NOT NULL,
    prefix       TEXT NOT NULL,
    hash         TEXT NOT NULL UNIQUE,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_used_at TIMESTAMPTZ,
    expires_at   TIMESTAMPTZ,
    revoked_at   TIMESTAMPTZ
);
CREATE INDEX api_tokens_org ON api_tokens (org_id);

CREATE TABLE usage_events (
    id                BIGSERIAL PRIMARY KEY,
    request_id        TEXT NOT NULL UNIQUE,
    org_id            BIGINT NOT NULL REFERENCES organizations (id),
    token_id          BIGINT NOT NULL REFERENCES api_tokens (id),
    model             TEXT NOT NULL,
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    status            INTEGER NOT NULL,
    latency_ms        INTEGER NOT NULL DEFAULT 0,
    created_at        TIMESTAMPTZ NOT NULL
);
CREATE INDEX usage_events_org_time ON usage_events (org_id, created_at);

CREATE TABLE audit_log (
    id            BIGSERIAL PRIMARY KEY,
    org_id        BIGINT,
    actor_user_id BIGINT,
    action        TEXT NOT NULL,
    target        TEXT NOT NULL DEFAULT '',
    detail        TEXT NOT NULL DEFAULT '',
    created_at    TIMESTAMPTZ NOT NULL
);
CREATE INDEX audit_log_org_time ON audit_log (org_id, created_at);

CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
