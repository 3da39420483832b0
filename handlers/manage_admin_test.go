package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/providers"
	"github.com/sluicehq/sluice/secrets"
	"github.com/sluicehq/sluice/upstream"
)

func TestAdminAPIScenarios(t *testing.T) {
	admin := func(f fixture) string { return f.admin }
	get := func(path string, who func(fixture) string) func(fixture) request {
		return func(f fixture) request { return request{method: "GET", path: path, bearer: who(f)} }
	}
	member := func(f fixture) string { return f.member }
	runScenarios(t, []scenario{
		{name: "organizations: member", req: get("/api/admin/organizations", member), status: 403, code: "forbidden",
			contains: []string{`"message":"this endpoint is for admins"`}, notContains: []string{"Acme"}},
		{name: "audit: member", req: get("/api/admin/audit", member), status: 403, code: "forbidden",
			contains: []string{`"message":"this endpoint is for admins"`}, notContains: []string{"token.create"}},
		{name: "organizations: anonymous", req: get("/api/admin/organizations", func(fixture) string { return "" }), status: 401, code: "missing_session"},
		{name: "organizations", req: get("/api/admin/organizations", admin), status: 200,
			contains: []string{`"name":"Acme"`, `"tier":"free"`, `"owner_email":"member@example.com"`, `"spend":"0.00"`, `"requests":0`,
				`"rejection_rate":0`, `"active_freezes":0`, `"page":1`, `"pages":1`, `"total":2`, `"page_size":50`, `"created_at":`},
			notContains: []string{"password", "hash"}},
		{name: "organizations: search by email", req: get("/api/admin/organizations?q=MEMBER@", admin), status: 200,
			contains: []string{`"name":"Acme"`, `"total":1`}, notContains: []string{"Sluice operators"}},
		{name: "organizations: bad sort", req: get("/api/admin/organizations?sort=password_hash", admin), status: 400, code: "invalid_sort",
			contains: []string{"sort must be one of name, tier, spend, requests, rejection_rate, freezes, created"}},
		{name: "organizations: bad dir", req: get("/api/admin/organizations?sort=spend&dir=up", admin), status: 400, code: "invalid_dir"},
		{name: "organizations: bad page", req: get("/api/admin/organizations?page=0", admin), status: 400, code: "invalid_page"},
		{name: "organizations: page past the end", req: get("/api/admin/organizations?page=9", admin), status: 200,
			contains: []string{`"data":[]`, `"page":9`, `"pages":1`, `"total":2`}},
		{name: "audit", req: get("/api/admin/audit", admin), status: 200,
			contains: []string{`"action":"token.revoke"`, `"action":"token.create"`, `"organization":"Acme"`, `"actor_email":"member@example.com"`,
				`"page":1`, `"page_size":50`, `"has_more":false`}},
		{name: "audit: action", req: get("/api/admin/audit?action=token.revoke", admin), status: 200,
			contains: []string{`"action":"token.revoke"`}, notContains: []string{`"action":"token.create"`, `"action":"organization.create"`}},
		{name: "audit: range before anything", req: get("/api/admin/audit?to=2000-01-01", admin), status: 200, contains: []string{`"data":[]`}},
		{name: "audit: bad action", req: get("/api/admin/audit?action=TOKEN", admin), status: 400, code: "invalid_action"},
		{name: "audit: bad date", req: get("/api/admin/audit?from=last-week", admin), status: 400, code: "invalid_date"},
		{name: "audit: bad organization", req: get("/api/admin/audit?organization_id=acme", admin), status: 400, code: "invalid_organization"},
		{name: "audit: bad page", req: get("/api/admin/audit?page=-1", admin), status: 400, code: "invalid_page"},
	})
}

// overviewPage is GET /api/admin/organizations' answer.
type overviewPage struct {
	Data []struct {
		ID            int64   `json:"id"`
		Name          string  `json:"name"`
		Tier          string  `json:"tier"`
		OwnerEmail    string  `json:"owner_email"`
		Spend         string  `json:"spend"`
		Requests      int64   `json:"requests"`
		Rejected      int64   `json:"rejected"`
		RejectionRate float64 `json:"rejection_rate"`
		ActiveFreezes int64   `json:"active_freezes"`
		CreatedAt     string  `json:"created_at"`
	} `json:"data"`
	Page, Pages int
	Total       int64
}

func TestAdminOrganizationsAPI(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		ctx := context.Background()
		admin := e.login("admin@example.com", "admin-password")
		if w := e.do(request{method: "PUT", path: "/api/admin/prices/sluice-local", bearer: admin,
			body: `{"input_per_mtok":"0.123457","output_per_mtok":"1.5"}`}); w.Code != 200 {
			t.Fatalf("price: %d %s", w.Code, w.Body.String())
		}
		acme := e.signup("ada@acme.example", "Acme")
		key, tokID := e.apiToken(acme)
		for range 3 {
			if w := e.chat(key); w.Code != 200 {
				t.Fatalf("chat: %d %s", w.Code, w.Body.String())
			}
		}
		u, _ := e.store.UserByEmail(ctx, "ada@acme.example")
		if err := e.store.AddRejections(ctx, []models.Rejections{{OrgID: u.LastOrgID, TokenID: tokID, Hour: e.clock.Now(), Requests: 1}}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.CreateFreeze(ctx, models.Freeze{TokenID: tokID, OrgID: u.LastOrgID, Reason: "r", WindowCount: 20,
			FrozenFrom: e.clock.Now(), FrozenUntil: e.clock.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		for i := range 55 {
			e.signup(fmt.Sprintf("o%d@example.com", i), fmt.Sprintf("Org %02d", i))
		}
		month, err := e.store.UsageInMonth(ctx, u.LastOrgID, e.clock.Now())
		if err != nil || month.Cost == 0 {
			t.Fatalf("acme's month: %+v %v", month, err)
		}

		var page overviewPage
		w := e.do(request{method: "GET", path: "/api/admin/organizations?sort=spend&dir=desc", bearer: admin})
		if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &page) != nil {
			t.Fatalf("%d %s", w.Code, w.Body.String())
		}
		if page.Total != 57 || page.Pages != 2 || page.Page != 1 || len(page.Data) != 50 {
			t.Fatalf("page 1: total %d, pages %d, rows %d", page.Total, page.Pages, len(page.Data))
		}
		top := page.Data[0]
		if top.Name != "Acme" || top.Spend != month.Cost.String() || top.Requests != 3 || top.Rejected != 1 || top.RejectionRate != 0.25 ||
			top.ActiveFreezes != 1 || top.OwnerEmail != "ada@acme.example" || top.Tier != "free" {
			t.Errorf("top spender = %+v, want Acme spending exactly %s", top, month.Cost)
		}
		w = e.do(request{method: "GET", path: "/api/admin/organizations?sort=spend&dir=desc&page=2", bearer: admin})
		page = overviewPage{}
		if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &page) != nil || len(page.Data) != 7 || page.Page != 2 {
			t.Fatalf("page 2: %d %s", w.Code, w.Body.String())
		}
		w = e.do(request{method: "GET", path: "/api/admin/organizations?q=org%200&sort=name&dir=desc", bearer: admin})
		page = overviewPage{}
		if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &page) != nil || page.Total != 10 || page.Data[0].Name != "Org 09" || page.Data[9].Name != "Org 00" {
			t.Fatalf("search: %d %s", w.Code, w.Body.String())
		}
	})
}

// auditPage is GET /api/admin/audit's answer.
type auditPage struct {
	Data []struct {
		OrganizationID *int64 `json:"organization_id"`
		ActorUserID    *int64 `json:"actor_user_id"`
		ActorEmail     string `json:"actor_email"`
		Action         string `json:"action"`
		Target         string `json:"target"`
		Detail         string `json:"detail"`
	} `json:"data"`
	HasMore bool `json:"has_more"`
}

// TestEveryAdminAPIActionIsAudited makes each change an admin can make
// through the API and finds its entry through GET /api/admin/audit: the
// admin as actor, the thing changed as target.
func TestEveryAdminAPIActionIsAudited(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		box, _ := secrets.NewBox(bytes.Repeat([]byte{3}, 32))
		e.deps.Providers = providers.New(e.store, box, upstream.NewPool(upstream.PoolOptions{Now: e.clock.Now}), cluster.None{}, discardLog())
		e.rebuild()
		ctx := context.Background()
		admin := e.login("admin@example.com", "admin-password")
		adminUser, _ := e.store.UserByEmail(ctx, "admin@example.com")
		acme, bobs := e.signup("ada@acme.example", "Acme"), e.signup("bob@example.com", "Bob's")
		_, tokID := e.apiToken(acme)
		ada, _ := e.store.UserByEmail(ctx, "ada@acme.example")
		bob, _ := e.store.UserByEmail(ctx, "bob@example.com")
		f, err := e.store.CreateFreeze(ctx, models.Freeze{TokenID: tokID, OrgID: ada.LastOrgID, Reason: "r", WindowCount: 20,
			FrozenFrom: e.clock.Now(), FrozenUntil: e.clock.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		request1 := func(session string) int64 {
			w := e.do(request{method: "POST", path: "/api/upgrade-requests", bearer: session, body: `{"tier":"premium"}`})
			if w.Code != 201 {
				t.Fatalf("upgrade request: %d %s", w.Code, w.Body.String())
			}
			return int64(decode(t, w)["id"].(float64))
		}
		ra, rb := request1(acme), request1(bobs)
		var keyID int64
		steps := []struct {
			action, method, path, body string
			target                     func() string
		}{
			{"tier.update", "PUT", "/api/admin/tiers/free", `{"capacity":31}`, func() string { return "free" }},
			{"tier.create", "POST", "/api/admin/tiers", `{"name":"team","capacity":5,"refill_per_sec":1,"monthly_fee":"9.00"}`, func() string { return "team" }},
			{"tier.delete", "DELETE", "/api/admin/tiers/team", "", func() string { return "team" }},
			{"organization.tier", "PUT", "/api/admin/organizations/" + itoa(bob.LastOrgID) + "/tier", `{"tier":"premium"}`, func() string { return itoa(bob.LastOrgID) }},
			{"token.unfreeze", "DELETE", "/api/admin/freezes/" + itoa(f.ID), "", func() string { return itoa(tokID) }},
			{"price.set", "PUT", "/api/admin/prices/gpt-4o", `{"input_per_mtok":"2.50","output_per_mtok":"10"}`, func() string { return "gpt-4o" }},
			{"upgrade.approved", "POST", "/api/admin/upgrade-requests/" + itoa(ra) + "/approve", "", func() string { return itoa(ra) }},
			{"upgrade.declined", "POST", "/api/admin/upgrade-requests/" + itoa(rb) + "/decline", "", func() string { return itoa(rb) }},
			{"upstream.create", "POST", "/api/admin/upstreams", `{"name":"main","base_url":"https://api.example.com/v1","api_key":"sk-test-12345678","weight":1}`,
				func() string {
					keys, _ := e.store.UpstreamKeys(ctx)
					keyID = keys[0].ID
					return itoa(keyID)
				}},
			{"upstream.delete", "DELETE", "", "", func() string { return itoa(keyID) }},
		}
		for _, st := range steps {
			path := st.path
			if st.action == "upstream.delete" {
				path = "/api/admin/upstreams/" + itoa(keyID)
			}
			if w := e.do(request{method: st.method, path: path, bearer: admin, body: st.body}); w.Code >= 300 {
				t.Fatalf("%s: %d %s", st.action, w.Code, w.Body.String())
			}
			target := st.target()
			w := e.do(request{method: "GET", path: "/api/admin/audit?action=" + st.action, bearer: admin})
			var page auditPage
			if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &page) != nil || len(page.Data) == 0 {
				t.Errorf("%s: no entry: %d %s", st.action, w.Code, w.Body.String())
				continue
			}
			got := page.Data[0]
			if got.Action != st.action || got.ActorUserID == nil || *got.ActorUserID != adminUser.ID || got.ActorEmail != "admin@example.com" || got.Target != target {
				t.Errorf("%s: entry %+v, want the admin (%d) as actor and %q as target", st.action, got, adminUser.ID, target)
			}
		}
		// An organization's move is in its own trail.
		w := e.do(request{method: "GET", path: "/api/admin/audit?organization_id=" + itoa(bob.LastOrgID), bearer: admin})
		var page auditPage
		if json.Unmarshal(w.Body.Bytes(), &page) != nil || len(page.Data) < 2 || page.Data[0].Action != "upgrade.declined" ||
			page.Data[1].Action != "organization.tier" {
			t.Errorf("bob's trail: %s", w.Body.String())
		}
		if w.Code != http.StatusOK {
			t.Fatal(w.Code)
		}
	})
}
