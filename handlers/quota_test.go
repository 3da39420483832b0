package handlers

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/quota"
)

func header(t *testing.T, w interface{ Header() http.Header }, name string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(w.Header().Get(name), 10, 64)
	if err != nil {
		t.Fatalf("%s: %q", name, w.Header().Get(name))
	}
	return n
}

func chatWith(e *env, key, body string, hdr map[string]string) *requestResult {
	w := e.do(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: body, header: hdr})
	return &requestResult{w.Code, w.Header(), w.Body.String()}
}

type requestResult struct {
	Code int
	H    http.Header
	Body string
}

func (r *requestResult) Header() http.Header { return r.H }

func TestTokensPerMinuteBucket(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	admin := e.login("admin@example.com", "admin-password")
	if w := e.do(request{method: "PUT", path: "/api/admin/tiers/free", bearer: admin, body: `{"tokens_per_minute":600}`}); w.Code != 200 {
		t.Fatalf("set tpm: %d %s", w.Code, w.Body.String())
	}
	key, _ := e.apiToken(e.signup("a@example.com", "A"))
	body := func(max int) string {
		return `{"model":"sluice-local","max_tokens":` + strconv.Itoa(max) + `,"messages":[{"role":"user","content":"write a couplet"}]}`
	}
	r := chatWith(e, key, body(200), nil)
	if r.Code != 200 || header(t, r, "x-ratelimit-limit-tokens") != 600 {
		t.Fatalf("%d %v", r.Code, r.H)
	}
	// The reservation (prompt + 200) was settled with the real, smaller usage.
	if rem := header(t, r, "x-ratelimit-remaining-tokens"); rem > 600-200 {
		t.Fatalf("reservation not taken: remaining %d", rem)
	}
	r2 := chatWith(e, key, body(1), nil)
	if rem := header(t, r2, "x-ratelimit-remaining-tokens"); rem < 450 {
		t.Fatalf("the first request's unused reservation was not refunded: remaining %d", rem)
	}
	// More than the whole minute's budget can never fit: a clear 400.
	if r := chatWith(e, key, body(700), nil); r.Code != 400 || !strings.Contains(r.Body, "request_exceeds_limit") || !strings.Contains(r.Body, "tokens per minute") {
		t.Fatalf("oversized: %d %s", r.Code, r.Body)
	}
	// Drain the tokens bucket, then a request is refused for tokens, and the
	// request bucket is left as it was.
	for chatWith(e, key, body(150), nil).Code == 200 {
	}
	before := chatWith(e, key, body(1), nil)
	r = chatWith(e, key, body(500), nil)
	if r.Code != 429 || !strings.Contains(r.Body, `"code":"tokens_rate_limit_exceeded"`) || !strings.Contains(r.Body, "tokens per minute") {
		t.Fatalf("tokens 429: %d %s", r.Code, r.Body)
	}
	if r.H.Get("retry-after-ms") == "" || r.H.Get("x-ratelimit-reset-tokens") == "" {
		t.Fatalf("headers %v", r.H)
	}
	// The rejected request's remaining-requests equals the one before it:
	// it was not charged.
	if header(t, r, "x-ratelimit-remaining-requests") != header(t, before, "x-ratelimit-remaining-requests") {
		t.Fatalf("a tokens rejection consumed a request: %s then %s", before.H.Get("x-ratelimit-remaining-requests"), r.H.Get("x-ratelimit-remaining-requests"))
	}
}

// TestTierBindsTheOrganization: a tier's buckets are the organization's,
// so more tokens bring no more requests, while rejections (and so freezes)
// stay with the token that earned them.
func TestTierBindsTheOrganization(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		owner := e.signup("a@example.com", "A")
		keys := make([]string, 5)
		for i := range keys {
			keys[i], _ = e.apiToken(owner)
		}
		bystander, _ := e.apiToken(e.signup("b@example.com", "B"))

		admitted, first429 := 0, (*requestResult)(nil)
		for i := range 150 {
			r := chatWith(e, keys[i%len(keys)], `{"model":"sluice-local","max_tokens":8,"messages":[{"role":"user","content":"write a couplet"}]}`, nil)
			switch {
			case r.Code == 200:
				admitted++
			case r.Code == 429 && first429 == nil:
				first429 = r
			}
		}
		if admitted != 30 {
			t.Fatalf("5 tokens of one free organization admitted %d requests at once, want the tier's burst of 30", admitted)
		}
		if first429 == nil || !strings.Contains(first429.Body, "rate limit reached for requests on the free tier (limit 30, remaining 0)") ||
			first429.H.Get("x-ratelimit-limit-requests") != "30" || first429.H.Get("x-ratelimit-remaining-requests") != "0" ||
			first429.H.Get("Retry-After") == "" {
			t.Fatalf("the refusal does not describe the organization's bucket: %+v", first429)
		}
		// 120 rejections over 5 tokens are 24 each: every token crossed
		// the threshold of 20 on its own rejections, not the organization's.
		fs, err := e.store.Freezes(context.Background(), 10)
		if err != nil || len(fs) != 5 {
			t.Fatalf("freezes %+v %v, want one per token", fs, err)
		}
		if r := chatWith(e, bystander, `{"model":"sluice-local","messages":[{"role":"user","content":"write a couplet"}]}`, nil); r.Code != 200 {
			t.Fatalf("another organization was limited by the first one: %d %s", r.Code, r.Body)
		}
	})
}

func TestAFreezeIsTheTokensOwn(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	owner := e.signup("a@example.com", "A")
	abusive, _ := e.apiToken(owner)
	quiet, _ := e.apiToken(owner)
	for range 30 + 20 { // the burst, then 20 rejections: frozen
		e.chat(abusive)
	}
	if w := e.chat(abusive); errorCode(t, w) != "token_frozen" {
		t.Fatalf("abusive token: %d %s", w.Code, w.Body.String())
	}
	e.clock.Advance(time.Minute) // the organization's bucket is full again
	if w := e.chat(quiet); w.Code != 200 {
		t.Fatalf("the organization's other token was frozen with it: %d %s", w.Code, w.Body.String())
	}
}

func TestPriorityAndLowValueWeights(t *testing.T) {
	db := testdb.SQLite(t)
	e := newEnv(t, db)
	key, _ := e.apiToken(e.signup("a@example.com", "A"))
	prompt := func(s string) string {
		return `{"model":"sluice-local","messages":[{"role":"user","content":"` + s + `"}]}`
	}
	remaining := func(r *requestResult) int64 { return header(t, r, "x-ratelimit-remaining-requests") }
	r0 := chatWith(e, key, prompt("a first ordinary question about couplets"), nil)
	r1 := chatWith(e, key, prompt("another ordinary question about spring"), map[string]string{"X-Sluice-Priority": "high"})
	if remaining(r0)-remaining(r1) != 2 {
		t.Fatalf("high priority should weigh 2: %d -> %d", remaining(r0), remaining(r1))
	}
	r2 := chatWith(e, key, prompt("a third question, this one at low priority"), map[string]string{"X-Sluice-Priority": "low"})
	if remaining(r1)-remaining(r2) != 1 {
		t.Fatalf("low priority should weigh 1: %d -> %d", remaining(r1), remaining(r2))
	}
	if r := chatWith(e, key, prompt("x"), map[string]string{"X-Sluice-Priority": "urgent"}); r.Code != 400 || !strings.Contains(r.Body, "invalid_priority") {
		t.Fatalf("bad priority: %d %s", r.Code, r.Body)
	}

	// With the default low-value rules, a tiny prompt repeated costs more.
	e.pipe.Limiter = quota.NewMemory(e.clock.Now)
	e.pipe.Scorer = quota.NewValueScorer(quota.DefaultValueRules(), e.clock.Now)
	e.rebuild()
	first := chatWith(e, key, prompt("hi"), nil)
	second := chatWith(e, key, prompt("hi"), nil)
	if first.Code != 200 || second.Code != 200 {
		t.Fatalf("%d %d", first.Code, second.Code)
	}
	if cost := remaining(first) - remaining(second); cost <= 2 {
		t.Fatalf("a repeated tiny prompt cost %d, want more than a tiny one alone", cost)
	}
}

func TestAbusiveTokenIsFrozenAndLifted(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		key, _ := e.apiToken(e.signup("a@example.com", "A"))
		for range 30 {
			e.chat(key)
		}
		for i := 1; i <= 19; i++ {
			w := e.chat(key)
			if w.Code != 429 || errorCode(t, w) != "rate_limit_exceeded" {
				t.Fatalf("rejection %d: %d %s", i, w.Code, w.Body.String())
			}
		}
		w := e.chat(key) // the 20th rejection in a minute
		if w.Code != 429 || errorCode(t, w) != "token_frozen" || !strings.Contains(w.Body.String(), "20 requests were rejected") {
			t.Fatalf("20th rejection: %d %s", w.Code, w.Body.String())
		}
		if ra := header(t, w, "Retry-After"); ra < 599 || ra > 600 {
			t.Fatalf("Retry-After %d, want the freeze's 10 minutes", ra)
		}
		e.clock.Advance(time.Minute) // the bucket is full again, the freeze holds
		if w := e.chat(key); errorCode(t, w) != "token_frozen" {
			t.Fatalf("after a minute: %d %s", w.Code, w.Body.String())
		}
		if w := e.do(request{method: "GET", path: "/v1/models", bearer: key}); w.Code != 429 || errorCode(t, w) != "token_frozen" {
			t.Fatalf("models while frozen: %d", w.Code)
		}
		member := e.login("a@example.com", "password123")
		w = e.do(request{method: "GET", path: "/api/freezes", bearer: member})
		if !strings.Contains(w.Body.String(), `"active":true`) || !strings.Contains(w.Body.String(), "rejected for exceeding the rate limit") {
			t.Fatalf("the user does not see the freeze: %s", w.Body.String())
		}

		// A second node on the same database honours it after a reload.
		other := newEnv(t, db)
		if w := other.chat(key); w.Code != 429 || errorCode(t, w) != "token_frozen" {
			t.Fatalf("second node: %d %s", w.Code, w.Body.String())
		}

		admin := e.login("admin@example.com", "admin-password")
		fs, _ := e.store.Freezes(context.Background(), 10)
		if len(fs) != 1 {
			t.Fatalf("freezes %+v", fs)
		}
		if w := e.do(request{method: "DELETE", path: "/api/admin/freezes/" + itoa(fs[0].ID), bearer: member}); w.Code != 403 {
			t.Fatalf("a member lifting: %d", w.Code)
		}
		if w := e.do(request{method: "DELETE", path: "/api/admin/freezes/" + itoa(fs[0].ID), bearer: admin}); w.Code != 200 || !strings.Contains(w.Body.String(), `"active":false`) {
			t.Fatalf("lift: %d %s", w.Code, w.Body.String())
		}
		if w := e.chat(key); w.Code != 200 {
			t.Fatalf("after lift: %d %s", w.Code, w.Body.String())
		}
		if w := e.do(request{method: "DELETE", path: "/api/admin/freezes/999999", bearer: admin}); w.Code != 404 {
			t.Fatalf("lifting a missing freeze: %d", w.Code)
		}
	})
}

func TestFreezeExpiresByItself(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	key, _ := e.apiToken(e.signup("a@example.com", "A"))
	for e.chat(key).Code != 429 {
	}
	for range 19 {
		e.chat(key)
	}
	if w := e.chat(key); errorCode(t, w) != "token_frozen" {
		t.Fatalf("not frozen: %s", w.Body.String())
	}
	e.clock.Advance(10*time.Minute - time.Second)
	if w := e.chat(key); errorCode(t, w) != "token_frozen" {
		t.Fatalf("thawed early")
	}
	e.clock.Advance(time.Second)
	if w := e.chat(key); w.Code != 200 {
		t.Fatalf("still frozen after 10 minutes: %d %s", w.Code, w.Body.String())
	}
}

func TestFreezeThresholdZeroNeverFreezes(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	admin := e.login("admin@example.com", "admin-password")
	e.do(request{method: "PUT", path: "/api/admin/tiers/free", bearer: admin, body: `{"freeze_threshold":0}`})
	key, _ := e.apiToken(e.signup("a@example.com", "A"))
	for range 100 {
		if w := e.chat(key); w.Code == 429 && errorCode(t, w) == "token_frozen" {
			t.Fatal("a tier with freeze_threshold 0 froze a token")
		}
	}
}

// The directory applies events from other nodes.
func TestClusterEventsUpdateTheDirectory(t *testing.T) {
	db := testdb.SQLite(t)
	e := newEnv(t, db)
	key, _ := e.apiToken(e.signup("a@example.com", "A"))
	e.chat(key)
	other := newEnv(t, db)
	other.chat(key) // cached on the other node
	admin, _ := e.store.UserByEmail(context.Background(), "admin@example.com")
	free, _ := e.store.TierByName(context.Background(), "free")
	s := free.Settings()
	s.Capacity = 7
	if _, err := e.acc.UpdateTier(context.Background(), admin, "free", s); err != nil {
		t.Fatal(err)
	}
	if err := other.dir.Apply(context.Background(), cluster.Event{Kind: cluster.TiersChanged}); err != nil {
		t.Fatal(err)
	}
	if w := other.chat(key); w.Header().Get("x-ratelimit-limit-requests") != "7" {
		t.Fatalf("the other node did not apply the tier change: %s", w.Header().Get("x-ratelimit-limit-requests"))
	}
}

func TestTuningIsAppliedListedAndShown(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		key, _ := e.apiToken(e.signup("a@example.com", "A"))
		err := e.acc.ApplyTuning(context.Background(), []models.TuningEvent{{Tier: "free", FromRefill: 0.5, ToRefill: 0.3, Load: 0.93, CreatedAt: e.clock.Now()}})
		if err != nil {
			t.Fatal(err)
		}
		// The bucket now refills at 0.3/s: drain it, wait what 0.5/s would
		// need for one request (2 s) and see it still refused, then 3.34 s.
		for e.chat(key).Code == 200 {
		}
		e.clock.Advance(2 * time.Second)
		if w := e.chat(key); w.Code != 429 {
			t.Fatalf("refilled at the configured rate, not the tuned one: %d", w.Code)
		}
		e.clock.Advance(1340 * time.Millisecond)
		if w := e.chat(key); w.Code != 200 {
			t.Fatalf("no refill at the tuned rate: %d %s", w.Code, w.Body.String())
		}
		admin := e.login("admin@example.com", "admin-password")
		w := e.do(request{method: "GET", path: "/api/admin/tuning", bearer: admin})
		if !strings.Contains(w.Body.String(), `"tier":"free"`) || !strings.Contains(w.Body.String(), `"to_refill_per_sec":0.3`) {
			t.Fatalf("tuning list: %s", w.Body.String())
		}
		w = e.do(request{method: "GET", path: "/api/admin/tiers", bearer: admin})
		if !strings.Contains(w.Body.String(), `"effective_refill_per_sec":0.3`) || !strings.Contains(w.Body.String(), `"effective_refill_per_sec":5`) {
			t.Fatalf("tiers: %s", w.Body.String())
		}
		b := e.browserLogin(t, "a@example.com", "password123")
		if page := b.do("GET", "/dashboard", nil, nil).Body.String(); !strings.Contains(page, `data-testid="tuned-notice"`) || !strings.Contains(page, "0.3") {
			t.Fatal("the dashboard does not tell the user their refill is lowered")
		}
		if page := e.browserLogin(t, "admin@example.com", "admin-password").do("GET", "/admin/tiers", nil, nil).Body.String(); !strings.Contains(page, `data-testid="admin-tuning"`) || !strings.Contains(page, "93%") {
			t.Fatal("the admin page does not list the tuning event")
		}
	})
}

func TestFreezesShowInTheBrowser(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	key, _ := e.apiToken(e.signup("a@example.com", "A"))
	for range 50 {
		e.chat(key)
	}
	user := e.browserLogin(t, "a@example.com", "password123")
	page := user.do("GET", "/dashboard", nil, nil).Body.String()
	if !strings.Contains(page, `data-testid="freeze-row"`) || !strings.Contains(page, "rejected for exceeding the rate limit") {
		t.Fatal("the user's dashboard does not show the freeze and its reason")
	}
	admin := e.browserLogin(t, "admin@example.com", "admin-password")
	page = admin.do("GET", "/admin/tiers", nil, nil).Body.String()
	fs, _ := e.store.Freezes(context.Background(), 1)
	action := `/admin/freezes/` + itoa(fs[0].ID) + `/lift`
	if !strings.Contains(page, action) {
		t.Fatalf("no lift button for the active freeze")
	}
	if w := user.do("POST", action, nil, nil); w.Code != http.StatusForbidden {
		t.Fatalf("a user lifting: %d", w.Code)
	}
	if w := admin.do("POST", action, nil, nil); w.Code != http.StatusSeeOther {
		t.Fatalf("lift: %d", w.Code)
	}
	if w := e.chat(key); w.Code == 429 && errorCode(t, w) == "token_frozen" {
		t.Fatal("still frozen after the admin lifted it")
	}
}

func TestRetryAfterIsTheLongerOfBothBuckets(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	admin := e.login("admin@example.com", "admin-password")
	e.do(request{method: "PUT", path: "/api/admin/tiers/free", bearer: admin, body: `{"tokens_per_minute":100,"freeze_threshold":0}`})
	key, _ := e.apiToken(e.signup("a@example.com", "A"))
	// Reserves ~95 of the minute's 100 tokens; the reply uses ~35 of them.
	big := `{"model":"sluice-local","max_tokens":90,"messages":[{"role":"user","content":"hi"}]}`
	if w := e.do(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: big}); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	for e.do(request{method: "GET", path: "/v1/models", bearer: key}).Code == 200 { // empty the request bucket too
	}
	w := e.do(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: big})
	if w.Code != 429 {
		t.Fatalf("%d", w.Code)
	}
	wait := time.Duration(header(t, w, "retry-after-ms")) * time.Millisecond
	e.clock.Advance(wait)
	if w := e.do(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: big}); w.Code != 200 {
		t.Fatalf("after waiting the announced %v: %d %s", wait, w.Code, w.Body.String())
	}
}

func TestHugeMaxTokensIsABadRequest(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	key, _ := e.apiToken(e.signup("a@example.com", "A"))
	w := e.do(request{method: "POST", path: "/v1/chat/completions", bearer: key,
		body: `{"model":"sluice-local","max_tokens":9223372036854775807,"messages":[{"role":"user","content":"hi"}]}`})
	if w.Code != 400 || errorCode(t, w) != "invalid_max_tokens" {
		t.Fatalf("%d %s", w.Code, w.Body.String())
	}
}
