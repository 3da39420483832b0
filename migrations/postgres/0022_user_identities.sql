-- Single sign-on: a user's account at an OpenID Connect provider, named by
-- the provider's issuer and its subject (the "sub" claim, stable for the
-- account, unlike its email). A later sign-in finds the user by these, so
-- a change of email at the provider keeps the same Sluice user.
--
-- A user made by single sign-on has no password: users.password_hash stays
-- NOT NULL and is '' for them, which no bcrypt hash is, so a password
-- sign-in can never match it and says the account signs in with SSO.
CREATE TABLE user_identities (
    issuer          TEXT NOT NULL,
    subject         TEXT NOT NULL,
    user_id         BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    email           TEXT NOT NULL, -- the verified address the provider last asserted, lower case
    created_at      TIMESTAMPTZ NOT NULL,
    last_sign_in_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (issuer, subject)
);
-- One account per provider for a user: a second account asserting the
-- same email (an address handed on to someone else) is refused rather
-- than let into the first one's user.
CREATE UNIQUE INDEX user_identities_user_issuer ON user_identities (user_id, issuer);
