-- The most active API tokens (neither revoked nor expired) an organization
-- on the tier may hold; 0 means no limit. The default tiers get their
-- limits; any other tier keeps what it had, no limit, until an admin sets
-- one.
ALTER TABLE tiers ADD COLUMN max_api_tokens INTEGER NOT NULL DEFAULT 0 CHECK (max_api_tokens >= 0);
UPDATE tiers SET max_api_tokens = 10 WHERE name = 'free';
UPDATE tiers SET max_api_tokens = 200 WHERE name = 'premium';
