package main

import (
	"context"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// sampleKey names the results of one target under one setting.
type sampleKey struct {
	target  string
	setting setting
}

// sample is what the client saw in one run or, merged, in several.
type sample struct {
	requests  int
	ok        int // answered 2xx
	status429 int
	latencies []time.Duration
	elapsed   time.Duration   // from the first request sent to the last answer
	upstream  *upstreamCounts // nil when -mock-stats is not given
}

// upstreamCounts are what the mock upstream counted during a run.
type upstreamCounts struct {
	requests, status429 int64
}

// attack loads t with s for cfg.duration and returns what it saw. Ending ctx
// stops the attack and cuts off requests in flight.
func attack(ctx context.Context, t target, s setting, cfg config) sample {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		DialContext:         dialer.DialContext,
		MaxIdleConnsPerHost: s.Concurrency,
		IdleConnTimeout:     30 * time.Second,
	}
	defer tr.CloseIdleConnections() // each run starts with fresh connections
	client := &http.Client{
		Timeout: cfg.timeout,
		Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return tr.RoundTrip(r.WithContext(ctx))
		}),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	atk := vegeta.NewAttacker(
		vegeta.Client(client),
		vegeta.Workers(uint64(s.Concurrency)),
		vegeta.MaxWorkers(uint64(s.Concurrency)),
		vegeta.MaxBody(0), // read and discard the body without keeping it
	)
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()

	var smp sample
	var first, last time.Time
	var pacer vegeta.Pacer = vegeta.Rate{Freq: s.Rate, Per: time.Second} // Freq 0: as fast as MaxWorkers allow
	if s.Burst > 1 && s.Rate > 0 {
		pacer = burstPacer{size: uint64(s.Burst), every: time.Duration(s.Burst) * time.Second / time.Duration(s.Rate)}
	}
	for res := range atk.Attack(targeter(t, cfg.path, cfg.auth, cfg.body), pacer, cfg.duration, t.Name) {
		smp.add(res)
		if first.IsZero() || res.Timestamp.Before(first) {
			first = res.Timestamp
		}
		if end := res.End(); end.After(last) {
			last = end
		}
	}
	smp.elapsed = last.Sub(first)
	return smp
}

// burstPacer sends size requests at once every `every`: the arrival
// pattern of clients that work in batches (a cron job, a fan-out), which
// meets a provider's short windows where an even rate would not.
type burstPacer struct {
	size  uint64
	every time.Duration
}

// Pace lets hit number `hits` go at the start of its group's slot.
func (p burstPacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	due := time.Duration(hits/p.size) * p.every
	if due <= elapsed {
		return 0, false
	}
	return due - elapsed, false
}

// Rate is the average rate, for vegeta's worker scaling.
func (p burstPacer) Rate(time.Duration) float64 { return float64(p.size) / p.every.Seconds() }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// targeter sends every request to t's endpoint path with the same body,
// taking t's keys in turn, each sent as auth says.
func targeter(t target, path, auth string, body []byte) vegeta.Targeter {
	headers := make([]http.Header, len(t.Keys))
	for i, k := range t.Keys {
		headers[i] = http.Header{"Authorization": {"Bearer " + k}, "Content-Type": {"application/json"}}
		switch auth {
		case "x-api-key":
			headers[i] = http.Header{"X-Api-Key": {k}, "Anthropic-Version": {"2023-06-01"}, "Content-Type": {"application/json"}}
		case "x-goog-api-key":
			headers[i] = http.Header{"X-Goog-Api-Key": {k}, "Content-Type": {"application/json"}}
		}
	}
	u := t.Base + path
	var n atomic.Uint64
	return func(tgt *vegeta.Target) error {
		i := (n.Add(1) - 1) % uint64(len(headers))
		// vegeta copies the header into each request, so sharing it is safe.
		*tgt = vegeta.Target{Method: http.MethodPost, URL: u, Body: body, Header: headers[i]}
		return nil
	}
}

func (s *sample) add(r *vegeta.Result) {
	s.requests++
	if r.Code >= 200 && r.Code < 300 {
		s.ok++
	}
	if r.Code == http.StatusTooManyRequests {
		s.status429++
	}
	s.latencies = append(s.latencies, r.Latency)
}

// merge adds o to s, as if the two runs were one longer run.
func (s *sample) merge(o sample) {
	s.requests += o.requests
	s.ok += o.ok
	s.status429 += o.status429
	s.latencies = append(s.latencies, o.latencies...)
	s.elapsed += o.elapsed
	if o.upstream != nil {
		if s.upstream == nil {
			s.upstream = &upstreamCounts{}
		}
		s.upstream.requests += o.upstream.requests
		s.upstream.status429 += o.upstream.status429
	}
}

// row summarises s as one line of the table.
func (s *sample) row(name string, st setting) row {
	r := row{Target: name, Concurrency: st.Concurrency, Rate: st.Rate, Burst: st.Burst, Requests: s.requests, Client429: s.status429}
	if s.elapsed > 0 {
		r.QPS = float64(s.ok) / s.elapsed.Seconds()
	}
	if s.requests > 0 {
		r.ErrorRate = 100 * float64(s.requests-s.ok) / float64(s.requests)
	}
	sorted := slices.Clone(s.latencies)
	slices.Sort(sorted)
	r.P50, r.P99 = percentile(sorted, 500), percentile(sorted, 990)
	if s.upstream != nil {
		r.Upstream = &upstreamCounts{requests: s.upstream.requests, status429: s.upstream.status429}
	}
	return r
}

// percentile is the nearest-rank percentile of sorted latencies, given in
// thousandths (990 = p99) so the rank is exact integer arithmetic.
func percentile(sorted []time.Duration, perMille int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := (perMille*len(sorted) + 999) / 1000 // ceil(p * n), 1-based
	return sorted[min(max(rank, 1), len(sorted))-1]
}
