package completion

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/chat"
	"github.com/sluicehq/sluice/chat/family"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/upstream/local"
)

// Admission: every request spends from its organization's request bucket
// (the tier's capacity and, possibly auto-tuned, refill), shared by all of
// the organization's tokens on every node; a chat completion also reserves
// its estimated tokens from the organization's tokens-per-minute bucket,
// both or neither, and settles the reservation with the real usage
// afterwards. Rejections are counted per token; a token that keeps being
// rejected is frozen, not its organization. Every answer carries OpenAI's rate-limit headers.

func requestParams(t accounts.Caller) quota.Params {
	return quota.Params{Capacity: t.Tier.Capacity, RefillPerSec: t.Tier.EffectiveRefill()}
}

func tokenParams(t accounts.Caller) quota.Params {
	return quota.Params{Capacity: t.Tier.TokensPerMinute, RefillPerSec: float64(t.Tier.TokensPerMinute) / 60}
}

// tokenRateParams is a token's own request bucket (requests_per_minute):
// a minute of its rate as its burst, refilled at its rate, and never more
// than its tier's burst or refill, so that a tier that was lowered after
// the rate was set binds the token as it binds its organization.
func tokenRateParams(t accounts.Caller) quota.Params {
	rpm := t.TokenRequestsPerMinute
	return quota.Params{Capacity: min(rpm, t.Tier.Capacity), RefillPerSec: min(float64(rpm)/60, t.Tier.EffectiveRefill())}
}

// tokenRated says whether the caller's token has a request bucket of its
// own, charged with its organization's (quota.Limiter.AllowAll).
func tokenRated(t accounts.Caller) bool { return t.TokenRequestsKey != "" }

// binding is the one of the organization's request bucket and the
// token's own that holds the request back, for the requests headers and
// a refusal: on a refusal the longer wait, else the fewer requests left
// (the lower limit on a tie). tok says it is the token's.
func binding(org, own quota.Decision) (d quota.Decision, tok bool) {
	if !org.Allowed || !own.Allowed {
		if own.RetryAfter > org.RetryAfter {
			return own, true
		}
		return org, false
	}
	if own.Remaining < org.Remaining || own.Remaining == org.Remaining && own.Limit <= org.Limit {
		return own, true
	}
	return org, false
}

// checkFrozen refuses a frozen token, counting the rejection (a job
// waiting for the thaw is not a rejection).
func (p *Pipeline) checkFrozen(caller accounts.Caller, model string, queued bool) error {
	if f, frozen := p.d.Freezes.Frozen(caller.TokenID); frozen {
		if !queued {
			p.rejected(caller, model, metering.RejectedFrozen)
		}
		return p.frozenError(f.Until, f.Reason)
	}
	return nil
}

// Rejected counts a 429 refused outside the pipeline (a full queue) in the
// rollups and the metrics, as the pipeline counts its own.
func (p *Pipeline) Rejected(caller accounts.Caller, reason string) { p.rejected(caller, "", reason) }

// rejected counts a 429 in the rollups and the metrics.
func (p *Pipeline) rejected(caller accounts.Caller, model, reason string) {
	p.d.Recorder.Reject(caller.OrgID, caller.TokenID, model, reason, p.d.Now())
	p.d.Metrics.Rejected(reason, caller.Tier.Name)
}

// Jobs never starve live traffic of the same organization: a queued
// request is admitted only while the organization's buckets would keep at
// least half of their burst after it (LiveShare). Since a GCRA bucket is one timestamp,
// that is the same bucket checked with half its capacity: live requests
// always find half the burst, and jobs use what the refill brings beyond
// it.
const LiveShare = 2

// ErrWait is the reason of the error a queued request gets instead of a
// 429: its RetryAfter says when the buckets will have room for it.
const ErrWait = "wait_for_bucket"

// queuedParams is the part of a bucket a job may use: all but the live
// share, and at least its own weight, so a heavy job is not refused forever.
func queuedParams(p quota.Params, weight int64) quota.Params {
	p.Capacity = max(p.Capacity-p.Capacity/LiveShare, weight)
	return p
}

// waitError tells a job how long until the buckets have room.
func waitError(wait time.Duration) error {
	return &apperr.Error{Code: apperr.RateLimited, Reason: ErrWait, RetryAfter: max(wait, time.Millisecond),
		Message: "the organization's buckets are busy with live traffic; the job waits for them"}
}

func (p *Pipeline) frozenError(until time.Time, reason string) error {
	return &apperr.Error{Code: apperr.Frozen, Reason: "token_frozen", RetryAfter: until.Sub(p.d.Now()),
		Message: "this API key is frozen until " + until.UTC().Format(time.RFC3339) + ": " + reason +
			". It thaws by itself then; an admin can lift it earlier."}
}

// weigh prices a request: its priority's weight, raised for low-value
// prompts (tiny, repetitive, or repeated by the same token).
func (p *Pipeline) weigh(c *call) (int64, error) {
	priority := c.req.Priority
	if priority == "" {
		priority = "normal"
	}
	base, ok := p.d.PriorityWeights[priority]
	if !ok {
		return 0, apperr.Field(apperr.Invalid, "invalid_priority", "X-Sluice-Priority", "X-Sluice-Priority must be low, normal or high")
	}
	if c.req.isEmbeddings() {
		// A word, or the same text embedded again, is an ordinary
		// embeddings request, not a low-value prompt: the priority alone.
		return base, nil
	}
	// The whole conversation is judged, not the last turn: "ok" in a long
	// chat is not a tiny request, while the same conversation sent again is
	// a repeat. Never more than the bucket holds, so a small tier still
	// admits a low-value request eventually instead of refusing it outright.
	history := make([]string, len(c.history))
	for i, m := range c.history {
		history[i] = m.Content
	}
	shape := c.req.shape(history)
	w := p.d.Scorer.Weight(c.caller.TokenKey, &shape, base)
	burst := c.caller.Tier.Capacity
	if tokenRated(c.caller) {
		burst = min(burst, tokenRateParams(c.caller).Capacity)
	}
	return min(w, max(base, burst)), nil
}

// promptText is every message's content, for the prompt log.
func promptText(msgs []chat.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.Content)
		b.WriteByte('\n')
	}
	return b.String()
}

// bound decides what the request's completion may use and makes the body
// a provider gets. A client's max_tokens is what is reserved, and kept.
// Without one, when a limit relies on the estimate (a tokens-per-minute
// bucket, a spending limit on a priced model), the bound is the model's
// longest answer (Family.Bound; SLUICE_DEFAULT_MAX_TOKENS when unknown),
// no more than half of the tokens-per-minute bucket, and it is sent
// to the provider in the field its family takes: the provider is held to
// what was reserved, and the answer is otherwise what it would have been.
// With no such limit the body is not touched and the default is the
// estimate (it paces the provider key, and is settled). A part whose cost
// cannot be bounded is refused when a limit relies on the estimate.
func (p *Pipeline) bound(c *call) error {
	req, tier := c.req, c.caller.Tier
	if req.isEmbeddings() {
		// Nothing is generated: the inputs are the whole cost, and the
		// body goes as the client wrote it.
		c.completion, c.estimate, c.body = 0, c.prompt, req.Body
		return nil
	}
	relies := tier.TokensPerMinute > 0
	if !relies && c.caller.LimitsSpending() {
		_, relies = p.worstPrice(c)
	}
	var e bodyEdits
	switch {
	case req.MaxTokens > 0:
		c.completion = int64(req.MaxTokens)
		c.copyBound = relies && req.completionFieldOnly
		if c.copyBound && req.route == nil {
			e.boundField, e.bound = copiedBound(req.Model, c.completion)
		}
	case !relies || req.Model == local.ModelID:
		c.completion = p.d.DefaultMaxTokens
	case req.route != nil:
		// Each of the alias's models is sent its own family's bound, and
		// the largest is reserved: whichever answers is held to no more.
		c.sendBound = true
		for _, m := range req.route.Models() {
			b := p.d.DefaultMaxTokens
			if m != local.ModelID {
				b, _ = p.completionBound(c, family.Of(m))
			}
			c.completion = max(c.completion, b)
		}
	default:
		b, send := p.completionBound(c, req.Prompt.Family)
		if send {
			e.boundField, e.bound = req.Prompt.Family.BoundField, b
		}
		c.completion = b
	}
	if relies && req.Prompt.Unbounded != "" {
		return apperr.Field(apperr.Invalid, "unsupported_content", req.Prompt.Unbounded,
			"what the "+req.Prompt.UnboundedType+" part at "+req.Prompt.Unbounded+" will cost cannot be known before the provider answers, and this request's "+
				reliedOn(c)+" needs that bound; send text and images only")
	}
	c.completion += req.Prompt.Predicted
	c.estimate = c.prompt + c.completion
	if req.route != nil {
		return nil // each model's body is made when it is asked (attemptBody)
	}
	if req.Model == local.ModelID {
		c.body = req.Body
		return nil
	}
	e.includeUsage = req.Stream && !req.IncludeUsage
	if c.history == nil {
		c.body = providerBody(req, e)
		return nil
	}
	body, err := composedBody(c, e)
	c.body = body
	return err
}

// copiedBound is the field and value of a client's max_completion_tokens
// copied for model, whose API reads max_tokens instead and would answer
// unbounded by what was reserved (family.IgnoresCompletionField); "" for
// every other model, which is sent the body as written.
func copiedBound(model string, bound int64) (string, int64) {
	if !family.IgnoresCompletionField(model) {
		return "", 0
	}
	return "max_tokens", bound
}

// completionBound is the completion bound Sluice sends a model of family
// fam for a request without max_tokens: the model's longest answer, no
// more than half of the tokens-per-minute bucket. send is false when the
// prompt alone fills the model's context or the bucket: the bound is then
// 1 and nothing is sent (the provider or the limiter refuses the request
// as it stands).
func (p *Pipeline) completionBound(c *call, fam family.Family) (b int64, send bool) {
	b = fam.Bound(c.prompt, p.d.DefaultMaxTokens)
	if tpm := c.caller.Tier.TokensPerMinute; tpm > 0 {
		// At most half the bucket, so a request right after this one
		// still finds room; the whole of it for a prompt too long for that.
		left := tpm - c.prompt - c.req.Prompt.Predicted
		b = min(b, max(left-tpm/2, min(left, 1024)))
	}
	if b < 1 {
		return 1, false
	}
	return b, true
}

// worstPrice is the price a request's reservation is made at: its model's,
// or for an alias the dearest prompt and output token among the models
// that may answer it (metering.Dearest: cache writes and reasoning
// included), so the reservation bounds the cost of whichever does. ok is
// false when none of them is priced.
func (p *Pipeline) worstPrice(c *call) (price models.ModelPrice, ok bool) {
	route := c.req.route
	if route == nil {
		return p.d.Prices.At(c.req.Model, c.start)
	}
	for _, t := range route.Targets {
		price, ok = ceiling(price, ok, p.d.Prices, t.Model, c.start)
	}
	for _, f := range route.Fallbacks {
		price, ok = ceiling(price, ok, p.d.Prices, f, c.start)
	}
	return price, ok
}

// ceiling raises worst, a price whose input and output are the dearest a
// token may cost, to model's at t where they are dearer.
func ceiling(worst models.ModelPrice, ok bool, book *metering.PriceBook, model string, t time.Time) (models.ModelPrice, bool) {
	price, priced := book.At(model, t)
	if !priced {
		return worst, ok
	}
	in, out := metering.Dearest(price)
	if ok {
		in, out = max(in, worst.InputPerMTok), max(out, worst.OutputPerMTok)
	}
	return models.ModelPrice{InputPerMTok: in, OutputPerMTok: out}, true
}

// reliedOn names the limit that relies on a request's estimate.
func reliedOn(c *call) string {
	if c.caller.Tier.TokensPerMinute > 0 {
		return "tokens-per-minute limit"
	}
	_, what, limited := c.caller.SpendLimit()
	if !limited {
		what = tokenBudgetName
	}
	return "spending limit (" + what + ")"
}

// tokenBudgetName is what a refusal calls a token's own budget.
const tokenBudgetName = "this API key's monthly budget"

// Paid is what a request paid before the pipeline admitted it: the one
// request PayForHistory charges. The zero value is nothing.
type Paid struct{ requests int64 }

// PayForHistory charges the one request that reading a stored conversation
// costs, before it is read (a frozen token is refused first): the read,
// as large as a request may be, is never free, and a tenant over its
// limit is refused before it, not after. Admission then charges the
// request's weight less what was paid; a request refused after the read
// keeps this one request charged, as any refused request does.
func (p *Pipeline) PayForHistory(ctx context.Context, caller accounts.Caller, requestID, model string, sink Sink) (Paid, error) {
	if err := p.checkFrozen(caller, model, false); err != nil {
		return Paid{}, err
	}
	return p.payForHistory(ctx, caller, requestID, model, sink)
}

func (p *Pipeline) payForHistory(ctx context.Context, caller accounts.Caller, requestID, model string, sink Sink) (Paid, error) {
	if err := p.admitRequests(ctx, caller, requestID, model, sink, 1); err != nil {
		return Paid{}, err
	}
	return Paid{requests: 1}, nil
}

// admit spends weight from the request bucket and reserves the estimate
// from the tokens bucket, both or neither, then reserves the budget. A
// weight of 0 (all of it paid before) charges the tokens bucket alone.
func (p *Pipeline) admit(ctx context.Context, c *call, weight int64) error {
	if err := p.admitBuckets(ctx, c, weight); err != nil {
		return err
	}
	if err := p.reserveBudget(ctx, c); err != nil {
		// Refused for money: the tokens it reserved go back (the request
		// itself still counts, as any refused request does).
		if c.caller.Tier.TokensPerMinute > 0 {
			if aerr := p.d.Limiter.Adjust(context.WithoutCancel(ctx), c.caller.TPMKey, tokenParams(c.caller), -c.estimate); aerr != nil {
				p.d.Log.Warn("refunding tokens-per-minute failed", "request_id", c.req.ID, "err", aerr)
			}
		}
		return err
	}
	return nil
}

// admitBuckets charges the request and tokens buckets, both or neither.
func (p *Pipeline) admitBuckets(ctx context.Context, c *call, weight int64) error {
	caller := c.caller
	if c.req.Queued {
		return p.admitQueued(ctx, c, weight)
	}
	switch {
	case caller.Tier.TokensPerMinute <= 0 && weight == 0:
		return nil
	case caller.Tier.TokensPerMinute <= 0:
		return p.admitRequests(ctx, caller, c.req.ID, c.req.Model, c.sink, weight)
	case weight == 0:
		return p.admitTokens(ctx, c)
	}
	reqs := quota.Charge{Key: caller.RequestsKey, Params: requestParams(caller), Weight: weight}
	toks := quota.Charge{Key: caller.TPMKey, Params: tokenParams(caller), Weight: c.estimate}
	var dr, dt quota.Decision
	own := false // dr is the token's own bucket's decision
	if tokenRated(caller) {
		ds, err := p.d.Limiter.AllowAll(ctx, []quota.Charge{reqs, toks,
			{Key: caller.TokenRequestsKey, Params: tokenRateParams(caller), Weight: weight}})
		if err != nil {
			return limiterError(caller, err, weight, c.estimate, c.req.isEmbeddings())
		}
		dt = ds[1]
		dr, own = binding(ds[0], ds[2])
	} else {
		var err error
		dr, dt, err = p.d.Limiter.AllowBoth(ctx, reqs, toks)
		if err != nil {
			return limiterError(caller, err, weight, c.estimate, c.req.isEmbeddings())
		}
	}
	setLimitHeaders(c.sink, requestsHeaders, dr)
	setLimitHeaders(c.sink, tokensHeaders, dt)
	if dr.Allowed && dt.Allowed {
		return nil
	}
	// Nothing was charged. The client must wait for every bucket, so the
	// longest wait is the one to report, named after its bucket; a shorter
	// Retry-After would only earn another 429 (and count toward a freeze).
	if dt.RetryAfter > dr.RetryAfter {
		return p.reject(ctx, caller, c.req.ID, c.req.Model, dt, metering.RejectedTokens)
	}
	if own {
		return p.reject(ctx, caller, c.req.ID, c.req.Model, dr, rejectedOwnRate)
	}
	return p.reject(ctx, caller, c.req.ID, c.req.Model, dr, metering.RejectedRequests)
}

// admitTokens reserves the estimate from the tokens bucket alone, for a
// request whose request charge was paid before its history was read.
func (p *Pipeline) admitTokens(ctx context.Context, c *call) error {
	d, err := p.d.Limiter.Allow(ctx, c.caller.TPMKey, tokenParams(c.caller), c.estimate)
	if err != nil {
		return limiterError(c.caller, err, 0, c.estimate, c.req.isEmbeddings())
	}
	setLimitHeaders(c.sink, tokensHeaders, d)
	if !d.Allowed {
		return p.reject(ctx, c.caller, c.req.ID, c.req.Model, d, metering.RejectedTokens)
	}
	return nil
}

// rejectedOwnRate is reject's name for a refusal by the token's own
// bucket; it is counted as a refusal for requests.
const rejectedOwnRate = "own_rate"

// admitQueued charges a job's request both buckets, both or neither, within
// the part live traffic leaves; when they have no room it answers how long
// to wait, counting no rejection and no freeze.
func (p *Pipeline) admitQueued(ctx context.Context, c *call, weight int64) error {
	caller := c.caller
	req := quota.Charge{Key: caller.RequestsKey, Params: queuedParams(requestParams(caller), weight), Weight: weight}
	var dr, dt quota.Decision
	var err error
	switch {
	case tokenRated(caller):
		// The token's own bucket keeps its live share too.
		cs := []quota.Charge{req, {Key: caller.TokenRequestsKey, Params: queuedParams(tokenRateParams(caller), weight), Weight: weight}}
		if caller.Tier.TokensPerMinute > 0 {
			cs = append(cs, quota.Charge{Key: caller.TPMKey, Params: queuedParams(tokenParams(caller), c.estimate), Weight: c.estimate})
		}
		var ds []quota.Decision
		if ds, err = p.d.Limiter.AllowAll(ctx, cs); err == nil {
			dr, _ = binding(ds[0], ds[1])
			dt.Allowed = true
			if len(ds) == 3 {
				dt = ds[2]
			}
		}
	case caller.Tier.TokensPerMinute > 0:
		tok := quota.Charge{Key: caller.TPMKey, Params: queuedParams(tokenParams(caller), c.estimate), Weight: c.estimate}
		dr, dt, err = p.d.Limiter.AllowBoth(ctx, req, tok)
	default:
		dr, err = p.d.Limiter.Allow(ctx, req.Key, req.Params, weight)
		dt.Allowed = true
	}
	if err != nil {
		return limiterError(caller, err, weight, c.estimate, c.req.isEmbeddings())
	}
	if dr.Allowed && dt.Allowed {
		return nil
	}
	wait := dr.RetryAfter
	if !dt.Allowed {
		// The tokens bucket's wait assumes nothing comes back, while a
		// running request's unused reservation (most of a bound Sluice
		// chose) returns when its answer ends: look again soon.
		wait = max(wait, min(dt.RetryAfter, tokensRecheck))
	}
	return waitError(wait)
}

// tokensRecheck is the longest a job waits for the tokens bucket before it
// looks again.
const tokensRecheck = time.Second

// reserveBudget holds the request's worst-case cost in the budget ledger
// when its spending is limited: by the organization's spending limit, by
// its token's own budget, by its prepaid balance, or several, reserved on
// all of them or on none, in one ledger call (one round trip).
// Nothing is reserved for an unpriced model, nor when nothing limits
// spending (a soft budget is only tracked, at settlement).
func (p *Pipeline) reserveBudget(ctx context.Context, c *call) error {
	var holds [3]metering.Hold
	n := 0
	orgLimit, orgWhat, orgLimited := c.caller.SpendLimit()
	if orgLimited {
		holds[n] = metering.Hold{Account: metering.OrgAccount(c.caller.OrgID), Limit: orgLimit}
		n++
	}
	if b := c.caller.TokenBudget; b != nil {
		holds[n] = metering.Hold{Account: metering.TokenAccount(c.caller.OrgID, c.caller.TokenID), Limit: *b}
		n++
	}
	if c.caller.Prepaid() {
		// All a prepaid balance may spend is what was credited to it.
		holds[n] = metering.Hold{Account: metering.PrepaidAccount(c.caller.OrgID)}
		n++
	}
	if n == 0 {
		return nil
	}
	price, ok := p.worstPrice(c)
	if !ok {
		return nil
	}
	worst := metering.WorstCase(price, c.prompt, c.completion)
	if worst == 0 {
		return nil
	}
	period := metering.Period(c.start)
	bs, ok, err := p.d.Ledger.Reserve(ctx, period, worst, holds[:n]...)
	if err != nil {
		return apperr.Wrap(err, "budget ledger")
	}
	if !ok {
		p.rejected(c.caller, c.req.Model, metering.RejectedBudget)
		i := max(metering.Short(bs, holds[:n], worst), 0)
		tokens := strconv.FormatInt(c.prompt, 10) + " prompt tokens and " + strconv.FormatInt(c.completion, 10) + " completion tokens" + boundNote(c)
		if c.req.isEmbeddings() {
			tokens = strconv.FormatInt(c.prompt, 10) + " input tokens"
		}
		cost := "this request may cost up to $" + worst.String() + " (" + tokens + aliasNote(c) + ")"
		if holds[i].Account.Prepaid {
			return &apperr.Error{Code: apperr.NoCredit, Reason: "insufficient_quota",
				Message: cost + ", more than is left of the organization's prepaid balance ($" + max(bs[i].Left(0), 0).String() +
					"); top up on the dashboard's balance page, or redeem a code there or with POST /api/balance/redeem"}
		}
		limit, what := holds[i].Limit, orgWhat
		if holds[i].Account.TokenID != 0 {
			what = tokenBudgetName
		}
		left := max(bs[i].Left(limit), 0)
		return &apperr.Error{Code: apperr.NoCredit, Reason: "insufficient_quota",
			Message: cost + ", more than is left of " + what +
				" ($" + left.String() + " of $" + limit.String() + " this month); it resets at " +
				metering.PeriodEnd(period).Format(time.RFC3339)}
	}
	c.reserved, c.reservedOrg, c.prepaid = worst, orgLimited, c.caller.Prepaid()
	return nil
}

// boundNote says where a completion bound Sluice chose came from, so a
// client refused for it knows to send a smaller max_tokens.
func boundNote(c *call) string {
	if c.req.MaxTokens > 0 {
		return ""
	}
	return ", the model's longest answer, as no max_tokens was sent"
}

// aliasNote says a reservation for an alias is priced over its models, so
// a client refused for it knows why a cheap target was not enough.
func aliasNote(c *call) string {
	if c.req.route == nil {
		return ""
	}
	return ", at the highest price among the models that may answer '" + c.req.Model + "'"
}

// settleBudget moves the reservation to the real cost, on the
// organization's balance when it follows its spending, on the token's when
// it has a budget and on the prepaid balance the request reserved on, in
// one ledger call, and tells the alerts how spending moved against the
// organization's budget and how its prepaid balance fell.
func (p *Pipeline) settleBudget(ctx context.Context, c *call, cost money.Amount) {
	org, tok := c.caller.TracksSpending(), c.caller.TokenBudget != nil
	if !org && !tok && !c.prepaid || c.reserved == 0 && cost == 0 {
		return
	}
	var rs [3]metering.Release
	n := 0
	if org {
		rs[n] = metering.Release{Account: metering.OrgAccount(c.caller.OrgID)}
		if c.reservedOrg {
			rs[n].Reserved = c.reserved
		}
		n++
	}
	if tok {
		rs[n] = metering.Release{Account: metering.TokenAccount(c.caller.OrgID, c.caller.TokenID), Reserved: c.reserved}
		n++
	}
	if c.prepaid {
		rs[n] = metering.Release{Account: metering.PrepaidAccount(c.caller.OrgID), Reserved: c.reserved}
		n++
	}
	period := metering.Period(c.start)
	bs, err := p.d.Ledger.Settle(ctx, period, cost, rs[:n]...)
	if err != nil {
		p.d.Log.Warn("settling a budget reservation failed", "request_id", c.req.ID, "err", err)
		return
	}
	if budget := c.caller.Budget.Limit; org && budget != nil {
		p.d.Alerts.Spent(c.caller.OrgID, *budget, period, bs[0].Spent-cost, bs[0].Spent)
	}
	if th := c.caller.LowBalanceThreshold; c.prepaid && th != nil && p.d.BalanceAlerts != nil && cost > 0 {
		b := bs[n-1]
		after := b.Credited - b.Withdrawn - b.Spent
		if after+cost > *th && after <= *th {
			p.d.BalanceAlerts.BalanceLow(c.caller.OrgID, *th, after)
		}
	}
}

// admitRequests spends weight from the request bucket alone.
func (p *Pipeline) admitRequests(ctx context.Context, caller accounts.Caller, requestID, model string, sink Sink, weight int64) error {
	if tokenRated(caller) {
		// With the token's own bucket, in the same call: both or neither.
		ds, err := p.d.Limiter.AllowAll(ctx, []quota.Charge{
			{Key: caller.RequestsKey, Params: requestParams(caller), Weight: weight},
			{Key: caller.TokenRequestsKey, Params: tokenRateParams(caller), Weight: weight}})
		if err != nil {
			return limiterError(caller, err, weight, 0, false)
		}
		d, own := binding(ds[0], ds[1])
		setLimitHeaders(sink, requestsHeaders, d)
		switch {
		case d.Allowed:
			return nil
		case own:
			return p.reject(ctx, caller, requestID, model, d, rejectedOwnRate)
		}
		return p.reject(ctx, caller, requestID, model, d, metering.RejectedRequests)
	}
	d, err := p.d.Limiter.Allow(ctx, caller.RequestsKey, requestParams(caller), weight)
	if err != nil {
		return limiterError(caller, err, weight, 0, false)
	}
	setLimitHeaders(sink, requestsHeaders, d)
	if !d.Allowed {
		return p.reject(ctx, caller, requestID, model, d, metering.RejectedRequests)
	}
	return nil
}

// settle corrects the buckets by what the request really used: the tokens
// bucket (a refund when the estimate was high or nothing was delivered, a
// debt when it was low), the provider key's tokens bucket and the budget. A
// provider key's failed attempts were refunded by the pool itself.
func (p *Pipeline) settle(ctx context.Context, c *call, out Served) {
	cost, _ := p.cost(c, out)
	p.settleBudget(ctx, c, cost)
	var used int64
	if out.billed() {
		used = int64(out.Usage.Total())
	}
	if c.caller.Tier.TokensPerMinute > 0 && used != c.estimate {
		if err := p.d.Limiter.Adjust(ctx, c.caller.TPMKey, tokenParams(c.caller), used-c.estimate); err != nil {
			p.d.Log.Warn("settling tokens-per-minute failed", "request_id", c.req.ID, "err", err)
		}
	}
	if out.billed() && out.KeyID != 0 {
		if err := p.d.Providers.Settle(ctx, out.KeyID, c.estimate, used); err != nil {
			p.d.Log.Warn("settling a provider key's tokens failed", "request_id", c.req.ID, "err", err)
		}
	}
}

// limiterError explains a request that can never fit, and treats anything
// else as internal (the degrading limiter has already fallen back to local
// limits, so an error here is a bug, not an outage).
func limiterError(caller accounts.Caller, err error, weight, estimate int64, embeddings bool) error {
	if !errors.Is(err, quota.ErrWeightExceedsCapacity) {
		return apperr.Wrap(err, "rate limiter")
	}
	tier := caller.Tier
	if estimate > tier.TokensPerMinute && tier.TokensPerMinute > 0 && embeddings {
		return apperr.Field(apperr.Invalid, "request_exceeds_limit", "input",
			"this request's input is "+strconv.FormatInt(estimate, 10)+" tokens, more than the "+tier.Name+" tier's "+
				strconv.FormatInt(tier.TokensPerMinute, 10)+" tokens per minute; send fewer or shorter inputs at a time")
	}
	if estimate > tier.TokensPerMinute && tier.TokensPerMinute > 0 {
		return apperr.Field(apperr.Invalid, "request_exceeds_limit", "max_tokens",
			"this request may use "+strconv.FormatInt(estimate, 10)+" tokens (its prompt and max_tokens), more than the "+
				tier.Name+" tier's "+strconv.FormatInt(tier.TokensPerMinute, 10)+" tokens per minute; lower max_tokens or shorten the prompt")
	}
	if tokenRated(caller) && weight > tokenRateParams(caller).Capacity && weight <= tier.Capacity {
		return apperr.Field(apperr.Invalid, "request_exceeds_limit", "X-Sluice-Priority",
			"this request weighs "+strconv.FormatInt(weight, 10)+" requests, more than this API key's burst of "+
				strconv.FormatInt(tokenRateParams(caller).Capacity, 10)+" (its requests_per_minute); send it at a lower priority")
	}
	return apperr.Field(apperr.Invalid, "request_exceeds_limit", "X-Sluice-Priority",
		"this request weighs "+strconv.FormatInt(weight, 10)+" requests, more than the "+
			tier.Name+" tier's burst of "+strconv.FormatInt(tier.Capacity, 10))
}

// reject is the 429 for the limit that tripped. It counts the rejection and
// freezes the token when it crosses its tier's threshold.
func (p *Pipeline) reject(ctx context.Context, caller accounts.Caller, requestID, model string, d quota.Decision, limit string) error {
	if limit == rejectedOwnRate {
		p.rejected(caller, model, metering.RejectedRequests)
	} else {
		p.rejected(caller, model, limit)
	}
	count, freeze, err := p.d.Detector.Rejected(ctx, "rej:"+caller.TokenKey, caller.Tier.FreezeThreshold)
	if err != nil {
		p.d.Log.Warn("counting a rejection failed", "request_id", requestID, "err", err)
	}
	if freeze {
		f, err := p.d.Freezer.Freeze(ctx, caller, count, p.d.Now())
		if err == nil {
			return p.frozenError(f.FrozenUntil, f.Reason)
		}
		p.d.Log.Error("freezing a token failed", "request_id", requestID, "token_id", caller.TokenID, "err", err)
	}
	code, what := "rate_limit_exceeded", "requests on the "+caller.Tier.Name+" tier"
	switch limit {
	case metering.RejectedTokens:
		code, what = "tokens_rate_limit_exceeded", "tokens per minute on the "+caller.Tier.Name+" tier"
	case rejectedOwnRate:
		what = "requests on this API key (its requests_per_minute of " + strconv.FormatInt(caller.TokenRequestsPerMinute, 10) + ")"
	}
	return &apperr.Error{Code: apperr.RateLimited, Reason: code, RetryAfter: d.RetryAfter,
		Message: "rate limit reached for " + what + " (limit " +
			strconv.FormatInt(d.Limit, 10) + ", remaining " + strconv.FormatInt(d.Remaining, 10) +
			"); retry after " + formatReset(d.RetryAfter)}
}

// limitHeaders names OpenAI's x-ratelimit-* headers of one bucket, already
// in canonical form, so writing them allocates only their values.
type limitHeaders struct{ limit, remaining, reset string }

var (
	requestsHeaders = limitHeaders{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"}
	tokensHeaders   = limitHeaders{"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"}
)

// setLimitHeaders writes a bucket's x-ratelimit-{limit,remaining,reset}-*.
func setLimitHeaders(sink Sink, names limitHeaders, d quota.Decision) {
	h := sink.Header()
	// One backing array for the three values: one allocation, not three.
	v := []string{strconv.FormatInt(d.Limit, 10), strconv.FormatInt(d.Remaining, 10), formatReset(d.ResetAfter)}
	h[names.limit], h[names.remaining], h[names.reset] = v[0:1:1], v[1:2:2], v[2:3:3]
}

// formatReset writes a duration the way OpenAI's reset headers do ("2s",
// "1m0s", "20ms").
func formatReset(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return d.Round(time.Millisecond).String()
}
