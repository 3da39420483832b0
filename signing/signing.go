// Package signing verifies signed API requests: a token that requires them
// must send, with every call, a timestamp, a nonce and an HMAC-SHA256 of the
// request keyed by the token's signing secret. A captured request then cannot
// be replayed (the nonce is remembered while its timestamp is acceptable) or
// altered (the signature covers the method, path, query string, X-Sluice-*
// headers and body).
package signing

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
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

// Verify checks one request of tokenID, signed with secret, whose body is
// body. It returns nil or an *apperr.Error (401 with one of the Reason
// codes); a nonce store that fails returns its error wrapped as
// unavailable. It is Begin and Finish in one.
func (v *Verifier) Verify(ctx context.Context, tokenID int64, secret []byte, r Request, body []byte) error {
	p, err := v.Begin(tokenID, secret, r)
	if err != nil {
		return err
	}
	return p.Finish(ctx, sha256.Sum256(body))
}

// Pending is a signed request whose headers are checked and whose body is
// not yet read: Finish checks the signature once the body's SHA-256 is
// known, so a body can be hashed as it streams.
type Pending struct {
	v       *Verifier
	tokenID int64
	secret  []byte
	at      time.Time
	sig     []byte
	parts   signed
}

// Begin checks what a signed request's headers say before its body is
// read: the signature's three headers are there and well formed, the
// timestamp is within the window, and no covered header is sent twice. It
// returns an *apperr.Error (401 with one of the Reason codes) when they
// are not.
//
// Finish checks the signature before the nonce is claimed, so a forger
// cannot use up a client's nonces, and Begin the timestamp before either,
// so the nonce store need only remember a nonce while its timestamp is
// acceptable.
func (v *Verifier) Begin(tokenID int64, secret []byte, r Request) (*Pending, error) {
	h := r.Header
	ts, nonce, sig := h.Get(HeaderTimestamp), h.Get(HeaderNonce), h.Get(HeaderSignature)
	if ts == "" && nonce == "" && sig == "" {
		return nil, refuse(ReasonRequired, "This API key requires signed requests: send "+HeaderTimestamp+", "+HeaderNonce+" and "+HeaderSignature+".")
	}
	switch {
	case ts == "":
		return nil, refuse(ReasonInvalid, "Missing "+HeaderTimestamp+".")
	case nonce == "":
		return nil, refuse(ReasonInvalid, "Missing "+HeaderNonce+".")
	case sig == "":
		return nil, refuse(ReasonInvalid, "Missing "+HeaderSignature+".")
	}
	unix, ok := parseUnix(ts)
	if !ok {
		return nil, refuse(ReasonInvalid, HeaderTimestamp+" must be unix seconds.")
	}
	if !validNonce(nonce) {
		return nil, refuse(ReasonInvalid, HeaderNonce+" must be 1 to 128 visible ASCII characters.")
	}
	now := v.now()
	at := time.Unix(unix, 0)
	if at.Before(now.Add(-Window)) || at.After(now.Add(Window)) {
		return nil, refuse(ReasonExpired, "The request's "+HeaderTimestamp+" is more than 300 seconds from the server's time; sign it again with the current time.")
	}
	got, err := hex.DecodeString(sig)
	if err != nil || len(got) != sha256.Size {
		return nil, refuse(ReasonInvalid, HeaderSignature+" must be 64 hex digits.")
	}
	fields, err := coveredFields(h)
	if err != nil {
		return nil, err
	}
	return &Pending{v: v, tokenID: tokenID, secret: secret, at: at, sig: got,
		parts: signed{method: r.Method, path: r.Path, timestamp: ts, nonce: nonce, query: r.Query, fields: fields}}, nil
}

// Finish checks the signature of the request whose body's SHA-256 is
// bodySum, then claims its nonce. A signature of the request without some
// of its query string and covered headers is refused with a message that
// names what it leaves out.
func (p *Pending) Finish(ctx context.Context, bodySum [sha256.Size]byte) error {
	s := &p.parts
	s.sum = bodySum
	m := hmac.New(sha256.New, p.secret)
	m.Write(s.text(s.all()))
	if !hmac.Equal(m.Sum(nil), p.sig) {
		if left, ok := s.uncovered(m, p.sig); ok {
			return refuse(ReasonInvalid, "The request's signature does not cover "+list(s.names(left))+
				": a signature covers the query string and every X-Sluice-* header but its own three (see Signed requests in the README).")
		}
		what := "METHOD, PATH, TIMESTAMP, NONCE and the body's SHA-256"
		if s.extras() > 0 {
			what = "METHOD, PATH, TIMESTAMP, NONCE, the body's SHA-256, " + list(s.names(s.all()))
		}
		return refuse(ReasonInvalid, "The request's signature does not match: sign "+what+" with this key's signing secret.")
	}
	// Remember the nonce while the timestamp could still be accepted, and a
	// second more for clocks that tick between here and the store (at
	// least a second: a body that streamed for long may end past it).
	ttl := max(p.at.Add(Window).Sub(p.v.now())+time.Second, time.Second)
	fresh, err := p.v.nonces.Claim(ctx, p.tokenID, s.nonce, ttl)
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
