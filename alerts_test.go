package main

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
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
	raw, err := os.ReadFile("deploy/prometheus/alerts.yml")
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
