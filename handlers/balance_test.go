package handlers

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/billing"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// prepaidBody asks sluice-local for up to 100 tokens of a 9-token prompt:
// at 1.00 in / 2.00 out per million its worst case is 9 + 200 = 209
// microdollars.
const prepaidBody = `{"model":"sluice-local","max_tokens":100,"messages":[{"role":"user","content":"hello"}]}`

// prepaidWorst is prepaidBody's worst case.
const prepaidWorst = "0.000209"

// prepaidEnv puts the free tier on prepaid billing (through the tier API,
// with tokens-per-minute off so only money limits), prices sluice-local
// and signs up an organization with an API token and a balance of credit
// (an admin's adjustment).
func prepaidEnv(t *testing.T, e *env, credit string) (admin, owner, key string, orgID int64) {
	t.Helper()
	admin = e.login("admin@example.com", "admin-password")
	w := e.do(request{method: "PUT", path: "/api/admin/tiers/free", bearer: admin, body: `{"billing":"prepaid","tokens_per_minute":0}`})
	if w.Code != 200 || decode(t, w)["billing"] != "prepaid" {
		t.Fatalf("tier: %d %s", w.Code, w.Body.String())
	}
	if w := e.do(request{method: "PUT", path: "/api/admin/prices/sluice-local", bearer: admin,
		body: `{"input_per_mtok":"1","output_per_mtok":"2"}`}); w.Code != 200 {
		t.Fatalf("price: %d %s", w.Code, w.Body.String())
	}
	owner = e.signup("payer@example.com", "Payers")
	key, _ = e.apiToken(owner)
	orgID = orgOf(t, e, "payer@example.com")
	if credit != "" {
		adjust(t, e, admin, orgID, credit, 201)
	}
	return admin, owner, key, orgID
}

func adjust(t *testing.T, e *env, admin string, orgID int64, amount string, want int) map[string]any {
	t.Helper()
	w := e.do(request{method: "POST", path: "/api/admin/organizations/" + strconv.FormatInt(orgID, 10) + "/balance-adjustments",
		bearer: admin, body: `{"amount":"` + amount + `","reason":"test credit"}`})
	if w.Code != want {
		t.Fatalf("adjust %s: %d %s", amount, w.Code, w.Body.String())
	}
	return decode(t, w)
}

type balanceJSON struct {
	Billing, Balance, Reserved, Available, Currency string
	LowBalanceThreshold                             *string `json:"low_balance_threshold"`
	Payments                                        struct {
		Enabled bool
		Message string
	}
	History []struct {
		Type, Amount, Note string
		At                 time.Time
	}
}

func getBalance(t *testing.T, e *env, session string) balanceJSON {
	t.Helper()
	w := e.do(request{method: "GET", path: "/api/balance", bearer: session})
	var b balanceJSON
	if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &b) != nil {
		t.Fatalf("balance: %d %s", w.Code, w.Body.String())
	}
	return b
}

// With a balance worth one request, twenty at once admit exactly one; the
// rest are refused with OpenAI's insufficient_quota, not retried, saying
// how to top up.
func TestPrepaidBalanceAdmitsOneOfTwentyAtOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		_, owner, key, _ := prepaidEnv(t, e, prepaidWorst)
		var wg sync.WaitGroup
		results := make([]*requestResult, 20)
		for i := range results {
			wg.Go(func() { results[i] = chatWith(e, key, prepaidBody, nil) })
		}
		wg.Wait()
		admitted := 0
		for _, r := range results {
			switch r.Code {
			case 200:
				admitted++
			case 429:
				var body struct {
					Error struct{ Type, Code, Message string }
				}
				_ = json.Unmarshal([]byte(r.Body), &body)
				if body.Error.Code != "insufficient_quota" || body.Error.Type != "insufficient_quota" || r.H.Get("x-should-retry") != "false" ||
					!strings.Contains(body.Error.Message, "more than is left of the organization's prepaid balance") ||
					!strings.Contains(body.Error.Message, "redeem a code there or with POST /api/balance/redeem") {
					t.Errorf("refusal: %s %v", r.Body, r.H)
				}
			default:
				t.Fatalf("status %d: %s", r.Code, r.Body)
			}
		}
		if admitted != 1 {
			t.Fatalf("%d of 20 admitted with a balance worth one", admitted)
		}
		b := getBalance(t, e, owner)
		if b.Billing != "prepaid" || b.Reserved != "0.00" || dollars(t, b.Balance) < 0 || dollars(t, b.Balance) >= dollars(t, prepaidWorst) {
			t.Fatalf("after: %+v", b)
		}
	})
}

// An empty balance is refused in each dialect's own shape: OpenAI's
// insufficient_quota for chat completions, Responses and embeddings,
// Anthropic's 402 billing_error for Messages; none is to be retried.
func TestAnEmptyBalanceIsRefusedInEveryDialect(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	_, _, key, _ := prepaidEnv(t, e, "")
	for _, c := range []struct {
		path, body string
		status     int
		want       string
	}{
		{"/v1/chat/completions", prepaidBody, 429, `"type":"insufficient_quota"`},
		{"/v1/responses", `{"model":"sluice-local","input":"hello","max_output_tokens":100}`, 429, `"code":"insufficient_quota"`},
		{"/v1/embeddings", `{"model":"sluice-local","input":"hello"}`, 429, `"code":"insufficient_quota"`},
		{"/v1/messages", `{"model":"sluice-local","max_tokens":100,"messages":[{"role":"user","content":"hello"}]}`, 402, `"type":"billing_error"`},
	} {
		w := e.do(request{method: "POST", path: c.path, bearer: key, body: c.body})
		if w.Code != c.status || !strings.Contains(w.Body.String(), c.want) || !strings.Contains(w.Body.String(), "prepaid balance ($0.00)") ||
			w.Header().Get("x-should-retry") != "false" {
			t.Errorf("%s: %d %s %v", c.path, w.Code, w.Body.String(), w.Header())
		}
	}
}

// The balance after N requests is what was credited less the sum of what
// they were billed, exactly; GET /api/balance gives decimal strings and
// the history.
func TestPrepaidSettlesExactly(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		_, owner, key, org := prepaidEnv(t, e, "0.01")
		for i := range 7 {
			body := `{"model":"sluice-local","max_tokens":` + strconv.Itoa(20+10*i) + `,"messages":[{"role":"user","content":"写一副春联 ` + strconv.Itoa(i) + `"}]}`
			if r := chatWith(e, key, body, nil); r.Code != 200 {
				t.Fatalf("request %d: %d %s", i, r.Code, r.Body)
			}
		}
		var billed int64
		if err := db.Gorm.Raw(`SELECT COALESCE(SUM(cost), 0) FROM usage_events WHERE org_id = ? AND prepaid`, org).Scan(&billed).Error; err != nil || billed == 0 {
			t.Fatalf("billed %d %v", billed, err)
		}
		b := getBalance(t, e, owner)
		want := dollars(t, "0.01") - money.Amount(billed)
		if dollars(t, b.Balance) != want || b.Available != b.Balance || b.Reserved != "0.00" || b.Currency != "USD" {
			t.Fatalf("balance %+v, want %s", b, want)
		}
		if len(b.History) != 2 || b.History[1].Type != "adjustment" || b.History[1].Amount != "0.01" || b.History[1].Note != "test credit" ||
			b.History[0].Type != "spending" || dollars(t, strings.TrimPrefix(b.History[0].Amount, "-")) != money.Amount(billed) {
			t.Fatalf("history %+v", b.History)
		}
		if !b.Payments.Enabled && b.Payments.Message != billing.PaymentsOff {
			t.Fatalf("payments %+v", b.Payments)
		}
	})
}

// A stream whose client hangs up after the last word is debited what the
// provider reported in its usage chunk, not what was reserved.
func TestAStreamLeftEarlyIsDebitedWhatTheProviderReported(t *testing.T) {
	g := newGenEnv(t, testdb.SQLite(t))
	admin, owner, _, _ := prepaidEnv(t, g.env, "1.00")
	key, _ := g.apiToken(owner)
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"one two three\"},\"finish_reason\":null}]}\n\n" +
			"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"))
		w.(http.Flusher).Flush()
		select {
		case <-time.After(100 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		w.Write([]byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":50000,\"completion_tokens\":30000,\"total_tokens\":80000}}\n\ndata: [DONE]\n\n"))
	}))
	defer provider.Close()
	g.addKey(t, admin, "late", provider.URL+"/v1", "sk-late-usage")
	if w := g.do(request{method: "PUT", path: "/api/admin/prices/gpt-4o-mini", bearer: admin, body: `{"input_per_mtok":"1","output_per_mtok":"10"}`}); w.Code != 200 {
		t.Fatal(w.Body.String())
	}
	g.pipe.UsageGrace = 5 * time.Second
	g.rebuild()
	gateway := httptest.NewServer(g.h)
	defer gateway.Close()
	ctx, cancel := context.WithCancel(context.Background())
	resp := openStream(t, ctx, gateway.URL, key, `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"count to three"}]}`)
	var read []byte
	buf := make([]byte, 512)
	for !strings.Contains(string(read), `"finish_reason":"stop"`) {
		n, err := resp.Body.Read(buf)
		read = append(read, buf[:n]...)
		if err != nil {
			t.Fatalf("the stream ended before its finish: %q %v", read, err)
		}
	}
	cancel()
	resp.Body.Close()
	// 50,000 x $1 + 30,000 x $10 per million: $0.35, past what was
	// reserved, taken from the balance all the same.
	deadline := time.Now().Add(5 * time.Second)
	var b balanceJSON
	for time.Now().Before(deadline) {
		if b = getBalance(t, g.env, owner); b.Balance == "0.65" && b.Reserved == "0.00" {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("balance %+v, want 0.65 (1.00 less the provider's $0.35)", b)
}

// Adjustments need a reason, are audited, may take money away but never
// below zero; redeem codes are made by admins only and shown once.
func TestAdjustmentsAndRedeemCodes(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	admin, owner, _, org := prepaidEnv(t, e, "2.50")
	path := "/api/admin/organizations/" + strconv.FormatInt(org, 10) + "/balance-adjustments"
	for _, c := range []struct{ body, code, msg string }{
		{`{"amount":"1.00"}`, "missing_reason", "an adjustment needs a reason"},
		{`{"amount":"abc","reason":"x"}`, "invalid_amount", `amount must be a decimal string of dollars`},
		{`{"amount":"-2.51","reason":"x"}`, "balance_too_low", "taking $2.51 would put it below zero"},
	} {
		w := e.do(request{method: "POST", path: path, bearer: admin, body: c.body})
		if w.Code/100 != 4 || errorCode(t, w) != c.code || !strings.Contains(w.Body.String(), c.msg) {
			t.Errorf("%s: %d %s", c.body, w.Code, w.Body.String())
		}
	}
	if w := e.do(request{method: "POST", path: path, bearer: owner, body: `{"amount":"5","reason":"me"}`}); w.Code != 403 {
		t.Errorf("an owner adjusted: %d", w.Code)
	}
	out := adjust(t, e, admin, org, "-2.50", 201)
	if out["balance"] != "0.00" || out["amount"] != "-2.50" {
		t.Fatalf("adjusted: %v", out)
	}
	rs, _, _ := e.store.AuditEntries(context.Background(), models.AuditQuery{OrgID: org, ActionPrefix: "balance."})
	if len(rs) != 2 || rs[0].Action != "balance.adjustment" || !strings.Contains(rs[0].Detail, "-2.50") || !strings.Contains(rs[0].Detail, "test credit") {
		t.Fatalf("audit %+v", rs)
	}

	w := e.do(request{method: "POST", path: "/api/admin/redeem-codes", bearer: admin, body: `{"amount":"5.00","uses":2,"note":"launch"}`})
	if w.Code != 201 {
		t.Fatalf("create code: %d %s", w.Code, w.Body.String())
	}
	made := decode(t, w)
	code, _ := made["code"].(string)
	if !strings.HasPrefix(code, "rc_") || made["amount"] != "5.00" || made["uses_left"] != float64(2) {
		t.Fatalf("code %v", made)
	}
	w = e.do(request{method: "GET", path: "/api/admin/redeem-codes", bearer: admin})
	if w.Code != 200 || strings.Contains(w.Body.String(), code) || !strings.Contains(w.Body.String(), made["prefix"].(string)) {
		t.Fatalf("the list shows the code again, or not its prefix: %s", w.Body.String())
	}
	if w := e.do(request{method: "POST", path: "/api/admin/redeem-codes", bearer: owner, body: `{"amount":"5.00"}`}); w.Code != 403 {
		t.Fatalf("an owner made a code: %d", w.Code)
	}
	for _, c := range []struct{ body, code string }{{`{"amount":"0"}`, "invalid_amount"}, {`{"amount":"1","uses":0}`, "invalid_uses"},
		{`{"amount":"1","expires_at":"2001-01-01T00:00:00Z"}`, "invalid_expires_at"}} {
		if w := e.do(request{method: "POST", path: "/api/admin/redeem-codes", bearer: admin, body: c.body}); w.Code != 400 || errorCode(t, w) != c.code {
			t.Errorf("%s: %d %s", c.body, w.Code, w.Body.String())
		}
	}

	// A member redeems it for the organization.
	w = e.do(request{method: "POST", path: "/api/balance/redeem", bearer: owner, body: `{"code":"` + code + `"}`})
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"credited":"5.00"`) || !strings.Contains(w.Body.String(), `"balance":"5.00"`) {
		t.Fatalf("redeem: %d %s", w.Code, w.Body.String())
	}
	w = e.do(request{method: "POST", path: "/api/balance/redeem", bearer: owner, body: `{"code":"` + code + `"}`})
	if w.Code != 409 || errorCode(t, w) != "redeem_code_used" {
		t.Fatalf("second redeem: %d %s", w.Code, w.Body.String())
	}
	w = e.do(request{method: "POST", path: "/api/balance/redeem", bearer: owner, body: `{"code":"rc_WRONG"}`})
	if w.Code != 404 || errorCode(t, w) != "redeem_code_not_found" || !strings.Contains(w.Body.String(), "mistyped, expired or used up") {
		t.Fatalf("wrong code: %d %s", w.Code, w.Body.String())
	}
}

// Redeem attempts are throttled per organization (and per address): past
// the rate, 429 with Retry-After, whether the codes were right or not.
func TestRedeemAttemptsAreThrottled(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	_, owner, _, _ := prepaidEnv(t, e, "")
	e.bill = billing.New(billing.Deps{Store: e.store, Directory: e.dir, Bus: cluster.None{}, Ledger: e.pipe.Ledger, Log: discardLog(),
		Now: e.clock.Now, Prices: e.pipe.Prices, Limiter: e.limiter, RedeemRate: 3})
	e.deps.Deps.Billing, e.deps.Callbacks = e.bill, e.bill
	e.rebuild()
	for i := range 3 {
		if w := e.do(request{method: "POST", path: "/api/balance/redeem", bearer: owner, body: `{"code":"rc_GUESS` + strconv.Itoa(i) + `"}`}); w.Code != 404 {
			t.Fatalf("attempt %d: %d %s", i, w.Code, w.Body.String())
		}
	}
	w := e.do(request{method: "POST", path: "/api/balance/redeem", bearer: owner, body: `{"code":"rc_GUESS4"}`})
	if w.Code != 429 || errorCode(t, w) != "redeem_throttled" || w.Header().Get("Retry-After") == "" ||
		!strings.Contains(w.Body.String(), "too many redeem attempts from this organization (3 an hour)") {
		t.Fatalf("4th attempt: %d %s %v", w.Code, w.Body.String(), w.Header())
	}
	// Another organization from the same address is held by the address.
	other := e.signup("other@example.com", "Others")
	w = e.do(request{method: "POST", path: "/api/balance/redeem", bearer: other, body: `{"code":"rc_GUESS5"}`})
	if w.Code != 429 || !strings.Contains(w.Body.String(), "from your address") {
		t.Fatalf("same address: %d %s", w.Code, w.Body.String())
	}
	e.clock.Advance(30 * time.Minute) // refilled evenly: 3 an hour
	if w := e.do(request{method: "POST", path: "/api/balance/redeem", bearer: owner, body: `{"code":"rc_GUESS6"}`}); w.Code != 404 {
		t.Fatalf("half an hour later: %d %s", w.Code, w.Body.String())
	}
}

// The low-balance alert is posted once when a settlement takes the balance
// to or below the owner's threshold, not again on the requests below it,
// and again after a top-up took it back above.
func TestTheLowBalanceAlertFiresOncePerFall(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	e.pipe.BalanceAlerts = e.alerts
	e.rebuild()
	admin, owner, key, org := prepaidEnv(t, e, "0.0020")
	posted := make(chan string, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.alerts.Run(ctx, func(_ context.Context, orgID int64, url string, body []byte) error {
		posted <- url + " " + string(body)
		return nil
	})
	if w := e.do(request{method: "PUT", path: "/api/organization", bearer: owner, body: `{"webhook_url":"https://hooks.example.com/low"}`}); w.Code != 200 {
		t.Fatalf("webhook: %d %s", w.Code, w.Body.String())
	}
	member := e.do(request{method: "PUT", path: "/api/balance", bearer: owner, body: `{"low_balance_threshold":"abc"}`})
	if member.Code != 400 || errorCode(t, member) != "invalid_amount" {
		t.Fatalf("bad threshold: %d %s", member.Code, member.Body.String())
	}
	if w := e.do(request{method: "PUT", path: "/api/balance", bearer: owner, body: `{"low_balance_threshold":"0.001"}`}); w.Code != 200 ||
		!strings.Contains(w.Body.String(), `"low_balance_threshold":"0.001"`) {
		t.Fatalf("threshold: %d %s", w.Code, w.Body.String())
	}
	spendBelow := func(threshold money.Amount) {
		t.Helper()
		for range 100 {
			if r := chatWith(e, key, prepaidBody, nil); r.Code != 200 {
				t.Fatalf("spending: %d %s", r.Code, r.Body)
			}
			if dollars(t, getBalance(t, e, owner).Balance) <= threshold {
				return
			}
		}
		t.Fatal("never fell below the threshold")
	}
	spendBelow(dollars(t, "0.001"))
	select {
	case p := <-posted:
		if !strings.HasPrefix(p, "https://hooks.example.com/low ") || !strings.Contains(p, `"type":"balance.low"`) ||
			!strings.Contains(p, `"threshold":"0.001"`) {
			t.Fatalf("posted %s", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no alert posted")
	}
	// Requests below the threshold post nothing more.
	for range 2 {
		if r := chatWith(e, key, prepaidBody, nil); r.Code != 200 {
			t.Fatalf("below: %d %s", r.Code, r.Body)
		}
	}
	// Back above it (a top-up), then below again: a second alert.
	adjust(t, e, admin, org, "0.0020", 201)
	spendBelow(dollars(t, "0.001"))
	select {
	case <-posted:
	case <-time.After(5 * time.Second):
		t.Fatal("no second alert after the balance went back above the threshold")
	}
	select {
	case p := <-posted:
		t.Fatalf("a third alert: %s", p)
	default:
	}
	rs, _, _ := e.store.AuditEntries(context.Background(), models.AuditQuery{OrgID: org, ActionPrefix: "balance.low"})
	if len(rs) != 2 {
		t.Fatalf("%d balance.low audit entries, want 2", len(rs))
	}
}

// A member reads the balance; only an owner sets the alert.
func TestOnlyOwnersSetTheLowBalanceAlert(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	_, owner, _, _ := prepaidEnv(t, e, "1")
	member := addMember(t, e, owner, "member@example.com")
	if b := getBalance(t, e, member); b.Balance != "1.00" || b.Billing != "prepaid" {
		t.Fatalf("member reads %+v", b)
	}
	w := e.do(request{method: "PUT", path: "/api/balance", bearer: member, body: `{"low_balance_threshold":"1"}`})
	if w.Code != 403 || errorCode(t, w) != "owner_required" {
		t.Fatalf("member set the alert: %d %s", w.Code, w.Body.String())
	}
}

// addMember invites email into owner's organization as a member and signs
// them up through the invitation; it returns their session.
func addMember(t *testing.T, e *env, owner, email string) string {
	t.Helper()
	code := e.invite(owner, email, "member")["code"].(string)
	w := e.do(request{method: "POST", path: "/api/auth/signup", body: `{"email":"` + email + `","password":"password123","invitation":"` + code + `"}`})
	if w.Code != http.StatusCreated {
		t.Fatalf("member signup: %d %s", w.Code, w.Body.String())
	}
	return decode(t, w)["token"].(string)
}

// On a prepaid tier the balance limits spending, not the included credit
// an invoiced tier blocks at.
func TestAPrepaidTierIsNotHeldToItsIncludedCredit(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	admin, _, key, _ := prepaidEnv(t, e, "1.00")
	if w := e.do(request{method: "PUT", path: "/api/admin/tiers/free", bearer: admin, body: `{"included_credit":"0.000001","overage":"block"}`}); w.Code != 200 {
		t.Fatalf("tier: %d %s", w.Code, w.Body.String())
	}
	for i := range 3 {
		if r := chatWith(e, key, prepaidBody, nil); r.Code != 200 {
			t.Fatalf("request %d past the included credit: %d %s", i, r.Code, r.Body)
		}
	}
}
