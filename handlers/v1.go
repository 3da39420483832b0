package handlers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"hash"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/batches"
	"github.com/sluicehq/sluice/completion"
	"github.com/sluicehq/sluice/conversations"
	"github.com/sluicehq/sluice/signing"
	"github.com/sluicehq/sluice/upstream/local"
)

// TokenToucher marks a token used by a call that is not metered.
type TokenToucher interface {
	Touch(tokenID int64, at time.Time) error
}

// api serves the /v1 routes: it decodes, hands the work to the pipeline and
// encodes the answer.
type api struct {
	Deps
	streamed streamedBodies
	log      *slog.Logger
}

const callerKey = "sluice.caller"

func callerOf(c *gin.Context) accounts.Caller { return c.MustGet(callerKey).(accounts.Caller) }

// authenticateToken resolves the API token (apiKey); failures are 401s
// with distinct codes. A token that requires signed requests has its signature
// checked here (verifySignature), or, on a route that streams its body,
// its headers here and its signature by the handler (signatureVerified).
func (a *api) authenticateToken(c *gin.Context) {
	key := apiKey(c.Request)
	if key == "" && messagesPath(c.Request.URL.Path) {
		a.fail(c, errNoMessagesKey)
		return
	}
	caller, err := a.Directory.Authenticate(c.Request.Context(), key)
	if err == nil && caller.AllowedIPs != nil {
		err = checkClientAddress(c, caller)
	}
	if err == nil && caller.SigningSecret != nil {
		err = a.verifySignature(c, caller)
	}
	if err != nil {
		a.fail(c, err)
		return
	}
	c.Set(callerKey, caller)
	c.Next()
	if b, ok := c.Get(streamedKey); ok && !b.(*streamedBody).verified && c.Writer.Status() < 300 {
		// A bug, not the client's doing: a streamed route answered a
		// signed request without asking for its signature.
		a.log.Error("a signed request was answered without its signature checked", "request_id", requestID(c), "route", c.FullPath())
	}
}

// checkClientAddress refuses a request from outside the token's allowed
// networks. The address is the client's as the router resolves it: the
// connection's, or X-Forwarded-For's when a proxy of
// SLUICE_TRUSTED_PROXIES sent it, so a client cannot claim another
// address by sending the header itself.
func checkClientAddress(c *gin.Context, caller accounts.Caller) error {
	ip := c.ClientIP()
	addr, err := netip.ParseAddr(ip)
	if err == nil && caller.AllowsAddress(addr) {
		return nil
	}
	return apperr.WithReason(apperr.Forbidden, "ip_not_allowed",
		"this API key may not be used from "+ip+": its allowed_ips do not include the address")
}

// Keys of a signed request's body in the gin context.
const (
	signedBodyKey = "sluice.signed_body" // []byte: the body, read and verified before the handlers
	streamedKey   = "sluice.streamed"    // *streamedBody: the body the handler streams, verified at its end
)

// streamedBodies names the /v1 routes ("POST /v1/files") whose handlers
// stream a signed request's body rather than take it whole, each with its
// limit for the caller. Such a handler calls signatureVerified once it has
// read the body and before it stores anything.
type streamedBodies map[string]func(accounts.Caller) int64

// uploadBody is the most POST /v1/files may send: the tier's file limit
// and room for the rest of the form, as uploadFile reads it.
func uploadBody(caller accounts.Caller) int64 { return batches.FileLimit(caller) + 64<<10 }

// verifySignature checks a signed request of a token that requires them.
// The headers are checked first, before any body is read. The body is the
// route's own: read once, up to SLUICE_MAX_BODY_BYTES, and verified here,
// the handler taking the same bytes (readAtMost); or, on a route that
// streams its body (streamedBodies), hashed as the handler reads it and
// verified when the handler asks (signatureVerified), so that route's
// limits and rate limit come before its body is read.
func (a *api) verifySignature(c *gin.Context, caller accounts.Caller) error {
	r := c.Request
	pending, err := a.Signatures.Begin(caller.TokenID, caller.SigningSecret, signing.RequestOf(r))
	if err != nil {
		return err
	}
	if limit, ok := a.streamed[r.Method+" "+c.FullPath()]; ok {
		b := &streamedBody{pending: pending, hash: sha256.New(), body: http.NoBody}
		if r.Body != nil {
			b.body = http.MaxBytesReader(c.Writer, r.Body, limit(caller))
		}
		r.Body = b
		c.Set(streamedKey, b)
		return nil
	}
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		if body, err = readAtMost(c, a.MaxBodyBytes); err != nil {
			return err
		}
	}
	if err := pending.Finish(r.Context(), sha256.Sum256(body)); err != nil {
		return err
	}
	c.Set(signedBodyKey, body)
	r.Body = io.NopCloser(bytes.NewReader(body)) // for a handler that reads it itself
	return nil
}

// streamedBody is a signed request's body that its handler streams: it
// hashes what is read, for the signature checked at its end.
type streamedBody struct {
	body     io.ReadCloser
	hash     hash.Hash
	pending  *signing.Pending
	verified bool
}

func (b *streamedBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	b.hash.Write(p[:n])
	return n, err
}

func (b *streamedBody) Close() error { return b.body.Close() }

// signatureVerified checks the signature of a signed request whose body
// the handler streams (streamedBodies): what is left of the body is read,
// within the route's limit (an *http.MaxBytesError past it), and the
// signature checked over all of it. nil for a token that does not sign. A
// streaming handler calls it after reading the body and before it stores
// anything.
func (a *api) signatureVerified(c *gin.Context) error {
	v, ok := c.Get(streamedKey)
	if !ok {
		return nil
	}
	b := v.(*streamedBody)
	if _, err := io.Copy(io.Discard, b); err != nil {
		return err
	}
	var sum [sha256.Size]byte
	b.hash.Sum(sum[:0])
	if err := b.pending.Finish(c.Request.Context(), sum); err != nil {
		return err
	}
	b.verified = true
	return nil
}

// bearer returns the token of an "Authorization: Bearer …" header, "" when
// there is none.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// admit is the middleware of /v1 routes that are not completions: the
// freeze check and one request from the request bucket.
func (a *api) admit(c *gin.Context) {
	caller := callerOf(c)
	if err := a.Pipeline.Admit(c.Request.Context(), caller, requestID(c), httpSink{c}); err != nil {
		a.fail(c, err)
		return
	}
	c.Next()
	if err := a.TokenUse.Touch(caller.TokenID, a.Now().UTC()); err != nil {
		a.log.Warn("marking a token used failed", "request_id", requestID(c), "err", err)
	}
}

// chatCompletions answers POST /v1/chat/completions through the pipeline.
func (a *api) chatCompletions(c *gin.Context) {
	if strings.EqualFold(c.GetHeader(asyncHeader), "true") {
		a.createJob(c)
		return
	}
	a.complete(c, a.readChatRequest)
}

// malformed is the error to answer a request refused before the pipeline
// saw it: it still costs one request, so a flood of bad requests is
// limited too, and a frozen token hears that it is frozen.
func (a *api) malformed(ctx context.Context, c *gin.Context, caller accounts.Caller, sink completion.Sink, err error) error {
	if aerr := a.Pipeline.Admit(ctx, caller, requestID(c), sink); aerr != nil {
		return aerr
	}
	return err
}

// complete runs the request read by read through the pipeline and
// answers it in OpenAI's shape.
func (a *api) complete(c *gin.Context, read func(*gin.Context) (completion.Request, error)) {
	ctx, caller, sink := c.Request.Context(), callerOf(c), httpSink{c}
	req, err := read(c)
	if err != nil {
		a.fail(c, a.malformed(ctx, c, caller, sink, err))
		return
	}
	served, err := a.Pipeline.Complete(ctx, caller, &req, sink)
	if err != nil {
		a.fail(c, err)
		return
	}
	c.Set(servedKey, served)
}

// readChatRequest reads and parses a chat request, mapping every kind of
// bad input to a 400 or 413 that says what is wrong; the gateway's options
// come from headers.
func (a *api) readChatRequest(c *gin.Context) (completion.Request, error) {
	body, err := a.readBody(c)
	if err != nil {
		return completion.Request{}, err
	}
	req, err := a.Pipeline.Parse(body)
	if err != nil {
		return req, err
	}
	a.gatewayOptions(c, &req)
	return req, nil
}

// readBody reads a JSON request body up to the size limit.
func (a *api) readBody(c *gin.Context) ([]byte, error) {
	mt, _, err := mime.ParseMediaType(c.GetHeader("Content-Type"))
	if err != nil || mt != "application/json" {
		return nil, apperr.Field(apperr.Invalid, "invalid_content_type", "", "Content-Type must be application/json")
	}
	return readAtMost(c, a.MaxBodyBytes)
}

// readAtMost reads the request body, refusing one over limit bytes. A
// signed request's body was read already (verifySignature): it is that,
// not read again.
func readAtMost(c *gin.Context, limit int64) ([]byte, error) {
	if v, ok := c.Get(signedBodyKey); ok {
		if body := v.([]byte); int64(len(body)) <= limit {
			return body, nil
		}
		return nil, tooLarge(limit)
	}
	r := http.MaxBytesReader(c.Writer, c.Request.Body, limit)
	var body []byte
	var err error
	if n := c.Request.ContentLength; n > 0 && n <= limit {
		// The length is known (and net/http reads no more than it): one
		// buffer of it, not ReadAll's doublings and copies, which copy a
		// 100 KB prompt about six times.
		body = make([]byte, n)
		var read int
		read, err = io.ReadFull(r, body)
		body = body[:read]
	} else {
		body, err = io.ReadAll(r)
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, tooLarge(limit)
		}
		return nil, apperr.Field(apperr.Invalid, "invalid_body", "", "the request body could not be read")
	}
	return body, nil
}

func tooLarge(limit int64) error {
	return apperr.Field(apperr.TooLarge, "request_too_large", "", "request body is larger than "+strconv.FormatInt(limit, 10)+" bytes")
}

// fail answers a /v1 request with err in its dialect's shape (Anthropic's
// on the Messages routes, OpenAI's elsewhere), unless the client has
// already left.
func (a *api) fail(c *gin.Context, err error) {
	if c.Request.Context().Err() != nil {
		c.Abort()
		return
	}
	if messagesPath(c.Request.URL.Path) {
		writeAnthropicError(c, a.log, err, a.Now())
		return
	}
	writeOpenAIError(c, a.log, err)
}

type modelOut struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// listModels answers GET /v1/models with the models the caller may use:
// the local model, the admin's aliases (Sluice's own names, so owned by
// "sluice") and every model a provider key serves.
func (a *api) listModels(c *gin.Context) {
	caller := callerOf(c)
	models := []modelOut{}
	add := func(id, owner string) {
		// A token limited to some models sees only those: the others
		// answer as models that do not exist.
		if caller.MayUseModel(id) {
			models = append(models, modelOut{ID: id, Object: "model", Created: 1767225600, OwnedBy: owner})
		}
	}
	add(local.ModelID, "sluice")
	var aliases []string
	if a.Aliases != nil {
		aliases = a.Aliases.Names()
	}
	for _, name := range aliases {
		add(name, "sluice")
	}
	for _, m := range a.Models() {
		if m != "*" && m != local.ModelID && !slices.Contains(aliases, m) {
			add(m, "upstream")
		}
	}
	c.JSON(http.StatusOK, gin.H{"object": "list", "data": models})
}

var errNoConversation = apperr.WithReason(apperr.NotFound, "session_not_found", "no such session (or it expired)")

// conversationScope is the caller's own conversation named by the path;
// another token's or organization's conversation with that id is simply
// another scope.
func (a *api) conversationScope(c *gin.Context) (conversations.Scope, bool) {
	caller := callerOf(c)
	id := c.Param("id")
	if !conversations.ValidID(id) {
		a.fail(c, errNoConversation)
		return conversations.Scope{}, false
	}
	return conversations.Scope{OrgID: caller.OrgID, TokenID: caller.TokenID, ID: id}, true
}

// storeDown logs a failing conversation store once and answers 503.
func (a *api) storeDown(c *gin.Context, err error) {
	a.log.Warn("conversation store unavailable", "request_id", requestID(c), "err", err)
	a.fail(c, conversations.ErrStoreUnavailable)
}

// getConversation answers GET /v1/sessions/{id}: the stored history.
func (a *api) getConversation(c *gin.Context) {
	scope, ok := a.conversationScope(c)
	if !ok {
		return
	}
	msgs, found, err := a.Conversations.Load(c.Request.Context(), scope)
	switch {
	case err != nil:
		a.storeDown(c, err)
	case !found:
		a.fail(c, errNoConversation)
	default:
		c.JSON(http.StatusOK, gin.H{"id": scope.ID, "object": "session", "messages": msgs})
	}
}

// deleteConversation answers DELETE /v1/sessions/{id}.
func (a *api) deleteConversation(c *gin.Context) {
	scope, ok := a.conversationScope(c)
	if !ok {
		return
	}
	found, err := a.Conversations.Delete(c.Request.Context(), scope)
	switch {
	case err != nil:
		a.storeDown(c, err)
	case !found:
		a.fail(c, errNoConversation)
	default:
		c.JSON(http.StatusOK, gin.H{"id": scope.ID, "object": "session", "deleted": true})
	}
}

// httpSink is the pipeline's Sink over a gin response.
type httpSink struct{ c *gin.Context }

func (s httpSink) Header() http.Header { return s.c.Writer.Header() }

// Send writes a whole answer and flushes it: the client has it before the
// pipeline settles, meters and logs it, which is the gateway's business and
// not the client's wait. Its length goes first, so the early flush is not
// chunked.
func (s httpSink) Send(status int, contentType string, body []byte) error {
	s.c.Writer.Header()["Content-Length"] = []string{strconv.Itoa(len(body))}
	s.c.Data(status, contentType, body)
	s.c.Writer.Flush()
	return nil
}

func (s httpSink) StartStream(status int) error {
	h := s.c.Writer.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s.c.Status(status)
	s.c.Writer.WriteHeaderNow()
	return nil
}

func (s httpSink) Write(p []byte) (int, error) {
	n, err := s.c.Writer.Write(p)
	s.c.Writer.Flush()
	return n, err
}
