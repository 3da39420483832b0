package handlers

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/testmail"
	"github.com/sluicehq/sluice/models"
)

// linkToken is the token at the end of a link from a mail.
func linkToken(t *testing.T, link string) string {
	t.Helper()
	tok := link[strings.LastIndexByte(link, '/')+1:]
	if !models.LinkTokenShaped(tok) && !models.InvitationCodeShaped(tok) {
		t.Fatalf("no token at the end of %q", link)
	}
	return tok
}

// TestPasswordChangeEndsOtherSessions: PUT /api/account/password checks
// the current password, then ends every other session of the user at
// once (their next request is refused) and keeps the one that asked.
func TestPasswordChangeEndsOtherSessions(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		current := e.signup("ada@example.com", "Acme")
		others := []string{e.login("ada@example.com", "password123"), e.login("ada@example.com", "password123")}
		bystander := e.signup("bob@example.com", "Bob's")

		expectError(t, e.do(request{method: "PUT", path: "/api/account/password", bearer: current,
			body: `{"current_password":"wrong-password","new_password":"password456"}`}), 403, "wrong_password", "the current password is wrong")
		expectError(t, e.do(request{method: "PUT", path: "/api/account/password", bearer: current,
			body: `{"current_password":"password123","new_password":"short"}`}), 422, "invalid_password", "password must be at least 8 bytes")
		expectError(t, e.do(request{method: "PUT", path: "/api/account/password",
			body: `{"current_password":"password123","new_password":"password456"}`}), 401, "missing_session", "sign in first")

		w := e.do(request{method: "PUT", path: "/api/account/password", bearer: current, body: `{"current_password":"password123","new_password":"password456"}`})
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"other_sessions_ended":2`) {
			t.Fatalf("change: %d %s", w.Code, w.Body.String())
		}
		for _, s := range others {
			expectError(t, e.do(request{method: "GET", path: "/api/account", bearer: s}), 401, "invalid_session", "session is invalid or expired")
		}
		if w := e.do(request{method: "GET", path: "/api/account", bearer: current}); w.Code != 200 || !strings.Contains(w.Body.String(), `"email":"ada@example.com"`) {
			t.Fatalf("the session that changed it: %d %s", w.Code, w.Body.String())
		}
		if w := e.do(request{method: "GET", path: "/api/account", bearer: bystander}); w.Code != 200 {
			t.Fatalf("another user's session: %d", w.Code)
		}
		expectError(t, e.do(request{method: "POST", path: "/api/auth/login", body: `{"email":"ada@example.com","password":"password123"}`}),
			401, "invalid_credentials", "email or password is wrong")
		e.login("ada@example.com", "password456")
		if !auditHas(t, e.store, "user.password.change", "ada@example.com: 2 other sessions ended") {
			t.Error("the change is not in the audit log")
		}
	})
}

// TestBootstrapAdminPasswordChange: the admin made at start changes their
// password like anyone, and a restart with the old SLUICE_ADMIN_PASSWORD
// does not put it back.
func TestBootstrapAdminPasswordChange(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		admin := e.login("admin@example.com", "admin-password")
		if w := e.do(request{method: "PUT", path: "/api/account/password", bearer: admin,
			body: `{"current_password":"admin-password","new_password":"a-better-one"}`}); w.Code != 200 {
			t.Fatalf("change: %d %s", w.Code, w.Body.String())
		}
		if created, _, err := e.acc.EnsureAdmin(context.Background(), "admin@example.com", "admin-password"); created || err != nil {
			t.Fatalf("EnsureAdmin at the next start: created %v, %v", created, err)
		}
		expectError(t, e.do(request{method: "POST", path: "/api/auth/login", body: `{"email":"admin@example.com","password":"admin-password"}`}),
			401, "invalid_credentials", "email or password is wrong")
		if w := e.do(request{method: "GET", path: "/api/admin/tiers", bearer: e.login("admin@example.com", "a-better-one")}); w.Code != 200 {
			t.Fatalf("the admin with the new password: %d", w.Code)
		}
	})
}

// TestPasswordResetThroughMail: a reset request is 202 with the same body
// for an address with an account and one without; only the first gets a
// mail, whose link (under the public URL) sets the password once, ends
// every session, and stops working after an hour.
func TestPasswordResetThroughMail(t *testing.T) {
	mp := testmail.Start(t)
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db, withMail(mp))
		ada := db.Dialect + "-ada@example.com"
		e.directSignup(ada)
		before := e.login(ada, "password123")

		known := e.do(request{method: "POST", path: "/api/auth/password-reset", body: `{"email":"` + strings.ToUpper(ada) + `"}`})
		unknown := e.do(request{method: "POST", path: "/api/auth/password-reset", body: `{"email":"` + db.Dialect + `-nobody@example.com"}`})
		if known.Code != 202 || unknown.Code != 202 || known.Body.String() != unknown.Body.String() ||
			!strings.Contains(known.Body.String(), "if an account has this address, a link to reset its password is on its way") {
			t.Fatalf("answers differ: %d %s / %d %s", known.Code, known.Body.String(), unknown.Code, unknown.Body.String())
		}
		expectError(t, e.do(request{method: "POST", path: "/api/auth/password-reset", body: `{"email":"not an address"}`}),
			422, "invalid_email", "email must be an address")
		e.sendMail()
		if got := mp.To(t, db.Dialect+"-nobody@example.com"); len(got) != 0 {
			t.Fatalf("an address without an account got mail: %+v", got)
		}
		got := mp.To(t, ada)
		if len(got) != 1 || got[0].Subject != "Reset your Sluice password" {
			t.Fatalf("mails to %s: %+v", ada, got)
		}
		token := linkToken(t, got[0].Link(t, publicURL+"/password-reset/"))

		expectError(t, e.do(request{method: "POST", path: "/api/auth/password-reset/confirm", body: `{"token":"` + token + `","new_password":"short"}`}),
			422, "invalid_password", "password must be at least 8 bytes")
		w := e.do(request{method: "POST", path: "/api/auth/password-reset/confirm", body: `{"token":"` + token + `","new_password":"password456"}`})
		if w.Code != 200 || !strings.Contains(w.Body.String(), "every session of yours has ended") {
			t.Fatalf("confirm: %d %s", w.Code, w.Body.String())
		}
		expectError(t, e.do(request{method: "GET", path: "/api/account", bearer: before}), 401, "invalid_session", "session is invalid")
		e.login(ada, "password456")
		expectError(t, e.do(request{method: "POST", path: "/api/auth/password-reset/confirm", body: `{"token":"` + token + `","new_password":"password789"}`}),
			409, "link_used", "this password reset link has already been used")

		// A link is good for an hour.
		e.do(request{method: "POST", path: "/api/auth/password-reset", body: `{"email":"` + ada + `"}`})
		e.sendMail()
		late := linkToken(t, mp.To(t, ada)[0].Link(t, publicURL+"/password-reset/"))
		e.clock.Advance(time.Hour)
		expectError(t, e.do(request{method: "POST", path: "/api/auth/password-reset/confirm", body: `{"token":"` + late + `","new_password":"password789"}`}),
			409, "link_expired", "links work for an hour")
		e.login(ada, "password456")
	})
}

// TestPasswordResetWithoutMail: without mail the request still answers
// 202 and sends nothing, saying an admin resets passwords; the admin is
// given a one-time link for the user, which works.
func TestPasswordResetWithoutMail(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		e.signup("ada@example.com", "Acme")
		w := e.do(request{method: "POST", path: "/api/auth/password-reset", body: `{"email":"ada@example.com"}`})
		if w.Code != 202 || !strings.Contains(w.Body.String(), "this Sluice sends no mail: ask an admin to reset your password") {
			t.Fatalf("reset request without mail: %d %s", w.Code, w.Body.String())
		}
		ada, err := e.store.UserByEmail(context.Background(), "ada@example.com")
		if err != nil {
			t.Fatal(err)
		}
		admin := e.login("admin@example.com", "admin-password")
		w = e.do(request{method: "POST", path: "/api/admin/users/" + itoa(ada.ID) + "/password-reset", bearer: admin})
		out := decode(t, w)
		link, _ := out["reset_url"].(string)
		if w.Code != 201 || out["mailed"] != false || !strings.HasPrefix(link, "http://example.com/password-reset/lnk_") ||
			!strings.Contains(out["message"].(string), "pass this link on to the user yourself") {
			t.Fatalf("admin reset without mail: %d %s", w.Code, w.Body.String())
		}
		if w := e.do(request{method: "POST", path: "/api/auth/password-reset/confirm", body: `{"token":"` + linkToken(t, link) + `","new_password":"password456"}`}); w.Code != 200 {
			t.Fatalf("the admin's link: %d %s", w.Code, w.Body.String())
		}
		e.login("ada@example.com", "password456")
		expectError(t, e.do(request{method: "POST", path: "/api/admin/users/999999/password-reset", bearer: admin}), 404, "user_not_found", "no user has this id")
		expectError(t, e.do(request{method: "POST", path: "/api/admin/users/" + itoa(ada.ID) + "/password-reset", bearer: e.login("ada@example.com", "password456")}),
			403, "forbidden", "this endpoint is for admins")
		if !auditHas(t, e.store, "user.password_reset.create", "ada@example.com: made by admin admin@example.com, link shown to the admin") {
			t.Error("the admin's reset is not in the audit log")
		}
	})
}

// TestAdminPasswordResetByMail: with mail the admin's reset is mailed to
// the user (202), and the admin is shown no link.
func TestAdminPasswordResetByMail(t *testing.T) {
	mp := testmail.Start(t)
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db, withMail(mp))
		addr := db.Dialect + "-reset-by-admin@example.com"
		u := e.directSignup(addr)
		w := e.do(request{method: "POST", path: "/api/admin/users/" + itoa(u.ID) + "/password-reset", bearer: e.login("admin@example.com", "admin-password")})
		if w.Code != 202 || !strings.Contains(w.Body.String(), `"mailed":true`) || strings.Contains(w.Body.String(), "lnk_") {
			t.Fatalf("admin reset with mail: %d %s", w.Code, w.Body.String())
		}
		e.sendMail()
		got := mp.To(t, addr)
		if len(got) != 1 {
			t.Fatalf("mails to %s: %+v", addr, got)
		}
		tok := linkToken(t, got[0].Link(t, publicURL+"/password-reset/"))
		if w := e.do(request{method: "POST", path: "/api/auth/password-reset/confirm", body: `{"token":"` + tok + `","new_password":"password456"}`}); w.Code != 200 {
			t.Fatalf("confirm: %d %s", w.Code, w.Body.String())
		}
		if !auditHas(t, e.store, "user.password_reset.create", "made by admin admin@example.com, mailed") {
			t.Error("the admin's reset is not in the audit log")
		}
	})
}

// TestSignupWithMailAnswersTakenAddressesAlike: with mail, a signup is 202
// with the same body for a new address and for one that has an account;
// nothing can be learnt by signing in with the password just chosen; the
// new address gets a link that makes the account, the taken one a mail
// saying someone tried.
func TestSignupWithMailAnswersTakenAddressesAlike(t *testing.T) {
	mp := testmail.Start(t)
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db, withMail(mp))
		taken, fresh := db.Dialect+"-taken@example.com", db.Dialect+"-new@example.com"
		e.directSignup(taken)
		signup := func(email string) (int, string) {
			w := e.do(request{method: "POST", path: "/api/auth/signup", body: `{"email":"` + email + `","password":"chosen-password","organization":"Newco"}`})
			return w.Code, w.Body.String()
		}
		newStatus, newBody := signup(fresh)
		takenStatus, takenBody := signup(taken)
		if newStatus != 202 || takenStatus != newStatus || newBody != takenBody || !strings.Contains(newBody, "check your mail") {
			t.Fatalf("new: %d %s\ntaken: %d %s", newStatus, newBody, takenStatus, takenBody)
		}
		for _, email := range []string{fresh, taken} {
			expectError(t, e.do(request{method: "POST", path: "/api/auth/login", body: `{"email":"` + email + `","password":"chosen-password"}`}),
				401, "invalid_credentials", "email or password is wrong")
		}
		e.sendMail()
		tm := mp.To(t, taken)
		if len(tm) != 1 || tm[0].Subject != "Someone tried to sign up to Sluice with your address" || !strings.Contains(tm[0].Text, publicURL+"/password-reset") {
			t.Fatalf("mail to the taken address: %+v", tm)
		}
		fm := mp.To(t, fresh)
		if len(fm) != 1 || fm[0].Subject != "Confirm your Sluice account" || !strings.Contains(fm[0].Text, `"Newco"`) {
			t.Fatalf("mail to the new address: %+v", fm)
		}
		token := linkToken(t, fm[0].Link(t, publicURL+"/verify-email/"))
		w := e.do(request{method: "POST", path: "/api/auth/verify-email", body: `{"token":"` + token + `"}`})
		out := decode(t, w)
		if w.Code != 201 || out["organization"].(map[string]any)["name"] != "Newco" || out["user"].(map[string]any)["role"] != "owner" {
			t.Fatalf("confirm: %d %s", w.Code, w.Body.String())
		}
		if w := e.do(request{method: "GET", path: "/api/account", bearer: out["token"].(string)}); !strings.Contains(w.Body.String(), `"email_verified":true`) {
			t.Fatalf("account after confirming: %s", w.Body.String())
		}
		e.login(fresh, "chosen-password")
		expectError(t, e.do(request{method: "POST", path: "/api/auth/verify-email", body: `{"token":"` + token + `"}`}),
			409, "link_used", "this email confirmation link has already been used")
		// The taken address's account is untouched.
		e.login(taken, "password123")
	})
}

// TestIncludedCreditWaitsForVerifiedEmail: with mail, a free organization
// whose owner has not verified their address gets no included credit, and
// a priced request is refused saying to verify; the verification link
// gives it back at once.
func TestIncludedCreditWaitsForVerifiedEmail(t *testing.T) {
	mp := testmail.Start(t)
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db, withMail(mp))
		admin := e.login("admin@example.com", "admin-password")
		if w := e.do(request{method: "PUT", path: "/api/admin/prices/sluice-local", bearer: admin,
			body: `{"input_per_mtok":"1.5","output_per_mtok":"3"}`}); w.Code != 200 {
			t.Fatalf("price: %d %s", w.Code, w.Body.String())
		}
		owner := db.Dialect + "-unverified@example.com"
		e.directSignup(owner)
		session := e.login(owner, "password123")
		key, _ := e.apiToken(session)
		w := e.chat(key)
		if w.Code != 429 || errorCode(t, w) != "insufficient_quota" ||
			!strings.Contains(w.Body.String(), "the free tier's included credit, which waits for a verified email") {
			t.Fatalf("unverified: %d %s", w.Code, w.Body.String())
		}
		if w := e.do(request{method: "GET", path: "/api/budget", bearer: session}); !strings.Contains(w.Body.String(), `"included_credit":"0.00"`) {
			t.Fatalf("budget while unverified: %s", w.Body.String())
		}
		if w := e.do(request{method: "POST", path: "/api/account/verification", bearer: session}); w.Code != 202 {
			t.Fatalf("send verification: %d %s", w.Code, w.Body.String())
		}
		e.sendMail()
		got := mp.To(t, owner)
		if len(got) != 1 || got[0].Subject != "Confirm your email address for Sluice" {
			t.Fatalf("mails: %+v", got)
		}
		w = e.do(request{method: "POST", path: "/api/auth/verify-email", body: `{"token":"` + linkToken(t, got[0].Link(t, publicURL+"/verify-email/")) + `"}`})
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"email_verified":true`) {
			t.Fatalf("verify: %d %s", w.Code, w.Body.String())
		}
		if w := e.chat(key); w.Code != 200 {
			t.Fatalf("verified: %d %s", w.Code, w.Body.String())
		}
		if w := e.do(request{method: "GET", path: "/api/budget", bearer: session}); strings.Contains(w.Body.String(), `"included_credit":"0.00"`) {
			t.Fatalf("budget once verified: %s", w.Body.String())
		}
		expectError(t, e.do(request{method: "POST", path: "/api/account/verification", bearer: session}), 409, "email_already_verified", "is already verified")
	})
}

// TestInvitationsAreMailed: with mail an invitation is mailed and its code
// is in no answer; signing up with the code from the mail verifies the
// address.
func TestInvitationsAreMailed(t *testing.T) {
	mp := testmail.Start(t)
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db, withMail(mp))
		owner := db.Dialect + "-owner@acme.example"
		e.directSignup(owner)
		invitee := db.Dialect + "-invitee@example.com"
		w := e.do(request{method: "POST", path: "/api/organization/invitations", bearer: e.login(owner, "password123"), body: `{"email":"` + invitee + `"}`})
		if w.Code != 201 || !strings.Contains(w.Body.String(), `"mailed":true`) || strings.Contains(w.Body.String(), "inv_") ||
			strings.Contains(w.Body.String(), "accept_url") {
			t.Fatalf("invite: %d %s", w.Code, w.Body.String())
		}
		e.sendMail()
		got := mp.To(t, invitee)
		if len(got) != 1 || !strings.HasPrefix(got[0].Subject, "You are invited to") || !strings.Contains(got[0].Text, owner+" invited you") {
			t.Fatalf("mails: %+v", got)
		}
		code := linkToken(t, got[0].Link(t, publicURL+"/invitations/"))
		w = e.do(request{method: "POST", path: "/api/auth/signup", body: `{"email":"` + invitee + `","password":"password123","invitation":"` + code + `"}`})
		if w.Code != 201 {
			t.Fatalf("signup by invitation: %d %s", w.Code, w.Body.String())
		}
		if w := e.do(request{method: "GET", path: "/api/account", bearer: decode(t, w)["token"].(string)}); !strings.Contains(w.Body.String(), `"email_verified":true`) {
			t.Fatalf("the invitee's account: %s", w.Body.String())
		}
		if !auditHas(t, e.store, "invitation.create", invitee+" as member, mailed") {
			t.Error("the mailed invitation is not in the audit log")
		}
	})
}

// directSignup makes an account with password123 as a signup without mail
// does (unverified), for the tests where mail is on.
func (e *env) directSignup(email string) models.User {
	e.t.Helper()
	m, _, err := e.acc.Signup(context.Background(), email, "password123", "Org of "+email, "192.0.2.1")
	if err != nil {
		e.t.Fatal(err)
	}
	return m.User
}

// auditHas says whether the audit log has an entry of action whose
// detail contains detail.
func auditHas(t *testing.T, s *models.Store, action, detail string) bool {
	t.Helper()
	page, _, err := s.AuditEntries(context.Background(), models.AuditQuery{ActionPrefix: action, PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range page {
		if r.Action == action && strings.Contains(r.Detail, detail) {
			return true
		}
	}
	return false
}

// TestAdminUsersPageSendsAReset: "Send reset" on the admin's users page
// mails the user a link (the list says so and shows none); on a Sluice
// without mail it shows the admin the one-time link, which then sets the
// password once.
func TestAdminUsersPageSendsAReset(t *testing.T) {
	mp := testmail.Start(t)
	for _, mailed := range []bool{false, true} {
		var opts []envOption
		if mailed {
			opts = append(opts, withMail(mp))
		}
		e := newEnv(t, testdb.SQLite(t), opts...)
		addr := "page-reset-" + strconv.FormatBool(mailed) + "@example.com"
		u := e.directSignup(addr)
		admin := e.browserLogin(t, "admin@example.com", "admin-password")
		w := admin.do("POST", "/admin/users/"+itoa(u.ID)+"/password-reset?q=page-reset", url.Values{}, nil)
		if mailed {
			if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/admin/users?done=reset&q=page-reset" {
				t.Fatalf("with mail: %d %s", w.Code, w.Header().Get("Location"))
			}
			page := admin.do("GET", w.Header().Get("Location"), nil, nil).Body.String()
			if !strings.Contains(page, "A password reset link is on its way to the user") || strings.Contains(page, `data-testid="user-reset-url"`) {
				t.Fatalf("the list after a mailed reset:\n%s", page)
			}
			e.sendMail()
			if got := mp.To(t, addr); len(got) != 1 {
				t.Fatalf("mails to %s: %+v", addr, got)
			}
			continue
		}
		page := w.Body.String()
		_, link, ok := strings.Cut(page, `data-testid="user-reset-url">`)
		link, _, _ = strings.Cut(link, "<")
		if w.Code != 200 || !ok || !strings.Contains(page, "Sluice sends no mail: copy this link now") || !strings.Contains(link, "/password-reset/") {
			t.Fatalf("without mail: %d %q\n%s", w.Code, link, page)
		}
		tok := linkToken(t, link)
		for i, want := range []int{200, 409} { // once
			if w := e.do(request{method: "POST", path: "/api/auth/password-reset/confirm", body: `{"token":"` + tok + `","new_password":"password789"}`}); w.Code != want {
				t.Fatalf("confirm %d: %d %s", i, w.Code, w.Body.String())
			}
		}
		e.login(addr, "password789")
	}
}
