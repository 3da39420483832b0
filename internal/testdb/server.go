package testdb

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/models"
)

// Server is a PostgreSQL server of a test's own on 127.0.0.1, for tests
// that restart the database under load. The shared server of
// TEST_DATABASE_URL is never touched: other tests use it at the same time.
type Server struct {
	Port int
	dir  string // the data directory; the socket lives there too
}

// URL is the server's postgres:// URL (database postgres, trust auth).
func (s *Server) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.Port)
}

// StartServer makes a fresh cluster with initdb and starts it until t ends.
// It skips t where the Postgres tests do not run (TEST_DATABASE_URL unset);
// where they do, a missing initdb is a failure, not a skip. As root it runs
// the server as the postgres user, which PostgreSQL requires.
func StartServer(t testing.TB) *Server {
	t.Helper()
	if os.Getenv("TEST_DATABASE_URL") == "" {
		t.Skip("TEST_DATABASE_URL is not set: skipping a test that runs a Postgres of its own")
	}
	dir, err := os.MkdirTemp("", "sluice-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		pg, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running a Postgres of the test's own as root needs the postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Port: ln.Addr().(*net.TCPAddr).Port, dir: dir}
	ln.Close()
	data := filepath.Join(dir, "data")
	if out, err := s.command("initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	t.Cleanup(func() { s.command("pg_ctl", "stop", "-D", data, "-m", "immediate").Run() })
	s.Start(t)
	return s
}

// command runs name as the postgres user when the test runs as root.
func (s *Server) command(name string, args ...string) *exec.Cmd {
	if os.Geteuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	}
	return exec.Command(name, args...)
}

// Start starts the server (again) and waits until it takes connections.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off", s.Port, s.dir)
	if out, err := s.command("pg_ctl", "start", "-D", filepath.Join(s.dir, "data"), "-w", "-l", filepath.Join(s.dir, "log"), "-o", opts).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		db, err := models.Open(context.Background(), s.URL(), "")
		if err == nil {
			db.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the test's Postgres did not answer within 10s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop shuts the server down the way a restart does (pg_ctl -m fast): its
// sessions are ended (admin_shutdown) and new connections are refused
// until Start.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if out, err := s.command("pg_ctl", "stop", "-D", filepath.Join(s.dir, "data"), "-m", "fast", "-w").CombinedOutput(); err != nil {
		t.Fatalf("pg_ctl stop: %v\n%s", err, out)
	}
}
