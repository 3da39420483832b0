package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/chat"
	"github.com/sluicehq/sluice/completion"
	"github.com/sluicehq/sluice/dialect/responses"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/respcache"
	"github.com/sluicehq/sluice/upstream/local"
	"github.com/sluicehq/sluice/wire"
)

// storeTimeout bounds the one insert a stored response costs its answer,
// so a database that hangs delays the answer by this much at most.
const storeTimeout = 5 * time.Second

// createResponse answers POST /v1/responses through the pipeline: the
// Responses request becomes a chat completion (with the stored
// conversation of previous_response_id in front of its input, so the
// estimate and the budget see the whole prompt), and what the pipeline
// writes is translated back as it comes. A response to store is stored
// before its answer (or its stream's last event) goes out, so a
// continuation sent the moment the answer arrives finds it.
func (a *api) createResponse(c *gin.Context) {
	ctx, caller := c.Request.Context(), callerOf(c)
	in, req, history, err := a.readResponsesRequest(c, caller)
	if err != nil {
		a.fail(c, err)
		return
	}
	created := a.Now()
	sink := &responsesSink{httpSink: httpSink{c}, req: in,
		meta: responses.Meta{ID: "resp_" + strings.TrimPrefix(req.ID, "req_"), CreatedAt: created, Now: a.Now}}
	if in.Store {
		sink.save = func(resp responses.Response) { a.storeResponse(ctx, caller, in, history, resp, created) }
	}
	served, err := a.Pipeline.Complete(ctx, caller, &req, sink)
	if err != nil {
		a.fail(c, inResponsesTerms(in, len(history), err))
		return
	}
	sink.finish(served.Usage)
	c.Set(servedKey, served)
}

// readResponsesRequest reads a Responses request, loads the conversation
// it continues, and parses the chat completion they make, mapping every
// kind of bad input to a 400 (404, 413) in the Responses API's terms. A
// request refused here still costs one request (and a frozen token hears
// that it is frozen first); one that continues a stored response pays it
// before the conversation is read.
func (a *api) readResponsesRequest(c *gin.Context, caller accounts.Caller) (*responses.Request, completion.Request, []json.RawMessage, error) {
	ctx, sink := c.Request.Context(), httpSink{c}
	in, err := a.decodeResponsesRequest(c)
	if err != nil {
		return nil, completion.Request{}, nil, a.malformed(ctx, c, caller, sink, err)
	}
	if in.PreviousResponseID == "" {
		req, err := a.responsesChat(c, in, nil)
		if err != nil {
			return nil, req, nil, a.malformed(ctx, c, caller, sink, err)
		}
		return in, req, nil, nil
	}
	// The model is not checked yet: its name is the client's, and is not
	// counted with the refusals (as Admit's is not).
	paid, err := a.Pipeline.PayForHistory(ctx, caller, requestID(c), "", sink)
	if err != nil {
		return nil, completion.Request{}, nil, err
	}
	history, err := a.continued(ctx, caller, in.PreviousResponseID)
	if err != nil {
		return nil, completion.Request{}, nil, err
	}
	req, err := a.responsesChat(c, in, history)
	if err != nil {
		return nil, req, nil, err
	}
	req.Paid = paid
	return in, req, history, nil
}

// decodeResponsesRequest reads and decodes a Responses request's body.
func (a *api) decodeResponsesRequest(c *gin.Context) (*responses.Request, error) {
	body, err := a.readBody(c)
	if err != nil {
		return nil, err
	}
	in, err := responses.Decode(body)
	if err != nil {
		return nil, err
	}
	if in.Model == local.ModelID {
		// The chat dialect would take these and the local model ignore
		// them; here they are refused, by name.
		if p := in.FirstImage(); p != "" {
			return nil, apperr.Field(apperr.Invalid, "invalid_content", p, "input_image parts are not supported by "+local.ModelID+"; send input_text")
		}
		if in.ReasoningEffort != "" {
			return nil, apperr.Field(apperr.Invalid, "unsupported_parameter", "reasoning", local.ModelID+" does not reason; leave reasoning out")
		}
	}
	return in, nil
}

// responsesChat is the chat completion a Responses request and the
// conversation it continues make.
func (a *api) responsesChat(c *gin.Context, in *responses.Request, history []json.RawMessage) (completion.Request, error) {
	chatBody := in.ChatBody(history)
	if len(history) > 0 && int64(len(chatBody)) > a.MaxBodyBytes {
		// The body limit bounds what a chain of responses may grow to.
		return completion.Request{}, apperr.Field(apperr.Invalid, "conversation_too_large", "previous_response_id",
			"the conversation of previous_response_id with this input is "+strconv.Itoa(len(chatBody))+" bytes, more than the "+
				strconv.FormatInt(a.MaxBodyBytes, 10)+" a request may be; start a new conversation, sending as input the turns it needs")
	}
	req, err := a.Pipeline.Parse(chatBody)
	if err != nil {
		return req, inResponsesTerms(in, len(history), err)
	}
	req.ID, req.Dialect = requestID(c), "responses"
	req.Priority = c.GetHeader("X-Sluice-Priority")
	req.CacheMode = c.GetHeader(respcache.HeaderName)
	return req, nil
}

// continued is the stored conversation of the organization's response id
// as chat messages, nil for none. An unknown or expired id is a 400
// naming previous_response_id, as OpenAI answers it.
func (a *api) continued(ctx context.Context, caller accounts.Caller, id string) ([]json.RawMessage, error) {
	if id == "" {
		return nil, nil
	}
	prev, err := a.Store.StoredResponse(ctx, caller.OrgID, id, a.Now())
	if errors.Is(err, models.ErrNoStoredResponse) {
		return nil, apperr.Field(apperr.Invalid, "previous_response_not_found", "previous_response_id",
			"Previous response with id '"+id+"' not found (or it expired, or was stored with store: false).")
	}
	if err != nil {
		return nil, err
	}
	var history []json.RawMessage
	if err := json.Unmarshal([]byte(prev.Conversation), &history); err != nil {
		return nil, apperr.Wrap(err, "reading a stored conversation")
	}
	return history, nil
}

// inResponsesTerms names an error's parameter as the Responses request
// does, not as the chat completion made of it.
func inResponsesTerms(in *responses.Request, history int, err error) error {
	var e *apperr.Error
	if !errors.As(err, &e) || e.Param == "" {
		return err
	}
	param := in.Param(e.Param, history)
	if param == e.Param {
		return err
	}
	out := *e // a copy: the error may be shared
	out.Param = param
	if strings.HasPrefix(e.Param, "max_") {
		out.Message = strings.ReplaceAll(out.Message, "max_tokens", "max_output_tokens")
	}
	return &out
}

// storeResponse keeps a response for GET and continuations: one insert.
// A failure is logged; the answer goes out all the same.
func (a *api) storeResponse(ctx context.Context, caller accounts.Caller, in *responses.Request, history []json.RawMessage, resp responses.Response, created time.Time) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	b, _ := json.Marshal(resp)
	err := a.Store.CreateStoredResponse(ctx, models.StoredResponse{ID: resp.ID, OrgID: caller.OrgID, TokenID: caller.TokenID, Model: in.Model,
		Conversation: string(in.Conversation(history, resp)), Response: string(b), CreatedAt: created, ExpiresAt: created.Add(a.ResponseRetention)})
	if err != nil {
		a.log.Warn("storing a response failed; it was answered, but cannot be read back or continued", "response_id", resp.ID, "err", err)
	}
}

// responseNotFound is OpenAI's answer for a response id it does not have.
func responseNotFound(id string) error {
	return apperr.WithReason(apperr.NotFound, "response_not_found", "Response with id '"+id+"' not found.")
}

// getResponse answers GET /v1/responses/{id}: the organization's stored
// response, as it was answered.
func (a *api) getResponse(c *gin.Context) {
	id := c.Param("id")
	if c.Query("stream") == "true" {
		a.fail(c, apperr.Field(apperr.Invalid, "unsupported_parameter", "stream", "a stored response cannot be replayed as a stream; GET it without stream"))
		return
	}
	if len(c.QueryArray("include")) > 0 || len(c.QueryArray("include[]")) > 0 {
		a.fail(c, apperr.Field(apperr.Invalid, "unsupported_parameter", "include", "include is not supported: Sluice keeps no extra output data"))
		return
	}
	r, err := a.Store.StoredResponse(c.Request.Context(), callerOf(c).OrgID, id, a.Now())
	if errors.Is(err, models.ErrNoStoredResponse) {
		err = responseNotFound(id)
	}
	if err != nil {
		a.fail(c, err)
		return
	}
	c.Data(http.StatusOK, "application/json; charset=utf-8", []byte(r.Response))
}

// deleteResponse answers DELETE /v1/responses/{id}.
func (a *api) deleteResponse(c *gin.Context) {
	id := c.Param("id")
	err := a.Store.DeleteStoredResponse(c.Request.Context(), callerOf(c).OrgID, id, a.Now())
	if errors.Is(err, models.ErrNoStoredResponse) {
		err = responseNotFound(id)
	}
	if err != nil {
		a.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"id": id, "object": "response.deleted", "deleted": true})
}

// responsesSink is the pipeline's Sink for a Responses request: what the
// pipeline writes as a chat completion (a whole body, or its event stream
// in pieces) reaches the client as the Responses API's.
type responsesSink struct {
	httpSink
	req    *responses.Request
	meta   responses.Meta
	save   func(responses.Response) // stores the response; nil with store: false
	saved  bool
	stream *responses.Stream // once the stream has started
}

// Send translates a whole chat completion; an error the provider answered
// (in OpenAI's shape, which is the Responses API's too) passes on as it is.
func (s *responsesSink) Send(status int, contentType string, body []byte) error {
	if status/100 != 2 {
		return s.httpSink.Send(status, contentType, body)
	}
	resp, err := s.req.Response(s.meta, body)
	if err != nil {
		var e wire.OpenAIError
		e.Error.Message, e.Error.Type, e.Error.Code = "the provider's answer is not a chat completion Sluice can read", "server_error", "upstream_error"
		b, _ := json.Marshal(e)
		return s.httpSink.Send(http.StatusBadGateway, "application/json; charset=utf-8", b)
	}
	s.keep(resp)
	b, _ := json.Marshal(resp)
	return s.httpSink.Send(status, "application/json; charset=utf-8", b)
}

// StartStream begins the event stream with response.created and
// response.in_progress.
func (s *responsesSink) StartStream(status int) error {
	_ = s.httpSink.StartStream(status)
	s.stream = s.req.NewStream(s.meta)
	_, err := s.httpSink.Write(s.stream.Start())
	return err
}

// Write translates a piece of the chat completion's event stream.
func (s *responsesSink) Write(p []byte) (int, error) {
	if s.stream == nil { // the pipeline always starts a stream first
		return s.httpSink.Write(p)
	}
	return len(p), s.send(s.stream.Write(p))
}

// send writes translated events; before the last one, the response is
// stored.
func (s *responsesSink) send(events []byte) error {
	if s.stream.Ended() {
		s.keep(s.stream.Response())
	}
	if len(events) == 0 {
		return nil
	}
	_, err := s.httpSink.Write(events)
	return err
}

// finish ends a stream the pipeline ended without its last event (no
// usage reported, or cut off), with the usage billed.
func (s *responsesSink) finish(billed chat.Usage) {
	if s.stream == nil {
		return
	}
	u := responses.NewUsage(int64(billed.PromptTokens), int64(billed.CompletionTokens), int64(billed.CachedTokens))
	u.OutputTokensDetails.ReasoningTokens = int64(billed.ReasoningTokens)
	_ = s.send(s.stream.Finish(u))
}

// keep stores a finished response once; a failed one has nothing to
// continue.
func (s *responsesSink) keep(resp responses.Response) {
	if s.save == nil || s.saved || resp.Status == "failed" {
		return
	}
	s.saved = true
	s.save(resp)
}
