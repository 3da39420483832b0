package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/apperr"
)

// attemptKind is how one attempt ended, as far as Do is concerned.
type attemptKind int

const (
	attemptDone    attemptKind = iota // an answer for the caller
	attemptRetry                      // a failure worth retrying after a backoff
	attemptRefused                    // the key was refused (401/403): another key at once
	attemptGone                       // the caller's context ended
	attemptFatal                      // an error no retry can fix
)

type attemptResult struct {
	kind attemptKind
	resp *Response
	err  error
}

// drainBytes is how much of an error body is read so the connection can be
// reused; the rest is discarded with the connection.
const drainBytes = 64 << 10

// defaultRateLimitRest rests a key that answered 429 without saying for how
// long (capped by MaxBackoff).
const defaultRateLimitRest = time.Second

// attempt sends req through key e, which the caller has claimed (probe: it
// holds the breaker's probe), within timeout, and records the outcome in the
// key's health and the model's degradation rule. The attempt counts as in
// flight on the key from the send until it ends here, or, for a 2xx stream,
// until the stream is closed.
func (p *Pool) attempt(ctx context.Context, e *keyEntry, probe bool, adm admission, req Request, timeout time.Duration) attemptResult {
	st := &attemptState{}
	if !req.Stream {
		st.extend = p.opts.AnswerTimeout
	}
	actx, cancel := attemptContext(ctx, req.Stream, st)
	st.timer = time.AfterFunc(timeout, func() {
		st.timedOut.Store(true)
		cancel()
	})
	timer := st.timer
	hreq, err := e.format.newRequest(actx, &e.key, e.base, req)
	if err != nil {
		timer.Stop()
		cancel()
		e.h.abandoned(probe)
		var refusal *apperr.Error
		if !errors.As(err, &refusal) {
			err = fmt.Errorf("upstream: cannot build a request for key %q: %w", e.key.Name, err)
		}
		return attemptResult{kind: attemptFatal, err: err}
	}
	e.h.sent()
	start := p.opts.Now()
	resp, err := p.opts.Client.Do(hreq)
	if err == nil && classify(resp.StatusCode) != classOK {
		if fr, ok := e.format.(failureReader); ok {
			peekFailure(fr, resp)
		}
	}
	if err == nil {
		// Every answer, whatever its status, says where the key stands.
		e.format.limits(resp.Header, p.opts.Now())
		if rpm, tpm := e.h.learn(resp.Header, resp.StatusCode, adm, start, p.opts.Now()); rpm != 0 || tpm != 0 {
			p.limitsChanged(e, rpm, tpm)
		}
	}
	if err == nil && req.Stream && classify(resp.StatusCode) == classOK {
		// The attempt timeout covers the wait for the headers only; from
		// here the stall timer watches the body, and closing the stream
		// ends the attempt.
		if timer.Stop() {
			return p.streamed(ctx, e, probe, req, resp, p.opts.Now().Sub(start), cancel)
		}
		resp.Body.Close() // the timeout fired as the headers arrived
		err = ErrTimeout
	}
	defer func() {
		timer.Stop()
		cancel()
		e.h.inFlight.Add(-1)
	}()
	if err != nil {
		return p.lost(ctx, e, probe, req, start, st.timedOut.Load(), st.written.Load(), err)
	}
	return p.judge(ctx, e, probe, req, resp, start, &st.timedOut)
}

// attemptState is what one attempt's timer and its request's trace share.
type attemptState struct {
	written, timedOut atomic.Bool
	timer             *time.Timer
	// extend is a whole answer's timeout once its request is written (0
	// for a stream): the provider now generates all of the answer before
	// it writes a byte (PoolOptions.AnswerTimeout). Until then, a key
	// that does not connect or take the request is given up after the
	// attempt timeout, as a stream's is.
	extend time.Duration
}

// wrote records that the request was written, and extends the timer.
func (s *attemptState) wrote() {
	s.written.Store(true)
	if s.extend > 0 && s.timer.Stop() {
		s.timer.Reset(s.extend)
	}
}

// attemptContext is the context of one attempt's HTTP request; st hears
// when the request is written (attemptState.wrote). A stream ends with
// its client: closing it stops the provider generating, and what was
// delivered is billed (the prompt too when the client left after the
// request was written and before the answer began: the provider has read
// it; see SentError). A whole answer is different: once the provider has
// the request it answers, and bills, in full whether anyone is left to
// read it, so the attempt lives on to read the answer and its usage, and
// the client is billed what the answer cost (within the attempt's
// timeout). A client gone before its request was written cancels it:
// nothing was asked, nothing is billed.
func attemptContext(client context.Context, stream bool, st *attemptState) (context.Context, context.CancelFunc) {
	trace := &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		if info.Err == nil {
			st.wrote()
		}
	}}
	if stream {
		ctx, cancel := context.WithCancel(client)
		return httptrace.WithClientTrace(ctx, trace), cancel
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(client))
	stop := context.AfterFunc(client, func() {
		if !st.written.Load() {
			cancel()
		}
	})
	return httptrace.WithClientTrace(ctx, trace), func() { stop(); cancel() }
}

// A failureReader is a wire format whose provider says in a failure's
// body what OpenAI's says with the status and headers (Gemini: how long
// to wait after a 429, a refused key answered 400). The pool shows it the
// first failurePeekBytes of every non-2xx answer before judging it: it may
// set the headers the pool reads (Retry-After, retry-after-ms) and returns
// the status to judge the answer by.
type failureReader interface {
	readFailure(status int, h http.Header, head []byte) int
}

// failurePeekBytes is how much of a failure's body a failureReader sees:
// providers' error bodies are a few hundred bytes.
const failurePeekBytes = 16 << 10

// peekFailure lets fr read the start of resp's body and judge it; the body
// still reads whole afterwards.
func peekFailure(fr failureReader, resp *http.Response) {
	head, err := io.ReadAll(io.LimitReader(resp.Body, failurePeekBytes))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	if err == nil {
		resp.StatusCode = fr.readFailure(resp.StatusCode, resp.Header, head)
	}
}

// streamed hands a 2xx stream to the caller; the stream's end releases the
// attempt.
func (p *Pool) streamed(ctx context.Context, e *keyEntry, probe bool, req Request, resp *http.Response, took time.Duration, cancel context.CancelFunc) attemptResult {
	e.h.answered(resp.StatusCode, probe, true)
	p.models.observe(req.Model, false, p.opts.Now())
	var body io.ReadCloser = &lineBound{ReadCloser: resp.Body, max: MaxResponseBytes}
	nf, native := e.format.(nativeFormat)
	if native = native && req.nativeFor(e.key.Provider); native {
		body = nf.streamNative(req, body)
	} else {
		body = e.format.stream(req, body)
	}
	return attemptResult{kind: attemptDone, resp: &Response{
		Status:  resp.StatusCode,
		Header:  resp.Header,
		Stream:  p.newStreamBody(ctx, e, req, body, cancel),
		KeyID:   e.key.ID,
		Latency: took,
		Native:  native,
	}}
}

// judge reads a whole answer and decides what it means for the request and
// for the key.
func (p *Pool) judge(ctx context.Context, e *keyEntry, probe bool, req Request, resp *http.Response, start time.Time, timedOut *atomic.Bool) attemptResult {
	took := p.opts.Now().Sub(start)
	status := resp.StatusCode
	switch classify(status) {
	case classOK, classClientError:
		body, err := readBody(resp.Body, MaxResponseBytes)
		resp.Body.Close()
		healthy := classify(status) == classOK
		switch {
		case errors.Is(err, ErrTooLarge) && healthy:
			e.h.answered(status, probe, true)
			return attemptResult{kind: attemptFatal, err: fmt.Errorf("%w: over %d bytes from key %q", ErrTooLarge, MaxResponseBytes, e.key.Name)}
		case err != nil && !errors.Is(err, ErrTooLarge):
			// Headers came: not a request left before its answer began.
			return p.lost(ctx, e, probe, req, start, timedOut.Load(), false, err)
		}
		e.h.answered(status, probe, healthy)
		p.models.observe(req.Model, false, p.opts.Now())
		nf, native := e.format.(nativeFormat)
		native = native && healthy && req.nativeFor(e.key.Provider)
		switch {
		case native:
			// Passed on as it came; read after it is sent (ReadNative).
		case healthy:
			if body, err = e.format.answer(req, body); err != nil {
				return attemptResult{kind: attemptFatal, err: fmt.Errorf("upstream: key %q answered what cannot be read: %w", e.key.Name, err)}
			}
		default:
			body = e.format.failure(status, body)
		}
		return attemptResult{kind: attemptDone, resp: &Response{Status: status, Header: resp.Header, Body: body, KeyID: e.key.ID, Latency: took, Native: native, format: nf}}
	}

	// A failure: keep only what the key's health needs.
	discard(resp.Body)
	now := p.opts.Now()
	aerr := &AttemptError{KeyID: e.key.ID, KeyName: e.key.Name, Status: status}
	ra, hasRA := retryAfter(resp.Header, now)
	switch classify(status) {
	case classRefused:
		reason := fmt.Sprintf("the provider refused the key: %d %s", status, http.StatusText(status))
		if e.h.refused(status, reason, probe) {
			p.opts.Log.Warn("upstream key disabled", "key", e.key.Name, "key_id", e.key.ID, "status", status, "request_id", req.ID)
			p.refused(e.key.ID, reason)
		}
		p.models.observe(req.Model, false, now)
		return attemptResult{kind: attemptRefused, err: aerr}
	case classRateLimited:
		p.rateLimited.Add(1)
		if !hasRA {
			ra = defaultRateLimitRest
		}
		e.h.rateLimited(now, min(ra, p.opts.MaxBackoff), probe)
		p.drain(context.WithoutCancel(ctx), e)
		p.models.observe(req.Model, false, now)
		return attemptResult{kind: attemptRetry, err: aerr}
	}
	var rest time.Duration
	if hasRA {
		rest = min(ra, p.opts.MaxBackoff)
	}
	p.keyFailed(e, probe, req, status, fmt.Sprintf("%d %s", status, http.StatusText(status)), rest, status >= 500 && took > p.opts.SlowFailure)
	return attemptResult{kind: attemptRetry, err: aerr}
}

// limitsChanged logs, once per change, a limit the provider states in its
// headers (0: unchanged).
func (p *Pool) limitsChanged(e *keyEntry, rpm, tpm int64) {
	attrs := []any{"key", e.key.Name, "key_id", e.key.ID}
	if rpm != 0 {
		attrs = append(attrs, "provider_rpm", rpm, "configured_rpm", e.key.RPM)
	}
	if tpm != 0 {
		attrs = append(attrs, "provider_tpm", tpm, "configured_tpm", e.key.TPM)
	}
	p.opts.Log.Info("upstream key limits stated by the provider; pacing to the lower of these and the configured ones (0 = unknown)", attrs...)
}

// drain empties the key's requests bucket after a 429, so that every
// gateway node sharing the limiter holds back, not only this one (which
// also rests the key for the provider's Retry-After). The charge is the
// bucket's capacity: a full bucket ends empty, a bucket already empty owes
// at most one more burst (quota bounds a debt).
func (p *Pool) drain(ctx context.Context, e *keyEntry) {
	e.h.mu.Lock()
	b, ok := e.requestBucket()
	e.h.mu.Unlock()
	if !ok {
		return
	}
	if err := p.opts.Limiter.Adjust(ctx, b.key, b.params, b.params.Capacity); err != nil {
		p.limiterFailed(e, "draining after a 429", err)
		return
	}
	p.limiterWorks(e)
}

// lost ends an attempt that got no usable answer: the caller went away (not
// the key's fault), it timed out, or the connection failed.
func (p *Pool) lost(ctx context.Context, e *keyEntry, probe bool, req Request, start time.Time, timedOut, written bool, err error) attemptResult {
	if ctx.Err() != nil {
		e.h.abandoned(probe)
		if written && req.Stream {
			return attemptResult{kind: attemptGone, err: &SentError{KeyID: e.key.ID, Err: ctx.Err()}}
		}
		return attemptResult{kind: attemptGone, err: ctx.Err()}
	}
	took := p.opts.Now().Sub(start)
	cause := withoutURL(err)
	what := "connection error"
	if timedOut {
		cause = ErrTimeout
		what = "timeout"
	}
	p.keyFailed(e, probe, req, 0, what, 0, timedOut && took > p.opts.SlowFailure)
	return attemptResult{kind: attemptRetry, err: &AttemptError{KeyID: e.key.ID, KeyName: e.key.Name, Err: cause}}
}

// keyFailed records a failed attempt in the key's breaker and the model's
// degradation rule, logging the state changes.
func (p *Pool) keyFailed(e *keyEntry, probe bool, req Request, status int, what string, rest time.Duration, slow bool) {
	now := p.opts.Now()
	if opened, reason := e.h.failed(now, status, what, probe, rest); opened {
		p.opts.Log.Warn("upstream key breaker opened", "key", e.key.Name, "key_id", e.key.ID,
			"reason", reason, "cool_down", p.opts.Breaker.CoolDown, "request_id", req.ID)
	}
	if p.models.observe(req.Model, slow, now) {
		p.opts.Log.Warn("upstream model degraded: answering from the local model", "model", req.Model,
			"cool_down", p.opts.Breaker.CoolDown, "request_id", req.ID)
	}
}

// withoutURL drops the URL from a client error: a base URL may carry
// credentials in its query or user info, and the key's name says enough.
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

// class is what a status means for the pool.
type class int

const (
	classOK          class = iota // 2xx
	classRefused                  // 401, 403: the key is refused
	classRateLimited              // 429: the key rests, the breaker is untouched
	classFailure                  // 408, 409, 5xx, and 1xx/3xx (a misconfigured base URL): retried
	classClientError              // other 4xx: the request's fault, returned as is
)

func classify(status int) class {
	switch {
	case status >= 200 && status < 300:
		return classOK
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return classRefused
	case status == http.StatusTooManyRequests:
		return classRateLimited
	case status == http.StatusRequestTimeout || status == http.StatusConflict || status >= 500 || status < 400:
		return classFailure
	}
	return classClientError
}

// readBody reads at most limit bytes, or fails with ErrTooLarge.
func readBody(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return b[:limit], ErrTooLarge
	}
	return b, nil
}

// discard reads a little of an unwanted body, so a short one leaves the
// connection reusable, and closes it.
func discard(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, drainBytes)
	body.Close()
}
