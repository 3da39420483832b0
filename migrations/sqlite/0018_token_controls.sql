-- Per-token controls: what an owner narrows one API token to, under its
-- organization's limits. NULL in each column means no control.
--   models              JSON array of model (or alias) names the token may use
--   monthly_budget      picodollars the token may spend in a calendar month (UTC)
--   requests_per_minute the token's own request bucket, under its organization's
--   allowed_ips         JSON array of CIDRs the token's requests may come from
ALTER TABLE api_tokens ADD COLUMN models TEXT;
ALTER TABLE api_tokens ADD COLUMN monthly_budget BIGINT CHECK (monthly_budget >= 0);
ALTER TABLE api_tokens ADD COLUMN requests_per_minute INTEGER CHECK (requests_per_minute >= 1);
ALTER TABLE api_tokens ADD COLUMN allowed_ips TEXT;

-- A token's budget spending when there is no Redis, as budget_ledgers is
-- its organization's: reserved before a request (in the same transaction
-- as the organization's row, both or neither), settled after.
CREATE TABLE token_budget_ledgers (
    token_id BIGINT NOT NULL,
    period   DATETIME NOT NULL,
    org_id   BIGINT NOT NULL,
    spent    BIGINT NOT NULL DEFAULT 0,
    reserved BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (token_id, period)
);
