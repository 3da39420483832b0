package handlers

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/respcache"
	"github.com/sluicehq/sluice/sessions"
	"github.com/sluicehq/sluice/upstream"
	"github.com/sluicehq/sluice/upstream/local"
)

// served is how one chat request was answered, for metering and sessions.
type served struct {
	model    string
	usage    usageOut
	reply    string // the assistant's text, for the session history
	ok       bool   // a 2xx answer was delivered (wholly or, for a stream, partly)
	cached   bool
	fallback bool
	keyID    *int64
}

// chatCompletions answers POST /v1/chat/completions: freeze check, body,
// session history, admission against the request and tokens-per-minute
// buckets, the response cache, then the local model or a provider (with
// fallback), and finally the tokens bucket settled with the real usage.
func (a *api) chatCompletions(c *gin.Context) {
	start := a.now()
	caller := c.MustGet(callerKey).(accounts.Caller)
	if !a.notFrozen(c, caller) {
		return
	}
	req, msgs, body, err := a.readChatRequest(c)
	if err == nil {
		msgs, body, err = a.withSession(c, caller, msgs, body)
	}
	var weight int64
	if err == nil {
		weight, err = a.weigh(c, caller, msgs)
	}
	if err != nil {
		// Bad requests still cost one request, so a flood of them is limited.
		if a.admitRequests(c, caller, 1) {
			writeOpenAIError(c, a.log, err)
		}
		return
	}
	maxTokens := 0
	if req.MaxCompletionTokens != nil {
		maxTokens = *req.MaxCompletionTokens
	}
	estimate := estimateTokens(msgs, maxTokens, a.defaultMaxTokens)
	if !a.admitChat(c, caller, weight, estimate) {
		return
	}

	var out served
	cacheKey := a.cacheKey(c, caller, req, body)
	switch {
	case cacheKey != "" && a.serveCached(c, cacheKey, &out):
	case req.Model == local.ModelID:
		out = a.answerLocally(c, req, msgs, maxTokens, start, cacheKey)
	default:
		out = a.answerUpstream(c, caller, req, msgs, body, estimate, maxTokens, start, cacheKey)
	}
	if !out.ok {
		// Nothing was delivered: give the reservation back.
		a.settleTokens(c, caller, estimate, 0)
		return
	}
	a.settleTokens(c, caller, estimate, int64(out.usage.TotalTokens))
	if out.keyID != nil {
		if err := a.upstream.Settle(afterwards(c), *out.keyID, estimate, int64(out.usage.TotalTokens)); err != nil {
			a.log.Warn("settling a provider key's tokens failed", "request_id", requestID(c), "err", err)
		}
	}
	a.saveSession(c, caller, msgs, out.reply)
	a.record(c, caller, out, start)
}

// answerLocally answers from sluice-local: the chosen model, or the fallback.
func (a *api) answerLocally(c *gin.Context, req chatRequest, msgs []local.Message, maxTokens int, start time.Time, cacheKey string) served {
	reply := a.model.Complete(msgs, maxTokens)
	usage := usageOut{PromptTokens: reply.PromptTokens, CompletionTokens: reply.CompletionTokens, TotalTokens: reply.PromptTokens + reply.CompletionTokens}
	id := "chatcmpl-" + strings.TrimPrefix(requestID(c), "req_")
	if req.Stream {
		includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
		streamReply(c, id, start.Unix(), reply, usage, includeUsage)
	} else {
		finish := reply.FinishReason
		b, _ := json.Marshal(chatResponse{
			ID: id, Object: "chat.completion", Created: start.Unix(), Model: local.ModelID,
			Choices: []chatChoice{{Message: &chatOut{Role: "assistant", Content: reply.Content}, FinishReason: &finish}},
			Usage:   &usage,
		})
		c.Data(http.StatusOK, "application/json; charset=utf-8", b)
		a.storeCached(c, cacheKey, b)
	}
	return served{model: local.ModelID, usage: usage, reply: reply.Content, ok: true}
}

// answerUpstream sends the request through the provider pool. When every
// key is unavailable the tier decides: sluice-local answers (and says so in
// x-sluice-fallback) or the client gets 503 with Retry-After.
func (a *api) answerUpstream(c *gin.Context, caller accounts.Caller, req chatRequest, msgs []local.Message, body []byte,
	estimate int64, maxTokens int, start time.Time, cacheKey string) served {
	if req.Stream {
		body = withIncludeUsage(body)
	}
	resp, err := a.upstream.Do(c.Request.Context(), upstream.Request{Model: req.Model, Body: body, Stream: req.Stream, Estimate: estimate, ID: requestID(c)})
	if err != nil {
		if c.Request.Context().Err() != nil {
			return served{} // the client left; nothing to answer
		}
		if !errors.Is(err, upstream.ErrUnavailable) && !errors.Is(err, upstream.ErrNoKey) {
			// The provider answered something unusable (e.g. an oversized
			// body): a bad gateway, not our bug.
			a.log.Warn("unusable provider answer", "request_id", requestID(c), "err", err)
			writeOpenAIError(c, a.log, apperr.WithReason(apperr.BadUpstream, "upstream_error", "the provider's answer could not be used; retry later"))
			return served{}
		}
		if caller.Tier.UpstreamFallback == "error" {
			setRetryAfter(c, 10*time.Second)
			writeOpenAIError(c, a.log, apperr.WithReason(apperr.Unavailable, "upstream_unavailable",
				"every provider for '"+req.Model+"' is unavailable right now; retry later"))
			return served{}
		}
		a.log.Info("providers unavailable; answering from the local model", "request_id", requestID(c), "model", req.Model, "err", err)
		c.Header("x-sluice-fallback", "local")
		out := a.answerLocally(c, req, msgs, maxTokens, start, "")
		out.fallback = true
		return out
	}
	keyID := resp.KeyID
	c.Header("x-sluice-upstream-attempts", strconv.Itoa(resp.Attempts))
	if req.Stream && resp.Stream != nil {
		return a.relayStream(c, req, msgs, resp, &keyID)
	}
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		ct = "application/json"
	}
	c.Data(resp.Status, ct, resp.Body)
	if resp.Status/100 != 2 {
		return served{}
	}
	var parsed struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage *usageOut `json:"usage"`
	}
	_ = json.Unmarshal(resp.Body, &parsed)
	out := served{model: req.Model, ok: true, keyID: &keyID}
	if len(parsed.Choices) > 0 {
		out.reply = parsed.Choices[0].Message.Content
	}
	if parsed.Usage != nil {
		out.usage = *parsed.Usage
	} else { // a provider that reports no usage is billed by our own count
		out.usage = countedUsage(msgs, out.reply)
	}
	a.storeCached(c, cacheKey, resp.Body)
	return out
}

// relayStream forwards a provider's event stream as it arrives. Usage comes
// from the provider's final usage chunk; when the stream ends early (client
// gone, provider stalled) only what was delivered is billed.
func (a *api) relayStream(c *gin.Context, req chatRequest, msgs []local.Message, resp *upstream.Response, keyID *int64) served {
	defer resp.Stream.Close()
	h := c.Writer.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	c.Status(resp.Status)
	tap := upstream.NewUsageTap(resp.Stream)
	r := bufio.NewReader(tap)
	buf := make([]byte, 32<<10)
	var readErr error
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := c.Writer.Write(buf[:n]); werr != nil {
				readErr = werr
				break
			}
			c.Writer.Flush()
		}
		if err != nil {
			readErr = err
			break
		}
	}
	if readErr != nil && !errors.Is(readErr, io.EOF) && !errors.Is(readErr, context.Canceled) && c.Request.Context().Err() == nil {
		// A stalled or broken provider: end the stream with an error event
		// the SDKs understand, rather than a silent cut.
		a.log.Warn("upstream stream ended abnormally", "request_id", requestID(c), "err", readErr)
		msg, _ := json.Marshal(openAIErrorBody{Error: struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		}{Message: "the provider stopped sending; the answer is incomplete", Type: "server_error", Code: "upstream_stalled"}})
		c.Writer.WriteString("data: " + string(msg) + "\n\n")
		c.Writer.Flush()
	}
	out := served{model: req.Model, ok: true, keyID: keyID, reply: tap.Delivered()}
	if p, comp, final := tap.Usage(); final {
		out.usage = usageOut{PromptTokens: p, CompletionTokens: comp, TotalTokens: p + comp}
	} else {
		out.usage = countedUsage(msgs, out.reply)
	}
	return out
}

// countedUsage is our own count, for providers (or cut streams) that report
// none.
func countedUsage(msgs []local.Message, reply string) usageOut {
	p, comp := local.PromptTokens(msgs), local.CountTokens(reply)
	return usageOut{PromptTokens: p, CompletionTokens: comp, TotalTokens: p + comp}
}

// withIncludeUsage asks the provider for its usage chunk, which is what
// streams are billed by. The chunk is passed on to the client as well.
func withIncludeUsage(body []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return body
	}
	m["stream_options"] = json.RawMessage(`{"include_usage":true}`)
	b, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return b
}

// cacheKey is the request's response-cache key, "" when it is not cached.
// Streams are not cached: a cached answer is replayed as one JSON body.
func (a *api) cacheKey(c *gin.Context, caller accounts.Caller, req chatRequest, body []byte) string {
	header := c.GetHeader(respcache.HeaderName)
	// Most requests are neither at temperature 0 nor marked: skip the
	// second parse of the body that Cacheable would do.
	if a.cache == nil || req.Stream || header == "" && (req.Temperature == nil || *req.Temperature != 0) ||
		!respcache.Cacheable(body, header) {
		return ""
	}
	key, err := respcache.Key(caller.OrgID, "/v1/chat/completions", body)
	if err != nil {
		return ""
	}
	c.Header("X-Cache", "MISS")
	return key
}

func (a *api) serveCached(c *gin.Context, key string, out *served) bool {
	b, ok, err := a.cache.Get(c.Request.Context(), key)
	if err != nil {
		a.log.Warn("response cache unavailable; asking the model", "request_id", requestID(c), "err", err)
	}
	if !ok {
		return false
	}
	var parsed struct {
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage usageOut `json:"usage"`
	}
	if json.Unmarshal(b, &parsed) != nil {
		return false
	}
	c.Header("X-Cache", "HIT")
	c.Data(http.StatusOK, "application/json; charset=utf-8", b)
	*out = served{model: parsed.Model, usage: parsed.Usage, ok: true, cached: true}
	if len(parsed.Choices) > 0 {
		out.reply = parsed.Choices[0].Message.Content
	}
	return true
}

func (a *api) storeCached(c *gin.Context, key string, body []byte) {
	if key == "" {
		return
	}
	if err := a.cache.Set(afterwards(c), key, body, a.cacheTTL); err != nil {
		a.log.Warn("storing a cached answer failed", "request_id", requestID(c), "err", err)
	}
}

const sessionHeader = "X-Sluice-Session"

// withSession prepends the stored history of the request's session, if it
// names one, and rewrites the body to match. The new turn's messages travel
// exactly as the client wrote them (images, tool calls and all); only the
// history, kept as text, is inserted before them, trimmed to the session
// budget. When the new turn brings its own system message, the stored one
// gives way, so a client resending its system prompt each turn does not
// accumulate copies.
func (a *api) withSession(c *gin.Context, caller accounts.Caller, msgs []local.Message, body []byte) ([]local.Message, []byte, error) {
	id := c.GetHeader(sessionHeader)
	if id == "" || a.sessions == nil {
		return msgs, body, nil
	}
	if !sessions.ValidID(id) {
		return nil, nil, apperr.Field(apperr.Invalid, "invalid_session_id", sessionHeader, sessionHeader+" must be 1 to 128 letters, digits or . _ : -")
	}
	history, _, err := a.sessions.Load(c.Request.Context(), sessions.Scope{OrgID: caller.OrgID, TokenID: caller.TokenID, ID: id})
	if err != nil {
		return nil, nil, a.sessionStoreDown(c, err)
	}
	if len(history) == 0 {
		return msgs, body, nil
	}
	if hasSystem(msgs) {
		history = slices.DeleteFunc(slices.Clone(history), func(m sessions.Message) bool { return isSystemRole(m.Role) })
	}
	historyBudget := a.sessionBudget - local.PromptTokens(msgs)
	var kept []sessions.Message
	if historyBudget > 0 {
		kept = sessions.Compose(history, nil, historyBudget, local.CountTokens)
	} else { // the new turn alone fills the budget: keep only the system prompt
		kept = slices.DeleteFunc(slices.Clone(history), func(m sessions.Message) bool { return !isSystemRole(m.Role) })
	}
	var req map[string]json.RawMessage
	var incoming []json.RawMessage
	if json.Unmarshal(body, &req) != nil || json.Unmarshal(req["messages"], &incoming) != nil {
		return nil, nil, apperr.Field(apperr.Invalid, "invalid_json", "", "request body is not valid JSON")
	}
	all := make([]json.RawMessage, 0, len(kept)+len(incoming))
	out := make([]local.Message, 0, len(kept)+len(msgs))
	for _, m := range kept {
		raw, _ := json.Marshal(m)
		all = append(all, raw)
		out = append(out, local.Message{Role: m.Role, Content: m.Content})
	}
	all = append(all, incoming...)
	out = append(out, msgs...)
	req["messages"], _ = json.Marshal(all)
	body, _ = json.Marshal(req)
	return out, body, nil
}

func isSystemRole(role string) bool { return role == "system" || role == "developer" }

func hasSystem(msgs []local.Message) bool {
	return slices.ContainsFunc(msgs, func(m local.Message) bool { return isSystemRole(m.Role) })
}

// saveSession stores the conversation with the new reply, refreshing its TTL.
func (a *api) saveSession(c *gin.Context, caller accounts.Caller, msgs []local.Message, reply string) {
	id := c.GetHeader(sessionHeader)
	if id == "" || a.sessions == nil {
		return
	}
	scope := sessions.Scope{OrgID: caller.OrgID, TokenID: caller.TokenID, ID: id}
	// msgs already hold the history (prepended by withSession).
	stored := sessions.Append(nil, toSessionMessages(msgs), sessions.Message{Role: "assistant", Content: reply})
	if err := a.sessions.Save(afterwards(c), scope, stored); err != nil {
		a.log.Warn("saving a session failed", "request_id", requestID(c), "err", err)
	}
}

func toSessionMessages(msgs []local.Message) []sessions.Message {
	out := make([]sessions.Message, len(msgs))
	for i, m := range msgs {
		out[i] = sessions.Message{Role: m.Role, Content: m.Content}
	}
	return out
}

var errNoSession = apperr.WithReason(apperr.NotFound, "session_not_found", "no such session (or it expired)")

// sessionStoreDown is how a failing session store answers: the request may
// be retried, so a 503, not an internal error.
func (a *api) sessionStoreDown(c *gin.Context, err error) error {
	a.log.Warn("session store unavailable", "request_id", requestID(c), "err", err)
	return apperr.WithReason(apperr.Unavailable, "session_store_unavailable",
		"the session store is unavailable right now; retry, or send the request without "+sessionHeader)
}

// sessionScope is the caller's own session named by the path; another
// token's or organization's session with that id is simply another scope.
func (a *api) sessionScope(c *gin.Context) (sessions.Scope, bool) {
	caller := c.MustGet(callerKey).(accounts.Caller)
	id := c.Param("id")
	if a.sessions == nil || !sessions.ValidID(id) {
		writeOpenAIError(c, a.log, errNoSession)
		return sessions.Scope{}, false
	}
	return sessions.Scope{OrgID: caller.OrgID, TokenID: caller.TokenID, ID: id}, true
}

// getSession answers GET /v1/sessions/{id}: the stored history.
func (a *api) getSession(c *gin.Context) {
	scope, ok := a.sessionScope(c)
	if !ok {
		return
	}
	msgs, found, err := a.sessions.Load(c.Request.Context(), scope)
	switch {
	case err != nil:
		writeOpenAIError(c, a.log, a.sessionStoreDown(c, err))
	case !found:
		writeOpenAIError(c, a.log, errNoSession)
	default:
		c.JSON(http.StatusOK, gin.H{"id": scope.ID, "object": "session", "messages": msgs})
	}
}

// deleteSession answers DELETE /v1/sessions/{id}.
func (a *api) deleteSession(c *gin.Context) {
	scope, ok := a.sessionScope(c)
	if !ok {
		return
	}
	found, err := a.sessions.Delete(c.Request.Context(), scope)
	switch {
	case err != nil:
		writeOpenAIError(c, a.log, a.sessionStoreDown(c, err))
	case !found:
		writeOpenAIError(c, a.log, errNoSession)
	default:
		c.JSON(http.StatusOK, gin.H{"id": scope.ID, "object": "session", "deleted": true})
	}
}

// afterwards is the context for bookkeeping after the answer was sent (or
// the client left): settling buckets, saving the session, caching. A client
// that hangs up mid-stream must not cancel what it is billed for.
func afterwards(c *gin.Context) context.Context { return context.WithoutCancel(c.Request.Context()) }

// record enqueues the usage event; the recorder batches it into the database.
func (a *api) record(c *gin.Context, caller accounts.Caller, out served, start time.Time) {
	ev := models.UsageEvent{
		RequestID: requestID(c), OrgID: caller.OrgID, TokenID: caller.TokenID, Model: out.model,
		PromptTokens: out.usage.PromptTokens, CompletionTokens: out.usage.CompletionTokens, Status: c.Writer.Status(),
		LatencyMs: int(a.now().Sub(start) / time.Millisecond), CreatedAt: start.UTC(),
		Cached: out.cached, Fallback: out.fallback, UpstreamKeyID: out.keyID,
	}
	if err := a.usage.Record(ev); err != nil {
		a.log.Error("usage event not recorded", "request_id", ev.RequestID, "err", err)
	}
}

// streamReply sends a local reply as OpenAI's server-sent events: a role
// chunk, content chunks, a finish chunk, optionally a usage chunk, then [DONE].
func streamReply(c *gin.Context, id string, created int64, reply local.Reply, usage usageOut, includeUsage bool) {
	h := c.Writer.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	c.Status(http.StatusOK)
	send := func(ch chatResponse) {
		ch.ID, ch.Object, ch.Created, ch.Model = id, "chat.completion.chunk", created, local.ModelID
		b, _ := json.Marshal(ch)
		c.Writer.WriteString("data: ")
		c.Writer.Write(b)
		c.Writer.WriteString("\n\n")
		c.Writer.Flush()
	}
	send(chatResponse{Choices: []chatChoice{{Delta: &chatOut{Role: "assistant"}}}})
	for _, piece := range chunks(reply.Content, 8) {
		send(chatResponse{Choices: []chatChoice{{Delta: &chatOut{Content: piece}}}})
	}
	finish := reply.FinishReason
	send(chatResponse{Choices: []chatChoice{{Delta: &chatOut{}, FinishReason: &finish}}})
	if includeUsage {
		send(chatResponse{Choices: []chatChoice{}, Usage: &usage})
	}
	c.Writer.WriteString("data: [DONE]\n\n")
	c.Writer.Flush()
}

// chunks splits s into pieces of at most n runes.
func chunks(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		i, count := 0, 0
		for i < len(s) && count < n {
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
			count++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}
