package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/testmail"
)

// mailPublicURL is the public URL the mail server's links are under; the
// node listens on a port of its own, so the browser opens a link's path
// there.
const mailPublicURL = "https://sluice.test"

// TestBrowserMail is Sluice with mail, in real browsers at desktop and
// phone width, reading every link from Mailpit's API: a signup is
// confirmed by the link mailed to it (the verify page, then the
// dashboard); the account page changes the password, which signs out
// another browser of the same user; "Forgot your password?" on the login
// page mails a reset link, whose page sets a new one; an owner's
// invitation says it was mailed. Screenshots of each page go to
// SLUICE_SCREENSHOT_DIR.
func TestBrowserMail(t *testing.T) {
	t.Parallel()
	mp := testmail.Start(t)
	base, _, stop := start(t, map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4", "SLUICE_ADMIN_PASSWORD": "admin-password",
		"SLUICE_SIGNUP_RATE": "0", "SLUICE_SMTP_URL": mp.URL(), "SLUICE_MAIL_FROM": "Sluice <sluice@example.com>", "SLUICE_PUBLIC_URL": mailPublicURL})
	defer stop()
	for _, size := range []struct {
		name          string
		width, height int64
	}{{"desktop", 1280, 900}, {"phone", 390, 844}} {
		t.Run(size.name, func(t *testing.T) { mailJourney(t, base, mp, size.name, size.width, size.height) })
	}
}

func mailJourney(t *testing.T, base string, mp *testmail.Server, size string, width, height int64) {
	ctx := browserContext(t)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, height)); err != nil {
		t.Fatal(err)
	}
	email := size + "-owner@example.com"
	shot := func(page string) {
		t.Helper()
		fitsWidth(t, ctx, width, page)
		screenshot(t, ctx, "mail-"+page+"-"+size)
	}
	// open opens a mail's link (under the public URL) on the node.
	open := func(ctx context.Context, link, wait string) {
		t.Helper()
		if !strings.HasPrefix(link, mailPublicURL+"/") {
			t.Fatalf("%s: the link %q is not under the public URL", size, link)
		}
		if err := chromedp.Do(ctx, chromedp.Navigate(base+strings.TrimPrefix(link, mailPublicURL)), chromedp.WaitVisible(chromedp.CSS(wait))); err != nil {
			t.Fatalf("%s: open %s: %v", size, link, err)
		}
	}

	// Sign up: nothing is made until the mailed link is opened.
	err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/signup"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=signup-by-mail]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=email]`), email),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "password123"),
		chromedp.SendKeys(chromedp.CSS(`input[name=organization]`), "Mailed "+size),
		chromedp.Click(chromedp.CSS(`[data-testid=signup-form] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=notice]`)),
	)
	if err != nil {
		t.Fatalf("%s: signup: %v", size, err)
	}
	if got := text(t, ctx, `[data-testid=notice-message]`); !strings.Contains(got, "We sent a mail to "+email) {
		t.Errorf("%s: the signup says %q", size, got)
	}
	shot("signup-sent")
	m := mp.WaitFor(t, email, 1)[0]
	if m.Subject != "Confirm your Sluice account" {
		t.Fatalf("%s: the first mail is %q", size, m.Subject)
	}
	open(ctx, m.Link(t, mailPublicURL+"/verify-email/"), `[data-testid=verify-form]`)
	shot("verify")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`[data-testid=verify-form] button`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid=dashboard]`))); err != nil {
		t.Fatalf("%s: confirm: %v", size, err)
	}

	// Another browser of the same user, signed in before the change.
	other, cancel := chromedp.NewContext(ctx, chromedp.WithNewBrowserContext())
	defer cancel()
	err = chromedp.Do(other,
		chromedp.Navigate(base+"/login"),
		chromedp.SendKeys(chromedp.CSS(`input[name=email]`), email),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "password123"),
		chromedp.Click(chromedp.CSS(`[data-testid=login-form] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=dashboard]`)),
	)
	if err != nil {
		t.Fatalf("%s: the other browser signs in: %v", size, err)
	}

	// The account page: verified; change the password.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`[data-testid=nav-account]`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid=password-form]`))); err != nil {
		t.Fatalf("%s: account page: %v", size, err)
	}
	if got := text(t, ctx, `[data-testid=email-status]`); !strings.HasPrefix(got, "Verified on") {
		t.Errorf("%s: the account page says %q", size, got)
	}
	shot("account")
	err = chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#current-password`), "password123"),
		chromedp.SendKeys(chromedp.CSS(`#new-password`), "password456"),
		chromedp.Click(chromedp.CSS(`[data-testid=password-form] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=flash]`)),
	)
	if err != nil {
		t.Fatalf("%s: change password: %v", size, err)
	}
	if got := text(t, ctx, `[data-testid=flash]`); !strings.Contains(got, "Every other session of yours has ended") {
		t.Errorf("%s: after the change the page says %q", size, got)
	}
	shot("account-changed")
	if err := chromedp.Do(other, chromedp.Navigate(base+"/dashboard"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=login-form]`))); err != nil {
		t.Fatalf("%s: the other browser is still signed in: %v", size, err)
	}

	// Forgot the new one: reset it through the mailed link.
	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`[data-testid=logout] button`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=forgot-password]`)),
	)
	if err != nil {
		t.Fatalf("%s: log out: %v", size, err)
	}
	shot("login")
	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`[data-testid=forgot-password]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=reset-request-form]`)),
	)
	if err != nil {
		t.Fatalf("%s: forgot password: %v", size, err)
	}
	shot("reset-request")
	err = chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#reset-email`), email),
		chromedp.Click(chromedp.CSS(`[data-testid=reset-request-form] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=reset-sent]`)),
	)
	if err != nil {
		t.Fatalf("%s: ask for a reset: %v", size, err)
	}
	shot("reset-sent")
	m = mp.WaitFor(t, email, 2)[0]
	if m.Subject != "Reset your Sluice password" {
		t.Fatalf("%s: the second mail is %q", size, m.Subject)
	}
	open(ctx, m.Link(t, mailPublicURL+"/password-reset/"), `[data-testid=reset-confirm-form]`)
	shot("reset-confirm")
	err = chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#reset-password`), "password789"),
		chromedp.Click(chromedp.CSS(`[data-testid=reset-confirm-form] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=notice]`)),
	)
	if err != nil {
		t.Fatalf("%s: set the new password: %v", size, err)
	}
	shot("reset-done")
	err = chromedp.Do(ctx,
		chromedp.Navigate(base+"/login"),
		chromedp.SendKeys(chromedp.CSS(`input[name=email]`), email),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "password789"),
		chromedp.Click(chromedp.CSS(`[data-testid=login-form] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=dashboard]`)),
	)
	if err != nil {
		t.Fatalf("%s: sign in with the reset password: %v", size, err)
	}

	// An invitation goes by mail, and the page says so.
	invitee := size + "-invitee@example.com"
	err = chromedp.Do(ctx,
		chromedp.Navigate(base+"/organization"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=invite-mode]`)),
		chromedp.SendKeys(chromedp.CSS(`#invite-email`), invitee),
		chromedp.Click(chromedp.CSS(`[data-testid=invite-form] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=new-invitation-mailed]`)),
	)
	if err != nil {
		t.Fatalf("%s: invite: %v", size, err)
	}
	if got := text(t, ctx, `[data-testid=new-invitation]`); !strings.Contains(got, "Sluice mailed the link to "+invitee) {
		t.Errorf("%s: the team page says %q", size, got)
	}
	shot("team-mailed")
	if m := mp.WaitFor(t, invitee, 1)[0]; !strings.HasPrefix(m.Link(t, mailPublicURL+"/invitations/"), mailPublicURL+"/invitations/inv_") {
		t.Errorf("%s: the invitation's mail: %s", size, m.Text)
	}
}
