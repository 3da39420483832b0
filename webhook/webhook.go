// Package webhook posts signed JSON to customers' URLs: budget alerts and
// job callbacks. Only hosts the operator allows are ever called (no SSRF:
// a customer cannot make Sluice reach its internal network), redirects are
// not followed, and every body is signed so the receiver can tell it came
// from Sluice and when.
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

// Sender posts signed bodies to allowed hosts.
type Sender struct {
	hosts  Hosts
	client *http.Client
	now    func() time.Time
}

// NewSender returns a sender for hosts; its client times out after 10 s and
// never follows redirects (a redirect could lead off the allow-list).
func NewSender(hosts Hosts, now func() time.Time) *Sender {
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	return &Sender{hosts: hosts, now: now, client: &http.Client{
		Timeout:       10 * time.Second,
		Transport:     &http.Transport{DialContext: dialer.DialContext, TLSHandshakeTimeout: 5 * time.Second},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Hosts is the sender's allow-list.
func (s *Sender) Hosts() Hosts { return s.hosts }

// Send posts body to rawURL signed with secret, trying up to three times
// with a growing pause; a 2xx is success.
func (s *Sender) Send(ctx context.Context, rawURL, secret string, body []byte) error {
	if err := s.hosts.Check(rawURL); err != nil {
		return err
	}
	var last error
	for attempt := range 3 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(attempt) * time.Second):
			}
		}
		if last = s.post(ctx, rawURL, secret, body); last == nil {
			return nil
		}
	}
	return last
}

func (s *Sender) post(ctx context.Context, rawURL, secret string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	ts := s.now()
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
