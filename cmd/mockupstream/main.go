// Command mockupstream serves the OpenAI-compatible mock upstream of package
// upstream/mock, for trying Sluice against a provider that rate-limits,
// lags and fails on demand, and for the load harness in cmd/loadgen. It
// speaks Anthropic's Messages API too, at POST /v1/messages with the same
// keys as x-api-key: an "anthropic" provider key with the mock's address
// as its base URL; and Azure OpenAI's deployments, key in api-key: an
// "azure" key with base URL <address>/openai/deployments/<name>?api-version=2024-10-21.
//
//	mockupstream -addr 127.0.0.1:9090 -keys sk-a=25,sk-b=25 -latency 200ms -jitter 50ms
//
// With -burst 5, each key still states 1,500 RPM (25/s) in its
// x-ratelimit-limit-requests header but holds only 5 requests: a provider
// enforcing its limit over 200 ms windows.
//
// Every flag may also be set as an environment variable MOCKUPSTREAM_<FLAG>
// (upper case, "-" as "_"), e.g. MOCKUPSTREAM_KEYS; a flag wins.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
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
		fmt.Fprintln(os.Stderr, "mockupstream:", err)
		os.Exit(1)
	}
}

// run serves the mock until ctx ends, then shuts down: requests in flight
// get a few seconds to finish (a stalled one is cut off).
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	addr, cfg, err := parseFlags(args, getenv, stdout)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mock.New(cfg), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	keys := make([]string, 0, len(cfg.Keys))
	for k, rps := range cfg.Keys {
		keys = append(keys, fmt.Sprintf("%s=%g/s", k, rps))
	}
	if cfg.Burst > 0 {
		keys = append(keys, fmt.Sprintf("(burst %d)", cfg.Burst))
	}
	sort.Strings(keys)
	url := "http://" + ln.Addr().String()
	fmt.Fprintf(stdout, "mock upstream listening on %s (base URL %s/v1, stats %s/_stats; keys %s)\n",
		url, url, url, strings.Join(keys, " "))

	select {
	case err := <-served:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	fmt.Fprintln(stdout, "mock upstream stopped")
	return nil
}

// parseFlags reads the listen address and the mock's configuration.
func parseFlags(args []string, getenv func(string) string, stdout io.Writer) (string, mock.Config, error) {
	fs := flag.NewFlagSet("mockupstream", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var (
		cfg  mock.Config
		keys string
	)
	addr := fs.String("addr", "127.0.0.1:9090", "listen address")
	fs.StringVar(&keys, "keys", "sk-a=25,sk-b=25", "accepted API keys as KEY=RPS,... (requests per second per key, burst max(1, RPS); 0 = unlimited)")
	fs.IntVar(&cfg.Burst, "burst", 0, "requests each limited key's bucket holds, instead of max(1, RPS): a provider enforcing its per-minute limit over short windows (0 = max(1, RPS))")
	fs.BoolVar(&cfg.OmitLimitHeaders, "no-limit-headers", false, "send no x-ratelimit-* headers (a 429 still carries Retry-After)")
	fs.DurationVar(&cfg.Latency, "latency", 0, "added before every admitted answer")
	fs.DurationVar(&cfg.Jitter, "jitter", 0, "latency varies uniformly by ± this much")
	fs.Float64Var(&cfg.FailureRate, "fail", 0, "fraction of admitted requests answered 500 (0-1)")
	fs.Int64Var(&cfg.Seed, "seed", 1, "seed for jitter and failures")
	fs.IntVar(&cfg.StreamChunks, "stream-chunks", 4, "content deltas in a streamed answer")
	fs.DurationVar(&cfg.ChunkDelay, "chunk-delay", 0, "pause between two content deltas")
	fs.StringVar(&cfg.Billing, "bill", mock.BillTokens, "how usage is counted: tokens (o200k_base over the whole body, as a provider bills) or words (free: for load runs, so the mock's counting does not hide the gateway's time)")
	fs.IntVar(&cfg.AnswerTokens, "answer-tokens", 0, "tokens an answer runs to when the request sets no max_tokens (0: one line)")
	fs.DurationVar(&cfg.UsageDelay, "usage-delay", 0, "how long a stream's usage chunk comes after its last word")

	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "MOCKUPSTREAM_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(name); v != "" && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", name, v, err)
			}
		}
	})
	if envErr != nil {
		return "", cfg, envErr
	}
	if err := fs.Parse(args); err != nil {
		return "", cfg, err
	}
	if fs.NArg() > 0 {
		return "", cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if cfg.Keys, err = parseKeys(keys); err != nil {
		return "", cfg, fmt.Errorf("-keys: %w", err)
	}
	if cfg.FailureRate < 0 || cfg.FailureRate > 1 {
		return "", cfg, fmt.Errorf("-fail: %g is not between 0 and 1", cfg.FailureRate)
	}
	if cfg.Burst < 0 {
		return "", cfg, fmt.Errorf("-burst: %d is negative", cfg.Burst)
	}
	if cfg.Latency < 0 || cfg.Jitter < 0 || cfg.ChunkDelay < 0 || cfg.UsageDelay < 0 {
		return "", cfg, errors.New("-latency, -jitter, -chunk-delay and -usage-delay must not be negative")
	}
	if cfg.Billing != mock.BillTokens && cfg.Billing != mock.BillWords {
		return "", cfg, fmt.Errorf("-bill: %q is not tokens or words", cfg.Billing)
	}
	if cfg.AnswerTokens < 0 || cfg.AnswerTokens > 1_000_000 {
		return "", cfg, fmt.Errorf("-answer-tokens: %d is not from 0 to 1000000", cfg.AnswerTokens)
	}
	return *addr, cfg, nil
}

// parseKeys reads "sk-a=25,sk-b=0.5".
func parseKeys(s string) (map[string]float64, error) {
	keys := make(map[string]float64)
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%q: want KEY=RPS", part)
		}
		rps, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(rps >= 0) {
			return nil, fmt.Errorf("%q: RPS must be a number >= 0", part)
		}
		keys[strings.TrimSpace(k)] = rps
	}
	if len(keys) == 0 {
		return nil, errors.New("no keys")
	}
	return keys, nil
}
