-- Admins disable users and delete organizations.
--
-- A disabled user cannot sign in, their sessions end, and the API tokens
-- they created stop answering until they are enabled again (tokens revoked
-- meanwhile stay revoked). last_login_at is the last sign-in Sluice saw
-- (NULL: none since this migration).
ALTER TABLE users ADD COLUMN disabled_at TIMESTAMPTZ;
ALTER TABLE users ADD COLUMN disabled_by BIGINT REFERENCES users (id) ON DELETE SET NULL;
ALTER TABLE users ADD COLUMN last_login_at TIMESTAMPTZ;

-- A deleted organization has no members and its tokens stop at once; its
-- invoices and usage can still be exported until purge_after, when the
-- purge worker deletes its data and sets purged_at. The row itself stays,
-- a tombstone the audit log and users.org_id still point at.
ALTER TABLE organizations ADD COLUMN deleted_at TIMESTAMPTZ;
ALTER TABLE organizations ADD COLUMN deleted_by BIGINT REFERENCES users (id) ON DELETE SET NULL;
ALTER TABLE organizations ADD COLUMN purge_after TIMESTAMPTZ;
ALTER TABLE organizations ADD COLUMN purged_at TIMESTAMPTZ;
-- The purge worker's question: which deleted organizations are due.
CREATE INDEX organizations_purge_due ON organizations (purge_after) WHERE purge_after IS NOT NULL AND purged_at IS NULL;
