// Package teststripe runs Stripe's own API mock, stripe-mock, for tests:
// the requests Sluice makes are checked against Stripe's OpenAPI
// specification and answered with Stripe's fixtures. stripe-mock is
// stateless and sends no webhooks, so tests drive state changes with events
// they sign themselves (Event).
package teststripe

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"
)

// Version is the stripe-mock release the tests run, built with go install.
const Version = "v0.203.0"

// SecretKey is a test-mode key stripe-mock accepts; WebhookSecret signs
// the tests' events.
const (
	SecretKey     = "sk_test_123"
	WebhookSecret = "whsec_sluice_test_secret"
)

// Mock is a running stripe-mock.
type Mock struct {
	// URL is the mock's HTTP base URL, what SLUICE_STRIPE_API_BASE is set to.
	URL string
}

// Start runs stripe-mock on free loopback ports until t ends. It is found
// through TEST_STRIPE_MOCK_BIN (which .ci/run sets after building it) or
// built into the CI cache with go install; a failure to build or start it
// fails the test, it never skips.
func Start(t testing.TB) *Mock {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatalf("stripe-mock: %v", err)
	}
	httpPort, httpsPort := freePort(t), freePort(t)
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:"+strconv.Itoa(httpPort), "-https-addr", "127.0.0.1:"+strconv.Itoa(httpsPort))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting stripe-mock: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	m := &Mock{URL: "http://127.0.0.1:" + strconv.Itoa(httpPort)}
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest("GET", m.URL+"/v1/customers", nil)
		req.Header.Set("Authorization", "Bearer "+SecretKey)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return m
			}
		}
		select {
		case <-done:
			t.Fatalf("stripe-mock exited before serving:\n%s", out.String())
		case <-time.After(50 * time.Millisecond): // waiting for a process to listen; no clock to inject
		}
		if time.Now().After(deadline) {
			t.Fatalf("stripe-mock did not answer within 30s:\n%s", out.String())
		}
	}
}

// binary is stripe-mock's path: TEST_STRIPE_MOCK_BIN, or the one in the CI
// cache, built there first (under a lock, as test binaries run at once).
func binary() (string, error) {
	if b := os.Getenv("TEST_STRIPE_MOCK_BIN"); b != "" {
		if _, err := os.Stat(b); err != nil {
			return "", fmt.Errorf("TEST_STRIPE_MOCK_BIN: %w", err)
		}
		return b, nil
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		cache = filepath.Join(home, ".cache")
	}
	dir := filepath.Join(cache, "sluice-ci", "bin-stripe-mock-"+Version)
	bin := filepath.Join(dir, "stripe-mock")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	cmd := exec.Command("go", "install", "github.com/stripe/stripe-mock@"+Version)
	cmd.Dir = os.TempDir() // outside the module: stripe-mock is not one of its dependencies
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install github.com/stripe/stripe-mock@%s: %v\n%s", Version, err, out)
	}
	return bin, nil
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Event is a Stripe event of type typ about object, created at created,
// as Stripe would post it: the JSON body and its Stripe-Signature header,
// signed with secret at signedAt by stripe-go's own test helper.
func Event(t testing.TB, secret, id, typ string, created time.Time, object any, signedAt time.Time) (body []byte, header string) {
	t.Helper()
	raw, err := json.Marshal(object)
	if err != nil {
		t.Fatal(err)
	}
	ev := map[string]any{"id": id, "object": "event", "type": typ, "created": created.Unix(), "api_version": stripe.APIVersion,
		"livemode": false, "pending_webhooks": 1, "data": map[string]any{"object": json.RawMessage(raw)}}
	body, err = json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: signedAt})
	return signed.Payload, signed.Header
}

// Post delivers a signed event to url (a node's /webhooks/stripe) and
// returns the status and body of the answer.
func Post(ctx context.Context, url string, body []byte, header string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String(), nil
}
