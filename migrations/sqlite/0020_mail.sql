-- Mail: a durable outbox, one-time links (password resets, email
-- verification, signups waiting for their address to be confirmed) and
-- the tier setting that withholds included credit until an owner's email
-- is verified.

-- When the user proved they read mail at their address: by a verification
-- link, or by signing up through a link that was mailed to them. NULL:
-- never. Accounts from before stay unverified: verification did not exist.
ALTER TABLE users ADD COLUMN email_verified_at DATETIME;

-- Every mail Sluice sends is a row here first, written in the transaction
-- of what causes it, then sent by a worker (any node's). A row is claimed
-- with a conditional update (claim, claimed_until), so two workers never
-- send it at once; a failed send is tried again at next_attempt_at; a sent
-- one keeps its envelope and loses its body (which may hold a one-time
-- link).
CREATE TABLE mail_outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    kind            TEXT NOT NULL,
    to_addr         TEXT NOT NULL,
    subject         TEXT NOT NULL,
    body_text       TEXT NOT NULL,
    created_at      DATETIME NOT NULL,
    next_attempt_at DATETIME NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error      TEXT NOT NULL DEFAULT '',
    claim           TEXT,
    claimed_until   DATETIME,
    sent_at         DATETIME,
    failed_at       DATETIME
);
-- The worker's query: what is due and neither sent nor given up on.
CREATE INDEX mail_outbox_due ON mail_outbox (next_attempt_at) WHERE sent_at IS NULL AND failed_at IS NULL;
-- How many mails of a kind one address got lately (the per-address bounds).
CREATE INDEX mail_outbox_recent ON mail_outbox (to_addr, kind, created_at);

-- One-time links. Only the SHA-256 of a link's token is kept; a link works
-- once (used_at, set by a conditional update) until expires_at. A signup
-- link holds the account it will make (email, bcrypt hash, organization
-- name) and names no user until it is used.
CREATE TABLE account_links (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    purpose       TEXT NOT NULL CHECK (purpose IN ('password_reset', 'email_verification', 'signup')),
    token_hash    TEXT NOT NULL UNIQUE,
    user_id       BIGINT REFERENCES users (id) ON DELETE CASCADE,
    email         TEXT NOT NULL,
    password_hash TEXT NOT NULL DEFAULT '',
    org_name      TEXT NOT NULL DEFAULT '',
    created_by    BIGINT REFERENCES users (id) ON DELETE SET NULL,
    mailed        BOOLEAN NOT NULL DEFAULT 0,
    created_at    DATETIME NOT NULL,
    expires_at    DATETIME NOT NULL,
    used_at       DATETIME
);
CREATE INDEX account_links_user ON account_links (user_id, purpose, created_at);

-- Included credit waits for a verified owner's email on tiers that say so:
-- the free tier, whose credit is what a throwaway address would be after.
ALTER TABLE tiers ADD COLUMN credit_needs_verified_email BOOLEAN NOT NULL DEFAULT 0;
UPDATE tiers SET credit_needs_verified_email = 1 WHERE name = 'free';

-- An invitation sent by mail (its code shown to nobody): using it proves
-- the invitee's address.
ALTER TABLE invitations ADD COLUMN mailed BOOLEAN NOT NULL DEFAULT 0;
