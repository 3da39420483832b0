// Command pagebench measures how fast Sluice answers its pages and
// management API under a steady load from a signed-in user: for each path
// it sends requests at a fixed rate for a while (open loop, with vegeta)
// and prints a Markdown table of latency percentiles. Paths under /api/ are
// sent with the session as a bearer token; pages with it as the session
// cookie.
//
//	pagebench -base http://127.0.0.1:8080 -session "$JWT" -rate 20 -duration 10s \
//	          /dashboard '/api/usage/series?granularity=day&group_by=model'
//
// Every flag may also be set as PAGEBENCH_<FLAG> (e.g. PAGEBENCH_SESSION,
// which keeps the token out of the shell history). It only talks to
// loopback addresses.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "pagebench:", err)
		os.Exit(1)
	}
}

type config struct {
	base     string
	session  string
	rate     int
	duration time.Duration
	paths    []string
}

func parse(args []string, getenv func(string) string) (config, error) {
	var c config
	fs := flag.NewFlagSet("pagebench", flag.ContinueOnError)
	env := func(name, def string) string {
		if v := getenv("PAGEBENCH_" + strings.ToUpper(name)); v != "" {
			return v
		}
		return def
	}
	fs.StringVar(&c.base, "base", env("base", "http://127.0.0.1:8080"), "Sluice's base URL (loopback only)")
	fs.StringVar(&c.session, "session", env("session", ""), "a session token (from POST /api/auth/login)")
	fs.IntVar(&c.rate, "rate", 20, "requests per second per path")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long each path is loaded")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.paths = fs.Args()
	u, err := url.Parse(c.base)
	switch {
	case err != nil || u.Host == "":
		return c, fmt.Errorf("-base %q is not a URL", c.base)
	case !loopback(u.Hostname()):
		return c, fmt.Errorf("-base %q is not a loopback address", c.base)
	case c.session == "":
		return c, errors.New("-session is required: a token from POST /api/auth/login")
	case len(c.paths) == 0:
		return c, errors.New("name at least one path to load, e.g. /dashboard")
	case c.rate < 1 || c.duration <= 0:
		return c, errors.New("-rate and -duration must be positive")
	}
	return c, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// result is what one path's run saw.
type result struct {
	path               string
	requests, failures int
	p50, p95, p99, max time.Duration
}

func run(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	c, err := parse(args, getenv)
	if err != nil {
		return err
	}
	client := &http.Client{
		Timeout:       10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	var results []result
	for _, p := range c.paths {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		results = append(results, load(ctx, client, c, p))
	}
	fmt.Fprintf(out, "| path | requests | failed | p50 | p95 | p99 | max |\n|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(out, "| `%s` | %d | %d | %s | %s | %s | %s |\n", r.path, r.requests, r.failures,
			ms(r.p50), ms(r.p95), ms(r.p99), ms(r.max))
	}
	return nil
}

// load sends c.rate requests a second to path for c.duration.
func load(ctx context.Context, client *http.Client, c config, path string) result {
	h := http.Header{}
	if strings.HasPrefix(path, "/api/") {
		h.Set("Authorization", "Bearer "+c.session)
	} else {
		h.Set("Cookie", "sluice_session="+c.session)
	}
	atk := vegeta.NewAttacker(vegeta.Client(client), vegeta.MaxBody(0))
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()
	target := vegeta.NewStaticTargeter(vegeta.Target{Method: "GET", URL: strings.TrimRight(c.base, "/") + path, Header: h})
	r := result{path: path}
	var lat []time.Duration
	for res := range atk.Attack(target, vegeta.Rate{Freq: c.rate, Per: time.Second}, c.duration, path) {
		r.requests++
		if res.Error != "" || res.Code != http.StatusOK {
			r.failures++
		}
		lat = append(lat, res.Latency)
	}
	slices.Sort(lat)
	r.p50, r.p95, r.p99 = percentile(lat, 50), percentile(lat, 95), percentile(lat, 99)
	if len(lat) > 0 {
		r.max = lat[len(lat)-1]
	}
	return r
}

// percentile of sorted latencies, nearest rank.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[max(i-1, 0)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
