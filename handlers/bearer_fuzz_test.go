package handlers

import (
	"net/http"
	"strings"
	"testing"
)

// FuzzBearer reads any Authorization header, the first thing both APIs
// parse. It never panics; what it returns is the header's tail, trimmed;
// and "Bearer <token>" in any case of the scheme gives the token back.
func FuzzBearer(f *testing.F) {
	for _, seed := range []string{"Bearer sk_sluice_abc", "bearer  x ", "BEARER\tx", "Basic dXNlcjpwYXNz", "Bearer ", "Bearer", "", "Bearer \x00\xff"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, h string) {
		r := &http.Request{Header: http.Header{"Authorization": {h}}}
		got := bearer(r)
		if got != strings.TrimSpace(got) || !strings.HasSuffix(strings.TrimSpace(h), got) {
			t.Fatalf("bearer(%q) = %q", h, got)
		}
		if got != "" && !strings.EqualFold(h[:7], "bearer ") {
			t.Fatalf("bearer(%q) = %q without the Bearer scheme", h, got)
		}
		if tok := strings.TrimSpace(h); tok != "" && !strings.ContainsAny(tok, " \t\r\n") {
			for _, scheme := range []string{"Bearer ", "bearer ", "BEARER "} {
				if got := bearer(&http.Request{Header: http.Header{"Authorization": {scheme + tok}}}); got != tok {
					t.Fatalf("bearer(%q) = %q, want %q", scheme+tok, got, tok)
				}
			}
		}
	})
}
