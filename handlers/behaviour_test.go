package handlers

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

func TestBucketAdmitsBurstThenRefillRate(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	key, _ := e.apiToken(e.signup("a@example.com", "A"))
	for i := range 30 {
		w := e.chat(key)
		if w.Code != 200 {
			t.Fatalf("request %d: %d %s", i+1, w.Code, w.Body.String())
		}
		if got, want := w.Header().Get("x-ratelimit-remaining-requests"), itoa(int64(29-i)); got != want {
			t.Fatalf("request %d: remaining %s, want %s", i+1, got, want)
		}
	}
	w := e.chat(key)
	if w.Code != http.StatusTooManyRequests || errorCode(t, w) != "rate_limit_exceeded" {
		t.Fatalf("31st: %d %s", w.Code, w.Body.String())
	}
	for h, want := range map[string]string{
		"Retry-After": "2", "retry-after-ms": "2000", "x-ratelimit-limit-requests": "30",
		"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1m0s",
	} {
		if got := w.Header().Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	if !strings.Contains(w.Body.String(), `"type":"rate_limit_exceeded"`) {
		t.Errorf("429 body %s", w.Body.String())
	}
	e.clock.Advance(1999 * time.Millisecond)
	if w := e.chat(key); w.Code != http.StatusTooManyRequests || w.Header().Get("retry-after-ms") != "1" {
		t.Fatalf("before refill: %d retry-after-ms %s", w.Code, w.Header().Get("retry-after-ms"))
	}
	e.clock.Advance(time.Millisecond)
	if w := e.chat(key); w.Code != 200 {
		t.Fatalf("after 2s: %d", w.Code)
	}
	if w := e.chat(key); w.Code != http.StatusTooManyRequests {
		t.Fatalf("second after 2s: %d", w.Code)
	}
}

func TestConcurrentRequestsNeverExceedTheBurst(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	key, _ := e.apiToken(e.signup("a@example.com", "A"))
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		statuses = map[int]int{}
	)
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := e.do(request{method: "GET", path: "/v1/models", bearer: key})
			mu.Lock()
			statuses[w.Code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if statuses[200] != 30 || statuses[429] != 70 {
		t.Fatalf("statuses %v, want 30 admitted and 70 rejected", statuses)
	}
}

func TestTierChangesTakeEffectOnTheNextRequest(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		member := e.signup("a@example.com", "A")
		admin := e.login("admin@example.com", "admin-password")
		key, _ := e.apiToken(member)
		if w := e.chat(key); w.Header().Get("x-ratelimit-limit-requests") != "30" {
			t.Fatalf("free limit %q", w.Header().Get("x-ratelimit-limit-requests"))
		}
		w := e.do(request{method: "PUT", path: "/api/admin/tiers/free", bearer: admin, body: `{"capacity":45,"refill_per_sec":1}`})
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"capacity":45`) {
			t.Fatalf("update tier: %d %s", w.Code, w.Body.String())
		}
		if w := e.chat(key); w.Header().Get("x-ratelimit-limit-requests") != "45" {
			t.Fatalf("after tier edit: limit %q", w.Header().Get("x-ratelimit-limit-requests"))
		}
		u, _ := e.store.UserByEmail(t.Context(), "a@example.com")
		w = e.do(request{method: "PUT", path: "/api/admin/organizations/" + itoa(u.LastOrgID) + "/tier", bearer: admin, body: `{"tier":"premium"}`})
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"tier":"premium"`) {
			t.Fatalf("move org: %d %s", w.Code, w.Body.String())
		}
		if w := e.chat(key); w.Header().Get("x-ratelimit-limit-requests") != "200" {
			t.Fatalf("after move to premium: limit %q", w.Header().Get("x-ratelimit-limit-requests"))
		}
	})
}

func TestUsageCountsAdmittedRequestsAndLastUsed(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		member := e.signup("a@example.com", "A")
		other := e.signup("b@example.com", "B")
		key, _ := e.apiToken(member)
		otherKey, _ := e.apiToken(other)
		var tokens float64
		for range 3 {
			w := e.chat(key)
			tokens += decode(t, w)["usage"].(map[string]any)["total_tokens"].(float64)
		}
		e.chat(otherKey)
		e.clock.Advance(time.Minute) // the bucket is full again: 30 of the next 40 are admitted, and only they count
		for range 40 {
			e.chat(key)
		}
		var usage struct {
			Today struct {
				Requests    float64 `json:"requests"`
				TotalTokens float64 `json:"total_tokens"`
			} `json:"today"`
		}
		w := e.do(request{method: "GET", path: "/api/usage", bearer: member})
		json.Unmarshal(w.Body.Bytes(), &usage)
		if usage.Today.Requests != 33 {
			t.Fatalf("requests today %v, want 33 (3 + 30 admitted of 40): %s", usage.Today.Requests, w.Body.String())
		}
		if usage.Today.TotalTokens < tokens {
			t.Fatalf("tokens %v < %v", usage.Today.TotalTokens, tokens)
		}
		w = e.do(request{method: "GET", path: "/api/tokens", bearer: member})
		if !strings.Contains(w.Body.String(), `"last_used_at":"20`) {
			t.Fatalf("last used not recorded: %s", w.Body.String())
		}
	})
}

func TestStreamingSendsChunksUsageAndDone(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	key, _ := e.apiToken(e.signup("a@example.com", "A"))
	w := e.do(request{method: "POST", path: "/v1/chat/completions", bearer: key,
		body: `{"model":"sluice-local","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"写一副春联"}]}`})
	if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d %s", w.Code, w.Header().Get("Content-Type"))
	}
	var content strings.Builder
	var sawUsage, sawDone, sawFinish bool
	sc := bufio.NewScanner(w.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("not an SSE data line: %q", line)
		}
		if data == "[DONE]" {
			sawDone = true
			continue
		}
		var chunk struct {
			Object  string `json:"object"`
			Choices []struct {
				Delta        struct{ Content string } `json:"delta"`
				FinishReason *string                  `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				TotalTokens int `json:"total_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil || chunk.Object != "chat.completion.chunk" {
			t.Fatalf("bad chunk %q: %v", data, err)
		}
		for _, c := range chunk.Choices {
			content.WriteString(c.Delta.Content)
			sawFinish = sawFinish || c.FinishReason != nil
		}
		if chunk.Usage != nil && chunk.Usage.TotalTokens > 0 {
			sawUsage = true
		}
	}
	if !sawDone || !sawUsage || !sawFinish || !strings.Contains(content.String(), "上联") {
		t.Fatalf("done %v usage %v finish %v content %q", sawDone, sawUsage, sawFinish, content.String())
	}
}

// browser is a cookie-carrying client of the HTML pages.
type browser struct {
	e      *env
	cookie *http.Cookie
}

func (b *browser) do(method, path string, form url.Values, header map[string]string) *httptest.ResponseRecorder {
	var body string
	if form != nil {
		body = form.Encode()
	}
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if b.cookie != nil {
		req.AddCookie(b.cookie)
	}
	w := httptest.NewRecorder()
	b.e.h.ServeHTTP(w, req)
	for _, c := range w.Result().Cookies() {
		if c.Name == "sluice_session" {
			b.cookie = c
		}
	}
	return w
}

func (e *env) browserLogin(t *testing.T, email, password string) *browser {
	b := &browser{e: e}
	w := b.do("POST", "/login", url.Values{"email": {email}, "password": {password}}, nil)
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/dashboard" || b.cookie == nil {
		t.Fatalf("login %s: %d %s", email, w.Code, w.Body.String())
	}
	return b
}

func TestBrowserSessionCookieAndNewSessionPerLogin(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	e.signup("a@example.com", "A")
	first := e.browserLogin(t, "a@example.com", "password123")
	if !first.cookie.HttpOnly || first.cookie.SameSite != http.SameSiteLaxMode || first.cookie.Path != "/" {
		t.Fatalf("cookie %+v", first.cookie)
	}
	second := e.browserLogin(t, "a@example.com", "password123")
	if first.cookie.Value == second.cookie.Value {
		t.Fatal("a second login reused the first session")
	}
	w := first.do("GET", "/dashboard", nil, nil)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `data-testid="dashboard"`) {
		t.Fatalf("dashboard: %d", w.Code)
	}
	w = first.do("POST", "/logout", url.Values{}, nil)
	if w.Code != http.StatusSeeOther || first.cookie.MaxAge >= 0 && first.cookie.Value != "" {
		t.Fatalf("logout did not clear the cookie: %d %+v", w.Code, first.cookie)
	}
	anon := &browser{e: e}
	if w := anon.do("GET", "/dashboard", nil, nil); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/login" {
		t.Fatalf("anonymous dashboard: %d %s", w.Code, w.Header().Get("Location"))
	}
}

func TestBrowserFormsShowErrorsOnThePage(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	anon := &browser{e: e}
	cases := []struct {
		path   string
		form   url.Values
		status int
		msg    string
	}{
		{"/signup", url.Values{"email": {"a@example.com"}, "password": {"short"}, "organization": {"A"}}, 422, "at least 8 bytes"},
		{"/signup", url.Values{"email": {"a@example.com"}, "password": {strings.Repeat("p", 73)}, "organization": {"A"}}, 422, "at most 72 bytes"},
		{"/signup", url.Values{"email": {"not-an-email"}, "password": {"password123"}, "organization": {"A"}}, 422, "email must be"},
		{"/login", url.Values{"email": {"ghost@example.com"}, "password": {"password123"}}, 401, "email or password is wrong"},
	}
	for _, c := range cases {
		w := anon.do("POST", c.path, c.form, nil)
		if w.Code != c.status || !strings.Contains(w.Body.String(), c.msg) || !strings.Contains(w.Body.String(), `data-testid="form-error"`) {
			t.Errorf("%s %v: %d, want %d with %q", c.path, c.form, w.Code, c.status, c.msg)
		}
	}
	w := anon.do("POST", "/signup", url.Values{"email": {"a@example.com"}, "password": {"password123"}, "organization": {"Acme"}}, nil)
	if w.Code != http.StatusSeeOther || anon.cookie == nil {
		t.Fatalf("signup: %d %s", w.Code, w.Body.String())
	}
	if w := anon.do("GET", "/dashboard", nil, nil); !strings.Contains(w.Body.String(), "Acme") || !strings.Contains(w.Body.String(), "free") {
		t.Fatalf("dashboard after signup lacks org or tier")
	}
}

func TestCrossSiteFormPostsAreRefused(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	e.signup("a@example.com", "A")
	b := e.browserLogin(t, "a@example.com", "password123")
	w := b.do("POST", "/tokens", url.Values{"name": {"evil"}}, map[string]string{"Sec-Fetch-Site": "cross-site"})
	if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "another site") {
		t.Fatalf("cross-site post: %d", w.Code)
	}
	w = b.do("POST", "/tokens", url.Values{"name": {"evil"}}, map[string]string{"Origin": "https://evil.example"})
	if w.Code != http.StatusForbidden {
		t.Fatalf("foreign origin post: %d", w.Code)
	}
	toks, _ := e.store.APITokens(t.Context(), 2)
	if len(toks) != 0 {
		t.Fatalf("a refused post created %d tokens", len(toks))
	}
	if w := b.do("POST", "/tokens", url.Values{"name": {"mine"}}, map[string]string{"Sec-Fetch-Site": "same-origin"}); w.Code != http.StatusCreated {
		t.Fatalf("same-origin post: %d", w.Code)
	}
}

func TestTokenSecretIsShownOnce(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	e.signup("a@example.com", "A")
	b := e.browserLogin(t, "a@example.com", "password123")
	w := b.do("POST", "/tokens", url.Values{"name": {"laptop"}, "expires_in_days": {"30"}}, nil)
	if w.Code != http.StatusCreated || w.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("create: %d cache %q", w.Code, w.Header().Get("Cache-Control"))
	}
	i := strings.Index(w.Body.String(), models.TokenPrefix)
	secret := w.Body.String()[i : i+59]
	if !models.CheckTokenSyntax(secret) {
		t.Fatalf("no valid secret on the page: %q", secret)
	}
	if w := e.chat(secret); w.Code != 200 {
		t.Fatalf("the shown token does not work: %d", w.Code)
	}
	list := b.do("GET", "/tokens", nil, nil)
	if strings.Contains(list.Body.String(), secret) || !strings.Contains(list.Body.String(), secret[:16]) {
		t.Fatal("the token list must show the prefix and never the secret")
	}
	if w := b.do("POST", "/tokens", url.Values{"name": {""}}, nil); w.Code != 422 || !strings.Contains(w.Body.String(), "name must be") {
		t.Fatalf("empty name: %d", w.Code)
	}
	if w := b.do("POST", "/tokens", url.Values{"name": {"x"}, "expires_in_days": {"soon"}}, nil); w.Code != 422 {
		t.Fatalf("bad expiry: %d", w.Code)
	}
}

func TestUnmeteredCallsStillMarkTheTokenUsed(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	member := e.signup("a@example.com", "A")
	key, _ := e.apiToken(member)
	if w := e.do(request{method: "GET", path: "/v1/models", bearer: key}); w.Code != 200 {
		t.Fatal(w.Code)
	}
	w := e.do(request{method: "GET", path: "/api/tokens", bearer: member})
	if !strings.Contains(w.Body.String(), `"last_used_at":"20`) {
		t.Fatalf("listing models did not mark the token used: %s", w.Body.String())
	}
	u, _ := e.store.UsageSince(t.Context(), orgOf(t, e, "a@example.com"), time.Now().Add(-time.Hour))
	if u.Requests != 0 {
		t.Fatalf("an unmetered call was billed: %+v", u)
	}
}
