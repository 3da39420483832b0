package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserTeams is a team in real browsers, at desktop and phone width:
// an owner invites and is shown the link (Sluice sends no mail); a second
// browser, with cookies of its own, signs up through the link and lands in
// the organization as a member, read-only on the team page; a third, an
// account of its own already, signs in, accepts, and the header's switcher
// moves it between its two organizations. Screenshots of each page go to
// SLUICE_SCREENSHOT_DIR when it is set.
func TestBrowserTeams(t *testing.T) {
	t.Parallel()
	base, _, stop := start(t, map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4", "SLUICE_ADMIN_PASSWORD": "admin-password",
		"SLUICE_SIGNUP_RATE": "0"}) // six signups from one address, more than an hour's default
	defer stop()
	for _, size := range []struct {
		name          string
		width, height int64
	}{{"desktop", 1280, 900}, {"phone", 390, 844}} {
		// A browser for each width: one journey is as much as a browser's
		// time budget allows on a slow machine.
		t.Run(size.name, func(t *testing.T) { teamJourney(t, base, size.name, size.width, size.height) })
	}
}

func teamJourney(t *testing.T, base, sizeName string, width, height int64) {
	owner := browserContext(t)
	const password = "password123"

	// newBrowser is another person: a browser context with its own cookies.
	newBrowser := func(width, height int64) context.Context {
		ctx, cancel := chromedp.NewContext(owner, chromedp.WithNewBrowserContext())
		t.Cleanup(cancel)
		failOnCSPViolations(t, ctx)
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, height)); err != nil {
			t.Fatal(err)
		}
		return ctx
	}
	signup := func(ctx context.Context, email, org string) {
		t.Helper()
		err := chromedp.Do(ctx,
			chromedp.Navigate(base+"/signup"),
			chromedp.SendKeys(chromedp.CSS(`input[name=email]`), email),
			chromedp.SendKeys(chromedp.CSS(`input[name=password]`), password),
			chromedp.SendKeys(chromedp.CSS(`input[name=organization]`), org),
			chromedp.Click(chromedp.CSS(`[data-testid=signup-form] button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=dashboard]`)),
		)
		if err != nil {
			t.Fatalf("signup %s: %v", email, err)
		}
	}
	// invite makes an invitation on the owner's team page and returns the
	// link the page shows.
	invite := func(size, email string, shot bool) string {
		t.Helper()
		err := chromedp.Do(owner,
			chromedp.Navigate(base+"/organization"),
			chromedp.SendKeys(chromedp.CSS(`#invite-email`), email),
			chromedp.Click(chromedp.CSS(`[data-testid=invite-form] button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=new-invitation-url]`)),
		)
		if err != nil {
			t.Fatalf("%s: invite %s: %v", size, email, err)
		}
		link := strings.TrimSpace(text(t, owner, `[data-testid=new-invitation-url]`))
		if !strings.HasPrefix(link, base+"/invitations/inv_") {
			t.Fatalf("%s: the link shown is %q", size, link)
		}
		if !strings.Contains(text(t, owner, `[data-testid=new-invitation]`), "Sluice sends no mail") {
			t.Errorf("%s: the page does not say to pass the link on", size)
		}
		if shot {
			screenshot(t, owner, size+"-team-invitation-link")
		}
		return link
	}

	size := struct {
		name          string
		width, height int64
	}{sizeName, width, height}
	{
		org := "Couplet Co " + size.name
		if err := chromedp.Do(owner, chromedp.EmulateViewport(size.width, size.height)); err != nil {
			t.Fatal(err)
		}
		signup(owner, "owner-"+size.name+"@example.com", org)
		link := invite(size.name, "invitee-"+size.name+"@example.com", true)
		fitsWidth(t, owner, size.width, "the team page with a new link")

		// The invitee opens the link in a browser of their own and signs up.
		guest := newBrowser(size.width, size.height)
		err := chromedp.Do(guest,
			chromedp.Navigate(link),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=invitation-signup-form]`)),
		)
		if err != nil {
			t.Fatalf("%s: the invitation page: %v", size.name, err)
		}
		expectPrefix(t, guest, `[data-testid=invitation-summary]`, "owner-"+size.name+"@example.com invites invitee-"+size.name+
			"@example.com to join "+org+" as member. The invitation works once, until ")
		screenshot(t, guest, size.name+"-invitation-signup")
		fitsWidth(t, guest, size.width, "the invitation page")
		err = chromedp.Do(guest,
			chromedp.SendKeys(chromedp.CSS(`#invite-signup-password`), password),
			chromedp.Click(chromedp.CSS(`[data-testid=invitation-signup-form] button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=dashboard]`)),
		)
		if err != nil {
			t.Fatalf("%s: sign up through the link: %v", size.name, err)
		}
		expectText(t, guest, `[data-testid=nav-org]`, org+" · member")
		expectText(t, guest, `[data-testid=org-name]`, org)
		screenshot(t, guest, size.name+"-member-dashboard")
		err = chromedp.Do(guest,
			chromedp.Navigate(base+"/organization"),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=members-readonly]`)),
		)
		if err != nil {
			t.Fatalf("%s: a member's team page: %v", size.name, err)
		}
		expectText(t, guest, `[data-testid=members-readonly]`, "Only the organization's owners manage members and invitations.")
		screenshot(t, guest, size.name+"-team-member")
		fitsWidth(t, guest, size.width, "a member's team page")

		// Carol has an organization of her own; she accepts signed in, and
		// the switcher moves her between the two.
		carol := newBrowser(size.width, size.height)
		home := "Carol Co " + size.name
		signup(carol, "carol-"+size.name+"@example.com", home)
		link = invite(size.name, "carol-"+size.name+"@example.com", false)
		err = chromedp.Do(carol,
			chromedp.Navigate(link),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=invitation-accept]`)),
		)
		if err != nil {
			t.Fatalf("%s: the invitation page, signed in: %v", size.name, err)
		}
		screenshot(t, carol, size.name+"-invitation-accept")
		err = chromedp.Do(carol,
			chromedp.Click(chromedp.CSS(`[data-testid=invitation-accept] button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=team-flash]`)),
		)
		if err != nil {
			t.Fatalf("%s: accept: %v", size.name, err)
		}
		expectText(t, carol, `[data-testid=nav-org]`, org+" · member")
		screenshot(t, carol, size.name+"-switcher")
		fitsWidth(t, carol, size.width, "a page with the switcher")
		attr, err := chromedp.Run(carol, chromedp.AttributeValue(chromedp.CSS(`#org-switch option:not([selected])`), "value"))
		other := attr.Value
		if err != nil || other == "" {
			t.Fatalf("%s: the switcher's other organization: %q %v", size.name, other, err)
		}
		err = chromedp.Do(carol,
			chromedp.SetValue(chromedp.CSS(`#org-switch`), other),
			chromedp.Click(chromedp.CSS(`[data-testid=org-switcher] button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=dashboard]`)),
		)
		if err != nil {
			t.Fatalf("%s: switch: %v", size.name, err)
		}
		expectText(t, carol, `[data-testid=nav-org]`, home+" · owner")
		expectText(t, carol, `[data-testid=org-name]`, home)

		// Back in the owner's browser: both joined.
		if err := chromedp.Do(owner, chromedp.Navigate(base+"/organization"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=members]`))); err != nil {
			t.Fatal(err)
		}
		if got := words(text(t, owner, `[data-testid=members]`)); !strings.Contains(got, "invitee-"+size.name) || !strings.Contains(got, "carol-"+size.name) {
			t.Errorf("%s: the owner's member list %q", size.name, got)
		}
		screenshot(t, owner, size.name+"-team-owner")
		fitsWidth(t, owner, size.width, "the owner's team page")
		// Removing asks first, saying what it ends.
		err = chromedp.Do(owner,
			chromedp.Click(chromedp.CSS(`[data-testid=member-row]:nth-child(2) [data-testid=member-remove-open]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=member-row]:nth-child(2) [data-testid=member-remove-warning]`)),
		)
		if err != nil {
			t.Fatalf("%s: open a removal: %v", size.name, err)
		}
		expectText(t, owner, `[data-testid=member-row]:nth-child(2) [data-testid=member-remove-warning]`,
			"Their sessions here end at once and the API tokens they created here are revoked (none active).")
		screenshot(t, owner, size.name+"-team-remove-confirm")
		if err := chromedp.Do(owner, chromedp.Click(chromedp.CSS(`[data-testid=logout] button`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid=login-form]`))); err != nil {
			t.Fatal(err)
		}
	}
}
