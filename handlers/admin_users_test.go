package handlers

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// signupOrg signs up an owner of a new organization and returns its id.
func (e *env) signupOrg(email, org string) int64 {
	e.t.Helper()
	e.signup(email, org)
	u, err := e.store.UserByEmail(context.Background(), email)
	if err != nil {
		e.t.Fatal(err)
	}
	return u.LastOrgID
}

func (e *env) userID(email string) int64 {
	e.t.Helper()
	u, err := e.store.UserByEmail(context.Background(), email)
	if err != nil {
		e.t.Fatal(err)
	}
	return u.ID
}

// wantError fails t unless w is status with error.code and error.message
// containing message.
func wantError(t *testing.T, w *httptest.ResponseRecorder, status int, code, message string) {
	t.Helper()
	var body struct {
		Error struct{ Code, Message string }
	}
	_ = json.Unmarshal(w.Body.Bytes(), &body)
	if w.Code != status || body.Error.Code != code || !strings.Contains(body.Error.Message, message) {
		t.Fatalf("got %d %s, want %d %s %q", w.Code, w.Body.String(), status, code, message)
	}
}

func auditActions(t *testing.T, e *env, prefix string) []string {
	t.Helper()
	rows, _, err := e.store.AuditEntries(context.Background(), models.AuditQuery{ActionPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rows {
		out = append(out, r.Action+" "+r.Target+" "+r.Detail)
	}
	return out
}

// TestAdminUsersListSearchesAndPages: the list searches emails by
// substring, ignoring case, pages by cursor, and says each user's
// organizations and roles, disabled state and last sign-in.
func TestAdminUsersListSearchesAndPages(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		admin := e.login("admin@example.com", "admin-password")
		owner := e.signup("Ada@Example.com", "Analytical Engines")
		for i := range 5 {
			e.signup(fmt.Sprintf("user%d@example.com", i), fmt.Sprintf("Org %d", i))
		}
		e.signup("grace@navy.example", "Navy")
		inviteAndJoin(t, e, owner, "user0@example.com")

		var page struct {
			Data []struct {
				ID            int64
				Email         string
				Disabled      bool
				LastLoginAt   *string `json:"last_login_at"`
				Organizations []struct{ Name, Role string }
			}
			NextCursor *string `json:"next_cursor"`
		}
		get := func(path string) {
			t.Helper()
			w := e.do(request{method: "GET", path: path, bearer: admin})
			if w.Code != 200 {
				t.Fatalf("%s: %d %s", path, w.Code, w.Body.String())
			}
			page.Data, page.NextCursor = nil, nil
			if err := json.Unmarshal(w.Body.Bytes(), &page); err != nil {
				t.Fatal(err)
			}
		}
		get("/api/admin/users?q=EXAMPLE.COM&limit=4")
		var emails []string
		for _, u := range page.Data {
			emails = append(emails, u.Email)
		}
		if got := strings.Join(emails, ","); got != "admin@example.com,ada@example.com,user0@example.com,user1@example.com" || page.NextCursor == nil {
			t.Fatalf("first page %s, next %v", got, page.NextCursor)
		}
		if u := page.Data[2]; len(u.Organizations) != 2 || u.Organizations[0].Name != "Analytical Engines" || u.Organizations[0].Role != "member" ||
			u.Organizations[1].Name != "Org 0" || u.Organizations[1].Role != "owner" {
			t.Errorf("user0's organizations: %+v", u.Organizations)
		}
		if page.Data[0].LastLoginAt == nil || page.Data[1].LastLoginAt != nil {
			t.Errorf("last sign-in: admin %v (signed in), ada %v (only signed up)", page.Data[0].LastLoginAt, page.Data[1].LastLoginAt)
		}
		get("/api/admin/users?q=EXAMPLE.COM&limit=4&cursor=" + *page.NextCursor)
		if len(page.Data) != 3 || page.Data[2].Email != "user4@example.com" || page.NextCursor != nil {
			t.Fatalf("second page: %+v next %v", page.Data, page.NextCursor)
		}
		get("/api/admin/users?q=%25") // a LIKE wildcard is a character like any other
		if len(page.Data) != 0 {
			t.Fatalf("q=%%: %+v", page.Data)
		}
		for _, bad := range []struct{ q, code, msg string }{
			{"limit=0", "invalid_limit", "limit must be a whole number from 1 to 200"},
			{"limit=201", "invalid_limit", "from 1 to 200"},
			{"cursor=-1", "invalid_cursor", "cursor must be the next_cursor of the page before"},
			{"cursor=x", "invalid_cursor", "next_cursor"},
		} {
			wantError(t, e.do(request{method: "GET", path: "/api/admin/users?" + bad.q, bearer: admin}), 400, bad.code, bad.msg)
		}
		wantError(t, e.do(request{method: "GET", path: "/api/admin/users", bearer: owner}), 403, "forbidden", "this endpoint is for admins")
	})
}

// inviteAndJoin has the owner of session invite email, who accepts.
func inviteAndJoin(t *testing.T, e *env, ownerSession, email string) {
	t.Helper()
	w := e.do(request{method: "POST", path: "/api/organization/invitations", bearer: ownerSession, body: `{"email":"` + email + `"}`})
	if w.Code != 201 {
		t.Fatalf("invite: %d %s", w.Code, w.Body.String())
	}
	code := decode(t, w)["code"].(string)
	w = e.do(request{method: "POST", path: "/api/invitations/" + code + "/accept", bearer: e.login(email, "password123")})
	if w.Code != 200 {
		t.Fatalf("accept: %d %s", w.Code, w.Body.String())
	}
}

// TestAdminDisableAndEnableUser: a disabled user's sessions end at once,
// their sign-in is refused saying why, and their tokens answer 401 in
// each dialect's shape while a colleague's keep working; an admin cannot
// disable themselves; enabling brings back the tokens that were not
// revoked meanwhile; all of it audited.
func TestAdminDisableAndEnableUser(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		admin := e.login("admin@example.com", "admin-password")
		owner := e.signup("owner@example.com", "Acme")
		e.signup("bo@example.com", "Bo's own")
		inviteAndJoin(t, e, owner, "bo@example.com")
		bo := e.login("bo@example.com", "password123")
		if w := e.do(request{method: "PUT", path: "/api/session/organization", bearer: bo,
			body: fmt.Sprintf(`{"id":%d}`, e.userLastOrg("owner@example.com"))}); w.Code != 200 {
			t.Fatalf("switch: %d %s", w.Code, w.Body.String())
		}
		boKey, _ := e.apiToken(bo)
		boRevoked, boRevokedID := e.apiToken(bo)
		ownerKey, _ := e.apiToken(owner)
		for _, k := range []string{boKey, ownerKey} {
			if w := e.chat(k); w.Code != 200 {
				t.Fatalf("before: %d %s", w.Code, w.Body.String())
			}
		}
		boID := e.userID("bo@example.com")

		w := e.do(request{method: "POST", path: fmt.Sprintf("/api/admin/users/%d/disable", boID), bearer: admin})
		if w.Code != 200 {
			t.Fatalf("disable: %d %s", w.Code, w.Body.String())
		}
		m := decode(t, w)
		if m["sessions_ended"].(float64) != 3 || m["tokens_stopped"].(float64) != 2 || m["user"].(map[string]any)["disabled"] != true {
			t.Errorf("disable answered %v", m)
		}
		wantError(t, e.do(request{method: "GET", path: "/api/tokens", bearer: bo}), 401, "invalid_session", "sign in again")
		wantError(t, e.chat(boKey), 401, "user_disabled", "this token's user is disabled")
		msg := e.do(request{method: "POST", path: "/v1/messages", header: map[string]string{"x-api-key": boKey},
			body: `{"model":"sluice-local","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`})
		if msg.Code != 401 || !strings.Contains(msg.Body.String(), `"type":"authentication_error"`) ||
			!strings.Contains(msg.Body.String(), "this token's user is disabled") {
			t.Errorf("Anthropic dialect: %d %s", msg.Code, msg.Body.String())
		}
		if w := e.chat(ownerKey); w.Code != 200 {
			t.Errorf("a colleague's token stopped: %d %s", w.Code, w.Body.String())
		}
		wantError(t, e.do(loginReq("bo@example.com", "password123")), 403, "account_disabled", "this account has been disabled by an administrator")
		// A wrong password says nothing of the account.
		wantError(t, e.do(loginReq("bo@example.com", "wrong-password")), 401, "invalid_credentials", "email or password is wrong")

		// Refusals, each in the route's shape.
		wantError(t, e.do(request{method: "POST", path: fmt.Sprintf("/api/admin/users/%d/disable", boID), bearer: admin}), 409, "user_disabled",
			"bo@example.com is already disabled")
		adminID := e.userID("admin@example.com")
		wantError(t, e.do(request{method: "POST", path: fmt.Sprintf("/api/admin/users/%d/disable", adminID), bearer: admin}), 409,
			"cannot_disable_self", "you cannot disable your own account")
		wantError(t, e.do(request{method: "POST", path: "/api/admin/users/999999/disable", bearer: admin}), 404, "user_not_found", "no such user")
		wantError(t, e.do(request{method: "POST", path: "/api/admin/users/x/enable", bearer: admin}), 404, "user_not_found", "no such user")
		wantError(t, e.do(request{method: "POST", path: fmt.Sprintf("/api/admin/users/%d/disable", boID), bearer: owner}), 403, "forbidden", "for admins")

		// The owner revokes one of bo's tokens meanwhile: it stays revoked.
		if w := e.do(request{method: "DELETE", path: fmt.Sprintf("/api/tokens/%d", boRevokedID), bearer: owner}); w.Code != 200 {
			t.Fatalf("revoke: %d %s", w.Code, w.Body.String())
		}
		w = e.do(request{method: "POST", path: fmt.Sprintf("/api/admin/users/%d/enable", boID), bearer: admin})
		if w.Code != 200 || decode(t, w)["tokens_restored"].(float64) != 1 {
			t.Fatalf("enable: %d %s", w.Code, w.Body.String())
		}
		if w := e.chat(boKey); w.Code != 200 {
			t.Errorf("enabled user's token: %d %s", w.Code, w.Body.String())
		}
		wantError(t, e.chat(boRevoked), 401, "revoked_api_key", "revoked")
		e.login("bo@example.com", "password123")
		wantError(t, e.do(request{method: "POST", path: fmt.Sprintf("/api/admin/users/%d/enable", boID), bearer: admin}), 409, "user_enabled",
			"bo@example.com is not disabled")

		got := auditActions(t, e, "user.")
		want := []string{
			fmt.Sprintf("user.enable %d bo@example.com: 1 tokens work again", boID),
			fmt.Sprintf("user.disable %d bo@example.com: 3 sessions ended, 2 tokens stopped", boID),
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("audit:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}

// TestAdminDeleteOrganization: deleting an organization stops its tokens,
// ends its members' sessions in it and takes it off their lists (a member
// left with none is told so), keeps its invoices and usage downloadable,
// refuses a second deletion and an admin's organization, and is audited.
func TestAdminDeleteOrganization(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		admin := e.login("admin@example.com", "admin-password")
		owner := e.signup("owner@doomed.example", "Doomed")
		orgID := e.userLastOrg("owner@doomed.example")
		other := e.signup("other@keep.example", "Keep")
		inviteAndJoin(t, e, owner, "other@keep.example")
		key, _ := e.apiToken(owner)
		for range 3 {
			if w := e.chat(key); w.Code != 200 {
				t.Fatalf("chat: %d %s", w.Code, w.Body.String())
			}
		}
		// other switches their session into Doomed.
		if w := e.do(request{method: "PUT", path: "/api/session/organization", bearer: other, body: fmt.Sprintf(`{"id":%d}`, orgID)}); w.Code != 200 {
			t.Fatalf("switch: %d %s", w.Code, w.Body.String())
		}
		pending := e.do(request{method: "POST", path: "/api/organization/invitations", bearer: owner, body: `{"email":"late@doomed.example"}`})
		lateCode := decode(t, pending)["code"].(string)

		before := exportZip(t, e, admin, orgID)

		w := e.do(request{method: "DELETE", path: fmt.Sprintf("/api/admin/organizations/%d", orgID), bearer: admin})
		if w.Code != 200 {
			t.Fatalf("delete: %d %s", w.Code, w.Body.String())
		}
		m := decode(t, w)
		if m["members_removed"].(float64) != 2 || m["tokens_stopped"].(float64) != 1 || m["invitations_revoked"].(float64) != 1 ||
			m["sessions_ended"].(float64) != 2 || m["export_url"] != fmt.Sprintf("/api/admin/organizations/%d/export", orgID) {
			t.Errorf("delete answered %v", m)
		}
		wantError(t, e.chat(key), 401, "organization_deleted", "this token's organization has been deleted")
		wantError(t, e.do(request{method: "GET", path: "/api/tokens", bearer: owner}), 401, "invalid_session", "sign in again")
		wantError(t, e.do(request{method: "GET", path: "/api/tokens", bearer: other}), 401, "invalid_session", "sign in again")
		// The owner belongs nowhere now: signed in, they are told so.
		ownerAgain := e.login("owner@doomed.example", "password123")
		if w := e.do(request{method: "GET", path: "/api/organizations", bearer: ownerAgain}); w.Code != 200 || strings.Contains(w.Body.String(), "Doomed") {
			t.Errorf("the owner's organizations: %d %s", w.Code, w.Body.String())
		}
		wantError(t, e.do(request{method: "GET", path: "/api/tokens", bearer: ownerAgain}), 403, "no_organization", "you belong to no organization")
		// The other member starts in the organization they kept.
		otherAgain := e.login("other@keep.example", "password123")
		w = e.do(request{method: "GET", path: "/api/organizations", bearer: otherAgain})
		if !strings.Contains(w.Body.String(), `"name":"Keep"`) || strings.Contains(w.Body.String(), "Doomed") {
			t.Errorf("the member's organizations: %s", w.Body.String())
		}
		if w := e.do(request{method: "POST", path: "/api/invitations/" + lateCode + "/accept", bearer: e.signup("late@doomed.example", "Late")}); w.Code != 409 {
			t.Errorf("a deleted organization's invitation: %d %s", w.Code, w.Body.String())
		}

		after := exportZip(t, e, admin, orgID)
		month := e.clock.Now().UTC().Format("2006-01")
		if after["invoices/"+month+".csv"] != before["invoices/"+month+".csv"] || after["usage_daily.csv"] != before["usage_daily.csv"] {
			t.Errorf("the export changed with the deletion:\n%v\n%v", before, after)
		}
		wantError(t, e.do(request{method: "DELETE", path: fmt.Sprintf("/api/admin/organizations/%d", orgID), bearer: admin}), 409,
			"organization_deleted", "Doomed was already deleted on")
		wantError(t, e.do(request{method: "DELETE", path: fmt.Sprintf("/api/admin/organizations/%d", e.userLastOrg("admin@example.com")), bearer: admin}),
			409, "organization_has_admin", "an admin's organization cannot be deleted")
		wantError(t, e.do(request{method: "DELETE", path: "/api/admin/organizations/999999", bearer: admin}), 404, "organization_not_found", "no such organization")
		wantError(t, e.do(request{method: "GET", path: "/api/admin/organizations/999999/export", bearer: admin}), 404, "organization_not_found", "no such organization")

		got := auditActions(t, e, "organization.delete")
		if len(got) != 1 || !strings.HasPrefix(got[0], fmt.Sprintf("organization.delete %d Doomed: 2 members removed, ", orgID)) ||
			!strings.Contains(got[0], "1 invitations revoked, 1 tokens stopped; data purged after ") {
			t.Errorf("audit: %q", got)
		}
	})
}

func (e *env) userLastOrg(email string) int64 {
	e.t.Helper()
	u, err := e.store.UserByEmail(context.Background(), email)
	if err != nil {
		e.t.Fatal(err)
	}
	return u.LastOrgID
}

// exportZip downloads an organization's export and returns its files,
// checking what they hold: the month's draft invoice with its lines, and
// a day of sluice-local usage.
func exportZip(t *testing.T, e *env, admin string, orgID int64) map[string]string {
	t.Helper()
	w := e.do(request{method: "GET", path: fmt.Sprintf("/api/admin/organizations/%d/export", orgID), bearer: admin})
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/zip" ||
		w.Header().Get("Content-Disposition") != fmt.Sprintf(`attachment; filename="sluice-organization-%d.zip"`, orgID) {
		t.Fatalf("export: %d %v %.200s", w.Code, w.Header(), w.Body.String())
	}
	z, err := zip.NewReader(bytes.NewReader(w.Body.Bytes()), int64(w.Body.Len()))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, f := range z.File {
		r, _ := f.Open()
		b, _ := io.ReadAll(r)
		files[f.Name] = string(b)
	}
	var inv struct {
		Organization struct{ Name string }
		Invoices     []struct {
			Status string
			Total  string
			Lines  []struct{ Kind, Model string }
		}
	}
	if err := json.Unmarshal([]byte(files["invoices.json"]), &inv); err != nil {
		t.Fatalf("invoices.json: %v\n%s", err, files["invoices.json"])
	}
	if inv.Organization.Name != "Doomed" || len(inv.Invoices) != 1 || inv.Invoices[0].Status != "draft" || len(inv.Invoices[0].Lines) == 0 {
		t.Errorf("invoices.json: %s", files["invoices.json"])
	}
	lines := strings.Split(strings.TrimSpace(files["usage_daily.csv"]), "\n")
	if len(lines) != 2 || lines[0] != "day,model,requests,rejected,prompt_tokens,completion_tokens,cached_tokens,cost" ||
		!strings.Contains(lines[1], ",sluice-local,3,0,") {
		t.Errorf("usage_daily.csv:\n%s", files["usage_daily.csv"])
	}
	csvs := 0
	for name := range files {
		if strings.HasPrefix(name, "invoices/") && strings.HasSuffix(name, ".csv") {
			csvs++
		}
	}
	if csvs != 1 {
		t.Errorf("files %v, want one invoice CSV", len(files))
	}
	return files
}
