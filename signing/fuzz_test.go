package signing_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/signing"
)

// FuzzVerifyHeaders feeds arbitrary signature headers, query strings,
// covered headers and bodies: Verify never panics, answers only nil or a
// 401 with one of its reasons, and accepts only what SignRequest produced.
func FuzzVerifyHeaders(f *testing.F) {
	secret := []byte("sk_sluice_sign_00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff")
	const method, path = "POST", "/v1/chat/completions"
	now := strconv.FormatInt(start.Unix(), 10)
	good := signing.Sign(secret, method, path, start.Unix(), "n", []byte("{}"))
	withBoth := signing.SignRequest(secret, signing.Request{Method: method, Path: path, Query: "a=1",
		Header: http.Header{"X-Sluice-Priority": {"high"}}}, start.Unix(), "n", []byte("{}"))
	f.Add(now, "n", good, "", "", []byte("{}"))
	f.Add(now, "n", strings.ToUpper(good), "", "", []byte("{}"))
	f.Add(now, "n", good, "a=1", "high", []byte("{}"))
	f.Add(now, "n", withBoth, "a=1", "high", []byte("{}"))
	f.Add(now, "n", withBoth, "a=1", " high\t", []byte("{}"))
	f.Add(now, "n", withBoth, "", "high", []byte("{}"))
	f.Add("", "", "", "", "", []byte(nil))
	f.Add("99999999999999999999", "n", good, "", "", []byte("{}"))
	f.Add(now, "n\r\nX-Evil: 1", good, "", "", []byte("{}"))
	f.Add(now, "n", good[:63]+"g", "", "\n", []byte("{}"))
	f.Add("+"+now, "\x00", "", "\x00", "", []byte("{}"))
	reasons := map[string]bool{signing.ReasonRequired: true, signing.ReasonExpired: true, signing.ReasonInvalid: true, signing.ReasonReplayed: true}
	clock := func() time.Time { return start }
	f.Fuzz(func(t *testing.T, ts, nonce, sig, query, priority string, body []byte) {
		v := signing.NewVerifier(signing.NewMemoryNonces(clock), clock)
		h := http.Header{}
		for k, val := range map[string]string{signing.HeaderTimestamp: ts, signing.HeaderNonce: nonce, signing.HeaderSignature: sig} {
			if val != "" {
				h[k] = []string{val}
			}
		}
		if priority != "" {
			h["X-Sluice-Priority"] = []string{priority}
		}
		r := signing.Request{Method: method, Path: path, Query: query, Header: h}
		err := v.Verify(context.Background(), 1, secret, r, body)
		if err == nil {
			unix, perr := strconv.ParseInt(ts, 10, 64)
			if perr != nil || !strings.EqualFold(signing.SignRequest(secret, r, unix, nonce, body), sig) {
				t.Fatalf("accepted ts=%q nonce=%q sig=%q query=%q priority=%q, which SignRequest did not produce", ts, nonce, sig, query, priority)
			}
			return
		}
		var e *apperr.Error
		if !errors.As(err, &e) || e.Code != apperr.Unauthorized || !reasons[e.Reason] || e.Message == "" {
			t.Fatalf("Verify(%q, %q, %q) = %v, want a 401 with a known reason", ts, nonce, sig, err)
		}
	})
}
