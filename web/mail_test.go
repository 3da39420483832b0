package web_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// TestPagesWithoutMail: the embedded default sends no mail, and the pages
// say so: the reset page sends people to an admin, the account page says
// addresses go unverified, the team page hands the owner the link.
func TestPagesWithoutMail(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		s := newSite(t, db)
		anon := s.anonymous()
		r := anon.get("/login")
		r.expectPage(200, "forgot-password")
		r = anon.get("/password-reset")
		r.expectPage(200, "reset-no-mail")
		if got := r.text("reset-no-mail"); !strings.Contains(got, "This Sluice sends no mail") || !strings.Contains(got, "Ask an admin") {
			t.Errorf("reset page: %q", got)
		}
		ada := s.signup("ada@example.com", "Acme")
		b := s.signedIn(ada)
		r = b.get("/account")
		r.expectPage(200, "password-form")
		if got := r.text("email-status"); !strings.Contains(got, "this Sluice sends no mail, so addresses are not verified here") {
			t.Errorf("account page: %q", got)
		}
		if r.testid("verification-form").Length() != 0 {
			t.Error("the account page offers a verification link without mail")
		}
		r = b.get("/organization")
		if got := r.text("invite-mode"); !strings.Contains(got, "Mail is off on this Sluice: you get the invitation's link to pass on yourself") {
			t.Errorf("team page: %q", got)
		}
		r = b.post("/organization/invitations", url.Values{"email": {"bob@example.com"}, "role": {"member"}})
		r.expectPage(201, "new-invitation-url")
	})
}

// TestAccountPageChangesThePassword: a wrong current password is shown on
// the form; a right one changes it, ends the user's other sessions and
// keeps this one.
func TestAccountPageChangesThePassword(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		s := newSite(t, db)
		s.signup("ada@example.com", "Acme")
		b, other := s.login("ada@example.com", password), s.login("ada@example.com", password)
		r := b.post("/account/password", url.Values{"current_password": {"wrong-password"}, "new_password": {"password456"}})
		r.expectPage(403, "password-error")
		if got := r.text("password-error"); got != "the current password is wrong" {
			t.Errorf("password error: %q", got)
		}
		b.post("/account/password", url.Values{"current_password": {password}, "new_password": {"password456"}}).expectRedirect("/account?done=password")
		b.get("/account?done=password").expectPage(200, "flash", "password-form")
		other.get("/dashboard").expectRedirect("/login")
		s.login("ada@example.com", "password456")
	})
}
