package e2e

import (
	"strconv"
	"sync"
	"testing"
)

// A token's controls hold across gateway instances sharing Postgres and
// Redis: its budget (worth one request's worst case) admits exactly one of
// twenty concurrent requests spread over two nodes; its rate is one bucket
// for both nodes; and a change made on one node applies on the other,
// which had the token cached, within a second.
func TestTokenControlsAcrossNodes(t *testing.T) {
	env := clusterEnv(t, needRedis(t))
	env["SLUICE_EXPECTED_NODES"] = "2"
	nodes := startNodes(t, 2, env)
	setUpBudget(t, nodes[0], "100.00") // an organization budget far away: the token's binds
	var owner struct{ Token string }
	nodes[0].call("POST", "/api/auth/login", "", `{"email":"spender@example.com","password":"password123"}`, &owner)
	var tok struct {
		Token string
		ID    int64
	}
	if r := nodes[0].call("POST", "/api/tokens", owner.Token, `{"name":"one request","monthly_budget":"0.000209"}`, &tok); r.StatusCode != 201 {
		t.Fatalf("token: %d", r.StatusCode)
	}

	statuses := make(chan int, 20)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			r := nodes[i%2].chat(tok.Token, budgetBody)
			if r.status == 429 && (r.code != "insufficient_quota" || r.shouldRetry != "false") {
				t.Errorf("refusal: %d %s %q", r.status, r.code, r.shouldRetry)
			}
			statuses <- r.status
		})
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
		t.Fatalf("%d of 20 admitted on two nodes with a token budget worth one", admitted)
	}

	// One bucket of 4 a minute for the token, whichever node serves it.
	var rated struct {
		Token string
		ID    int64
	}
	nodes[0].call("POST", "/api/tokens", owner.Token, `{"name":"rated","requests_per_minute":4}`, &rated)
	ok := 0
	for i := range 10 {
		if r := nodes[i%2].call("GET", "/v1/models", rated.Token, "", nil); r.StatusCode == 200 {
			ok++
		} else if r.StatusCode != 429 || r.Header.Get("x-ratelimit-limit-requests") != "4" {
			t.Fatalf("request %d: %d, limit %q", i, r.StatusCode, r.Header.Get("x-ratelimit-limit-requests"))
		}
	}
	if ok != 4 {
		t.Fatalf("two nodes admitted %d requests of a token limited to 4 a minute", ok)
	}

	// A change on node 0 reaches node 1, which has the token cached.
	var narrow struct {
		Token string
		ID    int64
	}
	nodes[0].call("POST", "/api/tokens", owner.Token, `{"name":"narrowed"}`, &narrow)
	if r := nodes[1].chat(narrow.Token, budgetBody); r.status != 200 {
		t.Fatalf("before the change, on node 1: %d %s", r.status, r.code)
	}
	if r := nodes[0].call("PATCH", "/api/tokens/"+strconv.FormatInt(narrow.ID, 10), owner.Token, `{"models":["gpt-4o"]}`, nil); r.StatusCode != 200 {
		t.Fatalf("patch: %d", r.StatusCode)
	}
	within(t, "a token's change reaching the other node", func() bool {
		r := nodes[1].chat(narrow.Token, budgetBody)
		return r.status == 404 && r.code == "model_not_found"
	})
}
