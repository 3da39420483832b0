package e2e

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/upstream/mock"
)

// TestBrowserAliases: the admin defines a model alias on its page in a real
// browser, at desktop and phone widths, sees it listed with its shares, and
// an API client calling the alias is answered by one of its models, named
// in X-Sluice-Model.
func TestBrowserAliases(t *testing.T) {
	t.Parallel()
	ctx := browserContext(t)
	provider := httptest.NewServer(mock.New(mock.Config{Keys: map[string]float64{"sk-mock-key": 0}}))
	t.Cleanup(provider.Close)
	base, _, stop := start(t, map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4", "SLUICE_ADMIN_PASSWORD": "admin-password"})
	defer stop()
	c := client{t, base}
	var admin struct{ Token string }
	c.call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &admin)
	if r := c.call("POST", "/api/admin/upstreams", admin.Token, `{"name":"mock","base_url":"`+provider.URL+`/v1","api_key":"sk-mock-key","models":["gpt-4o-mini","mock-model"]}`, nil); r.StatusCode != 201 {
		t.Fatalf("add key: %d", r.StatusCode)
	}

	err := chromedp.Do(ctx,
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(base+"/login"),
		chromedp.SendKeys(chromedp.CSS(`input[name=email]`), "admin@localhost"),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "admin-password"),
		chromedp.Submit(chromedp.CSS(`[data-testid=login-form]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=dashboard]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=nav-admin]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=admin-nav-aliases]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=admin-nav-aliases]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=aliases-empty]`)),
		chromedp.SendKeys(chromedp.CSS(`#alias-name`), "fast"),
		chromedp.SendKeys(chromedp.CSS(`#alias-targets`), "gpt-4o-mini=70, mock-model=30"),
		chromedp.SendKeys(chromedp.CSS(`#alias-fallbacks`), "sluice-local"),
		chromedp.Submit(chromedp.CSS(`[data-testid=alias-form]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=alias-row]`)),
	)
	if err != nil {
		t.Fatalf("create an alias: %v", err)
	}
	if got := strings.Join(strings.Fields(text(t, ctx, `[data-testid=alias-targets]`)), " "); got != "gpt-4o-mini 70%, mock-model 30%" {
		t.Fatalf("targets shown %q", got)
	}
	if got := strings.TrimSpace(text(t, ctx, `[data-testid=flash]`)); !strings.HasPrefix(got, "Alias added.") {
		t.Fatalf("flash %q", got)
	}
	screenshot(t, ctx, "admin-aliases")
	fitsWidth(t, ctx, 1280, "the aliases page")

	err = chromedp.Do(ctx,
		chromedp.EmulateViewport(390, 844),
		chromedp.Click(chromedp.CSS(`[data-testid=edit-alias]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=cancel-alias-edit]`)),
	)
	if err != nil {
		t.Fatalf("open the alias's edit form on a phone: %v", err)
	}
	screenshot(t, ctx, "phone-admin-aliases")
	fitsWidth(t, ctx, 390, "the aliases page on a phone")

	var owner, tok struct{ Token string }
	c.call("POST", "/api/auth/signup", "", `{"email":"ada@example.com","password":"password123","organization":"Engines"}`, &owner)
	c.call("POST", "/api/tokens", owner.Token, `{"name":"sdk"}`, &tok)
	var models struct {
		Data []struct {
			ID      string `json:"id"`
			OwnedBy string `json:"owned_by"`
		}
	}
	c.call("GET", "/v1/models", tok.Token, "", &models)
	listed := false
	for _, m := range models.Data {
		listed = listed || m.ID == "fast" && m.OwnedBy == "sluice"
	}
	if !listed {
		t.Fatalf("/v1/models does not list the alias: %+v", models.Data)
	}
	resp := c.call("POST", "/v1/chat/completions", tok.Token, `{"model":"fast","messages":[{"role":"user","content":"hello"}]}`, nil)
	if m := resp.Header.Get("X-Sluice-Model"); resp.StatusCode != 200 || (m != "gpt-4o-mini" && m != "mock-model") {
		t.Fatalf("chat with the alias: %d, X-Sluice-Model %q", resp.StatusCode, m)
	}
}

// TestAliasesAcrossNodes: an alias created on one node of a cluster is in
// force on another within a second (the bus, not the periodic reload),
// and so is its deletion.
func TestAliasesAcrossNodes(t *testing.T) {
	nodes := startNodes(t, 2, clusterEnv(t, needRedis(t)))
	var admin, owner, tok struct{ Token string }
	nodes[0].call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &admin)
	nodes[0].call("POST", "/api/auth/signup", "", `{"email":"ada@example.com","password":"password123","organization":"Engines"}`, &owner)
	nodes[0].call("POST", "/api/tokens", owner.Token, `{"name":"sdk"}`, &tok)
	chat := func(n client) *http.Response {
		return n.call("POST", "/v1/chat/completions", tok.Token, `{"model":"fast","messages":[{"role":"user","content":"春联"}]}`, nil)
	}
	if r := chat(nodes[1]); r.StatusCode != 404 {
		t.Fatalf("before the alias: %d", r.StatusCode)
	}
	if r := nodes[0].call("POST", "/api/admin/aliases", admin.Token, `{"name":"fast","targets":[{"model":"sluice-local"}]}`, nil); r.StatusCode != 201 {
		t.Fatalf("create: %d", r.StatusCode)
	}
	within(t, "the alias reaching the other node", func() bool {
		r := chat(nodes[1])
		return r.StatusCode == 200 && r.Header.Get("X-Sluice-Model") == "sluice-local"
	})
	if r := nodes[1].call("DELETE", "/api/admin/aliases/fast", admin.Token, "", nil); r.StatusCode != 200 {
		t.Fatalf("delete: %d", r.StatusCode)
	}
	within(t, "the deletion reaching the first node", func() bool { return chat(nodes[0]).StatusCode == 404 })
}
