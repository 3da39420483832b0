// Package testmail runs a real SMTP server for tests: Mailpit
// (github.com/axllent/mailpit), started on free ports and read through its
// HTTP API. The binary comes from TEST_MAILPIT_BIN (.ci/run builds it once)
// or, without it, is built into the CI cache by `go install` on first use,
// so a plain `go test ./...` works on a fresh clone.
package testmail

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Version is the Mailpit the tests run.
const Version = "v1.33.1"

// Server is one Mailpit of a test's own.
type Server struct {
	SMTPPort, HTTPPort int
	bin, dir           string
	startTLS           bool
	// TLS trusts the server's certificate (WithSTARTTLS); nil otherwise.
	TLS *tls.Config
	cmd *exec.Cmd
	out *bytes.Buffer
}

// Option adjusts a Server.
type Option func(*Server)

// WithSTARTTLS makes the server offer STARTTLS with a certificate of its
// own for 127.0.0.1 and require it; Server.TLS trusts that certificate.
func WithSTARTTLS() Option { return func(s *Server) { s.startTLS = true } }

// Start builds (once) and starts Mailpit on free ports until t ends. It
// accepts any SMTP user and password, over plain SMTP too.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := &Server{bin: Bin(t), dir: t.TempDir()}
	for _, o := range opts {
		o(s)
	}
	s.SMTPPort, s.HTTPPort = freePort(t), freePort(t)
	if s.startTLS {
		s.makeCertificate(t)
	}
	s.Restart(t)
	t.Cleanup(func() { s.kill() })
	return s
}

// URL is SLUICE_SMTP_URL for the server, with a user and password (any
// are accepted).
func (s *Server) URL() string {
	return fmt.Sprintf("smtp://sluice:secret-pass@127.0.0.1:%d", s.SMTPPort)
}

// Stop kills the server: mail sent meanwhile fails as at a server that is
// down (connection refused).
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.kill()
}

// Restart starts the server (again) on its ports and waits until its API
// answers. A restarted server has no messages.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	args := []string{"--smtp", fmt.Sprintf("127.0.0.1:%d", s.SMTPPort), "--listen", fmt.Sprintf("127.0.0.1:%d", s.HTTPPort),
		"--database", filepath.Join(s.dir, fmt.Sprintf("mailpit-%d.db", time.Now().UnixNano())),
		"--smtp-auth-accept-any", "--disable-version-check", "--smtp-disable-rdns", "--quiet"}
	if s.startTLS {
		args = append(args, "--smtp-tls-cert", filepath.Join(s.dir, "cert.pem"), "--smtp-tls-key", filepath.Join(s.dir, "key.pem"),
			"--smtp-require-starttls")
	} else {
		args = append(args, "--smtp-auth-allow-insecure")
	}
	s.out = &bytes.Buffer{}
	s.cmd = exec.Command(s.bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start mailpit: %v", err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		resp, err := http.Get(s.api("/api/v1/messages"))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && s.smtpUp() {
				return
			}
		}
		if time.Now().After(deadline) {
			s.kill()
			t.Fatalf("mailpit did not answer within 20s: %v\n%s", err, s.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *Server) smtpUp() bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.SMTPPort), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func (s *Server) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

func (s *Server) api(path string) string {
	return fmt.Sprintf("http://127.0.0.1:%d%s", s.HTTPPort, path)
}

// Address is one recipient or sender as Mailpit lists it.
type Address struct {
	Name    string
	Address string
}

// Message is a received mail: its envelope and its text.
type Message struct {
	ID      string
	From    Address
	To      []Address
	Subject string
	Text    string
}

// Messages returns every message received, newest first, with its text.
func (s *Server) Messages(t testing.TB) []Message {
	t.Helper()
	var list struct {
		Messages []struct{ ID string }
	}
	s.getJSON(t, "/api/v1/messages?limit=1000", &list)
	out := make([]Message, 0, len(list.Messages))
	for _, m := range list.Messages {
		var msg Message
		s.getJSON(t, "/api/v1/message/"+m.ID, &msg)
		out = append(out, msg)
	}
	return out
}

// To returns the messages to addr, newest first.
func (s *Server) To(t testing.TB, addr string) []Message {
	t.Helper()
	var out []Message
	for _, m := range s.Messages(t) {
		for _, a := range m.To {
			if strings.EqualFold(a.Address, addr) {
				out = append(out, m)
			}
		}
	}
	return out
}

// WaitFor waits until addr has received n messages (a node's mail worker
// sends in the background) and returns them, newest first.
func (s *Server) WaitFor(t testing.TB, addr string, n int) []Message {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; {
		ms := s.To(t, addr)
		if len(ms) >= n {
			return ms
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s received %d messages within 15s, want %d", addr, len(ms), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Link returns the first line of m's text that starts with prefix: the
// link a mail carries.
func (m Message) Link(t testing.TB, prefix string) string {
	t.Helper()
	for _, line := range strings.Split(m.Text, "\n") {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, prefix) {
			return line
		}
	}
	t.Fatalf("no line starting with %q in the mail %q:\n%s", prefix, m.Subject, m.Text)
	return ""
}

func (s *Server) getJSON(t testing.TB, path string, dst any) {
	t.Helper()
	resp, err := http.Get(s.api(path))
	if err != nil {
		t.Fatalf("mailpit %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("mailpit %s: %d %s", path, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, dst); err != nil {
		t.Fatalf("mailpit %s: %v in %s", path, err, body)
	}
}

// makeCertificate writes a self-signed certificate for 127.0.0.1 and sets
// TLS to trust it.
func (s *Server) makeCertificate(t testing.TB) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, b []byte) {
		if err := os.WriteFile(filepath.Join(s.dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("cert.pem", "CERTIFICATE", der)
	write("key.pem", "EC PRIVATE KEY", keyDER)
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	s.TLS = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
}

func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

var build struct {
	sync.Mutex
	path string
}

// Bin is the Mailpit binary: TEST_MAILPIT_BIN, or the one built into
// "${XDG_CACHE_HOME:-$HOME/.cache}/sluice-ci/bin-mailpit-<version>/",
// building it there first if it is missing (the module proxy is reachable).
func Bin(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("TEST_MAILPIT_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("TEST_MAILPIT_BIN=%s: %v", p, err)
		}
		return p
	}
	build.Lock()
	defer build.Unlock()
	if build.path != "" {
		return build.path
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatalf("no cache directory for mailpit: %v", err)
		}
		cache = filepath.Join(home, ".cache")
	}
	dir := filepath.Join(cache, "sluice-ci", "bin-mailpit-"+Version)
	bin := filepath.Join(dir, "mailpit")
	if _, err := os.Stat(bin); err != nil {
		t.Logf("building mailpit %s into %s (once; set TEST_MAILPIT_BIN to use another)", Version, dir)
		cmd := exec.Command("go", "install", "github.com/axllent/mailpit@"+Version)
		cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go install mailpit@%s: %v\n%s", Version, err, out)
		}
	}
	build.path = bin
	return bin
}
