package accounts_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
)

// fuzzSessions issues and parses on a clock that stands still.
func fuzzSessions() *accounts.Sessions {
	return accounts.NewSessions(sessionSecret, sessionTTL, func() time.Time { return sessionEpoch })
}

// FuzzSessionParse decodes any cookie value as a session. It never panics;
// a refusal is always 401 invalid_session; and whatever it accepts is an
// HS256 token whose signature is the HMAC of its first two parts under
// the secret — nothing unsigned, nothing signed otherwise.
func FuzzSessionParse(f *testing.F) {
	s := fuzzSessions()
	good, _, err := s.Issue(models.User{ID: 42})
	if err != nil {
		f.Fatal(err)
	}
	parts := strings.Split(good, ".")
	for _, seed := range []string{
		good, "", ".", "..", "a.b.c", good + ".", good[:len(good)-1],
		"eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + parts[1] + ".",
		"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + parts[1] + "." + parts[2] + "=",
		parts[0] + "." + parts[1] + "." + strings.ToUpper(parts[2]),
		strings.Repeat("A", 4096),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, token string) {
		id, err := s.Parse(token)
		if err != nil {
			if e := apperr.As(err); e.Code != apperr.Unauthorized || e.Reason != "invalid_session" || id != 0 {
				t.Fatalf("refusal %+v with id %d", e, id)
			}
			return
		}
		p := strings.Split(token, ".")
		if len(p) != 3 || id <= 0 {
			t.Fatalf("accepted %q as user %d", token, id)
		}
		header, err := base64.RawURLEncoding.DecodeString(p[0])
		if err != nil || !strings.Contains(string(header), `"HS256"`) {
			t.Fatalf("accepted a token whose header is %q", header)
		}
		mac := hmac.New(sha256.New, sessionSecret)
		mac.Write([]byte(p[0] + "." + p[1]))
		if got, err := base64.RawURLEncoding.DecodeString(p[2]); err != nil || !hmac.Equal(got, mac.Sum(nil)) {
			t.Fatalf("accepted %q, whose signature is not the HMAC of its parts", token)
		}
	})
}

// FuzzSessionTamper changes one character of a valid session: the result
// is refused, wherever the change is and whatever it is.
func FuzzSessionTamper(f *testing.F) {
	s := fuzzSessions()
	good, _, err := s.Issue(models.User{ID: 7})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint(0), byte('x'))
	f.Add(uint(len(good)-1), byte('B')) // the signature's last character carries padding bits
	f.Add(uint(strings.Index(good, ".")), byte('A'))
	f.Fuzz(func(t *testing.T, pos uint, c byte) {
		i := int(pos % uint(len(good)))
		if good[i] == c {
			return
		}
		tampered := good[:i] + string(c) + good[i+1:]
		if id, err := s.Parse(tampered); err == nil {
			t.Fatalf("changing position %d of a session to %q still signs in user %d", i, c, id)
		}
	})
}

// FuzzSessionRoundTrip issues a session for any user id: Parse gives the
// same id back for a real user (id > 0), until it expires, and never
// accepts a session naming no user.
func FuzzSessionRoundTrip(f *testing.F) {
	f.Add(int64(1), uint32(0))
	f.Add(int64(1<<62), uint32(3600))
	f.Add(int64(0), uint32(1))
	f.Add(int64(-9), uint32(12*3600))
	f.Fuzz(func(t *testing.T, id int64, after uint32) {
		now := sessionEpoch
		s := accounts.NewSessions(sessionSecret, sessionTTL, func() time.Time { return now })
		tok, expires, err := s.Issue(models.User{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Duration(after) * time.Second)
		got, err := s.Parse(tok)
		valid := id > 0 && now.Before(expires)
		if valid != (err == nil) || (valid && got != id) {
			t.Fatalf("user %d, %ds later: Parse = %d, %v", id, after, got, err)
		}
		var claims jwt.RegisteredClaims
		if _, _, err := jwt.NewParser().ParseUnverified(tok, &claims); err != nil || len(claims.Audience) != 1 || claims.ID == "" {
			t.Fatalf("claims %+v, %v", claims, err)
		}
	})
}
