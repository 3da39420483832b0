// Package webhook posts signed JSON to customers' URLs: budget alerts and
// job callbacks. Only hosts the operator allows are ever called, over
// https, and only at public addresses: the address is checked as the
// connection is made, after resolution, every time, so neither a name
// under an allowed wildcard that points inside nor DNS rebinding reaches
// the operator's network (no SSRF). Redirects are not followed, proxies
// from the environment are not used, and every body is signed so the
// receiver can tell it came from Sluice and when.
//
// The check is a net.Dialer Control function of our own rather than
// Stripe's smokescreen: smokescreen is a whole egress proxy (its own
// process, ACL file and configuration); Sluice needs one rule on one
// client, and Control sees exactly the address the kernel is about to
// connect to.
//
// Signature: X-Sluice-Webhook-Signature is "sha256=" + hex(HMAC-SHA256(
// secret, timestamp + "." + body)) with X-Sluice-Webhook-Timestamp the unix
// seconds of the send; receivers should refuse timestamps more than five
// minutes old. The names are not request signing's X-Sluice-Signature and
// X-Sluice-Timestamp: another secret, another signed string.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The headers a signed POST carries.
const (
	HeaderSignature = "X-Sluice-Webhook-Signature"
	HeaderTimestamp = "X-Sluice-Webhook-Timestamp"
)

// Hosts is the operator's allow-list: exact host names, or "*.example.com"
// for any subdomain of example.com. Empty allows nothing.
type Hosts []string

// ParseHosts reads a comma-separated allow-list.
func ParseHosts(s string) Hosts {
	var h Hosts
	for _, p := range strings.Split(s, ",") {
		if p = strings.ToLower(strings.TrimSpace(p)); p != "" {
			h = append(h, p)
		}
	}
	return h
}

// ErrNotAllowed is returned for a URL whose host the operator does not allow.
var ErrNotAllowed = errors.New("webhook: host not allowed")

// Check says whether raw is a URL Sluice may call: http or https, no user
// info, and a host on the list.
func (h Hosts) Check(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return fmt.Errorf("webhook: %q is not an http(s) URL", raw)
	}
	host := strings.ToLower(u.Hostname())
	for _, allowed := range h {
		if host == allowed || strings.HasPrefix(allowed, "*.") && strings.HasSuffix(host, allowed[1:]) {
			return nil
		}
	}
	if len(h) == 0 {
		return fmt.Errorf("%w: webhooks are off (the operator allows no hosts; see SLUICE_WEBHOOK_HOSTS)", ErrNotAllowed)
	}
	return fmt.Errorf("%w: %s is not among the hosts the operator allows", ErrNotAllowed, host)
}

// NewSecret makes a signing secret to show its owner once.
func NewSecret() string { return "whsec_" + rand.Text() }

// Sign is the signature of body sent at ts with secret.
func Sign(secret string, ts time.Time, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(strconv.FormatInt(ts.Unix(), 10)))
	m.Write([]byte("."))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Options are the operator's rules for where webhooks may go.
type Options struct {
	Hosts Hosts
	// AllowPrivate lets webhooks reach loopback, private, link-local and
	// the other non-public addresses: for development only.
	AllowPrivate bool
	// AllowHTTP lets webhooks go over plain http: for development only.
	AllowHTTP bool
	// Lookup resolves a host name; nil is the system's resolver. Tests
	// inject one to play DNS tricks.
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	Now    func() time.Time
}

// Sender posts signed bodies to allowed hosts at public addresses.
type Sender struct {
	opts   Options
	client *http.Client
}

// NewSender returns a sender under opts. Its client times out after 10 s,
// never follows redirects (a redirect could lead off the allow-list), never
// uses a proxy from the environment (the proxy, not Sluice, would connect,
// past the address check), and checks every address it connects to.
func NewSender(opts Options) *Sender {
	if opts.Lookup == nil {
		opts.Lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Sender{opts: opts}
	s.client = &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{Proxy: nil, DialContext: s.dial, TLSHandshakeTimeout: 5 * time.Second,
			MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return s
}

// Hosts is the sender's allow-list.
func (s *Sender) Hosts() Hosts { return s.opts.Hosts }

// Check says whether rawURL may be saved as a webhook or callback: https
// (or http when allowed), a host on the list, and every address it
// resolves to now public. The dial checks the address again each time.
func (s *Sender) Check(ctx context.Context, rawURL string) error {
	u, err := s.allowed(rawURL)
	if err != nil {
		return err
	}
	if s.opts.AllowPrivate {
		return nil
	}
	host := u.Hostname()
	addrs, err := s.resolve(ctx, host)
	if err != nil {
		return fmt.Errorf("%w: %s does not resolve (%v)", ErrNotAllowed, host, err)
	}
	for _, a := range addrs {
		if why := Refused(a); why != "" {
			return fmt.Errorf("%w: %s resolves to %s, a %s address (SLUICE_WEBHOOK_ALLOW_PRIVATE=true allows it, for development only)",
				ErrPrivate, host, a.Unmap(), why)
		}
	}
	return nil
}

// allowed checks what can be checked without the network.
func (s *Sender) allowed(rawURL string) (*url.URL, error) {
	if err := s.opts.Hosts.Check(rawURL); err != nil {
		return nil, err
	}
	u, _ := url.Parse(rawURL) // Check parsed it
	if u.Scheme != "https" && !s.opts.AllowHTTP {
		return nil, fmt.Errorf("%w: webhooks are sent over https only (SLUICE_WEBHOOK_ALLOW_HTTP=true allows http, for development only)", ErrNotAllowed)
	}
	return u, nil
}

// resolve is host's addresses: itself when it is one.
func (s *Sender) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	addrs, err := s.opts.Lookup(ctx, host)
	if err == nil && len(addrs) == 0 {
		err = errors.New("no addresses")
	}
	return addrs, err
}

// dial resolves addr's host with the sender's resolver and connects to
// each address in turn; control refuses the ones that are not public.
func (s *Sender) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	addrs, err := s.resolve(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", host, err)
	}
	d := &net.Dialer{Timeout: 5 * time.Second, Control: s.control}
	var first error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, network, net.JoinHostPort(a.Unmap().String(), port))
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, first
}

// Post makes one signed POST of body to rawURL; a 2xx is success. Retries
// are the caller's (the delivery queue's), so a slow receiver holds one
// delivery, never a loop.
func (s *Sender) Post(ctx context.Context, rawURL, secret string, body []byte) error {
	if _, err := s.allowed(rawURL); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	ts := s.opts.Now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Sluice-Webhook/1")
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set(HeaderSignature, Sign(secret, ts, body))
	resp, err := s.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL may carry a secret in its query
		}
		return fmt.Errorf("webhook: post: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook: the receiver answered %d", resp.StatusCode)
	}
	return nil
}

// Redact is rawURL fit for logs and pages: its query, which may carry a
// secret, hidden.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User = nil
	if u.RawQuery != "" {
		u.RawQuery = "…"
	}
	u.Fragment = ""
	return u.String()
}
