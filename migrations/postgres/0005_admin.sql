-- Admin console: the overview of every organization and the audit log's
-- filters. The overview joins organizations to usage_monthly on its
-- primary key (period, org_id) and counts the freezes in force through
-- freezes_until; the audit log has (org_id, created_at), (created_at) and
-- (action, created_at) since 0004.

-- The overview's pages in name or creation order are read from these
-- indexes, the id breaking ties, without sorting every organization.
CREATE INDEX organizations_name_id ON organizations (lower(name), id);
CREATE INDEX organizations_created ON organizations (created_at, id);

-- The audit log's action filter is a prefix ("tier."), compared as a
-- byte-wise range; in the database's own collation a range is not a
-- prefix, so this index compares in "C".
CREATE INDEX audit_log_action_bytes ON audit_log (action COLLATE "C", created_at);
