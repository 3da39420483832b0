package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/sluicehq/sluice/upstream/mock"
)

// rowRE matches a table row: target, concurrency, rate, requests, ...,
// client 429s, upstream requests, upstream 429s.
var rowRE = regexp.MustCompile(`(?m)^\| (\w+) \| (\d+) \| (\S+) \| (\d+) \| [\d.]+ \| [\d.]+ \| [\d.]+ \| ([\d.]+) \| (\d+) \| (\d+) \| (\d+) \|$`)

func rows(t *testing.T, out string) [][]string {
	t.Helper()
	m := rowRE.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		t.Fatalf("no table rows in:\n%s", out)
	}
	return m
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

func TestRunDirect(t *testing.T) {
	m := mock.New(mock.Config{Keys: map[string]float64{"sk-a": 1000}})
	srv := httptest.NewServer(m)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()

	var out bytes.Buffer
	err := run(ctx, []string{
		"-direct", srv.URL + "/v1", "-direct-key", "sk-a",
		"-concurrency", "10", "-rate", "50", "-duration", "1s",
		"-mock-stats", srv.URL + "/_stats",
	}, func(string) string { return "" }, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	rs := rows(t, out.String())
	if len(rs) != 1 {
		t.Fatalf("%d rows:\n%s", len(rs), out.String())
	}
	r := rs[0]
	n := atoi(r[4])
	if r[1] != "direct" || r[2] != "10" || r[3] != "50/s" || n < 45 || n > 55 {
		t.Errorf("row %q: want direct, 10, 50/s, about 50 requests\n%s", r[0], out.String())
	}
	if r[5] != "0.00" || r[6] != "0" || atoi(r[7]) != n || r[8] != "0" {
		t.Errorf("row %q: want no errors and every request counted upstream", r[0])
	}
	if got := m.Stats().Keys["sk-a"].OK; int(got) != n {
		t.Errorf("mock answered %d, table says %d", got, n)
	}
}

func TestRunInterleavesWithServedProxy(t *testing.T) {
	// A tight bucket on sk-b: round-robin over both keys makes the direct
	// target see 429s; the proxy goes through to the same mock.
	m := mock.New(mock.Config{Keys: map[string]float64{"sk-a": 1000, "sk-b": 1}})
	srv := httptest.NewServer(m)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()

	var out bytes.Buffer
	err := run(ctx, []string{
		"-direct", srv.URL + "/v1", "-direct-keys", "sk-a,sk-b",
		"-serve-proxy", "127.0.0.1:0",
		"-concurrency", "5", "-rate", "40", "-duration", "250ms", "-rounds", "2",
		"-mock-stats", srv.URL + "/_stats",
	}, func(string) string { return "" }, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	var order []string
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[0] == "run" {
			order = append(order, f[4])
		}
	}
	if strings.Join(order, " ") != "direct proxy direct proxy" {
		t.Errorf("run order %q\n%s", order, out.String())
	}
	rs := rows(t, out.String())
	if len(rs) != 2 || rs[0][1] != "direct" || rs[1][1] != "proxy" {
		t.Fatalf("rows:\n%s", out.String())
	}
	for _, r := range rs {
		if n := atoi(r[4]); n < 12 || n > 24 || atoi(r[6]) == 0 || r[6] != r[8] || atoi(r[7]) != n {
			t.Errorf("row %q: want about 20 requests, some 429s seen by client and upstream alike", r[0])
		}
	}
	if st := m.Stats(); st.Total.Requests != int64(atoi(rs[0][4])+atoi(rs[1][4])) {
		t.Errorf("mock saw %d requests", st.Total.Requests)
	}
}

// -pause leaves the machine quiet between runs: no request reaches the
// upstream within the pause after a run ends.
func TestPauseSeparatesRuns(t *testing.T) {
	m := mock.New(mock.Config{Keys: map[string]float64{"sk-a": 1000}})
	var mu sync.Mutex
	var arrivals []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
		m.ServeHTTP(w, r)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	const pause = 400 * time.Millisecond
	var out bytes.Buffer
	err := run(ctx, []string{"-direct", srv.URL + "/v1", "-direct-key", "sk-a", "-concurrency", "2", "-rate", "40",
		"-duration", "250ms", "-rounds", "2", "-pause", pause.String()}, func(string) string { return "" }, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	mu.Lock()
	defer mu.Unlock()
	var widest time.Duration
	for i := 1; i < len(arrivals); i++ {
		widest = max(widest, arrivals[i].Sub(arrivals[i-1]))
	}
	if len(arrivals) < 10 || widest < pause {
		t.Fatalf("%d requests, widest gap between two %v: want two runs %v apart\n%s", len(arrivals), widest, pause, out.String())
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		args    string
		wantErr string
	}{
		{"-direct http://127.0.0.1:9090/v1 -direct-key sk-a", ""},
		{"-sluice http://localhost:8080/v1 -sluice-key sk_sluice_x -concurrency 1,2 -rate 0,100", ""},
		{"-direct http://[::1]:9090/v1 -direct-keys sk-a,sk-b -serve-proxy :0", ""},
		{"", "nothing to load"},
		{"-direct http://127.0.0.1:9090/v1", "-direct needs -direct-key"},
		{"-direct http://127.0.0.1:9090/v1 -direct-key a -direct-keys a,b", "not both"},
		{"-direct http://example.com/v1 -direct-key a", "not a loopback"},
		{"-direct http://example.com/v1 -direct-key a -allow-remote", ""},
		{"-sluice ftp://127.0.0.1/v1 -sluice-key k", "not an http(s) URL"},
		{"-direct http://127.0.0.1:1/v1 -direct-key a -concurrency 0", "-concurrency"},
		{"-direct http://127.0.0.1:1/v1 -direct-key a -rate -5", "-rate"},
		{"-direct http://127.0.0.1:1/v1 -direct-key a -body {", "not valid JSON"},
		{"-direct http://127.0.0.1:1/v1 -direct-key a -rate 40 -burst 20", ""},
		{"-direct http://127.0.0.1:1/v1 -direct-key a -rate 0,40 -burst 20", "-burst needs"},
		{"-direct http://127.0.0.1:1/v1 -direct-key a -rate 40 -burst -1", "-burst"},
		{"-direct http://127.0.0.1:1/v1 -direct-key a -mock-stats http://10.0.0.1/_stats", "-mock-stats"},
	}
	for _, tt := range tests {
		_, err := parseFlags(strings.Fields(tt.args), func(string) string { return "" }, io.Discard)
		if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%q: error %v, want %q", tt.args, err, tt.wantErr)
		}
	}
	env := map[string]string{"LOADGEN_SLUICE_KEY": "s", "LOADGEN_CONCURRENCY": "7"}
	cfg, err := parseFlags(strings.Fields("-direct http://127.0.0.1:9090/v1/ -direct-keys sk-a,sk-b -sluice http://127.0.0.1:8080/v1 -proxy http://127.0.0.1:9091/v1 -concurrency 50,100 -rate 0,1000 -model m -stream"),
		func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if names := targetNames(cfg.targets); names != "direct, sluice, proxy" || cfg.targets[0].Base != "http://127.0.0.1:9090/v1" ||
		strings.Join(cfg.targets[2].Keys, ",") != "sk-a,sk-b" || cfg.targets[1].Keys[0] != "s" || len(cfg.settings) != 4 ||
		cfg.settings[1] != (setting{Concurrency: 50, Rate: 1000}) || !strings.Contains(string(cfg.body), `"model":"m"`) || !strings.Contains(string(cfg.body), `"stream":true`) {
		t.Errorf("config %+v body %s", cfg, cfg.body)
	}
}

// TestBurstPacer: -rate 40 -burst 20 sends 20 requests at once every
// 500 ms.
func TestBurstPacer(t *testing.T) {
	p := burstPacer{size: 20, every: 500 * time.Millisecond}
	for _, tt := range []struct {
		elapsed time.Duration
		hits    uint64
		wait    time.Duration
	}{
		{0, 0, 0}, {time.Millisecond, 19, 0}, // the first burst, all at once
		{2 * time.Millisecond, 20, 498 * time.Millisecond}, // the 21st waits for the next slot
		{500 * time.Millisecond, 20, 0}, {510 * time.Millisecond, 39, 0},
		{700 * time.Millisecond, 40, 300 * time.Millisecond},
		{1200 * time.Millisecond, 40, 0}, // late: at once
	} {
		if wait, stop := p.Pace(tt.elapsed, tt.hits); wait != tt.wait || stop {
			t.Errorf("Pace(%s, %d) = %s %v, want %s", tt.elapsed, tt.hits, wait, stop, tt.wait)
		}
	}
	if r := p.Rate(0); r != 40 {
		t.Errorf("Rate = %g, want 40", r)
	}
	if got := rateString(40, 20); got != "40/s, 20 at once" {
		t.Errorf("rateString = %q", got)
	}
}

// -path and -auth send each request to another dialect's endpoint with
// its key where that API reads it.
func TestTargeterSendsPathAndAuth(t *testing.T) {
	var tgt vegeta.Target
	tr := targeter(target{Base: "http://127.0.0.1:1/v1", Keys: []string{"k1", "k2"}}, "/messages", "x-api-key", []byte(`{}`))
	for _, want := range []string{"k1", "k2"} {
		if err := tr(&tgt); err != nil {
			t.Fatal(err)
		}
		if tgt.URL != "http://127.0.0.1:1/v1/messages" || tgt.Header.Get("X-Api-Key") != want || tgt.Header.Get("Authorization") != "" {
			t.Fatalf("target %s %v", tgt.URL, tgt.Header)
		}
	}
	if _, err := parseFlags([]string{"-direct", "http://127.0.0.1:1/v1", "-direct-key", "k", "-auth", "basic"}, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), "give bearer, x-api-key or x-goog-api-key") {
		t.Fatalf("-auth basic: %v", err)
	}
}
