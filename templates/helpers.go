package templates

import (
	"fmt"
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

// formatCount writes n with thousands separators, e.g. 12,345.
func formatCount(n int64) string {
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
		return formatCount(n) + " " + one
	}
	return formatCount(n) + " " + many
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

// revokeURL is where a token's revoke form posts.
func revokeURL(id int64) templ.SafeURL {
	return templ.URL(fmt.Sprintf("/tokens/%d/revoke", id))
}

// tierURL is where a tier's limits form posts.
func tierURL(name string) templ.SafeURL {
	return templ.URL("/admin/tiers/" + url.PathEscape(name))
}

// orgTierURL is where an organization's tier form posts.
func orgTierURL(id int64) templ.SafeURL {
	return templ.URL(fmt.Sprintf("/admin/organizations/%d/tier", id))
}

// homeURL is where the error page sends people back to.
func homeURL(p Page) templ.SafeURL {
	if p.User != nil {
		return templ.URL("/dashboard")
	}
	return templ.URL("/")
}
