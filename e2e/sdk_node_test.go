package e2e

import (
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/upstream/mock"
)

// TestOpenAINodeSDK runs testdata/openai-node/check.mjs, which drives Sluice
// with the official `openai` npm package: a local completion, a provider
// stream with its usage chunk, a streamed Responses call and a continued
// one, embeddings (which the SDK asks for in base64), and the SDK's retry
// on our 429.
func TestOpenAINodeSDK(t *testing.T) {
	t.Parallel()
	runNodeSDK(t, "openai-node")
}

// TestAnthropicNodeSDK runs testdata/anthropic-node/check.mjs, which drives
// Sluice's Messages API with the official `@anthropic-ai/sdk` npm package:
// a local answer, streams from an OpenAI-compatible key's model and from
// an Anthropic key's, a refusal and a 429 as the SDK reads them, and its
// retry on our 429.
func TestAnthropicNodeSDK(t *testing.T) {
	t.Parallel()
	runNodeSDK(t, "anthropic-node")
}

// runNodeSDK starts Sluice with a mock provider behind an OpenAI-compatible
// key (gpt-4o-mini) and an Anthropic key (claude-mock), two organizations'
// tokens (the second's tier holds one request, refilling 5 a second), and
// runs testdata/<script>/check.mjs against it. The npm packages come from
// TEST_NODE_SDKS_DIR (a directory with node_modules/openai and
// node_modules/@anthropic-ai/sdk; .ci/run installs pinned versions there);
// without it the test skips.
func runNodeSDK(t *testing.T, script string) {
	dir := os.Getenv("TEST_NODE_SDKS_DIR")
	if dir == "" {
		t.Skip("TEST_NODE_SDKS_DIR is not set: skipping the npm SDK test (CI installs the packages and sets it)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("TEST_NODE_SDKS_DIR is set but node is missing: %v", err)
	}
	provider := httptest.NewServer(mock.New(mock.Config{Keys: map[string]float64{"sk-mock-provider": 0}}))
	defer provider.Close()
	base, _, stop := start(t, map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4", "SLUICE_ADMIN_PASSWORD": "admin-password"})
	defer stop()
	c := client{t, base}
	var admin, user, key, retryUser, retryKey struct{ Token string }
	c.call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &admin)
	for _, k := range []string{
		`{"name":"mock","base_url":"` + provider.URL + `/v1","api_key":"sk-mock-provider","models":["gpt-4o-mini"]}`,
		`{"name":"mock-anthropic","provider":"anthropic","base_url":"` + provider.URL + `","api_key":"sk-mock-provider","models":["claude-mock"]}`,
	} {
		if r := c.call("POST", "/api/admin/upstreams", admin.Token, k, nil); r.StatusCode != 201 {
			t.Fatalf("add provider %s: %d", k, r.StatusCode)
		}
	}
	c.call("POST", "/api/auth/signup", "", `{"email":"node@example.com","password":"password123","organization":"Node"}`, &user)
	c.call("POST", "/api/tokens", user.Token, `{"name":"node"}`, &key)
	// The retry key's organization moves to premium, which is narrowed to
	// one request refilling 5 a second.
	c.call("POST", "/api/auth/signup", "", `{"email":"retry@example.com","password":"password123","organization":"Retry"}`, &retryUser)
	c.call("POST", "/api/tokens", retryUser.Token, `{"name":"retry"}`, &retryKey)
	var orgs struct {
		Data []struct {
			ID   int64
			Name string
		}
	}
	c.call("GET", "/api/admin/organizations", admin.Token, "", &orgs)
	for _, o := range orgs.Data {
		if o.Name == "Retry" {
			c.call("PUT", "/api/admin/organizations/"+strconv.FormatInt(o.ID, 10)+"/tier", admin.Token, `{"tier":"premium"}`, nil)
		}
	}
	if r := c.call("PUT", "/api/admin/tiers/premium", admin.Token, `{"capacity":1,"refill_per_sec":5,"freeze_threshold":0}`, nil); r.StatusCode != 200 {
		t.Fatalf("tier: %d", r.StatusCode)
	}
	// ES modules resolve packages next to the script, so it runs from a copy
	// in the directory that holds node_modules.
	src, err := os.ReadFile("testdata/" + script + "/check.mjs")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice-"+script+"-"+strconv.Itoa(os.Getpid())+".mjs")
	if err := os.WriteFile(path, src, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	cmd := exec.Command(node, path)
	cmd.Env = append(os.Environ(), "SLUICE_BASE="+base, "SLUICE_KEY="+key.Token, "SLUICE_RETRY_KEY="+retryKey.Token,
		"SLUICE_PROVIDER_MODEL=gpt-4o-mini", "SLUICE_ANTHROPIC_MODEL=claude-mock")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"ok":true`) {
		t.Fatalf("%s against Sluice: %v\n%s", script, err, out)
	}
	t.Logf("%s: %s", script, strings.TrimSpace(string(out)))
}
