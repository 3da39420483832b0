package accounts

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/oauth2-proxy/mockoidc"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/signing"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func wantReason(t *testing.T, err error, code apperr.Code, reason, message string) {
	t.Helper()
	e := apperr.As(err)
	if err == nil || e.Code != code || e.Reason != reason || !strings.Contains(e.Message, message) {
		t.Fatalf("got %v (reason %q), want %s %s %q", err, e.Reason, code, reason, message)
	}
}

// TestFlowSealOpensWhatItSealed: the flow comes back whole, and the
// sealed value shows none of it (the nonce and the verifier are secrets
// the browser has no use for).
func TestFlowSealOpensWhatItSealed(t *testing.T) {
	s, err := newFlowSeal(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2027, 3, 15, 10, 0, 0, 0, time.UTC)
	f := ssoFlow{State: "state-1", Nonce: "nonce-1", Verifier: "verifier-1", Next: "/invitations/x", Expires: now.Add(10 * time.Minute).Unix()}
	v := s.seal(f)
	got, err := s.open(v, now)
	if err != nil || got != f {
		t.Fatalf("open: %+v %v, want %+v", got, err, f)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(v)
	for _, secret := range []string{"state-1", "nonce-1", "verifier-1", "invitations"} {
		if strings.Contains(string(raw), secret) || strings.Contains(v, secret) {
			t.Errorf("the sealed flow shows %q", secret)
		}
	}
	if s.seal(f) == v {
		t.Error("sealing the same flow twice gave the same value: the GCM nonce is not random")
	}
}

// TestFlowSealRefusesTampering: any change, a cut, another secret's seal,
// or something that is not a seal at all is refused with one message.
func TestFlowSealRefusesTampering(t *testing.T) {
	s, _ := newFlowSeal(testSecret)
	other, _ := newFlowSeal([]byte("another secret of thirty-two bytes!"))
	now := time.Now()
	f := ssoFlow{State: "s", Nonce: "n", Verifier: "v", Expires: now.Add(time.Minute).Unix()}
	v := s.seal(f)
	raw, _ := base64.RawURLEncoding.DecodeString(v)
	flipped := append([]byte(nil), raw...)
	flipped[len(flipped)/2] ^= 1
	for name, bad := range map[string]string{
		"one bit changed":     base64.RawURLEncoding.EncodeToString(flipped),
		"cut short":           v[:len(v)-4],
		"only a nonce":        base64.RawURLEncoding.EncodeToString(raw[:12]),
		"another secret's":    other.seal(f),
		"not base64":          "%%%",
		"padded base64":       base64.URLEncoding.EncodeToString(raw),
		"empty":               "",
		"an empty flow":       s.seal(ssoFlow{Expires: now.Add(time.Minute).Unix()}),
		"a flow with no pkce": s.seal(ssoFlow{State: "s", Nonce: "n", Expires: now.Add(time.Minute).Unix()}),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := s.open(bad, now)
			wantReason(t, err, apperr.Unauthorized, "sso_flow_invalid", "this sign-in could not be checked")
		})
	}
}

// TestFlowSealExpires: a flow is accepted until its expiry on the injected
// clock, not a second after.
func TestFlowSealExpires(t *testing.T) {
	s, _ := newFlowSeal(testSecret)
	clock := clocktest.New(time.Date(2027, 3, 15, 10, 0, 0, 0, time.UTC))
	v := s.seal(ssoFlow{State: "s", Nonce: "n", Verifier: "v", Expires: clock.Now().Add(10 * time.Minute).Unix()})
	clock.Advance(10*time.Minute - time.Second)
	if _, err := s.open(v, clock.Now()); err != nil {
		t.Fatalf("a second before expiry: %v", err)
	}
	clock.Advance(time.Second)
	_, err := s.open(v, clock.Now())
	wantReason(t, err, apperr.Unauthorized, "sso_flow_expired", "this sign-in took too long and has expired")
}

// TestFinishRefusesBeforeTheProvider: the checks made before the provider
// is asked — no cookie, a state that is not the flow's, a flow that came
// back before (a replay, also with the right state), an expired one, and
// the provider's own error, whose description is never shown — each with
// its message. The provider here cannot be reached: none of these needs it.
func TestFinishRefusesBeforeTheProvider(t *testing.T) {
	clock := clocktest.New(time.Date(2027, 3, 15, 10, 0, 0, 0, time.UTC))
	s, err := NewSSO(context.Background(), SSOConfig{Issuer: "http://127.0.0.1:1/oidc", ClientID: "c", ClientSecret: "x",
		RedirectURL: "http://127.0.0.1/auth/oidc/callback", Now: clock.Now}, nil, signing.NewMemoryNonces(clock.Now), testSecret,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	flows := 0
	flow := func() (string, string) {
		flows++
		f := ssoFlow{State: fmt.Sprint("state-", flows), Nonce: "n", Verifier: "v", Expires: clock.Now().Add(s.FlowTTL()).Unix()}
		return s.seal.seal(f), f.State
	}
	ctx := context.Background()

	_, _, err = s.Finish(ctx, "", SSOCallback{State: "x", Code: "c"}, "192.0.2.1")
	wantReason(t, err, apperr.Unauthorized, "sso_flow_missing", "this sign-in was not started in this browser")

	v, state := flow()
	_, _, err = s.Finish(ctx, v, SSOCallback{State: state + "x", Code: "c"}, "192.0.2.1")
	wantReason(t, err, apperr.Unauthorized, "sso_state_mismatch", "does not match the one this browser started")
	_, _, err = s.Finish(ctx, v, SSOCallback{Code: "c"}, "192.0.2.1")
	wantReason(t, err, apperr.Unauthorized, "sso_state_mismatch", "does not match")

	// The provider's error: its code from a known list, never its text.
	_, _, err = s.Finish(ctx, v, SSOCallback{State: state, Error: "access_denied"}, "192.0.2.1")
	wantReason(t, err, apperr.Unauthorized, "sso_denied", "the sign-in was cancelled or refused at the identity provider")
	// The same flow again, state and all: a replay.
	_, _, err = s.Finish(ctx, v, SSOCallback{State: state, Code: "c"}, "192.0.2.1")
	wantReason(t, err, apperr.Unauthorized, "sso_flow_used", "this sign-in has already been used")

	v, state = flow()
	_, _, err = s.Finish(ctx, v, SSOCallback{State: state, Error: "Call <b>555-0100</b> now"}, "192.0.2.1")
	wantReason(t, err, apperr.Unauthorized, "sso_provider_error", "the identity provider refused the sign-in (an unknown error)")
	v, state = flow()
	_, _, err = s.Finish(ctx, v, SSOCallback{State: state, Error: "temporarily_unavailable"}, "192.0.2.1")
	wantReason(t, err, apperr.Unauthorized, "sso_provider_error", "(temporarily_unavailable)")

	v, state = flow()
	_, _, err = s.Finish(ctx, v, SSOCallback{State: state}, "192.0.2.1")
	wantReason(t, err, apperr.Invalid, "sso_no_code", "the identity provider sent no authorization code")

	v, state = flow()
	clock.Advance(s.FlowTTL())
	_, _, err = s.Finish(ctx, v, SSOCallback{State: state, Code: "c"}, "192.0.2.1")
	wantReason(t, err, apperr.Unauthorized, "sso_flow_expired", "has expired")

	// Past the checks, the provider is asked, and it cannot be reached.
	v, state = flow()
	clock.Advance(retryDiscovery)
	_, _, err = s.Finish(ctx, v, SSOCallback{State: state, Code: "c"}, "192.0.2.1")
	wantReason(t, err, apperr.Unavailable, "sso_unavailable", "the identity provider cannot be reached")
}

func TestEmailVerifiedClaim(t *testing.T) {
	for in, want := range map[string]bool{`true`: true, `"true"`: true, `false`: false, `"false"`: false, `null`: false} {
		var v verifiedIs
		if err := v.UnmarshalJSON([]byte(in)); err != nil || bool(v) != want {
			t.Errorf("%s: %v %v, want %v", in, v, err, want)
		}
	}
	var v verifiedIs
	if err := v.UnmarshalJSON([]byte(`"yes"`)); err == nil {
		t.Error(`"yes" was read as a boolean`)
	}
}

// TestDiscoveryIsRetriedOnUse: a provider down at start is discovered when
// someone signs in, at most once per retryDiscovery, and from then on
// sign-ins start.
func TestDiscoveryIsRetriedOnUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing answers there yet
	clock := clocktest.New(time.Date(2027, 3, 15, 10, 0, 0, 0, time.UTC))
	s, err := NewSSO(context.Background(), SSOConfig{Issuer: "http://" + addr + mockoidc.IssuerBase, ClientID: "c", ClientSecret: "x",
		RedirectURL: "http://127.0.0.1/auth/oidc/callback", Now: clock.Now}, nil, signing.NewMemoryNonces(clock.Now), testSecret,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	idp, err := mockoidc.NewServer(nil)
	if err != nil {
		t.Fatal(err)
	}
	if ln, err = net.Listen("tcp", addr); err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	if err := idp.Start(ln, nil); err != nil {
		t.Fatal(err)
	}
	defer idp.Shutdown()
	// Tried at start, so not again within retryDiscovery.
	_, _, err = s.Begin(context.Background(), "")
	wantReason(t, err, apperr.Unavailable, "sso_unavailable", "single sign-on is unavailable right now")
	if e := apperr.As(err); e.RetryAfter != retryDiscovery {
		t.Errorf("Retry-After %s", e.RetryAfter)
	}
	clock.Advance(retryDiscovery)
	to, flow, err := s.Begin(context.Background(), "")
	if err != nil || !strings.HasPrefix(to, idp.AuthorizationEndpoint()+"?") || flow == "" {
		t.Fatalf("once the provider is up: %q %v", to, err)
	}
}
