package templates

import (
	"strings"
	"testing"
)

// TestOrgSwitcher: with two or more organizations the header offers a
// switcher (a form, no script) with the current one chosen; with one, none.
func TestOrgSwitcher(t *testing.T) {
	one := &UserNav{Email: "ada@example.com", OrgName: "Acme", Role: "owner", Orgs: []OrgChoice{{ID: 1, Name: "Acme", Role: "owner", Current: true}}}
	doc, _ := render(t, Dashboard(Page{Title: "x", User: one}, DashboardView{}))
	if byTestID(doc, "org-switcher").Length() != 0 {
		t.Error("a switcher for one organization")
	}
	if got := strings.Join(strings.Fields(byTestID(doc, "nav-org").Text()), " "); got != "Acme · owner" {
		t.Errorf("nav-org = %q", got)
	}
	two := *one
	two.Orgs = append(two.Orgs, OrgChoice{ID: 7, Name: "Bolt & Nut", Role: "member"})
	doc, _ = render(t, Dashboard(Page{Title: "x", User: &two}, DashboardView{}))
	form := byTestID(doc, "org-switcher")
	if attr(form, "method") != "post" || attr(form, "action") != "/session/organization" || form.Find(`button[type="submit"]`).Length() != 1 {
		t.Fatalf("switcher %s", outer(form))
	}
	opts := form.Find(`select[name="id"] option`)
	if opts.Length() != 2 || attr(opts.Eq(0), "value") != "1" || attr(opts.Eq(1), "value") != "7" ||
		opts.Eq(1).Text() != "Bolt & Nut (member)" {
		t.Fatalf("options %s", outer(opts))
	}
	if _, ok := opts.Eq(0).Attr("selected"); !ok {
		t.Error("the current organization is not the chosen one")
	}
	if _, ok := opts.Eq(1).Attr("selected"); ok {
		t.Error("another organization is chosen")
	}
}

// TestTeamPage: owners get the controls and the invitations, members the
// list and their own way out; the last owner has no way out.
func TestTeamPage(t *testing.T) {
	members := []MemberRow{
		{UserID: 1, Email: "ada@example.com", Role: "owner", You: true, LastOwner: true},
		{UserID: 2, Email: "bob@example.com", Role: "member", ActiveTokens: 2},
	}
	doc, _ := render(t, Team(Page{Title: "Team"}, TeamView{OrgName: "Acme", CanManage: true, Members: members,
		NewInvitation: &NewInvitationView{Email: "carol@example.com", Role: "member", URL: "https://sluice.example/invitations/inv_ABC", Expires: "2027-01-08 10:00 UTC"},
		Invitations:   []InvitationRow{{ID: 9, Email: "carol@example.com", Role: "member", Status: "pending"}, {ID: 8, Email: "dan@example.com", Status: "accepted"}}}))
	if got := byTestID(doc, "new-invitation-url").Text(); got != "https://sluice.example/invitations/inv_ABC" {
		t.Errorf("link %q", got)
	}
	rows := byTestID(doc, "member-row")
	if rows.Eq(0).Find(`[data-testid="member-remove"]`).Length() != 0 || byTestID(doc, "last-owner").Length() != 1 {
		t.Error("the last owner can be removed")
	}
	if f := rows.Eq(1).Find(`[data-testid="member-remove"]`); attr(f, "action") != "/organization/members/2/remove" || attr(f, "method") != "post" {
		t.Errorf("bob's removal %s", outer(f))
	}
	if got := strings.Join(strings.Fields(rows.Eq(1).Find(`[data-testid="member-remove-warning"]`).Text()), " "); got != "Their sessions here end at once and the API tokens they created here are revoked (2 active)." {
		t.Errorf("warning %q", got)
	}
	if f := rows.Eq(1).Find(`[data-testid="member-role-form"]`); attr(f, "action") != "/organization/members/2/role" || attr(f.Find("input[name=role]"), "value") != "owner" {
		t.Errorf("bob's role form %s", outer(f))
	}
	if n := byTestID(doc, "invitation-revoke").Length(); n != 1 {
		t.Errorf("%d revoke buttons, want 1 (the pending invitation's)", n)
	}

	doc, _ = render(t, Team(Page{Title: "Team"}, TeamView{OrgName: "Acme", Members: []MemberRow{
		{UserID: 1, Email: "ada@example.com", Role: "owner", LastOwner: true}, {UserID: 2, Email: "bob@example.com", Role: "member", You: true}}}))
	for _, id := range []string{"invitations", "invite-form", "member-role-form", "last-owner"} {
		if byTestID(doc, id).Length() != 0 {
			t.Errorf("a member sees %s", id)
		}
	}
	if byTestID(doc, "members-readonly").Length() != 1 || byTestID(doc, "member-remove").Length() != 1 {
		t.Error("a member sees no read-only note, or cannot leave")
	}
}

// TestInvitationPage: anonymous visitors get a signup for the invited
// address and a way to sign in; the invitee signed in an accept button;
// anyone else is told to sign out; a used link says so and offers nothing.
func TestInvitationPage(t *testing.T) {
	v := InvitationView{Code: "inv_ABC", OrgName: "Acme", Email: "ada@example.com", Role: "member", InvitedBy: "o@acme.example", Expires: "2027-01-08 10:00 UTC"}
	doc, _ := render(t, Invitation(Page{Title: "Join"}, v))
	form := byTestID(doc, "invitation-signup-form")
	if attr(form, "action") != "/signup" || attr(form.Find("input[name=invitation]"), "value") != "inv_ABC" || attr(form.Find("input[name=email]"), "value") != "ada@example.com" {
		t.Fatalf("signup form %s", outer(form))
	}
	if got := attr(byTestID(doc, "invitation-login"), "href"); got != "/login?next=/invitations/inv_ABC" {
		t.Errorf("sign-in link %q", got)
	}
	v.SignedInAs = "ada@example.com"
	doc, _ = render(t, Invitation(Page{Title: "Join"}, v))
	if f := byTestID(doc, "invitation-accept"); attr(f, "action") != "/invitations/inv_ABC/accept" || byTestID(doc, "invitation-signup-form").Length() != 0 {
		t.Errorf("accept form %s", outer(f))
	}
	v.SignedInAs, v.WrongAccount = "eve@example.com", true
	doc, _ = render(t, Invitation(Page{Title: "Join"}, v))
	if byTestID(doc, "invitation-wrong-account").Length() != 1 || byTestID(doc, "invitation-accept").Length() != 0 {
		t.Error("another account is offered the invitation")
	}
	v.Problem = "this invitation has already been used; ask an owner for a new one"
	doc, _ = render(t, Invitation(Page{Title: "Join"}, v))
	if byTestID(doc, "invitation-problem").Text() != v.Problem || doc.Find("form[action='/signup'], [data-testid=invitation-accept]").Length() != 0 {
		t.Error("a used invitation offers a way in")
	}
}
