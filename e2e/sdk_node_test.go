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
// stream with its usage chunk, and the SDK's retry on our 429. The package
// comes from TEST_NODE_SDKS_DIR (a directory with node_modules/openai
// and node_modules/@anthropic-ai/sdk; .ci/run installs pinned versions there); without it the test skips.
func TestOpenAINodeSDK(t *testing.T) {
	dir := os.Getenv("TEST_NODE_SDKS_DIR")
	if dir == "" {
		t.Skip("TEST_NODE_SDKS_DIR is not set: skipping the openai npm SDK test (CI installs the package and sets it)")
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
	if r := c.call("POST", "/api/admin/upstreams", admin.Token, `{"name":"mock","base_url":"`+provider.URL+`/v1","api_key":"sk-mock-provider","models":["gpt-4o-mini"]}`, nil); r.StatusCode != 201 {
		t.Fatalf("add provider: %d", r.StatusCode)
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
	// in the directory that holds node_modules/openai.
	src, err := os.ReadFile("testdata/openai-node/check.mjs")
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "sluice-check-"+strconv.Itoa(os.Getpid())+".mjs")
	if err := os.WriteFile(script, src, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(script)
	cmd := exec.Command(node, script)
	cmd.Env = append(os.Environ(), "SLUICE_BASE="+base, "SLUICE_KEY="+key.Token, "SLUICE_RETRY_KEY="+retryKey.Token, "SLUICE_PROVIDER_MODEL=gpt-4o-mini")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"ok":true`) {
		t.Fatalf("the openai npm SDK against Sluice: %v\n%s", err, out)
	}
	t.Logf("openai npm SDK: %s", strings.TrimSpace(string(out)))
}
