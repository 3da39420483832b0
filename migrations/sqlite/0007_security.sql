-- Login sessions: one row per sign-in (a browser cookie or a management API
-- bearer), so a session can be ended on the server before its JWT expires.
-- The key is the hex SHA-256 of the JWT's jti, never the jti itself: a copy
-- of this table (a backup, a read replica) names no session a forged token
-- could reuse. Each authenticated request reads its row joined to users, in
-- place of the users read it made anyway.
CREATE TABLE login_sessions (
    id         TEXT PRIMARY KEY,
    user_id    BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at DATETIME NOT NULL,
    expires_at DATETIME NOT NULL,
    revoked_at DATETIME
);
CREATE INDEX login_sessions_user ON login_sessions (user_id);
-- Expired rows are deleted as new sessions start.
CREATE INDEX login_sessions_expires ON login_sessions (expires_at);
