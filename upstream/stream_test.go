package upstream

import (
	"bytes"
	"context"
	"errors"
	"github.com/sluicehq/sluice/chat"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

const (
	chunk1 = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"}}]}\n\n"
	chunk2 = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" world\"}}]}\n\n"
	usage  = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2,\"total_tokens\":11}}\n\n"
	done   = "data: [DONE]\n\n"
)

func streamReq() Request {
	r := chatRequest("m")
	r.Stream = true
	return r
}

// sse writes the stream's headers and then each chunk, flushed.
func sse(w http.ResponseWriter, chunks ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	more(w, chunks...)
}

// more writes and flushes more chunks.
func more(w http.ResponseWriter, chunks ...string) {
	for _, c := range chunks {
		io.WriteString(w, c)
		w.(http.Flusher).Flush()
	}
}

// readUntil reads s until the bytes read contain want.
func readUntil(t *testing.T, s io.Reader, want string) {
	t.Helper()
	var got bytes.Buffer
	buf := make([]byte, 16)
	for !strings.Contains(got.String(), want) {
		n, err := s.Read(buf)
		got.Write(buf[:n])
		if err != nil && !strings.Contains(got.String(), want) {
			t.Fatalf("read %q then %v, waiting for %q", got.String(), err, want)
		}
	}
}

func TestStreamPassesThroughAndTapsUsage(t *testing.T) {
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != "text/event-stream" {
			t.Errorf("Accept = %q", r.Header.Get("Accept"))
		}
		sse(w, chunk1, chunk2, usage, done)
	})
	p, _ := testPool(t, PoolOptions{StallTimeout: time.Second}, key(1, srv.URL, "a"))
	resp, err := p.Do(context.Background(), streamReq())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 200 || resp.Stream == nil || resp.Body != nil || resp.Attempts != 1 {
		t.Fatalf("resp %+v", resp)
	}
	tap := NewUsageTap(resp.Stream)
	got, err := io.ReadAll(tap)
	if err != nil {
		t.Fatal(err)
	}
	if want := chunk1 + chunk2 + usage + done; string(got) != want {
		t.Fatalf("stream changed on the way:\n%q\nwant\n%q", got, want)
	}
	if u, final := tap.Usage(); u.PromptTokens != 9 || u.CompletionTokens != 2 || !final {
		t.Fatalf("usage %+v %v", u, final)
	}
	if tap.Delivered() != "Hello world" {
		t.Fatalf("delivered %q", tap.Delivered())
	}
	if err := resp.Stream.Close(); err != nil {
		t.Fatal(err)
	}
	if n := entry(p, 1).h.inFlight.Load(); n != 0 {
		t.Fatalf("in flight %d after the stream ended", n)
	}
	if s := status(t, p, 1); s.Failures != 0 || s.State != Healthy {
		t.Fatalf("status %+v", s)
	}
}

func TestStreamStall(t *testing.T) {
	cancelled := make(chan struct{})
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		sse(w, chunk1)
		select { // stall
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(5 * time.Second):
		}
	})
	p, _ := testPool(t, PoolOptions{StallTimeout: 100 * time.Millisecond}, key(1, srv.URL, "a"))
	resp, err := p.Do(context.Background(), streamReq())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Stream.Close()
	readUntil(t, resp.Stream, "Hello")
	start := time.Now()
	_, err = resp.Stream.Read(make([]byte, 256))
	took := time.Since(start)
	if !errors.Is(err, ErrStalled) {
		t.Fatalf("err = %v, want ErrStalled", err)
	}
	if took < 90*time.Millisecond || took > time.Second {
		t.Fatalf("stall detected after %s, want about the 100ms StallTimeout", took)
	}
	select {
	case <-cancelled:
	case <-time.After(2 * time.Second):
		t.Fatal("the stalled upstream request was not cancelled")
	}
	if _, err := resp.Stream.Read(make([]byte, 16)); !errors.Is(err, ErrStalled) {
		t.Fatalf("read after the stall: %v, want ErrStalled again", err)
	}
	if s := status(t, p, 1); s.Failures != 1 {
		t.Fatalf("a stall counts against the key: %+v", s)
	}
}

func TestStreamSlowReaderIsNotAStall(t *testing.T) {
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) { sse(w, chunk1, chunk2, done) })
	p, _ := testPool(t, PoolOptions{StallTimeout: 50 * time.Millisecond}, key(1, srv.URL, "a"))
	resp, err := p.Do(context.Background(), streamReq())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Stream.Close()
	readUntil(t, resp.Stream, "Hello")
	// The scenario, not a wait: the client is slow (longer than the 50 ms
	// StallTimeout between reads); the provider is not.
	time.Sleep(120 * time.Millisecond)
	if rest, err := io.ReadAll(resp.Stream); err != nil || !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("rest %q err %v", rest, err)
	}
}

func TestStreamClientDisconnect(t *testing.T) {
	cancelled := make(chan struct{})
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		sse(w, chunk1)
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(5 * time.Second):
		}
	})
	p, _ := testPool(t, PoolOptions{StallTimeout: 5 * time.Second}, key(1, srv.URL, "a"))
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := p.Do(ctx, streamReq())
	if err != nil {
		t.Fatal(err)
	}
	tap := NewUsageTap(resp.Stream)
	readUntil(t, tap, "Hello")
	cancel() // the client went away
	select {
	case <-cancelled:
	case <-time.After(2 * time.Second):
		t.Fatal("the provider never saw the cancellation")
	}
	if _, err := tap.Read(make([]byte, 16)); err == nil || errors.Is(err, ErrStalled) {
		t.Fatalf("read after cancel: %v, want the cancellation", err)
	}
	resp.Stream.Close()
	ours := func(d string) chat.Usage { return chat.Usage{CompletionTokens: chat.CountTokens(d)} }
	if _, final := tap.Usage(); final || tap.Billed(ours).CompletionTokens != 2 || tap.Delivered() != "Hello" {
		t.Fatalf("bill what was delivered: %q, %+v", tap.Delivered(), tap.Billed(ours))
	}
	if s := status(t, p, 1); s.Failures != 0 {
		t.Fatalf("a client leaving counted against the key: %+v", s)
	}
	if n := entry(p, 1).h.inFlight.Load(); n != 0 {
		t.Fatalf("in flight %d", n)
	}
}

func TestStreamNotRetriedAfterFirstByte(t *testing.T) {
	var h hits
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		h.add(r)
		sse(w, chunk1)
		panic(http.ErrAbortHandler) // the connection drops mid-stream
	})
	p, _ := testPool(t, PoolOptions{}, key(1, srv.URL, "a"), key(2, srv.URL, "b"))
	resp, err := p.Do(context.Background(), streamReq())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Stream.Close()
	got, err := io.ReadAll(resp.Stream)
	if err == nil || errors.Is(err, ErrStalled) || !strings.Contains(string(got), "Hello") {
		t.Fatalf("read %q, %v; want the first chunk, then the broken connection's error", got, err)
	}
	if h.total() != 1 {
		t.Fatalf("hits %d: a stream is never retried once it started", h.total())
	}
}

func TestStreamRetriedBeforeHeaders(t *testing.T) {
	var h hits
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		if h.add(r) == 1 {
			w.WriteHeader(503)
			return
		}
		sse(w, chunk1, done)
	})
	p, _ := testPool(t, PoolOptions{}, key(1, srv.URL, "a"))
	resp, err := p.Do(context.Background(), streamReq())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Stream.Close()
	if resp.Attempts != 2 {
		t.Fatalf("Attempts %d, want 2", resp.Attempts)
	}
	if b, err := io.ReadAll(resp.Stream); err != nil || string(b) != chunk1+done {
		t.Fatalf("%q %v", b, err)
	}
}

func TestStreamHeadersTimeout(t *testing.T) {
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	p := NewPool(PoolOptions{AttemptTimeout: 50 * time.Millisecond, Budget: 200 * time.Millisecond, BaseBackoff: time.Millisecond})
	p.SetKeys([]Key{key(1, srv.URL, "a")})
	start := time.Now()
	if _, err := p.Do(context.Background(), streamReq()); !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want a timeout waiting for the headers", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("took %s", took)
	}
}

func TestStreamOutlivesAttemptTimeout(t *testing.T) {
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		// The scenario, not a wait: a provider whose chunks come 80 ms
		// apart, so the stream outlasts the 50 ms AttemptTimeout.
		sse(w, chunk1)
		time.Sleep(80 * time.Millisecond)
		more(w, chunk2)
		time.Sleep(80 * time.Millisecond)
		more(w, done)
	})
	p := NewPool(PoolOptions{AttemptTimeout: 50 * time.Millisecond, StallTimeout: time.Second})
	p.SetKeys([]Key{key(1, srv.URL, "a")})
	resp, err := p.Do(context.Background(), streamReq())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Stream.Close()
	if b, err := io.ReadAll(resp.Stream); err != nil || string(b) != chunk1+chunk2+done {
		t.Fatalf("%q %v: the attempt timeout covers the headers only", b, err)
	}
}

// TestLineBoundCountsFromTheLastNewLine: the bound is on what of one line
// is carried from a Read to the next, not on the stream.
func TestLineBoundCountsFromTheLastNewLine(t *testing.T) {
	for _, tt := range []struct {
		in   string
		read int // bytes per Read
		ok   bool
	}{
		{"aaaa\nbbbb\ncccc\n", 3, true},
		{"aaaa\nbbbb\ncccc", 2, true},          // a last line without its end, within the bound
		{"aaaa\nbbbbb\n", 3, false},            // 5 bytes before the new line
		{"aaaa\nbbbbbbbbbbbbbbb\n", 16, false}, // over within one read
	} {
		b := &lineBound{ReadCloser: io.NopCloser(iotestChunks(tt.in, tt.read)), max: 4}
		_, err := io.ReadAll(b)
		if tt.ok != (err == nil) || !tt.ok && !errors.Is(err, ErrLineTooLong) {
			t.Errorf("%q in reads of %d: %v", tt.in, tt.read, err)
		}
	}
}

// iotestChunks reads s n bytes at a time.
func iotestChunks(s string, n int) io.Reader {
	return readerFunc(func(p []byte) (int, error) {
		if s == "" {
			return 0, io.EOF
		}
		k := copy(p[:min(len(p), n)], s)
		s = s[k:]
		return k, nil
	})
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// TestStreamLineTooLong: a provider that streams more than
// MaxResponseBytes without a new line has its stream end with
// ErrLineTooLong once the bound is passed, not once it stops sending;
// long lines within the bound pass whole.
func TestStreamLineTooLong(t *testing.T) {
	line := "data: " + strings.Repeat("a", 1<<20) + "\n\n" // a 1 MiB line, legal
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("Authorization"), "legal") {
			sse(w, strings.Repeat(line, 20))
			return
		}
		sse(w, "data: ")
		block := strings.Repeat("a", 64<<10)
		for range 2 * MaxResponseBytes / len(block) {
			if r.Context().Err() != nil {
				return
			}
			more(w, block)
		}
	})
	for _, tt := range []struct {
		secret string
		want   error
	}{{"legal", nil}, {"endless", ErrLineTooLong}} {
		p, _ := testPool(t, PoolOptions{StallTimeout: 5 * time.Second}, key(1, srv.URL, tt.secret))
		resp, err := p.Do(context.Background(), streamReq())
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Stream)
		resp.Stream.Close()
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: read %d bytes, then %v; want %v", tt.secret, n, err, tt.want)
		}
		if tt.want != nil && n > MaxResponseBytes {
			t.Errorf("%s: %d bytes passed before the stream ended, more than the bound %d", tt.secret, n, MaxResponseBytes)
		}
		if tt.want == nil && n != int64(20*len(line)) {
			t.Errorf("%s: %d bytes of %d", tt.secret, n, 20*len(line))
		}
	}
}
