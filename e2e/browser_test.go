package e2e

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/signing"
	"github.com/sluicehq/sluice/upstream/mock"
)

// browserContext starts headless Chromium, or skips when it is not
// installed — except in CI, where a missing browser is a failure.
func browserContext(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed; .ci/run installs it")
		}
		t.Skip("chromium is not installed: skipping the browser test (apt-get install chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	failOnCSPViolations(t, ctx)
	return ctx
}

// failOnCSPViolations fails t if the browser blocks anything under the
// pages' Content-Security-Policy: a page relying on an inline style or
// script would look or work differently from what the tests check.
func failOnCSPViolations(t *testing.T, ctx context.Context) {
	t.Helper()
	var mu sync.Mutex
	var violations []string
	chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*cdplog.EventEntryAdded); ok && e.Entry.Source == cdplog.EntrySourceSecurity {
			mu.Lock()
			violations = append(violations, e.Entry.URL+": "+e.Entry.Text)
			mu.Unlock()
		}
	})
	err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, cdplog.Enable, cdp.Empty{})
		return err
	}))
	if err != nil {
		t.Fatalf("enable the browser's log: %v", err)
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, v := range violations {
			t.Errorf("the browser blocked something under the CSP: %s", v)
		}
	})
}

// screenshot saves a PNG of the page to SLUICE_SCREENSHOT_DIR, when set, so a
// person can look at what users see.
func screenshot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("SLUICE_SCREENSHOT_DIR")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// fitsWidth fails when the page is wider than the window: on a phone that
// means sideways scrolling.
func fitsWidth(t *testing.T, ctx context.Context, width int64, page string) {
	t.Helper()
	got, err := chromedp.Run(ctx, chromedp.Evaluate[int64](`document.documentElement.scrollWidth`))
	if err != nil {
		t.Fatal(err)
	}
	if got > width {
		t.Errorf("%s is %d px wide in a %d px window", page, got, width)
	}
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// TestBrowserJourney signs up, issues and revokes a token and, as the admin,
// edits a tier — in a real browser, on a desktop and a phone-sized window.
func TestBrowserJourney(t *testing.T) {
	t.Parallel()
	ctx := browserContext(t)
	base, _, stop := start(t, map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4", "SLUICE_ADMIN_PASSWORD": "admin-password"})
	defer stop()

	for _, size := range []struct {
		name          string
		width, height int64
	}{{"desktop", 1280, 900}, {"phone", 390, 844}} {
		email := size.name + "@example.com"
		err := chromedp.Do(ctx,
			chromedp.EmulateViewport(size.width, size.height),
			chromedp.Navigate(base+"/signup"),
			chromedp.SendKeys(chromedp.CSS(`input[name=email]`), email),
			chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "short"),
			chromedp.SendKeys(chromedp.CSS(`input[name=organization]`), "春联工坊 "+size.name),
			chromedp.SetAttributeValue(chromedp.CSS(`input[name=password]`), "minlength", "1"), // let the server say it
			chromedp.Click(chromedp.CSS(`[data-testid=signup-form] button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=form-error]`)),
		)
		if err != nil {
			t.Fatalf("%s: weak password: %v", size.name, err)
		}
		if msg := text(t, ctx, `[data-testid=form-error]`); !strings.Contains(msg, "at least 8") {
			t.Fatalf("%s: error shown %q", size.name, msg)
		}
		err = chromedp.Do(ctx,
			chromedp.SetValue(chromedp.CSS(`input[name=password]`), "password123"),
			chromedp.Click(chromedp.CSS(`[data-testid=signup-form] button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=dashboard]`)),
		)
		if err != nil {
			t.Fatalf("%s: signup: %v", size.name, err)
		}
		if tier := strings.ToLower(text(t, ctx, `[data-testid=tier]`)); !strings.Contains(tier, "free") || !strings.Contains(tier, "30") {
			t.Fatalf("%s: tier card %q", size.name, tier)
		}
		screenshot(t, ctx, size.name+"-dashboard")
		fitsWidth(t, ctx, size.width, "the dashboard")

		err = chromedp.Do(ctx,
			chromedp.Navigate(base+"/tokens"),
			chromedp.SendKeys(chromedp.CSS(`[data-testid=create-token-form] input[name=name]`), "laptop"),
			chromedp.Click(chromedp.CSS(`[data-testid=create-token-form] button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=new-token-secret]`)),
		)
		if err != nil {
			t.Fatalf("%s: create token: %v", size.name, err)
		}
		secret := strings.TrimSpace(text(t, ctx, `[data-testid=new-token-secret]`))
		if !strings.HasPrefix(secret, "sk_sluice_") {
			t.Fatalf("%s: secret %q", size.name, secret)
		}
		screenshot(t, ctx, size.name+"-token-created")
		resp := client{t, base}.call("POST", "/v1/chat/completions", secret, `{"model":"sluice-local","messages":[{"role":"user","content":"春联"}]}`, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: the token from the page: %d", size.name, resp.StatusCode)
		}

		// Require signed requests, confirming in the second step: the
		// signing secret is shown once, a signed call passes, an unsigned
		// one is refused.
		err = chromedp.Do(ctx,
			chromedp.Navigate(base+"/tokens"),
			chromedp.Click(chromedp.CSS(`[data-testid=signing-open]`)),
			chromedp.Click(chromedp.CSS(`[data-testid=signing-on] button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=signing-secret-value]`)),
		)
		if err != nil {
			t.Fatalf("%s: require signing: %v", size.name, err)
		}
		signingSecret := strings.TrimSpace(text(t, ctx, `[data-testid=signing-secret-value]`))
		if !strings.HasPrefix(signingSecret, "sk_sluice_sign_") {
			t.Fatalf("%s: signing secret %q", size.name, signingSecret)
		}
		if got := strings.TrimSpace(text(t, ctx, `[data-testid=token-row] [data-testid=token-signing]`)); got != "required" {
			t.Fatalf("%s: signing column %q, want required", size.name, got)
		}
		screenshot(t, ctx, size.name+"-token-signing")
		fitsWidth(t, ctx, size.width, "the token page with a signing secret")
		body := `{"model":"sluice-local","messages":[{"role":"user","content":"签名"}]}`
		now := time.Now().Unix()
		sig := map[string]string{signing.HeaderTimestamp: strconv.FormatInt(now, 10), signing.HeaderNonce: size.name,
			signing.HeaderSignature: signing.Sign([]byte(signingSecret), "POST", "/v1/chat/completions", now, size.name, []byte(body))}
		if r := (client{t, base}).callHeaders("POST", "/v1/chat/completions", secret, body, sig, nil); r.StatusCode != 200 {
			t.Fatalf("%s: a call signed with the page's secret: %d", size.name, r.StatusCode)
		}
		if r := (client{t, base}).call("POST", "/v1/chat/completions", secret, body, nil); r.StatusCode != 401 {
			t.Fatalf("%s: an unsigned call with signing required: %d", size.name, r.StatusCode)
		}

		// Revoke, confirming in the second step (no script: the CSP allows none).
		err = chromedp.Do(ctx,
			chromedp.Navigate(base+"/tokens"),
			chromedp.Click(chromedp.CSS(`[data-testid=revoke-open]`)),
			chromedp.Click(chromedp.CSS(`[data-testid=revoke] button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=flash]`)),
		)
		if err != nil {
			t.Fatalf("%s: revoke: %v", size.name, err)
		}
		if status := strings.ToLower(text(t, ctx, `[data-testid=token-row] [data-testid=status]`)); !strings.Contains(status, "revoked") {
			t.Fatalf("%s: status after revoke %q", size.name, status)
		}
		screenshot(t, ctx, size.name+"-tokens")
		fitsWidth(t, ctx, size.width, "the token page")
		if r := (client{t, base}).call("POST", "/v1/chat/completions", secret, `{"model":"sluice-local","messages":[{"role":"user","content":"hi"}]}`, nil); r.StatusCode != 401 {
			t.Fatalf("%s: revoked token still works: %d", size.name, r.StatusCode)
		}
		if err := chromedp.Do(ctx, chromedp.Submit(chromedp.CSS(`[data-testid=logout]`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid=login-form]`))); err != nil {
			t.Fatalf("%s: logout: %v", size.name, err)
		}
	}

	err := chromedp.Do(ctx,
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(base+"/login"),
		chromedp.SendKeys(chromedp.CSS(`input[name=email]`), "admin@localhost"),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "admin-password"),
		chromedp.Submit(chromedp.CSS(`[data-testid=login-form]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=dashboard]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=nav-admin]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=admin-overview]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=admin-nav-tiers]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=admin-tiers]`)),
		chromedp.SetValue(chromedp.CSS(`[data-testid=tier-form-free] input[name=capacity]`), "45"),
		chromedp.Submit(chromedp.CSS(`[data-testid=tier-form-free]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=flash]`)),
	)
	if err != nil {
		t.Fatalf("admin edits a tier: %v", err)
	}
	got, err := chromedp.Run(ctx, chromedp.Value(chromedp.CSS(`[data-testid=tier-form-free] input[name=capacity]`)))
	if err != nil || got != "45" {
		t.Fatalf("capacity after save: %q %v", got, err)
	}
	screenshot(t, ctx, "admin-tiers")
	err = chromedp.Do(ctx, chromedp.EmulateViewport(390, 844), chromedp.Reload())
	if err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "phone-admin-tiers")
	fitsWidth(t, ctx, 390, "the admin page")

	// The admin adds a provider key in the browser; the page never shows it again.
	provider := httptest.NewServer(mock.New(mock.Config{Keys: map[string]float64{"sk-browser-secret": 0}}))
	defer provider.Close()
	err = chromedp.Do(ctx,
		chromedp.EmulateViewport(1280, 900),
		chromedp.Click(chromedp.CSS(`[data-testid=nav-upstreams]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=add-upstream-form]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=name]`), "mock-provider"),
		chromedp.SendKeys(chromedp.CSS(`input[name=base_url]`), provider.URL+"/v1"),
		chromedp.SendKeys(chromedp.CSS(`input[name=api_key]`), "sk-browser-secret"),
		chromedp.SendKeys(chromedp.CSS(`input[name=models]`), "gpt-4o-mini"),
		chromedp.Submit(chromedp.CSS(`[data-testid=add-upstream-form]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=upstream-row]`)),
	)
	if err != nil {
		t.Fatalf("adding a provider key: %v", err)
	}
	html, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS(`body`)))
	if err != nil || strings.Contains(html, "sk-browser-secret") || !strings.Contains(html, "cret") {
		t.Fatalf("the upstreams page must show only the last four characters (%v)", err)
	}
	if state := strings.ToLower(text(t, ctx, `[data-testid=upstream-state]`)); state != "healthy" {
		t.Fatalf("state %q", state)
	}
	screenshot(t, ctx, "admin-upstreams")
	err = chromedp.Do(ctx, chromedp.EmulateViewport(390, 844), chromedp.Reload())
	if err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "phone-admin-upstreams")
	fitsWidth(t, ctx, 390, "the upstreams page")
}
