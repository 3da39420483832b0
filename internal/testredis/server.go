package testredis

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server of a test's own on 127.0.0.1, for tests that
// freeze Redis (SIGSTOP) or kill it (SIGKILL) to see what a stall or a crash
// does. The shared Redis of TEST_REDIS_URL is never stopped: other tests use
// it at the same time.
type Server struct {
	Addr string // host:port
	bin  string
	args []string
	cmd  *exec.Cmd
}

// URL is the server's redis:// URL, database 0.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Start runs a fresh redis-server (no persistence) on a free port until t
// ends. It skips t where the Redis tests do not run (TEST_REDIS_URL unset),
// and where redis-server is not on the PATH.
func Start(t testing.TB) *Server {
	t.Helper()
	if os.Getenv("TEST_REDIS_URL") == "" {
		t.Skip("TEST_REDIS_URL is not set; skipping a test that needs a real Redis")
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not on the PATH; this test runs a Redis of its own to stop it")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := t.TempDir()
	s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), bin: bin,
		args: []string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--logfile", filepath.Join(dir, "redis.log")}}
	t.Cleanup(func() {
		if s.cmd == nil || s.cmd.Process == nil {
			return
		}
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	})
	s.launch(t)
	return s
}

// launch starts the process on s.Addr and waits until it answers.
func (s *Server) launch(t testing.TB) {
	t.Helper()
	s.cmd = exec.Command(s.bin, s.args...)
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); c.Ping(context.Background()).Err() != nil; {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer within 10s", s.Addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Kill ends the server at once (SIGKILL), as a crash or the OOM killer
// would: its connections are reset, new ones refused, and what it held
// (it keeps nothing on disk) is gone.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = s.cmd.Wait()
}

// Restart starts a killed server again on the same port, empty, and waits
// until it answers.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.launch(t)
}

// Stop freezes the server (SIGSTOP): its connections stay open and take
// commands, and nothing answers, as on a host that stalls.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
}

// Cont resumes a stopped server (SIGCONT).
func (s *Server) Cont(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}
