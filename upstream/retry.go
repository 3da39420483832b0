package upstream

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// More errors the gateway may meet, wrapped.
var (
	// ErrTimeout: an attempt got no answer within AttemptTimeout. It appears
	// wrapped in an AttemptError inside ErrUnavailable.
	ErrTimeout = errors.New("upstream: attempt timed out")
	// ErrStalled: a stream's provider sent nothing for StallTimeout. The
	// stream's Read returns it; the gateway ends the stream with an error
	// event.
	ErrStalled = errors.New("upstream: stream stalled")
	// ErrTooLarge: a non-streaming response was larger than MaxResponseBytes.
	ErrTooLarge = errors.New("upstream: response too large")
	// ErrLineTooLong: a stream had a line longer than MaxResponseBytes.
	// The stream's Read returns it, as for a stall.
	ErrLineTooLong = errors.New("upstream: a stream line is too long")
)

// AttemptError is what went wrong with one attempt, without the key's
// secret: ErrUnavailable wraps the last one, so the gateway can log it or
// tell a 504 (timeout) from a 502/503.
type AttemptError struct {
	KeyID   int64
	KeyName string
	Status  int   // the provider's HTTP status; 0 if there was no response
	Err     error // the transport error or ErrTimeout when Status is 0
}

func (e *AttemptError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("key %q (id %d): provider answered %d %s", e.KeyName, e.KeyID, e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("key %q (id %d): %v", e.KeyName, e.KeyID, e.Err)
}

func (e *AttemptError) Unwrap() error { return e.Err }

// SentError is Do's error for a streamed request whose caller left after
// the request was written to key KeyID and before the answer began: the
// provider has read the prompt, and bills it, so the caller is billed it
// too (a stream cut before its first word is billed the same way). The
// key's tokens were not given back. It wraps the caller's context error.
type SentError struct {
	KeyID int64
	Err   error
}

func (e *SentError) Error() string {
	return fmt.Sprintf("upstream: request abandoned after it was sent (key id %d): %v", e.KeyID, e.Err)
}

func (e *SentError) Unwrap() error { return e.Err }

// Do sends req through the pool and returns the provider's answer: a 2xx, or
// a 4xx about the request itself (returned as is, never retried). For a 2xx
// stream, Response.Stream is the live body: the caller must close it, and it
// is never retried once returned.
//
// Retries: 408, 409, 429, 5xx, timeouts and connection errors are retried,
// on another key when there is one, after a backoff with full jitter
// (uniform in [0, min(MaxBackoff, BaseBackoff·2^retry)]). A provider's
// Retry-After or retry-after-ms rests the key that sent it for that long,
// capped at MaxBackoff, so it is a floor for retrying on that key, not a
// wait imposed on other keys. A 401/403 disables the key (see Refusals) and
// moves on to another key at once. No attempt starts after Budget (a whole
// answer's, once its request is written, may then run AnswerTimeout), and
// no more than MaxAttempts attempts are made. ctx must be the client's request
// context: when it ends, the upstream request is cancelled.
//
// Errors: ErrNoKey when no key serves req.Model; ErrUnavailable (wrapping
// the last AttemptError, if any) when every key is open, disabled or paced
// beyond the budget, when the budget or attempts ran out, or while the
// model is degraded, so the gateway answers from sluice-local; ctx's error
// when the caller went away; ErrTooLarge.
func (p *Pool) Do(ctx context.Context, req Request) (*Response, error) {
	start := p.opts.Now()
	deadline := req.Budget.from(start, p.opts.Budget)
	if !p.Serves(req.Model) {
		return nil, ErrNoKey
	}
	if until, ok := p.models.degraded(req.Model, start); ok {
		return nil, fmt.Errorf("%w: model %q is degraded until %s", ErrUnavailable, req.Model, until.Format(time.RFC3339))
	}
	tried := make(map[int64]bool)
	var last error
	for attempt := 1; ; attempt++ {
		e, probe, adm, err := p.acquire(ctx, req, tried, deadline)
		if err != nil {
			return nil, giveUp(ctx, err, last)
		}
		left := deadline.Sub(p.opts.Now())
		if left <= 0 {
			e.h.abandoned(probe)
			return nil, giveUp(ctx, fmt.Errorf("%w: the retry budget of %s is spent", ErrUnavailable, p.opts.Budget), last)
		}
		timeout := min(p.opts.AttemptTimeout, left) // a whole answer's grows once it is sent (attempt)
		r := p.attempt(ctx, e, probe, adm, req, timeout)
		var sent *SentError
		if errors.As(r.err, &sent) {
			// The provider has the prompt: its tokens stay spent on the
			// key, for the caller to settle.
			return nil, sent
		}
		if r.kind != attemptDone || r.resp.Status/100 != 2 {
			// Nothing was generated: give the key's tokens back, or failed
			// and refused requests would drain it for every tenant.
			p.refund(context.WithoutCancel(ctx), e, req.Estimate)
		}
		switch r.kind {
		case attemptDone:
			r.resp.Attempts = attempt
			return r.resp, nil
		case attemptGone:
			return nil, fmt.Errorf("upstream: request abandoned: %w", ctx.Err())
		case attemptFatal:
			return nil, r.err
		}
		tried[e.key.ID] = true
		last = r.err

		if until, ok := p.models.degraded(req.Model, p.opts.Now()); ok {
			return nil, fmt.Errorf("%w: model %q is degraded until %s; last: %w", ErrUnavailable, req.Model, until.Format(time.RFC3339), last)
		}
		if attempt >= p.opts.MaxAttempts {
			return nil, fmt.Errorf("%w: gave up after %d attempts; last: %w", ErrUnavailable, attempt, last)
		}
		var backoff time.Duration
		if r.kind == attemptRetry {
			backoff = p.backoff(attempt - 1)
			if backoff >= deadline.Sub(p.opts.Now()) {
				return nil, fmt.Errorf("%w: the retry budget of %s is spent after %d attempts; last: %w", ErrUnavailable, p.opts.Budget, attempt, last)
			}
		}
		p.retries.Add(1)
		p.logRetry(req, attempt, r.err, backoff)
		if backoff > 0 {
			if err := p.opts.Sleep(ctx, backoff); err != nil {
				return nil, fmt.Errorf("upstream: request abandoned: %w", err)
			}
		}
	}
}

// giveUp words the end of a Do call that never got an answer.
func giveUp(ctx context.Context, err, last error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("upstream: request abandoned: %w", ctx.Err())
	case last != nil:
		return fmt.Errorf("%w; last: %w", err, last)
	}
	return err
}

// logRetry writes the one line each retry gets. It names the key, never its
// secret.
func (p *Pool) logRetry(req Request, attempt int, err error, backoff time.Duration) {
	attrs := []any{"request_id", req.ID, "model", req.Model, "attempt", attempt, "backoff", backoff}
	var ae *AttemptError
	if errors.As(err, &ae) {
		attrs = append(attrs, "key", ae.KeyName, "key_id", ae.KeyID)
		if ae.Status != 0 {
			attrs = append(attrs, "status", ae.Status)
		} else {
			attrs = append(attrs, "error", ae.Err.Error())
		}
	}
	p.opts.Log.Info("upstream retry", attrs...)
}

// backoff is the full-jitter wait before retry number n (0-based): uniform
// in [0, min(MaxBackoff, BaseBackoff·2^n)].
func (p *Pool) backoff(n int) time.Duration {
	ceil := p.opts.MaxBackoff
	if n < 62 {
		if d := p.opts.BaseBackoff << n; d > 0 && d>>n == p.opts.BaseBackoff {
			ceil = min(ceil, d)
		}
	}
	return time.Duration(p.opts.Rand() * float64(ceil))
}

// maxRetryAfter bounds what is parsed before MaxBackoff applies, so a huge
// header cannot overflow a Duration.
const maxRetryAfter = 24 * time.Hour

// retryAfter reads the provider's wish: retry-after-ms (OpenAI, Azure) in
// milliseconds, else Retry-After in seconds or as an HTTP date.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("retry-after-ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return seconds(ms / 1000), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return seconds(s), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), maxRetryAfter), true
	}
	return 0, false
}

// seconds converts a parsed, non-negative number of seconds, clamped in
// float first (converting an out-of-range float is undefined).
func seconds(s float64) time.Duration {
	return time.Duration(math.Min(s, maxRetryAfter.Seconds()) * float64(time.Second))
}
