package metrics

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/sluicehq/sluice/chat"
)

// A client naming made-up models (refused by the provider) adds no series:
// only models answered with a 2xx become label values, at most MaxModels of
// them; the rest count as "other".
func TestTheModelLabelIsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := NewGateway(reg)
	g.Request("/v1/chat/completions", 200, "free", "gpt-4o", time.Millisecond, 0)
	for i := range 5000 {
		g.Request("/v1/chat/completions", 404, "free", "made-up-"+strconv.Itoa(i), time.Millisecond, 0)
	}
	g.Request("/v1/chat/completions", 429, "free", "gpt-4o", time.Millisecond, 0)
	if n := testutil.CollectAndCount(g.requests); n != 3 {
		t.Fatalf("%d request series; want gpt-4o 2xx, gpt-4o 4xx and other 4xx", n)
	}
	if v := testutil.ToFloat64(g.requests.WithLabelValues("/v1/chat/completions", "4xx", "free", "other")); v != 5000 {
		t.Fatalf("other: %v", v)
	}
	if v := testutil.ToFloat64(g.requests.WithLabelValues("/v1/chat/completions", "4xx", "free", "gpt-4o")); v != 1 {
		t.Fatalf("a known model's 429 keeps its label: %v", v)
	}
	// Served models beyond the bound (gpt-4o is one of it) are "other"
	// too, in both series.
	for i := range MaxModels + 50 {
		g.Tokens("free", "served-"+strconv.Itoa(i), chat.Usage{PromptTokens: 1, CompletionTokens: 1})
	}
	if n := testutil.CollectAndCount(g.tokens); n != 2*MaxModels {
		t.Fatalf("%d token series; want prompt and completion for %d models and other", n, MaxModels-1)
	}
	if v := testutil.ToFloat64(g.tokens.WithLabelValues("prompt", "free", "other")); v != 51 {
		t.Fatalf("tokens of models past the bound: %v", v)
	}
}

// The series alerts use exist at 0 for their known label values before any
// request: requests and durations for every known route, rejections for
// every reason and tier; a tier that appears later has its series at the
// next scrape.
func TestKnownLabelValuesExistAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := NewGateway(reg)
	tiers := []string{"free", "premium"}
	g.KnowTiers(func() []string { return tiers }, []string{"requests", "tokens", "frozen", "budget"})
	g.KnowRoutes([]string{"/v1/chat/completions", "/v1/models"})
	want := func(text string) {
		t.Helper()
		for _, s := range []string{
			`sluice_rejections_total{reason="tokens",tier="free"} 0`, `sluice_rejections_total{reason="budget",tier="premium"} 0`,
			`sluice_requests_total{model="",route="/v1/chat/completions",status="2xx",tier="free"} 0`,
			`sluice_requests_total{model="",route="/v1/models",status="5xx",tier="premium"} 0`,
			`sluice_request_duration_seconds_count{part="gateway",route="/v1/chat/completions"} 0`,
			`sluice_request_duration_seconds_bucket{part="total",route="/v1/models",le="+Inf"} 0`,
		} {
			if !strings.Contains(text, s+"\n") {
				t.Errorf("no %s in\n%s", s, text)
			}
		}
	}
	text := gather(t, reg)
	want(text)
	if n := strings.Count(text, "sluice_rejections_total{"); n != 8 {
		t.Errorf("%d rejection series, want 4 reasons x 2 tiers", n)
	}
	tiers = append(tiers, "gold")
	g.Rejected("requests", "free")
	text = gather(t, reg)
	want(text)
	for _, s := range []string{`sluice_rejections_total{reason="frozen",tier="gold"} 0`, `sluice_rejections_total{reason="requests",tier="free"} 1`,
		`sluice_requests_total{model="",route="/v1/models",status="4xx",tier="gold"} 0`} {
		if !strings.Contains(text, s+"\n") {
			t.Errorf("after a new tier and a rejection: no %s", s)
		}
	}
	var none *Gateway // a nil gateway knows nothing and records nothing
	none.KnowRoutes([]string{"/v1/models"})
	none.KnowTiers(func() []string { return tiers }, nil)
}

// gather returns reg's series in the text format.
func gather(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}
