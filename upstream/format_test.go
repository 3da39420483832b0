package upstream

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/apperr"
)

// An Azure key is called at its deployment, with its api-version and the
// api-key header, and speaks OpenAI's wire format otherwise.
func TestAzureKeysAreCalledAtTheirDeployment(t *testing.T) {
	var got *http.Request
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		got = r
		writeOK(w)
	})
	k := key(1, srv.URL+"/openai/deployments/gpt4o-prod?api-version=2024-10-21", "azure-secret")
	k.Provider = KindAzure
	p, _ := testPool(t, PoolOptions{}, k)
	resp, err := p.Do(context.Background(), chatRequest("gpt-4o"))
	if err != nil {
		t.Fatal(err)
	}
	if got.URL.Path != "/openai/deployments/gpt4o-prod/chat/completions" || got.URL.Query().Get("api-version") != "2024-10-21" {
		t.Fatalf("called %s", got.URL)
	}
	if got.Header.Get("api-key") != "azure-secret" || got.Header.Get("Authorization") != "" {
		t.Fatalf("headers api-key %q, Authorization %q", got.Header.Get("api-key"), got.Header.Get("Authorization"))
	}
	if string(resp.Body) != okBody {
		t.Fatalf("body %s", resp.Body)
	}
}

// An embeddings request goes to the API root's embeddings endpoint.
func TestEmbeddingsGoToTheirEndpoint(t *testing.T) {
	var path string
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		path = r.URL.Path
		writeOK(w)
	})
	p, _ := testPool(t, PoolOptions{}, key(1, srv.URL+"/v1", "s"))
	req := chatRequest("text-embedding-3-small")
	req.Endpoint = Embeddings
	if _, err := p.Do(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if path != "/v1/embeddings" {
		t.Fatalf("called %s", path)
	}
}

// A base URL the provider's format cannot use is refused in words the
// admin can act on, and a key saved with one stays out of rotation.
func TestBaseURLsAreCheckedPerProvider(t *testing.T) {
	for _, tc := range []struct{ kind, base, want string }{
		{"", "https://api.openai.com/v1", ""},
		{KindOpenAI, "ftp://example.com", "absolute http(s) URL"},
		{KindAzure, "https://res.openai.azure.com", "deployment"},
		{KindAzure, "https://res.openai.azure.com/openai/deployments/d", "api-version"},
		{KindAzure, "https://res.openai.azure.com/openai/deployments/d?api-version=2024-10-21", ""},
		{"bedrock", "https://example.com", "provider must be one of openai"},
	} {
		err := CheckBaseURL(tc.kind, tc.base)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %s: %v", tc.kind, tc.base, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s %s: %v, want %q", tc.kind, tc.base, err, tc.want)
		}
	}
	k := key(1, "https://res.openai.azure.com", "s")
	k.Provider = KindAzure
	p, _ := testPool(t, PoolOptions{}, k)
	if s := status(t, p, 1); s.State != Disabled || !strings.Contains(s.Reason, "deployment") {
		t.Fatalf("state %s (%s)", s.State, s.Reason)
	}
}

// A format that cannot embed (Anthropic's: it has no embeddings API)
// refuses an embeddings request before any attempt, in words the client
// can act on, and the key stays healthy for chat.
func TestAProviderWithoutEmbeddingsRefusesThem(t *testing.T) {
	calls := 0
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) {
		calls++
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"hi"}],`+
			`"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}`)
	})
	k := key(1, srv.URL, "s")
	k.Provider = KindAnthropic
	p, _ := testPool(t, PoolOptions{}, k)
	req := chatRequest("claude-x")
	req.Endpoint = Embeddings
	_, err := p.Do(context.Background(), req)
	var refusal *apperr.Error
	if !errors.As(err, &refusal) || refusal.Code != apperr.Invalid || refusal.Param != "model" ||
		!strings.Contains(refusal.Message, "served by Anthropic, which has no embeddings API") || calls != 0 {
		t.Fatalf("%v (%d calls)", err, calls)
	}
	if _, err := p.Do(context.Background(), chatRequest("claude-x")); err != nil || calls != 1 || status(t, p, 1).State != Healthy {
		t.Fatalf("chat after the refusal: %v, %d calls, %s", err, calls, status(t, p, 1).State)
	}
}
