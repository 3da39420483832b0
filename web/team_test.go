package web_test

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// invitationLink invites email into the owner's organization on the team
// page and returns the link the page shows, once.
func invitationLink(t *testing.T, owner *browser, email, role string) string {
	t.Helper()
	w := owner.post("/organization/invitations", url.Values{"email": {email}, "role": {role}})
	w.expectPage(http.StatusCreated, "team", "new-invitation")
	link := w.text("new-invitation-url")
	if !strings.HasPrefix(link, "http://example.com/invitations/inv_") {
		t.Fatalf("link %q", link)
	}
	if got := w.text("new-invitation"); !strings.Contains(got, "Sluice sends no mail: copy this link now and send it to them yourself") {
		t.Errorf("the page does not say the link is to be passed on: %q", got)
	}
	return strings.TrimPrefix(link, "http://example.com")
}

// TestTeamPageForOwnersAndMembers: owners see the members with their
// controls (the removal saying what it ends), the invitation form and
// list; members see the list read-only and may only leave.
func TestTeamPageForOwnersAndMembers(t *testing.T) {
	t.Parallel()
	s := newSite(t, testdb.SQLite(t))
	ada := s.signup("ada@example.com", "Analytical Engines")
	owner := s.signedIn(ada)
	bob := testdb.AddMember(t, s.db, ada.OrgID, "bob@example.com", "h", models.RoleMember)
	s.token(bob, "bob's laptop")

	w := owner.get("/organization")
	w.expectPage(http.StatusOK, "team", "members", "invitations", "invite-form", "invitations-empty")
	if got := w.texts("member-email"); strings.Join(got, ",") != "ada@example.com,bob@example.com" {
		t.Fatalf("members %q", got)
	}
	if got := w.texts("member-role"); strings.Join(got, ",") != "owner,member" {
		t.Fatalf("roles %q", got)
	}
	if got := w.text("last-owner"); got != "The only owner: make another member an owner first." {
		t.Errorf("the last owner's row: %q", got)
	}
	if got := w.text("member-remove-warning"); got != "Their sessions here end at once and the API tokens they created here are revoked (1 active)." {
		t.Errorf("removal warning %q", got)
	}

	link := invitationLink(t, owner, "carol@example.com", "owner")
	w = owner.get("/organization")
	if got := w.text("invitation-row"); !strings.HasPrefix(got, "carol@example.com") || w.text("invitation-status") != "pending" ||
		strings.Contains(w.Body.String(), link) {
		t.Errorf("the list %q (the link must not be shown again)", got)
	}
	id, _ := w.testid("invitation-row").Attr("data-invitation-id")
	owner.post("/organization/invitations/"+id+"/revoke", url.Values{}).expectRedirect("/organization?done=invitation-revoked#invitations")
	if got := owner.get("/organization").text("invitation-status"); got != "revoked" {
		t.Errorf("after revoking, the invitation is %q", got)
	}
	s.anonymous().get(link).expectPage(http.StatusOK, "invitation-problem")
	w = owner.post("/organization/invitations", url.Values{"email": {"bob@example.com"}, "role": {"member"}})
	w.expectPage(http.StatusConflict, "invite-error")
	if got := w.text("invite-error"); got != "bob@example.com is already a member of this organization" {
		t.Errorf("invite error %q", got)
	}
	if v := w.value("#invite-email"); v != "bob@example.com" {
		t.Errorf("the form was not refilled: %q", v)
	}

	m := s.signedIn(bob)
	w = m.get("/organization")
	w.expectPage(http.StatusOK, "team", "members-readonly")
	if w.testid("invitations").Length() != 0 || w.testid("member-role-form").Length() != 0 || strings.Contains(w.Body.String(), "carol@example.com") {
		t.Error("a member sees the owners' controls or the invitations")
	}
	if got := w.texts("member-remove-warning"); len(got) != 1 || got[0] != "You lose access at once: your sessions here end and the API tokens you created here are revoked (1 active)." {
		t.Errorf("a member's leave warning %q", got)
	}
	m.post("/organization/invitations", url.Values{"email": {"x@example.com"}}).expectError(http.StatusForbidden, "only the organization's owners may invite people")
	m.post("/organization/members/1/role", url.Values{"role": {"member"}}).expectError(http.StatusForbidden, "only the organization's owners may change members' roles")

	// The owner makes bob an owner, then removes him; his sessions end.
	owner.post("/organization/members/"+strconv.FormatInt(bob.ID, 10)+"/role", url.Values{"role": {"owner"}}).expectRedirect("/organization?done=role")
	owner.post("/organization/members/"+strconv.FormatInt(bob.ID, 10)+"/remove", url.Values{}).expectRedirect("/organization?done=removed")
	if got := owner.get("/organization?done=removed").text("team-flash"); !strings.Contains(got, "their sessions here ended") {
		t.Errorf("flash %q", got)
	}
	m.get("/organization").expectRedirect("/login")
}

// TestSigningUpThroughAnInvitation: the link's page offers an account for
// the invited address; made, it lands in the organization as member; the
// link then says it was used.
func TestSigningUpThroughAnInvitation(t *testing.T) {
	t.Parallel()
	s := newSite(t, testdb.SQLite(t))
	owner := s.signedIn(s.signup("ada@example.com", "Analytical Engines"))
	link := invitationLink(t, owner, "Bob@Example.com", "member")
	code := strings.TrimPrefix(link, "/invitations/")

	guest := s.anonymous()
	w := guest.get(link)
	w.expectPage(http.StatusOK, "invitation", "invitation-signup-form", "invitation-login")
	if got := w.text("invitation-summary"); !strings.Contains(got, "ada@example.com invites bob@example.com to join Analytical Engines as member.") {
		t.Errorf("summary %q", got)
	}
	if v := w.value("#invite-signup-email"); v != "bob@example.com" {
		t.Errorf("email field %q", v)
	}
	w = guest.post("/signup", url.Values{"invitation": {code}, "email": {"eve@example.com"}, "password": {"password123"}})
	w.expectFormError(http.StatusForbidden, "invitation", "this invitation is for another email address: sign in, or sign up, with the address it was sent to")
	w = guest.post("/signup", url.Values{"invitation": {code}, "email": {"bob@example.com"}, "password": {"short"}})
	w.expectFormError(http.StatusUnprocessableEntity, "invitation", "password must be at least 8 bytes")
	guest.post("/signup", url.Values{"invitation": {code}, "email": {"bob@example.com"}, "password": {"password123"}}).expectRedirect("/dashboard")
	w = guest.get("/dashboard")
	w.expectPage(http.StatusOK, "dashboard")
	if got := w.text("nav-org"); got != "Analytical Engines · member" {
		t.Errorf("nav-org = %q, want the invitation's organization and the member role", got)
	}
	if got := w.text("upgrade-readonly"); got == "" {
		t.Error("a member sees the upgrade form")
	}
	if w.testid("org-switcher").Length() != 0 {
		t.Error("a switcher with one organization")
	}
	// Used: the link says so, to anyone.
	w = s.anonymous().get(link)
	w.expectPage(http.StatusOK, "invitation-problem")
	if got := w.text("invitation-problem"); got != "this invitation has already been used; ask an owner for a new one" {
		t.Errorf("problem %q", got)
	}
	if w.testid("invitation-signup-form").Length() != 0 {
		t.Error("a used invitation still offers a signup")
	}
	s.anonymous().get("/invitations/inv_NOTAREALCODEATALLXXXXXXXX").expectError(http.StatusNotFound,
		"this invitation link is not valid: check that it was copied whole, or ask an owner for a new one")
}

// TestAcceptingAnInvitationAndSwitching: a user with an organization of
// their own signs in from the link, accepts, lands in the new one, and the
// header's switcher moves them between the two.
func TestAcceptingAnInvitationAndSwitching(t *testing.T) {
	t.Parallel()
	s := newSite(t, testdb.SQLite(t))
	owner := s.signedIn(s.signup("ada@example.com", "Analytical Engines"))
	carol := s.signup("carol@example.com", "Carol's Couplets")
	link := invitationLink(t, owner, "carol@example.com", "member")

	// Signed in as someone else: the page says so and offers nothing.
	w := owner.get(link)
	w.expectPage(http.StatusOK, "invitation-wrong-account")
	if w.testid("invitation-accept").Length() != 0 {
		t.Error("another account is offered the accept button")
	}
	owner.post(link+"/accept", url.Values{}).expectFormError(http.StatusForbidden, "invitation",
		"this invitation is for another email address: sign in, or sign up, with the address it was sent to")

	// Carol signs in from the link's page and comes back to it.
	b := s.anonymous()
	w = b.get("/login?next=" + link)
	if v := w.value(`input[name=next]`); v != link {
		t.Fatalf("next = %q", v)
	}
	b.post("/login", url.Values{"email": {"carol@example.com"}, "password": {password}, "next": {link}}).expectRedirect(link)
	// Only invitation pages are gone back to.
	s.anonymous().post("/login", url.Values{"email": {"carol@example.com"}, "password": {password}, "next": {"https://evil.example/"}}).expectRedirect("/dashboard")
	w = b.get(link)
	w.expectPage(http.StatusOK, "invitation-accept")
	b.post(link+"/accept", url.Values{}).expectRedirect("/organization?done=joined")
	w = b.get("/organization?done=joined")
	if got := w.text("nav-org"); got != "Analytical Engines · member" {
		t.Errorf("after accepting, nav-org = %q", got)
	}
	if got := w.text("team-flash"); got != "Invitation accepted: you are now a member of this organization." {
		t.Errorf("flash %q", got)
	}

	// Two organizations: the switcher lists both, the current one chosen.
	w = b.get("/dashboard")
	opts := w.testid("org-switcher").Find("option")
	if opts.Length() != 2 || !strings.Contains(opts.Filter("[selected]").Text(), "Analytical Engines (member)") {
		t.Fatalf("switcher: %q", w.text("org-switcher"))
	}
	b.post("/session/organization", url.Values{"id": {strconv.FormatInt(carol.OrgID, 10)}}).expectRedirect("/dashboard")
	if got := b.get("/dashboard").text("nav-org"); got != "Carol's Couplets · owner" {
		t.Errorf("after switching, nav-org = %q", got)
	}
	b.post("/session/organization", url.Values{"id": {"999999"}}).expectError(http.StatusNotFound, "no such organization among yours")
	// Leaving ends the session there: the next sign-in starts at home.
	b.post("/session/organization", url.Values{"id": {strconv.FormatInt(ada(t, s).OrgID, 10)}}).expectRedirect("/dashboard")
	b.post("/organization/members/"+strconv.FormatInt(carol.ID, 10)+"/remove", url.Values{}).expectRedirect("/login")
	b = s.login("carol@example.com", password)
	if got := b.get("/dashboard").text("nav-org"); got != "Carol's Couplets · owner" {
		t.Errorf("after leaving, the next sign-in is in %q", got)
	}
}

// ada is the owner of Analytical Engines.
func ada(t *testing.T, s *site) models.Member {
	t.Helper()
	u, err := s.store.UserByEmail(t.Context(), "ada@example.com")
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.store.StartingMember(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
