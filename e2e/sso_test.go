package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oauth2-proxy/mockoidc"

	"github.com/sluicehq/sluice/internal/testsync"
)

// TestSSOStartup: what single sign-on's settings do at start. An
// organization SLUICE_OIDC_DOMAINS names that does not exist, and an
// issuer the provider's discovery contradicts, stop the start with a
// message naming the setting; a provider that cannot be reached does not:
// Sluice starts, says so in its log, offers the button, and answers a
// sign-in with 503 on the login page until the provider is back.
func TestSSOStartup(t *testing.T) {
	t.Parallel()
	idp, err := mockoidc.Run()
	if err != nil {
		t.Fatal(err)
	}
	defer idp.Shutdown()
	env := func(over map[string]string) map[string]string {
		m := map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4", "SLUICE_ADMIN_PASSWORD": "admin-password",
			"SLUICE_PUBLIC_URL": "http://127.0.0.1:8080", "SLUICE_OIDC_ISSUER": idp.Issuer(),
			"SLUICE_OIDC_CLIENT_ID": idp.ClientID, "SLUICE_OIDC_CLIENT_SECRET": idp.ClientSecret}
		for k, v := range over {
			m[k] = v
		}
		return m
	}
	refused := func(over map[string]string, want string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		e := env(over)
		out := &testsync.Buffer{}
		err := run(ctx, []string{"-addr", "127.0.0.1:0"}, func(k string) string { return e[k] }, out)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("start: %v, want an error containing %q\n%s", err, want, out.String())
		}
		if strings.Contains(err.Error()+out.String(), idp.ClientSecret) {
			t.Fatal("the client secret was printed")
		}
	}
	refused(map[string]string{"SLUICE_OIDC_DOMAINS": "example.com=999"},
		"SLUICE_OIDC_DOMAINS: example.com=999: there is no organization 999 (create it first; its id is on the admin's organizations page)")
	localhost := strings.Replace(idp.Issuer(), "127.0.0.1", "localhost", 1)
	refused(map[string]string{"SLUICE_OIDC_ISSUER": localhost},
		`SLUICE_OIDC_ISSUER: the provider's discovery document names the issuer "`+idp.Issuer()+`", not "`+localhost+`"`)

	// A provider nobody answers at.
	down := "http://" + freeAddr(t) + "/oidc"
	base, out, stop := start(t, env(map[string]string{"SLUICE_OIDC_ISSUER": down}))
	defer stop()
	if !strings.Contains(out.String(), "single sign-on: the identity provider cannot be reached; trying again when someone signs in") {
		t.Errorf("the log does not say the provider is down:\n%s", out.String())
	}
	body := func(path string) (int, string) {
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, page := body("/login"); status != http.StatusOK || !strings.Contains(page, `data-testid="sso-start"`) {
		t.Fatalf("login page: %d\n%s", status, page)
	}
	status, page := body("/auth/oidc/start")
	if status != http.StatusServiceUnavailable || !strings.Contains(page, "single sign-on is unavailable right now: the identity provider cannot be reached; try again shortly") ||
		!strings.Contains(page, `data-testid="login-form"`) {
		t.Fatalf("start while the provider is down: %d\n%s", status, page)
	}
}
