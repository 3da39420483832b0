package e2e

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/oauth2-proxy/mockoidc"

	"github.com/sluicehq/sluice/internal/app"
	"github.com/sluicehq/sluice/internal/testsync"
)

// TestBrowserSSO signs in with single sign-on in a real browser, at
// desktop and phone width, against a real OpenID Connect provider
// (mockoidc, which approves whoever is queued): the login page shows
// "Sign in with SSO"; an account whose email the provider has not
// verified is sent back to the login page, told why; a verified one lands
// on the dashboard of an organization of its own, signed in. Screenshots
// of the login page, the refusal and the dashboard go to
// SLUICE_SCREENSHOT_DIR when it is set.
func TestBrowserSSO(t *testing.T) {
	t.Parallel()
	idp, err := mockoidc.Run()
	if err != nil {
		t.Fatal(err)
	}
	defer idp.Shutdown()
	// The provider must know the redirect URL before Sluice starts, so
	// Sluice gets an address picked now.
	addr := freeAddr(t)
	base := "http://" + addr
	stop := startAt(t, addr, map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4", "SLUICE_ADMIN_PASSWORD": "admin-password",
		"SLUICE_PUBLIC_URL": base, "SLUICE_OIDC_ISSUER": idp.Issuer(), "SLUICE_OIDC_CLIENT_ID": idp.ClientID, "SLUICE_OIDC_CLIENT_SECRET": idp.ClientSecret})
	defer stop()

	for _, size := range []struct {
		name          string
		width, height int64
	}{{"desktop", 1280, 900}, {"phone", 390, 844}} {
		t.Run(size.name, func(t *testing.T) {
			ctx := browserContext(t)
			email := "sso-" + size.name + "@example.com"
			err := chromedp.Do(ctx,
				chromedp.EmulateViewport(size.width, size.height),
				chromedp.Navigate(base+"/login"),
				chromedp.WaitVisible(chromedp.CSS(`[data-testid=sso-start]`)),
			)
			if err != nil {
				t.Fatalf("login page: %v", err)
			}
			if got := strings.TrimSpace(text(t, ctx, `[data-testid=sso-start]`)); got != "Sign in with SSO" {
				t.Fatalf("the SSO button says %q", got)
			}
			screenshot(t, ctx, size.name+"-login-sso")
			fitsWidth(t, ctx, size.width, "the login page")

			idp.QueueUser(&mockoidc.MockUser{Subject: "unverified-" + size.name, Email: email, EmailVerified: false})
			err = chromedp.Do(ctx,
				chromedp.Click(chromedp.CSS(`[data-testid=sso-start]`)),
				chromedp.WaitVisible(chromedp.CSS(`[data-testid=form-error]`)),
			)
			if err != nil {
				t.Fatalf("unverified sign-in: %v", err)
			}
			want := "your email address " + email + " is not verified at the identity provider; verify it there, then sign in again"
			if got := strings.TrimSpace(text(t, ctx, `[data-testid=form-error]`)); got != want {
				t.Fatalf("refusal %q, want %q", got, want)
			}
			screenshot(t, ctx, size.name+"-login-sso-refused")
			fitsWidth(t, ctx, size.width, "the login page with a refusal")

			idp.QueueUser(&mockoidc.MockUser{Subject: "verified-" + size.name, Email: email, EmailVerified: true})
			err = chromedp.Do(ctx,
				chromedp.Click(chromedp.CSS(`[data-testid=sso-start]`)),
				chromedp.WaitVisible(chromedp.CSS(`[data-testid=dashboard]`)),
			)
			if err != nil {
				t.Fatalf("verified sign-in: %v", err)
			}
			if got := text(t, ctx, `[data-testid=nav-user]`); !strings.Contains(got, email) || !strings.Contains(got, "owner") {
				t.Fatalf("signed in as %q, want %s, owner of an organization of their own", got, email)
			}
			if path, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.pathname`)); err != nil || path != "/dashboard" {
				t.Fatalf("landed on %q %v", path, err)
			}
			screenshot(t, ctx, size.name+"-sso-dashboard")
			fitsWidth(t, ctx, size.width, "the dashboard after single sign-on")
		})
	}
}

// freeAddr is a loopback address with a port nothing listens on just now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startAt is start on a given address.
func startAt(t *testing.T, addr string, env map[string]string) func() error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &testsync.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, []string{"-addr", addr}, func(k string) string { return env[k] }, out, app.Options{})
	}()
	t.Cleanup(cancel)
	deadline := time.Now().Add(startWait)
	for !listening.MatchString(out.String()) {
		select {
		case err := <-done:
			t.Fatalf("run returned before listening: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not listening after %s:\n%s", startWait, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return func() error { cancel(); return <-done }
}
