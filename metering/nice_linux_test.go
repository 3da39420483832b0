package metering

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/models"
)

// niceOf reads a thread's nice value from its /proc stat file.
func niceOf(t *testing.T, statPath string) int {
	t.Helper()
	b, err := os.ReadFile(statPath)
	if err != nil {
		t.Fatal(err)
	}
	n, err := parseNice(b)
	if err != nil {
		t.Fatalf("%s: %v", statPath, err)
	}
	return n
}

// parseNice takes the nice value from a /proc stat line: after the
// command's closing parenthesis come the fields from the third (state) on,
// and nice is the 19th.
func parseNice(stat []byte) (int, error) {
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) <= 19-3 {
		return 0, fmt.Errorf("%d fields after the command", len(f))
	}
	return strconv.Atoi(f[19-3])
}

// threadsAtNice counts the process's threads at nice n but its main
// thread: were the recorder's goroutine running on the main thread when it
// locked it, the runtime would leave that thread idle when the goroutine
// ends, not end it.
func threadsAtNice(t *testing.T, n int) int {
	t.Helper()
	stats, err := filepath.Glob("/proc/self/task/*/stat")
	if err != nil {
		t.Fatal(err)
	}
	mainThread := filepath.Join("/proc/self/task", strconv.Itoa(os.Getpid()), "stat")
	count := 0
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil || p == mainThread {
			continue // a thread that has ended since the listing
		}
		if nice, err := parseNice(b); err != nil {
			t.Fatalf("%s: %v", p, err)
		} else if nice == n {
			count++
		}
	}
	return count
}

// lowerNice is the nice value of the process's threads and a higher one to
// tell the recorder's thread by.
func lowerNice(t *testing.T) (process, lower int) {
	t.Helper()
	runtime.LockOSThread() // read this goroutine's thread, an ordinary one
	process = niceOf(t, "/proc/thread-self/stat")
	runtime.UnlockOSThread()
	if process >= 19 {
		t.Fatalf("the test runs at nice %d: no lower priority to tell the recorder's thread by", process)
	}
	return process, min(process+5, 19)
}

// niceSink notes the nice value of the thread each insert runs on; its
// first insert waits for hold to close when hold is set.
type niceSink struct {
	t       *testing.T
	hold    chan struct{}
	holding chan struct{}

	mu      sync.Mutex
	inserts []string // "size@nice"
}

func (s *niceSink) InsertUsageEvents(_ context.Context, evs []models.UsageEvent) error {
	s.mu.Lock()
	first := len(s.inserts) == 0
	s.mu.Unlock()
	if first && s.hold != nil {
		close(s.holding)
		<-s.hold
	}
	nice := niceOf(s.t, "/proc/thread-self/stat")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inserts = append(s.inserts, strconv.Itoa(len(evs))+"@"+strconv.Itoa(nice))
	return nil
}

func (s *niceSink) TouchAPITokens(context.Context, map[int64]time.Time) error { return nil }
func (s *niceSink) AddRejections(context.Context, []models.Rejections) error  { return nil }

func (s *niceSink) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.inserts...)
}

func recordN(t *testing.T, r *Recorder, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if err := r.Record(models.UsageEvent{RequestID: "r" + strconv.Itoa(i), TokenID: 1, CreatedAt: time.Unix(int64(i), 0)}); err != nil {
			t.Fatal(err)
		}
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A recorder that keeps up stores at the background priority, on a thread
// no other goroutine gets, which ends with it; what Close drains is stored
// at the process's.
func TestBackgroundPriorityWhileKeepingUp(t *testing.T) {
	process, nice := lowerNice(t)
	sink := &niceSink{t: t}
	r := NewRecorder(sink, quiet(), time.Hour, 16, WithBackgroundPriority(nice))
	t.Cleanup(func() { _ = r.Close(context.Background()) }) // ends the thread if the test fails early

	recordN(t, r, 0, 16) // a full batch: stored at once, with nothing behind it
	waitUntil(t, "the batch to be stored", func() bool { return r.Stored() == 16 })
	recordN(t, r, 16, 5) // under a batch, with an hour to the tick: Close stores it
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"16@" + strconv.Itoa(nice), "5@" + strconv.Itoa(process)}
	if got := sink.seen(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("inserts (size@nice) %q, want %q", got, want)
	}
	waitUntil(t, "the lowered thread to end", func() bool { return threadsAtNice(t, nice) == 0 })
}

// With a batch's worth queued behind the batch being stored, the next is
// stored at the process's priority: the background never builds a backlog.
func TestBackgroundPriorityYieldsWhenBehind(t *testing.T) {
	process, nice := lowerNice(t)
	sink := &niceSink{t: t, hold: make(chan struct{}), holding: make(chan struct{})}
	r := NewRecorder(sink, quiet(), time.Hour, 100, WithBackgroundPriority(nice))
	release := sync.OnceFunc(func() { close(sink.hold) })
	t.Cleanup(func() { release(); _ = r.Close(context.Background()) })
	recordN(t, r, 0, 100)
	<-sink.holding
	// The first batch is held: one batch waits for the flusher, the loop
	// holds another, and the buffer holds three more: when the flusher
	// takes the next, the loop can take only one of them.
	recordN(t, r, 100, 500)
	waitUntil(t, "three batches' worth in the buffer", func() bool { return r.Depth() >= 300 })
	release()
	waitUntil(t, "every event to be stored", func() bool { return r.Stored() == 600 })
	got := sink.seen()
	if want := []string{"100@" + strconv.Itoa(nice), "100@" + strconv.Itoa(process)}; len(got) < 2 || strings.Join(got[:2], " ") != strings.Join(want, " ") {
		t.Fatalf("inserts (size@nice) %q, want %q first", got, want)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}
