package e2e

import (
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/upstream/mock"
)

// TestAutoTunerRunsInTheServer drives real load through a running Sluice:
// slow provider requests keep two requests in flight against a configured
// concurrency of one, so the tuner cuts the free tier's refill; when they
// finish, calm samples restore it step by step. Premium is never touched.
func TestAutoTunerRunsInTheServer(t *testing.T) {
	provider := httptest.NewServer(mock.New(mock.Config{Keys: map[string]float64{"sk-slow-provider": 0}, Latency: 800 * time.Millisecond}))
	defer provider.Close()
	base, _, stop := start(t, map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4",
		"SLUICE_ADMIN_PASSWORD": "admin-password", "SLUICE_TUNE_INTERVAL": "100ms", "SLUICE_MAX_CONCURRENCY": "1"})
	defer stop()
	c := client{t, base}
	var admin, user, tok struct{ Token string }
	c.call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &admin)
	if r := c.call("POST", "/api/admin/upstreams", admin.Token, `{"name":"slow","base_url":"`+provider.URL+`/v1","api_key":"sk-slow-provider","models":["gpt-4o-mini"]}`, nil); r.StatusCode != 201 {
		t.Fatalf("add provider: %d", r.StatusCode)
	}
	c.call("POST", "/api/auth/signup", "", `{"email":"a@example.com","password":"password123","organization":"A"}`, &user)
	c.call("POST", "/api/tokens", user.Token, `{"name":"load"}`, &tok)

	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.call("POST", "/v1/chat/completions", tok.Token, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"a slow question"}]}`, nil)
		}()
	}
	type event struct {
		Tier string  `json:"tier"`
		From float64 `json:"from_refill_per_sec"`
		To   float64 `json:"to_refill_per_sec"`
		Load float64 `json:"load"`
	}
	tuning := func() []event {
		var out struct{ Data []event }
		c.call("GET", "/api/admin/tuning", admin.Token, "", &out)
		return out.Data // newest first
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(tuning()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no tuning event under load")
		}
		time.Sleep(50 * time.Millisecond)
	}
	cut := tuning()[0]
	if cut.Tier != "free" || cut.From != 0.5 || cut.To != 0.3 || cut.Load < 0.8 {
		t.Fatalf("first event %+v, want free 0.5 -> 0.3 at load >= 0.8", cut)
	}
	wg.Wait()
	for len(tuning()) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the refill was not restored once calm")
		}
		time.Sleep(50 * time.Millisecond)
	}
	restore := tuning()[0]
	if restore.Tier != "free" || restore.From != 0.3 || restore.To != 0.35 {
		t.Fatalf("restore %+v, want free 0.3 -> 0.35", restore)
	}
	for _, e := range tuning() {
		if !strings.EqualFold(e.Tier, "free") {
			t.Fatalf("a non-autotuned tier was tuned: %+v", e)
		}
	}
}
