package handlers

import (
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/chat/family"
	"github.com/sluicehq/sluice/completion"
	"github.com/sluicehq/sluice/conversations"
	"github.com/sluicehq/sluice/dialect/messages"
	"github.com/sluicehq/sluice/respcache"
	"github.com/sluicehq/sluice/upstream"
	"github.com/sluicehq/sluice/upstream/local"
	"github.com/sluicehq/sluice/wire"
)

// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens),
// what Claude Code and Anthropic's SDKs speak, as a dialect of the one
// pipeline: the body is translated into a chat completion body
// (dialect/messages), run as any chat completion is (freeze, buckets,
// budget, provider or local model, settlement, metering), and what the
// pipeline answers is translated back on its way to the client. A whole
// answer from an Anthropic key is the exception: that key is sent the
// client's body as it came and its message is passed back as Anthropic
// wrote it (Request.Native), the pipeline reading both as it reads
// everything else. Every
// failure on these routes, from authentication on, is in Anthropic's
// shape (writeAnthropicError), and the rate-limit headers in its names.

// messagesPath says whether path is one of the Messages routes, whose
// clients are answered in Anthropic's shape.
func messagesPath(path string) bool {
	return path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/")
}

// apiKey is the API token a request carries: "Authorization: Bearer …",
// or on the Messages routes also Anthropic's "x-api-key", which its SDKs
// send (and Claude Code, given ANTHROPIC_API_KEY).
func apiKey(r *http.Request) string {
	if messagesPath(r.URL.Path) {
		if k := strings.TrimSpace(r.Header.Get("X-Api-Key")); k != "" {
			return k
		}
	}
	return bearer(r)
}

var errNoMessagesKey = apperr.WithReason(apperr.Unauthorized, "missing_api_key",
	"no API key: send your Sluice token as 'x-api-key: sk_sluice_…' or 'Authorization: Bearer sk_sluice_…'")

// createMessage answers POST /v1/messages through the pipeline.
func (a *api) createMessage(c *gin.Context) {
	ctx, caller := c.Request.Context(), callerOf(c)
	c.Header("request-id", requestID(c))
	sink := &messagesSink{http: httpSink{c}, now: a.Now, log: a.log, requestID: requestID(c)}
	req, tr, err := a.readMessagesRequest(c, false)
	if err != nil {
		a.fail(c, a.malformed(ctx, c, caller, sink, err))
		return
	}
	sink.id = "msg_" + strings.TrimPrefix(req.ID, "req_")
	sink.model = tr.Model
	if req.Stream {
		sink.stream = messages.NewStream(sink.id, tr.Model, int(req.Prompt.Tokens), func(s string) int {
			return req.Prompt.Family.Counter.Count([]byte(s))
		})
	}
	served, err := a.Pipeline.Complete(ctx, caller, &req, sink)
	if err != nil {
		a.fail(c, err)
		return
	}
	sink.end()
	c.Set(servedKey, served)
}

// countMessageTokens answers POST /v1/messages/count_tokens with the
// prompt's estimate, the one the pipeline reserves for the same request;
// no provider is asked. Its route's admit charges it one request.
func (a *api) countMessageTokens(c *gin.Context) {
	c.Header("request-id", requestID(c))
	req, tr, err := a.readMessagesRequest(c, true)
	if err == nil {
		// A model the token may not use is counted for no more than it
		// is answered.
		if err = completion.CheckModel(callerOf(c), req.Model); err != nil {
			err = tr.Reword(err)
		}
	}
	if err != nil {
		a.fail(c, err)
		return
	}
	messages.RateLimitHeaders(c.Writer.Header(), a.Now())
	c.JSON(http.StatusOK, gin.H{"input_tokens": req.Prompt.Tokens})
}

// readMessagesRequest reads a Messages body, translates it and parses the
// translation as the pipeline's request; every kind of bad input is a 400
// (413) naming the field as the Messages request has it.
func (a *api) readMessagesRequest(c *gin.Context, countOnly bool) (completion.Request, messages.Translation, error) {
	if strings.EqualFold(c.GetHeader(asyncHeader), "true") {
		return completion.Request{}, messages.Translation{}, apperr.Field(apperr.Invalid, "unsupported_feature", asyncHeader,
			asyncHeader+" queues chat completions; /v1/messages answers at once: send it to /v1/chat/completions or /v1/jobs")
	}
	body, err := a.readBody(c)
	if err != nil {
		return completion.Request{}, messages.Translation{}, err
	}
	betas := anthropicBetas(c.Request.Header)
	tr, err := messages.ToChat(body, messages.Options{CountOnly: countOnly, BoundField: family.BoundFieldOf, Betas: betas})
	if err != nil {
		return completion.Request{}, tr, err
	}
	if tr.Model == local.ModelID && tr.FirstImage != "" {
		return completion.Request{}, tr, apperr.Field(apperr.Invalid, "invalid_content", tr.FirstImage,
			tr.FirstImage+": image blocks are not supported by "+local.ModelID+"; send text blocks")
	}
	if tr.Model == local.ModelID && tr.Thinking == "enabled" {
		// Adaptive thinking leaves it to the model, which here does not
		// think; a budget asks for thinking it cannot do.
		return completion.Request{}, tr, apperr.Field(apperr.Invalid, "unsupported_feature", "thinking",
			"thinking: "+local.ModelID+" does not think; omit thinking or use adaptive thinking")
	}
	req, err := a.Pipeline.Parse(tr.Chat)
	if err != nil {
		return req, tr, tr.Reword(err)
	}
	a.gatewayOptions(c, &req)
	req.Dialect = "messages"
	// An Anthropic key is sent the body as it came, and answers in
	// Anthropic's shape: nothing is translated either way.
	req.Native = &upstream.Native{Kind: upstream.KindAnthropic, Body: body, Betas: betas}
	return req, tr, nil
}

// anthropicBetas are the values of a request's anthropic-beta headers
// (a comma-separated list, in one header or several), which an Anthropic
// key is sent as they came: Claude Code's turn on interleaved thinking and
// context management, which change what Anthropic answers.
func anthropicBetas(h http.Header) []string {
	var out []string
	for _, v := range h["Anthropic-Beta"] { // canonical: Values would canonicalise it on every request
		for _, b := range strings.Split(v, ",") {
			if b = strings.TrimSpace(b); b != "" {
				out = append(out, b)
			}
		}
	}
	return out
}

// gatewayOptions fills what the pipeline reads of a request besides its
// body: its id and the gateway's own headers.
func (a *api) gatewayOptions(c *gin.Context, req *completion.Request) {
	req.ID = requestID(c)
	req.Priority = c.GetHeader("X-Sluice-Priority")
	req.CacheMode = c.GetHeader(respcache.HeaderName)
	if a.Conversations != nil {
		req.Conversation = c.GetHeader(conversations.HeaderName)
	}
}

// messagesSink is the pipeline's Sink for a Messages request: what the
// pipeline writes in OpenAI's chat form (a chat.completion, an OpenAI
// error a provider answered, a stream of chunks) reaches the client in
// Anthropic's, and the rate-limit headers under Anthropic's names.
type messagesSink struct {
	http      httpSink
	now       func() time.Time
	log       *slog.Logger
	requestID string
	id, model string
	stream    *messages.Stream       // nil for an answer sent whole
	native    *messages.NativeStream // an Anthropic key's own events, when it streams them
	started   bool
}

func (s *messagesSink) Header() http.Header { return s.http.Header() }

func (s *messagesSink) Send(status int, _ string, body []byte) error {
	messages.RateLimitHeaders(s.Header(), s.now())
	if status/100 != 2 {
		status, body = messages.FromChatError(status, body, s.requestID)
		return s.http.Send(status, "application/json", body)
	}
	out, err := messages.FromChat(body, s.id, s.model)
	if err != nil {
		s.log.Warn("a chat completion could not be translated into a message", "request_id", s.requestID, "err", err)
		return s.http.Send(http.StatusBadGateway, "application/json",
			messages.ErrorBody("api_error", "the provider's answer could not be read; retry later", s.requestID))
	}
	return s.http.Send(status, "application/json", out)
}

// SendNative writes an Anthropic key's own message, as the gateway's: its
// id is the request's and its model the one the client asked for, as a
// translated answer's are. What is not a message is the gateway's 502.
func (s *messagesSink) SendNative(status int, body []byte) error {
	messages.RateLimitHeaders(s.Header(), s.now())
	out, err := wire.SetMembersOfType(body, "message", []string{"id", "model"}, []string{s.id, s.model})
	if err != nil {
		s.log.Warn("a provider's answer is not a message it can pass on", "request_id", s.requestID, "err", err)
		_ = s.http.Send(http.StatusBadGateway, "application/json",
			messages.ErrorBody("api_error", "the provider's answer could not be read; retry later", s.requestID))
		return completion.ErrUnreadableAnswer
	}
	return s.http.Send(status, "application/json", out)
}

// StartNativeStream begins a stream of an Anthropic key's own events.
func (s *messagesSink) StartNativeStream(status int) error {
	messages.RateLimitHeaders(s.Header(), s.now())
	s.native = messages.NewNativeStream(s.id, s.model)
	if err := s.http.StartStream(status); err != nil {
		return err
	}
	s.started = true
	return nil
}

func (s *messagesSink) StartStream(status int) error {
	messages.RateLimitHeaders(s.Header(), s.now())
	if s.stream == nil {
		// The pipeline streams only what was asked as a stream; this
		// stays a guard, not a path.
		s.stream = messages.NewStream(s.id, s.model, 0, nil)
	}
	if err := s.http.StartStream(status); err != nil {
		return err
	}
	s.started = true
	_, err := s.http.Write(s.stream.Start())
	return err
}

// Write translates the chat chunks it is given into events; bytes it
// holds back (a line not yet whole) count as written.
func (s *messagesSink) Write(p []byte) (int, error) {
	var out []byte
	if s.native != nil {
		out = s.native.Write(p)
	} else {
		out = s.stream.Write(p)
	}
	if len(out) == 0 {
		return len(p), nil
	}
	if _, err := s.http.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// end closes a stream the pipeline has finished with: an answer cut
// short ends with an error event rather than in silence.
func (s *messagesSink) end() {
	if !s.started {
		return
	}
	end := s.stream.End
	if s.native != nil {
		end = s.native.End
	}
	if out := end(); len(out) > 0 {
		_, _ = s.http.Write(out)
	}
}
