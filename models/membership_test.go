package models_test

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// team is an organization with its owner, on a store with a clock of the
// test's.
type team struct {
	s     *models.Store
	db    *models.DB
	clock *clocktest.Clock
	org   models.Organization
	owner models.Member
}

func newTeam(t *testing.T, db *models.DB) team {
	t.Helper()
	clock := clocktest.New(time.Date(2027, time.May, 3, 9, 0, 0, 0, time.UTC))
	s := models.NewStore(db, models.WithClock(clock.Now))
	o, owner, err := s.CreateOrganizationWithOwner(ctx, "Acme", "free", "owner@acme.example", "h", models.RoleMember)
	if err != nil {
		t.Fatal(err)
	}
	return team{s: s, db: db, clock: clock, org: o, owner: owner}
}

// user makes an account of email with an organization of its own, and
// returns the bare user (to join others with).
func (tm team) user(t *testing.T, email string) models.User {
	t.Helper()
	_, m, err := tm.s.CreateOrganizationWithOwner(ctx, "Org of "+email, "free", email, "h", models.RoleMember)
	if err != nil {
		t.Fatal(err)
	}
	return m.User
}

// join invites u into tm's organization as role and accepts.
func (tm team) join(t *testing.T, u models.User, role models.Role) models.Member {
	t.Helper()
	_, code, err := tm.s.CreateInvitation(ctx, tm.owner, u.Email, role)
	if err != nil {
		t.Fatal(err)
	}
	m, err := tm.s.AcceptInvitation(ctx, u, code)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func wantReason(t *testing.T, err error, code apperr.Code, reason, message string) {
	t.Helper()
	e := apperr.As(err)
	if err == nil || e.Code != code || e.Reason != reason || (message != "" && !strings.Contains(e.Message, message)) {
		t.Fatalf("got %v (reason %q), want %s %s %q", err, e.Reason, code, reason, message)
	}
}

// TestSignupMakesAnOwnerMembership: the first user of an organization is
// its owner by membership; the user row names no organization role, and
// the admin is an admin who owns the operators' organization.
func TestSignupMakesAnOwnerMembership(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		tm := newTeam(t, db)
		if tm.owner.OrgID != tm.org.ID || tm.owner.Role != models.RoleOwner || tm.owner.AccountRole != models.RoleMember || tm.owner.IsAdmin() {
			t.Fatalf("owner %+v", tm.owner)
		}
		members, err := tm.s.Members(ctx, tm.org.ID)
		if err != nil || len(members) != 1 || members[0].UserID != tm.owner.ID || members[0].Role != models.RoleOwner || members[0].Email != "owner@acme.example" {
			t.Fatalf("members %+v %v", members, err)
		}
		_, admin, err := tm.s.CreateOrganizationWithOwner(ctx, "Ops", "premium", "ops@example.com", "h", models.RoleAdmin)
		if err != nil || !admin.IsAdmin() || admin.Role != models.RoleOwner {
			t.Fatalf("admin %+v %v", admin, err)
		}
	})
}

// TestInvitationLifecycle walks one organization's invitations through
// every state: made (shown once, kept hashed), refused to the wrong
// address, accepted once, refused when reused, revoked, expired, and
// replaced by a newer one to the same address.
func TestInvitationLifecycle(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		tm := newTeam(t, db)
		ada, bob := tm.user(t, "ada@example.com"), tm.user(t, "bob@example.com")

		inv, code, err := tm.s.CreateInvitation(ctx, tm.owner, " Ada@Example.com ", models.RoleMember)
		if err != nil {
			t.Fatal(err)
		}
		if !models.InvitationCodeShaped(code) || inv.Email != "ada@example.com" || inv.Status(tm.clock.Now()) != models.InvitationPending ||
			!inv.ExpiresAt.Equal(tm.clock.Now().Add(7*24*time.Hour)) {
			t.Fatalf("invitation %+v, code %q", inv, code)
		}
		// Only the code's SHA-256 is stored.
		var stored []string
		db.Gorm.Raw("SELECT code_hash FROM invitations").Scan(&stored)
		if len(stored) != 1 || stored[0] != models.HashToken(code) || strings.Contains(stored[0], code) {
			t.Fatalf("stored %q for code %q", stored, code)
		}

		// Bob holds Ada's link: refused, and the code stays unused.
		_, err = tm.s.AcceptInvitation(ctx, bob, code)
		wantReason(t, err, apperr.Forbidden, "invitation_email_mismatch", "for another email address")
		m, err := tm.s.AcceptInvitation(ctx, ada, code)
		if err != nil || m.OrgID != tm.org.ID || m.Role != models.RoleMember || m.ID != ada.ID {
			t.Fatalf("accept: %+v %v", m, err)
		}
		_, err = tm.s.AcceptInvitation(ctx, ada, code)
		wantReason(t, err, apperr.Conflict, "invitation_used", "already been used")
		if got, _ := tm.s.Membership(ctx, ada, tm.org.ID); got.Role != models.RoleMember {
			t.Fatalf("ada's membership %+v", got)
		}
		// A member cannot be invited again.
		_, _, err = tm.s.CreateInvitation(ctx, tm.owner, "ada@example.com", models.RoleOwner)
		wantReason(t, err, apperr.Conflict, "already_member", "ada@example.com is already a member")
		// Nor may a member invite.
		_, _, err = tm.s.CreateInvitation(ctx, m, "eve@example.com", models.RoleMember)
		wantReason(t, err, apperr.Forbidden, "owner_required", "only the organization's owners may invite people")
		_, _, err = tm.s.CreateInvitation(ctx, tm.owner, "eve@example.com", "admin")
		wantReason(t, err, apperr.Unprocessable, "invalid_role", `role must be "member" or "owner"`)

		// Revoked: the link stops working; revoking again says why not.
		rev, revCode, err := tm.s.CreateInvitation(ctx, tm.owner, "bob@example.com", models.RoleOwner)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tm.s.RevokeInvitation(ctx, tm.owner, rev.ID); err != nil {
			t.Fatal(err)
		}
		_, err = tm.s.AcceptInvitation(ctx, bob, revCode)
		wantReason(t, err, apperr.Conflict, "invitation_revoked", "was revoked")
		_, err = tm.s.RevokeInvitation(ctx, tm.owner, rev.ID)
		wantReason(t, err, apperr.Conflict, "invitation_not_pending", "already revoked")
		// Another organization's owner cannot revoke it.
		_, otherOwner, _ := tm.s.CreateOrganizationWithOwner(ctx, "Other", "free", "o@other.example", "h", models.RoleMember)
		_, err = tm.s.RevokeInvitation(ctx, otherOwner, inv.ID)
		wantReason(t, err, apperr.NotFound, "", "invitation not found")

		// A newer invitation to the same address replaces a pending one.
		first, firstCode, _ := tm.s.CreateInvitation(ctx, tm.owner, "bob@example.com", models.RoleMember)
		second, secondCode, err := tm.s.CreateInvitation(ctx, tm.owner, "bob@example.com", models.RoleOwner)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tm.s.AcceptInvitation(ctx, bob, firstCode)
		wantReason(t, err, apperr.Conflict, "invitation_revoked", "")

		// Expired: seven days on, the code no longer works.
		tm.clock.Advance(7*24*time.Hour + time.Second)
		_, err = tm.s.AcceptInvitation(ctx, bob, secondCode)
		wantReason(t, err, apperr.Conflict, "invitation_expired", "expired on 2027-05-10 09:00 UTC")
		_, err = tm.s.AcceptInvitation(ctx, bob, "inv_NOTAREALCODEATALLXXXXXXXX")
		wantReason(t, err, apperr.NotFound, "invitation_not_found", "not valid")
		_, err = tm.s.AcceptInvitation(ctx, bob, "not even shaped like one")
		wantReason(t, err, apperr.NotFound, "invitation_not_found", "")

		// The owner's list says what became of each.
		list, err := tm.s.Invitations(ctx, tm.org.ID)
		if err != nil {
			t.Fatal(err)
		}
		status := map[int64]string{}
		for _, i := range list {
			status[i.ID] = i.Status(tm.clock.Now())
			if i.InviterEmail != "owner@acme.example" || i.OrgName != "Acme" {
				t.Errorf("invitation %d: inviter %q, org %q", i.ID, i.InviterEmail, i.OrgName)
			}
		}
		want := map[int64]string{inv.ID: "accepted", rev.ID: "revoked", first.ID: "revoked", second.ID: "expired"}
		for id, st := range want {
			if status[id] != st {
				t.Errorf("invitation %d is %q, want %q (all: %v)", id, status[id], st, status)
			}
		}
		// Every change is in the audit log.
		var actions []string
		db.Gorm.Raw("SELECT action FROM audit_log WHERE org_id = ? AND (action LIKE 'invitation.%' OR action = 'member.join') ORDER BY id", tm.org.ID).Scan(&actions)
		if got := strings.Join(actions, ","); got != "invitation.create,member.join,invitation.create,invitation.revoke,invitation.create,invitation.revoke,invitation.create" {
			t.Errorf("audit: %s", got)
		}
	})
}

// TestConcurrentAcceptsMakeOneMembership: a code accepted many times at
// once, by its invitee and through signups with its address, is used
// exactly once.
func TestConcurrentAcceptsMakeOneMembership(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		tm := newTeam(t, db)
		ada := tm.user(t, "ada@example.com")
		_, code, err := tm.s.CreateInvitation(ctx, tm.owner, "ada@example.com", models.RoleMember)
		if err != nil {
			t.Fatal(err)
		}
		const n = 8
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { _, errs[i] = tm.s.AcceptInvitation(ctx, ada, code) })
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
			} else if e := apperr.As(err); e.Reason != "invitation_used" && e.Reason != "already_member" {
				t.Errorf("a losing accept: %v", err)
			}
		}
		var memberships int64
		db.Gorm.Model(&models.Membership{}).Where("org_id = ? AND user_id = ?", tm.org.ID, ada.ID).Count(&memberships)
		if ok != 1 || memberships != 1 {
			t.Fatalf("%d accepts succeeded, %d memberships; want 1 and 1", ok, memberships)
		}

		// Signups through one code at once: one account.
		_, code, _ = tm.s.CreateInvitation(ctx, tm.owner, "new@example.com", models.RoleMember)
		for i := range n {
			wg.Go(func() { _, _, errs[i] = tm.s.CreateInvitedUser(ctx, code, "new@example.com", "h") })
		}
		wg.Wait()
		ok = 0
		for _, err := range errs {
			if err == nil {
				ok++
			} else if e := apperr.As(err); e.Reason != "invitation_used" && e.Reason != "email_taken" {
				t.Errorf("a losing signup: %v", err)
			}
		}
		var users int64
		db.Gorm.Model(&models.User{}).Where("email = ?", "new@example.com").Count(&users)
		if ok != 1 || users != 1 {
			t.Fatalf("%d signups succeeded, %d users; want 1 and 1", ok, users)
		}
	})
}

// TestInvitedSignupJoinsTheOrganization: an account made through an
// invitation belongs to its organization with its role, and to no new one.
func TestInvitedSignupJoinsTheOrganization(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		tm := newTeam(t, db)
		_, code, _ := tm.s.CreateInvitation(ctx, tm.owner, "new@example.com", models.RoleOwner)
		_, _, err := tm.s.CreateInvitedUser(ctx, code, "other@example.com", "h")
		wantReason(t, err, apperr.Forbidden, "invitation_email_mismatch", "")
		var orgs int64
		db.Gorm.Model(&models.Organization{}).Count(&orgs)
		o, m, err := tm.s.CreateInvitedUser(ctx, code, "New@Example.com", "h")
		if err != nil || o.ID != tm.org.ID || o.Tier.Name != "free" || m.Role != models.RoleOwner || m.LastOrgID != tm.org.ID || m.Email != "new@example.com" {
			t.Fatalf("%+v %+v %v", o, m, err)
		}
		var after int64
		db.Gorm.Model(&models.Organization{}).Count(&after)
		if after != orgs {
			t.Fatalf("organizations %d -> %d", orgs, after)
		}
		var by *int64
		db.Gorm.Raw("SELECT accepted_by FROM invitations").Scan(&by)
		if by == nil || *by != m.ID {
			t.Fatalf("accepted_by %v, want %d", by, m.ID)
		}
	})
}

// TestInvitationBounds: at most MaxInvitationsPerHour made in an hour, and
// MaxPendingInvitations waiting, however they are spread.
func TestInvitationBounds(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		tm := newTeam(t, db)
		invite := func(i int) error {
			_, _, err := tm.s.CreateInvitation(ctx, tm.owner, "p"+strconv.Itoa(i)+"@example.com", models.RoleMember)
			return err
		}
		made := 0
		for made < models.MaxPendingInvitations {
			for range models.MaxInvitationsPerHour {
				if err := invite(made); err != nil {
					t.Fatalf("invitation %d: %v", made, err)
				}
				made++
			}
			if made < models.MaxPendingInvitations {
				err := invite(made)
				wantReason(t, err, apperr.RateLimited, "invitations_throttled", "made 20 invitations in the last hour")
				if ra := apperr.As(err).RetryAfter; ra != time.Hour {
					t.Fatalf("retry after %v, want an hour (all made at once)", ra)
				}
			}
			tm.clock.Advance(time.Hour)
		}
		err := invite(made)
		wantReason(t, err, apperr.Conflict, "invitation_limit_reached", "100 pending invitations")
		// Revoking one makes room.
		list, _ := tm.s.Invitations(ctx, tm.org.ID)
		if _, err := tm.s.RevokeInvitation(ctx, tm.owner, list[0].ID); err != nil {
			t.Fatal(err)
		}
		if err := invite(made); err != nil {
			t.Fatalf("after a revocation: %v", err)
		}
	})
}

// TestLastOwnerStays: the last owner can be neither demoted nor removed
// nor leave; with two, either may step down.
func TestLastOwnerStays(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		tm := newTeam(t, db)
		_, err := tm.s.SetMemberRole(ctx, tm.owner, tm.owner.ID, models.RoleMember)
		wantReason(t, err, apperr.Conflict, "last_owner", "make another member an owner before making owner@acme.example a member")
		_, err = tm.s.RemoveMember(ctx, tm.owner, tm.owner.ID)
		wantReason(t, err, apperr.Conflict, "last_owner", "before leaving")
		bob := tm.join(t, tm.user(t, "bob@example.com"), models.RoleMember)
		_, err = tm.s.SetMemberRole(ctx, bob, tm.owner.ID, models.RoleMember)
		wantReason(t, err, apperr.Forbidden, "owner_required", "change members' roles")
		_, err = tm.s.RemoveMember(ctx, bob, tm.owner.ID)
		wantReason(t, err, apperr.Forbidden, "owner_required", "remove members")
		_, err = tm.s.SetMemberRole(ctx, tm.owner, bob.ID, "root")
		wantReason(t, err, apperr.Unprocessable, "invalid_role", "")
		_, err = tm.s.SetMemberRole(ctx, tm.owner, bob.ID+1000, models.RoleOwner)
		wantReason(t, err, apperr.NotFound, "member_not_found", "no such member")
		if m, err := tm.s.SetMemberRole(ctx, tm.owner, bob.ID, models.RoleOwner); err != nil || m.Role != models.RoleOwner {
			t.Fatalf("promote: %+v %v", m, err)
		}
		if m, err := tm.s.SetMemberRole(ctx, tm.owner, tm.owner.ID, models.RoleMember); err != nil || m.Role != models.RoleMember {
			t.Fatalf("step down with another owner: %+v %v", m, err)
		}
		bob.Role = models.RoleOwner
		_, err = tm.s.RemoveMember(ctx, bob, bob.ID)
		wantReason(t, err, apperr.Conflict, "last_owner", "before leaving")
	})
}

// TestOwnersDemotingEachOtherAtOnceLeaveOne: two owners demoting (or
// removing) each other at the same moment, round after round: one change
// wins, the other is refused, and an owner always remains.
func TestOwnersDemotingEachOtherAtOnceLeaveOne(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		tm := newTeam(t, db)
		a := tm.owner
		b := tm.join(t, tm.user(t, "b@example.com"), models.RoleOwner)
		for round := range 10 {
			remove := round%2 == 1
			var wg sync.WaitGroup
			var errA, errB error
			start := make(chan struct{})
			act := func(actor models.Member, target int64, err *error) {
				<-start
				if remove {
					_, *err = tm.s.RemoveMember(ctx, actor, target)
				} else {
					_, *err = tm.s.SetMemberRole(ctx, actor, target, models.RoleMember)
				}
			}
			wg.Go(func() { act(a, b.ID, &errA) })
			wg.Go(func() { act(b, a.ID, &errB) })
			close(start)
			wg.Wait()
			if (errA == nil) == (errB == nil) {
				t.Fatalf("round %d: both or neither won: %v / %v", round, errA, errB)
			}
			lost := errA
			if lost == nil {
				lost = errB
			}
			if r := apperr.As(lost).Reason; r != "last_owner" && r != "owner_required" && r != "member_not_found" {
				t.Fatalf("round %d: the loser was told %v", round, lost)
			}
			members, _ := tm.s.Members(ctx, tm.org.ID)
			owners := 0
			for _, m := range members {
				if m.Role == models.RoleOwner {
					owners++
				}
			}
			if owners != 1 {
				t.Fatalf("round %d: %d owners: %+v", round, owners, members)
			}
			// Back to two owners for the next round.
			winner, loser := a, b
			if errA != nil {
				winner, loser = b, a
			}
			if remove {
				_, code, err := tm.s.CreateInvitation(ctx, winner, loser.Email, models.RoleOwner)
				if err != nil {
					t.Fatal(err)
				}
				if loser, err = tm.s.AcceptInvitation(ctx, loser.User, code); err != nil {
					t.Fatal(err)
				}
			} else if _, err := tm.s.SetMemberRole(ctx, winner, loser.ID, models.RoleOwner); err != nil {
				t.Fatal(err)
			}
			a, b = winner, loser
			a.Role, b.Role = models.RoleOwner, models.RoleOwner
		}
	})
}

// TestRemovingAMemberEndsTheirSessionsAndTokensThere: sessions and tokens
// in the organization end; those in the member's other organizations stay.
func TestRemovingAMemberEndsTheirSessionsAndTokensThere(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		tm := newTeam(t, db)
		bobUser := tm.user(t, "bob@example.com")
		home, _ := tm.s.StartingMember(ctx, bobUser)
		bob := tm.join(t, bobUser, models.RoleMember)
		now := tm.clock.Now()
		for id, org := range map[string]int64{"here": tm.org.ID, "home": home.OrgID} {
			if err := tm.s.CreateLoginSession(ctx, models.LoginSession{ID: id, UserID: bob.ID, OrgID: &org, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
		}
		here, _, _ := tm.s.CreateAPIToken(ctx, tm.org.ID, bob.ID, "here", nil)
		mine, _, _ := tm.s.CreateAPIToken(ctx, home.OrgID, bob.ID, "home", nil)
		ownersToken, _, _ := tm.s.CreateAPIToken(ctx, tm.org.ID, tm.owner.ID, "owner's", nil)

		r, err := tm.s.RemoveMember(ctx, tm.owner, bob.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.SessionsEnded != 1 || len(r.TokenHashes) != 1 || r.TokenHashes[0] != here.Hash || r.Member.Email != "bob@example.com" {
			t.Fatalf("removal %+v", r)
		}
		if _, err := tm.s.LoginSessionMember(ctx, "here", bob.ID); apperr.CodeOf(err) != apperr.NotFound {
			t.Fatalf("the session here still works: %v", err)
		}
		if m, err := tm.s.LoginSessionMember(ctx, "home", bob.ID); err != nil || m.OrgID != home.OrgID {
			t.Fatalf("the session at home: %+v %v", m, err)
		}
		for _, c := range []struct {
			tok     models.APIToken
			revoked bool
		}{{here, true}, {mine, false}, {ownersToken, false}} {
			o, _ := tm.s.TokenOwnerByHash(ctx, c.tok.Hash)
			if (o.RevokedAt != nil) != c.revoked {
				t.Errorf("token %q revoked %v, want %v", c.tok.Name, o.RevokedAt != nil, c.revoked)
			}
		}
		if _, err := tm.s.Membership(ctx, bob.User, tm.org.ID); apperr.CodeOf(err) != apperr.NotFound {
			t.Fatalf("still a member: %v", err)
		}
		var detail string
		db.Gorm.Raw("SELECT detail FROM audit_log WHERE action = 'member.remove'").Scan(&detail)
		if detail != "bob@example.com (member): 1 sessions ended, 1 tokens revoked" {
			t.Errorf("audit detail %q", detail)
		}
	})
}

// TestSessionsActInTheirOrganization: a session acts where it was started
// or switched to, with the role there; switching to an organization of
// someone else's is not found, and the next sign-in starts where the user
// last switched to while they still belong there.
func TestSessionsActInTheirOrganization(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		tm := newTeam(t, db)
		bobUser := tm.user(t, "bob@example.com")
		home, _ := tm.s.StartingMember(ctx, bobUser)
		if home.OrgID == tm.org.ID || home.Role != models.RoleOwner {
			t.Fatalf("bob starts in %+v", home)
		}
		tm.join(t, bobUser, models.RoleMember)
		now := tm.clock.Now()
		if err := tm.s.CreateLoginSession(ctx, models.LoginSession{ID: "s", UserID: bobUser.ID, OrgID: &home.OrgID, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		m, err := tm.s.SetLoginSessionOrganization(ctx, "s", bobUser, tm.org.ID)
		if err != nil || m.OrgID != tm.org.ID || m.Role != models.RoleMember {
			t.Fatalf("switch: %+v %v", m, err)
		}
		if m, err := tm.s.LoginSessionMember(ctx, "s", bobUser.ID); err != nil || m.OrgID != tm.org.ID || m.Role != models.RoleMember {
			t.Fatalf("after the switch the session is %+v %v", m, err)
		}
		_, other, _ := tm.s.CreateOrganizationWithOwner(ctx, "Other", "free", "o@other.example", "h", models.RoleMember)
		_, err = tm.s.SetLoginSessionOrganization(ctx, "s", bobUser, other.OrgID)
		wantReason(t, err, apperr.NotFound, "organization_not_found", "no such organization")
		if m, _ := tm.s.LoginSessionMember(ctx, "s", bobUser.ID); m.OrgID != tm.org.ID {
			t.Fatalf("a refused switch moved the session to %d", m.OrgID)
		}
		u, _ := tm.s.User(ctx, bobUser.ID)
		if start, _ := tm.s.StartingMember(ctx, u); start.OrgID != tm.org.ID {
			t.Fatalf("the next sign-in starts in %d, want %d (where bob switched to)", start.OrgID, tm.org.ID)
		}
		// Removed from it, the next sign-in starts in the first one left;
		// with none left, in none.
		bob, _ := tm.s.Membership(ctx, u, tm.org.ID)
		if _, err := tm.s.RemoveMember(ctx, bob, bob.ID); err != nil {
			t.Fatal(err)
		}
		if start, _ := tm.s.StartingMember(ctx, u); start.OrgID != home.OrgID {
			t.Fatalf("after leaving, the next sign-in starts in %d, want %d", start.OrgID, home.OrgID)
		}
		ghost := testdb.AddMember(t, db, tm.org.ID, "ghost@example.com", "h", models.RoleMember)
		if _, err := tm.s.RemoveMember(ctx, tm.owner, ghost.ID); err != nil {
			t.Fatal(err)
		}
		if start, err := tm.s.StartingMember(ctx, ghost.User); err != nil || start.HasOrganization() {
			t.Fatalf("a user of no organization starts in %+v %v", start, err)
		}
		if err := tm.s.CreateLoginSession(ctx, models.LoginSession{ID: "g", UserID: ghost.ID, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if m, err := tm.s.LoginSessionMember(ctx, "g", ghost.ID); err != nil || m.HasOrganization() || m.Email != "ghost@example.com" {
			t.Fatalf("a session of no organization: %+v %v", m, err)
		}
	})
}
