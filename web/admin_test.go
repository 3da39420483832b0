package web_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/upstream"
)

// TestTunedRefillIsShown checks that a refill the auto-tuner lowered is
// told to the organization and to the admin, with the tuner's change.
func TestTunedRefillIsShown(t *testing.T) {
	t.Parallel()
	s := newSite(t, testdb.SQLite(t))
	u := s.signup("ada@example.com", "Analytical Engines")
	if err := s.store.ApplyTuning(context.Background(), []models.TuningEvent{
		{Tier: "free", FromRefill: 0.5, ToRefill: 0.35, Load: 0.92, CreatedAt: epoch},
	}); err != nil {
		t.Fatal(err)
	}
	w := s.signedIn(u).get("/dashboard")
	w.expectPage(http.StatusOK, "tuned-notice")
	if got := w.text("tuned-notice"); !strings.Contains(got, "temporarily 0.35 per second (normally 0.5)") {
		t.Errorf("tuned-notice = %q, want the lowered and the normal refill", got)
	}

	w = s.signedIn(s.admin).get("/admin/tiers")
	w.expectPage(http.StatusOK, "tier-effective", "tuning-row")
	if got := w.testid("tier-form-free").Find(`[data-testid="tier-effective"]`).Text(); !strings.Contains(got, "0.35/s") {
		t.Errorf("free tier's effective refill = %q, want 0.35/s", got)
	}
	if got := w.text("tuning-change"); got != "0.5 → 0.35" {
		t.Errorf("tuning-change = %q, want 0.5 → 0.35", got)
	}
	if got := w.text("tuning-load"); got != "92%" {
		t.Errorf("tuning-load = %q, want 92%%", got)
	}
}

func TestAdminTiersShowsTheLimiterState(t *testing.T) {
	t.Parallel()
	s := newSite(t, testdb.SQLite(t))
	tests := []struct {
		status quota.LimiterStatus
		mode   string
		text   string
	}{
		{quota.LimiterStatus{Mode: "local", Nodes: 1}, "local", "Limits are kept in this process (single node)."},
		{quota.LimiterStatus{Mode: "shared", Nodes: 3}, "shared", "Limits are shared through Redis across 3 nodes."},
		{quota.LimiterStatus{Mode: "degraded", Nodes: 3}, "degraded", "Redis is unreachable: each node enforces 1/3 of every limit locally until it returns."},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			s.deps.LimiterStatus = func() quota.LimiterStatus { return tt.status }
			s.rebuild()
			w := s.signedIn(s.admin).get("/admin/tiers")
			w.t = t
			w.expectPage(http.StatusOK, "limiter-state")
			if got, _ := w.testid("limiter-state").Attr("data-mode"); got != tt.mode {
				t.Errorf("data-mode = %q, want %q", got, tt.mode)
			}
			if got := w.text("limiter-state"); got != tt.text {
				t.Errorf("limiter-state = %q, want %q", got, tt.text)
			}
		})
	}
}

// TestAdminOverviewListsEveryOrganization lists each organization once
// with its tier, and links it to its page, where its tier select
// preselects the tier it is on.
func TestAdminOverviewListsEveryOrganization(t *testing.T) {
	t.Parallel()
	s := newSite(t, testdb.SQLite(t))
	ada := s.signup("ada@example.com", "Analytical Engines")
	w := s.signedIn(s.admin).get("/admin/organizations")
	w.expectPage(http.StatusOK, "overview-row")
	rows := map[string]string{}
	w.testid("overview-row").Each(func(_ int, r *goquery.Selection) {
		rows[strings.TrimSpace(r.Find(`[data-testid="overview-name"]`).Text())] = strings.TrimSpace(r.Find(`[data-testid="overview-tier"]`).Text())
	})
	want := map[string]string{"Sluice operators": "premium", "Analytical Engines": "free"}
	if len(rows) != len(want) {
		t.Errorf("organizations listed: %v, want %v", rows, want)
	}
	for org, tier := range want {
		if rows[org] != tier {
			t.Errorf("%s is listed on tier %q, want %q", org, rows[org], tier)
		}
	}
	href, _ := w.page().Find(`[data-org-id="` + strconv.FormatInt(ada.OrgID, 10) + `"] a`).Attr("href")
	if want := "/admin/organizations/" + strconv.FormatInt(ada.OrgID, 10); href != want {
		t.Fatalf("her organization links to %q, want %q", href, want)
	}
	w = s.signedIn(s.admin).get(href)
	w.expectPage(http.StatusOK, "admin-org")
	if got, _ := w.page().Find("#org-tier option[selected]").Attr("value"); got != "free" {
		t.Errorf("tier select of her organization preselects %q, want free", got)
	}
}

// TestAdminUpstreamsShowsStateButNeverTheKey lists keys with the pool's
// live state and a refused key's alert, and only the key's last four
// characters.
func TestAdminUpstreamsShowsStateButNeverTheKey(t *testing.T) {
	t.Parallel()
	s := newSite(t, testdb.SQLite(t))
	const secretA, secretB = "sk-live-secret-aaaa1111", "sk-live-secret-bbbb2222"
	a := s.upstreamKey("openai-main", secretA)
	b := s.upstreamKey("openai-spare", secretB)
	admin := s.signedIn(s.admin)

	w := admin.get("/admin/upstreams")
	w.expectPage(http.StatusOK, "upstream-row")
	if n := w.testid("upstream-row").Length(); n != 2 {
		t.Fatalf("%d upstream rows, want 2", n)
	}
	if got := strings.Join(w.texts("upstream-state"), " "); got != "healthy healthy" {
		t.Errorf("states = %q, want both healthy from the pool", got)
	}
	for _, secret := range []string{secretA, secretB} {
		if strings.Contains(w.Body.String(), secret) {
			t.Errorf("the page shows the provider key %q", secret)
		}
	}
	if got := w.testid("upstream-row").First().Find("code").Eq(1).Text(); got != "…1111" {
		t.Errorf("key shown as %q, want …1111", got)
	}

	// The pool's live state and counters are shown as it reports them.
	s.deps.PoolStatus = func() []upstream.KeyStatus {
		return []upstream.KeyStatus{{ID: a.ID, State: upstream.Open, Reason: "5 failures in a row", Requests: 40, Failures: 5}}
	}
	s.rebuild()
	w = admin.get("/admin/upstreams")
	row := w.page().Find(`[data-upstream-id="` + strconv.FormatInt(a.ID, 10) + `"]`)
	if got := strings.TrimSpace(row.Find(`[data-testid="upstream-state"]`).Text()); got != "open" {
		t.Errorf("state of a = %q, want open", got)
	}
	if got, _ := row.Find(`[data-testid="upstream-state"]`).Attr("title"); got != "5 failures in a row" {
		t.Errorf("reason of a = %q", got)
	}
	if !strings.Contains(row.Text(), "40 (5 failed)") {
		t.Errorf("row of a does not show its counters: %q", strings.Join(strings.Fields(row.Text()), " "))
	}
	s.deps.PoolStatus = s.pool.Status
	s.rebuild()

	// A key the provider refused is disabled, whatever the pool says, and
	// raises an alert.
	s.providers.Disable(context.Background(), b.ID, "401 invalid api key")
	w = admin.get("/admin/upstreams")
	w.expectPage(http.StatusOK, "upstream-alert")
	if got := w.text("upstream-alert"); !strings.Contains(got, "openai-spare (…2222): 401 invalid api key") {
		t.Errorf("upstream-alert = %q, want the key and the reason", got)
	}
	if got := strings.Join(w.texts("upstream-state"), " "); got != "healthy disabled" {
		t.Errorf("states = %q, want healthy disabled", got)
	}
}
