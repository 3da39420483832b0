package web_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/upstream"
	"github.com/sluicehq/sluice/upstream/mock"
)

// TestAdminUpstreamsShowsLearnedLimits: after a few answers from a provider
// that enforces 1,500 RPM as a burst of 5, the Upstreams page shows what
// its headers said (limit, remaining, reset, its burst) and how Sluice paces
// the key (rate, current burst); a key that says nothing shows that.
func TestAdminUpstreamsShowsLearnedLimits(t *testing.T) {
	t.Parallel()
	s := newSite(t, testdb.SQLite(t))
	srv := httptest.NewServer(mock.New(mock.Config{Keys: map[string]float64{"sk-short-window": 25}, Burst: 5}))
	t.Cleanup(srv.Close)
	ctx := context.Background()
	if _, err := s.providers.Create(ctx, s.admin.User, models.UpstreamKeyInput{Name: "short-window", BaseURL: srv.URL + "/v1",
		APIKey: "sk-short-window", Weight: 1, RPM: 1500, Models: []string{"gpt-4o-mini"}}); err != nil {
		t.Fatal(err)
	}
	s.upstreamKey("silent", "sk-live-secret-cccc3333")
	for range 2 {
		if _, err := s.pool.Do(ctx, upstream.Request{Model: "gpt-4o-mini", Estimate: 10,
			Body: []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)}); err != nil {
			t.Fatal(err)
		}
	}

	w := s.signedIn(s.admin).get("/admin/upstreams")
	w.expectPage(http.StatusOK, "upstream-limits", "upstream-limits-requests")
	got := strings.Join(strings.Fields(w.text("upstream-limits-requests")), " ")
	for _, want := range []string{"requests", "provider: 1,500/min,", "left, full in", "burst 5;", "paced at 1,500/min, burst 3"} {
		if !strings.Contains(got, want) {
			t.Errorf("requests limits = %q, want %q in it", got, want)
		}
	}
	if n := w.testid("upstream-limits-tokens").Length(); n != 0 {
		t.Errorf("%d tokens limits shown; neither key paces tokens", n)
	}
	if got := w.texts("upstream-limits"); len(got) != 2 || !strings.Contains(got[1], "not paced") {
		t.Errorf("limits cells = %q, want the silent key not paced", got)
	}
}

// TestUpstreamFormRates: the form reads RPM and TPM as the API does: 1e12
// is a whole number, and a bad value is refused naming its field.
func TestUpstreamFormRates(t *testing.T) {
	t.Parallel()
	s := newSite(t, testdb.SQLite(t))
	admin := s.signedIn(s.admin)
	admin.post("/admin/upstreams", upstreamValues(map[string]string{"rpm": "100000000", "tpm": "1e12"})).
		expectRedirect("/admin/upstreams?done=added")
	keys, err := s.store.UpstreamKeys(context.Background())
	if err != nil || len(keys) != 1 || keys[0].RPM != 1e8 || keys[0].TPM != 1e12 {
		t.Fatalf("stored %+v, %v; want rpm 1e8 and tpm 1e12", keys, err)
	}
	for field, bad := range map[string]string{"rpm": "-5", "tpm": "1.5"} {
		w := admin.post("/admin/upstreams", upstreamValues(map[string]string{"name": "other", field: bad}))
		w.expectFormError(http.StatusBadRequest, "add-upstream-form",
			field+" must be a whole number of 0 (unknown) or more, at most 9223372036854775807 (e.g. 1000000000000 or 1e12)")
	}
}
