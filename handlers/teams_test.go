package handlers

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// invite makes an invitation with the owner's session and returns its
// answer.
func (e *env) invite(owner, email, role string) map[string]any {
	e.t.Helper()
	w := e.do(request{method: "POST", path: "/api/organization/invitations", bearer: owner, body: `{"email":"` + email + `","role":"` + role + `"}`})
	if w.Code != http.StatusCreated {
		e.t.Fatalf("invite %s: %d %s", email, w.Code, w.Body.String())
	}
	return decode(e.t, w)
}

// TestInvitationsAPI: an owner invites (the link ends in the code, shown
// once), lists and revokes; the invitee signs up through the code and
// lands in the organization as the role invited; every refusal says why.
func TestInvitationsAPI(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		owner := e.signup("owner@acme.example", "Acme")

		inv := e.invite(owner, "Ada@Example.com", "member")
		code, _ := inv["code"].(string)
		if !models.InvitationCodeShaped(code) || inv["accept_url"] != "http://example.com/invitations/"+code || inv["email"] != "ada@example.com" ||
			inv["role"] != "member" || inv["status"] != "pending" {
			t.Fatalf("invitation %v", inv)
		}
		expires, _ := time.Parse(time.RFC3339, inv["expires_at"].(string))
		if d := time.Until(expires); d < 7*24*time.Hour-time.Minute || d > 7*24*time.Hour+time.Minute {
			t.Fatalf("expires in %v, want 7 days", d)
		}
		w := e.do(request{method: "GET", path: "/api/organization/invitations", bearer: owner})
		if w.Code != 200 || strings.Contains(w.Body.String(), code) || !strings.Contains(w.Body.String(), `"email":"ada@example.com"`) ||
			!strings.Contains(w.Body.String(), `"invited_by":"owner@acme.example"`) {
			t.Fatalf("list: %d %s", w.Code, w.Body.String())
		}

		for _, c := range []struct {
			name, body, code, message string
			status                    int
		}{
			{"a bad role", `{"email":"x@example.com","role":"admin"}`, "invalid_role", `role must be "member" or "owner"`, 422},
			{"a bad address", `{"email":"not an address","role":"member"}`, "invalid_email", "email must be an address like ada@example.com", 422},
			{"an unknown field", `{"email":"x@example.com","roles":"member"}`, "invalid_json", "unknown field", 400},
			{"a member", `{"email":"owner@acme.example"}`, "already_member", "owner@acme.example is already a member of this organization", 409},
		} {
			t.Run(c.name, func(t *testing.T) {
				expectError(t, e.do(request{method: "POST", path: "/api/organization/invitations", bearer: owner, body: c.body}), c.status, c.code, c.message)
			})
		}

		// Signing up with the code joins Acme, as a member, with no
		// organization of one's own.
		expectError(t, e.do(request{method: "POST", path: "/api/auth/signup", body: `{"email":"eve@example.com","password":"password123","invitation":"` + code + `"}`}),
			403, "invitation_email_mismatch", "this invitation is for another email address")
		expectError(t, e.do(request{method: "POST", path: "/api/auth/signup",
			body: `{"email":"ada@example.com","password":"password123","organization":"Mine","invitation":"` + code + `"}`}),
			422, "organization_with_invitation", "leave organization out when signing up with an invitation")
		w = e.do(request{method: "POST", path: "/api/auth/signup", body: `{"email":"ada@example.com","password":"password123","invitation":"` + code + `"}`})
		if w.Code != 201 {
			t.Fatalf("signup: %d %s", w.Code, w.Body.String())
		}
		out := decode(t, w)
		if org := out["organization"].(map[string]any); org["name"] != "Acme" || out["user"].(map[string]any)["role"] != "member" {
			t.Fatalf("signup answer %v", out)
		}
		ada := out["token"].(string)
		w = e.do(request{method: "GET", path: "/api/organizations", bearer: ada})
		if w.Code != 200 || strings.Count(w.Body.String(), `"id"`) != 1 || !strings.Contains(w.Body.String(), `"name":"Acme"`) ||
			!strings.Contains(w.Body.String(), `"role":"member"`) || !strings.Contains(w.Body.String(), `"current":true`) {
			t.Fatalf("ada's organizations: %s", w.Body.String())
		}
		expectError(t, e.do(request{method: "POST", path: "/api/auth/signup", body: `{"email":"ada2@example.com","password":"password123","invitation":"` + code + `"}`}),
			409, "invitation_used", "this invitation has already been used")
		// Members neither invite nor see invitations.
		expectError(t, e.do(request{method: "POST", path: "/api/organization/invitations", bearer: ada, body: `{"email":"x@example.com"}`}),
			403, "owner_required", "only the organization's owners may invite people")
		expectError(t, e.do(request{method: "GET", path: "/api/organization/invitations", bearer: ada}),
			403, "owner_required", "only the organization's owners may see invitations")

		// A signed-in user accepts; a revoked or unknown code is refused.
		bob := e.signup("bob@example.com", "Bob's")
		bobInv := e.invite(owner, "bob@example.com", "owner")
		expectError(t, e.do(request{method: "POST", path: "/api/invitations/" + bobInv["code"].(string) + "/accept", bearer: ada}),
			403, "invitation_email_mismatch", "for another email address")
		w = e.do(request{method: "POST", path: "/api/invitations/" + bobInv["code"].(string) + "/accept", bearer: bob})
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"name":"Acme"`) || !strings.Contains(w.Body.String(), `"role":"owner"`) {
			t.Fatalf("accept: %d %s", w.Code, w.Body.String())
		}
		revoked := e.invite(owner, "carol@example.com", "member")
		w = e.do(request{method: "DELETE", path: fmt.Sprintf("/api/organization/invitations/%v", revoked["id"]), bearer: owner})
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"status":"revoked"`) {
			t.Fatalf("revoke: %d %s", w.Code, w.Body.String())
		}
		expectError(t, e.do(request{method: "DELETE", path: fmt.Sprintf("/api/organization/invitations/%v", revoked["id"]), bearer: owner}),
			409, "invitation_not_pending", "this invitation is already revoked")
		carol := e.signup("carol@example.com", "Carol's")
		expectError(t, e.do(request{method: "POST", path: "/api/invitations/" + revoked["code"].(string) + "/accept", bearer: carol}),
			409, "invitation_revoked", "this invitation was revoked")
		expectError(t, e.do(request{method: "POST", path: "/api/invitations/inv_ZZZZZZZZZZZZZZZZZZZZZZZZZZ/accept", bearer: carol}),
			404, "invitation_not_found", "this invitation link is not valid")
		expectError(t, e.do(request{method: "POST", path: "/api/invitations/" + revoked["code"].(string) + "/accept"}),
			401, "missing_session", "sign in first")
		// Expired: as if a week had passed (the store's clock is the wall's).
		late := e.invite(owner, "dan@example.com", "member")
		dan := e.signup("dan@example.com", "Dan's")
		if err := db.Gorm.Exec("UPDATE invitations SET expires_at = ? WHERE email = 'dan@example.com'", time.Now().UTC().Add(-time.Minute)).Error; err != nil {
			t.Fatal(err)
		}
		expectError(t, e.do(request{method: "POST", path: "/api/invitations/" + late["code"].(string) + "/accept", bearer: dan}),
			409, "invitation_expired", "this invitation expired on")
	})
}

// TestMembersAPI: everyone lists the members; owners change roles and
// remove; the last owner stays; a removed member's session and tokens in
// the organization stop at once.
func TestMembersAPI(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		owner := e.signup("owner@acme.example", "Acme")
		bobHome := e.signup("bob@example.com", "Bob's")
		if w := e.do(request{method: "POST", path: "/api/invitations/" + e.invite(owner, "bob@example.com", "member")["code"].(string) + "/accept", bearer: bobHome}); w.Code != 200 {
			t.Fatalf("accept: %d %s", w.Code, w.Body.String())
		}
		// Bob signs in again: his session starts in his own organization;
		// he switches to Acme and works there.
		bob := e.login("bob@example.com", "password123")
		w := e.do(request{method: "GET", path: "/api/organizations", bearer: bob})
		var acmeID float64
		for _, o := range decode(t, w)["data"].([]any) {
			if o := o.(map[string]any); o["name"] == "Acme" {
				acmeID = o["id"].(float64)
				if o["current"] != false || o["role"] != "member" {
					t.Fatalf("Acme in bob's list: %v", o)
				}
			}
		}
		expectError(t, e.do(request{method: "PUT", path: "/api/session/organization", bearer: bob, body: `{"id":999999}`}),
			404, "organization_not_found", "no such organization among yours")
		expectError(t, e.do(request{method: "PUT", path: "/api/session/organization", bearer: bob, body: `{}`}),
			400, "missing_id", "id must be the id of one of your organizations")
		w = e.do(request{method: "PUT", path: "/api/session/organization", bearer: bob, body: fmt.Sprintf(`{"id":%d}`, int64(acmeID))})
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"name":"Acme"`) || !strings.Contains(w.Body.String(), `"role":"member"`) {
			t.Fatalf("switch: %d %s", w.Code, w.Body.String())
		}
		bobsToken, _ := e.apiToken(bob) // made in Acme
		ownersToken, ownersTokenID := e.apiToken(owner)

		w = e.do(request{method: "GET", path: "/api/organization/members", bearer: bob})
		var members []map[string]any
		for _, m := range decode(t, w)["data"].([]any) {
			members = append(members, m.(map[string]any))
		}
		if len(members) != 2 || members[0]["email"] != "owner@acme.example" || members[0]["role"] != "owner" || members[1]["email"] != "bob@example.com" ||
			members[1]["role"] != "member" || members[1]["joined_at"] == nil {
			t.Fatalf("members: %v", members)
		}
		ownerID, bobID := int64(members[0]["user_id"].(float64)), int64(members[1]["user_id"].(float64))

		// A member's tokens are theirs: the list, and the owner's are not
		// bob's to revoke.
		w = e.do(request{method: "GET", path: "/api/tokens", bearer: bob})
		if strings.Count(w.Body.String(), `"prefix"`) != 1 {
			t.Fatalf("bob's tokens: %s", w.Body.String())
		}
		expectError(t, e.do(request{method: "DELETE", path: fmt.Sprintf("/api/tokens/%d", ownersTokenID), bearer: bob}),
			403, "not_your_token", "members may revoke only the tokens they created; ask an owner to revoke this one")
		if w := e.chat(ownersToken); w.Code != 200 {
			t.Fatalf("the owner's token after bob's refused revoke: %d", w.Code)
		}

		// Roles: members may not, the last owner stays.
		expectError(t, e.do(request{method: "PUT", path: fmt.Sprintf("/api/organization/members/%d", ownerID), bearer: bob, body: `{"role":"member"}`}),
			403, "owner_required", "only the organization's owners may change members' roles")
		expectError(t, e.do(request{method: "PUT", path: fmt.Sprintf("/api/organization/members/%d", ownerID), bearer: owner, body: `{"role":"member"}`}),
			409, "last_owner", "an organization must keep an owner: make another member an owner before making owner@acme.example a member")
		expectError(t, e.do(request{method: "DELETE", path: fmt.Sprintf("/api/organization/members/%d", ownerID), bearer: owner}),
			409, "last_owner", "before leaving")
		expectError(t, e.do(request{method: "PUT", path: fmt.Sprintf("/api/organization/members/%d", bobID), bearer: owner, body: `{"role":"boss"}`}),
			422, "invalid_role", `role must be "member" or "owner"`)
		expectError(t, e.do(request{method: "PUT", path: "/api/organization/members/x", bearer: owner, body: `{"role":"owner"}`}),
			404, "member_not_found", "no such member of this organization")
		expectError(t, e.do(request{method: "DELETE", path: fmt.Sprintf("/api/organization/members/%d", ownerID), bearer: bob}),
			403, "owner_required", "only the organization's owners may remove members")
		w = e.do(request{method: "PUT", path: fmt.Sprintf("/api/organization/members/%d", bobID), bearer: owner, body: `{"role":"owner"}`})
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"role":"owner"`) {
			t.Fatalf("promote: %d %s", w.Code, w.Body.String())
		}
		// Now an owner, bob may revoke any token; back to member, not.
		w = e.do(request{method: "PUT", path: fmt.Sprintf("/api/organization/members/%d", bobID), bearer: owner, body: `{"role":"member"}`})
		if w.Code != 200 {
			t.Fatalf("demote: %d %s", w.Code, w.Body.String())
		}

		// Removed: bob's session in Acme and his Acme token stop at once;
		// his own organization is his still.
		w = e.do(request{method: "DELETE", path: fmt.Sprintf("/api/organization/members/%d", bobID), bearer: owner})
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"sessions_ended":1`) || !strings.Contains(w.Body.String(), `"tokens_revoked":1`) {
			t.Fatalf("remove: %d %s", w.Code, w.Body.String())
		}
		expectError(t, e.do(request{method: "GET", path: "/api/usage", bearer: bob}), 401, "invalid_session", "session is invalid or expired")
		if w := e.chat(bobsToken); w.Code != 401 || !strings.Contains(w.Body.String(), "revoked_api_key") {
			t.Fatalf("bob's Acme token after his removal: %d %s", w.Code, w.Body.String())
		}
		if w := e.do(request{method: "GET", path: "/api/usage", bearer: bobHome}); w.Code != 200 {
			t.Fatalf("bob's session at home: %d %s", w.Code, w.Body.String())
		}
		var actions []string
		db.Gorm.Raw("SELECT action FROM audit_log WHERE action LIKE 'member.%' ORDER BY id").Scan(&actions)
		if strings.Join(actions, ",") != "member.join,member.role,member.role,member.remove" {
			t.Errorf("audit: %v", actions)
		}
	})
}

// TestAUserOfNoOrganization: removed from their last organization, a user
// may sign in, see they belong nowhere and accept an invitation, and is
// refused everything else with a message saying what to do.
func TestAUserOfNoOrganization(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	owner := e.signup("owner@acme.example", "Acme")
	invited := e.invite(owner, "loner@example.com", "member")
	w := e.do(request{method: "POST", path: "/api/auth/signup", body: `{"email":"loner@example.com","password":"password123","invitation":"` + invited["code"].(string) + `"}`})
	if w.Code != 201 {
		t.Fatalf("signup: %d %s", w.Code, w.Body.String())
	}
	loner := decode(t, w)["token"].(string)
	// The loner leaves.
	w = e.do(request{method: "GET", path: "/api/organization/members", bearer: loner})
	id := decode(t, w)["data"].([]any)[1].(map[string]any)["user_id"]
	if w := e.do(request{method: "DELETE", path: fmt.Sprintf("/api/organization/members/%v", id), bearer: loner}); w.Code != 200 {
		t.Fatalf("leave: %d %s", w.Code, w.Body.String())
	}
	loner = e.login("loner@example.com", "password123")
	if w := e.do(request{method: "GET", path: "/api/organizations", bearer: loner}); w.Code != 200 || w.Body.String() != `{"data":[]}` {
		t.Fatalf("organizations: %d %s", w.Code, w.Body.String())
	}
	for _, path := range []string{"/api/tokens", "/api/usage", "/api/budget", "/api/organization/members"} {
		expectError(t, e.do(request{method: "GET", path: path, bearer: loner}), 403, "no_organization",
			"you belong to no organization: ask an owner to invite you, then open the invitation's link")
	}
	again := e.invite(owner, "loner@example.com", "member")
	if w := e.do(request{method: "POST", path: "/api/invitations/" + again["code"].(string) + "/accept", bearer: loner}); w.Code != 200 {
		t.Fatalf("accept: %d %s", w.Code, w.Body.String())
	}
}
