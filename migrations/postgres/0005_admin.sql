-- Admin console: the overview of every organization and the audit log's
-- filters. The overview joins organizations to usage_monthly on its
-- primary key (period, org_id) and to the freezes in force; the audit log
-- already has (org_id, created_at), (created_at) and (action, created_at).

-- Freezes in force (not lifted, not yet expired), counted per organization
-- by the overview: only unlifted freezes are indexed, in expiry order, so
-- the count reads the few in force from the index alone.
CREATE INDEX freezes_unlifted ON freezes (frozen_until, org_id) WHERE lifted_at IS NULL;

-- The audit log's action filter is a prefix ("tier."), compared byte-wise
-- as a range; in the database's own collation a range is not a prefix, so
-- the index compares in "C".
CREATE INDEX audit_log_action_bytes ON audit_log (action COLLATE "C", created_at);

-- The overview's pages in name or creation order are read from these
-- indexes, the id breaking ties, without sorting every organization.
CREATE INDEX organizations_name_id ON organizations (lower(name), id);
CREATE INDEX organizations_created ON organizations (created_at, id);
