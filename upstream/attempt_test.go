package upstream

import (
	"context"
	"errors"
	"net/http/httptrace"
	"testing"
	"time"
)

// An attempt at a whole answer outlives its client once the request is
// written (the provider answers and bills it regardless), and ends with
// the client before that; a stream's always ends with its client. Each
// says whether the request was written.
func TestAttemptContext(t *testing.T) {
	wrote := func(ctx context.Context, err error) {
		httptrace.ContextClientTrace(ctx).WroteRequest(httptrace.WroteRequestInfo{Err: err})
	}
	for _, tt := range []struct {
		name    string
		stream  bool
		write   func(ctx context.Context)
		wantEnd bool
		written bool
	}{
		{"whole answer, client gone after the write", false, func(ctx context.Context) { wrote(ctx, nil) }, false, true},
		{"whole answer, client gone before the write", false, func(context.Context) {}, true, false},
		{"whole answer, the write failed", false, func(ctx context.Context) { wrote(ctx, errors.New("broken pipe")) }, true, false},
		{"stream, client gone after the write", true, func(ctx context.Context) { wrote(ctx, nil) }, true, true},
		{"stream, client gone before the write", true, func(context.Context) {}, true, false},
		{"stream, the write failed", true, func(ctx context.Context) { wrote(ctx, errors.New("broken pipe")) }, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			client, leave := context.WithCancel(context.Background())
			st := &attemptState{}
			ctx, cancel := attemptContext(client, tt.stream, st)
			defer cancel()
			tt.write(ctx)
			leave()
			if st.written.Load() != tt.written {
				t.Errorf("written %v, want %v", st.written.Load(), tt.written)
			}
			wait := 5 * time.Second // for an end that must come
			if !tt.wantEnd {
				wait = 100 * time.Millisecond // for one that must not: can pass falsely, never fail falsely
			}
			select {
			case <-ctx.Done():
				if !tt.wantEnd {
					t.Fatal("the attempt ended with its client after the provider had the request")
				}
			case <-time.After(wait):
				if tt.wantEnd {
					t.Fatal("the attempt outlived a client that left before the provider had the request")
				}
			}
		})
	}
}
