package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSigningExamples runs the README's client examples of signed requests
// (docs/signing: Go, Node, Python, curl with openssl) against a real
// server, with a covered header and with a query string, after checking
// that the README quotes each one's code as it is in its file. Go always
// runs; Node runs where node is installed (and must in CI, which sets
// TEST_NODE_SDKS_DIR); Python and the shell script where python3, curl
// and openssl are.
func TestSigningExamples(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	base, _, stop := start(t, map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4"})
	defer stop()
	c := client{t, base}
	var owner, key struct{ Token string }
	var tok struct {
		Token string
		ID    int64
	}
	c.call("POST", "/api/auth/signup", "", `{"email":"signer@example.com","password":"password123","organization":"Signers"}`, &owner)
	c.call("POST", "/api/tokens", owner.Token, `{"name":"signed"}`, &tok)
	var sign struct {
		SigningSecret string `json:"signing_secret"`
	}
	if r := c.call("PUT", "/api/tokens/"+strconv.FormatInt(tok.ID, 10)+"/signing", owner.Token, `{"required":true}`, &sign); r.StatusCode != 200 {
		t.Fatalf("turn signing on: %d", r.StatusCode)
	}
	key.Token = tok.Token
	// An unsigned request is refused: the examples' 200s are their signatures'.
	if r := c.call("GET", "/v1/models", key.Token, "", nil); r.StatusCode != 401 {
		t.Fatalf("unsigned request: %d, want 401", r.StatusCode)
	}

	goBinary := filepath.Join(t.TempDir(), "signing")
	if out, err := exec.Command("go", "build", "-o", goBinary, "../docs/signing").CombinedOutput(); err != nil {
		t.Fatalf("go build ./docs/signing: %v\n%s", err, out)
	}
	examples := []struct {
		name, file, fence string
		command           []string // the program; the request's arguments follow
		needs             []string // programs it needs on PATH
	}{
		{"go", "../docs/signing/sign.go", "go", []string{goBinary}, nil},
		{"node", "../docs/signing/sign.mjs", "js", []string{"node", "../docs/signing/sign.mjs"}, []string{"node"}},
		{"python", "../docs/signing/sign.py", "python", []string{"python3", "../docs/signing/sign.py"}, []string{"python3"}},
		{"curl", "../docs/signing/sign.sh", "sh", []string{"sh", "../docs/signing/sign.sh"}, []string{"sh", "curl", "openssl"}},
	}
	chat := `{"model":"sluice-local","messages":[{"role":"user","content":"写一副春联"}]}`
	requests := [][]string{
		{"POST", "/v1/chat/completions", chat, "X-Sluice-Priority: high", "x-sluice-cache:  off "},
		{"GET", "/v1/models?limit=5&after=a%20b"},
	}
	for i, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			src, err := os.ReadFile(ex.file)
			if err != nil {
				t.Fatal(err)
			}
			quoted := readmePart(t, string(src))
			if !strings.Contains(string(readme), "```"+ex.fence+"\n"+quoted+"```\n") {
				t.Errorf("the README does not quote %s's code between its readme markers as it is:\n%s", ex.file, quoted)
			}
			for _, tool := range ex.needs {
				if _, err := exec.LookPath(tool); err != nil {
					if ex.name == "node" && os.Getenv("TEST_NODE_SDKS_DIR") != "" {
						t.Fatalf("TEST_NODE_SDKS_DIR is set (CI) but node is missing: %v", err)
					}
					t.Skipf("%s is not installed: skipping the %s example", tool, ex.name)
				}
			}
			for j, args := range requests {
				cmd := exec.Command(ex.command[0], append(ex.command[1:], args...)...)
				cmd.Env = append(os.Environ(), "SLUICE_BASE="+base, "SLUICE_KEY="+key.Token, "SLUICE_SIGNING_SECRET="+sign.SigningSecret)
				out, err := cmd.CombinedOutput()
				if err != nil || !strings.Contains(string(out), `"object":"`) {
					t.Fatalf("%s %s (example %d, request %d): %v\n%s", args[0], args[1], i, j, err, out)
				}
			}
		})
	}
}

// readmePart is the text between a file's "readme:start" and "readme:end"
// lines, which the README quotes.
func readmePart(t *testing.T, src string) string {
	t.Helper()
	_, after, ok := strings.Cut(src, "readme:start\n")
	part, _, ok2 := strings.Cut(after, "readme:end")
	if !ok || !ok2 {
		t.Fatal("no readme:start and readme:end markers")
	}
	// Drop the end marker's own comment leader ("// ", "# ") and the
	// blank lines before it.
	if i := strings.LastIndexByte(part, '\n'); i >= 0 {
		part = part[:i]
	}
	return strings.TrimRight(part, "\n") + "\n"
}
