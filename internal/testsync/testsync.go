// Package testsync holds what tests of several packages share to watch
// concurrent work: a log buffer safe for many writers, and a poll for a
// condition another goroutine makes true.
package testsync

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// Buffer is a bytes.Buffer that many goroutines may write while a test
// reads it: a logger's output, a subprocess's.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// WaitFor polls cond every 20 ms until it holds, and fails t naming what
// did not happen when within passes first. For work of another process or
// goroutine a test cannot be told about; not a stand-in for a clock.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
