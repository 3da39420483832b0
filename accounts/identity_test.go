package accounts_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/quota"
)

const issuerURL = "https://login.example.com"

func identity(subject, email string) accounts.Identity {
	return accounts.Identity{Issuer: issuerURL, Subject: subject, Email: email}
}

// auditActions lists the audit log's actions, oldest first.
func auditActions(t *testing.T, s *models.Store) []string {
	t.Helper()
	rs, _, err := s.AuditEntries(ctx, models.AuditQuery{PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := len(rs) - 1; i >= 0; i-- {
		out = append(out, rs[i].Action+" "+rs[i].Detail)
	}
	return out
}

func contains(list []string, want string) bool {
	for _, s := range list {
		if s == want {
			return true
		}
	}
	return false
}

// TestFirstSignInLinksTheUserOfItsEmail: an account whose verified email
// is a Sluice user's (verified too) is linked to that user (audited), who
// keeps their password and their organization; a later sign-in asserting
// another email is still that user, and the user's own email stays.
func TestFirstSignInLinksTheUserOfItsEmail(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		ada, _ := e.signup(t, "ada@example.com")
		if err := db.Gorm.Model(&models.User{}).Where("id = ?", ada.ID).Update("email_verified_at", e.clock.Now().UTC()).Error; err != nil {
			t.Fatal(err)
		}
		m, err := e.svc.SignInWithIdentity(ctx, identity("sub-ada", "ADA@example.com"), nil, "192.0.2.1")
		if err != nil || m.ID != ada.ID || m.OrgID != ada.OrgID || m.Role != models.RoleOwner {
			t.Fatalf("first sign-in: %+v %v, want %+v", m, err, ada)
		}
		if !contains(auditActions(t, e.store), "identity.link ada@example.com signed in by single sign-on ("+issuerURL+") for the first time") {
			t.Errorf("no identity.link entry: %v", auditActions(t, e.store))
		}
		if _, err := e.svc.Login(ctx, "ada@example.com", "password1", "192.0.2.1"); err != nil {
			t.Errorf("the linked user's password: %v", err)
		}
		m, err = e.svc.SignInWithIdentity(ctx, identity("sub-ada", "ada.lovelace@newname.example"), nil, "192.0.2.1")
		if err != nil || m.ID != ada.ID || m.Email != "ada@example.com" {
			t.Fatalf("after the email changed at the provider: %+v %v, want user %d as ada@example.com", m, err, ada.ID)
		}
		if _, err := e.store.UserByEmail(ctx, "ada.lovelace@newname.example"); apperr.CodeOf(err) != apperr.NotFound {
			t.Errorf("a user was made for the new email: %v", err)
		}
	})
}

// TestFirstSignInTakesBackAnUnverifiedAccount: someone signed up with an
// address before its owner came (with no mail, nothing verifies it); the
// owner's first SSO sign-in, whose provider verified the address, links
// the account and takes it back: the password set by whoever signed up is
// dropped, their sessions end and their API tokens are refused on every
// node (audited), and the address counts as verified. An admin's account
// (the operator made it) keeps its password.
func TestFirstSignInTakesBackAnUnverifiedAccount(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		squatter, _ := e.signup(t, "alice@example.com")
		sessions := accounts.NewSessions(sessionSecret, sessionTTL, e.clock.Now)
		tok, _, err := sessions.Start(ctx, e.store, squatter)
		if err != nil {
			t.Fatal(err)
		}
		_, key := e.token(t, squatter, "squatter's")
		if _, err := e.dir.Authenticate(ctx, key); err != nil { // now cached
			t.Fatal(err)
		}
		m, err := e.svc.SignInWithIdentity(ctx, identity("sub-alice", "alice@example.com"), nil, "192.0.2.1")
		if err != nil || m.ID != squatter.ID {
			t.Fatalf("first sign-in: %+v %v, want user %d", m, err, squatter.ID)
		}
		_, err = e.svc.Login(ctx, "alice@example.com", "password1", "192.0.2.1")
		wantErr(t, err, apperr.Unauthorized, "sso_account")
		_, err = sessions.Resume(ctx, e.store, tok)
		wantErr(t, err, apperr.Unauthorized, "invalid_session")
		_, err = e.dir.Authenticate(ctx, key)
		wantErr(t, err, apperr.Unauthorized, "revoked_api_key")
		if u, err := e.store.UserByEmail(ctx, "alice@example.com"); err != nil || u.EmailVerifiedAt == nil {
			t.Fatalf("the address after the sign-in: %+v %v, want verified", u, err)
		}
		if !contains(auditActions(t, e.store), "identity.link alice@example.com signed in by single sign-on ("+issuerURL+
			") for the first time; the address was never verified, so its password was dropped, 1 sessions ended and 1 API tokens were revoked") {
			t.Errorf("no identity.link entry saying so: %v", auditActions(t, e.store))
		}

		// The operator's admin, never verified, keeps its password.
		if _, _, err := e.svc.EnsureAdmin(ctx, "root@example.com", "admin-password"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.SignInWithIdentity(ctx, identity("sub-root", "root@example.com"), nil, "192.0.2.1"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.Login(ctx, "root@example.com", "admin-password", "192.0.2.1"); err != nil {
			t.Fatalf("the admin's password after linking: %v", err)
		}
	})
}

// TestFirstSignInOfAListedDomainJoinsItsOrganization: a new user of a
// domain the operator gave to an organization joins it as a member, with
// no password: the password sign-in says to use SSO (and costs no failed
// attempt). A domain that merely ends like a listed one does not join.
func TestFirstSignInOfAListedDomainJoinsItsOrganization(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		owner, corp := e.signup(t, "owner@corp.example")
		domains := map[string]int64{"corp.example": corp.ID}
		m, err := e.svc.SignInWithIdentity(ctx, identity("sub-grace", "Grace@Corp.example"), domains, "192.0.2.1")
		if err != nil || m.OrgID != corp.ID || m.Role != models.RoleMember || m.Email != "grace@corp.example" || m.IsAdmin() {
			t.Fatalf("first sign-in: %+v %v, want a member of %d", m, err, corp.ID)
		}
		members, err := e.store.Members(ctx, corp.ID)
		if err != nil || len(members) != 2 || members[0].UserID != owner.ID || members[1].Role != models.RoleMember {
			t.Fatalf("the organization's members: %+v %v", members, err)
		}
		if !contains(auditActions(t, e.store), "member.join grace@corp.example as member, by single sign-on ("+issuerURL+")") {
			t.Errorf("no member.join entry: %v", auditActions(t, e.store))
		}
		for range 8 { // more than the throttle's free failures: none counts
			_, err = e.svc.Login(ctx, "grace@corp.example", "password1", "192.0.2.1")
			wantErr(t, err, apperr.Unauthorized, "sso_account")
		}
		if msg := apperr.As(err).Message; msg != "this account signs in with SSO: use “Sign in with SSO” instead of a password" {
			t.Errorf("password sign-in of an SSO user: %q", msg)
		}
		again, err := e.svc.SignInWithIdentity(ctx, identity("sub-grace", "grace@corp.example"), domains, "192.0.2.1")
		if err != nil || again.ID != m.ID {
			t.Fatalf("second sign-in: %+v %v", again, err)
		}

		m, err = e.svc.SignInWithIdentity(ctx, identity("sub-eve", "eve@evilcorp.example"), domains, "192.0.2.1")
		if err != nil || m.OrgID == corp.ID || m.Role != models.RoleOwner {
			t.Fatalf("evilcorp.example joined corp.example's organization: %+v %v", m, err)
		}
	})
}

// TestFirstSignInOfAnUnlistedDomainSignsUp: someone no organization
// claims gets one of their own on the free tier, named after their email,
// as its owner, through the signup throttle.
func TestFirstSignInOfAnUnlistedDomainSignsUp(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		svc := e.throttled(t, quota.NewMemory(e.clock.Now), 1)
		m, err := svc.SignInWithIdentity(ctx, identity("sub-1", "lin@gmail.example"), nil, "192.0.2.7")
		if err != nil || m.Role != models.RoleOwner {
			t.Fatalf("first sign-in: %+v %v", m, err)
		}
		o, err := e.store.Organization(ctx, m.OrgID)
		if err != nil || o.Name != "lin@gmail.example" || o.Tier.Name != "free" {
			t.Fatalf("their organization: %+v %v", o, err)
		}
		_, err = svc.SignInWithIdentity(ctx, identity("sub-2", "mo@gmail.example"), nil, "192.0.2.7")
		wantErr(t, err, apperr.RateLimited, "signup_throttled")
		// A returning user is no signup.
		if again, err := svc.SignInWithIdentity(ctx, identity("sub-1", "lin@gmail.example"), nil, "192.0.2.7"); err != nil || again.ID != m.ID {
			t.Fatalf("returning: %+v %v", again, err)
		}
	})
}

// TestSignInRefusals: another account at the provider asserting a linked
// user's email, a domain whose organization is gone, and an unusable email.
func TestSignInRefusals(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		e.signup(t, "ada@example.com")
		if _, err := e.svc.SignInWithIdentity(ctx, identity("sub-ada", "ada@example.com"), nil, "192.0.2.1"); err != nil {
			t.Fatal(err)
		}
		_, err := e.svc.SignInWithIdentity(ctx, identity("sub-someone-else", "ada@example.com"), nil, "192.0.2.1")
		if e := wantErr(t, err, apperr.Forbidden, "sso_other_account"); e.Message !=
			"the Sluice account of ada@example.com signs in with another account at your identity provider; sign in with that one" {
			t.Errorf("message %q", e.Message)
		}
		_, err = e.svc.SignInWithIdentity(ctx, identity("sub-x", "x@gone.example"), map[string]int64{"gone.example": 999999}, "192.0.2.1")
		if e := wantErr(t, err, apperr.Forbidden, "sso_organization_missing"); e.Message !=
			"single sign-on for gone.example is set up for an organization that no longer exists; ask the operator to fix SLUICE_OIDC_DOMAINS" {
			t.Errorf("message %q", e.Message)
		}
		if _, err := e.store.UserByEmail(ctx, "x@gone.example"); apperr.CodeOf(err) != apperr.NotFound {
			t.Errorf("a user was left behind: %v", err)
		}
		_, err = e.svc.SignInWithIdentity(ctx, identity("sub-y", "not an address"), nil, "192.0.2.1")
		wantErr(t, err, apperr.Forbidden, "sso_email_invalid")
		_, err = e.svc.SignInWithIdentity(ctx, identity("", "y@example.com"), nil, "192.0.2.1")
		wantErr(t, err, apperr.Unauthorized, "sso_no_subject")
	})
}

// TestConcurrentFirstSignInsMakeOneUser: the same new account signing in
// from many tabs at once, for a listed domain and for an unlisted one,
// makes one user and one identity; every sign-in is that user.
func TestConcurrentFirstSignInsMakeOneUser(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		_, corp := e.signup(t, "owner@corp.example")
		domains := map[string]int64{"corp.example": corp.ID}
		for _, email := range []string{"grace@corp.example", "lin@gmail.example"} {
			const n = 16
			ids := make([]int64, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					m, err := e.svc.SignInWithIdentity(ctx, identity("sub-"+email, email), domains, fmt.Sprintf("192.0.2.%d", i))
					ids[i], errs[i] = m.ID, err
				})
			}
			wg.Wait()
			for i := range n {
				if errs[i] != nil || ids[i] != ids[0] {
					t.Fatalf("%s: sign-in %d: user %d %v, want user %d", email, i, ids[i], errs[i], ids[0])
				}
			}
			var users, identities int64
			db.Gorm.Model(&models.User{}).Where("email = ?", email).Count(&users)
			db.Gorm.Model(&models.UserIdentity{}).Where("user_id = ?", ids[0]).Count(&identities)
			if users != 1 || identities != 1 {
				t.Fatalf("%s: %d users, %d identities, want one each", email, users, identities)
			}
		}
	})
}
