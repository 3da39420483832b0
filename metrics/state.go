package metrics

import "github.com/prometheus/client_golang/prometheus"

// Sample is one value of a state metric, with its label values in order.
type Sample struct {
	Labels []string
	Value  float64
}

// state is a metric read when Prometheus scrapes: fn says what it is now.
type state struct {
	desc *prometheus.Desc
	kind prometheus.ValueType
	fn   func() []Sample
}

// State returns a collector of a metric computed at scrape time by fn: a
// gauge (or a counter, for totals kept elsewhere) with the given labels.
func State(name, help string, kind prometheus.ValueType, labels []string, fn func() []Sample) prometheus.Collector {
	return &state{desc: prometheus.NewDesc(name, help, labels, nil), kind: kind, fn: fn}
}

func (s *state) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

func (s *state) Collect(ch chan<- prometheus.Metric) {
	for _, v := range s.fn() {
		ch <- prometheus.MustNewConstMetric(s.desc, s.kind, v.Value, v.Labels...)
	}
}
