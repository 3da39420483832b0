package accounts_test

import (
	"context"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// relay is the bus between two nodes: what one publishes, the other's
// directory applies, as the Redis bus's subscriber does.
type relay struct{ to *accounts.Directory }

func (r relay) Publish(ctx context.Context, e cluster.Event) error { return r.to.Apply(ctx, e) }

// invite makes an invitation from owner for email and accepts it as u.
func (e *env) invite(t *testing.T, owner models.Member, u models.User, role models.Role) models.Member {
	t.Helper()
	_, code, err := e.svc.Invite(ctx, owner, u.Email, role)
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.svc.AcceptInvitation(ctx, u, code)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRemovingAMemberStopsTheirTokensOnEveryNode: the tokens a removed
// member created in the organization are refused at once by the node that
// removed them and by another node that had them cached; their tokens
// elsewhere keep working.
func TestRemovingAMemberStopsTheirTokensOnEveryNode(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		other, err := accounts.NewDirectory(ctx, e.store, dirTTL, e.clock.Now)
		if err != nil {
			t.Fatal(err)
		}
		svc, err := accounts.NewService(e.store, e.dir, relay{other}, e.throttle, bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		owner, _ := e.signup(t, "owner@example.com")
		bobHome, _ := e.signup(t, "bob@example.com")
		bob := e.invite(t, owner, bobHome.User, models.RoleMember)
		_, here, err := svc.CreateToken(ctx, bob, "here", 0)
		if err != nil {
			t.Fatal(err)
		}
		_, home, _ := svc.CreateToken(ctx, bobHome, "home", 0)
		for _, d := range []*accounts.Directory{e.dir, other} {
			for _, tok := range []string{here, home} {
				if _, err := d.Authenticate(ctx, tok); err != nil { // now cached
					t.Fatal(err)
				}
			}
		}
		r, err := svc.RemoveMember(ctx, owner, bob.ID)
		if err != nil || len(r.TokenHashes) != 1 {
			t.Fatalf("%+v %v", r, err)
		}
		for name, d := range map[string]*accounts.Directory{"this node": e.dir, "another node": other} {
			_, err := d.Authenticate(ctx, here)
			wantErr(t, err, apperr.Unauthorized, "revoked_api_key")
			if _, err := d.Authenticate(ctx, home); err != nil {
				t.Errorf("%s: bob's token of his own organization: %v", name, err)
			}
		}
	})
}

// TestARemovedMembersTokenNeverWorks: a token asked for with a session
// read before its member was removed is refused, and one that a race let
// in after the removal revoked their tokens (the row as such a race
// leaves it) does not authenticate.
func TestARemovedMembersTokenNeverWorks(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		owner, _ := e.signup(t, "owner@example.com")
		bobHome, _ := e.signup(t, "bob@example.com")
		bob := e.invite(t, owner, bobHome.User, models.RoleMember) // what bob's session read
		if _, err := e.svc.RemoveMember(ctx, owner, bob.ID); err != nil {
			t.Fatal(err)
		}
		_, _, err := e.svc.CreateToken(ctx, bob, "late", 0)
		wantErr(t, err, apperr.Forbidden, "not_a_member")

		secret, err := models.NewTokenSecret()
		if err != nil {
			t.Fatal(err)
		}
		late := models.APIToken{OrgID: owner.OrgID, UserID: bob.ID, Name: "raced", Prefix: models.TokenDisplayPrefix(secret),
			Hash: models.HashToken(secret), CreatedAt: e.clock.Now().UTC()}
		if err := db.Gorm.Create(&late).Error; err != nil {
			t.Fatal(err)
		}
		_, err = e.dir.Authenticate(ctx, secret)
		wantErr(t, err, apperr.Unauthorized, "revoked_api_key")
		if !strings.Contains(err.Error(), "no longer a member") {
			t.Fatalf("the refusal does not say why: %v", err)
		}
	})
}

// TestMembersManageOnlyTheirOwnTokens: a member creates, lists, signs and
// revokes their own tokens and no one else's; an owner any of the
// organization's.
func TestMembersManageOnlyTheirOwnTokens(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		owner, _ := e.signup(t, "owner@example.com")
		bobHome, _ := e.signup(t, "bob@example.com")
		bob := e.invite(t, owner, bobHome.User, models.RoleMember)
		ownersTok, _ := e.token(t, owner, "owner's")
		bobsTok, _ := e.token(t, bob, "bob's")
		spare, _ := e.token(t, bob, "spare")

		list, err := e.svc.Tokens(ctx, bob)
		if err != nil || len(list) != 2 || list[0].UserID != bob.ID || list[1].UserID != bob.ID {
			t.Fatalf("bob sees %+v %v", list, err)
		}
		if all, _ := e.svc.Tokens(ctx, owner); len(all) != 3 {
			t.Fatalf("the owner sees %d tokens, want 3", len(all))
		}
		_, err = e.svc.RevokeToken(ctx, bob, ownersTok.ID)
		wantErr(t, err, apperr.Forbidden, "not_your_token")
		_, _, err = e.svc.SetTokenSigning(ctx, bob, ownersTok.ID, false)
		wantErr(t, err, apperr.Forbidden, "not_your_token")
		if _, err := e.svc.RevokeToken(ctx, bob, bobsTok.ID); err != nil {
			t.Fatalf("bob revoking his own: %v", err)
		}
		if _, err := e.svc.RevokeToken(ctx, owner, spare.ID); err != nil {
			t.Fatalf("the owner revoking bob's: %v", err)
		}
		// Another organization's token is not found, for members and owners.
		_, err = e.svc.RevokeToken(ctx, bobHome, ownersTok.ID)
		wantErr(t, err, apperr.NotFound, "")
	})
}

// TestSwitchingTheSessionsOrganization: the session acts where it is
// switched to, with the role there, on every node; one not the user's is
// not found; a user of no organization may sign in but not work.
func TestSwitchingTheSessionsOrganization(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		owner, acme := e.signup(t, "owner@example.com")
		bobHome, _ := e.signup(t, "bob@example.com")
		e.invite(t, owner, bobHome.User, models.RoleMember)
		nodeA := accounts.NewSessions(sessionSecret, sessionTTL, e.clock.Now)
		nodeB := accounts.NewSessions(sessionSecret, sessionTTL, e.clock.Now)

		start, err := e.svc.Login(ctx, "bob@example.com", "password1", "192.0.2.1")
		if err != nil || start.OrgID != bobHome.OrgID || start.Role != models.RoleOwner {
			t.Fatalf("bob signs in to %+v %v, want his own organization", start, err)
		}
		tok, _, err := nodeA.Start(ctx, e.store, start)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nodeA.SwitchOrganization(ctx, e.store, tok, start.User, acme.ID); err != nil {
			t.Fatal(err)
		}
		if m, err := nodeB.Resume(ctx, e.store, tok); err != nil || m.OrgID != acme.ID || m.Role != models.RoleMember {
			t.Fatalf("after the switch, node B resumes %+v %v", m, err)
		}
		_, stranger := e.signup(t, "eve@example.com")
		_, err = nodeA.SwitchOrganization(ctx, e.store, tok, start.User, stranger.ID)
		wantErr(t, err, apperr.NotFound, "organization_not_found")
		_, err = nodeA.SwitchOrganization(ctx, e.store, tok, owner.User, acme.ID)
		wantErr(t, err, apperr.Unauthorized, "invalid_session")
		// Bob's next sign-in starts where he switched to.
		if again, _ := e.svc.Login(ctx, "bob@example.com", "password1", "192.0.2.1"); again.OrgID != acme.ID {
			t.Fatalf("the next sign-in starts in %d, want %d", again.OrgID, acme.ID)
		}

		// Removed from Acme, bob's session there ends at once.
		m, _ := e.store.Membership(ctx, start.User, acme.ID)
		if _, err := e.svc.RemoveMember(ctx, owner, m.ID); err != nil {
			t.Fatal(err)
		}
		_, err = nodeB.Resume(ctx, e.store, tok)
		wantErr(t, err, apperr.Unauthorized, "invalid_session")

		// A user of no organization signs in, and is told to get invited.
		loner := testdb.AddMember(t, db, acme.ID, "loner@example.com", mustHash(t, "password1"), models.RoleMember)
		if _, err := e.svc.RemoveMember(ctx, owner, loner.ID); err != nil {
			t.Fatal(err)
		}
		nobody, err := e.svc.Login(ctx, "loner@example.com", "password1", "192.0.2.1")
		if err != nil || nobody.HasOrganization() {
			t.Fatalf("loner signs in as %+v %v", nobody, err)
		}
		_, _, err = e.svc.CreateToken(ctx, nobody, "x", 0)
		wantErr(t, err, apperr.Forbidden, "no_organization")
		if e := apperr.As(err); e.Message != "you belong to no organization: ask an owner to invite you, then open the invitation's link" {
			t.Errorf("message %q", e.Message)
		}
	})
}

// TestSignupByInvitation: the account joins the invitation's organization
// with its role and makes none; the address must be the one invited, and
// a stale code is refused before any hashing or throttling.
func TestSignupByInvitation(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		owner, acme := e.signup(t, "owner@example.com")
		_, code, err := e.svc.Invite(ctx, owner, "new@example.com", "")
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = e.svc.SignupByInvitation(ctx, "other@example.com", "password1", code, "192.0.2.9")
		wantErr(t, err, apperr.Forbidden, "invitation_email_mismatch")
		_, _, err = e.svc.SignupByInvitation(ctx, "new@example.com", "short", code, "192.0.2.9")
		wantErr(t, err, apperr.Unprocessable, "")
		_, _, err = e.svc.SignupByInvitation(ctx, "new@example.com", "password1", "inv_AAAAAAAAAAAAAAAAAAAAAAAAAA", "192.0.2.9")
		wantErr(t, err, apperr.NotFound, "invitation_not_found")
		m, o, err := e.svc.SignupByInvitation(ctx, "new@example.com", "password1", code, "192.0.2.9")
		if err != nil || o.ID != acme.ID || m.OrgID != acme.ID || m.Role != models.RoleMember {
			t.Fatalf("%+v %+v %v", m, o, err)
		}
		if _, err := e.svc.Login(ctx, "new@example.com", "password1", "192.0.2.9"); err != nil {
			t.Fatalf("the new account signs in: %v", err)
		}
		_, _, err = e.svc.SignupByInvitation(ctx, "new@example.com", "password1", code, "192.0.2.9")
		wantErr(t, err, apperr.Conflict, "invitation_used")
		_, _, err = e.svc.Invite(ctx, m, "x@example.com", models.RoleMember)
		wantErr(t, err, apperr.Forbidden, "owner_required")
		_, _, err = e.svc.Invite(ctx, owner, "not an address", models.RoleMember)
		wantErr(t, err, apperr.Unprocessable, "invalid_email")
	})
}

func mustHash(t *testing.T, password string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return string(h)
}
