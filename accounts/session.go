package accounts

import (
	"crypto/rand"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
)

const issuer = "sluice"

// Sessions issues and checks the HS256 JWTs that carry a signed-in user, in
// the browser's cookie and as the management API's bearer.
type Sessions struct {
	secret []byte
	ttl    time.Duration
	now    func() time.Time
}

// NewSessions returns a session issuer; now is the clock (nil: time.Now).
func NewSessions(secret []byte, ttl time.Duration, now func() time.Time) *Sessions {
	if now == nil {
		now = time.Now
	}
	return &Sessions{secret: secret, ttl: ttl, now: now}
}

// Issue returns a new session for u, with a fresh id every time so a login
// never reuses an earlier session.
func (s *Sessions) Issue(u models.User) (token string, expires time.Time, err error) {
	now := s.now()
	expires = now.Add(s.ttl)
	claims := jwt.RegisteredClaims{
		Issuer:    issuer,
		Subject:   strconv.FormatInt(u.ID, 10),
		IssuedAt:  jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(expires),
		ID:        rand.Text(),
	}
	token, err = jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(s.secret)
	if err != nil {
		return "", time.Time{}, apperr.Wrap(err, "sign session")
	}
	return token, expires, nil
}

// Parse checks a session token (algorithm, signature, issuer, expiry) and
// returns its user id.
func (s *Sessions) Parse(token string) (int64, error) {
	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(token, &claims, func(*jwt.Token) (any, error) { return s.secret, nil },
		jwt.WithValidMethods([]string{"HS256"}),
		jwt.WithExpirationRequired(),
		jwt.WithIssuer(issuer),
		jwt.WithTimeFunc(s.now),
	)
	if err != nil {
		return 0, apperr.WithReason(apperr.Unauthorized, "invalid_session", "session is invalid or expired; sign in again")
	}
	id, err := strconv.ParseInt(claims.Subject, 10, 64)
	if err != nil || id <= 0 {
		return 0, apperr.WithReason(apperr.Unauthorized, "invalid_session", "session is invalid or expired; sign in again")
	}
	return id, nil
}
