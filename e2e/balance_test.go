package e2e

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testsync"
	"github.com/sluicehq/sluice/money"
)

// setUpPrepaid puts the free tier on prepaid billing, prices sluice-local
// at 1.00 in / 2.00 out per million, signs up an organization and credits
// its balance by hand. It returns an API token and the owner's session.
func setUpPrepaid(t *testing.T, c client, credit string) (key, owner string) {
	t.Helper()
	var admin struct{ Token string }
	if r := c.call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &admin); r.StatusCode != 200 {
		t.Fatalf("admin login: %d", r.StatusCode)
	}
	for path, body := range map[string]string{
		"/api/admin/tiers/free":          `{"billing":"prepaid","tokens_per_minute":0,"capacity":1000,"refill_per_sec":1000,"refill_floor":1}`,
		"/api/admin/prices/sluice-local": `{"input_per_mtok":"1","output_per_mtok":"2"}`,
	} {
		if r := c.call("PUT", path, admin.Token, body, nil); r.StatusCode != 200 {
			t.Fatalf("%s: %d", path, r.StatusCode)
		}
	}
	var signup struct {
		Token        string
		Organization struct{ ID int64 }
	}
	if r := c.call("POST", "/api/auth/signup", "", `{"email":"prepaid@example.com","password":"password123","organization":"Prepaid"}`, &signup); r.StatusCode != 201 {
		t.Fatalf("signup: %d", r.StatusCode)
	}
	if r := c.call("POST", "/api/admin/organizations/"+strconv.FormatInt(signup.Organization.ID, 10)+"/balance-adjustments", admin.Token,
		`{"amount":"`+credit+`","reason":"two nodes"}`, nil); r.StatusCode != 201 {
		t.Fatalf("credit: %d", r.StatusCode)
	}
	var tok struct{ Token string }
	if r := c.call("POST", "/api/tokens", signup.Token, `{"name":"prepaid"}`, &tok); r.StatusCode != 201 {
		t.Fatalf("token: %d", r.StatusCode)
	}
	return tok.Token, signup.Token
}

// prepaidNodes starts two gateways on one database (and Redis, when
// redisURL is set): the second once the first has set up the prepaid
// organization, so it starts with the tier's billing.
func prepaidNodes(t *testing.T, redisURL, credit string) (nodes []client, key, owner string) {
	env := clusterEnv(t, redisURL)
	env["SLUICE_EXPECTED_NODES"] = "2"
	nodes = startNodes(t, 1, env)
	key, owner = setUpPrepaid(t, nodes[0], credit)
	env["SLUICE_NODE_ID"] = "node1"
	return append(nodes, startNodes(t, 1, env)...), key, owner
}

// A prepaid balance holds across gateway instances: with a balance worth
// exactly one request's worst case (budgetBody, 209 microdollars), twenty
// at once on two nodes admit exactly one, on Postgres alone (the SQL
// ledger) and with Redis (the Redis ledger); the balance never goes below
// zero.
func TestPrepaidBalanceHoldsAcrossNodes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		redis func(*testing.T) string
	}{
		{"postgres", func(*testing.T) string { return "" }},
		{"redis", needRedis},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes, key, owner := prepaidNodes(t, tc.redis(t), "0.000209")
			statuses := make(chan int, 20)
			var wg sync.WaitGroup
			for i := range 20 {
				wg.Go(func() {
					r := nodes[i%2].chat(key, budgetBody)
					statuses <- r.status
					if r.status == 429 && (r.code != "insufficient_quota" || r.shouldRetry != "false") {
						t.Errorf("refusal: %d %s %q", r.status, r.code, r.shouldRetry)
					}
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
				t.Fatalf("%d of 20 admitted with a balance worth one", admitted)
			}
			// The answer goes out before its cost is settled: wait for the
			// settlement, which under load comes a moment after.
			var b struct{ Balance, Reserved string }
			testsync.WaitFor(t, 10*time.Second, "the admitted request's settlement", func() bool {
				if r := nodes[1].call("GET", "/api/balance", owner, "", &b); r.StatusCode != 200 {
					t.Fatalf("balance: %d", r.StatusCode)
				}
				return b.Reserved == "0.00"
			})
			left, err := money.ParseAmount(b.Balance)
			if err != nil || b.Reserved != "0.00" || left >= 209*money.Dollar/1_000_000 {
				t.Fatalf("after: %+v %v", b, err)
			}
		})
	}
}
