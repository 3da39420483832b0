// Command loadgen measures Sluice against the same upstream reached directly,
// in one invocation: it sends chat completions with vegeta to each target in
// turn (direct to the upstream, through Sluice, and optionally through a bare
// httputil.ReverseProxy as a floor for proxy overhead), interleaving the
// targets round by round so machine noise hits all alike, then prints a
// Markdown table per target and setting.
//
//	mockupstream -keys sk-a=25,sk-b=25 &
//	loadgen -direct http://127.0.0.1:9090/v1 -direct-keys sk-a,sk-b \
//	        -sluice http://127.0.0.1:8080/v1 -sluice-key sk_sluice_... \
//	        -mock-stats http://127.0.0.1:9090/_stats -concurrency 50,100,200 -duration 10s
//
// It only talks to loopback addresses unless -allow-remote is given. Every
// flag may also be set as LOADGEN_<FLAG> (upper case, "-" as "_"), e.g.
// LOADGEN_SLUICE_KEY, which keeps the token out of the shell history; a flag
// wins.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/upstream/mock"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

// The target names, in the order each round visits them.
const (
	targetDirect = "direct"
	targetSluice = "sluice"
	targetProxy  = "proxy"
)

// target is one base URL to load and the API keys to send, in turn.
type target struct {
	Name string
	Base string // e.g. http://127.0.0.1:9090/v1
	Keys []string
}

// setting is one load shape: vegeta workers (and max workers), the rate
// per second (0 for as fast as the workers go), and how many requests
// arrive at once (0 or 1: evenly spread).
type setting struct {
	Concurrency int
	Rate        int
	Burst       int
}

// config is loadgen's flags, checked.
type config struct {
	targets     []target // direct, sluice, proxy: those given
	directKeys  []string // for the direct and proxy targets
	direct      string   // the -direct base URL, "" if none
	settings    []setting
	duration    time.Duration
	rounds      int
	pause       time.Duration // quiet time before each run
	body        []byte
	path        string // the endpoint under each base URL, e.g. /chat/completions or /messages
	auth        string // how keys are sent: "bearer" (Authorization) or "x-api-key" (Anthropic's)
	timeout     time.Duration
	mockStats   string // GET URL of the mock's Stats; "" = not measured
	serveProxy  string // ADDR=UPSTREAM of an in-process reverse proxy; "" = none
	allowRemote bool
}

// run loads every target under every setting, prints progress as it goes,
// then the tables. It returns early, with ctx's error, when ctx ends.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cfg, err := parseFlags(args, getenv, stdout)
	if err != nil {
		return err
	}
	if cfg.serveProxy != "" {
		p, err := startProxy(cfg)
		if err != nil {
			return fmt.Errorf("-serve-proxy: %w", err)
		}
		defer p.stop()
		fmt.Fprintf(stdout, "reverse proxy on %s -> %s\n", p.base, p.upstream)
		if !hasTarget(cfg.targets, targetProxy) {
			cfg.targets = append(cfg.targets, target{Name: targetProxy, Base: p.base, Keys: cfg.directKeys})
		}
	}

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	steps := plan(cfg.targets, cfg.settings, cfg.rounds)
	fmt.Fprintf(stdout, "%d runs of %s: targets %s, %d rounds\n", len(steps), cfg.duration, targetNames(cfg.targets), cfg.rounds)
	samples := make(map[sampleKey]*sample)
	for i, st := range steps {
		if i > 0 && cfg.pause > 0 {
			select {
			case <-time.After(cfg.pause):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		var before mock.Stats
		if cfg.mockStats != "" {
			if before, err = fetchStats(ctx, client, cfg.mockStats); err != nil {
				return err
			}
		}
		smp := attack(ctx, st.Target, st.Setting, cfg)
		if err := ctx.Err(); err != nil {
			return err
		}
		if cfg.mockStats != "" {
			after, err := fetchStats(ctx, client, cfg.mockStats)
			if err != nil {
				return err
			}
			smp.upstream = &upstreamCounts{
				requests:  after.Total.Requests - before.Total.Requests,
				status429: after.Total.Status429 - before.Total.Status429,
			}
		}
		r := smp.row(st.Target.Name, st.Setting)
		fmt.Fprintf(stdout, "run %d/%d round %d %-6s c=%d rate=%s: %d requests, %.1f ok/s, p50 %.3f ms, p99 %.3f ms, %.1f%% non-2xx\n",
			i+1, len(steps), st.Round, r.Target, r.Concurrency, rateString(r.Rate, r.Burst), r.Requests, r.QPS, ms(r.P50), ms(r.P99), r.ErrorRate)
		key := sampleKey{st.Target.Name, st.Setting}
		if samples[key] == nil {
			samples[key] = &sample{}
		}
		samples[key].merge(smp)
	}

	var rows []row
	for _, s := range cfg.settings {
		for _, t := range cfg.targets {
			if smp := samples[sampleKey{t.Name, s}]; smp != nil {
				rows = append(rows, smp.row(t.Name, s))
			}
		}
	}
	fmt.Fprintln(stdout)
	writeTable(stdout, rows)
	writeComparison(stdout, rows)
	return nil
}

// step is one run of the plan.
type step struct {
	Round   int
	Target  target
	Setting setting
}

// plan orders the runs: for each setting, the rounds, and in each round every
// target in turn (direct, sluice, proxy, direct, sluice, proxy, ...), so that
// a slow moment of the machine is spread over all targets alike.
func plan(targets []target, settings []setting, rounds int) []step {
	steps := make([]step, 0, len(settings)*rounds*len(targets))
	for _, s := range settings {
		for r := 1; r <= rounds; r++ {
			for _, t := range targets {
				steps = append(steps, step{Round: r, Target: t, Setting: s})
			}
		}
	}
	return steps
}

// fetchStats reads the mock upstream's counters.
func fetchStats(ctx context.Context, client *http.Client, statsURL string) (mock.Stats, error) {
	var st mock.Stats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, statsURL, nil)
	if err != nil {
		return st, fmt.Errorf("-mock-stats: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return st, fmt.Errorf("-mock-stats: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("-mock-stats: GET %s: %s", statsURL, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("-mock-stats: reading %s: %w", statsURL, err)
	}
	return st, nil
}

// parseFlags reads and checks the flags.
func parseFlags(args []string, getenv func(string) string, stdout io.Writer) (config, error) {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var (
		cfg                              config
		direct, directKey, directKeyList string
		sluice, sluiceKey, proxy         string
		concurrency, rates, body, model  string
		stream                           bool
		burst                            int
	)
	fs.StringVar(&direct, "direct", "", "base URL of the upstream reached directly, e.g. http://127.0.0.1:9090/v1")
	fs.StringVar(&directKey, "direct-key", "", "API key for the direct target (and -proxy)")
	fs.StringVar(&directKeyList, "direct-keys", "", "API keys for the direct target, used round-robin like a naive client, e.g. sk-a,sk-b")
	fs.StringVar(&sluice, "sluice", "", "base URL of Sluice, e.g. http://127.0.0.1:8080/v1")
	fs.StringVar(&sluiceKey, "sluice-key", "", "Sluice API token for the sluice target")
	fs.StringVar(&proxy, "proxy", "", "base URL of a bare reverse proxy to the upstream (uses the direct keys)")
	fs.StringVar(&cfg.serveProxy, "serve-proxy", "", "ADDR[=UPSTREAM]: start an in-process httputil.ReverseProxy on ADDR to UPSTREAM (default: the -direct origin) and load it as the proxy target")
	fs.StringVar(&concurrency, "concurrency", "50,100,200", "vegeta workers (= max workers) per setting, comma separated")
	fs.StringVar(&rates, "rate", "0", "requests per second per setting, comma separated; 0 = as fast as the workers go (saturation)")
	fs.IntVar(&burst, "burst", 0, "send requests in groups of this many at once, groups BURST/RATE seconds apart, instead of evenly (needs a -rate above 0); e.g. -rate 40 -burst 20: 20 at once every 500 ms")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "length of each run")
	fs.IntVar(&cfg.rounds, "rounds", 1, "rounds per setting; each round runs every target once, interleaved")
	fs.DurationVar(&cfg.pause, "pause", 0, "quiet time before each run after the first, so work a target does after a run (Sluice stores the last second's usage) does not land in the next target's run")
	fs.StringVar(&body, "body", "", "request body (JSON, or @file); default a small chat request for -model")
	fs.StringVar(&model, "model", "gpt-4o-mini", "model of the default body")
	fs.StringVar(&cfg.path, "path", "/chat/completions", "endpoint under each base URL: /chat/completions, /responses, /embeddings, /messages")
	fs.StringVar(&cfg.auth, "auth", "bearer", "how the keys are sent: bearer (Authorization: Bearer), x-api-key (Anthropic's header) or x-goog-api-key (Gemini's)")
	fs.BoolVar(&stream, "stream", false, "ask for a streamed answer in the default body")
	fs.DurationVar(&cfg.timeout, "timeout", 30*time.Second, "per-request timeout")
	fs.StringVar(&cfg.mockStats, "mock-stats", "", "URL of the mock upstream's GET /_stats, to report the 429s the upstream answered per run")
	fs.BoolVar(&cfg.allowRemote, "allow-remote", false, "allow non-loopback URLs and listen addresses")
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "LOADGEN_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(name); v != "" && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", name, v, err)
			}
		}
	})
	if envErr != nil {
		return cfg, envErr
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.auth != "bearer" && cfg.auth != "x-api-key" && cfg.auth != "x-goog-api-key" {
		return cfg, fmt.Errorf("-auth %q: give bearer, x-api-key or x-goog-api-key", cfg.auth)
	}
	if !strings.HasPrefix(cfg.path, "/") {
		return cfg, fmt.Errorf("-path %q must start with /", cfg.path)
	}

	keys := splitList(directKeyList)
	if directKey != "" && len(keys) > 0 {
		return cfg, errors.New("give -direct-key or -direct-keys, not both")
	} else if directKey != "" {
		keys = []string{directKey}
	}
	cfg.directKeys, cfg.direct = keys, strings.TrimSuffix(direct, "/")
	for _, t := range []struct {
		name, base, flag string
		keys             []string
		keyFlag          string
	}{
		{targetDirect, direct, "-direct", keys, "-direct-key"},
		{targetSluice, sluice, "-sluice", splitList(sluiceKey), "-sluice-key"},
		{targetProxy, proxy, "-proxy", keys, "-direct-key"},
	} {
		if t.base == "" {
			continue
		}
		if err := checkURL(t.base, cfg.allowRemote); err != nil {
			return cfg, fmt.Errorf("%s: %w", t.flag, err)
		}
		if len(t.keys) == 0 {
			return cfg, fmt.Errorf("%s needs %s", t.flag, t.keyFlag)
		}
		cfg.targets = append(cfg.targets, target{Name: t.name, Base: strings.TrimSuffix(t.base, "/"), Keys: t.keys})
	}
	if cfg.serveProxy != "" && direct == "" && !strings.Contains(cfg.serveProxy, "=") {
		return cfg, errors.New("-serve-proxy without =UPSTREAM needs -direct")
	}
	if cfg.serveProxy != "" && len(keys) == 0 {
		return cfg, errors.New("-serve-proxy needs -direct-key or -direct-keys")
	}
	if len(cfg.targets) == 0 && cfg.serveProxy == "" {
		return cfg, errors.New("nothing to load: give -direct, -sluice, -proxy or -serve-proxy")
	}
	if cfg.mockStats != "" {
		if err := checkURL(cfg.mockStats, cfg.allowRemote); err != nil {
			return cfg, fmt.Errorf("-mock-stats: %w", err)
		}
	}

	cs, err := parseInts(concurrency, 1)
	if err != nil {
		return cfg, fmt.Errorf("-concurrency: %w", err)
	}
	rs, err := parseInts(rates, 0)
	if err != nil {
		return cfg, fmt.Errorf("-rate: %w", err)
	}
	if burst < 0 {
		return cfg, errors.New("-burst must not be negative")
	}
	for _, c := range cs {
		for _, r := range rs {
			if burst > 1 && r == 0 {
				return cfg, errors.New("-burst needs every -rate above 0: bursts are spaced by the rate")
			}
			cfg.settings = append(cfg.settings, setting{Concurrency: c, Rate: r, Burst: burst})
		}
	}
	if cfg.duration <= 0 || cfg.rounds < 1 || cfg.timeout <= 0 {
		return cfg, errors.New("-duration and -timeout must be positive, -rounds at least 1")
	}

	switch {
	case body == "":
		cfg.body = defaultBody(model, stream)
	case strings.HasPrefix(body, "@"):
		if cfg.body, err = os.ReadFile(body[1:]); err != nil {
			return cfg, fmt.Errorf("-body: %w", err)
		}
	default:
		cfg.body = []byte(body)
	}
	if !json.Valid(cfg.body) {
		return cfg, errors.New("-body: not valid JSON")
	}
	return cfg, nil
}

// defaultBody is a small chat request, like one a client of sluice-local sends.
func defaultBody(model string, stream bool) []byte {
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	b, _ := json.Marshal(struct {
		Model     string    `json:"model"`
		Messages  []message `json:"messages"`
		MaxTokens int       `json:"max_tokens"`
		Stream    bool      `json:"stream,omitempty"`
	}{model, []message{{"user", "Write a spring couplet about good fortune."}}, 64, stream})
	return b
}

// checkURL accepts an http(s) URL whose host is a loopback address, or any
// host with allowRemote.
func checkURL(raw string, allowRemote bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%q is not an http(s) URL", raw)
	}
	if !allowRemote && !isLoopback(u.Hostname()) {
		return fmt.Errorf("%q is not a loopback address (use -allow-remote to load other hosts)", raw)
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// parseInts reads "50,100,200", each at least least.
func parseInts(s string, least int) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < least {
			return nil, fmt.Errorf("%q: want whole numbers >= %d", f, least)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty")
	}
	return out, nil
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func hasTarget(ts []target, name string) bool {
	for _, t := range ts {
		if t.Name == name {
			return true
		}
	}
	return false
}

func targetNames(ts []target) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Name
	}
	return strings.Join(names, ", ")
}
