package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/webhook"
)

// setUpBudget signs up an organization on the premium tier (overage billed,
// so only the budget limits it), prices sluice-local and sets the budget.
// It returns an API token.
func setUpBudget(t *testing.T, c client, limit string) string {
	t.Helper()
	var admin, owner struct{ Token string }
	if r := c.call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &admin); r.StatusCode != 200 {
		t.Fatalf("admin login: %d", r.StatusCode)
	}
	var signup struct {
		Token        string
		Organization struct{ ID int64 }
	}
	if r := c.call("POST", "/api/auth/signup", "", `{"email":"spender@example.com","password":"password123","organization":"Spenders"}`, &signup); r.StatusCode != 201 {
		t.Fatalf("signup: %d", r.StatusCode)
	}
	owner.Token = signup.Token
	if r := c.call("PUT", "/api/admin/organizations/"+strconv.FormatInt(signup.Organization.ID, 10)+"/tier", admin.Token, `{"tier":"premium"}`, nil); r.StatusCode != 200 {
		t.Fatalf("tier: %d", r.StatusCode)
	}
	// 1.00 in and 2.00 out per million tokens.
	if r := c.call("PUT", "/api/admin/prices/sluice-local", admin.Token, `{"input_per_mtok":"1","output_per_mtok":"2"}`, nil); r.StatusCode != 200 {
		t.Fatalf("price: %d", r.StatusCode)
	}
	if r := c.call("PUT", "/api/budget", owner.Token, `{"monthly_limit":"`+limit+`","hard_stop":true}`, nil); r.StatusCode != 200 {
		t.Fatalf("budget: %d", r.StatusCode)
	}
	var tok struct{ Token string }
	if r := c.call("POST", "/api/tokens", owner.Token, `{"name":"spend"}`, &tok); r.StatusCode != 201 {
		t.Fatalf("token: %d", r.StatusCode)
	}
	return tok.Token
}

// budgetBody asks sluice-local for up to 100 tokens of a 9-token prompt
// ("hello", 4 for the message and 3 for the reply): its worst case at 1.00 in / 2.00 out per million is
// 9 x 1 + 100 x 2 = 209 microdollars.
const budgetBody = `{"model":"sluice-local","max_tokens":100,"messages":[{"role":"user","content":"hello"}]}`

// A budget holds across gateway instances: with room for exactly one
// request's worst case, twenty concurrent requests on two nodes admit
// exactly one, and a longer stream never spends past the limit.
func TestBudgetHoldsAcrossNodes(t *testing.T) {
	redisURL := needRedis(t)
	env := clusterEnv(t, redisURL)
	env["SLUICE_EXPECTED_NODES"] = "2"
	nodes := startNodes(t, 2, env)
	key := setUpBudget(t, nodes[0], "0.000209")

	statuses := make(chan int, 20)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := nodes[i%2].chat(key, budgetBody)
			statuses <- r.status
			if r.status == 429 && (r.code != "insufficient_quota" || r.shouldRetry != "false") {
				t.Errorf("refusal: %d %s %q", r.status, r.code, r.shouldRetry)
			}
		}()
	}
	wg.Wait()
	close(statuses)
	admitted := 0
	for s := range statuses {
		switch s {
		case 200:
			admitted++
		case 429:
		default:
			t.Fatalf("status %d", s)
		}
	}
	if admitted != 1 {
		t.Fatalf("%d of 20 admitted with room for one", admitted)
	}
}

// Under a stream of requests from both nodes, the spend settles at or
// below the limit: reservations cover each request's worst case.
func TestBudgetSpendNeverPassesTheLimitAcrossNodes(t *testing.T) {
	redisURL := needRedis(t)
	env := clusterEnv(t, redisURL)
	env["SLUICE_EXPECTED_NODES"] = "2"
	nodes := startNodes(t, 2, env)
	limit := "0.002"
	key := setUpBudget(t, nodes[0], limit)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 15 {
				if r := nodes[w%2].chat(key, budgetBody); r.status != 200 && r.status != 429 {
					t.Errorf("status %d", r.status)
				}
			}
		}()
	}
	wg.Wait()
	var owner struct{ Token string }
	nodes[1].call("POST", "/api/auth/login", "", `{"email":"spender@example.com","password":"password123"}`, &owner)
	var b struct{ Spent, Reserved string }
	if r := nodes[1].call("GET", "/api/budget", owner.Token, "", &b); r.StatusCode != 200 {
		t.Fatalf("budget: %d", r.StatusCode)
	}
	spent, err1 := money.ParseAmount(b.Spent)
	max, err2 := money.ParseAmount(limit)
	if err1 != nil || err2 != nil || spent > max || spent == 0 || b.Reserved != "0.00" {
		t.Fatalf("spent %s (reserved %s) of %s", b.Spent, b.Reserved, limit)
	}
}

// chatResult is what a test needs of one completion.
type chatResult struct {
	status      int
	code        string
	shouldRetry string
}

func (c client) chat(key, body string) chatResult {
	c.t.Helper()
	var e struct {
		Error struct{ Code, Type string }
	}
	r := c.call("POST", "/v1/chat/completions", key, body, &e)
	return chatResult{status: r.StatusCode, code: e.Error.Code, shouldRetry: r.Header.Get("x-should-retry")}
}

// Saving the budget while a request holds its worst case frees nothing:
// with room for exactly one request, one runs (held at the provider) while
// the owner saves the same budget on the other node, and a second request
// is still refused.
func TestBudgetSavedUnderLoadFreesNoReservation(t *testing.T) {
	redisURL := needRedis(t)
	env := clusterEnv(t, redisURL)
	env["SLUICE_EXPECTED_NODES"] = "2"
	nodes := startNodes(t, 2, env)
	held, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int64
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if calls.Add(1) == 1 {
			close(held)
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","object":"chat.completion","model":"gpt-held","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":6,"completion_tokens":1,"total_tokens":7}}`)
	}))
	t.Cleanup(provider.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	key := setUpBudget(t, nodes[0], "0.000209")
	var admin, owner struct{ Token string }
	nodes[0].call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &admin)
	nodes[1].call("POST", "/api/auth/login", "", `{"email":"spender@example.com","password":"password123"}`, &owner)
	var e struct {
		Error struct{ Code, Message string }
	}
	if r := nodes[0].call("POST", "/api/admin/upstreams", admin.Token, `{"name":"held","base_url":"`+provider.URL+`/v1","api_key":"sk-held-key","models":["gpt-held"]}`, &e); r.StatusCode != 201 {
		t.Fatalf("provider key: %d %+v", r.StatusCode, e)
	}
	if r := nodes[0].call("PUT", "/api/admin/prices/gpt-held", admin.Token, `{"input_per_mtok":"1","output_per_mtok":"2"}`, nil); r.StatusCode != 200 {
		t.Fatalf("price: %d", r.StatusCode)
	}
	body := strings.Replace(budgetBody, "sluice-local", "gpt-held", 1) // worst case 209 microdollars, the whole budget
	first := make(chan chatResult, 1)
	go func() {
		req, _ := http.NewRequest("POST", nodes[0].base+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- chatResult{}
			return
		}
		r.Body.Close()
		first <- chatResult{status: r.StatusCode}
	}()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request never reached the provider")
	}
	if r := nodes[1].call("PUT", "/api/budget", owner.Token, `{"monthly_limit":"0.000209","hard_stop":true}`, nil); r.StatusCode != 200 {
		t.Fatalf("saving the budget: %d", r.StatusCode)
	}
	if r := nodes[1].chat(key, body); r.status != 429 || r.code != "insufficient_quota" {
		t.Fatalf("a second request beside the one holding the whole budget: %d %s (provider calls %d)", r.status, r.code, calls.Load())
	}
	close(release)
	if r := <-first; r.status != 200 {
		t.Fatalf("the first request: %d", r.status)
	}
}

// Spending crossing 50%, 80% and 100% of a budget is told once per
// threshold: an audit entry each, and a POST each to the organization's
// webhook, signed with the secret it was shown.
func TestBudgetAlertsAreAuditedAndPostedSigned(t *testing.T) {
	type post struct {
		body          []byte
		signature, ts string
	}
	posts := make(chan post, 10)
	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		posts <- post{b, r.Header.Get(webhook.HeaderSignature), r.Header.Get(webhook.HeaderTimestamp)}
	}))
	t.Cleanup(hooks.Close)
	base, _, stop := start(t, map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4",
		"SLUICE_ADMIN_PASSWORD": "admin-password", "SLUICE_WEBHOOK_HOSTS": "127.0.0.1",
		// The receiver is an httptest server on loopback, over http.
		"SLUICE_WEBHOOK_ALLOW_PRIVATE": "true", "SLUICE_WEBHOOK_ALLOW_HTTP": "true"})
	t.Cleanup(func() { stop() })
	c := client{t, base}
	key := setUpBudget(t, c, "0.0002")
	var owner, admin struct{ Token string }
	c.call("POST", "/api/auth/login", "", `{"email":"spender@example.com","password":"password123"}`, &owner)
	c.call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &admin)
	// Alerts only: spending goes on past the budget.
	if r := c.call("PUT", "/api/budget", owner.Token, `{"monthly_limit":"0.0002","hard_stop":false}`, nil); r.StatusCode != 200 {
		t.Fatalf("budget: %d", r.StatusCode)
	}
	var org struct {
		WebhookSecret string `json:"webhook_secret"`
		Organization  struct{ ID int64 }
	}
	if r := c.call("PUT", "/api/organization", owner.Token, `{"webhook_url":"`+hooks.URL+`/budget"}`, &org); r.StatusCode != 200 || org.WebhookSecret == "" {
		t.Fatalf("webhook: %d %+v", r.StatusCode, org)
	}
	var b struct{ Spent string }
	for spent := money.Amount(0); spent <= 2*money.Dollar/10_000; { // twice the budget
		if r := c.chat(key, budgetBody); r.status != 200 {
			t.Fatalf("a request under an alerts-only budget: %d %s", r.status, r.code)
		}
		c.call("GET", "/api/budget", owner.Token, "", &b)
		var err error
		if spent, err = money.ParseAmount(b.Spent); err != nil {
			t.Fatal(err)
		}
	}
	var percents []int
	for range 3 {
		select {
		case p := <-posts:
			ts, _ := strconv.ParseInt(p.ts, 10, 64)
			if want := webhook.Sign(org.WebhookSecret, time.Unix(ts, 0), p.body); p.signature != want {
				t.Fatalf("signature %q, want %q", p.signature, want)
			}
			var alert struct {
				Type           string
				OrganizationID int64 `json:"organization_id"`
				Percent        int
				Limit          string `json:"monthly_limit"`
			}
			if err := json.Unmarshal(p.body, &alert); err != nil || alert.Type != "budget.threshold" ||
				alert.OrganizationID != org.Organization.ID || alert.Limit != "0.0002" {
				t.Fatalf("alert %s: %v", p.body, err)
			}
			percents = append(percents, alert.Percent)
		case <-time.After(10 * time.Second):
			t.Fatalf("after spending %s of 0.0002: alerts posted %v, want 50, 80 and 100", b.Spent, percents)
		}
	}
	slices.Sort(percents)
	if !slices.Equal(percents, []int{50, 80, 100}) {
		t.Fatalf("alerts posted for %v, want 50, 80 and 100", percents)
	}
	select {
	case p := <-posts:
		t.Fatalf("a fourth alert: %s", p.body)
	case <-time.After(200 * time.Millisecond):
	}
	var audit struct {
		Data []struct{ Action, Detail string }
	}
	c.call("GET", "/api/admin/audit?action=budget.alert&organization_id="+strconv.FormatInt(org.Organization.ID, 10), admin.Token, "", &audit)
	if len(audit.Data) != 3 {
		t.Fatalf("audit entries %+v, want three budget.alert", audit.Data)
	}
	for _, e := range audit.Data {
		if e.Action != "budget.alert" || !strings.Contains(e.Detail, "of the monthly budget") {
			t.Fatalf("audit entry %+v", e)
		}
	}
}
