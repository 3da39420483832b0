package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserAdminUsersAndDeletion is the admin's users page and an
// organization's deletion in a real browser, at desktop and phone width:
// search, disable (the confirm says what happens; the user's token stops),
// enable (it works again); then delete an organization from its page (the
// confirm names what stops), which then says it is deleted and still
// offers its export, and its owner, signed in again, is told they belong
// nowhere. Screenshots go to SLUICE_SCREENSHOT_DIR when it is set.
func TestBrowserAdminUsersAndDeletion(t *testing.T) {
	t.Parallel()
	base, _, stop := start(t, map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4", "SLUICE_ADMIN_PASSWORD": "admin-password",
		"SLUICE_SIGNUP_RATE": "0"})
	defer stop()
	for _, size := range []struct {
		name          string
		width, height int64
	}{{"desktop", 1280, 900}, {"phone", 390, 844}} {
		t.Run(size.name, func(t *testing.T) { adminUsersJourney(t, base, size.name, size.width, size.height) })
	}
}

func adminUsersJourney(t *testing.T, base, size string, width, height int64) {
	c := client{t, base}
	bo := "bo-" + size + "@example.com"
	var signup struct {
		Token        string
		Organization struct{ ID int64 }
	}
	if r := c.call("POST", "/api/auth/signup", "", `{"email":"`+bo+`","password":"password123","organization":"Bo's Bakery `+size+`"}`, &signup); r.StatusCode != 201 {
		t.Fatalf("signup: %d", r.StatusCode)
	}
	c.call("POST", "/api/auth/signup", "", `{"email":"cy-`+size+`@example.com","password":"password123","organization":"Cy's Cider"}`, nil)
	var tok struct{ Token string }
	c.call("POST", "/api/tokens", signup.Token, `{"name":"bakery"}`, &tok)
	models := func() (int, string) {
		var body struct{ Error struct{ Code string } }
		r := c.call("GET", "/v1/models", tok.Token, "", &body)
		return r.StatusCode, body.Error.Code
	}

	ctx := browserContext(t)
	err := chromedp.Do(ctx,
		chromedp.EmulateViewport(width, height),
		chromedp.Navigate(base+"/login"),
		chromedp.SendKeys(chromedp.CSS(`input[name=email]`), "admin@localhost"),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "admin-password"),
		chromedp.Submit(chromedp.CSS(`[data-testid=login-form]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=dashboard]`)),
		chromedp.Navigate(base+"/admin/organizations"),
		chromedp.Click(chromedp.CSS(`[data-testid=admin-nav-users]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=admin-users]`)),
	)
	if err != nil {
		t.Fatalf("the users page: %v", err)
	}
	if n := matches(t, ctx, `[data-testid=user-row]`); n < 3 {
		t.Errorf("%d users listed, want at least the admin, bo and cy", n)
	}
	screenshot(t, ctx, size+"-admin-users")
	fitsWidth(t, ctx, width, "the users page")

	err = chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#users-q`), "BO-"+strings.ToUpper(size)),
		chromedp.Submit(chromedp.CSS(`[data-testid=users-search]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=users-clear]`)),
	)
	if err != nil {
		t.Fatalf("search: %v", err)
	}
	if n := matches(t, ctx, `[data-testid=user-row]`); n != 1 {
		t.Fatalf("the search found %d users, want bo", n)
	}
	expectText(t, ctx, `[data-testid=user-email]`, bo)
	expectText(t, ctx, `[data-testid=user-orgs]`, "Bo's Bakery "+size+" (owner)")
	expectText(t, ctx, `[data-testid=user-status]`, "Active")

	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`[data-testid=user-disable-open]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=user-disable-warning]`)),
	)
	if err != nil {
		t.Fatalf("open the disable confirm: %v", err)
	}
	expectText(t, ctx, `[data-testid=user-disable-warning]`,
		bo+" is signed out everywhere at once, cannot sign in, and the API tokens they created stop answering until you enable them again.")
	screenshot(t, ctx, size+"-admin-user-disable-confirm")
	fitsWidth(t, ctx, width, "the disable confirm")
	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`[data-testid=user-disable] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=flash]`)),
	)
	if err != nil {
		t.Fatalf("disable: %v", err)
	}
	expectText(t, ctx, `[data-testid=flash]`, "User disabled: their sessions have ended and their API tokens stopped, on every node.")
	expectPrefix(t, ctx, `[data-testid=user-status]`, "Disabled ")
	screenshot(t, ctx, size+"-admin-user-disabled")
	if status, code := models(); status != 401 || code != "user_disabled" {
		t.Errorf("the disabled user's token: %d %s", status, code)
	}

	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`[data-testid=user-enable] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=user-disable-open]`)),
	)
	if err != nil {
		t.Fatalf("enable: %v", err)
	}
	expectText(t, ctx, `[data-testid=flash]`, "User enabled: they can sign in, and their API tokens that were not revoked work again.")
	expectText(t, ctx, `[data-testid=user-status]`, "Active")
	if status, _ := models(); status != 200 {
		t.Errorf("the enabled user's token: %d", status)
	}

	// Delete bo's organization from its page.
	err = chromedp.Do(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/admin/organizations/%d", base, signup.Organization.ID)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=org-delete]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=org-delete-open]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=org-delete-warning]`)),
	)
	if err != nil {
		t.Fatalf("open the delete confirm: %v", err)
	}
	expectText(t, ctx, `[data-testid=org-delete-warning]`, "Its API tokens (1 active) stop at once on every node; its members (1) leave it and their sessions in it end; "+
		"its pending invitations are revoked. Its invoices and usage can still be downloaded here until its data is purged, 30 days from now.")
	sectionShot(t, ctx, `[data-testid=org-delete]`, size+"-admin-org-delete-confirm")
	fitsWidth(t, ctx, width, "the delete confirm")
	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`[data-testid=org-delete-form] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=org-deleted]`)),
	)
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	expectText(t, ctx, `[data-testid=flash]`, "Organization deleted: its API tokens stopped and its members' sessions in it ended, on every node.")
	expectPrefix(t, ctx, `[data-testid=org-deleted]`, "Deleted Deleted ")
	if n := matches(t, ctx, `[data-testid=org-delete]`); n != 0 {
		t.Error("a deleted organization still offers to be deleted")
	}
	expectText(t, ctx, `[data-testid=org-token-row] .badge`, "Stopped")
	if n := matches(t, ctx, `[data-testid=org-export-link]`); n != 1 {
		t.Error("a deleted organization's page offers no export")
	}
	screenshot(t, ctx, size+"-admin-org-deleted")
	fitsWidth(t, ctx, width, "a deleted organization's page")
	if status, code := models(); status != 401 || code != "organization_deleted" {
		t.Errorf("the deleted organization's token: %d %s", status, code)
	}

	// Bo signs in again and is told they belong nowhere.
	owner, cancel := chromedp.NewContext(ctx, chromedp.WithNewBrowserContext())
	defer cancel()
	err = chromedp.Do(owner,
		chromedp.EmulateViewport(width, height),
		chromedp.Navigate(base+"/login"),
		chromedp.SendKeys(chromedp.CSS(`input[name=email]`), bo),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "password123"),
		chromedp.Submit(chromedp.CSS(`[data-testid=login-form]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=error-page]`)),
	)
	if err != nil {
		t.Fatalf("the owner signs in again: %v", err)
	}
	if got := words(text(t, owner, `[data-testid=error-page]`)); !strings.Contains(got, "you belong to no organization: ask an owner to invite you, then open the invitation's link") {
		t.Errorf("the page of a user who belongs nowhere: %q", got)
	}
	screenshot(t, owner, size+"-no-organization")
	fitsWidth(t, owner, width, "the no-organization page")
	// Its button leads somewhere that answers, not back to this page.
	if err := chromedp.Do(owner,
		chromedp.Click(chromedp.CSS(`[data-testid=error-account]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=account-email]`)),
	); err != nil {
		t.Fatalf("the no-organization page's button: %v", err)
	}
	if got := text(t, owner, `[data-testid=account-address]`); got != bo {
		t.Errorf("the account page after the button shows %q, want %q", got, bo)
	}
	if got := words(text(t, owner, `[data-testid=nav]`)); strings.Contains(got, "Dashboard") || strings.Contains(got, "API tokens") {
		t.Errorf("the header offers an organization's pages to a user in none: %q", got)
	}
	screenshot(t, owner, size+"-no-organization-account")
}
