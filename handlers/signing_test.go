package handlers

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/testredis"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/signing"
)

// signed is a request signed with secret at unix time ts with nonce: its
// query string and the X-Sluice-* headers it has are covered.
func signed(r request, secret string, ts int64, nonce string) request {
	path, query, _ := strings.Cut(r.path, "?")
	h := http.Header{}
	for k, v := range r.header {
		h.Set(k, v)
	}
	sig := signing.SignRequest([]byte(secret), signing.Request{Method: r.method, Path: path, Query: query, Header: h}, ts, nonce, []byte(r.body))
	r.header = maps.Clone(r.header)
	if r.header == nil {
		r.header = map[string]string{}
	}
	r.header[signing.HeaderTimestamp] = strconv.FormatInt(ts, 10)
	r.header[signing.HeaderNonce] = nonce
	r.header[signing.HeaderSignature] = sig
	return r
}

// withHeaders is r with more headers, sent after it was signed.
func withHeaders(r request, kv ...string) request {
	r.header = maps.Clone(r.header)
	for i := 0; i < len(kv); i += 2 {
		r.header[kv[i]] = kv[i+1]
	}
	return r
}

// setSigning calls PUT /api/tokens/{id}/signing and returns the answer.
func (e *env) setSigning(session string, id int64, body string) *httptest.ResponseRecorder {
	return e.do(request{method: "PUT", path: fmt.Sprintf("/api/tokens/%d/signing", id), bearer: session, body: body})
}

// wantRefusal checks an error answer's status, code and message.
func wantRefusal(t *testing.T, w *httptest.ResponseRecorder, status int, code, message string) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d: %s", w.Code, status, w.Body.String())
	}
	if got := errorCode(t, w); got != code {
		t.Errorf("code %q, want %q: %s", got, code, w.Body.String())
	}
	if msg := decode(t, w)["error"].(map[string]any)["message"].(string); !strings.Contains(msg, message) {
		t.Errorf("message %q does not say %q", msg, message)
	}
}

func TestSignedRequests(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		owner := e.signup("signer@example.com", "Signers")
		key, id := e.apiToken(owner)
		chat := request{method: "POST", path: "/v1/chat/completions", bearer: key, body: chatBody}

		// Bad input and other tenants.
		wantRefusal(t, e.setSigning(owner, id, `{}`), http.StatusBadRequest, "invalid", "required must be true or false")
		wantRefusal(t, e.setSigning(owner, id, `{"required":"yes"}`), http.StatusBadRequest, "invalid_json", "field 'required' must be bool")
		stranger := e.signup("stranger@example.com", "Strangers")
		wantRefusal(t, e.setSigning(stranger, id, `{"required":true}`), http.StatusNotFound, "not_found", "token not found")
		if w := e.do(chat); w.Code != http.StatusOK {
			t.Fatalf("another tenant's attempt changed the token: %d %s", w.Code, w.Body.String())
		}

		w := e.setSigning(owner, id, `{"required":true}`)
		if w.Code != http.StatusOK {
			t.Fatalf("turn signing on: %d %s", w.Code, w.Body.String())
		}
		on := decode(t, w)
		secret, _ := on["signing_secret"].(string)
		if !strings.HasPrefix(secret, "sk_sluice_sign_") || len(secret) != len("sk_sluice_sign_")+64 || on["signing_required"] != true {
			t.Fatalf("answer: %s", w.Body.String())
		}
		list := e.do(request{method: "GET", path: "/api/tokens", bearer: owner})
		if !strings.Contains(list.Body.String(), `"signing_required":true`) || strings.Contains(list.Body.String(), "sk_sluice_sign_") {
			t.Errorf("the token list must say signing is required and never show the secret: %s", list.Body.String())
		}

		now := e.clock.Now().Unix()
		wantRefusal(t, e.do(chat), http.StatusUnauthorized, "signature_required", "This API key requires signed requests")
		if w := e.do(signed(chat, secret, now, "n-1")); w.Code != http.StatusOK {
			t.Fatalf("signed request: %d %s", w.Code, w.Body.String())
		}
		wantRefusal(t, e.do(signed(chat, secret, now, "n-1")), http.StatusUnauthorized, "request_replayed", "already used")
		wantRefusal(t, e.do(signed(chat, secret, now-301, "n-2")), http.StatusUnauthorized, "request_expired", "more than 300 seconds")
		wantRefusal(t, e.do(signed(chat, secret, now+301, "n-3")), http.StatusUnauthorized, "request_expired", "more than 300 seconds")
		wantRefusal(t, e.do(signed(chat, "sk_sluice_sign_wrong", now, "n-4")), http.StatusUnauthorized, "invalid_signature", "does not match")
		altered := signed(chat, secret, now, "n-5")
		altered.body = strings.Replace(chatBody, "hello", "hellO", 1)
		wantRefusal(t, e.do(altered), http.StatusUnauthorized, "invalid_signature", "does not match")
		moved := signed(chat, secret, now, "n-6")
		moved.path = "/v1/jobs"
		wantRefusal(t, e.do(moved), http.StatusUnauthorized, "invalid_signature", "does not match")
		missing := signed(chat, secret, now, "n-7")
		delete(missing.header, signing.HeaderNonce)
		wantRefusal(t, e.do(missing), http.StatusUnauthorized, "invalid_signature", "Missing X-Sluice-Nonce")
		// The body is read for the signature up to the route's own limit
		// (SLUICE_MAX_BODY_BYTES, 4 KiB here), not the tier's batch file
		// limit, on every route that takes it whole.
		huge := signed(request{method: "POST", path: "/v1/chat/completions", bearer: key,
			body: `{"pad":"` + strings.Repeat("x", 1<<20+64<<10) + `"}`}, secret, now, "n-big")
		wantRefusal(t, e.do(huge), http.StatusRequestEntityTooLarge, "request_too_large", "request body is larger than 4096 bytes")
		padded := signed(request{method: "GET", path: "/v1/models", bearer: key, body: strings.Repeat("x", 5000)}, secret, now, "n-pad")
		wantRefusal(t, e.do(padded), http.StatusRequestEntityTooLarge, "request_too_large", "request body is larger than 4096 bytes")
		// A refused nonce was not used up: a forger cannot burn the client's nonces.
		if w := e.do(signed(chat, secret, now, "n-5")); w.Code != http.StatusOK {
			t.Errorf("a nonce refused with a bad signature must stay usable: %d %s", w.Code, w.Body.String())
		}

		// The query string is signed as sent; a bodiless GET signs an empty
		// body. A query the signature leaves out is named.
		models := signed(request{method: "GET", path: "/v1/models?limit=5", bearer: key}, secret, now, "n-8")
		if w := e.do(models); w.Code != http.StatusOK {
			t.Errorf("signed GET with a query: %d %s", w.Code, w.Body.String())
		}
		unsignedQuery := signed(request{method: "GET", path: "/v1/models", bearer: key}, secret, now, "n-8q")
		unsignedQuery.path = "/v1/models?limit=5"
		wantRefusal(t, e.do(unsignedQuery), http.StatusUnauthorized, "invalid_signature", "does not cover the query string")

		// A nonce is remembered while its timestamp is acceptable, no longer.
		e.clock.Advance(signing.Window + 2*time.Second)
		if w := e.do(signed(chat, secret, e.clock.Now().Unix(), "n-1")); w.Code != http.StatusOK {
			t.Errorf("a nonce past its window must be accepted again: %d %s", w.Code, w.Body.String())
		}

		// A new secret replaces the old one.
		again := decode(t, e.setSigning(owner, id, `{"required":true}`))["signing_secret"].(string)
		if again == secret {
			t.Fatal("turning signing on again must issue a new secret")
		}
		now = e.clock.Now().Unix()
		wantRefusal(t, e.do(signed(chat, secret, now, "n-9")), http.StatusUnauthorized, "invalid_signature", "does not match")
		if w := e.do(signed(chat, again, now, "n-9")); w.Code != http.StatusOK {
			t.Errorf("the new secret: %d %s", w.Code, w.Body.String())
		}

		// Off again: unsigned requests pass.
		w = e.setSigning(owner, id, `{"required":false}`)
		if w.Code != http.StatusOK || strings.Contains(w.Body.String(), "signing_secret") || !strings.Contains(w.Body.String(), `"signing_required":false`) {
			t.Fatalf("turn signing off: %d %s", w.Code, w.Body.String())
		}
		if w := e.do(chat); w.Code != http.StatusOK {
			t.Errorf("unsigned request after signing was turned off: %d %s", w.Code, w.Body.String())
		}

		// A revoked token cannot change.
		e.do(request{method: "DELETE", path: fmt.Sprintf("/api/tokens/%d", id), bearer: owner})
		wantRefusal(t, e.setSigning(owner, id, `{"required":true}`), http.StatusConflict, "conflict", "the token is revoked")
	})
}

// TestReplayOnAnotherNode sends a signed request to one node and the same
// request to a second: with Redis the second node has seen the nonce.
func TestReplayOnAnotherNode(t *testing.T) {
	client := testredis.Client(t)
	db := testdb.Postgres(t)
	prefix := testredis.Prefix()
	nodes := []*env{newEnv(t, db), newEnv(t, db)}
	for _, n := range nodes {
		n.deps.Signatures = signing.NewVerifier(signing.NewFallbackNonces(signing.NewRedisNonces(client, prefix),
			signing.NewMemoryNonces(n.clock.Now), time.Second, n.clock.Now), n.clock.Now)
		n.rebuild()
	}
	owner := nodes[0].signup("nodes@example.com", "Nodes")
	key, id := nodes[0].apiToken(owner)
	secret := decode(t, nodes[0].setSigning(owner, id, `{"required":true}`))["signing_secret"].(string)

	chat := signed(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: chatBody}, secret, time.Now().Unix(), "across")
	if w := nodes[0].do(chat); w.Code != http.StatusOK {
		t.Fatalf("first node: %d %s", w.Code, w.Body.String())
	}
	wantRefusal(t, nodes[1].do(chat), http.StatusUnauthorized, "request_replayed", "already used")
	fresh := signed(request{method: "POST", path: "/v1/chat/completions", bearer: key, body: chatBody}, secret, time.Now().Unix(), "fresh")
	if w := nodes[1].do(fresh); w.Code != http.StatusOK {
		t.Errorf("second node, fresh nonce: %d %s", w.Code, w.Body.String())
	}
}
