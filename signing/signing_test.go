package signing_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/internal/testredis"
	"github.com/sluicehq/sluice/signing"
)

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var start = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func signed(secret string, method, path string, ts int64, nonce string, body []byte) http.Header {
	h := http.Header{}
	h.Set(signing.HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(signing.HeaderNonce, nonce)
	h.Set(signing.HeaderSignature, signing.Sign([]byte(secret), method, path, ts, nonce, body))
	return h
}

func reason(err error) string {
	if err == nil {
		return ""
	}
	var e *apperr.Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return fmt.Sprintf("not an apperr: %v", err)
}

// TestSignMatchesTheDocumentedRecipe computes the signature the way the
// README tells clients to, independently of Sign.
func TestSignMatchesTheDocumentedRecipe(t *testing.T) {
	secret := "sk_sluice_sign_" + strings.Repeat("ab", 32)
	body := []byte(`{"model":"gpt-4o-mini","messages":[]}`)
	sum := sha256.Sum256(body)
	text := "POST\n/v1/chat/completions\n1764504000\nn-1\n" + hex.EncodeToString(sum[:])
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(text))
	want := hex.EncodeToString(m.Sum(nil))
	if got := signing.Sign([]byte(secret), "POST", "/v1/chat/completions", 1764504000, "n-1", body); got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
}

func TestNewSecretIsFreshAndPrefixed(t *testing.T) {
	a, b := signing.NewSecret(), signing.NewSecret()
	if a == b || !strings.HasPrefix(a, "sk_sluice_sign_") || len(a) != len("sk_sluice_sign_")+64 {
		t.Fatalf("secrets %q, %q: want distinct sk_sluice_sign_ + 64 hex", a, b)
	}
}

func TestVerify(t *testing.T) {
	ctx := context.Background()
	secret := signing.NewSecret()
	body := []byte(`{"hello":"world"}`)
	c := &clock{t: start}
	v := signing.NewVerifier(signing.NewMemoryNonces(c.Now), c.Now)
	now := start.Unix()
	verify := func(h http.Header, method, path string, body []byte) error {
		return v.Verify(ctx, 7, []byte(secret), signing.Request{Method: method, Path: path, Header: h}, body)
	}

	if err := verify(signed(secret, "POST", "/v1/chat/completions", now, "n1", body), "POST", "/v1/chat/completions", body); err != nil {
		t.Fatalf("a good signature: %v", err)
	}

	cases := []struct {
		name   string
		header http.Header
		method string
		path   string
		body   []byte
		reason string
		msg    string
	}{
		{"unsigned", http.Header{}, "POST", "/v1/chat/completions", body, signing.ReasonRequired, "requires signed requests"},
		{"replayed", signed(secret, "POST", "/v1/chat/completions", now, "n1", body), "POST", "/v1/chat/completions", body, signing.ReasonReplayed, "already used"},
		{"too old", signed(secret, "POST", "/v1/chat/completions", now-301, "n2", body), "POST", "/v1/chat/completions", body, signing.ReasonExpired, "more than 300 seconds"},
		{"too far ahead", signed(secret, "POST", "/v1/chat/completions", now+301, "n3", body), "POST", "/v1/chat/completions", body, signing.ReasonExpired, "more than 300 seconds"},
		{"body altered", signed(secret, "POST", "/v1/chat/completions", now, "n4", body), "POST", "/v1/chat/completions", []byte(`{"hello":"there"}`), signing.ReasonInvalid, "does not match"},
		{"path altered", signed(secret, "POST", "/v1/chat/completions", now, "n5", body), "POST", "/v1/embeddings", body, signing.ReasonInvalid, "does not match"},
		{"method altered", signed(secret, "POST", "/v1/batches", now, "n6", body), "GET", "/v1/batches", body, signing.ReasonInvalid, "does not match"},
		{"another secret", signed(signing.NewSecret(), "POST", "/v1/chat/completions", now, "n7", body), "POST", "/v1/chat/completions", body, signing.ReasonInvalid, "does not match"},
		{"no nonce", func() http.Header {
			h := signed(secret, "POST", "/p", now, "n8", body)
			h.Del(signing.HeaderNonce)
			return h
		}(), "POST", "/p", body, signing.ReasonInvalid, "Missing X-Sluice-Nonce"},
		{"no timestamp", func() http.Header {
			h := signed(secret, "POST", "/p", now, "n8", body)
			h.Del(signing.HeaderTimestamp)
			return h
		}(), "POST", "/p", body, signing.ReasonInvalid, "Missing X-Sluice-Timestamp"},
		{"no signature", func() http.Header {
			h := signed(secret, "POST", "/p", now, "n8", body)
			h.Del(signing.HeaderSignature)
			return h
		}(), "POST", "/p", body, signing.ReasonInvalid, "Missing X-Sluice-Signature"},
		{"timestamp in ms", signed(secret, "POST", "/p", now*1000, "n9", body), "POST", "/p", body, signing.ReasonInvalid, "unix seconds"},
		{"negative timestamp", func() http.Header {
			h := signed(secret, "POST", "/p", now, "n10", body)
			h.Set(signing.HeaderTimestamp, "-1")
			return h
		}(), "POST", "/p", body, signing.ReasonInvalid, "unix seconds"},
		{"nonce with a newline", func() http.Header {
			h := signed(secret, "POST", "/p", now, "a", body)
			h["X-Sluice-Nonce"] = []string{"a\nb"}
			return h
		}(), "POST", "/p", body, signing.ReasonInvalid, "visible ASCII"},
		{"nonce too long", signed(secret, "POST", "/p", now, strings.Repeat("x", 129), body), "POST", "/p", body, signing.ReasonInvalid, "1 to 128"},
		{"signature not hex", func() http.Header {
			h := signed(secret, "POST", "/p", now, "n11", body)
			h.Set(signing.HeaderSignature, "zz")
			return h
		}(), "POST", "/p", body, signing.ReasonInvalid, "64 hex digits"},
		{"signature truncated", func() http.Header {
			h := signed(secret, "POST", "/p", now, "n12", body)
			h.Set(signing.HeaderSignature, h.Get(signing.HeaderSignature)[:62])
			return h
		}(), "POST", "/p", body, signing.ReasonInvalid, "64 hex digits"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := verify(tc.header, tc.method, tc.path, tc.body)
			var e *apperr.Error
			if !errors.As(err, &e) || e.Code != apperr.Unauthorized || e.Reason != tc.reason || !strings.Contains(e.Message, tc.msg) {
				t.Fatalf("Verify = %v, want 401 %s mentioning %q", err, tc.reason, tc.msg)
			}
		})
	}

	// Edges of the window are inside it.
	for i, ts := range []int64{now - 300, now + 300} {
		nonce := fmt.Sprintf("edge-%d", i)
		if err := verify(signed(secret, "GET", "/v1/models", ts, nonce, nil), "GET", "/v1/models", nil); err != nil {
			t.Fatalf("timestamp %+ds from now: %v", ts-now, err)
		}
	}
	// Uppercase hex is the same signature.
	h := signed(secret, "GET", "/v1/models", now, "upper", nil)
	h.Set(signing.HeaderSignature, strings.ToUpper(h.Get(signing.HeaderSignature)))
	if err := verify(h, "GET", "/v1/models", nil); err != nil {
		t.Fatalf("uppercase hex: %v", err)
	}
}

// TestBadSignatureDoesNotUseTheNonce: a forger who saw a nonce go by cannot
// burn it, and a client whose request failed to verify can send it again.
func TestBadSignatureDoesNotUseTheNonce(t *testing.T) {
	ctx := context.Background()
	secret := signing.NewSecret()
	c := &clock{t: start}
	v := signing.NewVerifier(signing.NewMemoryNonces(c.Now), c.Now)
	forged := signed("sk_sluice_sign_wrong", "POST", "/p", start.Unix(), "n", nil)
	if r := reason(v.Verify(ctx, 1, []byte(secret), signing.Request{Method: "POST", Path: "/p", Header: forged}, nil)); r != signing.ReasonInvalid {
		t.Fatalf("forged: %s", r)
	}
	if err := v.Verify(ctx, 1, []byte(secret), signing.Request{Method: "POST", Path: "/p", Header: signed(secret, "POST", "/p", start.Unix(), "n", nil)}, nil); err != nil {
		t.Fatalf("the real request after a forgery with its nonce: %v", err)
	}
}

// TestNoncesArePerToken: two tokens may pick the same nonce.
func TestNoncesArePerToken(t *testing.T) {
	ctx := context.Background()
	secret := signing.NewSecret()
	c := &clock{t: start}
	v := signing.NewVerifier(signing.NewMemoryNonces(c.Now), c.Now)
	for _, token := range []int64{1, 2} {
		if err := v.Verify(ctx, token, []byte(secret), signing.Request{Method: "GET", Path: "/p", Header: signed(secret, "GET", "/p", start.Unix(), "same", nil)}, nil); err != nil {
			t.Fatalf("token %d: %v", token, err)
		}
	}
}

// TestMemoryNoncesForgetAfterTheWindow: a nonce is refused while its
// timestamp is acceptable and then forgotten, so memory stays bounded; by
// then its timestamp is stale, so forgetting it lets no replay through.
func TestMemoryNoncesForgetAfterTheWindow(t *testing.T) {
	ctx := context.Background()
	secret := signing.NewSecret()
	c := &clock{t: start}
	nonces := signing.NewMemoryNonces(c.Now)
	v := signing.NewVerifier(nonces, c.Now)
	req := signed(secret, "GET", "/p", start.Unix()+300, "late", nil) // newest acceptable
	if err := v.Verify(ctx, 1, []byte(secret), signing.Request{Method: "GET", Path: "/p", Header: req}, nil); err != nil {
		t.Fatal(err)
	}
	c.Add(599 * time.Second) // timestamp still within the window
	if r := reason(v.Verify(ctx, 1, []byte(secret), signing.Request{Method: "GET", Path: "/p", Header: req}, nil)); r != signing.ReasonReplayed {
		t.Fatalf("replay 599s later: %s, want %s", r, signing.ReasonReplayed)
	}
	c.Add(2 * time.Second)
	if r := reason(v.Verify(ctx, 1, []byte(secret), signing.Request{Method: "GET", Path: "/p", Header: req}, nil)); r != signing.ReasonExpired {
		t.Fatalf("replay 601s later: %s, want %s", r, signing.ReasonExpired)
	}
	c.Add(signing.Window) // the next claim sweeps
	if _, err := nonces.Claim(ctx, 2, "other", time.Minute); err != nil {
		t.Fatal(err)
	}
	if n := nonces.Len(); n != 1 {
		t.Fatalf("%d nonces remembered after the window, want only the new one", n)
	}
}

// TestConcurrentReplaysAdmitOne sends the same signed request from many
// goroutines: exactly one is accepted.
func TestConcurrentReplaysAdmitOne(t *testing.T) {
	stores := map[string]func(t *testing.T, now func() time.Time) signing.Nonces{
		"memory": func(_ *testing.T, now func() time.Time) signing.Nonces { return signing.NewMemoryNonces(now) },
		"redis": func(t *testing.T, _ func() time.Time) signing.Nonces {
			client, prefix := testRedis(t)
			return signing.NewRedisNonces(client, prefix)
		},
	}
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			secret := signing.NewSecret()
			now := time.Now() // Redis keeps its own time for the TTL
			v := signing.NewVerifier(store(t, func() time.Time { return now }), func() time.Time { return now })
			req := signed(secret, "POST", "/v1/chat/completions", now.Unix(), "race", []byte("{}"))
			var ok, replayed atomic.Int32
			var wg sync.WaitGroup
			for range 64 {
				wg.Go(func() {
					err := v.Verify(context.Background(), 42, []byte(secret), signing.Request{Method: "POST", Path: "/v1/chat/completions", Header: req}, []byte("{}"))
					switch reason(err) {
					case "":
						ok.Add(1)
					case signing.ReasonReplayed:
						replayed.Add(1)
					default:
						t.Errorf("Verify: %v", err)
					}
				})
			}
			wg.Wait()
			if ok.Load() != 1 || replayed.Load() != 63 {
				t.Fatalf("%d accepted, %d replayed; want 1 and 63", ok.Load(), replayed.Load())
			}
		})
	}
}

func TestRedisNoncesExpire(t *testing.T) {
	ctx := context.Background()
	client, prefix := testRedis(t)
	nonces := signing.NewRedisNonces(client, prefix)
	if fresh, err := nonces.Claim(ctx, 9, "n", 150*time.Second); err != nil || !fresh {
		t.Fatalf("first claim: %v %v", fresh, err)
	}
	if fresh, err := nonces.Claim(ctx, 9, "n", 150*time.Second); err != nil || fresh {
		t.Fatalf("second claim: fresh=%v err=%v, want a replay", fresh, err)
	}
	ttl, err := client.PTTL(ctx, prefix+"{9}:nonce:n").Result()
	if err != nil || ttl <= 140*time.Second || ttl > 150*time.Second {
		t.Fatalf("key TTL %v (%v), want about 150s", ttl, err)
	}
}

// failing is a nonce store that is down.
type failing struct{}

func (failing) Claim(context.Context, int64, string, time.Duration) (bool, error) {
	return false, errors.New("connection refused")
}

// switchable is a nonce store that can be taken down and brought back.
type switchable struct {
	signing.Nonces
	down atomic.Bool
}

func (s *switchable) Claim(ctx context.Context, token int64, nonce string, ttl time.Duration) (bool, error) {
	if s.down.Load() {
		return false, errors.New("connection refused")
	}
	return s.Nonces.Claim(ctx, token, nonce, ttl)
}

// Through a Redis outage nonces are still checked: a replay to the same
// node is caught during the outage, also of a nonce first seen before it;
// and once Redis answers again, the nonces of the outage are in it, so a
// replay to any node is caught.
func TestFallbackNoncesThroughAnOutage(t *testing.T) {
	ctx := context.Background()
	sharedMemory := signing.NewMemoryNonces(nil)
	shared := &switchable{Nonces: sharedMemory}
	node := signing.NewFallbackNonces(shared, signing.NewMemoryNonces(nil), time.Second, nil)
	other := signing.NewFallbackNonces(shared, signing.NewMemoryNonces(nil), time.Second, nil)
	claim := func(f *signing.FallbackNonces, nonce string) bool {
		t.Helper()
		fresh, err := f.Claim(ctx, 1, nonce, time.Minute)
		if err != nil {
			t.Fatalf("%s: %v", nonce, err)
		}
		return fresh
	}
	if !claim(node, "before") {
		t.Fatal("a new nonce before the outage")
	}
	shared.down.Store(true)
	if !claim(node, "during") {
		t.Fatal("a new nonce during the outage")
	}
	if claim(node, "during") || claim(node, "before") {
		t.Fatal("a replay to the same node during the outage passed")
	}
	shared.down.Store(false)
	if !claim(node, "after") { // the first answer hands the outage's nonces back
		t.Fatal("a new nonce after the outage")
	}
	deadline := time.Now().Add(5 * time.Second)
	for sharedMemory.Len() != 3 { // before, after, and during once handed back
		if time.Now().After(deadline) {
			t.Fatalf("the outage's nonce never reached the shared store: it holds %d", sharedMemory.Len())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if claim(other, "during") {
		t.Fatal("after the outage, a replay of its nonce to another node passed")
	}
}

// TestStoreFailureIsUnavailable: a store error is a 503 to retry, never a
// pass.
func TestStoreFailureIsUnavailable(t *testing.T) {
	secret := signing.NewSecret()
	v := signing.NewVerifier(failing{}, nil)
	err := v.Verify(context.Background(), 1, []byte(secret), signing.Request{Method: "GET", Path: "/p", Header: signed(secret, "GET", "/p", time.Now().Unix(), "n", nil)}, nil)
	var e *apperr.Error
	if !errors.As(err, &e) || e.Code != apperr.Unavailable || e.RetryAfter <= 0 {
		t.Fatalf("Verify with a failing store = %v, want unavailable with Retry-After", err)
	}
}

// testRedis is a client for TEST_REDIS_URL and a key prefix of this test's
// own.
func testRedis(t *testing.T) (*redis.Client, string) {
	t.Helper()
	return testredis.Client(t), testredis.Prefix()
}

// TestCanonicalFormMatchesTheDocumentedRecipe computes the signed text of a
// request with a query string and covered headers the way the README tells
// clients to, independently of Canonical: names lower-cased and sorted,
// values trimmed, the query as sent, the signature's own headers and other
// headers left out.
func TestCanonicalFormMatchesTheDocumentedRecipe(t *testing.T) {
	secret := "sk_sluice_sign_" + strings.Repeat("ab", 32)
	body := []byte(`{"model":"gpt-4o-mini","messages":[]}`)
	sum := sha256.Sum256(body)
	h := http.Header{}
	h.Set("X-Sluice-Priority", "  high\t")
	h.Set("X-Sluice-Async", "true")
	h.Set("X-Sluice-Callback-URL", "https://hooks.example.com/done?x=1")
	h.Set("Content-Type", "application/json")
	h.Set(signing.HeaderTimestamp, "1764504000")
	h.Set(signing.HeaderNonce, "n-1")
	h.Set(signing.HeaderSignature, "whatever")
	r := signing.Request{Method: "POST", Path: "/v1/chat/completions", Query: "limit=5&after=file%20a", Header: h}
	text := "POST\n/v1/chat/completions\n1764504000\nn-1\n" + hex.EncodeToString(sum[:]) + "\n" +
		"limit=5&after=file%20a\n" +
		"x-sluice-async:true\n" +
		"x-sluice-callback-url:https://hooks.example.com/done?x=1\n" +
		"x-sluice-priority:high\n"
	if got := string(signing.Canonical(r, 1764504000, "n-1", body)); got != text {
		t.Fatalf("Canonical =\n%q\nwant\n%q", got, text)
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(text))
	if got, want := signing.SignRequest([]byte(secret), r, 1764504000, "n-1", body), hex.EncodeToString(m.Sum(nil)); got != want {
		t.Fatalf("SignRequest = %s, want %s", got, want)
	}

	// Only headers: the query line is empty. Only a query: no header lines.
	onlyHeader := signing.Request{Method: "GET", Path: "/p", Header: http.Header{"X-Sluice-Cache": {"off"}}}
	empty := sha256.Sum256(nil)
	if got, want := string(signing.Canonical(onlyHeader, 1, "n", nil)), "GET\n/p\n1\nn\n"+hex.EncodeToString(empty[:])+"\n\nx-sluice-cache:off\n"; got != want {
		t.Fatalf("headers only: %q, want %q", got, want)
	}
	onlyQuery := signing.Request{Method: "GET", Path: "/p", Query: "a=1"}
	if got, want := string(signing.Canonical(onlyQuery, 1, "n", nil)), "GET\n/p\n1\nn\n"+hex.EncodeToString(empty[:])+"\na=1\n"; got != want {
		t.Fatalf("query only: %q, want %q", got, want)
	}
}

// A request with neither a query string nor a covered header signs exactly
// as before they were covered, whatever other headers it carries: existing
// clients keep working.
func TestARequestWithoutExtrasSignsAsBefore(t *testing.T) {
	secret := []byte(signing.NewSecret())
	h := http.Header{"Content-Type": {"application/json"}, "User-Agent": {"x"}, "X-Request-Id": {"r"},
		signing.HeaderTimestamp: {"1764504000"}, signing.HeaderNonce: {"n"}, signing.HeaderSignature: {"s"}}
	r := signing.Request{Method: "POST", Path: "/v1/chat/completions", Header: h}
	if a, b := signing.SignRequest(secret, r, 1764504000, "n", []byte("{}")), signing.Sign(secret, "POST", "/v1/chat/completions", 1764504000, "n", []byte("{}")); a != b {
		t.Fatalf("SignRequest %s, Sign %s: a request without extras must sign as before", a, b)
	}
}

// TestVerifyCoversQueryAndHeaders: what a holder of a signed request adds
// or changes in its query string or X-Sluice-* headers is refused, named
// when the signature is one of the request without it; a request signed
// whole passes, and the nonce of a refused one stays usable.
func TestVerifyCoversQueryAndHeaders(t *testing.T) {
	ctx := context.Background()
	secret := signing.NewSecret()
	body := []byte(`{"hello":"world"}`)
	c := &clock{t: start}
	v := signing.NewVerifier(signing.NewMemoryNonces(c.Now), c.Now)
	now := start.Unix()
	const method, path = "POST", "/v1/chat/completions"
	// sign signs the request with query and headers; send is what arrives.
	sign := func(nonce, query string, headers map[string]string) http.Header {
		h := http.Header{}
		for k, val := range headers {
			h.Set(k, val)
		}
		r := signing.Request{Method: method, Path: path, Query: query, Header: h}
		h.Set(signing.HeaderTimestamp, strconv.FormatInt(now, 10))
		h.Set(signing.HeaderNonce, nonce)
		h.Set(signing.HeaderSignature, signing.SignRequest([]byte(secret), r, now, nonce, body))
		return h
	}
	with := func(h http.Header, headers map[string]string) http.Header {
		h = h.Clone()
		for k, val := range headers {
			h.Set(k, val)
		}
		return h
	}
	verify := func(h http.Header, query string) error {
		return v.Verify(ctx, 7, []byte(secret), signing.Request{Method: method, Path: path, Query: query, Header: h}, body)
	}
	nine := map[string]string{}
	for i := range 9 {
		nine[fmt.Sprintf("X-Sluice-Extra-%d", i)] = "v"
	}

	cases := []struct {
		name   string
		header http.Header
		query  string
		msg    string
	}{
		{"headers added to a request signed without any", with(sign("a1", "", nil), map[string]string{"X-Sluice-Async": "true", "X-Sluice-Priority": "high"}), "",
			"does not cover x-sluice-async and x-sluice-priority:"},
		{"a query added", sign("a2", "", nil), "limit=5", "does not cover the query string:"},
		{"a header added beside a signed one", with(sign("a3", "", map[string]string{"X-Sluice-Priority": "low"}), map[string]string{"X-Sluice-Callback-URL": "https://evil.example"}), "",
			"does not cover x-sluice-callback-url:"},
		{"a query and a header added beside signed ones", with(sign("a4", "a=1", map[string]string{"X-Sluice-Priority": "low"}), map[string]string{"X-Sluice-Session": "s"}), "a=1&b=2",
			"does not match: sign METHOD, PATH, TIMESTAMP, NONCE, the body's SHA-256, the query string, x-sluice-priority and x-sluice-session with"},
		{"a signed header's value changed", with(sign("a5", "", map[string]string{"X-Sluice-Priority": "low"}), map[string]string{"X-Sluice-Priority": "high"}), "",
			"does not match: sign METHOD, PATH, TIMESTAMP, NONCE, the body's SHA-256, x-sluice-priority with"},
		{"the query changed", sign("a6", "limit=5", nil), "limit=500", "does not match: sign METHOD, PATH, TIMESTAMP, NONCE, the body's SHA-256, the query string with"},
		{"a signed header removed", func() http.Header {
			h := sign("a7", "", map[string]string{"X-Sluice-Cache": "off"})
			h.Del("X-Sluice-Cache")
			return h
		}(), "", "does not match: sign METHOD, PATH, TIMESTAMP, NONCE and the body's SHA-256 with"},
		{"a header sent twice", func() http.Header {
			h := sign("a8", "", map[string]string{"X-Sluice-Priority": "low"})
			h.Add("X-Sluice-Priority", "high")
			return h
		}(), "", "x-sluice-priority is sent 2 times; send each X-Sluice-* header once."},
		// Past 8 parts the signature is not searched for what it leaves out.
		{"too many parts to search", with(sign("a9", "", nine), map[string]string{"X-Sluice-Async": "true"}), "", "does not match"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := verify(tc.header, tc.query)
			var e *apperr.Error
			if !errors.As(err, &e) || e.Code != apperr.Unauthorized || e.Reason != signing.ReasonInvalid || !strings.Contains(e.Message, tc.msg) {
				t.Fatalf("Verify = %v, want 401 invalid_signature saying %q", err, tc.msg)
			}
		})
	}

	// Signed whole, with values trimmed and other headers ignored: passes.
	h := sign("a1", "limit=5", map[string]string{"X-Sluice-Async": "true", "X-Sluice-Priority": "high", "X-Sluice-Callback-URL": "https://hooks.example.com/x"})
	h["X-Sluice-Priority"] = []string{" high "}
	h.Set("User-Agent", "anything")
	if err := verify(h, "limit=5"); err != nil {
		t.Fatalf("a request signed whole (nonce a1 refused above, so unused): %v", err)
	}
	if err := verify(with(sign("b1", "", nine), nil), ""); err != nil {
		t.Fatalf("nine covered headers, signed: %v", err)
	}
}
