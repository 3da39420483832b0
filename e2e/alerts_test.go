package e2e

import (
	"context"
	"io"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/testredis"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/upstream/mock"
)

// alertRule is one rule of deploy/prometheus/alerts.yml.
type alertRule struct {
	Alert       string
	Expr        string
	For         string
	Labels      map[string]string
	Annotations map[string]string
}

// loadAlertRules reads deploy/prometheus/alerts.yml strictly.
func loadAlertRules(t *testing.T) []alertRule {
	t.Helper()
	raw, err := os.ReadFile("../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string
			Rules []alertRule
		}
	}
	if err := yaml.UnmarshalWithOptions(raw, &file, yaml.Strict()); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	var rules []alertRule
	for _, g := range file.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

// Every alert fires on series showing its trouble and stays quiet on
// series of a healthy cluster, evaluated by Prometheus's own engine (as
// `promtool test rules` would). Two nodes report in each case, since an
// expression that matches labels wrongly across nodes never fires.
func TestAlertRulesFireOnTroubleOnly(t *testing.T) {
	// Series are sampled every minute for 20 minutes (promqltest's
	// notation: "a+bxN" is a, a+b, ... N more times); expressions are
	// evaluated at the end.
	cases := map[string]struct{ trouble, calm string }{
		"SluiceHigh429Ratio": {
			trouble: `
				sluice_rejections_total{instance="a",reason="requests",tier="free"} 0+5x20
				sluice_requests_total{instance="a",route="/v1/chat/completions",status="2xx",tier="free",model="m"} 0+100x20
				sluice_requests_total{instance="b",route="/v1/chat/completions",status="2xx",tier="free",model="m"} 0+100x20`,
			calm: `
				sluice_rejections_total{instance="a",reason="requests",tier="free"} 0+1x20
				sluice_requests_total{instance="a",route="/v1/chat/completions",status="2xx",tier="free",model="m"} 0+100x20
				sluice_requests_total{instance="b",route="/v1/chat/completions",status="2xx",tier="free",model="m"} 0+100x20`,
		},
		"SluiceLatencyOverTarget": {
			trouble: `
				sluice_request_duration_seconds_bucket{instance="a",route="/v1/chat/completions",part="gateway",le="0.05"} 0+10x20
				sluice_request_duration_seconds_bucket{instance="a",route="/v1/chat/completions",part="gateway",le="0.1"} 0+100x20
				sluice_request_duration_seconds_bucket{instance="a",route="/v1/chat/completions",part="gateway",le="+Inf"} 0+100x20`,
			calm: `
				sluice_request_duration_seconds_bucket{instance="a",route="/v1/chat/completions",part="gateway",le="0.05"} 0+99x20
				sluice_request_duration_seconds_bucket{instance="a",route="/v1/chat/completions",part="gateway",le="0.1"} 0+100x20
				sluice_request_duration_seconds_bucket{instance="a",route="/v1/chat/completions",part="gateway",le="+Inf"} 0+100x20`,
		},
		"SluiceModelWithoutHealthyKey": {
			trouble: `
				sluice_upstream_healthy_keys{instance="a",model="gpt-4o"} 0x20
				sluice_upstream_healthy_keys{instance="b",model="gpt-4o"} 0x20
				sluice_upstream_healthy_keys{instance="a",model="other"} 2x20`,
			calm: `
				sluice_upstream_healthy_keys{instance="a",model="gpt-4o"} 0x20
				sluice_upstream_healthy_keys{instance="b",model="gpt-4o"} 1x20`,
		},
		"SluiceLimiterDegraded": {
			trouble: `
				sluice_limiter_degraded{instance="a"} 0x20
				sluice_limiter_degraded{instance="b"} 1x20`,
			calm: `
				sluice_limiter_degraded{instance="a"} 0x20
				sluice_limiter_degraded{instance="b"} 0x20`,
		},
		"SluiceRecorderBacklogGrowing": {
			trouble: `
				sluice_recorder_queue_depth{instance="a"} 600+10x20
				sluice_recorder_queue_capacity{instance="a"} 1000x20
				sluice_recorder_queue_depth{instance="b"} 0x20
				sluice_recorder_queue_capacity{instance="b"} 1000x20`,
			// Deep but draining on a, growing but shallow on b.
			calm: `
				sluice_recorder_queue_depth{instance="a"} 900-10x20
				sluice_recorder_queue_capacity{instance="a"} 1000x20
				sluice_recorder_queue_depth{instance="b"} 0+10x20
				sluice_recorder_queue_capacity{instance="b"} 1000x20`,
		},
		"SluiceUsageEventsLost": {
			trouble: `
				sluice_recorder_lost_events_total{instance="a"} 0x15 3x5
				sluice_recorder_lost_events_total{instance="b"} 0x20`,
			calm: `
				sluice_recorder_lost_events_total{instance="a"} 0x20
				sluice_recorder_lost_events_total{instance="b"} 0x20`,
		},
		"SluiceJobsWaitingTooLong": {
			trouble: `
				sluice_jobs_oldest_age_seconds{instance="a"} 3000+60x20
				sluice_jobs_oldest_age_seconds{instance="b"} 3000+60x20`,
			calm: `
				sluice_jobs_oldest_age_seconds{instance="a"} 0+60x20
				sluice_jobs_oldest_age_seconds{instance="b"} 5x20`,
		},
	}
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 100000, Timeout: 10 * time.Second, LookbackDelta: 5 * time.Minute})
	at := time.Unix(0, 0).UTC().Add(20 * time.Minute)
	fires := func(t *testing.T, series, expr string) bool {
		t.Helper()
		q, err := engine.NewInstantQuery(context.Background(), loadSeries(t, series), nil, expr, at)
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		res := q.Exec(context.Background())
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		v, err := res.Vector()
		if err != nil {
			t.Fatal(err)
		}
		return len(v) > 0
	}
	rules := loadAlertRules(t)
	for _, r := range rules {
		c, ok := cases[r.Alert]
		if !ok {
			t.Errorf("%s has no trouble and calm series here", r.Alert)
			continue
		}
		delete(cases, r.Alert)
		t.Run(r.Alert, func(t *testing.T) {
			if !fires(t, c.trouble, r.Expr) {
				t.Errorf("does not fire on trouble:%s", c.trouble)
			}
			if fires(t, c.calm, r.Expr) {
				t.Errorf("fires on a calm cluster:%s", c.calm)
			}
		})
	}
	for name := range cases {
		t.Errorf("%s is no longer in alerts.yml", name)
	}
}

// loadSeries reads one series a line in promtool's notation
// (`name{labels} 0+5x20`: a sample a minute from time 0) into a Queryable.
func loadSeries(t *testing.T, text string) storage.Queryable {
	t.Helper()
	var all []storage.Series
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		lset, vals, err := parser.ParseSeriesDesc(strings.TrimSpace(line))
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		var samples []chunks.Sample
		for i, v := range vals {
			if !v.Omitted {
				samples = append(samples, sample{t: int64(i) * time.Minute.Milliseconds(), f: v.Value})
			}
		}
		all = append(all, storage.NewListSeries(lset, samples))
	}
	return queryable(all)
}

// queryable serves series to the engine, sorted as storage must be.
func queryable(all []storage.Series) storage.Queryable {
	slices.SortFunc(all, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
	return storage.QueryableFunc(func(int64, int64) (storage.Querier, error) {
		return &storage.MockQuerier{SelectMockFunction: func(_ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
			var picked seriesList
			for _, s := range all {
				if !slices.ContainsFunc(ms, func(m *labels.Matcher) bool { return !m.Matches(s.Labels().Get(m.Name)) }) {
					picked.series = append(picked.series, s)
				}
			}
			return &picked
		}}, nil
	})
}

// sample is one float sample.
type sample struct {
	t int64
	f float64
}

func (s sample) T() int64                      { return s.t }
func (s sample) F() float64                    { return s.f }
func (s sample) H() *histogram.Histogram       { return nil }
func (s sample) FH() *histogram.FloatHistogram { return nil }
func (s sample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }

// seriesList is a SeriesSet over a slice.
type seriesList struct {
	series []storage.Series
	i      int
}

func (l *seriesList) Next() bool                        { l.i++; return l.i <= len(l.series) }
func (l *seriesList) At() storage.Series                { return l.series[l.i-1] }
func (l *seriesList) Err() error                        { return nil }
func (l *seriesList) Warnings() annotations.Annotations { return nil }

// TestAlertRulesEvaluateOnAFreshNode scrapes a node that has just started
// (its database has tiers, one of them an operator's, and a provider key)
// and has served no API request, and evaluates every rule over what it
// reports, held for 20 minutes: each series a rule selects exists, and
// each rule's expression short of its threshold returns a sample (0, or
// NaN for a ratio of zeros), not an empty vector; no rule fires. A tier
// created on the running node has its zeros at the next scrape.
func TestAlertRulesEvaluateOnAFreshNode(t *testing.T) {
	variants := map[string]func(t *testing.T) map[string]string{
		"sqlite": func(t *testing.T) map[string]string { return map[string]string{"SLUICE_DATA_DIR": t.TempDir()} },
		"postgres": func(t *testing.T) map[string]string {
			env := map[string]string{"DATABASE_URL": testdb.PostgresURL(t), "SLUICE_AUTO_MIGRATE": "true", "SLUICE_MASTER_KEY": testMasterKey,
				"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_REDIS_PREFIX": testredis.Prefix()}
			if url := os.Getenv("TEST_REDIS_URL"); url != "" {
				env["REDIS_URL"] = url
			}
			return env
		},
	}
	provider := httptest.NewServer(mock.New(mock.Config{Keys: map[string]float64{"sk-fresh-provider": 0}}))
	t.Cleanup(provider.Close)
	rules := loadAlertRules(t)
	for name, envFor := range variants {
		t.Run(name, func(t *testing.T) {
			env := envFor(t)
			env["SLUICE_BCRYPT_COST"], env["SLUICE_ADMIN_PASSWORD"] = "4", "admin-password"
			// The operator's setup, on a node that is then stopped.
			base, _, stop := start(t, env)
			c := client{t, base}
			admin := adminToken(t, c)
			if r := c.call("POST", "/api/admin/upstreams", admin, `{"name":"openai-1","base_url":"`+provider.URL+`/v1","api_key":"sk-fresh-provider","models":["gpt-4o-mini"]}`, nil); r.StatusCode != 201 {
				t.Fatalf("add provider: %d", r.StatusCode)
			}
			if r := c.call("POST", "/api/admin/tiers", admin, `{"name":"enterprise","capacity":500,"refill_per_sec":10}`, nil); r.StatusCode != 201 {
				t.Fatalf("create tier: %d", r.StatusCode)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}

			base, _, stop = start(t, env)
			defer stop()
			_, text := scrape(t, base, "")
			store := queryable(heldSeries(t, text))
			for _, tier := range []string{"free", "premium", "enterprise"} {
				for _, reason := range metering.RejectionReasons {
					if want := `sluice_rejections_total{reason="` + reason + `",tier="` + tier + `"} 0` + "\n"; !strings.Contains(text, want) {
						t.Errorf("a fresh node does not report %s", want)
					}
				}
			}
			for _, r := range rules {
				expr, err := parser.ParseExpr(r.Expr)
				if err != nil {
					t.Fatalf("%s: %v", r.Alert, err)
				}
				parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
					if vs, ok := node.(*parser.VectorSelector); ok && len(instant(t, store, vs.String())) == 0 {
						t.Errorf("%s: %s selects no series on a fresh node", r.Alert, vs)
					}
					return nil
				})
				for _, part := range shortOfThreshold(expr) {
					if len(instant(t, store, part.String())) == 0 {
						t.Errorf("%s: %s is an empty vector on a fresh node", r.Alert, part)
					}
				}
				if v := instant(t, store, r.Expr); len(v) > 0 {
					t.Errorf("%s fires on a fresh node: %v", r.Alert, v)
				}
			}

			// A tier created now has its zeros at the next scrape.
			admin = adminToken(t, client{t, base})
			if r := (client{t, base}).call("POST", "/api/admin/tiers", admin, `{"name":"gold","capacity":50,"refill_per_sec":1}`, nil); r.StatusCode != 201 {
				t.Fatalf("create tier: %d", r.StatusCode)
			}
			if _, text := scrape(t, base, ""); !strings.Contains(text, `sluice_rejections_total{reason="budget",tier="gold"} 0`+"\n") ||
				!strings.Contains(text, `sluice_requests_total{model="",route="/v1/chat/completions",status="2xx",tier="gold"} 0`+"\n") {
				t.Errorf("a new tier's series are not reported at 0:\n%s", grepLines(text, "gold"))
			}
		})
	}
}

// adminToken signs the bootstrap admin in.
func adminToken(t *testing.T, c client) string {
	t.Helper()
	var admin struct{ Token string }
	if r := c.call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &admin); r.StatusCode != 200 {
		t.Fatalf("admin login: %d", r.StatusCode)
	}
	return admin.Token
}

// heldSeries turns one scrape's sluice_ series into series that hold their
// value, sampled every minute for 20 minutes: what Prometheus would store
// of a node that does nothing for that long.
func heldSeries(t *testing.T, text string) []storage.Series {
	t.Helper()
	p := textparse.NewPromParser([]byte(text), labels.NewSymbolTable())
	var all []storage.Series
	for {
		e, err := p.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("/metrics: %v", err)
		}
		if e != textparse.EntrySeries {
			continue
		}
		var l labels.Labels
		p.Metric(&l)
		_, _, v := p.Series()
		if !strings.HasPrefix(l.Get(labels.MetricName), "sluice_") {
			continue
		}
		samples := make([]chunks.Sample, 21)
		for i := range samples {
			samples[i] = sample{t: int64(i) * time.Minute.Milliseconds(), f: v}
		}
		all = append(all, storage.NewListSeries(l, samples))
	}
	return all
}

// instant evaluates expr at the end of the held series.
func instant(t *testing.T, store storage.Queryable, expr string) promql.Vector {
	t.Helper()
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1000000, Timeout: 10 * time.Second, LookbackDelta: 5 * time.Minute})
	q, err := engine.NewInstantQuery(context.Background(), store, nil, expr, time.Unix(0, 0).UTC().Add(20*time.Minute))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	defer q.Close()
	res := q.Exec(context.Background())
	if res.Err != nil {
		t.Fatalf("%s: %v", expr, res.Err)
	}
	v, err := res.Vector()
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// shortOfThreshold returns the expressions an alert compares with its
// thresholds: for "a > 0.5 and b > 0", a and b. Each must evaluate to a
// sample whatever the threshold, or the alert could never fire.
func shortOfThreshold(expr parser.Expr) []parser.Expr {
	switch e := expr.(type) {
	case *parser.ParenExpr:
		return shortOfThreshold(e.Expr)
	case *parser.BinaryExpr:
		switch {
		case e.Op == parser.LAND || e.Op == parser.LOR || e.Op == parser.LUNLESS:
			return append(shortOfThreshold(e.LHS), shortOfThreshold(e.RHS)...)
		case e.Op.IsComparisonOperator() && !e.ReturnBool:
			if _, ok := e.RHS.(*parser.NumberLiteral); ok {
				return shortOfThreshold(e.LHS)
			}
			if _, ok := e.LHS.(*parser.NumberLiteral); ok {
				return shortOfThreshold(e.RHS)
			}
		}
	}
	return []parser.Expr{expr}
}

// grepLines returns text's lines that contain s.
func grepLines(text, s string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
