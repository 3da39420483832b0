package completion

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/chat"
	"github.com/sluicehq/sluice/chat/family"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/respcache"
	"github.com/sluicehq/sluice/upstream"
	"github.com/sluicehq/sluice/upstream/local"
	"github.com/sluicehq/sluice/wire"
)

// fallbackRetryAfter is what a client is told to wait when every provider
// for its model is unavailable and its tier does not fall back: about one
// breaker probe away.
const fallbackRetryAfter = 10 * time.Second

// answer finds the answer: the response cache, else the local model or a
// provider. For an alias it asks one of its targets, drawn by weight, and
// then its fallbacks in order, for as long as every key of the model asked
// is unavailable (or no key serves it); when no model answers, the tier
// decides (providersFailed).
func (p *Pipeline) answer(ctx context.Context, c *call) (Served, error) {
	route := c.req.route
	if route == nil {
		out, failure := p.answerModel(ctx, c)
		if failure == nil || out.promptOnly {
			return out, failure
		}
		waited := out.ProviderTime
		out, err := p.providersFailed(ctx, c, failure)
		out.ProviderTime += waited
		return out, err
	}
	var waited time.Duration
	var failure error
	c.order = p.order(route)
	// One budget for all the models asked: the request's bound, as for a
	// model (SLUICE_UPSTREAM_BUDGET), not one for each.
	c.budget = &upstream.Budget{}
	for _, m := range c.order {
		c.model = m
		body, err := p.attemptBody(c)
		if err != nil {
			return Served{}, err
		}
		c.body = body
		out, f := p.answerModel(ctx, c)
		waited += out.ProviderTime
		if f == nil || out.promptOnly {
			out.ProviderTime = waited
			return out, f
		}
		failure = f
		if ctx.Err() != nil || !unavailable(f) {
			break
		}
		p.d.Log.Info("model unavailable; asking the alias's next model", "request_id", c.req.ID, "alias", c.req.Model, "model", m, "err", f)
	}
	out, err := p.providersFailed(ctx, c, failure)
	out.ProviderTime += waited
	return out, err
}

// unavailable says the providers could not take the request at all (every
// key down, refusing or paced out, or none serving the model), which is
// when an alias's next model is asked; any other failure is an answer the
// next model would not change.
func unavailable(err error) bool {
	return errors.Is(err, upstream.ErrUnavailable) || errors.Is(err, upstream.ErrNoKey)
}

// order is the models an alias's request asks, in turn: one target drawn
// by weight, then the fallbacks, each once.
func (p *Pipeline) order(a *models.ModelAlias) []string {
	out := make([]string, 0, 1+len(a.Fallbacks))
	out = append(out, pickTarget(a.Targets, p.d.Rand()))
	for _, f := range a.Fallbacks {
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// pickTarget draws a target for r in [0, 1): each takes its weight's share
// of the interval, in order.
func pickTarget(ts []models.AliasTarget, r float64) string {
	total := 0
	for _, t := range ts {
		total += max(t.Weight, 1)
	}
	x := min(max(int(r*float64(total)), 0), total-1)
	for _, t := range ts {
		if x -= max(t.Weight, 1); x < 0 {
			return t.Model
		}
	}
	return ts[len(ts)-1].Model
}

// attemptBody is the body c.model gets when the client asked for an alias:
// the client's, with "model" naming c.model and, when the bound is
// Sluice's, the bound of c.model's family in its family's field: one copy.
func (p *Pipeline) attemptBody(c *call) ([]byte, error) {
	req := c.req
	e := bodyEdits{model: c.model}
	if c.model != local.ModelID {
		e.includeUsage = req.Stream && !req.IncludeUsage
		switch fam := family.Of(c.model); {
		case c.sendBound:
			if b, send := p.completionBound(c, fam); send {
				e.boundField, e.bound = fam.BoundField, b
			}
		case c.copyBound:
			e.boundField, e.bound = copiedBound(c.model, int64(req.MaxTokens))
		}
	}
	if c.history == nil {
		return providerBody(req, e), nil
	}
	return composedBody(c, e)
}

// answerModel answers with c.model: from the response cache, the local
// model or the provider pool. failure is the pool's error when no
// provider answered, for the caller to try another model or answer as the
// tier says.
func (p *Pipeline) answerModel(ctx context.Context, c *call) (out Served, failure error) {
	key := p.cacheKey(c)
	if key != "" {
		if out, ok := p.fromCache(ctx, c, key); ok {
			p.d.Metrics.Cache(true)
			return out, nil
		}
		p.d.Metrics.Cache(false)
		c.sink.Header().Set("X-Cache", "MISS")
	}
	switch {
	case c.model == local.ModelID && c.req.isEmbeddings():
		return p.answerEmbeddingsLocally(c), nil
	case c.model == local.ModelID:
		return p.answerLocally(ctx, c, key), nil
	}
	if p.d.Providers == nil { // an alias's model, on a node without provider keys
		return Served{}, upstream.ErrNoKey
	}
	return p.answerFromProvider(ctx, c, key)
}

// servedBy names the model that answers in X-Sluice-Model, before the
// answer's status is written: for an alias, which of its models it was.
func servedBy(sink Sink, model string) {
	sink.Header()["X-Sluice-Model"] = []string{model} // canonical: no key allocated
}

// answerLocally answers from the local model: the model asked for, or the
// fallback.
func (p *Pipeline) answerLocally(ctx context.Context, c *call, cacheKey string) Served {
	reply := p.d.Local.Complete(c.messages(), c.req.MaxTokens)
	out := Served{Status: http.StatusOK, Model: local.ModelID, delivered: true, reply: reply.Content,
		Usage: chat.Usage{PromptTokens: reply.PromptTokens, CompletionTokens: reply.CompletionTokens}}
	id := "chatcmpl-" + strings.TrimPrefix(c.req.ID, "req_")
	finish := reply.FinishReason
	servedBy(c.sink, out.Model)
	if c.req.Stream {
		streamLocal(c.sink, wireResponse{ID: id, Created: c.start.Unix(), Model: out.Model},
			reply.Content, finish, out.Usage, c.req.IncludeUsage)
		return out
	}
	b, _ := json.Marshal(wireResponse{
		ID: id, Object: "chat.completion", Created: c.start.Unix(), Model: out.Model,
		Choices: []wireChoice{{Message: &wireText{Role: "assistant", Content: reply.Content}, FinishReason: &finish}},
		Usage:   toWireUsage(out.Usage),
	})
	_ = c.sink.Send(http.StatusOK, "application/json; charset=utf-8", b)
	p.storeCached(ctx, c, cacheKey, b)
	return out
}

// answerFromProvider sends the request for c.model through the provider
// pool. failure is the pool's error when no key answered (out then holds
// only the time spent).
func (p *Pipeline) answerFromProvider(ctx context.Context, c *call, cacheKey string) (out Served, failure error) {
	asked := p.d.Now()
	doCtx := ctx
	var life *streamLife
	if c.req.Stream {
		life = p.newStreamLife(ctx)
		defer life.end()
		doCtx = life.ctx
	}
	native, err := c.native()
	if err != nil {
		return Served{}, err
	}
	resp, err := p.d.Providers.Do(doCtx, upstream.Request{Endpoint: c.req.Endpoint, Model: c.model, Body: c.body, Stream: c.req.Stream,
		Estimate: c.estimate, ID: c.req.ID, Native: native, Budget: c.budget})
	if err != nil {
		var sent *upstream.SentError
		if errors.As(err, &sent) {
			// The client left after the provider had the request and
			// before a word came back: the provider bills the prompt, so
			// the client is billed it, as for a stream cut before its
			// first word.
			return Served{Status: statusClientGone, Model: c.model, KeyID: sent.KeyID, Usage: c.counted(""),
				promptOnly: true, ProviderTime: p.d.Now().Sub(asked)}, err
		}
		return Served{ProviderTime: p.d.Now().Sub(asked)}, err
	}
	c.sink.Header().Set("X-Sluice-Upstream-Attempts", strconv.Itoa(resp.Attempts)) // canonical: no key allocated
	servedBy(c.sink, c.model)
	out = Served{Status: resp.Status, Model: c.model, KeyID: resp.KeyID, Attempts: resp.Attempts}
	if c.req.Stream && resp.Stream != nil {
		out = p.relay(ctx, c, resp, out, life)
		out.ProviderTime = p.d.Now().Sub(asked)
		return out, nil
	}
	out.ProviderTime = p.d.Now().Sub(asked)
	if resp.Native {
		// The provider's own answer, in the client's dialect: read, not
		// translated, and not cached (the cache holds chat completions).
		// Sent first and read after, as a chat completion is: the client
		// does not wait for the reading.
		if err := c.sink.(NativeSink).SendNative(resp.Status, resp.Body); errors.Is(err, ErrUnreadableAnswer) {
			out.Status = http.StatusBadGateway
			return out, nil // answered as the gateway's error: not delivered, not billed
		}
		read, err := resp.ReadNative()
		if err != nil {
			// An object that is not the provider's message, passed on as
			// a chat completion's unreadable body is: billed by our count.
			p.d.Log.Warn("a provider's own answer could not be read; billed by Sluice's count", "request_id", c.req.ID, "model", c.model, "err", err)
		}
		out.delivered, out.reply, out.Usage = true, read.Reply, read.Usage
		if !read.Reported {
			out.Usage = c.counted(read.Reply)
		}
		return out, nil
	}
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		ct = "application/json"
	}
	_ = c.sink.Send(resp.Status, ct, resp.Body)
	if resp.Status/100 != 2 {
		return out, nil // the provider's word on the request itself, passed on and not billed
	}
	parsed, _ := upstream.ReadCompletion(resp.Body)
	out.delivered, out.reply, out.Usage = true, parsed.Reply, parsed.Usage
	if !parsed.Reported { // a provider that reports no usage is billed by our own count
		out.Usage = c.counted(parsed.Reply)
	}
	p.storeCached(ctx, c, cacheKey, resp.Body)
	return out, nil
}

// native is the client's own body for a provider of its dialect
// (Request.Native), nil when the provider must be sent the chat body: a
// conversation's history put in front, a bound of Sluice's, or a sink
// that cannot write the dialect back. The only edit is an alias's: the
// model asked now. (The chat body's other edit, asking a stream for its
// usage, is not needed: Anthropic's streams always carry it.)
func (c *call) native() (*upstream.Native, error) {
	n := c.req.Native
	if n == nil || c.history != nil || c.sendBound {
		return nil, nil
	}
	if _, ok := c.sink.(NativeSink); !ok {
		return nil, nil
	}
	if c.model == c.req.Model {
		return n, nil
	}
	body, err := wire.SetMember(n.Body, "model", c.model)
	if err != nil {
		return nil, err
	}
	return &upstream.Native{Kind: n.Kind, Body: body, Betas: n.Betas}, nil
}

// providersFailed answers a request no provider answered.
func (p *Pipeline) providersFailed(ctx context.Context, c *call, err error) (Served, error) {
	if ctx.Err() != nil {
		return Served{}, ctx.Err() // the client left; nothing to answer
	}
	var refusal *apperr.Error
	if errors.As(err, &refusal) {
		return Served{}, refusal // the provider cannot do what was asked, named: the client's to fix
	}
	if !unavailable(err) {
		// The provider answered something unusable (e.g. an oversized
		// body): a bad gateway, not our bug.
		p.d.Log.Warn("unusable provider answer", "request_id", c.req.ID, "model", c.model, "err", err)
		return Served{}, apperr.WithReason(apperr.BadUpstream, "upstream_error", "the provider's answer could not be used; retry later")
	}
	if c.req.isEmbeddings() {
		p.d.Log.Warn("providers unavailable", "request_id", c.req.ID, "model", c.req.Model, "err", err)
		return Served{}, errNoEmbeddingsFallback(c.req.Model)
	}
	if c.caller.Tier.UpstreamFallback == "error" {
		p.d.Log.Warn("providers unavailable", "request_id", c.req.ID, "model", c.req.Model, "err", err)
		e := apperr.WithReason(apperr.Unavailable, "upstream_unavailable",
			"every provider for '"+c.req.Model+"' is unavailable right now"+aliasModels(c)+"; retry later")
		if errors.Is(err, upstream.ErrTimeout) { // the last attempt got no answer in time
			e = apperr.WithReason(apperr.Timeout, "upstream_timeout",
				"no provider for '"+c.req.Model+"' answered in time"+aliasModels(c)+"; retry later")
		}
		e.RetryAfter = fallbackRetryAfter
		return Served{}, e
	}
	p.d.Log.Info("providers unavailable; answering from the local model", "request_id", c.req.ID, "model", c.req.Model, "err", err)
	c.sink.Header().Set("X-Sluice-Fallback", "local")
	out := p.answerLocally(ctx, c, "")
	out.Fallback = true
	return out, nil
}

// aliasModels names the models an alias's request asked, for the refusal.
func aliasModels(c *call) string {
	if len(c.order) == 0 {
		return ""
	}
	return " (asked in turn: " + strings.Join(c.order, ", ") + ")"
}

// streamLife is how long the provider's side of a stream lives: while
// the client listens, and, once the answer has finished (its finish_reason
// passed), up to UsageGrace after the client left, so the usage chunk that
// follows is read and billed. A client that leaves mid-answer ends it at
// once: the provider stops generating, and the prompt's estimate and what
// was delivered are billed.
type streamLife struct {
	ctx    context.Context // the provider request's: not ended by the client's
	cancel context.CancelFunc
	stop   func() bool // stops watching the client's context
	grace  time.Duration

	tap atomic.Pointer[upstream.UsageTap] // set once the stream is relayed

	mu    sync.Mutex
	timer *time.Timer // the grace period, once started
}

func (p *Pipeline) newStreamLife(client context.Context) *streamLife {
	ctx, cancel := context.WithCancel(context.WithoutCancel(client))
	l := &streamLife{ctx: ctx, cancel: cancel, grace: p.d.UsageGrace}
	l.stop = context.AfterFunc(client, l.clientGone)
	return l
}

// clientGone ends the provider's stream, or starts the grace period when
// the answer has finished.
func (l *streamLife) clientGone() {
	t := l.tap.Load()
	if t == nil || !t.Finished() || l.grace <= 0 {
		l.cancel()
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timer == nil {
		l.timer = time.AfterFunc(l.grace, l.cancel)
	}
}

func (l *streamLife) end() {
	l.stop()
	l.mu.Lock()
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
	l.cancel()
}

// relay forwards a provider's event stream as it arrives, leaving out the
// usage chunk Sluice asked for on the client's behalf when the client did
// not ask for it. Usage comes from the provider's usage chunk; when the
// stream ends early (client gone mid-answer, provider stalled), the
// prompt's estimate and what was delivered are billed.
func (p *Pipeline) relay(ctx context.Context, c *call, resp *upstream.Response, out Served, life *streamLife) Served {
	defer resp.Stream.Close()
	tap := upstream.NewUsageTap(resp.Stream)
	filter := usageFilter{strip: !c.req.IncludeUsage}
	if resp.Native {
		// The provider's own events, which the sink passes on: their
		// usage is the client's to read, and an end cut short the sink's
		// to close in the dialect's words.
		_ = c.sink.(NativeSink).StartNativeStream(resp.Status)
		tap, filter = upstream.NewMessagesUsageTap(resp.Stream), usageFilter{}
	} else {
		_ = c.sink.StartStream(resp.Status)
	}
	life.tap.Store(tap)
	buf := make([]byte, 32<<10)
	var readErr error
	listening := true
	for {
		n, err := tap.Read(buf)
		if n > 0 && listening {
			if kept := filter.keep(buf[:n]); len(kept) > 0 {
				if _, werr := c.sink.Write(kept); werr != nil {
					// The client is gone: a finished answer is read on
					// for its usage (within the grace), any other ends.
					listening = false
					life.clientGone()
					if !tap.Finished() {
						readErr = werr
						break
					}
				}
			}
		}
		if err != nil {
			readErr = err
			break
		}
	}
	if listening && !resp.Native && !errors.Is(readErr, io.EOF) && !errors.Is(readErr, context.Canceled) && ctx.Err() == nil {
		// A stalled or broken provider: end the stream with an error event
		// the SDKs understand, rather than a silent cut.
		p.d.Log.Warn("provider stream ended abnormally", "request_id", c.req.ID, "err", readErr)
		var e wire.OpenAIError
		e.Error.Message, e.Error.Type, e.Error.Code = "the provider stopped sending; the answer is incomplete", "server_error", "upstream_stalled"
		msg, _ := json.Marshal(e)
		_, _ = c.sink.Write(append(append([]byte("data: "), msg...), "\n\n"...))
	}
	out.delivered, out.reply, out.Usage = true, tap.Delivered(), tap.Billed(c.counted)
	return out
}

// usageFilter leaves the usage chunk (choices empty, usage set) out of an
// event stream, with the blank line that ends its event; with strip false
// it passes everything. It holds back a line until its end has come.
type usageFilter struct {
	strip     bool
	pending   []byte // the start of a line whose end has not come
	dropBlank bool   // the next line, if blank, ends a dropped event
	out       []byte
}

// keep returns the part of b to send on; it is valid until the next call.
func (f *usageFilter) keep(b []byte) []byte {
	if !f.strip {
		return b
	}
	f.out = f.out[:0]
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			f.pending = append(f.pending, b...)
			break
		}
		line := b[:i+1]
		b = b[i+1:]
		if len(f.pending) > 0 {
			line = append(f.pending, line...)
			f.pending = f.pending[:0]
		}
		blank := len(bytes.TrimRight(line, "\r\n")) == 0
		switch {
		case blank && f.dropBlank:
			f.dropBlank = false
		case isUsageChunk(line):
			f.dropBlank = true
		default:
			f.dropBlank = false
			f.out = append(f.out, line...)
		}
	}
	return f.out
}

// isUsageChunk says whether an event line is OpenAI's usage chunk: data
// whose choices are empty and whose usage is set.
func isUsageChunk(line []byte) bool {
	payload, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:"))
	if !ok || !bytes.Contains(payload, []byte(`"usage"`)) {
		return false
	}
	var chunk struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   json.RawMessage   `json:"usage"`
	}
	return json.Unmarshal(payload, &chunk) == nil && len(chunk.Choices) == 0 && len(chunk.Usage) > 0 && string(chunk.Usage) != "null"
}

// cacheKey is the request's response-cache key, "" when it is not cached.
// Streams are not cached: a cached answer is replayed as one JSON body.
// Nor are embeddings: a vector answer is large and rarely asked for twice,
// and a cached one would be read in whole to be billed.
func (p *Pipeline) cacheKey(c *call) string {
	req := c.req
	// Most requests are neither at temperature 0 nor marked: skip the
	// second parse of the body that Cacheable would do.
	if p.d.Cache == nil || req.Stream || req.isEmbeddings() || req.CacheMode == "" && (req.Temperature == nil || *req.Temperature != 0) ||
		!respcache.Cacheable(c.body, req.CacheMode) {
		return ""
	}
	key, err := respcache.Key(c.caller.OrgID, "/v1/chat/completions", c.body)
	if err != nil {
		return ""
	}
	return key
}

// fromCache answers from the response cache, if the answer is there.
func (p *Pipeline) fromCache(ctx context.Context, c *call, key string) (Served, bool) {
	b, ok, err := p.d.Cache.Get(ctx, key)
	if err != nil {
		p.d.Log.Warn("response cache unavailable; asking the model", "request_id", c.req.ID, "err", err)
	}
	if !ok {
		return Served{}, false
	}
	parsed, err := upstream.ReadCompletion(b)
	if err != nil {
		return Served{}, false
	}
	c.sink.Header().Set("X-Cache", "HIT")
	servedBy(c.sink, c.model)
	_ = c.sink.Send(http.StatusOK, "application/json; charset=utf-8", b)
	// Metered and priced as the model asked for (for an alias, the model
	// whose body the cache key was made of), whatever the provider named
	// its answer's model.
	return Served{Status: http.StatusOK, Model: c.model, Usage: parsed.Usage, Cached: true, delivered: true, reply: parsed.Reply}, true
}

func (p *Pipeline) storeCached(ctx context.Context, c *call, key string, body []byte) {
	if key == "" {
		return
	}
	if err := p.d.Cache.Set(context.WithoutCancel(ctx), key, body, p.d.CacheTTL); err != nil {
		p.d.Log.Warn("storing a cached answer failed", "request_id", c.req.ID, "err", err)
	}
}
