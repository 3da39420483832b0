-- Quota engine: tokens-per-minute defaults, the auto-tuner's effective
-- refill, anomaly freezes and tuning events.

-- NULL means "as configured"; the auto-tuner sets it under load.
ALTER TABLE tiers ADD COLUMN effective_refill_per_sec DOUBLE PRECISION;
UPDATE tiers SET tokens_per_minute = 20000 WHERE name = 'free' AND tokens_per_minute = 0;
UPDATE tiers SET tokens_per_minute = 400000 WHERE name = 'premium' AND tokens_per_minute = 0;

CREATE TABLE freezes (
    id           BIGSERIAL PRIMARY KEY,
    token_id     BIGINT NOT NULL REFERENCES api_tokens (id),
    org_id       BIGINT NOT NULL REFERENCES organizations (id),
    reason       TEXT NOT NULL,
    window_count INTEGER NOT NULL,
    frozen_from  TIMESTAMPTZ NOT NULL,
    frozen_until TIMESTAMPTZ NOT NULL,
    lifted_at    TIMESTAMPTZ,
    lifted_by    BIGINT REFERENCES users (id)
);
CREATE INDEX freezes_org ON freezes (org_id, frozen_from);
CREATE INDEX freezes_until ON freezes (frozen_until);

CREATE TABLE tuning_events (
    id          BIGSERIAL PRIMARY KEY,
    tier        TEXT NOT NULL,
    from_refill DOUBLE PRECISION NOT NULL,
    to_refill   DOUBLE PRECISION NOT NULL,
    load        DOUBLE PRECISION NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX tuning_events_time ON tuning_events (created_at);
