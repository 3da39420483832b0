package main

import (
	"fmt"
	"io"
	"strconv"
	"time"
)

// row is one line of the results table: one target under one setting, all
// rounds merged. Latency percentiles are over every request, answered 2xx or
// not.
type row struct {
	Target      string
	Concurrency int
	Rate        int // per second; 0 = saturation
	Burst       int // requests arriving at once; 0 or 1 = evenly
	Requests    int
	QPS         float64 // answered 2xx per second
	P50, P99    time.Duration
	ErrorRate   float64 // percent of requests not answered 2xx (transport errors included)
	Client429   int
	Upstream    *upstreamCounts // nil when not measured
}

// writeTable prints rows as a Markdown table; the upstream columns appear
// when any row has upstream counts.
func writeTable(w io.Writer, rows []row) {
	withUpstream := false
	for _, r := range rows {
		withUpstream = withUpstream || r.Upstream != nil
	}
	header := "| target | concurrency | rate | requests | QPS | p50 ms | p99 ms | errors % | 429s seen by client |"
	rule := "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
	if withUpstream {
		header += " upstream requests | upstream 429s |"
		rule += "---:|---:|"
	}
	fmt.Fprintln(w, header)
	fmt.Fprintln(w, rule)
	for _, r := range rows {
		line := fmt.Sprintf("| %s | %d | %s | %d | %.1f | %.2f | %.2f | %.2f | %d |",
			r.Target, r.Concurrency, rateString(r.Rate, r.Burst), r.Requests, r.QPS, ms(r.P50), ms(r.P99), r.ErrorRate, r.Client429)
		if withUpstream {
			if r.Upstream != nil {
				line += fmt.Sprintf(" %d | %d |", r.Upstream.requests, r.Upstream.status429)
			} else {
				line += " - | - |"
			}
		}
		fmt.Fprintln(w, line)
	}
}

// writeComparison prints, per setting where Sluice was loaded, what it adds
// over the direct target and how its throughput compares with direct and with
// the bare proxy: the overhead figures the benchmarks quote.
func writeComparison(w io.Writer, rows []row) {
	type group struct{ direct, sluice, proxy *row }
	var order []setting
	groups := make(map[setting]*group)
	for i := range rows {
		r := &rows[i]
		s := setting{r.Concurrency, r.Rate, r.Burst}
		g := groups[s]
		if g == nil {
			g = &group{}
			groups[s] = g
			order = append(order, s)
		}
		switch r.Target {
		case targetDirect:
			g.direct = r
		case targetSluice:
			g.sluice = r
		case targetProxy:
			g.proxy = r
		}
	}
	var lines []string
	for _, s := range order {
		g := groups[s]
		if g.sluice == nil || (g.direct == nil && g.proxy == nil) {
			continue
		}
		dp50, dp99, vsDirect, vsProxy := "-", "-", "-", "-"
		if g.direct != nil {
			dp50 = fmt.Sprintf("%+.2f", ms(g.sluice.P50-g.direct.P50))
			dp99 = fmt.Sprintf("%+.2f", ms(g.sluice.P99-g.direct.P99))
			vsDirect = ratio(g.sluice.QPS, g.direct.QPS)
		}
		if g.proxy != nil {
			vsProxy = ratio(g.sluice.QPS, g.proxy.QPS)
		}
		lines = append(lines, fmt.Sprintf("| %d | %s | %s | %s | %s | %s |", s.Concurrency, rateString(s.Rate, s.Burst), dp50, dp99, vsDirect, vsProxy))
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| concurrency | rate | sluice p50 − direct (ms) | sluice p99 − direct (ms) | sluice QPS ÷ direct | sluice QPS ÷ proxy |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// rateString shows a rate per second, "max" for saturation, and how many
// requests arrive at once when they come in bursts.
func rateString(rate, burst int) string {
	switch {
	case rate == 0:
		return "max"
	case burst > 1:
		return strconv.Itoa(rate) + "/s, " + strconv.Itoa(burst) + " at once"
	}
	return strconv.Itoa(rate) + "/s"
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
