package messages

import (
	"net/http"
	"time"
)

// openAILimits and anthropicLimits are the rate-limit headers of one
// bucket in each dialect, in canonical form.
var limitHeaders = []struct {
	limit, remaining, reset    string // OpenAI's, as the pipeline writes them
	aLimit, aRemaining, aReset string // Anthropic's
}{
	{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests",
		"Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset"},
	{"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens",
		"Anthropic-Ratelimit-Tokens-Limit", "Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset"},
}

// RateLimitHeaders rewrites, in place, the x-ratelimit-* headers the
// pipeline writes into Anthropic's: anthropic-ratelimit-requests-* and
// -tokens-* (limit, remaining, and reset as an RFC 3339 time, rounded up to
// the second so a client waiting for it never comes early). Sluice's
// tokens-per-minute bucket counts prompt and completion together, which is
// Anthropic's -tokens-* ("the most restrictive limit"); it has no separate
// input and output buckets, so no -input-tokens-* or -output-tokens-*
// headers are made up. Retry-After is the same in both dialects.
func RateLimitHeaders(h http.Header, now time.Time) {
	for _, names := range limitHeaders {
		if v := h[names.limit]; len(v) > 0 {
			h[names.aLimit] = v
			delete(h, names.limit)
		}
		if v := h[names.remaining]; len(v) > 0 {
			h[names.aRemaining] = v
			delete(h, names.remaining)
		}
		if v := h[names.reset]; len(v) > 0 {
			delete(h, names.reset)
			d, err := time.ParseDuration(v[0])
			if err != nil || d < 0 {
				continue
			}
			at := now.Add(d)
			if t := at.Truncate(time.Second); t.Before(at) {
				at = t.Add(time.Second)
			}
			h[names.aReset] = []string{at.UTC().Format(time.RFC3339)}
		}
	}
}
