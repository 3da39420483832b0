package web

import (
	"cmp"
	"context"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/billing"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/templates"
)

// The dashboard's chart switches, as query parameters: ?range=30d|48h and
// ?by=none|model|token. Anything else means the default.
const (
	range30d = "30d"
	range48h = "48h"
	byNone   = "none"
	byModel  = "model"
	byToken  = "token"
)

// maxSeries is how many series a grouped chart draws; past it the smallest
// groups are added up as one "Other" series, so colours stay distinct and
// the legend short.
const maxSeries = 6

// usageQuery is what the chart switches ask for.
type usageQuery struct {
	Range string
	By    string
}

// parseUsageQuery reads the switches, falling back to the last 30 days,
// not grouped.
func parseUsageQuery(q url.Values) usageQuery {
	u := usageQuery{Range: range30d, By: byNone}
	if q.Get("range") == range48h {
		u.Range = range48h
	}
	switch by := q.Get("by"); by {
	case byModel, byToken:
		u.By = by
	}
	return u
}

// link is the dashboard showing rng grouped by by, landing on the charts.
func usageLink(rng, by string) string {
	return "/dashboard?" + url.Values{"range": {rng}, "by": {by}}.Encode() + "#usage"
}

// buckets are a chart's x axis: consecutive days or hours, oldest first,
// every one present whether or not it saw usage.
type buckets struct {
	granularity string // billing.Day or billing.Hour
	from, to    time.Time
	labels      []string
	index       map[int64]int // bucket start (unix seconds) -> position
	first, last string        // the first and last bucket with its date, for the period
}

// usageBuckets are the 30 calendar days (in loc) up to and including
// today, or the 48 hours up to and including the current one.
func usageBuckets(now time.Time, loc *time.Location, rng string) buckets {
	b := buckets{index: map[int64]int{}}
	var starts []time.Time
	if rng == range48h {
		b.granularity = billing.Hour
		first := now.Truncate(time.Hour).Add(-47 * time.Hour)
		for i := range 48 {
			starts = append(starts, first.Add(time.Duration(i)*time.Hour))
		}
		b.to = first.Add(48 * time.Hour)
		// A weekday tells the three days of 48 hours apart in a label
		// short enough to fit a phone's axis.
		for _, s := range starts {
			b.labels = append(b.labels, s.In(loc).Format("Mon 15:04"))
		}
		b.first, b.last = starts[0].In(loc).Format("Jan 2 15:04"), starts[47].In(loc).Format("Jan 2 15:04")
	} else {
		b.granularity = billing.Day
		local := now.In(loc)
		for i := range 30 {
			starts = append(starts, time.Date(local.Year(), local.Month(), local.Day()-29+i, 0, 0, 0, 0, loc))
		}
		b.to = time.Date(local.Year(), local.Month(), local.Day()+1, 0, 0, 0, 0, loc)
		for _, s := range starts {
			b.labels = append(b.labels, s.Format("Jan 2"))
		}
		b.first, b.last = b.labels[0], b.labels[29]
	}
	b.from = starts[0]
	for i, s := range starts {
		b.index[s.Unix()] = i
	}
	return b
}

// period says what the charts cover, in words.
func (b buckets) period(loc *time.Location) string {
	if b.granularity == billing.Hour {
		return "Last 48 hours, " + b.first + " to " + b.last + ", " + loc.String() + " time"
	}
	return "Last 30 days, " + b.first + " to " + b.last + ", days in " + loc.String()
}

// usageGroup is one series' numbers, one per bucket.
type usageGroup struct {
	name                                   string
	requests, rejected, prompt, completion []int64
	cost                                   []money.Amount
	other                                  bool
}

func newUsageGroup(name string, n int) *usageGroup {
	return &usageGroup{name: name, requests: make([]int64, n), rejected: make([]int64, n), prompt: make([]int64, n),
		completion: make([]int64, n), cost: make([]money.Amount, n)}
}

// add puts g's bucket values on top of o's.
func (o *usageGroup) add(g *usageGroup) {
	for i := range o.requests {
		o.requests[i] += g.requests[i]
		o.rejected[i] += g.rejected[i]
		o.prompt[i] += g.prompt[i]
		o.completion[i] += g.completion[i]
		o.cost[i] += g.cost[i]
	}
}

// weight ranks groups: the most requests (admitted or not) first, then the
// most cost and tokens.
func (o *usageGroup) weight() (requests int64, cost money.Amount, tokens int64) {
	for i := range o.requests {
		requests += o.requests[i] + o.rejected[i]
		cost += o.cost[i]
		tokens += o.prompt[i] + o.completion[i]
	}
	return requests, cost, tokens
}

// usageView reads the organization's usage for q and draws it as the
// dashboard's four charts.
func (p *Pages) usageView(ctx context.Context, orgID int64, loc *time.Location, q usageQuery, toks []models.APIToken) (templates.UsageView, error) {
	b := usageBuckets(p.now(), loc, q.Range)
	group := models.GroupNone
	switch q.By {
	case byModel:
		group = models.GroupModel
	case byToken:
		group = models.GroupToken
	}
	points, err := p.billing.Series(ctx, orgID, b.granularity, b.from, b.to, group)
	if err != nil {
		return templates.UsageView{}, err
	}
	names := tokenNames(toks)
	groups := map[string]*usageGroup{}
	var order []*usageGroup
	for _, pt := range points {
		i, ok := b.index[pt.Start.Unix()]
		if !ok {
			continue // outside the window (a zone's half hour before the first day)
		}
		g := groups[pt.Group]
		if g == nil {
			g = newUsageGroup(groupName(q.By, pt.Group, names), len(b.labels))
			groups[pt.Group] = g
			order = append(order, g)
		}
		g.requests[i] += pt.Requests
		g.rejected[i] += pt.Rejected
		g.prompt[i] += pt.PromptTokens
		g.completion[i] += pt.CompletionTokens
		g.cost[i] += pt.Cost
	}
	series, folded := foldGroups(order, len(b.labels))

	v := templates.UsageView{Period: b.period(loc), Folded: folded}
	for _, r := range []struct{ value, label string }{{range30d, "Last 30 days"}, {range48h, "Last 48 hours"}} {
		v.Ranges = append(v.Ranges, templates.UsageLink{Label: r.label, URL: usageLink(r.value, q.By), Current: q.Range == r.value,
			TestID: "range-" + r.value})
	}
	for _, g := range []struct{ value, label string }{{byNone, "Total"}, {byModel, "By model"}, {byToken, "By token"}} {
		v.Groupings = append(v.Groupings, templates.UsageLink{Label: g.label, URL: usageLink(q.Range, g.value), Current: q.By == g.value,
			TestID: "by-" + g.value})
	}
	per, bucketName := "day", "Day"
	if b.granularity == billing.Hour {
		per, bucketName = "hour", "Hour"
	}
	chart := func(id, title, unit string) templates.Chart {
		return templates.Chart{ID: "usage-" + id, Title: title + " per " + per, Unit: unit, BucketName: bucketName, Buckets: b.labels,
			Empty: "No " + unit + " in this period"}
	}
	v.Requests = chart("requests", "Requests", "requests")
	v.Tokens = chart("tokens", "Tokens", "tokens")
	v.Rejections = chart("rejections", "Rejected requests", "rejections")
	v.Cost = chart("cost", "Cost", "cost")
	v.Cost.Unit, v.Cost.Kind, v.Cost.Empty = "", templates.ValueMoney, "Nothing spent in this period"
	if len(series) == 0 {
		return v, nil
	}
	grouped := q.By != byNone
	for _, g := range series {
		name := g.name
		if !grouped {
			name = "Requests"
		}
		v.Requests.Series = append(v.Requests.Series, countSeries(name, g.requests, g.other))
		if !grouped {
			name = "Rejected"
		}
		v.Rejections.Series = append(v.Rejections.Series, countSeries(name, g.rejected, g.other))
		if grouped {
			v.Tokens.Series = append(v.Tokens.Series, countSeries(g.name, sum(g.prompt, g.completion), g.other))
		} else {
			v.Tokens.Series = append(v.Tokens.Series, countSeries("Input", g.prompt, false), countSeries("Output", g.completion, false))
		}
		if !grouped {
			name = "Cost"
		}
		v.Cost.Series = append(v.Cost.Series, costSeries(name, g.cost, g.other))
	}
	// The cost chart's totals are exact sums of the amounts, not of the
	// float heights.
	var grand money.Amount
	for i := range b.labels {
		var t money.Amount
		for _, g := range series {
			t += g.cost[i]
		}
		grand += t
		v.Cost.Totals = append(v.Cost.Totals, dollars(t))
	}
	v.Cost.Total = dollars(grand)
	return v, nil
}

// foldGroups orders the groups by weight and, past maxSeries, adds the
// smallest up as "Other". It returns the series to draw and how many
// groups were folded.
func foldGroups(gs []*usageGroup, n int) ([]*usageGroup, int) {
	slices.SortStableFunc(gs, func(a, b *usageGroup) int {
		ar, ac, at := a.weight()
		br, bc, bt := b.weight()
		return cmp.Or(cmp.Compare(br, ar), cmp.Compare(bc, ac), cmp.Compare(bt, at), cmp.Compare(a.name, b.name))
	})
	if len(gs) <= maxSeries {
		return gs, 0
	}
	other := newUsageGroup("Other", n)
	other.other = true
	for _, g := range gs[maxSeries-1:] {
		other.add(g)
	}
	return append(slices.Clip(gs[:maxSeries-1]), other), len(gs) - (maxSeries - 1)
}

// groupName labels a series: the model, or the token by its name and
// display prefix (never its secret).
func groupName(by, key string, tokens map[string]string) string {
	switch by {
	case byModel:
		if key == "" {
			return "no model"
		}
		return key
	case byToken:
		if name, ok := tokens[key]; ok {
			return name
		}
		if key == "" || key == "0" {
			return "no token"
		}
		return "token #" + key
	}
	return "All"
}

// tokenNames maps token ids, as the series group them, to the tokens'
// names; a name two tokens share gets each one's display prefix too, as in
// "ci (sk_sluice_AbC123…)".
func tokenNames(toks []models.APIToken) map[string]string {
	seen := make(map[string]int, len(toks))
	for _, t := range toks {
		seen[t.Name]++
	}
	out := make(map[string]string, len(toks))
	for _, t := range toks {
		name := t.Name
		if seen[name] > 1 {
			name += " (" + t.Prefix + "…)"
		}
		out[strconv.FormatInt(t.ID, 10)] = name
	}
	return out
}

func countSeries(name string, values []int64, other bool) templates.Series {
	s := templates.Series{Name: name, Other: other, Values: make([]float64, len(values))}
	for i, v := range values {
		s.Values[i] = float64(v)
	}
	return s
}

// costSeries draws amounts by their float height and labels them exactly.
func costSeries(name string, amounts []money.Amount, other bool) templates.Series {
	s := templates.Series{Name: name, Other: other, Values: make([]float64, len(amounts)), Labels: make([]string, len(amounts))}
	var total money.Amount
	for i, a := range amounts {
		s.Values[i] = drawDollars(a)
		s.Labels[i] = dollars(a)
		total += a
	}
	s.Total = dollars(total)
	return s
}

func sum(a, b []int64) []int64 {
	out := make([]int64, len(a))
	for i := range a {
		out[i] = a[i] + b[i]
	}
	return out
}

// dollars writes an exact amount: "$0.000761", "$10.00", "-$1.50".
func dollars(a money.Amount) string {
	if a < 0 {
		return "-$" + (-a).String()
	}
	return "$" + a.String()
}

// cents writes an amount rounded half-up to the cent, as invoices do.
func cents(a money.Amount) string {
	if s := a.StringCents(); s[0] == '-' {
		return "-$" + s[1:]
	}
	return "$" + a.StringCents()
}
