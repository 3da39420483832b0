package templates

// Charts are drawn on the server as SVG, with no script and no inline style:
// geometry goes in SVG attributes (x, y, width, height, points), colour in
// CSS classes, so the pages keep working under a strict Content Security
// Policy and without JavaScript. The plot stretches to its container
// (preserveAspectRatio="none") while the axis labels are HTML around it, so
// the text keeps its size from a phone to a desktop. The exact numbers are
// always in a table under the chart.

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ValueKind says what a chart's numbers are, which decides how its axis is
// labelled and how a missing label is written.
type ValueKind int

const (
	// ValueCount is whole things: requests, tokens, rejections. Ticks are
	// whole numbers, labelled compactly (1.2k, 3.4M).
	ValueCount ValueKind = iota
	// ValueMoney is an amount in dollars, e.g.
	// float64(amount)/float64(money.Dollar), labelled $0.12 or $1.2k on
	// the axis. The exact amounts belong in Series.Labels.
	ValueMoney
)

// Chart is the view model of BarChart and LineChart: one value per bucket
// (a day, an hour) per series (a model, a token).
type Chart struct {
	// ID is unique on the page: the chart's element ids start with it.
	// Empty derives one from Title.
	ID string
	// Title names the chart, e.g. "Requests per day". It heads the chart
	// and is the SVG's <title> and the table's caption.
	Title string
	// Unit follows counts in tooltips and the description, e.g. "requests".
	// Leave it empty for money: its labels carry their currency.
	Unit string
	// Kind decides how the axis is labelled and how a value without a
	// label is written.
	Kind ValueKind
	// BucketName heads the table's first column, e.g. "Day" or "Hour";
	// "Period" when empty.
	BucketName string
	// Buckets label the x axis, oldest first, e.g. "Nov 3" or "14:00".
	Buckets []string
	// Series are drawn in order, bottom-up when bars are stacked. The
	// first eight have colours of their own; later ones, and one marked
	// Other, are grey, so fold the long tail into one "Other" series.
	Series []Series
	// Totals are the exact texts of each bucket's total, for the table's
	// last column; computed from the values when nil.
	Totals []string
	// Total is the exact text of the grand total; computed when empty.
	Total string
	// Empty is said instead of the chart when every value is zero or there
	// are no buckets; "No usage in this period" when empty.
	Empty string
}

// Series is one line, or one layer of stacked bars.
type Series struct {
	Name string
	// Values are the heights, one per bucket; missing ones count as zero
	// and extra ones are ignored. float64 is for drawing only: money is
	// exact integers everywhere else, so its exact text goes in Labels.
	// Negative, NaN and infinite values are drawn as zero (no bar, a point
	// on the baseline). The table still shows a negative value, so a
	// refund or a bug upstream is visible rather than hidden; NaN and
	// infinities show as "—" unless labelled.
	Values []float64
	// Labels are the exact texts of Values for the table and the tooltips,
	// e.g. "$0.1234". Where a label is missing the value is written by the
	// chart's Kind: exactly for counts, to the cent for money.
	Labels []string
	// Total is the exact text of the series' total; computed when empty.
	Total string
	// Other marks the folded remainder of many small series; it is grey.
	Other bool
}

// Geometry of a chart's plot, in viewBox units.
const (
	plotWidth    = 1000.0 // stretched to the container's width
	plotHeight   = 200.0  // the CSS height in px, so a unit is about a pixel
	barShare     = 0.72   // of its bucket's width a bar fills
	maxBarWidth  = 64.0   // so one or two buckets do not draw slabs
	minBarHeight = 1.5    // a non-zero value never disappears
	paletteSize  = 8      // series colours, .chart-s1 … .chart-s8
	markerLimit  = 31     // line charts mark their points up to a month of days
)

// Label thinning assumes a label needs 7 px a character plus a 12 px gap, and
// a plot at least this wide: at or below the CSS container breakpoint
// (40rem) the narrow set of labels is shown, above it the wide one.
const (
	labelCharPx  = 7
	labelGapPx   = 12
	narrowPlotPx = 250
	widePlotPx   = 560
)

// chartView is a Chart laid out for the template: every number is already
// the string an attribute or a cell shows.
type chartView struct {
	ID      string
	Kind    string // "bar" or "line"
	Title   string
	Desc    string
	Empty   string // when set, said instead of the plot
	ViewBox string
	Width   string // of the plot, in viewBox units
	Height  string
	YLabels []string // top to bottom, one per gridline
	Grid    []gridLine
	XLabels []xLabel
	Bars    []barRect
	Lines   []seriesLine
	Hits    []hitRect
	Legend  []legendItem
	Table   dataTable
}

type gridLine struct {
	Y     string
	Class string
}

// xLabel is one bucket's cell under the plot; Text is empty where thinned.
type xLabel struct {
	Text  string
	Class string // "chart-x-wide" or "chart-x-narrow" when shown only on such charts
}

type barRect struct {
	X, Y, W, H string
	Class      string
	Title      string
}

type seriesLine struct {
	Class   string
	Points  string
	Markers []string // path data of zero-length round-capped strokes
}

// hitRect is a bucket's full-height band whose tooltip sums it up.
type hitRect struct {
	X, W  string
	Title string
}

type legendItem struct {
	Name  string
	Class string
}

type dataTable struct {
	BucketName string
	Columns    []legendItem
	Rows       []dataRow
	Totals     []string // per series
	Total      string
	TotalCol   bool // more than one series: a total per bucket
}

type dataRow struct {
	Bucket string
	Cells  []string
	Total  string
}

// layoutChart turns c into what the template draws, as bars or lines.
func layoutChart(c Chart, kind string) chartView {
	n := len(c.Buckets)
	v := chartView{
		ID:      chartID(c.ID, "chart", c.Title),
		Kind:    kind,
		Title:   c.Title,
		ViewBox: fmt.Sprintf("0 0 %s %s", num(plotWidth), num(plotHeight)),
		Width:   num(plotWidth),
		Height:  num(plotHeight),
	}
	if !hasUsage(c) {
		v.Empty = orValue(c.Empty, "No usage in this period")
		return v
	}
	v.Table = exactTable(c)
	for i, s := range c.Series {
		v.Legend = append(v.Legend, legendItem{Name: s.Name, Class: seriesClass(i, s)})
	}

	// Scale: bars stack, so their top is the largest bucket total.
	top := 0.0
	for b := 0; b < n; b++ {
		if kind == "bar" {
			top = max(top, drawnSum(c.Series, b))
			continue
		}
		for _, s := range c.Series {
			top = max(top, drawn(s.Values, b))
		}
	}
	ticks := niceTicks(top, c.Kind)
	scaleTop := ticks[len(ticks)-1]
	step := ticks[1] - ticks[0]
	y := func(val float64) float64 { return plotHeight - val/scaleTop*plotHeight }
	for i := len(ticks) - 1; i >= 0; i-- {
		v.YLabels = append(v.YLabels, formatTick(ticks[i], step, c.Kind))
		class := "chart-grid"
		if i == 0 {
			class = "chart-grid chart-baseline"
		}
		v.Grid = append(v.Grid, gridLine{Y: num(y(ticks[i])), Class: class})
	}

	band := plotWidth / float64(n)
	wide, narrow := labelSteps(n, maxRunes(c.Buckets))
	for b, name := range c.Buckets {
		var l xLabel
		switch onWide, onNarrow := showLabel(b, n, wide), showLabel(b, n, narrow); {
		case onWide && onNarrow:
			l.Text = name
		case onWide:
			l = xLabel{Text: name, Class: "chart-x-wide"}
		case onNarrow:
			l = xLabel{Text: name, Class: "chart-x-narrow"}
		}
		v.XLabels = append(v.XLabels, l)
		v.Hits = append(v.Hits, hitRect{X: num(band * float64(b)), W: num(band), Title: bucketSummary(c, v.Table.Rows[b])})
	}

	v.Desc = chartDesc(c, kind, v.Table)
	if kind == "line" {
		v.Lines = lineGeometry(c, band, y)
	} else {
		v.Bars = barGeometry(c, band, y)
	}
	return v
}

// barGeometry stacks each bucket's positive values bottom-up.
func barGeometry(c Chart, band float64, y func(float64) float64) []barRect {
	width := min(band*barShare, maxBarWidth)
	var bars []barRect
	for b, bucket := range c.Buckets {
		x := band*float64(b) + (band-width)/2
		base, sum := plotHeight, 0.0
		for i, s := range c.Series {
			val := drawn(s.Values, b)
			if val == 0 {
				continue
			}
			sum += val
			top := min(y(sum), base-minBarHeight)
			top = max(top, 0)
			bars = append(bars, barRect{
				X: num(x), Y: num(top), W: num(width), H: num(base - top),
				Class: "chart-bar " + seriesClass(i, s),
				Title: bucket + " · " + s.Name + ": " + withUnit(c, cellLabel(c, s, b)),
			})
			base = top
		}
	}
	return bars
}

// lineGeometry draws one polyline per series through the bucket centres.
func lineGeometry(c Chart, band float64, y func(float64) float64) []seriesLine {
	var lines []seriesLine
	for i, s := range c.Series {
		l := seriesLine{Class: "chart-line " + seriesClass(i, s)}
		points := make([]string, len(c.Buckets))
		for b := range c.Buckets {
			x, yy := num(band*(float64(b)+0.5)), num(y(drawn(s.Values, b)))
			points[b] = x + "," + yy
			if len(c.Buckets) <= markerLimit {
				l.Markers = append(l.Markers, "M"+x+" "+yy+"h0")
			}
		}
		l.Points = strings.Join(points, " ")
		lines = append(lines, l)
	}
	return lines
}

// exactTable holds the exact texts: one row per bucket, one column per series.
func exactTable(c Chart) dataTable {
	t := dataTable{BucketName: orValue(c.BucketName, "Period"), TotalCol: len(c.Series) > 1}
	for i, s := range c.Series {
		t.Columns = append(t.Columns, legendItem{Name: s.Name, Class: seriesClass(i, s)})
		total := s.Total
		if total == "" {
			sum := 0.0
			for b := range c.Buckets {
				sum += finite(s.Values, b)
			}
			total = formatExact(sum, c.Kind)
		}
		t.Totals = append(t.Totals, total)
	}
	grand := 0.0
	for b, bucket := range c.Buckets {
		r := dataRow{Bucket: bucket}
		sum := 0.0
		for _, s := range c.Series {
			r.Cells = append(r.Cells, cellLabel(c, s, b))
			sum += finite(s.Values, b)
		}
		grand += sum
		r.Total = formatExact(sum, c.Kind)
		switch {
		case b < len(c.Totals):
			r.Total = c.Totals[b]
		case len(c.Series) == 1:
			// One series: its exact label is the bucket's total, not the
			// float drawn (a sub-cent day would read $0.00).
			r.Total = r.Cells[0]
		}
		t.Rows = append(t.Rows, r)
	}
	t.Total = orValue(c.Total, formatExact(grand, c.Kind))
	return t
}

// bucketSummary is a bucket's tooltip: its total, then each series.
func bucketSummary(c Chart, r dataRow) string {
	s := r.Bucket + ": " + withUnit(c, r.Total)
	if len(c.Series) > 1 {
		parts := make([]string, len(c.Series))
		for i, se := range c.Series {
			parts[i] = se.Name + " " + r.Cells[i]
		}
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s
}

// chartDesc says in a sentence or three what the chart shows, for screen
// readers; the table has the rest.
func chartDesc(c Chart, kind string, t dataTable) string {
	var b strings.Builder
	what := "Line chart"
	if kind == "bar" {
		what = "Bar chart"
		if len(c.Series) > 1 {
			what = "Stacked bar chart"
		}
	}
	fmt.Fprintf(&b, "%s of %d %s", what, len(c.Buckets), plural(len(c.Buckets), strings.ToLower(t.BucketName)))
	if n := len(c.Buckets); n > 1 {
		fmt.Fprintf(&b, ", %s to %s", c.Buckets[0], c.Buckets[n-1])
	} else {
		fmt.Fprintf(&b, ", %s", c.Buckets[0])
	}
	if len(c.Series) > 1 {
		names := make([]string, len(c.Series))
		for i, s := range c.Series {
			names[i] = s.Name
		}
		fmt.Fprintf(&b, ", by %s", strings.Join(names, ", "))
	}
	fmt.Fprintf(&b, ". Total %s.", withUnit(c, t.Total))
	best, bestSum := 0, -1.0
	for i := range c.Buckets {
		if s := drawnSum(c.Series, i); s > bestSum {
			best, bestSum = i, s
		}
	}
	if len(c.Buckets) > 1 {
		fmt.Fprintf(&b, " Highest: %s, %s.", c.Buckets[best], withUnit(c, t.Rows[best].Total))
	}
	return b.String()
}

// hasUsage says whether any value is non-zero, so the chart has something to show.
func hasUsage(c Chart) bool {
	for _, s := range c.Series {
		for b := range c.Buckets {
			if finite(s.Values, b) != 0 {
				return true
			}
		}
	}
	return false
}

// finite is a series' value at bucket b, zero when missing, NaN or infinite.
func finite(values []float64, b int) float64 {
	if b >= len(values) || math.IsNaN(values[b]) || math.IsInf(values[b], 0) {
		return 0
	}
	return values[b]
}

// drawn is the height a value is drawn at: finite and never below zero.
func drawn(values []float64, b int) float64 {
	return max(finite(values, b), 0)
}

// drawnSum is a bucket's stacked height, capped so huge values cannot
// overflow to infinity.
func drawnSum(series []Series, b int) float64 {
	sum := 0.0
	for _, s := range series {
		sum += drawn(s.Values, b)
	}
	return min(sum, math.MaxFloat64)
}

// cellLabel is the exact text of series s at bucket b.
func cellLabel(c Chart, s Series, b int) string {
	if b < len(s.Labels) && s.Labels[b] != "" {
		return s.Labels[b]
	}
	if b >= len(s.Values) || math.IsNaN(s.Values[b]) || math.IsInf(s.Values[b], 0) {
		return "—"
	}
	return formatExact(s.Values[b], c.Kind)
}

// withUnit writes a count with the chart's unit, e.g. "1,234 requests".
func withUnit(c Chart, label string) string {
	if c.Unit == "" {
		return label
	}
	return label + " " + c.Unit
}

// seriesClass colours the i-th series: .chart-s1 … .chart-s8, then grey.
func seriesClass(i int, s Series) string {
	if s.Other || i >= paletteSize {
		return "chart-other"
	}
	return "chart-s" + strconv.Itoa(i+1)
}

// chartID makes an id safe to use in aria-labelledby's space-separated
// list; without one it derives prefix-title.
func chartID(id, prefix, title string) string {
	if id == "" {
		id = prefix + "-" + strings.ToLower(title)
	}
	var b strings.Builder
	dash := false
	for _, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_'
		if !ok {
			dash = true
			continue
		}
		if dash && b.Len() > 0 {
			b.WriteByte('-')
		}
		dash = false
		b.WriteRune(r)
	}
	if b.Len() == 0 {
		return prefix
	}
	return b.String()
}

// niceTicks are evenly spaced axis values from 0 to at least top, stepping
// by 1, 2 or 5 × 10^n, about four or five of them. Counts step by whole
// numbers; an empty scale is 0 to 1.
func niceTicks(top float64, kind ValueKind) []float64 {
	if !(top > 0) || math.IsInf(top, 0) {
		if math.IsInf(top, 1) {
			top = math.MaxFloat64
		} else {
			return []float64{0, 1}
		}
	}
	step := niceStep(top / 4)
	if kind == ValueCount {
		step = max(step, 1)
	}
	count := math.Ceil(top/step - 1e-9)
	ticks := make([]float64, 0, int(count)+1)
	for i := 0.0; i <= count; i++ {
		t := i * step
		if math.IsInf(t, 0) { // the last nice tick of a huge scale
			t = top
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// niceStep rounds raw up to 1, 2 or 5 × 10^n.
func niceStep(raw float64) float64 {
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	switch norm := raw / mag; {
	case norm <= 1:
		return mag
	case norm <= 2:
		return 2 * mag
	case norm <= 5:
		return 5 * mag
	default:
		return 10 * mag
	}
}

// formatTick writes an axis value compactly (950, 1.2k, 3.4M; $0.05,
// $1.2k) with as many decimals as the tick step needs.
func formatTick(v, step float64, kind ValueKind) string {
	units := []struct {
		div    float64
		suffix string
	}{{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "k"}}
	div, suffix := 1.0, ""
	for _, u := range units {
		if math.Abs(v) >= u.div {
			div, suffix = u.div, u.suffix
			break
		}
	}
	s := strconv.FormatFloat(v/div, 'f', stepDecimals(step/div), 64)
	switch {
	case math.Abs(v/div) >= 1e4: // beyond trillions: 1.5e+20
		s, suffix = strconv.FormatFloat(v, 'g', 3, 64), ""
	case kind == ValueMoney && suffix == "" && step < 1:
		// Money below a thousand keeps its cents: $0.10, not $0.1.
		s = strconv.FormatFloat(v, 'f', max(2, stepDecimals(step)), 64)
	case strings.Contains(s, "."):
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	if kind == ValueMoney {
		return "$" + s + suffix
	}
	return s + suffix
}

// stepDecimals is how many decimals tell ticks step apart, at most six.
func stepDecimals(step float64) int {
	if step >= 1 || step <= 0 {
		return 0
	}
	return min(int(math.Ceil(-math.Log10(step)-1e-9)), 6)
}

// formatExact writes a value whose caller gave no label: a count with
// thousands separators, money to the cent.
func formatExact(v float64, kind ValueKind) string {
	if kind == ValueMoney {
		s := strconv.FormatFloat(math.Abs(v), 'f', 2, 64)
		whole, cents, _ := strings.Cut(s, ".")
		sign := ""
		if v < 0 && s != "0.00" {
			sign = "-"
		}
		return sign + "$" + groupDigits(whole) + "." + cents
	}
	s := strconv.FormatFloat(math.Abs(math.Round(v)), 'f', 0, 64)
	if math.Round(v) < 0 {
		return "-" + groupDigits(s)
	}
	return groupDigits(s)
}

// groupDigits puts a comma between each three digits of an unsigned whole number.
func groupDigits(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// labelSteps says which x labels fit: every wide-th on a wide chart, every
// narrow-th on a narrow one. Steps snap to calendar-friendly counts (6
// hours, 7 days) where that costs little room.
func labelSteps(n, runes int) (wide, narrow int) {
	need := float64(n * (runes*labelCharPx + labelGapPx))
	wide = snapStep(int(math.Ceil(need / widePlotPx)))
	narrow = snapStep(int(math.Ceil(need / narrowPlotPx)))
	return wide, narrow
}

// snapStep rounds a label step up to a divisor of a day in hours or a
// week or two in days; longer steps stay as they are.
func snapStep(step int) int {
	for _, s := range []int{1, 2, 3, 4, 6, 7, 12, 14} {
		if step <= s {
			return s
		}
	}
	return step
}

// showLabel says whether bucket i of n is labelled at this step. Counting
// from the end keeps the newest bucket, usually today, labelled.
func showLabel(i, n, step int) bool {
	return (n-1-i)%step == 0
}

// maxRunes is the length of the longest label.
func maxRunes(labels []string) int {
	longest := 1
	for _, l := range labels {
		longest = max(longest, utf8.RuneCountInString(l))
	}
	return longest
}

// plural names n things, "1 day" but "30 days".
func plural(n int, noun string) string {
	if n == 1 {
		return noun
	}
	return noun + "s"
}

// num writes a coordinate with at most two decimals.
func num(f float64) string {
	s := strconv.FormatFloat(f, 'f', 2, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" {
		return "0"
	}
	return s
}

// Gauge is the view model of BudgetGauge: this month's spend
// against the organization's budget, with its included credit marked.
type Gauge struct {
	// ID is unique on the page; empty derives one from Title.
	ID    string
	Title string // e.g. "Spend this month"
	// Spent, Credit and Budget place the bar and the marks, in any one
	// unit, e.g. float64(amount)/float64(money.Dollar): only their ratios
	// are drawn, and the state compares Spent with Budget. float64 is for
	// drawing only: equal amounts stay equal, but amounts a rounding
	// error apart may compare equal, so the colour is advisory and the
	// ledger, in exact integers, is what enforces the budget. Zero Credit
	// or Budget means none; negative values count as zero.
	Spent, Credit, Budget float64
	// The exact texts of the amounts, e.g. "$12.34".
	SpentLabel, CreditLabel, BudgetLabel string
}

// Gauge states, also its CSS modifier: .gauge-ok, .gauge-warn, .gauge-danger, .gauge-none.
const (
	gaugeNone   = "none"   // no budget set
	gaugeOK     = "ok"     // below 80% of the budget
	gaugeWarn   = "warn"   // 80% of the budget or more
	gaugeDanger = "danger" // the budget is reached or passed
)

// gaugeView is a Gauge laid out for the template.
type gaugeView struct {
	ID, Title, Desc string
	State           string
	Status          string // the state in words, so colour is not the only signal
	Percent         string // of the budget spent, e.g. "82%"; empty without a budget
	ViewBox         string
	Width           string    // of the track, in viewBox units
	Covered         gaugeSpan // spend the included credit pays for
	Billable        gaugeSpan // spend beyond the credit
	CreditX         string    // the credit mark; empty for none
	BudgetX         string    // the budget mark; empty for none
	CreditUsed      bool
	G               Gauge
}

// gaugeSpan is a horizontal stretch of the meter; empty W draws nothing.
type gaugeSpan struct{ X, W string }

// Geometry of the gauge, in viewBox units.
const (
	gaugeWidth  = 1000.0
	gaugeHeight = 24.0
)

// gaugeState says how close spent is to the budget.
func gaugeState(spent, budget float64) string {
	switch {
	case !(budget > 0):
		return gaugeNone
	case spent >= budget:
		return gaugeDanger
	case spent >= 0.8*budget:
		return gaugeWarn
	default:
		return gaugeOK
	}
}

// layoutGauge places the bar and the marks on a scale that holds all three
// amounts, so spend beyond the budget shows past its mark.
func layoutGauge(g Gauge) gaugeView {
	spent, credit, budget := nonNegative(g.Spent), nonNegative(g.Credit), nonNegative(g.Budget)
	v := gaugeView{
		ID:      chartID(g.ID, "gauge", g.Title),
		Title:   g.Title,
		State:   gaugeState(spent, budget),
		ViewBox: fmt.Sprintf("-4 0 %s %s", num(gaugeWidth+8), num(gaugeHeight)),
		Width:   num(gaugeWidth),
		G:       g,
	}
	v.CreditUsed = credit > 0 && spent >= credit
	switch v.State {
	case gaugeNone:
		v.Status = "No budget set"
	case gaugeOK:
		v.Status = "Within budget"
	case gaugeWarn:
		v.Status = "Near budget"
	default:
		v.Status = "Budget reached"
		if spent > budget {
			v.Status = "Over budget"
		}
	}
	if budget > 0 {
		v.Percent = strconv.FormatFloat(math.Floor(min(spent/budget*100, 1e6)), 'f', 0, 64) + "%"
	}

	top := max(spent, credit, budget)
	if top == 0 {
		top = 1
	}
	x := func(a float64) float64 { return a / top * gaugeWidth }
	covered := min(spent, credit)
	if covered > 0 {
		v.Covered = gaugeSpan{X: "0", W: num(x(covered))}
	}
	if spent > covered {
		v.Billable = gaugeSpan{X: num(x(covered)), W: num(x(spent) - x(covered))}
	}
	if credit > 0 {
		v.CreditX = num(x(credit))
	}
	if budget > 0 {
		v.BudgetX = num(x(budget))
	}

	desc := "Spent " + orValue(g.SpentLabel, "nothing")
	if budget > 0 {
		desc += " of a " + g.BudgetLabel + " budget (" + v.Percent + ")"
	}
	if credit > 0 {
		desc += "; included credit " + g.CreditLabel
		if v.CreditUsed {
			desc += ", used up"
		}
	}
	v.Desc = desc + ". " + v.Status + "."
	return v
}

// nonNegative is f, or zero when it is negative or not a number.
func nonNegative(f float64) float64 {
	if !(f > 0) || math.IsInf(f, 0) {
		return 0
	}
	return f
}
