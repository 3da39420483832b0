package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestWriteTable(t *testing.T) {
	rows := []row{
		{Target: "direct", Concurrency: 50, Rate: 0, Requests: 1000, QPS: 49.5, P50: 1234 * time.Microsecond, P99: 20 * time.Millisecond,
			ErrorRate: 12.5, Client429: 125, Upstream: &upstreamCounts{requests: 1000, status429: 125}},
		{Target: "sluice", Concurrency: 50, Rate: 1000, Requests: 10000, QPS: 999.94, P50: 1500 * time.Microsecond, P99: 2500 * time.Microsecond},
	}
	var b bytes.Buffer
	writeTable(&b, rows)
	want := `| target | concurrency | rate | requests | QPS | p50 ms | p99 ms | errors % | 429s seen by client | upstream requests | upstream 429s |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
| direct | 50 | max | 1000 | 49.5 | 1.23 | 20.00 | 12.50 | 125 | 1000 | 125 |
| sluice | 50 | 1000/s | 10000 | 999.9 | 1.50 | 2.50 | 0.00 | 0 | - | - |
`
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}

	// Without upstream counts the upstream columns are left out.
	b.Reset()
	writeTable(&b, rows[1:])
	if strings.Contains(b.String(), "upstream") || strings.Count(b.String(), "\n") != 3 {
		t.Errorf("table without upstream counts:\n%s", b.String())
	}
}

func TestWriteComparison(t *testing.T) {
	rows := []row{
		{Target: "direct", Concurrency: 50, QPS: 1000, P50: 300 * time.Microsecond, P99: 900 * time.Microsecond},
		{Target: "sluice", Concurrency: 50, QPS: 800, P50: 450 * time.Microsecond, P99: 1500 * time.Microsecond},
		{Target: "proxy", Concurrency: 50, QPS: 1000},
		{Target: "direct", Concurrency: 100, Rate: 1000, QPS: 1000}, // no sluice: no line
		{Target: "sluice", Concurrency: 200, QPS: 5},                // sluice alone: no line
	}
	var b bytes.Buffer
	writeComparison(&b, rows)
	want := `
| concurrency | rate | sluice p50 − direct (ms) | sluice p99 − direct (ms) | sluice QPS ÷ direct | sluice QPS ÷ proxy |
|---:|---:|---:|---:|---:|---:|
| 50 | max | +0.15 | +0.60 | 0.80x | 0.80x |
`
	if b.String() != want {
		t.Errorf("comparison:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	writeComparison(&b, rows[3:])
	if b.Len() != 0 {
		t.Errorf("comparison without pairs: %q", b.String())
	}
}

func TestPlanInterleaves(t *testing.T) {
	targets := []target{{Name: "direct"}, {Name: "sluice"}, {Name: "proxy"}}
	settings := []setting{{Concurrency: 50}, {Concurrency: 100, Rate: 1000}}
	var got []string
	for _, s := range plan(targets, settings, 2) {
		got = append(got, fmt.Sprintf("%d:%d/%d:%s", s.Setting.Concurrency, s.Setting.Rate, s.Round, s.Target.Name))
	}
	want := []string{
		"50:0/1:direct", "50:0/1:sluice", "50:0/1:proxy",
		"50:0/2:direct", "50:0/2:sluice", "50:0/2:proxy",
		"100:1000/1:direct", "100:1000/1:sluice", "100:1000/1:proxy",
		"100:1000/2:direct", "100:1000/2:sluice", "100:1000/2:proxy",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("plan:\n%v\nwant:\n%v", got, want)
	}
}

func TestSampleRow(t *testing.T) {
	var a, b sample
	for i := 1; i <= 100; i++ {
		a.latencies = append(a.latencies, time.Duration(i)*time.Millisecond)
	}
	a.requests, a.ok, a.status429, a.elapsed = 100, 90, 10, time.Second
	b.requests, b.ok, b.elapsed = 100, 100, time.Second
	for i := 101; i <= 200; i++ {
		b.latencies = append(b.latencies, time.Duration(i)*time.Millisecond)
	}
	b.upstream = &upstreamCounts{requests: 100, status429: 3}
	a.merge(b)
	r := a.row("direct", setting{Concurrency: 10, Rate: 100})
	if r.Requests != 200 || r.QPS != 95 || r.ErrorRate != 5 || r.Client429 != 10 ||
		r.P50 != 100*time.Millisecond || r.P99 != 198*time.Millisecond || r.Upstream == nil || *r.Upstream != (upstreamCounts{100, 3}) {
		t.Errorf("row %+v", r)
	}
	if got := percentile([]time.Duration{7}, 990); got != 7 {
		t.Errorf("percentile of one: %s", got)
	}
}
