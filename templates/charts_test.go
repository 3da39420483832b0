package templates

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/a-h/templ"
)

func TestNiceTicks(t *testing.T) {
	tests := []struct {
		top  float64
		kind ValueKind
		want []float64
	}{
		{0, ValueCount, []float64{0, 1}},
		{-5, ValueCount, []float64{0, 1}},
		{math.NaN(), ValueCount, []float64{0, 1}},
		{1, ValueCount, []float64{0, 1}},
		{3, ValueCount, []float64{0, 1, 2, 3}},
		{7, ValueCount, []float64{0, 2, 4, 6, 8}},
		{10, ValueCount, []float64{0, 5, 10}},
		{87, ValueCount, []float64{0, 50, 100}},
		{1234, ValueCount, []float64{0, 500, 1000, 1500}},
		{40, ValueCount, []float64{0, 10, 20, 30, 40}},
		{0.3, ValueMoney, []float64{0, 0.1, 0.2, 0.3}},
		{0.03, ValueMoney, []float64{0, 0.01, 0.02, 0.03}},
		{0.3, ValueCount, []float64{0, 1}}, // counts never step by less than one
		{4.2e9, ValueCount, []float64{0, 2e9, 4e9, 6e9}},
	}
	for _, tt := range tests {
		got := niceTicks(tt.top, tt.kind)
		if len(got) != len(tt.want) {
			t.Errorf("niceTicks(%v) = %v, want %v", tt.top, got, tt.want)
			continue
		}
		for i := range got {
			if math.Abs(got[i]-tt.want[i]) > 1e-9*math.Max(1, tt.want[i]) {
				t.Errorf("niceTicks(%v) = %v, want %v", tt.top, got, tt.want)
				break
			}
		}
	}
	for _, top := range []float64{math.MaxFloat64, math.Inf(1), 1e300} {
		ticks := niceTicks(top, ValueCount)
		last := ticks[len(ticks)-1]
		if math.IsInf(last, 0) || last < math.Min(top, math.MaxFloat64) {
			t.Errorf("niceTicks(%v) ends at %v, want a finite top at least as high", top, last)
		}
	}
}

func TestFormatTick(t *testing.T) {
	tests := []struct {
		v, step float64
		kind    ValueKind
		want    string
	}{
		{0, 1, ValueCount, "0"},
		{950, 50, ValueCount, "950"},
		{1000, 500, ValueCount, "1k"},
		{1500, 500, ValueCount, "1.5k"},
		{1200, 200, ValueCount, "1.2k"},
		{20000, 5000, ValueCount, "20k"},
		{3.4e6, 2e5, ValueCount, "3.4M"},
		{2e9, 1e9, ValueCount, "2B"},
		{1.5e12, 5e11, ValueCount, "1.5T"},
		{1.5e20, 5e19, ValueCount, "1.5e+20"},
		{0, 0.05, ValueMoney, "$0.00"},
		{0.1, 0.05, ValueMoney, "$0.10"},
		{0.12, 0.02, ValueMoney, "$0.12"},
		{0.003, 0.001, ValueMoney, "$0.003"},
		{5, 5, ValueMoney, "$5"},
		{1200, 200, ValueMoney, "$1.2k"},
	}
	for _, tt := range tests {
		if got := formatTick(tt.v, tt.step, tt.kind); got != tt.want {
			t.Errorf("formatTick(%v, %v, %v) = %q, want %q", tt.v, tt.step, tt.kind, got, tt.want)
		}
	}
}

func TestFormatExact(t *testing.T) {
	tests := []struct {
		v    float64
		kind ValueKind
		want string
	}{
		{0, ValueCount, "0"},
		{1234567, ValueCount, "1,234,567"},
		{-1234, ValueCount, "-1,234"},
		{1e15, ValueCount, "1,000,000,000,000,000"},
		{0.126, ValueMoney, "$0.13"},
		{1234.5, ValueMoney, "$1,234.50"},
		{-3, ValueMoney, "-$3.00"},
		{-0.001, ValueMoney, "$0.00"},
	}
	for _, tt := range tests {
		if got := formatExact(tt.v, tt.kind); got != tt.want {
			t.Errorf("formatExact(%v, %v) = %q, want %q", tt.v, tt.kind, got, tt.want)
		}
	}
}

func TestLabelSteps(t *testing.T) {
	tests := []struct {
		name         string
		n, runes     int
		wide, narrow int
	}{
		{"one bucket", 1, 6, 1, 1},
		{"a week of days", 7, 6, 1, 2},
		{"30 days", 30, 6, 3, 7},
		{"48 hours", 48, 5, 6, 12},
		{"a year of days", 365, 6, 36, 79},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wide, narrow := labelSteps(tt.n, tt.runes)
			if wide != tt.wide || narrow != tt.narrow {
				t.Errorf("labelSteps(%d, %d) = %d, %d, want %d, %d", tt.n, tt.runes, wide, narrow, tt.wide, tt.narrow)
			}
			if !showLabel(tt.n-1, tt.n, wide) || !showLabel(tt.n-1, tt.n, narrow) {
				t.Error("newest bucket is not labelled")
			}
			// Labels shown are far enough apart on the plot widths assumed.
			need := float64(tt.runes*labelCharPx + labelGapPx)
			for _, w := range []struct{ plot, step int }{{widePlotPx, wide}, {narrowPlotPx, narrow}} {
				if gap := float64(w.plot*w.step) / float64(tt.n); tt.n > 1 && gap < need {
					t.Errorf("labels %.0f px apart on a %d px plot, need %.0f", gap, w.plot, need)
				}
			}
		})
	}
}

func TestChartID(t *testing.T) {
	tests := []struct{ id, title, want string }{
		{"requests", "", "requests"},
		{"", "Requests per day", "c-requests-per-day"},
		{"a b\"c", "", "a-b-c"},
		{"", "", "c"},
		{"!!", "", "c"},
	}
	for _, tt := range tests {
		if got := chartID(tt.id, "c", tt.title); got != tt.want {
			t.Errorf("chartID(%q, %q) = %q, want %q", tt.id, tt.title, got, tt.want)
		}
	}
}

// requestsChart is three days of requests by two models, one day quiet
// for one of them.
func requestsChart() Chart {
	return Chart{
		ID: "requests", Title: "Requests per day", Unit: "requests", BucketName: "Day",
		Buckets: []string{"Nov 1", "Nov 2", "Nov 3"},
		Series: []Series{
			{Name: "gpt-4o", Values: []float64{10, 0, 1200}},
			{Name: "sluice-local", Values: []float64{30, 5, 34}},
		},
	}
}

func TestBarChart(t *testing.T) {
	doc, html := render(t, BarChart(requestsChart()))
	assertCSPSafe(t, html)

	fig := byTestID(doc, "chart")
	if fig.Length() != 1 || attr(fig, "id") != "requests" || attr(fig, "data-chart") != "bar" {
		t.Fatalf("figure = %s", outer(fig))
	}
	if got := fig.Find("figcaption").Text(); got != "Requests per day" {
		t.Errorf("caption = %q", got)
	}
	svg := fig.Find("svg")
	if attr(svg, "role") != "img" || attr(svg, "preserveAspectRatio") != "none" || attr(svg, "viewBox") != "0 0 1000 200" {
		t.Errorf("svg attributes = %s", attrsOf(svg))
	}
	for _, id := range strings.Fields(attr(svg, "aria-labelledby")) {
		if doc.Find("#"+id).Length() != 1 {
			t.Errorf("aria-labelledby names #%s, which is not there", id)
		}
	}
	if got := svg.Find("#requests-title").Text(); got != "Requests per day" {
		t.Errorf("svg title = %q", got)
	}
	desc := svg.Find("#requests-desc").Text()
	for _, want := range []string{"Stacked bar chart of 3 days", "Nov 1 to Nov 3", "gpt-4o, sluice-local", "Total 1,279 requests", "Highest: Nov 3, 1,234 requests"} {
		if !strings.Contains(desc, want) {
			t.Errorf("desc = %q, want it to contain %q", desc, want)
		}
	}

	// One rect per non-zero value per series; zero draws nothing.
	bars := svg.Find("rect.chart-bar")
	if bars.Length() != 5 {
		t.Errorf("bars = %d, want 5", bars.Length())
	}
	if n := svg.Find("rect.chart-bar.chart-s1").Length(); n != 2 {
		t.Errorf("gpt-4o bars = %d, want 2", n)
	}
	if n := svg.Find("rect.chart-bar.chart-s2").Length(); n != 3 {
		t.Errorf("sluice-local bars = %d, want 3", n)
	}
	if got := bars.First().Find("title").Text(); got != "Nov 1 · gpt-4o: 10 requests" {
		t.Errorf("first bar's tooltip = %q", got)
	}
	hits := svg.Find("rect.chart-hit")
	if hits.Length() != 3 || hits.Eq(2).Find("title").Text() != "Nov 3: 1,234 requests (gpt-4o 1,200, sluice-local 34)" {
		t.Errorf("bucket tooltips: %d, last %q", hits.Length(), hits.Eq(2).Find("title").Text())
	}

	// Axis: nice ticks as HTML, top to bottom, and a gridline for each.
	var ticks []string
	fig.Find(".chart-y span").Each(func(_ int, s *goquery.Selection) { ticks = append(ticks, s.Text()) })
	if got := strings.Join(ticks, " "); got != "1.5k 1k 500 0" {
		t.Errorf("y labels = %q", got)
	}
	if n := svg.Find("line.chart-grid").Length(); n != len(ticks) {
		t.Errorf("gridlines = %d, want %d", n, len(ticks))
	}
	if n := fig.Find(".chart-x .chart-x-cell").Length(); n != 3 {
		t.Errorf("x cells = %d, want one per bucket", n)
	}

	legend := byTestID(doc, "chart-legend").Find("li")
	if legend.Length() != 2 || legend.Eq(1).Text() != "sluice-local" || legend.Eq(1).Find(".chart-swatch.chart-s2").Length() != 1 {
		t.Errorf("legend = %s", outer(byTestID(doc, "chart-legend")))
	}

	wantTable := [][]string{
		{"Day", "gpt-4o", "sluice-local", "Total"},
		{"Nov 1", "10", "30", "40"},
		{"Nov 2", "0", "5", "5"},
		{"Nov 3", "1,200", "34", "1,234"},
		{"Total", "1,210", "69", "1,279"},
	}
	assertTable(t, doc, wantTable)
}

func TestBarGeometry(t *testing.T) {
	c := Chart{Buckets: []string{"a", "b"}, Series: []Series{
		{Name: "x", Values: []float64{10, 0.001}},
		{Name: "y", Values: []float64{30}},
	}}
	bars := layoutChart(c, "bar").Bars
	// Scale 0..40: 10 is 50 units tall from the baseline at 200, 30
	// stacks 150 on top; a tiny value is still 1.5 units tall.
	want := []barRect{{Y: "150", H: "50"}, {Y: "0", H: "150"}, {Y: "198.5", H: "1.5"}}
	if len(bars) != 3 {
		t.Fatalf("bars = %+v", bars)
	}
	for i, w := range want {
		b := bars[i]
		if b.Y != w.Y || b.H != w.H {
			t.Errorf("bar %d at y=%s h=%s, want y=%s h=%s", i, b.Y, b.H, w.Y, w.H)
		}
	}
	// Bars are at most 64 units wide and centred in their bucket.
	if bars[0].W != "64" || bars[0].X != "218" || bars[2].X != "718" {
		t.Errorf("first bar x=%s w=%s, third x=%s", bars[0].X, bars[0].W, bars[2].X)
	}
}

func TestLineChart(t *testing.T) {
	doc, html := render(t, LineChart(requestsChart()))
	assertCSPSafe(t, html)
	svg := byTestID(doc, "chart").Find("svg")
	if attr(byTestID(doc, "chart"), "data-chart") != "line" || attr(svg, "role") != "img" {
		t.Fatalf("chart = %s", outer(byTestID(doc, "chart")))
	}
	lines := svg.Find("polyline.chart-line")
	if lines.Length() != 2 {
		t.Fatalf("lines = %d, want 2", lines.Length())
	}
	if got := attr(lines.First(), "points"); got != "166.67,198.67 500,200 833.33,40" {
		t.Errorf("gpt-4o points = %q", got)
	}
	if n := svg.Find("path.chart-marker").Length(); n != 6 {
		t.Errorf("markers = %d, want one per point", n)
	}
	if n := svg.Find("rect.chart-bar").Length(); n != 0 {
		t.Errorf("a line chart drew %d bars", n)
	}
	if !strings.HasPrefix(svg.Find("desc").Text(), "Line chart of 3 days") {
		t.Errorf("desc = %q", svg.Find("desc").Text())
	}
	assertTable(t, doc, [][]string{
		{"Day", "gpt-4o", "sluice-local", "Total"},
		{"Nov 1", "10", "30", "40"},
		{"Nov 2", "0", "5", "5"},
		{"Nov 3", "1,200", "34", "1,234"},
		{"Total", "1,210", "69", "1,279"},
	})
}

// TestMoneyChart: money is drawn from float64 but every text is the
// caller's exact label.
func TestMoneyChart(t *testing.T) {
	c := Chart{
		ID: "cost", Title: "Cost per day", Kind: ValueMoney, BucketName: "Day",
		Buckets: []string{"Nov 1", "Nov 2"},
		Series: []Series{
			{Name: "gpt-4o", Values: []float64{0.1234, 0.05}, Labels: []string{"$0.1234", "$0.0500"}, Total: "$0.1734"},
			{Name: "Other", Other: true, Values: []float64{0.0001, 0}, Labels: []string{"$0.0001", "$0.0000"}, Total: "$0.0001"},
		},
		Totals: []string{"$0.1235", "$0.0500"},
		Total:  "$0.1735",
	}
	doc, html := render(t, BarChart(c))
	assertCSPSafe(t, html)
	assertTable(t, doc, [][]string{
		{"Day", "gpt-4o", "Other", "Total"},
		{"Nov 1", "$0.1234", "$0.0001", "$0.1235"},
		{"Nov 2", "$0.0500", "$0.0000", "$0.0500"},
		{"Total", "$0.1734", "$0.0001", "$0.1735"},
	})
	if n := doc.Find("rect.chart-bar.chart-other").Length(); n != 1 {
		t.Errorf("grey bars = %d, want 1 for Other", n)
	}
	if got := doc.Find(".chart-y span").First().Text(); got != "$0.15" {
		t.Errorf("top tick = %q, want $0.15", got)
	}
	if got := doc.Find("rect.chart-bar title").First().Text(); got != "Nov 1 · gpt-4o: $0.1234" {
		t.Errorf("tooltip = %q", got)
	}
	if desc := doc.Find("desc").Text(); !strings.Contains(desc, "Total $0.1735.") {
		t.Errorf("desc = %q", desc)
	}
}

func TestChartEmpty(t *testing.T) {
	tests := []struct {
		name string
		c    Chart
		want string
	}{
		{"no buckets", Chart{Title: "Requests"}, "No usage in this period"},
		{"no series", Chart{Title: "Requests", Buckets: []string{"Nov 1"}}, "No usage in this period"},
		{"all zero", Chart{Title: "Requests", Buckets: []string{"Nov 1", "Nov 2"}, Series: []Series{{Name: "a", Values: []float64{0, 0}}}}, "No usage in this period"},
		{"only NaN", Chart{Title: "Requests", Buckets: []string{"Nov 1"}, Series: []Series{{Name: "a", Values: []float64{math.NaN()}}}}, "No usage in this period"},
		{"own message", Chart{Title: "Rejections", Empty: "No rejections in this period"}, "No rejections in this period"},
	}
	for _, tt := range tests {
		for name, c := range map[string]templ.Component{"bar": BarChart(tt.c), "line": LineChart(tt.c)} {
			t.Run(tt.name+"/"+name, func(t *testing.T) {
				doc, html := render(t, c)
				assertCSPSafe(t, html)
				if got := strings.TrimSpace(byTestID(doc, "chart-empty").Text()); got != tt.want {
					t.Errorf("empty state = %q, want %q", got, tt.want)
				}
				if got := byTestID(doc, "chart").Find("figcaption").Text(); got != tt.c.Title {
					t.Errorf("caption = %q, want the title kept", got)
				}
				if n := doc.Find("svg, table, rect").Length(); n != 0 {
					t.Errorf("empty chart still draws %d svg/table/rect elements", n)
				}
			})
		}
	}
}

func TestChartEdgeCases(t *testing.T) {
	t.Run("one bucket", func(t *testing.T) {
		c := Chart{Title: "Today", Unit: "requests", Buckets: []string{"Nov 3"}, Series: []Series{{Name: "all", Values: []float64{7}}}}
		doc, html := render(t, BarChart(c))
		assertCSPSafe(t, html)
		if n := doc.Find("rect.chart-bar").Length(); n != 1 {
			t.Errorf("bars = %d, want 1", n)
		}
		if byTestID(doc, "chart-legend").Length() != 0 {
			t.Error("a single series has a legend")
		}
		// One series: no total column, but a total row.
		assertTable(t, doc, [][]string{{"Period", "all"}, {"Nov 3", "7"}, {"Total", "7"}})
		if desc := doc.Find("desc").Text(); desc != "Bar chart of 1 period, Nov 3. Total 7 requests." {
			t.Errorf("desc = %q", desc)
		}
		doc, _ = render(t, LineChart(c))
		if n := doc.Find("path.chart-marker").Length(); n != 1 {
			t.Errorf("a one-point line has %d markers, want 1 so it shows", n)
		}
	})

	t.Run("48 buckets", func(t *testing.T) {
		c := Chart{Title: "Requests per hour", BucketName: "Hour"}
		var values []float64
		for h := range 48 {
			c.Buckets = append(c.Buckets, fmt.Sprintf("%02d:00", h%24))
			values = append(values, float64(h*h))
		}
		c.Series = []Series{{Name: "all", Values: values}}
		doc, html := render(t, BarChart(c))
		assertCSPSafe(t, html)
		if n := doc.Find("rect.chart-bar").Length(); n != 47 { // hour 0 is zero
			t.Errorf("bars = %d, want 47", n)
		}
		cells := doc.Find(".chart-x-cell")
		if cells.Length() != 48 {
			t.Fatalf("x cells = %d, want 48", cells.Length())
		}
		// Every 6 hours on wide charts, every 12 on narrow ones, counted
		// back from the newest.
		var wide, narrow []int
		cells.Each(func(i int, s *goquery.Selection) {
			l := s.Find("span")
			if l.Length() == 0 {
				return
			}
			if !l.HasClass("chart-x-narrow") {
				wide = append(wide, i)
			}
			if !l.HasClass("chart-x-wide") {
				narrow = append(narrow, i)
			}
		})
		if fmt.Sprint(wide) != "[5 11 17 23 29 35 41 47]" || fmt.Sprint(narrow) != "[11 23 35 47]" {
			t.Errorf("labels on wide charts at %v, on narrow ones at %v", wide, narrow)
		}
		if n := doc.Find("path.chart-marker").Length(); n != 0 {
			t.Errorf("48 points have %d markers, want none", n)
		}
		if n := doc.Find("tbody tr").Length(); n != 48 {
			t.Errorf("table rows = %d, want 48", n)
		}
	})

	t.Run("huge values", func(t *testing.T) {
		c := Chart{Title: "Tokens", Buckets: []string{"a", "b", "c"}, Series: []Series{
			{Name: "big", Values: []float64{4.2e12, math.MaxFloat64, 1}},
			{Name: "bigger", Values: []float64{math.MaxFloat64, math.MaxFloat64, math.Inf(1)}},
		}}
		for _, comp := range []templ.Component{BarChart(c), LineChart(c)} {
			doc, html := render(t, comp)
			assertCSPSafe(t, html)
			if regexp.MustCompile(`(?i)nan|inf`).MatchString(attrsOf(doc.Find("svg *"))) {
				t.Errorf("geometry has NaN or Inf: %s", attrsOf(doc.Find("svg *")))
			}
		}
		doc, _ := render(t, BarChart(Chart{Title: "Tokens", Buckets: []string{"Nov"}, Series: []Series{{Name: "t", Values: []float64{4.2e12}}}}))
		if got := doc.Find(".chart-y span").First().Text(); got != "6T" {
			t.Errorf("top tick = %q, want 6T", got)
		}
		assertTable(t, doc, [][]string{{"Period", "t"}, {"Nov", "4,200,000,000,000"}, {"Total", "4,200,000,000,000"}})
	})

	// Negative values are clamped to zero for drawing and shown as they are
	// in the table: a refund or a bug upstream stays visible.
	t.Run("negative values", func(t *testing.T) {
		c := Chart{Title: "Requests", Buckets: []string{"a", "b"}, Series: []Series{
			{Name: "x", Values: []float64{-5, 10}},
			{Name: "y", Values: []float64{3}}, // short: b counts as zero
		}}
		doc, html := render(t, BarChart(c))
		assertCSPSafe(t, html)
		if n := doc.Find("rect.chart-bar").Length(); n != 2 {
			t.Errorf("bars = %d, want 2 (no bar for -5)", n)
		}
		if n := doc.Find("rect.chart-bar.chart-s1").Length(); n != 1 {
			t.Errorf("x bars = %d, want 1", n)
		}
		assertTable(t, doc, [][]string{
			{"Period", "x", "y", "Total"},
			{"a", "-5", "3", "-2"},
			{"b", "10", "—", "10"},
			{"Total", "5", "3", "8"},
		})
		v := layoutChart(c, "line")
		if !strings.HasPrefix(v.Lines[0].Points, "250,200 ") {
			t.Errorf("negative point at %q, want it on the baseline", v.Lines[0].Points)
		}
	})

	t.Run("many series", func(t *testing.T) {
		c := Chart{Title: "By model", Buckets: []string{"a"}}
		for i := range 10 {
			c.Series = append(c.Series, Series{Name: fmt.Sprint("m", i), Values: []float64{1}})
		}
		doc, _ := render(t, BarChart(c))
		if n := doc.Find("rect.chart-bar.chart-other").Length(); n != 2 {
			t.Errorf("grey bars = %d, want 2 beyond the palette of 8", n)
		}
		if n := doc.Find("rect.chart-bar.chart-s8").Length(); n != 1 {
			t.Errorf("eighth colour used %d times", n)
		}
	})

	t.Run("hostile text is escaped", func(t *testing.T) {
		c := Chart{ID: `x" onload="alert(1)`, Title: `<script>alert(1)</script>`, Buckets: []string{`<b>`}, Series: []Series{{Name: `"><script>`, Values: []float64{1}, Labels: []string{"<i>"}}}}
		doc, html := render(t, BarChart(c))
		assertCSPSafe(t, html)
		if strings.Contains(html, "<b>") || strings.Contains(html, "<i>") || strings.Contains(html, "onload=") {
			t.Errorf("text not escaped: %s", html)
		}
		if got := doc.Find("figcaption").Text(); got != c.Title {
			t.Errorf("caption = %q", got)
		}
	})
}

func TestBudgetGauge(t *testing.T) {
	tests := []struct {
		name        string
		g           Gauge
		state       string
		status      string
		fillClasses []string
	}{
		{"50%", Gauge{Spent: 25, Credit: 10, Budget: 50, SpentLabel: "$25.00", CreditLabel: "$10.00", BudgetLabel: "$50.00"},
			"ok", "Within budget · 50% of budget", []string{"gauge-fill gauge-fill-credit", "gauge-fill"}},
		{"79.9%", Gauge{Spent: 39.95, Budget: 50, SpentLabel: "$39.95", BudgetLabel: "$50.00"},
			"ok", "Within budget · 79% of budget", []string{"gauge-fill"}},
		{"80%", Gauge{Spent: 40, Credit: 10, Budget: 50, SpentLabel: "$40.00", CreditLabel: "$10.00", BudgetLabel: "$50.00"},
			"warn", "Near budget · 80% of budget", []string{"gauge-fill gauge-fill-credit", "gauge-fill"}},
		{"100%", Gauge{Spent: 50_000_000, Budget: 50_000_000, SpentLabel: "$50.00", BudgetLabel: "$50.00"},
			"danger", "Budget reached · 100% of budget", []string{"gauge-fill"}},
		{"150%", Gauge{Spent: 75, Budget: 50, SpentLabel: "$75.00", BudgetLabel: "$50.00"},
			"danger", "Over budget · 150% of budget", []string{"gauge-fill"}},
		{"inside the credit", Gauge{Spent: 4, Credit: 10, SpentLabel: "$4.00", CreditLabel: "$10.00"},
			"none", "No budget set", []string{"gauge-fill gauge-fill-credit"}},
		{"nothing", Gauge{SpentLabel: "$0.00"}, "none", "No budget set", nil},
		{"negative", Gauge{Spent: -3, Budget: 50, SpentLabel: "-$3.00", BudgetLabel: "$50.00"},
			"ok", "Within budget · 0% of budget", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.g.Title = "Spend this month"
			doc, html := render(t, BudgetGauge(tt.g))
			assertCSPSafe(t, html)
			fig := byTestID(doc, "gauge")
			if !fig.HasClass("gauge") || !fig.HasClass("gauge-"+tt.state) || attr(fig, "data-state") != tt.state {
				t.Errorf("gauge classes = %q, want gauge-%s", attr(fig, "class"), tt.state)
			}
			if got := strings.Join(strings.Fields(byTestID(doc, "gauge-status").Text()), " "); got != tt.status {
				t.Errorf("status = %q, want %q", got, tt.status)
			}
			var fills []string
			fig.Find("rect.gauge-fill").Each(func(_ int, s *goquery.Selection) { fills = append(fills, attr(s, "class")) })
			if fmt.Sprint(fills) != fmt.Sprint(tt.fillClasses) {
				t.Errorf("fills = %q, want %q", fills, tt.fillClasses)
			}
			svg := fig.Find("svg")
			if attr(svg, "role") != "img" || svg.Find("title").Text() != "Spend this month" {
				t.Errorf("svg = %s", outer(svg))
			}
			if got := byTestID(doc, "gauge-spent").Text(); got != tt.g.SpentLabel {
				t.Errorf("spent = %q, want %q", got, tt.g.SpentLabel)
			}
			if n := fig.Find("line.gauge-mark-budget").Length(); (tt.g.Budget > 0) != (n == 1) {
				t.Errorf("budget marks = %d with budget %v", n, tt.g.Budget)
			}
			if n := fig.Find("line.gauge-mark-credit").Length(); (tt.g.Credit > 0) != (n == 1) {
				t.Errorf("credit marks = %d with credit %v", n, tt.g.Credit)
			}
		})
	}

	t.Run("geometry", func(t *testing.T) {
		// Over budget: the scale runs to what was spent, so the budget
		// mark sits inside and the overspend shows past it.
		v := layoutGauge(Gauge{Spent: 80, Credit: 20, Budget: 50})
		if v.Covered != (gaugeSpan{"0", "250"}) || v.Billable != (gaugeSpan{"250", "750"}) || v.CreditX != "250" || v.BudgetX != "625" {
			t.Errorf("layout = %+v", v)
		}
		if !v.CreditUsed || !strings.Contains(v.Desc, "Over budget") {
			t.Errorf("credit used %v, desc %q", v.CreditUsed, v.Desc)
		}
	})
}

// TestChartsSamplePage renders a dashboard-like page of every chart. Set
// SLUICE_CHARTS_PAGE to a directory to keep it there as charts.html, linked
// to this checkout's stylesheet, for a look in a browser.
func TestChartsSamplePage(t *testing.T) {
	page := sampleChartsPage()
	doc, html := render(t, page)
	assertCSPSafe(t, html)
	if n := byTestID(doc, "chart").Length(); n != 6 {
		t.Errorf("charts = %d, want 6", n)
	}
	if n := byTestID(doc, "gauge").Length(); n != 4 {
		t.Errorf("gauges = %d, want 4", n)
	}
	ids := map[string]bool{}
	doc.Find("[id]").Each(func(_ int, s *goquery.Selection) {
		id := attr(s, "id")
		if ids[id] {
			t.Errorf("duplicate id %q", id)
		}
		ids[id] = true
	})

	dir := os.Getenv("SLUICE_CHARTS_PAGE")
	if dir == "" {
		dir = t.TempDir()
	}
	css, err := filepath.Abs(filepath.Join("..", "web", "static", "sluice.css"))
	if err != nil {
		t.Fatal(err)
	}
	html = strings.Replace(html, `href="/static/sluice.css"`, `href="file://`+css+`"`, 1)
	out := filepath.Join(dir, "charts.html")
	if err := os.WriteFile(out, []byte(html), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", out)
}

// sampleChartsPage is the billing dashboard as it might look: a month of
// requests by model, two days of tokens, cost, rejections and the gauges.
func sampleChartsPage() templ.Component {
	start := time.Date(2025, 11, 3, 0, 0, 0, 0, time.UTC)
	models := []string{"gpt-4o", "gpt-4o-mini", "claude-sonnet", "sluice-local"}
	requests := Chart{ID: "requests", Title: "Requests per day", Unit: "requests", BucketName: "Day"}
	cost := Chart{ID: "cost", Title: "Cost per day", Kind: ValueMoney, BucketName: "Day"}
	rejections := Chart{ID: "rejections", Title: "Rejected requests per day", Unit: "rejections", BucketName: "Day"}
	for d := range 30 {
		requests.Buckets = append(requests.Buckets, start.AddDate(0, 0, d).Format("Jan 2"))
	}
	cost.Buckets, rejections.Buckets = requests.Buckets, requests.Buckets
	// Money is exact integers (micro-dollars here) until the view: floats
	// for the heights, exact strings for every text, totals included.
	dollars := func(micros int64) string { return fmt.Sprintf("$%d.%04d", micros/1e6, micros%1e6/100) }
	dayMicros := make([]int64, 30)
	var allMicros int64
	var rej []float64
	for m, name := range append(models, "Other") {
		var reqs, amounts []float64
		var labels []string
		var seriesMicros int64
		for d := range 30 {
			weekday := 1.0
			if wd := start.AddDate(0, 0, d).Weekday(); wd == time.Saturday || wd == time.Sunday {
				weekday = 0.35
			}
			n := math.Round(weekday * float64(900-150*m) * (1 + 0.4*math.Sin(float64(d*(m+1))/5)))
			reqs = append(reqs, n)
			micros := int64(n) * int64(380-70*m)
			amounts = append(amounts, float64(micros)/1e6)
			labels = append(labels, dollars(micros))
			dayMicros[d] += micros
			seriesMicros += micros
			allMicros += micros
			if m == 0 {
				rej = append(rej, math.Max(0, math.Round(40*math.Sin(float64(d)/3)-10)))
			}
		}
		other := name == "Other"
		requests.Series = append(requests.Series, Series{Name: name, Values: reqs, Other: other})
		cost.Series = append(cost.Series, Series{Name: name, Values: amounts, Labels: labels, Total: dollars(seriesMicros), Other: other})
	}
	for _, micros := range dayMicros {
		cost.Totals = append(cost.Totals, dollars(micros))
	}
	cost.Total = dollars(allMicros)
	rejections.Series = []Series{{Name: "Rejected", Values: rej}}

	tokens := Chart{ID: "tokens", Title: "Tokens per hour", Unit: "tokens", BucketName: "Hour"}
	for h := range 48 {
		tokens.Buckets = append(tokens.Buckets, fmt.Sprintf("%02d:00", h%24))
	}
	for m, name := range models[:3] {
		var v []float64
		for h := range 48 {
			v = append(v, math.Round(float64(120000-30000*m)*(1.1+math.Sin(float64(h-8-m)/24*2*math.Pi))))
		}
		tokens.Series = append(tokens.Series, Series{Name: name, Values: v})
	}
	rejectionsLine := rejections
	rejectionsLine.ID = "rejections-line"
	empty := Chart{ID: "empty", Title: "Batch jobs per day", Buckets: requests.Buckets}

	gauges := []Gauge{
		{ID: "g-ok", Title: "Spend this month", Spent: 25, Credit: 10, Budget: 50, SpentLabel: "$25.00", CreditLabel: "$10.00", BudgetLabel: "$50.00"},
		{ID: "g-warn", Title: "Spend this month (near)", Spent: 42.5, Credit: 10, Budget: 50, SpentLabel: "$42.50", CreditLabel: "$10.00", BudgetLabel: "$50.00"},
		{ID: "g-danger", Title: "Spend this month (over)", Spent: 61.2, Credit: 10, Budget: 50, SpentLabel: "$61.20", CreditLabel: "$10.00", BudgetLabel: "$50.00"},
		{ID: "g-none", Title: "Spend this month (no budget)", Spent: 4.1, Credit: 10, SpentLabel: "$4.10", CreditLabel: "$10.00"},
	}

	card := func(c templ.Component) templ.Component {
		return templ.ComponentFunc(func(ctx context.Context, w io.Writer) error {
			if _, err := io.WriteString(w, `<section class="card">`); err != nil {
				return err
			}
			if err := c.Render(ctx, w); err != nil {
				return err
			}
			_, err := io.WriteString(w, `</section>`)
			return err
		})
	}
	body := templ.ComponentFunc(func(ctx context.Context, w io.Writer) error {
		parts := []templ.Component{}
		for _, g := range gauges {
			parts = append(parts, card(BudgetGauge(g)))
		}
		parts = append(parts, card(BarChart(requests)), card(LineChart(tokens)), card(BarChart(cost)),
			card(BarChart(rejections)), card(LineChart(rejectionsLine)), card(BarChart(empty)))
		if _, err := io.WriteString(w, `<div class="stack-lg"><h1>Usage</h1>`); err != nil {
			return err
		}
		for _, p := range parts {
			if err := p.Render(ctx, w); err != nil {
				return err
			}
		}
		_, err := io.WriteString(w, `</div>`)
		return err
	})
	return templ.ComponentFunc(func(ctx context.Context, w io.Writer) error {
		return layout(Page{Title: "Usage", User: member()}).Render(templ.WithChildren(ctx, body), w)
	})
}

// assertCSPSafe checks html would run under a CSP without inline styles
// or scripts.
func assertCSPSafe(t *testing.T, html string) {
	t.Helper()
	lower := strings.ToLower(html)
	for _, bad := range []string{"style=", "<style", "<script", "javascript:", " on"} {
		if bad == " on" {
			if m := regexp.MustCompile(`\son[a-z]+=`).FindString(lower); m != "" {
				t.Errorf("output has an event handler attribute %q", m)
			}
			continue
		}
		if strings.Contains(lower, bad) {
			t.Errorf("output contains %q", bad)
		}
	}
}

// assertTable compares the chart's data table, header to footer, with want.
func assertTable(t *testing.T, doc *goquery.Document, want [][]string) {
	t.Helper()
	details := byTestID(doc, "chart-data")
	if !details.Is("details") || details.Find("summary").Length() != 1 {
		t.Fatalf("no table under details: %s", outer(details))
	}
	var got [][]string
	details.Find("table tr").Each(func(_ int, tr *goquery.Selection) {
		var row []string
		tr.Find("th, td").Each(func(_ int, c *goquery.Selection) { row = append(row, strings.TrimSpace(c.Text())) })
		got = append(got, row)
	})
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("table =\n%q\nwant\n%q", got, want)
	}
}

// attrsOf is every attribute value of s, for scanning geometry.
func attrsOf(s *goquery.Selection) string {
	var b strings.Builder
	s.Each(func(_ int, e *goquery.Selection) {
		for _, a := range e.Nodes[0].Attr {
			b.WriteString(a.Key + "=" + a.Val + " ")
		}
	})
	return b.String()
}

// A money chart of one series reads its days exactly, from the series'
// labels: a day under a cent is not "$0.00" in the tooltip, the summary
// or the table, though its bar is drawn from a float.
func TestOneSeriesMoneyChartIsExact(t *testing.T) {
	c := Chart{ID: "cost", Title: "Cost per day", Kind: ValueMoney, BucketName: "Day",
		Buckets: []string{"Nov 1", "Nov 2"},
		Series:  []Series{{Name: "Cost", Values: []float64{0.000761, 0.0002}, Labels: []string{"$0.000761", "$0.0002"}, Total: "$0.000961"}},
		Total:   "$0.000961"}
	doc, html := render(t, BarChart(c))
	if strings.Contains(html, "$0.00<") || strings.Contains(html, "$0.00 ") || strings.Contains(html, "$0.00.") {
		t.Errorf("a sub-cent day reads $0.00 somewhere:\n%s", html)
	}
	if got := doc.Find("desc").Text(); !strings.Contains(got, "Highest: Nov 1, $0.000761.") {
		t.Errorf("summary = %q", got)
	}
	if got := doc.Find("svg title").Last().Text(); !strings.Contains(got, "$0.0002") {
		t.Errorf("the last bar's tooltip = %q", got)
	}
}
