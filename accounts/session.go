package accounts

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
)

const (
	issuer = "sluice"
	// audience says what the token is for, so a token Sluice might one day
	// sign with the same secret for another purpose is never a session.
	audience = "sluice-session"
)

// Sessions issues and checks the HS256 JWTs that carry a signed-in user, in
// the browser's cookie and as the management API's bearer.
//
// A session lives in two places: the signed JWT the client holds, and a row
// in the SessionStore that Start writes and End revokes. Resume needs both,
// so a session ended on one node is refused by every node at once, and a
// copied cookie dies with the sign-out. Parse checks the JWT alone.
type Sessions struct {
	secret []byte
	ttl    time.Duration
	now    func() time.Time
}

// SessionStore keeps the open sessions and the organization each acts in;
// *models.Store is one. Resume reads it on every authenticated request, in
// place of reading the user and their membership.
type SessionStore interface {
	CreateLoginSession(ctx context.Context, s models.LoginSession) error
	LoginSessionMember(ctx context.Context, id string, userID int64) (models.Member, error)
	SetLoginSessionOrganization(ctx context.Context, id string, u models.User, orgID int64) (models.Member, error)
	RevokeLoginSession(ctx context.Context, id string, userID int64, at time.Time) error
}

// NewSessions returns a session issuer; now is the clock (nil: time.Now).
func NewSessions(secret []byte, ttl time.Duration, now func() time.Time) *Sessions {
	if now == nil {
		now = time.Now
	}
	return &Sessions{secret: secret, ttl: ttl, now: now}
}

// invalidSession is every refusal of a session token: which check failed is
// none of the client's business.
func invalidSession() error {
	return apperr.WithReason(apperr.Unauthorized, "invalid_session", "session is invalid or expired; sign in again")
}

// session is what a valid token says.
type session struct {
	userID int64
	id     string // the jti
}

// Start signs m in: a new session, with a fresh id, acting in m's
// organization (none when m has none), recorded in store so it can be
// ended before it expires. Signing in never reuses a session.
func (s *Sessions) Start(ctx context.Context, store SessionStore, m models.Member) (token string, expires time.Time, err error) {
	token, claims, err := s.issue(m.User)
	if err != nil {
		return "", time.Time{}, err
	}
	expires = claims.ExpiresAt.Time
	ls := models.LoginSession{ID: storedID(claims.ID), UserID: m.ID, CreatedAt: claims.IssuedAt.Time, ExpiresAt: expires}
	if m.HasOrganization() {
		ls.OrgID = &m.OrgID
	}
	err = store.CreateLoginSession(ctx, ls)
	if err != nil {
		return "", time.Time{}, err
	}
	return token, expires, nil
}

// Resume returns who a session token that is valid (see Parse) and still
// open in store is: its user acting in the session's organization, with
// their role there as it is now. A refused token is an Unauthorized error
// with reason invalid_session; a store failure is returned as it is, so a
// database outage is never taken for a signed-out visitor, nor for a
// signed-in one.
func (s *Sessions) Resume(ctx context.Context, store SessionStore, token string) (models.Member, error) {
	sess, err := s.parse(token)
	if err != nil {
		return models.Member{}, err
	}
	m, err := store.LoginSessionMember(ctx, storedID(sess.id), sess.userID)
	if apperr.CodeOf(err) == apperr.NotFound {
		return models.Member{}, invalidSession()
	}
	return m, err
}

// SwitchOrganization makes the session of token act in orgID from its next
// request on, on every node (the session's row says where it acts); the
// token itself stays the same. An organization the user does not belong
// to is not found.
func (s *Sessions) SwitchOrganization(ctx context.Context, store SessionStore, token string, u models.User, orgID int64) (models.Member, error) {
	sess, err := s.parse(token)
	if err != nil || sess.userID != u.ID {
		return models.Member{}, invalidSession()
	}
	m, err := store.SetLoginSessionOrganization(ctx, storedID(sess.id), u, orgID)
	if e := apperr.As(err); err != nil && e.Code == apperr.NotFound && e.Reason != "organization_not_found" {
		return models.Member{}, invalidSession() // the session ended meanwhile
	}
	return m, err
}

// End signs the session of token out on the server: from now on no node
// accepts it, whoever holds a copy. A token that is not a valid session
// has nothing to end.
func (s *Sessions) End(ctx context.Context, store SessionStore, token string) error {
	sess, err := s.parse(token)
	if err != nil {
		return nil
	}
	return store.RevokeLoginSession(ctx, storedID(sess.id), sess.userID, s.now())
}

func (s *Sessions) issue(u models.User) (string, jwt.RegisteredClaims, error) {
	now := s.now()
	claims := jwt.RegisteredClaims{
		Issuer:    issuer,
		Audience:  jwt.ClaimStrings{audience},
		Subject:   strconv.FormatInt(u.ID, 10),
		IssuedAt:  jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(s.ttl)),
		ID:        rand.Text(),
	}
	token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(s.secret)
	if err != nil {
		return "", claims, apperr.Wrap(err, "sign session")
	}
	return token, claims, nil
}

// Parse checks a session token on its own — strict base64, algorithm
// (HS256 only), signature, issuer, audience, expiry (required), not-before
// and issued-at (not in the future) and a session id — and returns its
// user id. It cannot know whether the session was ended: authenticate
// with Resume.
func (s *Sessions) Parse(token string) (int64, error) {
	sess, err := s.parse(token)
	return sess.userID, err
}

func (s *Sessions) parse(token string) (session, error) {
	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(token, &claims, func(*jwt.Token) (any, error) { return s.secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithIssuer(issuer),
		jwt.WithAudience(audience),
		jwt.WithStrictDecoding(), // one encoding per token: a changed character is a changed token
		jwt.WithTimeFunc(s.now),
	)
	if err != nil || claims.ID == "" {
		return session{}, invalidSession()
	}
	id, err := strconv.ParseInt(claims.Subject, 10, 64)
	if err != nil || id <= 0 {
		return session{}, invalidSession()
	}
	return session{userID: id, id: claims.ID}, nil
}

// StoredID is the key of the row of the session of token (what
// ChangePassword keeps), or "" when token is not a valid session.
func (s *Sessions) StoredID(token string) string {
	sess, err := s.parse(token)
	if err != nil {
		return ""
	}
	return storedID(sess.id)
}

// storedID is the key of a session's row: the SHA-256 of its jti, so the
// table names no session by itself.
func storedID(jti string) string {
	sum := sha256.Sum256([]byte(jti))
	return hex.EncodeToString(sum[:])
}
