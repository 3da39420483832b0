package handlers

import (
	"net/netip"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/web"
)

// trustProxies makes r believe forwarding headers only from the proxies
// the operator listed (SLUICE_TRUSTED_PROXIES; none by default): the
// client address is then the right-most X-Forwarded-For entry that is not
// one of them, so a client cannot dodge the per-address login throttle by
// sending its own header. X-Real-IP is never read: a proxy that appends to
// X-Forwarded-For may pass a client's X-Real-IP through untouched.
func trustProxies(r *gin.Engine, proxies []netip.Prefix) {
	r.RemoteIPHeaders = []string{"X-Forwarded-For"}
	if len(proxies) == 0 {
		_ = r.SetTrustedProxies(nil)
		return
	}
	nets := make([]string, len(proxies))
	for i, p := range proxies {
		nets[i] = p.String()
	}
	if err := r.SetTrustedProxies(nets); err != nil {
		panic("handlers: config.Load let an invalid trusted proxy through: " + err.Error())
	}
}

// fromProxy says whether the connection came from a trusted proxy.
func fromProxy(c *gin.Context, proxies []netip.Prefix) bool {
	if len(proxies) == 0 {
		return false
	}
	a, err := netip.ParseAddr(c.RemoteIP())
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, p := range proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// The policies of API answers: JSON and CSV are never a document to run,
// frame or refer from.
const (
	apiContentSecurityPolicy = "default-src 'none'; frame-ancestors 'none'"
	// hsts is sent only on encrypted requests, as browsers require.
	hsts = "max-age=31536000"
)

// securityHeaders are the values hardened sets, one slice each shared by
// every response: nothing writes into a header's slice in place (Add
// appends, and a full slice is copied first), so sharing them is safe.
var securityHeaders = struct {
	nosniff, deny, apiCSP, noReferrer, pageCSP, sameOrigin, hsts []string
}{
	nosniff: []string{"nosniff"}, deny: []string{"DENY"},
	apiCSP: []string{apiContentSecurityPolicy}, noReferrer: []string{"no-referrer"},
	pageCSP: []string{web.ContentSecurityPolicy}, sameOrigin: []string{"same-origin"},
	hsts: []string{hsts},
}

// hardened sets the security headers of every answer, error pages and
// static files included, and marks requests a trusted proxy received over
// TLS so the pages' cookies are Secure behind it (X-Forwarded-Proto from
// anyone else is ignored).
//
// Pages get web.ContentSecurityPolicy (no scripts, no inline styles, no
// framing) and Referrer-Policy same-origin: Go's CrossOriginProtection
// falls back to the Origin header in browsers without Sec-Fetch-Site, and
// no-referrer would make those send "Origin: null" with the site's own
// forms. The API gets a policy that allows nothing and no-referrer.
func hardened(proxies []netip.Prefix) gin.HandlerFunc {
	return func(c *gin.Context) {
		if fromProxy(c, proxies) && forwardedHTTPS(c.GetHeader("X-Forwarded-Proto")) {
			web.MarkForwardedTLS(c)
		}
		// The names are canonical and the values shared (see
		// securityHeaders), so setting them allocates nothing.
		h := c.Writer.Header()
		h["X-Content-Type-Options"], h["X-Frame-Options"] = securityHeaders.nosniff, securityHeaders.deny
		if isAPIPath(c.Request.URL.Path) {
			h["Content-Security-Policy"], h["Referrer-Policy"] = securityHeaders.apiCSP, securityHeaders.noReferrer
		} else {
			h["Content-Security-Policy"], h["Referrer-Policy"] = securityHeaders.pageCSP, securityHeaders.sameOrigin
		}
		if web.OverTLS(c) {
			h["Strict-Transport-Security"] = securityHeaders.hsts
		}
		c.Next()
	}
}

// forwardedHTTPS reads the scheme the first proxy saw: the left-most value
// of X-Forwarded-Proto.
func forwardedHTTPS(v string) bool {
	first, _, _ := strings.Cut(v, ",")
	return strings.EqualFold(strings.TrimSpace(first), "https")
}

// isAPIPath says whether a path is served to programs (the API and the
// operator's endpoints) rather than to browsers as pages.
func isAPIPath(path string) bool {
	for _, p := range []string{"/v1", "/api", "/healthz", "/readyz", "/metrics"} {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}
