package templates

import (
	"fmt"
	"math"
	"net/url"
	"strconv"

	"github.com/a-h/templ"
)

// quickStartCurl is the dashboard's first request. The token is a
// placeholder on purpose: the page never knows a real secret.
const quickStartCurl = `curl "$SLUICE_URL/v1/chat/completions" \
  -H "Authorization: Bearer sk_sluice_…" \
  -H "Content-Type: application/json" \
  -d '{
    "model": "sluice-local",
    "messages": [{"role": "user", "content": "Hello!"}]
  }'`

// expiryOption is one choice of the create-token form's lifetime select.
type expiryOption struct {
	Value string // days, "0" for never
	Label string
}

// expiryOptions are the lifetimes a new token may have.
var expiryOptions = []expiryOption{
	{Value: "0", Label: "Never"},
	{Value: "30", Label: "30 days"},
	{Value: "90", Label: "90 days"},
	{Value: "365", Label: "1 year"},
}

// FormatCount writes n with thousands separators, e.g. 12,345.
func FormatCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := false
	if n < 0 {
		neg, s = true, s[1:]
	}
	out := make([]byte, 0, len(s)+len(s)/3+1)
	if neg {
		out = append(out, '-')
	}
	for i := 0; i < len(s); i++ {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// countOf writes "1 request" or "1,000 requests".
func countOf(n int64, one, many string) string {
	if n == 1 {
		return FormatCount(n) + " " + one
	}
	return FormatCount(n) + " " + many
}

// statusClass picks a badge style for a token status; an unknown status
// gets a neutral badge rather than a class built from its text.
func statusClass(status string) string {
	switch status {
	case "active":
		return "badge-active"
	case "revoked":
		return "badge-revoked"
	case "expired":
		return "badge-expired"
	default:
		return "badge-neutral"
	}
}

// freezeStatusClass picks a badge style for a freeze status. An active
// freeze is a problem, unlike an active token, so it gets its own palette.
func freezeStatusClass(status string) string {
	switch status {
	case "active":
		return "badge-freeze-active"
	case "lifted":
		return "badge-freeze-lifted"
	case "expired":
		return "badge-freeze-expired"
	default:
		return "badge-neutral"
	}
}

// orDash shows an empty value as a dash rather than as nothing.
func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// tokenLabel shows a freeze's token prefix, or says it is unknown.
func tokenLabel(prefix string) string {
	if prefix == "" {
		return "unknown token"
	}
	return prefix + "…"
}

// effectiveDiffers says whether the auto-tuner holds a tier's refill below
// its configured value. An empty effective refill means "as configured".
func effectiveDiffers(t TierRow) bool {
	return t.EffectiveRefill != "" && t.EffectiveRefill != t.RefillPerSec
}

// Limiter modes as the admin page tells them apart.
const (
	limiterLocal    = "local"
	limiterShared   = "shared"
	limiterDegraded = "degraded"
)

// limiterMode normalises the limiter state: Degraded wins over the mode it
// degraded from; an unknown mode gives "" and the page says nothing.
func limiterMode(l LimiterState) string {
	if l.Degraded || l.Mode == limiterDegraded {
		return limiterDegraded
	}
	switch l.Mode {
	case limiterLocal, limiterShared:
		return l.Mode
	}
	return ""
}

// nodeShare is the part of every limit one node enforces while Redis is
// unreachable, e.g. "1/3".
func nodeShare(nodes int) string {
	if nodes < 1 {
		return "a share"
	}
	return fmt.Sprintf("1/%d", nodes)
}

// loadPercent writes a load fraction such as "0.92" as "92%"; anything that
// is not a number is shown as given.
func loadPercent(load string) string {
	f, err := strconv.ParseFloat(load, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return load
	}
	return strconv.FormatFloat(math.Round(f*100), 'f', 0, 64) + "%"
}

// liftFreezeURL is where a freeze's lift form posts.
func liftFreezeURL(id int64) templ.SafeURL {
	return templ.URL(fmt.Sprintf("/admin/freezes/%d/lift", id))
}

// revokeURL is where a token's revoke form posts.
func revokeURL(id int64) templ.SafeURL {
	return templ.URL(fmt.Sprintf("/tokens/%d/revoke", id))
}

// tokenURL is where a token's edit form posts.
func tokenURL(id int64) templ.SafeURL {
	return templ.URL(fmt.Sprintf("/tokens/%d", id))
}

// tokenFieldID names an edit form's field, unique on the page.
func tokenFieldID(id int64, field string) string { return fmt.Sprintf("token-%d-%s", id, field) }

// rateHint says what a token's rate may be.
func rateHint(max int64) string {
	return fmt.Sprintf("Up to %d, your tier's rate. Blank: only the organization's limit.", max)
}

// signingURL is where a token's signing form posts.
func signingURL(id int64) templ.SafeURL {
	return templ.URL(fmt.Sprintf("/tokens/%d/signing", id))
}

// tierURL is where a tier's limits form posts.
func tierURL(name string) templ.SafeURL {
	return templ.URL("/admin/tiers/" + url.PathEscape(name))
}

// homeURL is where the error page sends people back to.
func homeURL(p Page) templ.SafeURL {
	if p.User != nil {
		return templ.URL("/dashboard")
	}
	return templ.URL("/")
}

// rateLabel shows a provider limit, "" (a dash) when unknown.
func rateLabel(n int64) string {
	if n <= 0 {
		return ""
	}
	return FormatCount(n)
}

// orValue is v, or def when v is empty.
func orValue(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// upstreamStateClass colours a provider key's state.
func upstreamStateClass(state string) string {
	switch state {
	case "healthy":
		return "badge-active"
	case "cooling":
		return "badge-warning"
	default:
		return "badge-revoked"
	}
}

// hasEditable says whether any of the tokens may be changed by the viewer.
func hasEditable(ts []TokenRow) bool {
	for _, t := range ts {
		if t.Editable {
			return true
		}
	}
	return false
}
