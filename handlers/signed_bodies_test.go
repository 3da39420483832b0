package handlers

import (
	"bytes"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// signingEnv is an env with the Batch API's files, and a token of a new
// organization that requires signed requests, with its secret.
func signingEnv(t *testing.T, db *models.DB) (e *env, key, secret string) {
	t.Helper()
	e = newEnv(t, db)
	owner := e.signup("bodies@example.com", "Bodies")
	key, id := e.apiToken(owner)
	w := e.setSigning(owner, id, `{"required":true}`)
	if w.Code != http.StatusOK {
		t.Fatalf("turn signing on: %d %s", w.Code, w.Body.String())
	}
	return e, key, decode(t, w)["signing_secret"].(string)
}

// multipartUpload is a POST /v1/files form of purpose batch and content.
func multipartUpload(content string) (body, contentType string) {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	_ = w.WriteField("purpose", "batch")
	f, _ := w.CreateFormFile("file", "in.jsonl")
	_, _ = f.Write([]byte(content))
	_ = w.Close()
	return b.String(), w.FormDataContentType()
}

// countingBody counts what the server reads of a request body.
type countingBody struct {
	r    io.Reader
	read atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// doCounting sends r with its body read through a counter, and returns the
// answer and how many body bytes the server read.
func (e *env) doCounting(r request) (*httptest.ResponseRecorder, int64) {
	e.t.Helper()
	body := &countingBody{r: strings.NewReader(r.body)}
	req := httptest.NewRequest(r.method, r.path, body)
	req.ContentLength = int64(len(r.body))
	req.Header.Set("Content-Type", r.contentType)
	req.Header.Set("Authorization", "Bearer "+r.bearer)
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, req)
	return w, body.read.Load()
}

// A signed upload is the upload route's own: streamed by its handler after
// the rate limit, up to the tier's file limit, refused in the route's own
// words past it, and its signature checked over the whole body before the
// file is stored.
func TestSignedUploadsStream(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e, key, secret := signingEnv(t, db)
		now := e.clock.Now().Unix()
		files := func(nonce string) []any {
			t.Helper()
			w := e.do(signed(request{method: "GET", path: "/v1/files", bearer: key}, secret, now, nonce))
			if w.Code != http.StatusOK {
				t.Fatalf("list files: %d %s", w.Code, w.Body.String())
			}
			return decode(t, w)["data"].([]any)
		}
		line := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"sluice-local","messages":[{"role":"user","content":"hi"}]}}` + "\n"
		body, ct := multipartUpload(line)
		upload := request{method: "POST", path: "/v1/files", bearer: key, contentType: ct, body: body}

		// Altered after signing (same length): refused, nothing stored.
		altered := signed(upload, secret, now, "u-1")
		altered.body = strings.Replace(body, `"hi"`, `"ho"`, 1)
		wantRefusal(t, e.do(altered), http.StatusUnauthorized, "invalid_signature", "does not match")
		// A header added after signing is named; nothing stored either.
		added := withHeaders(signed(upload, secret, now, "u-2"), "X-Sluice-Priority", "high")
		wantRefusal(t, e.do(added), http.StatusUnauthorized, "invalid_signature", "does not cover x-sluice-priority")
		if got := files("l-1"); len(got) != 0 {
			t.Fatalf("a refused upload was stored: %v", got)
		}
		// Signed whole: stored (the nonce refused above is still usable).
		w := e.do(signed(upload, secret, now, "u-1"))
		if w.Code != http.StatusOK || decode(t, w)["bytes"] != float64(len(line)) {
			t.Fatalf("signed upload: %d %s", w.Code, w.Body.String())
		}
		if got := files("l-2"); len(got) != 1 {
			t.Fatalf("%d files after one upload", len(got))
		}
		wantRefusal(t, e.do(signed(upload, secret, now, "u-1")), http.StatusUnauthorized, "request_replayed", "already used")

		// Past the free tier's 1 MiB: the route's own refusal, and reading
		// stopped at the route's limit (the file's and the form's room; a
		// byte past it says it is past) rather than at the end of the body.
		bigBody, bigCT := multipartUpload(strings.Repeat(line, (1<<20+200<<10)/len(line)))
		big := signed(request{method: "POST", path: "/v1/files", bearer: key, contentType: bigCT, body: bigBody}, secret, now, "u-big")
		w, read := e.doCounting(big)
		wantRefusal(t, w, http.StatusRequestEntityTooLarge, "file_too_large", "the file is larger than the free tier accepts")
		if limit := int64(1<<20 + 64<<10 + 1); read > limit {
			t.Errorf("read %d of a %d-byte upload; want no more than the limit and the form's room (%d)", read, len(bigBody), limit)
		}

		// With the bucket empty, a signed upload is refused before its body
		// is read.
		for i := 0; ; i++ {
			w := e.do(signed(request{method: "GET", path: "/v1/models", bearer: key}, secret, now, "drain-"+strconv.Itoa(i)))
			if w.Code == http.StatusTooManyRequests {
				break
			}
			if i > 100 {
				t.Fatal("the bucket never emptied")
			}
		}
		w, read = e.doCounting(signed(upload, secret, now, "u-429"))
		wantRefusal(t, w, http.StatusTooManyRequests, "rate_limit_exceeded", "")
		if read != 0 {
			t.Errorf("read %d bytes of an upload refused by the rate limit; want 0", read)
		}
	})
}

// A signed request's body is read once: the handler takes the bytes the
// signature was checked over, so a signed request allocates about what an
// unsigned one does, not a second copy of its body.
func TestSignedBodiesAreReadOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		e.deps.MaxBodyBytes = 2 << 20
		e.rebuild()
		owner := e.signup("once@example.com", "Once")
		plainKey, _ := e.apiToken(owner)
		key, id := e.apiToken(owner)
		secret := decode(t, e.setSigning(owner, id, `{"required":true}`))["signing_secret"].(string)
		const size = 1 << 20
		// A model no one serves: refused once the body is read and parsed,
		// so the body is most of what the request allocates.
		body := `{"model":"no-such-model","messages":[{"role":"user","content":"hi"}],"pad":"` + strings.Repeat("x", size) + `"}`
		allocated := func(r request) uint64 {
			least := uint64(1 << 62)
			for i := range 3 {
				rr := r
				if r.header != nil {
					rr = signed(r, secret, e.clock.Now().Unix(), "once-"+strconv.Itoa(i))
				}
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				w := e.do(rr)
				runtime.ReadMemStats(&after)
				if w.Code != http.StatusNotFound || errorCode(t, w) != "model_not_found" {
					t.Fatalf("%d %s", w.Code, w.Body.String())
				}
				least = min(least, after.TotalAlloc-before.TotalAlloc)
			}
			return least
		}
		plain := allocated(request{method: "POST", path: "/v1/chat/completions", bearer: plainKey, body: body})
		signedOnce := allocated(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: body, header: map[string]string{}})
		if signedOnce > plain+size/2 {
			t.Fatalf("a signed request allocated %d bytes, an unsigned one %d: the %d-byte body was copied again", signedOnce, plain, size)
		}
	})
}

// The attack seen from outside: a correctly signed request with X-Sluice-Async
// and X-Sluice-Priority added by whoever holds it is refused, naming them,
// and logged once with its request id; each X-Sluice-* header alone is
// named too; signed with them, it passes.
func TestSignaturesCoverXSluiceHeaders(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		logs := e.captureLogs()
		owner := e.signup("covered@example.com", "Covered")
		key, id := e.apiToken(owner)
		secret := decode(t, e.setSigning(owner, id, `{"required":true}`))["signing_secret"].(string)
		now := e.clock.Now().Unix()
		chat := request{method: "POST", path: "/v1/chat/completions", bearer: key, body: chatBody}

		w := e.do(withHeaders(signed(chat, secret, now, "h-1"), "X-Sluice-Async", "true", "X-Sluice-Priority", "high"))
		wantRefusal(t, w, http.StatusUnauthorized, "invalid_signature", "does not cover x-sluice-async and x-sluice-priority:")
		rid := w.Header().Get("X-Request-Id")
		if n := strings.Count(logs.String(), rid); n != 1 || !strings.Contains(logs.String(), "error_code=invalid_signature") {
			t.Errorf("the refusal %s is logged %d times, want once with its code:\n%s", rid, n, logs.String())
		}
		for i, h := range []string{"X-Sluice-Callback-URL", "X-Sluice-Session", "X-Sluice-Cache", "X-Sluice-Anything-New"} {
			wantRefusal(t, e.do(withHeaders(signed(chat, secret, now, "h-2-"+strconv.Itoa(i)), h, "x")),
				http.StatusUnauthorized, "invalid_signature", "does not cover "+strings.ToLower(h)+":")
		}
		// Signed with them (values as sent, trimmed): served at high priority.
		withPriority := chat
		withPriority.header = map[string]string{"X-Sluice-Priority": "high", "X-Sluice-Cache": "off"}
		if w := e.do(signed(withPriority, secret, now, "h-1")); w.Code != http.StatusOK {
			t.Fatalf("signed with its headers: %d %s", w.Code, w.Body.String())
		}
		changed := withHeaders(signed(withPriority, secret, now, "h-3"), "X-Sluice-Priority", "low")
		wantRefusal(t, e.do(changed), http.StatusUnauthorized, "invalid_signature",
			"does not match: sign METHOD, PATH, TIMESTAMP, NONCE, the body's SHA-256, x-sluice-cache and x-sluice-priority with")
		twice := signed(withPriority, secret, now, "h-4")
		req := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(chatBody))
		for k, v := range twice.header {
			req.Header.Set(k, v)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Add("X-Sluice-Priority", "low")
		wantRefusal(t, serve(e.h, req, ""), http.StatusUnauthorized, "invalid_signature", "x-sluice-priority is sent 2 times")
		// A token that does not sign is not asked about its headers.
		plain, _ := e.apiToken(owner)
		if w := e.do(request{method: "POST", path: "/v1/chat/completions", bearer: plain, body: chatBody,
			header: map[string]string{"X-Sluice-Priority": "high"}}); w.Code != http.StatusOK {
			t.Fatalf("an unsigned token with X-Sluice-Priority: %d %s", w.Code, w.Body.String())
		}
	})
}
