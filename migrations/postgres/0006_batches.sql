-- Batches: OpenAI's Batch API on the job queue. An organization uploads a
-- JSON Lines file (batch_files), creates a batch from it (batches), and
-- each line becomes a job on River's tables; each line's outcome is kept
-- in batch_results, already written as the line of the output or error
-- file it belongs in, until the batch finishes and those files are made
-- (once: the last line's transaction does it under the batch's row lock).

-- The largest batch input file an organization on the tier may upload;
-- 0 refuses uploads.
ALTER TABLE tiers ADD COLUMN batch_file_bytes BIGINT NOT NULL DEFAULT 1048576 CHECK (batch_file_bytes >= 0);
UPDATE tiers SET batch_file_bytes = 104857600 WHERE name = 'premium';

-- Inputs (purpose 'batch') and the output and error files of batches
-- ('batch_output'). Content is read only by the download; listings select
-- the other columns.
CREATE TABLE batch_files (
    id         BIGSERIAL PRIMARY KEY,
    org_id     BIGINT NOT NULL REFERENCES organizations (id),
    purpose    TEXT NOT NULL CHECK (purpose IN ('batch', 'batch_output')),
    filename   TEXT NOT NULL,
    bytes      BIGINT NOT NULL CHECK (bytes >= 0),
    content    BYTEA NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX batch_files_org ON batch_files (org_id, id);
CREATE INDEX batch_files_expiry ON batch_files (expires_at);

-- Request counts: total lines, completed (a 2xx answer), failed (anything
-- else: malformed, refused, failed, cancelled or expired). The files are
-- referenced without a foreign key: their owner may delete them.
CREATE TABLE batches (
    id                BIGSERIAL PRIMARY KEY,
    org_id            BIGINT NOT NULL REFERENCES organizations (id),
    token_id          BIGINT NOT NULL,
    input_file_id     BIGINT NOT NULL,
    endpoint          TEXT NOT NULL,
    completion_window TEXT NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('validating', 'failed', 'in_progress', 'finalizing', 'completed',
                                                      'expired', 'cancelling', 'cancelled')),
    metadata          TEXT NOT NULL DEFAULT '', -- a JSON object of strings; '' for none
    errors            TEXT NOT NULL DEFAULT '', -- a JSON array of {code, message} when the batch failed
    output_ttl_secs   BIGINT NOT NULL DEFAULT 0, -- output_expires_after; 0: the default retention
    total             INTEGER NOT NULL CHECK (total >= 0),
    completed         INTEGER NOT NULL DEFAULT 0 CHECK (completed >= 0),
    failed            INTEGER NOT NULL DEFAULT 0 CHECK (failed >= 0),
    output_file_id    BIGINT,
    error_file_id     BIGINT,
    created_at        TIMESTAMPTZ NOT NULL,
    in_progress_at    TIMESTAMPTZ,
    finalizing_at     TIMESTAMPTZ,
    completed_at      TIMESTAMPTZ,
    failed_at         TIMESTAMPTZ,
    expired_at        TIMESTAMPTZ,
    cancelling_at     TIMESTAMPTZ,
    cancelled_at      TIMESTAMPTZ,
    expires_at        TIMESTAMPTZ NOT NULL,
    CHECK (completed + failed <= total)
);
CREATE INDEX batches_org ON batches (org_id, id);
CREATE INDEX batches_expiry ON batches (expires_at);

-- One row per line of the input file: 'pending' while its job runs, then
-- 'ok' or 'failed' with result holding its line of the output or error
-- file. A line's custom_id is unique among its batch's jobs (a duplicate
-- is itself a failed line), so a job's outcome finds its row by it.
CREATE TABLE batch_results (
    batch_id   BIGINT NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
    line       INTEGER NOT NULL,
    custom_id  TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('pending', 'ok', 'failed')),
    error_code TEXT NOT NULL DEFAULT '',
    result     BYTEA NOT NULL DEFAULT '',
    PRIMARY KEY (batch_id, line)
);
CREATE INDEX batch_results_custom_id ON batch_results (batch_id, custom_id);
