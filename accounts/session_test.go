package accounts_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/models"
)

var sessionSecret = []byte("0123456789abcdef0123456789abcdef")

const sessionTTL = 12 * time.Hour

// sessionEpoch is a whole second, so exp (kept in whole seconds) is exactly
// epoch+TTL.
var sessionEpoch = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func TestSessionRoundTrip(t *testing.T) {
	clock := clocktest.New(sessionEpoch)
	s := accounts.NewSessions(sessionSecret, sessionTTL, clock.Now)

	token, expires, err := s.Issue(models.User{ID: 42})
	if err != nil {
		t.Fatal(err)
	}
	if !expires.Equal(sessionEpoch.Add(sessionTTL)) {
		t.Errorf("expires %v, want %v", expires, sessionEpoch.Add(sessionTTL))
	}
	id, err := s.Parse(token)
	if err != nil || id != 42 {
		t.Fatalf("Parse = %d, %v; want 42", id, err)
	}

	// Still valid a second before the end of its life, on the same clock.
	clock.Advance(sessionTTL - time.Second)
	if id, err := s.Parse(token); err != nil || id != 42 {
		t.Fatalf("just before expiry: %d, %v", id, err)
	}

	// Another Sessions with the same secret (another node) accepts it too.
	other := accounts.NewSessions(sessionSecret, sessionTTL, clock.Now)
	if id, err := other.Parse(token); err != nil || id != 42 {
		t.Fatalf("other node: %d, %v", id, err)
	}
}

func TestSessionIssueIsFreshEveryTime(t *testing.T) {
	clock := clocktest.New(sessionEpoch) // never advanced: same instant
	s := accounts.NewSessions(sessionSecret, sessionTTL, clock.Now)
	seenTokens := map[string]bool{}
	seenIDs := map[string]bool{}
	for range 20 {
		token, _, err := s.Issue(models.User{ID: 7})
		if err != nil {
			t.Fatal(err)
		}
		var claims jwt.RegisteredClaims
		if _, _, err := jwt.NewParser().ParseUnverified(token, &claims); err != nil {
			t.Fatal(err)
		}
		if claims.ID == "" {
			t.Fatal("session has no jti")
		}
		if seenTokens[token] || seenIDs[claims.ID] {
			t.Fatalf("Issue repeated a token or jti at the same instant: %q", claims.ID)
		}
		seenTokens[token], seenIDs[claims.ID] = true, true
		if claims.Issuer != "sluice" || claims.Subject != "7" || claims.ExpiresAt == nil || !claims.ExpiresAt.Equal(sessionEpoch.Add(sessionTTL)) {
			t.Fatalf("claims %+v", claims)
		}
	}
}

func TestSessionRejected(t *testing.T) {
	now := sessionEpoch

	// claims are the claims of a good session; each case breaks one thing.
	claims := func(mod func(c *jwt.RegisteredClaims)) jwt.RegisteredClaims {
		c := jwt.RegisteredClaims{
			Issuer:    "sluice",
			Audience:  jwt.ClaimStrings{"sluice-session"},
			Subject:   "42",
			IssuedAt:  jwt.NewNumericDate(now),
			NotBefore: jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour)),
			ID:        "jti",
		}
		if mod != nil {
			mod(&c)
		}
		return c
	}
	sign := func(t *testing.T, m jwt.SigningMethod, key any, c jwt.Claims) string {
		t.Helper()
		tok, err := jwt.NewWithClaims(m, c).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}

	// The crafted good session is accepted, so each rejection below is
	// down to the one thing its case changes.
	control := accounts.NewSessions(sessionSecret, sessionTTL, clocktest.New(now).Now)
	if id, err := control.Parse(sign(t, jwt.SigningMethodHS256, sessionSecret, claims(nil))); err != nil || id != 42 {
		t.Fatalf("control token: %d, %v", id, err)
	}

	tests := []struct {
		name  string
		token func(t *testing.T, s *accounts.Sessions) string
		// advance moves the clock before Parse.
		advance time.Duration
	}{
		{"expired", func(t *testing.T, s *accounts.Sessions) string {
			tok, _, err := s.Issue(models.User{ID: 42})
			if err != nil {
				t.Fatal(err)
			}
			return tok
		}, sessionTTL + time.Second},
		{"expired at exactly exp", func(t *testing.T, s *accounts.Sessions) string {
			tok, _, err := s.Issue(models.User{ID: 42})
			if err != nil {
				t.Fatal(err)
			}
			return tok
		}, sessionTTL},
		{"wrong issuer", func(t *testing.T, s *accounts.Sessions) string {
			return sign(t, jwt.SigningMethodHS256, sessionSecret, claims(func(c *jwt.RegisteredClaims) { c.Issuer = "evil" }))
		}, 0},
		{"no issuer", func(t *testing.T, s *accounts.Sessions) string {
			return sign(t, jwt.SigningMethodHS256, sessionSecret, claims(func(c *jwt.RegisteredClaims) { c.Issuer = "" }))
		}, 0},
		{"missing exp", func(t *testing.T, s *accounts.Sessions) string {
			return sign(t, jwt.SigningMethodHS256, sessionSecret, claims(func(c *jwt.RegisteredClaims) { c.ExpiresAt = nil }))
		}, 0},
		{"not valid yet", func(t *testing.T, s *accounts.Sessions) string {
			return sign(t, jwt.SigningMethodHS256, sessionSecret, claims(func(c *jwt.RegisteredClaims) {
				c.NotBefore = jwt.NewNumericDate(now.Add(time.Minute))
			}))
		}, 0},
		{"issued in the future", func(t *testing.T, s *accounts.Sessions) string {
			return sign(t, jwt.SigningMethodHS256, sessionSecret, claims(func(c *jwt.RegisteredClaims) {
				c.IssuedAt, c.NotBefore = jwt.NewNumericDate(now.Add(time.Minute)), nil
			}))
		}, 0},
		{"wrong audience", func(t *testing.T, s *accounts.Sessions) string {
			return sign(t, jwt.SigningMethodHS256, sessionSecret, claims(func(c *jwt.RegisteredClaims) { c.Audience = jwt.ClaimStrings{"sluice-password-reset"} }))
		}, 0},
		{"no audience", func(t *testing.T, s *accounts.Sessions) string {
			return sign(t, jwt.SigningMethodHS256, sessionSecret, claims(func(c *jwt.RegisteredClaims) { c.Audience = nil }))
		}, 0},
		{"no session id", func(t *testing.T, s *accounts.Sessions) string {
			return sign(t, jwt.SigningMethodHS256, sessionSecret, claims(func(c *jwt.RegisteredClaims) { c.ID = "" }))
		}, 0},
		{"alg none", func(t *testing.T, s *accounts.Sessions) string {
			return sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims(nil))
		}, 0},
		{"HS512 with the same secret", func(t *testing.T, s *accounts.Sessions) string {
			return sign(t, jwt.SigningMethodHS512, sessionSecret, claims(nil))
		}, 0},
		{"HS384 with the same secret", func(t *testing.T, s *accounts.Sessions) string {
			return sign(t, jwt.SigningMethodHS384, sessionSecret, claims(nil))
		}, 0},
		{"another secret", func(t *testing.T, s *accounts.Sessions) string {
			return sign(t, jwt.SigningMethodHS256, []byte("another secret, just as long...."), claims(nil))
		}, 0},
		{"issued by another deployment", func(t *testing.T, s *accounts.Sessions) string {
			tok, _, err := accounts.NewSessions([]byte("other"), sessionTTL, func() time.Time { return now }).Issue(models.User{ID: 42})
			if err != nil {
				t.Fatal(err)
			}
			return tok
		}, 0},
		{"garbage", func(*testing.T, *accounts.Sessions) string { return "not.a.jwt" }, 0},
		{"empty", func(*testing.T, *accounts.Sessions) string { return "" }, 0},
		{"non-numeric subject", func(t *testing.T, s *accounts.Sessions) string {
			return sign(t, jwt.SigningMethodHS256, sessionSecret, claims(func(c *jwt.RegisteredClaims) { c.Subject = "admin" }))
		}, 0},
		{"empty subject", func(t *testing.T, s *accounts.Sessions) string {
			return sign(t, jwt.SigningMethodHS256, sessionSecret, claims(func(c *jwt.RegisteredClaims) { c.Subject = "" }))
		}, 0},
		{"zero subject", func(t *testing.T, s *accounts.Sessions) string {
			return sign(t, jwt.SigningMethodHS256, sessionSecret, claims(func(c *jwt.RegisteredClaims) { c.Subject = "0" }))
		}, 0},
		{"negative subject", func(t *testing.T, s *accounts.Sessions) string {
			return sign(t, jwt.SigningMethodHS256, sessionSecret, claims(func(c *jwt.RegisteredClaims) { c.Subject = "-42" }))
		}, 0},
		{"subject beyond int64", func(t *testing.T, s *accounts.Sessions) string {
			return sign(t, jwt.SigningMethodHS256, sessionSecret, claims(func(c *jwt.RegisteredClaims) {
				c.Subject = strconv.FormatUint(1<<63, 10)
			}))
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := clocktest.New(sessionEpoch)
			s := accounts.NewSessions(sessionSecret, sessionTTL, clock.Now)
			tok := tt.token(t, s)
			clock.Advance(tt.advance)
			id, err := s.Parse(tok)
			if id != 0 {
				t.Errorf("id %d returned with a rejected session", id)
			}
			e := wantErr(t, err, apperr.Unauthorized, "invalid_session")
			if e.Message == "" {
				t.Error("no message for the user")
			}
		})
	}
}
