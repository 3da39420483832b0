// Package completion is the completion pipeline: everything one chat
// completion (or embeddings request: embeddings.go) goes through between
// an authenticated caller and its answer, in one place and in order,
// without HTTP. The /v1 handlers decode a
// request, call Complete with a Sink that writes the HTTP response, and
// encode the error it returns; the job worker calls it the same way with a
// Sink that keeps the answer.
//
// The steps of Complete, top to bottom:
//
//  1. freeze check: a frozen token is refused before anything else;
//  2. history: the conversation named by the request is put in front of it;
//  3. weight: the request's priority, raised for low-value prompts;
//  4. admission: the request bucket (weight) and the tokens-per-minute
//     bucket (prompt + max_tokens) are charged together, both or neither;
//     a rejection counts toward a freeze; then, for an organization whose
//     spending is limited (a hard budget, or included credit its tier does
//     not let it exceed), the request's worst-case cost is reserved in the
//     budget ledger;
//  5. answer: the response cache, else the local model or the provider
//     pool, falling back to the local model as the tier allows;
//  6. settlement: the tokens bucket, the provider key's bucket and the
//     budget reservation are corrected by the real usage and cost
//     (refunded in full when nothing was delivered, charged a debt on an
//     overrun); budget thresholds crossed raise alerts;
//  7. history and metering: the reply is added to the conversation and the
//     usage event, with its exact cost, enqueued.
//
// Whatever happens after admission, settlement runs exactly once.
package completion

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/chat"
	"github.com/sluicehq/sluice/conversations"
	"github.com/sluicehq/sluice/logging"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/respcache"
	"github.com/sluicehq/sluice/upstream"
	"github.com/sluicehq/sluice/upstream/local"
)

// Freezes says whether a token is frozen; the token directory's in-memory
// set answers it without a database or a lock.
type Freezes interface {
	Frozen(tokenID int64) (quota.Freeze, bool)
}

// Freezer freezes a token that keeps being rejected, storing and auditing it.
type Freezer interface {
	Freeze(ctx context.Context, c accounts.Caller, count int, now time.Time) (models.Freeze, error)
}

// Providers is the provider key pool.
type Providers interface {
	Serves(model string) bool
	Do(ctx context.Context, req upstream.Request) (*upstream.Response, error)
	// Settle corrects a key's tokens bucket once the real usage is known.
	Settle(ctx context.Context, keyID, estimate, actual int64) error
}

// Aliases resolves the public model names an admin defined to the models
// behind them, from memory: the request path reads no database for it.
type Aliases interface {
	// Alias returns the alias called name, shared and read-only.
	Alias(name string) (*models.ModelAlias, bool)
}

// Recorder takes usage events off the request path, and counts rejections.
type Recorder interface {
	Record(ev models.UsageEvent) error
	Reject(orgID, tokenID int64, model, reason string, at time.Time)
}

// Alerts hears how a settlement moved an organization's spending against
// its budget, to tell it when a threshold is crossed.
type Alerts interface {
	Spent(orgID int64, limit money.Amount, period time.Time, before, after money.Amount)
}

// BalanceAlerts hears that a settlement took an organization's prepaid
// balance from above its low-balance threshold to at or below it.
type BalanceAlerts interface {
	BalanceLow(orgID int64, threshold, balance money.Amount)
}

// Deps are what a Pipeline is built from. Cache, Conversations and
// Providers may be nil: that step is then off (no response cache, no
// X-Sluice-Session histories, only the local model).
type Deps struct {
	Log *slog.Logger
	Now func() time.Time

	Limiter         quota.Limiter
	Freezes         Freezes
	Freezer         Freezer
	Detector        *quota.Detector    // counts rejections toward a freeze
	Scorer          *quota.ValueScorer // raises the weight of low-value prompts
	PriorityWeights map[string]int64   // X-Sluice-Priority -> request weight
	// DefaultMaxTokens is the completion bound of a request without
	// max_tokens to a model whose longest answer Sluice does not know.
	DefaultMaxTokens int64
	// UsageGrace is how long a stream whose answer had finished is read
	// for the provider's usage chunk after its client left.
	UsageGrace time.Duration

	Local     *local.Model
	Providers Providers
	// Aliases are the admin's model aliases; nil: none.
	Aliases Aliases
	// Rand returns a float in [0, 1), drawing each alias request's target
	// by weight; nil means math/rand/v2. It must be safe for concurrent use.
	Rand func() float64

	Cache    respcache.Cache
	CacheTTL time.Duration

	Conversations conversations.Store
	HistoryBudget int // tokens of history kept in front of a request

	Prices *metering.PriceBook
	Ledger metering.Ledger // budgets and blocking included credit
	Alerts Alerts
	// BalanceAlerts hears prepaid balances falling below their
	// threshold; nil: none.
	BalanceAlerts BalanceAlerts
	Recorder      Recorder
	Metrics       *metrics.Gateway // nil: not counted
	// LogPrompts logs each exchange's prompt and reply, redacted: only when
	// an operator asks for it (SLUICE_LOG_PROMPTS).
	LogPrompts bool
}

// Pipeline runs chat completions. It is safe for concurrent use. Its
// dependencies are fixed by New.
type Pipeline struct {
	d      Deps
	counts *countCache // what long texts counted, for the next request that sends them
}

// New returns a pipeline over d.
func New(d Deps) *Pipeline {
	if d.Rand == nil {
		d.Rand = rand.Float64
	}
	return &Pipeline{d: d, counts: newCountCache()}
}

// Served is how a request was answered.
type Served struct {
	Status   int        // the answer's HTTP status (a provider's 4xx is passed on as is)
	Model    string     // the model that answered (for an alias, the target or fallback), metered and priced as such
	Usage    chat.Usage // what is billed
	KeyID    int64      // the provider key that answered; 0 for local answers and cache hits
	Attempts int        // provider attempts it took; 0 when no provider was asked
	Cached   bool       // answered from the response cache
	Fallback bool       // answered by the local model because providers were unavailable
	// ProviderTime is how long the request waited for and relayed a
	// provider's answer: what is not Sluice's own overhead.
	ProviderTime time.Duration

	delivered bool // a 2xx answer reached the sink, wholly or (a stream) partly
	// promptOnly: no answer reached the sink, but the provider had the
	// request and bills its prompt (a stream whose client left before its
	// first word); the prompt's estimate is billed.
	promptOnly bool
	reply      string // the assistant's text, for the conversation
}

// billed says whether the request is billed: an answer reached the sink,
// or the provider had its prompt.
func (s Served) billed() bool { return s.delivered || s.promptOnly }

// statusClientGone is the status a usage event records for a request its
// client left before the answer began (nginx's "client closed request").
const statusClientGone = 499

// call is one request on its way through the pipeline.
type call struct {
	caller  accounts.Caller
	req     *Request
	sink    Sink
	start   time.Time
	history []chat.Message // a conversation's stored turns, put in front of the request; nil for none
	// model is the model being asked: the request's, or for an alias the
	// target or fallback tried now.
	model string
	body  []byte // the body to send a provider: history, bound and usage option as needed; for an alias, model's
	// sendBound says the completion bound is Sluice's (the client set
	// none and a limit relies on it), sent to each model in its family's
	// field: an alias's models get it per attempt.
	sendBound bool
	// copyBound says the client bounded the completion with
	// max_completion_tokens alone and a limit relies on it: a model whose
	// API reads max_tokens gets the bound in that field too (copiedBound).
	copyBound bool
	order     []string         // an alias's models in the order they are asked; nil for a model
	budget    *upstream.Budget // the providers' time, shared by an alias's models; nil for a model
	prompt    int64            // the prompt's estimate, history included
	// completion is the completion tokens reserved: max_tokens, or the
	// bound Sluice sends (or, when no limit relies on it, the default),
	// plus a predicted output's tokens.
	completion int64
	estimate   int64        // tokens reserved: prompt + completion
	reserved   money.Amount // the budget reservation, 0 when none was needed
	// reservedOrg says the reservation is held on the organization's
	// balance too, not only on the token's.
	reservedOrg bool
	// prepaid says the reservation is held on the organization's prepaid
	// balance: the request's cost is debited from it.
	prepaid bool
}

// messages are the call's messages as text: history, then the request's.
func (c *call) messages() []chat.Message {
	if len(c.history) == 0 {
		return c.req.Messages()
	}
	return append(slices.Clip(c.history), c.req.Messages()...)
}

// Complete runs one chat completion for caller and writes the answer to
// sink. It returns what was served, or an error to answer instead: then
// nothing but headers has reached the sink. When ctx ends before an answer
// (the client left) it returns ctx's error.
func (p *Pipeline) Complete(ctx context.Context, caller accounts.Caller, req *Request, sink Sink) (Served, error) {
	c := &call{caller: caller, req: req, sink: sink, start: p.d.Now(), model: req.Model}
	if err := p.checkFrozen(caller, req.Model, req.Queued); err != nil {
		return Served{}, err
	}
	if err := CheckModel(caller, req.Model); err != nil {
		// Answered as a model that does not exist, costing what one costs
		// (see the handlers' refused Parse): the token learns nothing of
		// what else is served, nor of its own list.
		if !req.Queued && req.Paid.requests == 0 { // a job pays when it runs, and this one will not
			if err := p.admitRequests(ctx, caller, req.ID, req.Model, sink, 1); err != nil {
				return Served{}, err
			}
		}
		return Served{}, err
	}
	if req.Conversation != "" && !req.Queued && req.Paid.requests == 0 {
		paid, err := p.payForHistory(ctx, caller, req.ID, req.Model, sink)
		if err != nil {
			return Served{}, err
		}
		req.Paid = paid
	}
	err := p.withHistory(ctx, c)
	var weight int64
	if err == nil {
		weight, err = p.weigh(c)
	}
	if err == nil {
		err = p.bound(c)
	}
	if err != nil {
		// A request refused before admission still costs one request (paid
		// already by one whose history was read), so a flood of bad
		// requests is limited too.
		if req.Paid.requests == 0 {
			if rerr := p.admitRequests(ctx, caller, req.ID, req.Model, sink, 1); rerr != nil {
				return Served{}, rerr
			}
		}
		return Served{}, err
	}
	if err := p.admit(ctx, c, weight-req.Paid.requests); err != nil {
		return Served{}, err
	}

	out, err := p.answer(ctx, c)
	// Bookkeeping outlives a client that hangs up: what it was served is
	// settled and billed.
	after := context.WithoutCancel(ctx)
	p.settle(after, c, out)
	if !out.billed() {
		return out, err
	}
	if err == nil {
		p.saveHistory(after, c, out.reply)
	}
	p.record(c, out)
	return out, err
}

// CheckModel refuses a model (or alias) the caller's token may not use, in
// the words of a model that does not exist (ErrModelNotFound).
func CheckModel(caller accounts.Caller, model string) error {
	if caller.MayUseModel(model) {
		return nil
	}
	return ErrModelNotFound(model)
}

// counted is Sluice's own count of an exchange, for a provider (or a cut
// stream) that reports no usage: the prompt's estimate and the reply
// counted as the family counts text.
func (c *call) counted(reply string) chat.Usage {
	return chat.Usage{PromptTokens: int(c.prompt), CompletionTokens: c.req.Prompt.Family.Counter.Count([]byte(reply))}
}

// cost is what a served request is billed, and the price version used:
// nothing when nothing was delivered, for an unpriced model, or for a
// response-cache hit on a tier that does not bill them.
func (p *Pipeline) cost(c *call, out Served) (money.Amount, int64) {
	if !out.billed() || out.Cached && !c.caller.Tier.BillCacheHits {
		return 0, 0
	}
	price, ok := p.d.Prices.At(out.Model, c.start)
	if !ok {
		return 0, 0
	}
	return metering.Cost(price, out.Usage), price.ID
}

// Admit admits a call that is not a completion (listing models, reading a
// conversation) or a completion refused before it could run (a malformed
// body): the freeze check and one request from the caller's request bucket.
// The rate-limit headers go to sink; requestID is for the logs.
func (p *Pipeline) Admit(ctx context.Context, caller accounts.Caller, requestID string, sink Sink) error {
	if err := p.checkFrozen(caller, "", false); err != nil {
		return err
	}
	return p.admitRequests(ctx, caller, requestID, "", sink, 1)
}

// record enqueues the usage event; the recorder batches it into the database.
func (p *Pipeline) record(c *call, out Served) {
	cost, priceID := p.cost(c, out)
	ev := models.UsageEvent{
		RequestID: c.req.ID, OrgID: c.caller.OrgID, TokenID: c.caller.TokenID, Model: out.Model,
		PromptTokens: out.Usage.PromptTokens, CompletionTokens: out.Usage.CompletionTokens, CachedTokens: out.Usage.CachedTokens,
		CacheCreationTokens: out.Usage.CacheCreationTokens, ReasoningTokens: out.Usage.ReasoningTokens, Dialect: c.req.dialect(),
		Cost: cost, PriceID: priceID, Status: out.Status,
		LatencyMs: int(p.d.Now().Sub(c.start) / time.Millisecond), CreatedAt: c.start.UTC(),
		Cached: out.Cached, Fallback: out.Fallback, Prepaid: c.prepaid,
	}
	if out.KeyID != 0 {
		keyID := out.KeyID // a copy, so out itself stays on the stack
		ev.UpstreamKeyID = &keyID
	}
	if err := p.d.Recorder.Record(ev); err != nil {
		p.d.Log.Error("usage event not recorded", "request_id", ev.RequestID, "err", err)
	}
	p.d.Metrics.Tokens(c.caller.Tier.Name, out.Model, out.Usage)
	if p.d.LogPrompts {
		prompt := promptText(c.messages())
		if c.req.isEmbeddings() {
			prompt = c.req.embeddingsText()
		}
		p.d.Log.Info("exchange", "request_id", c.req.ID, "prompt", logging.Redact(prompt), "reply", logging.Redact(out.reply))
	}
}
