package upstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// streamBody is a 2xx stream's body as the gateway reads it. A stall timer
// runs while a Read waits for the provider: if StallTimeout passes without a
// byte, the upstream request is cancelled and Read returns ErrStalled. The
// timer does not run between Reads, so a slow client is not mistaken for a
// stalled provider. The request's context is the caller's, so a client that
// disconnects cancels the upstream request too.
type streamBody struct {
	body    io.ReadCloser
	ctx     context.Context // the caller's
	cancel  context.CancelFunc
	stall   time.Duration
	timer   *time.Timer
	stalled atomic.Bool
	closed  atomic.Bool
	end     sync.Once
	finish  func(err error)
}

func (p *Pool) newStreamBody(ctx context.Context, e *keyEntry, req Request, body io.ReadCloser, cancel context.CancelFunc) *streamBody {
	s := &streamBody{body: body, ctx: ctx, cancel: cancel, stall: p.opts.StallTimeout}
	s.timer = time.AfterFunc(time.Hour, func() {
		s.stalled.Store(true)
		s.cancel()
	})
	s.timer.Stop()
	s.finish = func(err error) {
		e.h.inFlight.Add(-1)
		if err == nil || errors.Is(err, io.EOF) || ctx.Err() != nil {
			return
		}
		// A stall or a broken connection mid-stream counts against the
		// key: the provider let a request down after accepting it.
		what := "stream broken"
		if errors.Is(err, ErrStalled) {
			what = "stream stalled"
		}
		p.keyFailed(e, false, req, 0, what, 0, false)
	}
	return s
}

// Read reads the provider's bytes as they arrive.
func (s *streamBody) Read(p []byte) (int, error) {
	s.timer.Reset(s.stall)
	n, err := s.body.Read(p)
	s.timer.Stop()
	switch {
	case err == nil:
	case s.closed.Load():
		s.done(nil) // closed by the gateway: not the provider's fault
	case s.stalled.Load() && !errors.Is(err, io.EOF):
		err = ErrStalled
		s.done(err)
	default:
		s.done(err)
	}
	return n, err
}

// Close ends the stream, cancelling the upstream request if it is still
// running. It is safe to call more than once and concurrently with Read.
func (s *streamBody) Close() error {
	s.closed.Store(true)
	s.timer.Stop()
	s.cancel()
	err := s.body.Close()
	s.done(nil)
	return err
}

func (s *streamBody) done(err error) {
	s.end.Do(func() {
		s.cancel()
		s.finish(err)
	})
}

// lineBound is a provider's stream body that fails (ErrLineTooLong) once
// a line carried over from one Read to the next runs past max bytes.
// Every reader of a stream's lines (the usage taps, the translators, the
// usage filter) holds such a line until its end comes, so without it a
// provider that never sent a new line would have them hold all it sent. A
// line that starts and ends within one Read is held by none of them.
type lineBound struct {
	io.ReadCloser
	max int
	run int // bytes since the last new line
}

func (b *lineBound) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	chunk := p[:n]
	if i := bytes.IndexByte(chunk, '\n'); i < 0 {
		b.run += n
	} else if b.run+i > b.max { // the carried line, ended here
		b.run += i
	} else {
		b.run = n - bytes.LastIndexByte(chunk, '\n') - 1
	}
	if b.run > b.max {
		return 0, ErrLineTooLong
	}
	return n, err
}
