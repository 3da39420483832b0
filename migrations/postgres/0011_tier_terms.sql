-- Plan terms are effective-dated like prices: a tier's fee, included credit
-- and overage are versions in tier_terms, each in force from its
-- effective_from until the next one, never changed; an organization's moves
-- between tiers are rows of tier_memberships. Invoices prorate each month
-- over the (tier, version) pairs in force in it. The tier row keeps the
-- current values (written in the same transaction as the version) and,
-- in terms_from, when they took effect.
--
-- Neither table has a foreign key to tiers: a tier nobody is on may be
-- deleted, and the months it was in force must still be billed.
-- tier_name is the tier's name, which never changes.

CREATE TABLE tier_terms (
    id              BIGSERIAL PRIMARY KEY,
    tier_id         BIGINT NOT NULL,
    tier_name       TEXT NOT NULL,
    monthly_fee     BIGINT NOT NULL CHECK (monthly_fee >= 0),
    included_credit BIGINT NOT NULL CHECK (included_credit >= 0),
    overage         TEXT NOT NULL CHECK (overage IN ('bill', 'block')),
    effective_from  TIMESTAMPTZ NOT NULL,
    created_by      BIGINT -- the admin; NULL for the backfill
);
-- Versions are ordered by effective_from, then id: two edits in the same
-- instant are both kept, the later one in force.
CREATE INDEX tier_terms_tier ON tier_terms (tier_id, effective_from, id);

CREATE TABLE tier_memberships (
    id             BIGSERIAL PRIMARY KEY,
    org_id         BIGINT NOT NULL REFERENCES organizations (id),
    tier_id        BIGINT NOT NULL,
    effective_from TIMESTAMPTZ NOT NULL,
    created_by     BIGINT -- who moved it; NULL at creation and for the backfill
);
CREATE INDEX tier_memberships_org ON tier_memberships (org_id, effective_from, id);

-- Every tier as it stands is one version in force since the epoch: that is
-- what invoices assumed until now (the tier as it stands covers the whole
-- month), and no organization can be on a tier before its first version.
ALTER TABLE tiers ADD COLUMN terms_from TIMESTAMPTZ NOT NULL DEFAULT '1970-01-01 00:00:00+00';
INSERT INTO tier_terms (tier_id, tier_name, monthly_fee, included_credit, overage, effective_from)
    SELECT id, name, monthly_fee, included_credit, overage, terms_from FROM tiers;
-- Every organization has been on its current tier since its creation (the
-- moves before this migration are in the audit log only).
INSERT INTO tier_memberships (org_id, tier_id, effective_from)
    SELECT id, tier_id, created_at FROM organizations;
