package main

import (
	"context"
	"github.com/sluicehq/sluice/internal/testsync"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

var listening = regexp.MustCompile(`listening on (http://\S+)`)

func TestRunServesAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &testsync.Buffer{}
	env := map[string]string{"MOCKUPSTREAM_KEYS": "sk-env=5"}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-latency", "1ms"}, func(k string) string { return env[k] }, out)
	}()

	var url string
	for deadline := time.Now().Add(5 * time.Second); url == ""; time.Sleep(5 * time.Millisecond) {
		if m := listening.FindStringSubmatch(out.String()); m != nil {
			url = m[1]
		}
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v\n%s", err, out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no URL printed:\n%s", out)
		}
	}

	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer sk-env")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "mock reply to: hi") || resp.Header.Get("x-ratelimit-limit-requests") != "300" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		args    []string
		env     map[string]string
		wantErr string
	}{
		{args: nil},
		{args: []string{"-keys", "sk-a=1.5, sk-b=0"}},
		{args: []string{"-keys", "sk-a"}, wantErr: "-keys"},
		{args: []string{"-keys", "sk-a=-1"}, wantErr: "-keys"},
		{args: []string{"-fail", "1.5"}, wantErr: "-fail"},
		{args: []string{"-burst", "-1"}, wantErr: "-burst"},
		{env: map[string]string{"MOCKUPSTREAM_BURST": "5", "MOCKUPSTREAM_NO_LIMIT_HEADERS": "true"}},
		{env: map[string]string{"MOCKUPSTREAM_LATENCY": "soon"}, wantErr: "MOCKUPSTREAM_LATENCY"},
		{args: []string{"extra"}, wantErr: "unexpected"},
	}
	for _, tt := range tests {
		_, _, err := parseFlags(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
		if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%q %v: error %v, want %q", tt.args, tt.env, err, tt.wantErr)
		}
	}
	_, cfg, _ := parseFlags([]string{"-keys", "sk-a=1.5, sk-b=0", "-fail", "0.1"}, func(string) string { return "" }, io.Discard)
	if cfg.Keys["sk-a"] != 1.5 || cfg.Keys["sk-b"] != 0 || len(cfg.Keys) != 2 || cfg.FailureRate != 0.1 || cfg.StreamChunks != 4 || cfg.Burst != 0 {
		t.Errorf("config %+v", cfg)
	}
	_, cfg, _ = parseFlags([]string{"-keys", "sk-a=25", "-burst", "5", "-no-limit-headers"}, func(string) string { return "" }, io.Discard)
	if cfg.Burst != 5 || !cfg.OmitLimitHeaders {
		t.Errorf("config %+v, want burst 5 without limit headers", cfg)
	}
}
