package handlers

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/upstream/local"
)

// Admission: every /v1 request spends from its token's request bucket (the
// tier's capacity and, possibly auto-tuned, refill); a chat completion also
// reserves its estimated tokens from the tokens-per-minute bucket, both or
// neither, and settles the reservation with the real usage afterwards.
// Rejections are counted per token; a token that keeps being rejected is
// frozen. Every response carries OpenAI's rate-limit headers.

func requestParams(t accounts.Caller) quota.Params {
	return quota.Params{Capacity: t.Tier.Capacity, RefillPerSec: t.Tier.EffectiveRefill()}
}

func tokenParams(t accounts.Caller) quota.Params {
	return quota.Params{Capacity: t.Tier.TokensPerMinute, RefillPerSec: float64(t.Tier.TokensPerMinute) / 60}
}

// notFrozen answers 429 token_frozen for a frozen token.
func (a *api) notFrozen(c *gin.Context, caller accounts.Caller) bool {
	f, frozen := a.dir.Frozen(caller.TokenID)
	if !frozen {
		return true
	}
	a.writeFrozen(c, f.Until, f.Reason)
	return false
}

func (a *api) writeFrozen(c *gin.Context, until time.Time, reason string) {
	setRetryAfter(c, until.Sub(a.now()))
	writeOpenAIError(c, a.log, &apperr.Error{Code: apperr.Frozen, Reason: "token_frozen",
		Message: "this API key is frozen until " + until.UTC().Format(time.RFC3339) + ": " + reason +
			". It thaws by itself then; an admin can lift it earlier."})
}

// admit is the middleware of /v1 routes without a body to weigh: the
// freeze check and one request from the request bucket.
func (a *api) admit(c *gin.Context) {
	caller := c.MustGet(callerKey).(accounts.Caller)
	if a.notFrozen(c, caller) && a.admitRequests(c, caller, 1) {
		c.Next()
		if err := a.usage.Touch(caller.TokenID, a.now().UTC()); err != nil {
			a.log.Warn("marking a token used failed", "request_id", requestID(c), "err", err)
		}
	}
}

// admitRequests spends weight from the request bucket alone.
func (a *api) admitRequests(c *gin.Context, caller accounts.Caller, weight int64) bool {
	d, err := a.limiter.Allow(c.Request.Context(), caller.LimitKey, requestParams(caller), weight)
	if err != nil {
		a.limiterError(c, caller, err, weight, 0)
		return false
	}
	setLimitHeaders(c, "requests", d)
	if !d.Allowed {
		a.reject(c, caller, d, "requests")
		return false
	}
	return true
}

// admitChat spends weight from the request bucket and reserves estimate
// from the tokens bucket, both or neither.
func (a *api) admitChat(c *gin.Context, caller accounts.Caller, weight, estimate int64) bool {
	if caller.Tier.TokensPerMinute <= 0 {
		return a.admitRequests(c, caller, weight)
	}
	dr, dt, err := a.limiter.AllowBoth(c.Request.Context(),
		quota.Charge{Key: caller.LimitKey, Params: requestParams(caller), Weight: weight},
		quota.Charge{Key: caller.TokensKey, Params: tokenParams(caller), Weight: estimate})
	if err != nil {
		a.limiterError(c, caller, err, weight, estimate)
		return false
	}
	setLimitHeaders(c, "requests", dr)
	setLimitHeaders(c, "tokens", dt)
	if dr.Allowed && dt.Allowed {
		return true
	}
	// Neither bucket was charged. The client must wait for both, so the
	// longer wait is the one to report, named after its bucket; a shorter
	// Retry-After would only earn another 429 (and count toward a freeze).
	if dt.RetryAfter > dr.RetryAfter {
		a.reject(c, caller, dt, "tokens")
	} else {
		a.reject(c, caller, dr, "requests")
	}
	return false
}

// settleTokens corrects the tokens bucket by what the request really used:
// a refund when the estimate was high, a debt when it was low.
func (a *api) settleTokens(c *gin.Context, caller accounts.Caller, estimate, used int64) {
	if caller.Tier.TokensPerMinute <= 0 || used == estimate {
		return
	}
	err := a.limiter.Adjust(afterwards(c), caller.TokensKey, tokenParams(caller), used-estimate)
	if err != nil {
		a.log.Warn("settling tokens-per-minute failed", "request_id", requestID(c), "err", err)
	}
}

// limiterError explains a request that can never fit, and treats anything
// else as internal (the degrading limiter has already fallen back to local
// limits, so an error here is a bug, not an outage).
func (a *api) limiterError(c *gin.Context, caller accounts.Caller, err error, weight, estimate int64) {
	if errors.Is(err, quota.ErrWeightExceedsCapacity) {
		msg := "this request weighs " + strconv.FormatInt(weight, 10) + " requests, more than the " +
			caller.Tier.Name + " tier's burst of " + strconv.FormatInt(caller.Tier.Capacity, 10)
		if estimate > caller.Tier.TokensPerMinute && caller.Tier.TokensPerMinute > 0 {
			msg = "this request may use " + strconv.FormatInt(estimate, 10) + " tokens (prompt + max_tokens), more than the " +
				caller.Tier.Name + " tier's " + strconv.FormatInt(caller.Tier.TokensPerMinute, 10) + " tokens per minute; lower max_tokens"
		}
		param := "X-Sluice-Priority"
		if estimate > caller.Tier.TokensPerMinute && caller.Tier.TokensPerMinute > 0 {
			param = "max_tokens"
		}
		writeOpenAIError(c, a.log, apperr.Field(apperr.Invalid, "request_exceeds_limit", param, msg))
		return
	}
	writeOpenAIError(c, a.log, apperr.Wrap(err, "rate limiter"))
}

// reject answers 429 for the limit that tripped, counts the rejection and
// freezes the token when it crosses its tier's threshold.
func (a *api) reject(c *gin.Context, caller accounts.Caller, d quota.Decision, limit string) {
	ctx := c.Request.Context()
	count, freeze, err := a.detector.Rejected(ctx, "rej:"+caller.LimitKey, caller.Tier.FreezeThreshold)
	if err != nil {
		a.log.Warn("counting a rejection failed", "request_id", requestID(c), "err", err)
	}
	if freeze {
		f, err := a.freezer.Freeze(ctx, caller, count, a.now())
		if err != nil {
			a.log.Error("freezing a token failed", "request_id", requestID(c), "token_id", caller.TokenID, "err", err)
		} else {
			a.writeFrozen(c, f.FrozenUntil, f.Reason)
			return
		}
	}
	setRetryAfter(c, d.RetryAfter)
	code, what := "rate_limit_exceeded", "requests"
	if limit == "tokens" {
		code, what = "tokens_rate_limit_exceeded", "tokens per minute"
	}
	writeOpenAIError(c, a.log, &apperr.Error{Code: apperr.RateLimited, Reason: code,
		Message: "rate limit reached for " + what + " on the " + caller.Tier.Name + " tier (limit " +
			strconv.FormatInt(d.Limit, 10) + ", remaining " + strconv.FormatInt(d.Remaining, 10) +
			"); retry after " + formatReset(d.RetryAfter)})
}

// setLimitHeaders writes OpenAI's x-ratelimit-*-{requests,tokens} headers.
func setLimitHeaders(c *gin.Context, what string, d quota.Decision) {
	h := c.Writer.Header()
	h.Set("x-ratelimit-limit-"+what, strconv.FormatInt(d.Limit, 10))
	h.Set("x-ratelimit-remaining-"+what, strconv.FormatInt(d.Remaining, 10))
	h.Set("x-ratelimit-reset-"+what, formatReset(d.ResetAfter))
}

// setRetryAfter writes Retry-After (whole seconds, rounded up, as HTTP
// wants) and retry-after-ms (what OpenAI's SDKs prefer).
func setRetryAfter(c *gin.Context, wait time.Duration) {
	wait = max(wait, time.Millisecond)
	h := c.Writer.Header()
	h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10))
	h.Set("retry-after-ms", strconv.FormatInt(int64(math.Ceil(float64(wait)/float64(time.Millisecond))), 10))
}

// formatReset writes a duration the way OpenAI's reset headers do ("2s",
// "1m0s", "20ms").
func formatReset(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return d.Round(time.Millisecond).String()
}

// weigh prices a chat request: its priority's weight, raised for low-value
// prompts (tiny, repetitive, or repeated by the same token).
func (a *api) weigh(c *gin.Context, caller accounts.Caller, msgs []local.Message) (int64, error) {
	priority := c.GetHeader("X-Sluice-Priority")
	if priority == "" {
		priority = "normal"
	}
	base, ok := a.priorityWeights[priority]
	if !ok {
		return 0, apperr.Field(apperr.Invalid, "invalid_priority", "X-Sluice-Priority", "X-Sluice-Priority must be low, normal or high")
	}
	// The whole conversation is judged, not the last turn: "ok" in a long
	// chat is not a tiny request, while the same conversation sent again is
	// a repeat. Never more than the bucket holds, so a small tier still
	// admits a low-value request eventually instead of refusing it outright.
	w := a.scorer.Weight(caller.LimitKey, promptText(msgs), base)
	return min(w, max(base, caller.Tier.Capacity)), nil
}

// promptText is every message's content, for judging a request's value.
func promptText(msgs []local.Message) string {
	if len(msgs) == 1 {
		return msgs[0].Content
	}
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.Content)
		b.WriteByte('\n')
	}
	return b.String()
}

// estimateTokens is what a request may use: its prompt, counted as the
// model will count it, plus max_tokens or, without one, the default.
func estimateTokens(msgs []local.Message, maxTokens int, defaultMax int64) int64 {
	prompt := int64(local.PromptTokens(msgs))
	if maxTokens > 0 {
		return prompt + int64(maxTokens)
	}
	return prompt + defaultMax
}
