-- Admin console: the overview of every organization and the audit log's
-- filters. The overview joins organizations to usage_monthly on its
-- primary key (period, org_id) and to the freezes in force; the audit log
-- already has (org_id, created_at), (created_at) and (action, created_at),
-- and SQLite compares text byte-wise, so (action, created_at) serves the
-- action prefix's range too.

-- Freezes in force (not lifted, not yet expired), counted per organization
-- by the overview: only unlifted freezes are indexed, in expiry order.
CREATE INDEX freezes_unlifted ON freezes (frozen_until, org_id) WHERE lifted_at IS NULL;

-- The overview's pages in name or creation order are read from these
-- indexes, the id breaking ties, without sorting every organization.
CREATE INDEX organizations_name_id ON organizations (lower(name), id);
CREATE INDEX organizations_created ON organizations (created_at, id);
