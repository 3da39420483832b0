package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/testsync"
)

// Issue 21: files and batches in bounded memory, measured from the outside
// on the real server binary's peak resident set (VmHWM). The 1 MiB case
// runs in every test run; the 100 MiB premium case with SLUICE_MEMORY_BIG=1
// (docs/BENCHMARKS.md).

// memoryBudget is the most a case may grow the server's peak RSS.
const memoryBudget = 64 << 20

// serverBinary builds Sluice once for the process's tests, or is
// SLUICE_TEST_BINARY, a build of the caller's (to measure another commit).
var serverBinary = sync.OnceValues(func() (string, error) {
	if bin := os.Getenv("SLUICE_TEST_BINARY"); bin != "" {
		return bin, nil
	}
	dir, err := os.MkdirTemp("", "sluice-bin-")
	if err != nil {
		return "", err
	}
	binaryDir = dir
	bin := filepath.Join(dir, "sluice")
	if out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// binaryDir holds the binary serverBinary built; TestMain removes it.
var binaryDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binaryDir != "" {
		os.RemoveAll(binaryDir)
	}
	os.Exit(code)
}

// process is a Sluice server binary running as a subprocess.
type process struct {
	t    *testing.T
	cmd  *exec.Cmd
	base string
	out  *testsync.Buffer
}

// startProcess runs the server binary with env (and nothing else of the
// test's environment but PATH and HOME) on a free port.
func startProcess(t *testing.T, env map[string]string) *process {
	t.Helper()
	bin, err := serverBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &process{t: t, cmd: cmd, out: &testsync.Buffer{}}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(startWait)
	for {
		if m := listening.FindStringSubmatch(p.out.String()); m != nil {
			p.base = m[1]
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("not listening after %s:\n%s", startWait, p.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// peakRSS is the process's peak resident set so far, in bytes.
func (p *process) peakRSS() int64 {
	p.t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		p.t.Fatal(err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				p.t.Fatalf("VmHWM %q: %v", v, err)
			}
			return kb << 10
		}
	}
	p.t.Fatalf("no VmHWM in /proc/%d/status", p.cmd.Process.Pid)
	return 0
}

// upload sends content as a batch input file with token; it returns the
// status and the answer's body.
func (p *process) upload(token string, content io.Reader) (int, []byte) {
	p.t.Helper()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		mw.WriteField("purpose", "batch")
		w, _ := mw.CreateFormFile("file", "in.jsonl")
		if _, err := io.Copy(w, content); err != nil {
			pw.CloseWithError(err)
			return
		}
		pw.CloseWithError(mw.Close())
	}()
	req, _ := http.NewRequest("POST", p.base+"/v1/files", pr)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// fileID uploads content and returns its id.
func (p *process) fileID(token string, content []byte) string {
	p.t.Helper()
	status, body := p.upload(token, bytes.NewReader(content))
	var f struct{ ID string }
	if status != 200 || json.Unmarshal(body, &f) != nil || f.ID == "" {
		p.t.Fatalf("upload: %d %s", status, body)
	}
	return f.ID
}

// createBatch makes a batch of file; it returns the status and the body.
func (p *process) createBatch(token, file string) (int, []byte) {
	p.t.Helper()
	req, _ := http.NewRequest("POST", p.base+"/v1/batches",
		strings.NewReader(`{"input_file_id":"`+file+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Error(err)
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// signupToken signs up an organization and returns its id and an API token.
func (p *process) signupToken(email string) (orgID int64, token string) {
	p.t.Helper()
	c := client{p.t, p.base}
	var signup struct {
		Token        string
		Organization struct{ ID int64 }
	}
	if r := c.call("POST", "/api/auth/signup", "", `{"email":"`+email+`","password":"password123","organization":"Memory"}`, &signup); r.StatusCode != 201 {
		p.t.Fatalf("signup: %d", r.StatusCode)
	}
	var tok struct{ Token string }
	if r := c.call("POST", "/api/tokens", signup.Token, `{"name":"memory"}`, &tok); r.StatusCode != 201 {
		p.t.Fatalf("token: %d", r.StatusCode)
	}
	return signup.Organization.ID, tok.Token
}

// memoryEnv is the server's environment on SQLite (a data dir of the
// test's own) or, for "postgres", a private schema of TEST_DATABASE_URL.
func memoryEnv(t *testing.T, dialect string) map[string]string {
	env := map[string]string{"SLUICE_DATA_DIR": t.TempDir(), "SLUICE_BCRYPT_COST": "4", "SLUICE_ADMIN_PASSWORD": "admin-password",
		"SLUICE_LOG_LEVEL": "warn"}
	if v := os.Getenv("SLUICE_MEMORY_GOGC"); v != "" { // to see the heap floor's part: GOGC set turns it off
		env["GOGC"] = v
	}
	if dialect == "postgres" {
		env["DATABASE_URL"], env["SLUICE_AUTO_MIGRATE"], env["SLUICE_MASTER_KEY"] = testdb.PostgresURL(t), "true", testMasterKey
	}
	return env
}

// TestBatchesInBoundedMemory: a free organization's 1 MiB file of 524k
// lines of "x" and four batches of it at once (each refused at its
// 50,001st line) grow the server's peak RSS by at most 64 MB; so do four
// batches at once of a file of 50,000 bad lines (each listing 1,000
// failures and a count), in a server of their own.
func TestBatchesInBoundedMemory(t *testing.T) {
	t.Parallel() // what it measures is the server process's own peak
	if testing.Short() {
		t.Skip("starts the server binary")
	}
	cases := []struct {
		name    string
		content []byte
		check   func(status int, body []byte) bool
	}{
		{"524,288 lines of x", bytes.Repeat([]byte("x\n"), 1<<19), func(status int, body []byte) bool { // 1 MiB
			return status == 400 && strings.Contains(string(body), `"code":"too_many_requests"`) && strings.Contains(string(body), "50000")
		}},
		{"50,000 bad lines", bytes.Repeat([]byte(`{"custom_id": 1234}`+"\n"), 50_000), func(status int, body []byte) bool {
			var b struct {
				Status        string
				RequestCounts struct{ Total, Failed int } `json:"request_counts"`
			}
			return json.Unmarshal(body, &b) == nil && status == 200 && b.Status == "completed" && b.RequestCounts.Total == 50_000 &&
				b.RequestCounts.Failed == 50_000
		}},
	}
	for _, dialect := range []string{"sqlite", "postgres"} {
		for _, tc := range cases {
			t.Run(dialect+"/"+tc.name, func(t *testing.T) {
				p := startProcess(t, memoryEnv(t, dialect))
				_, token := p.signupToken("memory@example.com")
				// Warm-up: an upload and a batch of a bad line.
				warm := p.fileID(token, []byte("x\n"))
				if status, body := p.createBatch(token, warm); status != 200 {
					t.Fatalf("warm-up batch: %d %s", status, body)
				}
				before := p.peakRSS()
				file := p.fileID(token, tc.content)
				var wg sync.WaitGroup
				for range 4 {
					wg.Go(func() {
						if status, body := p.createBatch(token, file); !tc.check(status, body) {
							t.Errorf("a batch of %s: %d %.300s", tc.name, status, body)
						}
					})
				}
				wg.Wait()
				after := p.peakRSS()
				t.Logf("%s, %s: peak RSS %.1f MB before, %.1f MB after the upload and 4 batches at once (+%.1f MB)",
					dialect, tc.name, mb(before), mb(after), mb(after-before))
				if after-before > memoryBudget {
					t.Errorf("peak RSS grew by %.1f MB, more than %d MB", mb(after-before), memoryBudget>>20)
				}
			})
		}
	}
}

func mb(n int64) float64 { return float64(n) / (1 << 20) }

// TestPremiumUploadInBoundedMemory: a premium organization's 100 MiB
// upload of 50,000 valid lines, a batch of it and its download grow the
// server's peak RSS by at most 64 MB, from a server whose heap is at its
// collector's goal (warmHeap; the growth from cold is logged too). It
// takes about a minute: set SLUICE_MEMORY_BIG=1 (SLUICE_MEMORY_BIG=postgres
// for Postgres too).
func TestPremiumUploadInBoundedMemory(t *testing.T) {
	which := os.Getenv("SLUICE_MEMORY_BIG")
	if which == "" {
		t.Skip("SLUICE_MEMORY_BIG is not set: the 100 MiB case is a measurement (docs/BENCHMARKS.md)")
	}
	dialects := []string{"sqlite"}
	if which == "postgres" {
		dialects = append(dialects, "postgres")
	}
	for _, dialect := range dialects {
		t.Run(dialect, func(t *testing.T) {
			env := memoryEnv(t, dialect)
			env["SLUICE_JOB_WORKERS"] = "1" // the lines' jobs run slowly beside the measurement
			p := startProcess(t, env)
			orgID, token := p.signupToken("premium@example.com")
			c := client{t, p.base}
			var admin struct{ Token string }
			if r := c.call("POST", "/api/auth/login", "", `{"email":"admin@localhost","password":"admin-password"}`, &admin); r.StatusCode != 200 {
				t.Fatalf("admin login: %d", r.StatusCode)
			}
			if r := c.call("PUT", fmt.Sprintf("/api/admin/organizations/%d/tier", orgID), admin.Token, `{"tier":"premium"}`, nil); r.StatusCode != 200 {
				t.Fatalf("premium: %d", r.StatusCode)
			}
			warm := p.fileID(token, []byte("x\n"))
			if status, body := p.createBatch(token, warm); status != 200 {
				t.Fatalf("warm-up batch: %d %s", status, body)
			}
			cold := p.peakRSS()
			p.warmHeap(token)
			before := p.peakRSS()

			const n, size = 50_000, 100 << 20
			start := time.Now()
			status, body := p.upload(token, premiumLines(n, size))
			var f struct {
				ID    string
				Bytes int64
			}
			if json.Unmarshal(body, &f); status != 200 || f.Bytes != size {
				t.Fatalf("100 MiB upload: %d %s", status, body)
			}
			uploaded, tookUpload := p.peakRSS(), time.Since(start)
			start = time.Now()
			status, body = p.createBatch(token, f.ID)
			var b struct {
				Status        string
				RequestCounts struct{ Total, Failed int } `json:"request_counts"`
			}
			if json.Unmarshal(body, &b); status != 200 || b.RequestCounts.Total != n || b.RequestCounts.Failed != 0 {
				t.Fatalf("a batch of it: %d %.300s", status, body)
			}
			batched, tookBatch := p.peakRSS(), time.Since(start)
			start = time.Now()
			req, _ := http.NewRequest("GET", p.base+"/v1/files/"+f.ID+"/content", nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || got != size || resp.ContentLength != size {
				t.Fatalf("download: %d, %d bytes, Content-Length %d", resp.StatusCode, got, resp.ContentLength)
			}
			after, tookDownload := p.peakRSS(), time.Since(start)
			t.Logf("%s: peak RSS %.1f MB cold, %.1f MB with the heap at its goal; then +%.1f MB after the 100 MiB upload (%v), +%.1f MB after a batch of its %d lines (%v), +%.1f MB after its download (%v); +%.1f MB from cold",
				dialect, mb(cold), mb(before), mb(uploaded-before), tookUpload.Round(time.Millisecond), mb(batched-before), n, tookBatch.Round(time.Millisecond),
				mb(after-before), tookDownload.Round(time.Millisecond), mb(after-cold))
			if after-before > memoryBudget {
				t.Errorf("peak RSS grew by %.1f MB, more than %d MB", mb(after-before), memoryBudget>>20)
			}
		})
	}
}

// warmHeap brings the server's heap to its collector's goal, as a server
// under load has it: without GOGC set, Sluice lets its heap grow to a
// 64 MiB floor before it collects (main.go, gcHeapFloor), so a cold
// process grows by that much on any work that makes that much garbage,
// whatever it holds. A 1 MiB file downloaded 96 times makes about 96 MiB of
// garbage and holds nothing.
func (p *process) warmHeap(token string) {
	p.t.Helper()
	id := p.fileID(token, bytes.Repeat([]byte("x\n"), 1<<19))
	for range 96 {
		req, _ := http.NewRequest("GET", p.base+"/v1/files/"+id+"/content", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			p.t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			p.t.Fatalf("warm-up download: %d", resp.StatusCode)
		}
	}
}

// premiumLines writes n valid batch lines of exactly size bytes in all.
func premiumLines(n, size int) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		w := bufio.NewWriterSize(pw, 1<<16)
		per := size / n
		written := 0
		for i := range n {
			head := fmt.Sprintf(`{"custom_id":"req-%06d","method":"POST","url":"/v1/chat/completions","body":{"model":"sluice-local","max_tokens":8,"messages":[{"role":"user","content":"`, i)
			tail := `"}]}}` + "\n"
			want := per
			if i == n-1 {
				want = size - written
			}
			pad := want - len(head) - len(tail)
			w.WriteString(head)
			w.WriteString(strings.Repeat("a", pad))
			w.WriteString(tail)
			written += want
		}
		pw.CloseWithError(w.Flush())
	}()
	return pr
}
