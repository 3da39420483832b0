package web

import "github.com/gin-gonic/gin"

// ContentSecurityPolicy is the pages' policy: the one stylesheet from
// /static, no scripts at all, no inline styles or event handlers, forms
// posting only to Sluice, and no framing (clickjacking). Templates must
// keep to it; templates/csp_test.go fails on an inline script or style.
const ContentSecurityPolicy = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'"

// forwardedTLSKey marks a request a trusted proxy received over TLS.
const forwardedTLSKey = "sluice.forwarded_tls"

// MarkForwardedTLS records that the browser reached a trusted proxy over
// TLS (its X-Forwarded-Proto said https), so cookies set in the answer are
// Secure. Only the code that checked the proxy may call it.
func MarkForwardedTLS(c *gin.Context) { c.Set(forwardedTLSKey, true) }

// OverTLS says whether the browser's connection was encrypted: to Sluice
// itself, or to a trusted proxy in front of it.
func OverTLS(c *gin.Context) bool { return c.Request.TLS != nil || c.GetBool(forwardedTLSKey) }
