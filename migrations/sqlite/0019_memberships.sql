-- Teams: a user may belong to several organizations, each as a member or
-- an owner, and is invited into them by a code shown once to an owner.
--
-- memberships is where an organization's roles live from now on. Every
-- user's organization and role move into it; an admin becomes the owner of
-- the organization it was made in (EnsureAdmin's "Sluice operators") and
-- stays an admin: admin is the operators' own role, kept on users.
CREATE TABLE memberships (
    org_id     BIGINT NOT NULL REFERENCES organizations (id),
    user_id    BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role       TEXT NOT NULL CHECK (role IN ('member', 'owner')),
    created_at DATETIME NOT NULL,
    PRIMARY KEY (org_id, user_id)
);
-- A user's organizations (the switcher, sign-in).
CREATE INDEX memberships_user ON memberships (user_id);

INSERT INTO memberships (org_id, user_id, role, created_at)
SELECT org_id, id, CASE role WHEN 'member' THEN 'member' ELSE 'owner' END, created_at FROM users;

-- users.role now only says who is an admin ('admin'; everyone else
-- 'member'), so it cannot disagree with a membership. users.org_id stays
-- (NOT NULL, referenced): it is the organization the user's next sign-in
-- starts in, while they still belong to it.
UPDATE users SET role = 'member' WHERE role <> 'admin';

-- A session acts in one organization of its user's, which the user can
-- switch; NULL when the user belongs to none. Open sessions keep working,
-- in the organization their user had.
ALTER TABLE login_sessions ADD COLUMN org_id BIGINT REFERENCES organizations (id);
UPDATE login_sessions SET org_id = (SELECT users.org_id FROM users WHERE users.id = login_sessions.user_id);

-- Invitations into an organization. Only the SHA-256 of a code is kept (as
-- for API tokens); a code works once, for its email, until it expires or
-- is revoked.
CREATE TABLE invitations (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id      BIGINT NOT NULL REFERENCES organizations (id),
    email       TEXT NOT NULL, -- trimmed, lower case
    role        TEXT NOT NULL CHECK (role IN ('member', 'owner')),
    code_hash   TEXT NOT NULL UNIQUE,
    invited_by  BIGINT REFERENCES users (id) ON DELETE SET NULL,
    created_at  DATETIME NOT NULL,
    expires_at  DATETIME NOT NULL,
    accepted_at DATETIME,
    accepted_by BIGINT REFERENCES users (id) ON DELETE SET NULL,
    revoked_at  DATETIME
);
-- The owner's list and the per-organization bounds (pending, this hour).
CREATE INDEX invitations_org_created ON invitations (org_id, created_at);
