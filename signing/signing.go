// Package signing verifies signed API requests: a token that requires them
// must send, with every call, a timestamp, a nonce and an HMAC-SHA256 of the
// request keyed by the token's signing secret. A captured request then cannot
// be replayed (the nonce is remembered while its timestamp is acceptable) or
// altered (the signature covers method, path and body).
package signing

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/apperr"
)

// The headers a signed request carries.
const (
	HeaderTimestamp = "X-Sluice-Timestamp"
	HeaderNonce     = "X-Sluice-Nonce"
	HeaderSignature = "X-Sluice-Signature"
)

// Window is how far a request's timestamp may be from the server's clock,
// either way.
const Window = 300 * time.Second

// MaxNonce is the longest nonce accepted, in bytes.
const MaxNonce = 128

// secretPrefix marks a signing secret so it is not mistaken for an API token.
const secretPrefix = "sk_sluice_sign_"

// NewSecret returns a fresh signing secret. Clients key the HMAC with the
// secret's bytes exactly as shown, prefix included.
func NewSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return secretPrefix + hex.EncodeToString(b[:])
}

// Sign returns the hex HMAC-SHA256, keyed by secret, of
// METHOD\nPATH\nTIMESTAMP\nNONCE\nhex(sha256(body)): what a client sends as
// X-Sluice-Signature. path is the request's path without the query string.
func Sign(secret []byte, method, path string, timestamp int64, nonce string, body []byte) string {
	return hex.EncodeToString(mac(secret, method, path, strconv.FormatInt(timestamp, 10), nonce, body))
}

func mac(secret []byte, method, path, timestamp, nonce string, body []byte) []byte {
	sum := sha256.Sum256(body)
	var hexSum [2 * sha256.Size]byte
	hex.Encode(hexSum[:], sum[:])
	m := hmac.New(sha256.New, secret)
	for _, part := range [...]string{method, path, timestamp, nonce} {
		m.Write([]byte(part))
		m.Write([]byte{'\n'})
	}
	m.Write(hexSum[:])
	return m.Sum(nil)
}

// Nonces remembers which nonces a token has used. Claim reports whether
// nonce is new for tokenID and, if so, remembers it for ttl.
type Nonces interface {
	Claim(ctx context.Context, tokenID int64, nonce string, ttl time.Duration) (fresh bool, err error)
}

// Verifier checks signed requests against a token's secret.
type Verifier struct {
	nonces Nonces
	now    func() time.Time
}

// NewVerifier returns a verifier that remembers nonces in nonces and reads
// the time from now (time.Now when nil).
func NewVerifier(nonces Nonces, now func() time.Time) *Verifier {
	if now == nil {
		now = time.Now
	}
	return &Verifier{nonces: nonces, now: now}
}

// The reasons a signed request is refused, each its own error code.
const (
	ReasonRequired = "signature_required"
	ReasonExpired  = "request_expired"
	ReasonReplayed = "request_replayed"
	ReasonInvalid  = "invalid_signature"
)

func refuse(reason, message string) *apperr.Error {
	return apperr.WithReason(apperr.Unauthorized, reason, message)
}

// Verify checks one request of tokenID, signed with secret. It returns nil
// or an *apperr.Error (401 with one of the Reason codes); a nonce store that
// fails returns its error wrapped as unavailable.
//
// The signature is checked before the nonce is claimed, so a forger cannot
// use up a client's nonces, and the timestamp before either, so the nonce
// store need only remember a nonce while its timestamp is acceptable.
func (v *Verifier) Verify(ctx context.Context, tokenID int64, secret []byte, method, path string, h http.Header, body []byte) error {
	ts, nonce, sig := h.Get(HeaderTimestamp), h.Get(HeaderNonce), h.Get(HeaderSignature)
	if ts == "" && nonce == "" && sig == "" {
		return refuse(ReasonRequired, "This API key requires signed requests: send "+HeaderTimestamp+", "+HeaderNonce+" and "+HeaderSignature+".")
	}
	switch {
	case ts == "":
		return refuse(ReasonInvalid, "Missing "+HeaderTimestamp+".")
	case nonce == "":
		return refuse(ReasonInvalid, "Missing "+HeaderNonce+".")
	case sig == "":
		return refuse(ReasonInvalid, "Missing "+HeaderSignature+".")
	}
	unix, ok := parseUnix(ts)
	if !ok {
		return refuse(ReasonInvalid, HeaderTimestamp+" must be unix seconds.")
	}
	if !validNonce(nonce) {
		return refuse(ReasonInvalid, HeaderNonce+" must be 1 to 128 visible ASCII characters.")
	}
	now := v.now()
	at := time.Unix(unix, 0)
	if at.Before(now.Add(-Window)) || at.After(now.Add(Window)) {
		return refuse(ReasonExpired, "The request's "+HeaderTimestamp+" is more than 300 seconds from the server's time; sign it again with the current time.")
	}
	got, err := hex.DecodeString(sig)
	if err != nil || len(got) != sha256.Size {
		return refuse(ReasonInvalid, HeaderSignature+" must be 64 hex digits.")
	}
	if !hmac.Equal(got, mac(secret, method, path, ts, nonce, body)) {
		return refuse(ReasonInvalid, "The request's signature does not match: sign METHOD, PATH, TIMESTAMP, NONCE and the body's SHA-256 with this key's signing secret.")
	}
	// Remember the nonce while the timestamp could still be accepted, and a
	// second more for clocks that tick between here and the store.
	ttl := at.Add(Window).Sub(now) + time.Second
	fresh, err := v.nonces.Claim(ctx, tokenID, nonce, ttl)
	if err != nil {
		return &apperr.Error{Code: apperr.Unavailable, Message: "Cannot check the request's nonce right now; retry shortly.", Cause: err, RetryAfter: time.Second}
	}
	if !fresh {
		return refuse(ReasonReplayed, "This "+HeaderNonce+" was already used with this API key; send a new nonce with every request.")
	}
	return nil
}

// parseUnix reads a timestamp of up to 12 decimal digits, nothing else.
func parseUnix(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 12 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// validNonce accepts 1 to MaxNonce visible ASCII bytes: no spaces or line
// breaks, which keeps the signed text unambiguous and the nonce store's keys
// printable.
func validNonce(s string) bool {
	if len(s) == 0 || len(s) > MaxNonce {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
