package e2e

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserTokenLimits creates a token with limits on the tokens page,
// sees them hold over the API, and changes them in the token's edit form,
// in a real browser on a desktop and a phone-sized window.
func TestBrowserTokenLimits(t *testing.T) {
	t.Parallel()
	ctx := browserContext(t)
	base, _, stop := start(t, map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4", "SLUICE_ADMIN_PASSWORD": "admin-password"})
	defer stop()
	api := client{t, base}
	chat := func(key, model string) int {
		// Long enough not to weigh more as a tiny prompt.
		return api.call("POST", "/v1/chat/completions", key, `{"model":"`+model+`","messages":[{"role":"user","content":"a couplet about good fortune"}]}`, nil).StatusCode
	}

	for _, size := range []struct {
		name          string
		width, height int64
	}{{"desktop", 1280, 900}, {"phone", 390, 844}} {
		err := chromedp.Do(ctx,
			chromedp.EmulateViewport(size.width, size.height),
			chromedp.Navigate(base+"/signup"),
			chromedp.SendKeys(chromedp.CSS(`input[name=email]`), size.name+"-limits@example.com"),
			chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "password123"),
			chromedp.SendKeys(chromedp.CSS(`input[name=organization]`), "Limits "+size.name),
			chromedp.Click(chromedp.CSS(`[data-testid=signup-form] button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=dashboard]`)),
			chromedp.Navigate(base+"/tokens"),
			chromedp.SendKeys(chromedp.CSS(`#token-name`), "deploy bot"),
			chromedp.SendKeys(chromedp.CSS(`#token-models`), "sluice-local"),
			chromedp.SendKeys(chromedp.CSS(`#token-budget`), "5.00"),
			chromedp.SendKeys(chromedp.CSS(`#token-rate`), "2"),
			chromedp.SendKeys(chromedp.CSS(`#token-ips`), "127.0.0.1, ::1"),
		)
		if err != nil {
			t.Fatalf("%s: the create form: %v", size.name, err)
		}
		screenshot(t, ctx, size.name+"-token-limits-form")
		fitsWidth(t, ctx, size.width, "the tokens page's create form")
		err = chromedp.Do(ctx,
			chromedp.Click(chromedp.CSS(`[data-testid=create-token-form] button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=new-token-secret]`)),
		)
		if err != nil {
			t.Fatalf("%s: create a token with limits: %v", size.name, err)
		}
		limits := text(t, ctx, `[data-testid=token-row] [data-testid=token-limits]`)
		for _, want := range []string{"models: sluice-local", "$5.00 a month", "2 requests a minute", "from 127.0.0.1/32, ::1/128"} {
			if !strings.Contains(limits, want) {
				t.Errorf("%s: the list shows %q, without %q", size.name, limits, want)
			}
		}
		screenshot(t, ctx, size.name+"-token-limits")
		fitsWidth(t, ctx, size.width, "the tokens page with a token's limits")
		secret := strings.TrimSpace(text(t, ctx, `[data-testid=new-token-secret]`))

		// The limits hold: another model is unknown to it; two requests a minute.
		if code := chat(secret, "gpt-4o"); code != 404 {
			t.Errorf("%s: a model outside the token's list: %d", size.name, code)
		}
		if code := chat(secret, "sluice-local"); code != 200 {
			t.Errorf("%s: the allowed model: %d", size.name, code)
		}
		if code := chat(secret, "sluice-local"); code != 429 {
			t.Errorf("%s: past the token's 2 a minute (the unknown model cost one): %d", size.name, code)
		}

		// Change it: the rate up, the models list emptied (every model).
		err = chromedp.Do(ctx,
			chromedp.Navigate(base+"/tokens"),
			chromedp.Click(chromedp.CSS(`[data-testid=token-edit] summary`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=token-edit-form]`)),
			chromedp.Clear(chromedp.CSS(`[data-testid=token-edit-form] input[name=requests_per_minute]`)),
			chromedp.SendKeys(chromedp.CSS(`[data-testid=token-edit-form] input[name=requests_per_minute]`), "20"),
			chromedp.Clear(chromedp.CSS(`[data-testid=token-edit-form] input[name=models]`)),
		)
		if err != nil {
			t.Fatalf("%s: open the edit form: %v", size.name, err)
		}
		screenshot(t, ctx, size.name+"-token-edit")
		fitsWidth(t, ctx, size.width, "the tokens page with an edit form open")
		err = chromedp.Do(ctx,
			chromedp.Click(chromedp.CSS(`[data-testid=token-edit-form] button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=flash]`)),
		)
		if err != nil {
			t.Fatalf("%s: save the edit form: %v", size.name, err)
		}
		if limits := text(t, ctx, `[data-testid=token-row] [data-testid=token-limits]`); strings.Contains(limits, "models") || !strings.Contains(limits, "20 requests a minute") {
			t.Errorf("%s: after saving, the list shows %q", size.name, limits)
		}
		// The new rate applies to the next request (the bucket, drained at
		// the old rate, still owes the time it owed).
		r := api.call("GET", "/v1/models", secret, "", nil)
		if got := r.Header.Get("X-Ratelimit-Limit-Requests"); got != "20" {
			t.Errorf("%s: at once after the change, the token's limit is %q: %d", size.name, got, r.StatusCode)
		}
		if err := chromedp.Do(ctx, chromedp.Submit(chromedp.CSS(`[data-testid=logout]`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid=login-form]`))); err != nil {
			t.Fatalf("%s: logout: %v", size.name, err)
		}
	}
}
