package accounts

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"time"

	"github.com/sluicehq/sluice/apperr"
)

// ssoFlow is what one single sign-on carries from its start to its
// callback: the state the provider must send back, the nonce its ID token
// must carry, the PKCE verifier of the challenge sent, where to go once
// signed in, and when it stops being accepted.
type ssoFlow struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	Next     string `json:"r,omitempty"`
	Expires  int64  `json:"e"` // Unix seconds
}

// flowSeal is the authenticated encryption of flows into the browser's
// cookie (AES-256-GCM): the browser can neither read the nonce and the
// verifier nor change anything. Its key is derived from the session
// secret, which every node shares, so any node can finish a sign-in
// another started, and no key of its own needs keeping.
type flowSeal struct {
	aead cipher.AEAD
}

// flowAAD binds a sealed value to this use: nothing else sealed with a key
// derived from the same secret opens as a flow.
var flowAAD = []byte("sluice oidc flow v1")

func newFlowSeal(sessionSecret []byte) (*flowSeal, error) {
	// HKDF with a label of its own: the sessions' HMAC key and this one
	// are different keys, though both come from the one secret.
	key, err := hkdf.Key(sha256.New, sessionSecret, nil, "sluice oidc flow cookie", 32)
	if err != nil {
		return nil, apperr.Wrap(err, "derive the flow key")
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, apperr.Wrap(err, "flow cipher")
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, apperr.Wrap(err, "flow cipher")
	}
	return &flowSeal{aead: aead}, nil
}

// seal returns f sealed, in URL-safe base64 (a cookie's value).
func (s *flowSeal) seal(f ssoFlow) string {
	plain, _ := json.Marshal(f) // a struct of strings and a number
	nonce := make([]byte, s.aead.NonceSize())
	_, _ = rand.Read(nonce) // never fails (crypto/rand panics instead)
	return base64.RawURLEncoding.EncodeToString(s.aead.Seal(nonce, nonce, plain, flowAAD))
}

// open returns the flow sealed in v while it is not expired at now. A
// value that is not one seal made (changed, cut, from another secret) is
// refused with reason sso_flow_invalid, an expired one with
// sso_flow_expired.
func (s *flowSeal) open(v string, now time.Time) (ssoFlow, error) {
	raw, err := base64.RawURLEncoding.Strict().DecodeString(v)
	if err != nil || len(raw) < s.aead.NonceSize() {
		return ssoFlow{}, flowInvalid()
	}
	plain, err := s.aead.Open(nil, raw[:s.aead.NonceSize()], raw[s.aead.NonceSize():], flowAAD)
	if err != nil {
		return ssoFlow{}, flowInvalid()
	}
	var f ssoFlow
	if err := json.Unmarshal(plain, &f); err != nil || f.State == "" || f.Nonce == "" || f.Verifier == "" {
		return ssoFlow{}, flowInvalid()
	}
	if !now.Before(time.Unix(f.Expires, 0)) {
		return ssoFlow{}, apperr.WithReason(apperr.Unauthorized, "sso_flow_expired",
			"this sign-in took too long and has expired; start again with “Sign in with SSO”")
	}
	return f, nil
}

func flowInvalid() error {
	return apperr.WithReason(apperr.Unauthorized, "sso_flow_invalid",
		"this sign-in could not be checked (it was changed, or started elsewhere); start again with “Sign in with SSO”")
}
