-- Generation API: the operator's provider keys, the per-tier fallback
-- choice, and how each request was served.

CREATE TABLE upstream_keys (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    name            TEXT NOT NULL UNIQUE,
    base_url        TEXT NOT NULL,
    key_ciphertext  TEXT NOT NULL, -- AES-256-GCM under SLUICE_MASTER_KEY
    key_last4       TEXT NOT NULL,
    weight          INTEGER NOT NULL DEFAULT 1 CHECK (weight >= 1),
    rpm             BIGINT NOT NULL DEFAULT 0 CHECK (rpm >= 0),
    tpm             BIGINT NOT NULL DEFAULT 0 CHECK (tpm >= 0),
    models          TEXT NOT NULL DEFAULT '', -- comma-separated; empty = any model
    disabled_reason TEXT NOT NULL DEFAULT '',
    disabled_at     DATETIME,
    created_at      DATETIME NOT NULL
);

-- 'local': answer from sluice-local when every provider key is unavailable;
-- 'error': answer 503 with Retry-After instead.
ALTER TABLE tiers ADD COLUMN upstream_fallback TEXT NOT NULL DEFAULT 'local';

ALTER TABLE usage_events ADD COLUMN cached BOOLEAN NOT NULL DEFAULT 0;
ALTER TABLE usage_events ADD COLUMN fallback BOOLEAN NOT NULL DEFAULT 0;
ALTER TABLE usage_events ADD COLUMN upstream_key_id BIGINT;
