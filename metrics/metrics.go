// Package metrics is what Sluice tells Prometheus. Gateway holds the
// request path's counters and histograms; the state an operator pages on
// (freezes, refill, limiter mode, provider keys, queues) is read when
// Prometheus scrapes, by the collectors in state.go. Labels are bounded:
// route templates, status classes, tier and model names, reasons — never a
// token, an organization or a user.
package metrics

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/chat"
)

// Gateway records what requests did. A nil *Gateway records nothing, so
// tests and tools need not build one.
type Gateway struct {
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	tokens     *prometheus.CounterVec
	rejections *prometheus.CounterVec
	cache      *prometheus.CounterVec
	models     modelLabels

	mu      sync.Mutex
	routes  []string        // route templates known before any request (KnowRoutes)
	tiers   func() []string // the tiers now (KnowTiers)
	reasons []string        // the rejection reasons (KnowTiers)
}

// MaxModels bounds the model label. A model becomes a label value once it
// has been answered with a 2xx (a client can name any model, and a key
// serving "*" passes the name to the provider, which refuses it: those
// refusals must not make a series each), up to MaxModels of them; any
// other model is counted as "other".
const MaxModels = 200

// modelLabels are the models that may be label values.
type modelLabels struct {
	known sync.Map // model → struct{}
	n     atomic.Int64
}

// label is model's label value; served says it was answered with a 2xx.
func (m *modelLabels) label(model string, served bool) string {
	if model == "" {
		return ""
	}
	if _, ok := m.known.Load(model); ok {
		return model
	}
	if !served || m.n.Load() >= MaxModels {
		return "other"
	}
	if _, loaded := m.known.LoadOrStore(model, struct{}{}); !loaded {
		m.n.Add(1)
	}
	return model
}

// Buckets of the request histograms: from a cache hit to a long stream.
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

// NewGateway registers the request path's series with reg.
func NewGateway(reg prometheus.Registerer) *Gateway {
	g := &Gateway{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_requests_total",
			Help: "Requests answered, by route template, status class (2xx, 4xx, 5xx), tier and model (empty when none served)."},
			[]string{"route", "status", "tier", "model"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_request_duration_seconds",
			Help:    "Request duration by route and part: total, provider (waiting for and relaying the provider), gateway (total less provider: Sluice's own overhead).",
			Buckets: durationBuckets}, []string{"route", "part"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_tokens_total",
			Help: "Tokens metered, by kind (prompt, completion, cached: prompt tokens the provider served from its cache), tier and model."},
			[]string{"kind", "tier", "model"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_rejections_total",
			Help: "Requests refused with 429, by reason (requests, tokens, frozen, budget) and tier."}, []string{"reason", "tier"}),
		cache: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_cache_requests_total",
			Help: "Cacheable requests by response-cache result (hit, miss)."}, []string{"result"}),
	}
	// The series an alert uses exist at 0 for their known label values
	// from the start, so rate() over them is 0 on a node that has had no
	// such request, not an empty vector.
	reg.MustRegister(zeroed{g.requests, g.zeroRequests}, zeroed{g.duration, g.zeroDurations}, g.tokens,
		zeroed{g.rejections, g.zeroRejections}, g.cache)
	return g
}

// KnowRoutes has the gateway export, for each of routes (templates, as
// Request is given them), sluice_requests_total at 0 for each status
// class (2xx, 4xx, 5xx) and known tier with no model, and
// sluice_request_duration_seconds with no observations for parts total
// and gateway.
func (g *Gateway) KnowRoutes(routes []string) {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.routes = slices.Clone(routes)
	g.mu.Unlock()
}

// KnowTiers has the gateway export sluice_rejections_total at 0 for each
// of reasons and each tier tiers returns, and the requests of KnowRoutes
// for each tier. tiers is read at every scrape, so a new tier's series
// appear with it.
func (g *Gateway) KnowTiers(tiers func() []string, reasons []string) {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.tiers, g.reasons = tiers, slices.Clone(reasons)
	g.mu.Unlock()
}

// known returns what KnowRoutes and KnowTiers said, with the tiers now.
func (g *Gateway) known() (routes, tiers, reasons []string) {
	g.mu.Lock()
	routes, fn, reasons := g.routes, g.tiers, g.reasons
	g.mu.Unlock()
	if fn != nil {
		tiers = fn()
	}
	return routes, tiers, reasons
}

func (g *Gateway) zeroRequests() {
	routes, tiers, _ := g.known()
	for _, r := range routes {
		for _, status := range []string{"2xx", "4xx", "5xx"} {
			for _, t := range tiers {
				g.requests.WithLabelValues(r, status, t, "")
			}
		}
	}
}

func (g *Gateway) zeroDurations() {
	routes, _, _ := g.known()
	for _, r := range routes {
		g.duration.WithLabelValues(r, "total")
		g.duration.WithLabelValues(r, "gateway")
	}
}

func (g *Gateway) zeroRejections() {
	_, tiers, reasons := g.known()
	for _, reason := range reasons {
		for _, t := range tiers {
			g.rejections.WithLabelValues(reason, t)
		}
	}
}

// zeroed is a collector that first makes the series of its known label
// values (fill), which then report 0 until counted.
type zeroed struct {
	prometheus.Collector
	fill func()
}

func (z zeroed) Collect(ch chan<- prometheus.Metric) {
	z.fill()
	z.Collector.Collect(ch)
}

// Request records one answered request. route is the route template ("" for
// no route), model the model asked for ("" for none; see MaxModels),
// provider the part of total spent on a provider.
func (g *Gateway) Request(route string, status int, tier, model string, total, provider time.Duration) {
	if g == nil {
		return
	}
	if route == "" {
		route = "unmatched"
	}
	g.requests.WithLabelValues(route, statusClass(status), tier, g.models.label(model, status >= 200 && status < 300)).Inc()
	g.duration.WithLabelValues(route, "total").Observe(total.Seconds())
	if provider > 0 {
		g.duration.WithLabelValues(route, "provider").Observe(provider.Seconds())
	}
	g.duration.WithLabelValues(route, "gateway").Observe(max(total-provider, 0).Seconds())
}

// Rejected counts a 429 for reason on tier.
func (g *Gateway) Rejected(reason, tier string) {
	if g == nil {
		return
	}
	g.rejections.WithLabelValues(reason, tier).Inc()
}

// Tokens counts a served request's usage.
func (g *Gateway) Tokens(tier, model string, u chat.Usage) {
	if g == nil {
		return
	}
	model = g.models.label(model, true)
	g.tokens.WithLabelValues("prompt", tier, model).Add(float64(u.PromptTokens))
	g.tokens.WithLabelValues("completion", tier, model).Add(float64(u.CompletionTokens))
	if u.CachedTokens > 0 {
		g.tokens.WithLabelValues("cached", tier, model).Add(float64(u.CachedTokens))
	}
}

// Cache counts a response-cache lookup.
func (g *Gateway) Cache(hit bool) {
	if g == nil {
		return
	}
	result := "miss"
	if hit {
		result = "hit"
	}
	g.cache.WithLabelValues(result).Inc()
}

// statusClass is "2xx", "4xx" and so on.
func statusClass(status int) string {
	if status < 100 || status > 599 {
		return "other"
	}
	return statusClasses[status/100-1]
}

// statusClasses are the label values, made once rather than per request.
var statusClasses = [...]string{"1xx", "2xx", "3xx", "4xx", "5xx"}
