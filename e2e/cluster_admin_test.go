package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// TestNodesStopADisabledUsersAndADeletedOrganizationsTokens: on two
// gateways sharing Postgres and Redis, each with the token in its cache,
// a user disabled on one node is refused at once on the other (their
// token, their session), enabled they work again there, and an
// organization deleted on one node has its token refused by the other.
func TestNodesStopADisabledUsersAndADeletedOrganizationsTokens(t *testing.T) {
	nodes := startNodes(t, 2, clusterEnv(t, needRedis(t)))
	a, b := nodes[0], nodes[1]
	var signup struct{ Token string }
	a.call("POST", "/api/auth/signup", "", `{"email":"ada@example.com","password":"password123","organization":"A"}`, &signup)
	var tok struct{ Token string }
	a.call("POST", "/api/tokens", signup.Token, `{"name":"cached"}`, &tok)
	var orgs struct{ Data []struct{ ID int64 } }
	a.call("GET", "/api/organizations", signup.Token, "", &orgs)
	for _, n := range nodes {
		if r := n.call("GET", "/v1/models", tok.Token, "", nil); r.StatusCode != 200 {
			t.Fatalf("before: %d", r.StatusCode) // now cached on both
		}
	}
	var admin struct{ Token string }
	a.call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &admin)
	var users struct{ Data []struct{ ID int64 } }
	a.call("GET", "/api/admin/users?q=ada@", admin.Token, "", &users)
	if len(users.Data) != 1 {
		t.Fatalf("users %+v", users)
	}
	refused := func(n client, key, code string) func() bool {
		return func() bool {
			var body struct {
				Error struct{ Code, Message string }
			}
			r := n.call("GET", "/v1/models", key, "", &body)
			return r.StatusCode == 401 && body.Error.Code == code
		}
	}

	if r := a.call("POST", fmt.Sprintf("/api/admin/users/%d/disable", users.Data[0].ID), admin.Token, "", nil); r.StatusCode != 200 {
		t.Fatalf("disable: %d", r.StatusCode)
	}
	within(t, "the disable reaching the other node", refused(b, tok.Token, "user_disabled"))
	if r := b.call("GET", "/api/tokens", signup.Token, "", nil); r.StatusCode != 401 {
		t.Errorf("the disabled user's session on the other node: %d", r.StatusCode)
	}
	var body struct {
		Error struct{ Code, Message string }
	}
	if r := b.call("POST", "/api/auth/login", "", `{"email":"ada@example.com","password":"password123"}`, &body); r.StatusCode != 403 ||
		body.Error.Code != "account_disabled" {
		t.Errorf("the disabled user's sign-in on the other node: %d %+v", r.StatusCode, body.Error)
	}

	if r := a.call("POST", fmt.Sprintf("/api/admin/users/%d/enable", users.Data[0].ID), admin.Token, "", nil); r.StatusCode != 200 {
		t.Fatalf("enable: %d", r.StatusCode)
	}
	within(t, "the enable reaching the other node", func() bool { return b.call("GET", "/v1/models", tok.Token, "", nil).StatusCode == 200 })

	if r := a.call("DELETE", fmt.Sprintf("/api/admin/organizations/%d", orgs.Data[0].ID), admin.Token, "", nil); r.StatusCode != 200 {
		t.Fatalf("delete: %d", r.StatusCode)
	}
	within(t, "the deletion reaching the other node", refused(b, tok.Token, "organization_deleted"))
}

// TestNodesShareTheLoginThrottle: failed sign-ins at one email spread over
// two gateways on one Redis lock it after 5 in all, on both.
func TestNodesShareTheLoginThrottle(t *testing.T) {
	nodes := startNodes(t, 2, clusterEnv(t, needRedis(t)))
	nodes[0].call("POST", "/api/auth/signup", "", `{"email":"ada@example.com","password":"password123","organization":"A"}`, nil)
	for i := range 5 {
		if r := nodes[i%2].call("POST", "/api/auth/login", "", `{"email":"ada@example.com","password":"wrong-password"}`, nil); r.StatusCode != 401 {
			t.Fatalf("failure %d: %d", i+1, r.StatusCode)
		}
	}
	for i, n := range nodes {
		var body struct {
			Error struct{ Code, Message string }
		}
		r := n.call("POST", "/api/auth/login", "", `{"email":"ada@example.com","password":"password123"}`, &body)
		if r.StatusCode != 429 || body.Error.Code != "login_throttled" || r.Header.Get("Retry-After") == "" ||
			!strings.HasPrefix(body.Error.Message, "too many sign-in attempts; try again in ") {
			t.Errorf("node %d after 5 failures in all: %d %+v", i, r.StatusCode, body.Error)
		}
	}
}
