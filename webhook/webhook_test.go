package webhook

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestOnlyAllowedHostsAreCalled(t *testing.T) {
	h := ParseHosts(" hooks.example.com, *.acme.io ,")
	for _, u := range []string{"https://hooks.example.com/x", "http://HOOKS.example.com:8443/y", "https://a.b.acme.io/z"} {
		if err := h.Check(u); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
	refused := map[string]string{
		"https://169.254.169.254/latest/meta-data": "not among the hosts",
		"https://acme.io/":                         "not among the hosts", // the wildcard is for subdomains
		"https://evil-acme.io/":                    "not among the hosts",
		"https://hooks.example.com.evil.io/":       "not among the hosts",
		"ftp://hooks.example.com/":                 "not an http(s) URL",
		"https://user:pw@hooks.example.com/":       "not an http(s) URL",
		"not a url":                                "not an http(s) URL",
	}
	for u, want := range refused {
		if err := h.Check(u); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", u, err, want)
		}
	}
	if err := (Hosts{}).Check("https://hooks.example.com/"); !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), "webhooks are off") {
		t.Fatalf("empty list: %v", err)
	}
}

func TestSendSignsAndDoesNotFollowRedirects(t *testing.T) {
	var hits atomic.Int32
	var got *http.Request
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "http://169.254.169.254/", http.StatusFound)
			return
		}
		got, body = r, must(io.ReadAll(r.Body))
	}))
	defer srv.Close()
	now := time.Unix(1_800_000_000, 0)
	s := NewSender(Hosts{"127.0.0.1"}, func() time.Time { return now })
	payload := []byte(`{"type":"budget.threshold"}`)
	if err := s.Send(context.Background(), srv.URL+"/hook", "whsec_test", payload); err != nil {
		t.Fatal(err)
	}
	if string(body) != string(payload) || got.Header.Get("X-Sluice-Webhook-Timestamp") != "1800000000" ||
		got.Header.Get("X-Sluice-Webhook-Signature") != Sign("whsec_test", now, payload) {
		t.Fatalf("%v %s", got.Header, body)
	}
	// The signature is HMAC-SHA256 over "timestamp.body", as documented.
	// (openssl: printf '1800000000.b' | openssl dgst -sha256 -hmac k)
	if got := Sign("k", now, []byte("b")); got != "sha256=be053e11608af4ff7f8530a2d73795af08e32c77f8f6b2e17e67a70045e12928" {
		t.Fatalf("signature %s", got)
	}
	hits.Store(0)
	err := s.Send(context.Background(), srv.URL+"/redirect", "whsec_test", payload)
	if err == nil || !strings.Contains(err.Error(), "302") {
		t.Fatalf("a redirect must not be followed: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
