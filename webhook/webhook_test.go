package webhook

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
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

func TestAddressesInsideAreRefused(t *testing.T) {
	refused := map[string]string{
		"127.0.0.1": "loopback", "127.8.9.10": "loopback", "::1": "loopback", "::ffff:127.0.0.1": "loopback",
		"10.1.2.3": "private", "172.16.0.1": "private", "172.31.255.255": "private", "192.168.1.1": "private",
		"fc00::1": "private", "fd12:3456::1": "private", "::ffff:10.0.0.1": "private",
		"169.254.1.1": "link-local", "fe80::1": "link-local",
		"100.64.0.1": "shared (CGNAT)", "100.127.255.254": "shared (CGNAT)",
		"0.0.0.0": "unspecified", "::": "unspecified", "0.1.2.3": "this-network",
		"224.0.0.1": "multicast", "239.255.255.250": "multicast", "ff02::1": "multicast",
		"255.255.255.255": "reserved or broadcast", "240.0.0.1": "reserved or broadcast",
		"169.254.169.254": "cloud metadata", "::ffff:169.254.169.254": "cloud metadata", "fd00:ec2::254": "cloud metadata",
		"100.100.100.200": "cloud metadata", "169.254.170.2": "cloud metadata",
		"64:ff9b::a9fe:a9fe": "cloud metadata", "2002:7f00:1::": "loopback", // NAT64 and 6to4 carry an IPv4 address
	}
	for s, want := range refused {
		if got := Refused(netip.MustParseAddr(s)); got != want {
			t.Errorf("%s: %q, want %q", s, got, want)
		}
	}
	for _, s := range []string{"93.184.216.34", "8.8.8.8", "100.128.0.1", "172.32.0.1", "2606:4700::1111", "::ffff:1.1.1.1"} {
		if got := Refused(netip.MustParseAddr(s)); got != "" {
			t.Errorf("%s is public, refused as %q", s, got)
		}
	}
}

// dns is a lookup the test can point anywhere, between calls.
type dns struct{ addr atomic.Value }

func (d *dns) point(s string) { d.addr.Store(netip.MustParseAddr(s)) }

func (d *dns) lookup(_ context.Context, host string) ([]netip.Addr, error) {
	if host != "hooks.example.com" {
		return nil, errors.New("no such host")
	}
	return []netip.Addr{d.addr.Load().(netip.Addr)}, nil
}

func TestSavedURLsAreCheckedAfterResolution(t *testing.T) {
	d := &dns{}
	s := NewSender(Options{Hosts: Hosts{"hooks.example.com", "10.0.0.5", "*.example.com"}, Lookup: d.lookup})
	ctx := context.Background()
	d.point("93.184.216.34")
	if err := s.Check(ctx, "https://hooks.example.com/cb"); err != nil {
		t.Fatalf("a public address: %v", err)
	}
	cases := map[string]string{
		"http://hooks.example.com/cb":  "https only (SLUICE_WEBHOOK_ALLOW_HTTP=true allows http",
		"https://10.0.0.5/cb":          "10.0.0.5 resolves to 10.0.0.5, a private address",
		"https://other.example.com/cb": "other.example.com does not resolve",
		"https://hooks.example.org/cb": "not among the hosts",
	}
	for u, want := range cases {
		if err := s.Check(ctx, u); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", u, err, want)
		}
	}
	for addr, want := range map[string]string{"127.0.0.1": "127.0.0.1, a loopback address", "169.254.169.254": "169.254.169.254, a cloud metadata address",
		"::ffff:192.168.0.1": "192.168.0.1, a private address"} {
		d.point(addr)
		err := s.Check(ctx, "https://hooks.example.com/cb")
		if !errors.Is(err, ErrPrivate) || !strings.Contains(err.Error(), "hooks.example.com resolves to "+want) {
			t.Errorf("resolving to %s: %v", addr, err)
		}
	}
	// The development switches.
	d.point("127.0.0.1")
	dev := NewSender(Options{Hosts: Hosts{"hooks.example.com"}, AllowPrivate: true, AllowHTTP: true, Lookup: d.lookup})
	if err := dev.Check(ctx, "http://hooks.example.com/cb"); err != nil {
		t.Fatalf("allowed private and http: %v", err)
	}
}

// TestRebindingIsRefusedWhenConnecting: the name passed the check when it
// was saved, then points inside; the connection is refused as it is made.
func TestRebindingIsRefusedWhenConnecting(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":"):]
	hook := "http://hooks.example.com" + port + "/cb?token=secret-in-query"
	d := &dns{}
	s := NewSender(Options{Hosts: Hosts{"hooks.example.com"}, AllowHTTP: true, Lookup: d.lookup})
	ctx := context.Background()
	d.point("93.184.216.34")
	if err := s.Check(ctx, hook); err != nil {
		t.Fatalf("saved: %v", err)
	}
	for addr, want := range map[string]string{"127.0.0.1": "127.0.0.1 is a loopback address", "169.254.169.254": "169.254.169.254 is a cloud metadata address",
		"::ffff:127.0.0.1": "127.0.0.1 is a loopback address"} {
		d.point(addr)
		err := s.Post(ctx, hook, "whsec_test", []byte(`{}`))
		if !errors.Is(err, ErrPrivate) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "secret-in-query") {
			t.Errorf("rebound to %s: %v", addr, err)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("the loopback listener was reached %d times", hits.Load())
	}
	// The same sender allowed private addresses reaches it: the refusal
	// above is the address check, nothing else.
	d.point("127.0.0.1")
	dev := NewSender(Options{Hosts: Hosts{"hooks.example.com"}, AllowHTTP: true, AllowPrivate: true, Lookup: d.lookup})
	if err := dev.Post(ctx, hook, "whsec_test", []byte(`{}`)); err != nil || hits.Load() != 1 {
		t.Fatalf("allowed private: %v, hits %d", err, hits.Load())
	}
}

// A proxy from the environment would connect in Sluice's place, past the
// address check: it is not used.
func TestProxiesFromTheEnvironmentAreNotUsed(t *testing.T) {
	var direct, proxied atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { direct.Add(1) }))
	defer srv.Close()
	proxy := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { proxied.Add(1) }))
	defer proxy.Close()
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("HTTPS_PROXY", proxy.URL)
	d := &dns{}
	d.point("127.0.0.1")
	s := NewSender(Options{Hosts: Hosts{"hooks.example.com"}, AllowHTTP: true, AllowPrivate: true, Lookup: d.lookup})
	port := srv.URL[strings.LastIndex(srv.URL, ":"):]
	if err := s.Post(context.Background(), "http://hooks.example.com"+port+"/cb", "k", []byte(`{}`)); err != nil || direct.Load() != 1 || proxied.Load() != 0 {
		t.Fatalf("%v: direct %d, proxied %d", err, direct.Load(), proxied.Load())
	}
}

func TestPostSignsAndDoesNotFollowRedirects(t *testing.T) {
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
	// The test server listens on loopback over http: both allowed here.
	s := NewSender(Options{Hosts: Hosts{"127.0.0.1"}, AllowPrivate: true, AllowHTTP: true, Now: func() time.Time { return now }})
	payload := []byte(`{"type":"budget.threshold"}`)
	if err := s.Post(context.Background(), srv.URL+"/hook", "whsec_test", payload); err != nil {
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
	err := s.Post(context.Background(), srv.URL+"/redirect", "whsec_test", payload)
	if err == nil || !strings.Contains(err.Error(), "302") || hits.Load() != 1 {
		t.Fatalf("a redirect must not be followed: %v", err)
	}
}

func TestRedactHidesTheQuery(t *testing.T) {
	if got := Redact("https://hooks.example.com/cb?token=s3cret#x"); got != "https://hooks.example.com/cb?…" {
		t.Fatal(got)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
