package accounts

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
)

// SSOConfig is single sign-on through one OpenID Connect provider.
type SSOConfig struct {
	Issuer       string
	ClientID     string
	ClientSecret string // sent to the provider's token endpoint, never logged
	RedirectURL  string // <SLUICE_PUBLIC_URL>/auth/oidc/callback
	// Domains maps an email domain (lower case) to the organization its
	// new users join as members.
	Domains map[string]int64
	// HTTPClient talks to the provider; nil: one with a 10 s timeout.
	HTTPClient *http.Client
	Now        func() time.Time // nil: time.Now
	// FlowTTL is how long a sign-in may take at the provider; 0: 10 minutes.
	FlowTTL time.Duration
}

// UsedFlows remembers which sign-ins have come back, so each is finished
// once, on any node (signing.Nonces is one: Redis, or this node's memory).
// Claim reports whether key is new and, if so, keeps it for ttl.
type UsedFlows interface {
	Claim(ctx context.Context, tokenID int64, key string, ttl time.Duration) (fresh bool, err error)
}

// SSOCallback is what the provider's redirect back carries.
type SSOCallback struct {
	State string
	Code  string
	Error string // the provider's error code (access_denied, …); "" when it answered a code
}

// SSO signs people in through an OpenID Connect provider: the
// authorization code flow with PKCE (S256), a state that binds the
// callback to the browser that started it, and a nonce that binds the ID
// token to this sign-in.
type SSO struct {
	cfg      SSOConfig
	accounts *Service
	used     UsedFlows
	seal     *flowSeal
	log      *slog.Logger

	// The provider's discovery, done at start and, when it failed, again
	// on use, at most once per retryDiscovery.
	mu        sync.Mutex
	conn      *ssoProvider
	triedAt   time.Time
	lastError error
}

// ssoProvider is a discovered provider.
type ssoProvider struct {
	oauth    oauth2.Config
	verifier *oidc.IDTokenVerifier
}

const (
	// discoveryTimeout bounds one discovery, at start or on use.
	discoveryTimeout = 5 * time.Second
	// retryDiscovery spaces discoveries of an unreachable provider.
	retryDiscovery = 10 * time.Second
	// exchangeTimeout bounds the code exchange and the key fetch.
	exchangeTimeout = 10 * time.Second
)

// NewSSO returns single sign-on for cfg, discovering the provider at once
// (bounded by a few seconds). A provider that cannot be reached is logged
// and discovered again when someone signs in, so Sluice starts (and
// password sign-in works) while the provider is down; one whose discovery
// names another issuer is a mistake in the settings, returned. used keeps
// each sign-in to one callback; sessionSecret keys the flow cookie.
func NewSSO(ctx context.Context, cfg SSOConfig, accounts *Service, used UsedFlows, sessionSecret []byte, log *slog.Logger) (*SSO, error) {
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: exchangeTimeout}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.FlowTTL <= 0 {
		cfg.FlowTTL = 10 * time.Minute
	}
	seal, err := newFlowSeal(sessionSecret)
	if err != nil {
		return nil, err
	}
	s := &SSO{cfg: cfg, accounts: accounts, used: used, seal: seal, log: log}
	if _, err := s.provider(ctx); err != nil {
		var mismatch *oidc.IssuerMismatchError
		if errors.As(s.lastError, &mismatch) {
			return nil, fmt.Errorf("SLUICE_OIDC_ISSUER: the provider's discovery document names the issuer %q, not %q: set SLUICE_OIDC_ISSUER to exactly what its tokens say",
				mismatch.Discovered, mismatch.Provided)
		}
		log.Warn("single sign-on: the identity provider cannot be reached; trying again when someone signs in", "issuer", cfg.Issuer, "err", s.lastError)
	}
	return s, nil
}

// FlowTTL is how long a started sign-in is accepted back.
func (s *SSO) FlowTTL() time.Duration { return s.cfg.FlowTTL }

// provider returns the discovered provider, discovering it first when that
// has not succeeded yet (and was not tried within retryDiscovery).
func (s *SSO) provider(ctx context.Context) (*ssoProvider, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		return s.conn, nil
	}
	unavailable := &apperr.Error{Code: apperr.Unavailable, Reason: "sso_unavailable", RetryAfter: retryDiscovery,
		Message: "single sign-on is unavailable right now: the identity provider cannot be reached; try again shortly"}
	if now := s.cfg.Now(); !s.triedAt.IsZero() && now.Sub(s.triedAt) < retryDiscovery {
		return nil, unavailable
	}
	s.triedAt = s.cfg.Now()
	ctx, cancel := context.WithTimeout(oidc.ClientContext(context.WithoutCancel(ctx), s.cfg.HTTPClient), discoveryTimeout)
	defer cancel()
	p, err := oidc.NewProvider(ctx, s.cfg.Issuer)
	if err != nil {
		s.lastError = err
		unavailable.Cause = err
		return nil, unavailable
	}
	s.conn = &ssoProvider{
		oauth: oauth2.Config{ClientID: s.cfg.ClientID, ClientSecret: s.cfg.ClientSecret, RedirectURL: s.cfg.RedirectURL,
			Endpoint: p.Endpoint(), Scopes: []string{oidc.ScopeOpenID, "email"}},
		// The verifier checks the signature (against the provider's
		// keys), the issuer, the audience (our client id) and the expiry,
		// on our clock.
		verifier: p.Verifier(&oidc.Config{ClientID: s.cfg.ClientID, Now: s.cfg.Now}),
	}
	s.log.Info("single sign-on: the identity provider is ready", "issuer", s.cfg.Issuer)
	return s.conn, nil
}

// Begin starts a sign-in: it returns the provider's authorization URL to
// send the browser to, and the sealed flow for the browser to keep until
// it comes back (a cookie). next is where to go once signed in ("" for
// the dashboard).
func (s *SSO) Begin(ctx context.Context, next string) (authURL, flow string, err error) {
	p, err := s.provider(ctx)
	if err != nil {
		return "", "", err
	}
	f := ssoFlow{State: rand.Text(), Nonce: rand.Text(), Verifier: oauth2.GenerateVerifier(), Next: next,
		Expires: s.cfg.Now().Add(s.cfg.FlowTTL).Unix()}
	authURL = p.oauth.AuthCodeURL(f.State, oidc.Nonce(f.Nonce), oauth2.S256ChallengeOption(f.Verifier))
	return authURL, s.seal.seal(f), nil
}

// Finish completes the sign-in the browser's sealed flow started, with
// what the provider's redirect carried: the state must be the flow's and
// the flow unused; the code is exchanged with the PKCE verifier; the ID
// token must verify and carry the flow's nonce, an email and
// email_verified. It returns who signed in (SignInWithIdentity) and where
// to go next. Every refusal is an apperr with a reason and a message for
// the person signing in; the details go to the log, never a token.
func (s *SSO) Finish(ctx context.Context, flow string, cb SSOCallback, clientIP string) (models.Member, string, error) {
	m, next, err := s.finish(ctx, flow, cb, clientIP)
	if err != nil {
		e := apperr.As(err)
		if e.Code != apperr.Internal {
			s.log.Warn("single sign-on refused", "reason", e.Reason, "err", err)
		}
	}
	return m, next, err
}

func (s *SSO) finish(ctx context.Context, flow string, cb SSOCallback, clientIP string) (models.Member, string, error) {
	if flow == "" {
		return models.Member{}, "", apperr.WithReason(apperr.Unauthorized, "sso_flow_missing",
			"this sign-in was not started in this browser, or its cookie is gone; start again with “Sign in with SSO”")
	}
	now := s.cfg.Now()
	f, err := s.seal.open(flow, now)
	if err != nil {
		return models.Member{}, "", err
	}
	if cb.State == "" || subtle.ConstantTimeCompare([]byte(cb.State), []byte(f.State)) != 1 {
		return models.Member{}, "", apperr.WithReason(apperr.Unauthorized, "sso_state_mismatch",
			"this sign-in does not match the one this browser started (perhaps another tab started a newer one); start again with “Sign in with SSO”")
	}
	// One callback per flow, on any node: a copied cookie and callback
	// URL cannot sign in a second time.
	fresh, err := s.used.Claim(ctx, 0, "oidc:"+f.State, time.Unix(f.Expires, 0).Sub(now)+time.Minute)
	if err != nil {
		return models.Member{}, "", err
	}
	if !fresh {
		return models.Member{}, "", apperr.WithReason(apperr.Unauthorized, "sso_flow_used",
			"this sign-in has already been used; start again with “Sign in with SSO”")
	}
	if cb.Error != "" {
		return models.Member{}, "", providerRefused(cb.Error)
	}
	if cb.Code == "" {
		return models.Member{}, "", apperr.WithReason(apperr.Invalid, "sso_no_code",
			"the identity provider sent no authorization code; start again with “Sign in with SSO”")
	}
	p, err := s.provider(ctx)
	if err != nil {
		return models.Member{}, "", err
	}
	xctx, cancel := context.WithTimeout(oidc.ClientContext(ctx, s.cfg.HTTPClient), exchangeTimeout)
	defer cancel()
	tok, err := p.oauth.Exchange(xctx, cb.Code, oauth2.VerifierOption(f.Verifier))
	if err != nil {
		var refused *oauth2.RetrieveError
		if errors.As(err, &refused) && refused.Response != nil {
			// Only the status and the error code are kept for the log: a
			// provider's description may quote the code it refused.
			err = fmt.Errorf("the token endpoint answered %s, error %q", refused.Response.Status, refused.ErrorCode)
			if refused.Response.StatusCode < 500 {
				return models.Member{}, "", &apperr.Error{Code: apperr.Unauthorized, Reason: "sso_exchange_refused", Cause: err,
					Message: "the identity provider did not accept this sign-in; start again with “Sign in with SSO”"}
			}
		}
		return models.Member{}, "", &apperr.Error{Code: apperr.Unavailable, Reason: "sso_unavailable", Cause: err, RetryAfter: retryDiscovery,
			Message: "the identity provider could not complete the sign-in right now; try again shortly"}
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return models.Member{}, "", apperr.WithReason(apperr.BadUpstream, "sso_no_id_token",
			"the identity provider sent no ID token; ask your administrator to check the provider's settings")
	}
	idt, err := p.verifier.Verify(xctx, raw)
	if err != nil {
		return models.Member{}, "", &apperr.Error{Code: apperr.Unauthorized, Reason: "sso_token_invalid", Cause: err,
			Message: "the identity provider's answer could not be verified; start again with “Sign in with SSO”"}
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(f.Nonce)) != 1 {
		return models.Member{}, "", apperr.WithReason(apperr.Unauthorized, "sso_nonce_mismatch",
			"the identity provider's answer was not made for this sign-in; start again with “Sign in with SSO”")
	}
	var claims struct {
		Email         string     `json:"email"`
		EmailVerified verifiedIs `json:"email_verified"`
	}
	if err := idt.Claims(&claims); err != nil {
		return models.Member{}, "", &apperr.Error{Code: apperr.BadUpstream, Reason: "sso_bad_claims", Cause: err,
			Message: "the identity provider's answer could not be read; ask your administrator to check the provider's settings"}
	}
	if claims.Email == "" {
		return models.Member{}, "", apperr.WithReason(apperr.Forbidden, "sso_no_email",
			"the identity provider did not share your email address, which Sluice needs; ask your administrator to allow the email scope")
	}
	if !claims.EmailVerified {
		return models.Member{}, "", apperr.WithReason(apperr.Forbidden, "sso_email_unverified",
			"your email address "+models.NormalizeEmail(claims.Email)+" is not verified at the identity provider; verify it there, then sign in again")
	}
	m, err := s.accounts.SignInWithIdentity(ctx, Identity{Issuer: idt.Issuer, Subject: idt.Subject, Email: claims.Email}, s.cfg.Domains, clientIP)
	return m, f.Next, err
}

// providerRefused is the refusal of a callback that carries the
// provider's error instead of a code. Only the error code, from a known
// list, is shown: its description is text anyone can put in a link.
func providerRefused(code string) error {
	if code == "access_denied" {
		return apperr.WithReason(apperr.Unauthorized, "sso_denied", "the sign-in was cancelled or refused at the identity provider")
	}
	switch code {
	case "login_required", "interaction_required", "consent_required", "account_selection_required",
		"invalid_request", "unauthorized_client", "unsupported_response_type", "invalid_scope",
		"server_error", "temporarily_unavailable", "request_not_supported", "invalid_request_uri":
	default:
		code = "an unknown error"
	}
	return apperr.WithReason(apperr.Unauthorized, "sso_provider_error",
		"the identity provider refused the sign-in ("+code+"); try again, or ask your administrator")
}

// verifiedIs reads email_verified as a boolean or, as some providers send
// it, the string "true" or "false"; absent is false.
type verifiedIs bool

func (v *verifiedIs) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "true", `"true"`:
		*v = true
	case "false", `"false"`, "null":
		*v = false
	default:
		return fmt.Errorf("email_verified is %s, not a boolean", b)
	}
	return nil
}
