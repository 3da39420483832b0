package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestPagesGetTheSessionTheirWayAndATable(t *testing.T) {
	var cookies, bearers, failures atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/api/") && r.Header.Get("Authorization") == "Bearer jwt":
			bearers.Add(1)
		case r.URL.Path == "/dashboard" && r.Header.Get("Cookie") == "sluice_session=jwt":
			cookies.Add(1)
		default:
			failures.Add(1)
			w.WriteHeader(401)
		}
	}))
	defer srv.Close()
	var out bytes.Buffer
	err := run(context.Background(), []string{"-base", srv.URL, "-session", "jwt", "-rate", "50", "-duration", "200ms",
		"/dashboard", "/api/usage/series"}, func(string) string { return "" }, &out)
	if err != nil {
		t.Fatal(err)
	}
	if cookies.Load() < 5 || bearers.Load() < 5 || failures.Load() != 0 {
		t.Fatalf("cookies %d bearers %d failures %d", cookies.Load(), bearers.Load(), failures.Load())
	}
	if !strings.Contains(out.String(), "| `/dashboard` |") || !strings.Contains(out.String(), "| path | requests | failed | p50 | p95 |") {
		t.Fatalf("table:\n%s", out.String())
	}
}

func TestOnlyLoopbackAndASessionAreAccepted(t *testing.T) {
	for _, args := range [][]string{
		{"-base", "http://example.com", "-session", "x", "/"},
		{"-base", "http://127.0.0.1:1", "/"},
		{"-base", "http://127.0.0.1:1", "-session", "x"},
	} {
		if err := run(context.Background(), args, func(string) string { return "" }, &bytes.Buffer{}); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	if p := percentile([]time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 95); p != 10 {
		t.Fatalf("p95 of 1..10 = %d", p)
	}
}
