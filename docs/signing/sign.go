// Command signing sends one signed request to Sluice: the Go example of
// the README's "Signed requests", whose code between the readme markers
// the README quotes (TestSigningExamples runs it against a real server).
//
//	SLUICE_BASE=http://localhost:8080 SLUICE_KEY=sk_sluice_… SLUICE_SIGNING_SECRET=sk_sluice_sign_… \
//	  go run ./docs/signing POST /v1/chat/completions '{"model":"sluice-local","messages":[{"role":"user","content":"hi"}]}' 'X-Sluice-Priority: high'
package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// readme:start
// sign adds the signature's three headers to req, whose body is body. It
// covers the method, the path, the query string as sent and every
// X-Sluice-* header req has, so set those first.
func sign(req *http.Request, body []byte, secret string) {
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	nonce := rand.Text() // crypto/rand
	sum := sha256.Sum256(body)
	text := fmt.Sprintf("%s\n%s\n%s\n%s\n%x", req.Method, req.URL.EscapedPath(), ts, nonce, sum)
	var covered []string
	for name, values := range req.Header {
		if name = strings.ToLower(name); strings.HasPrefix(name, "x-sluice-") {
			covered = append(covered, name+":"+strings.Trim(values[0], " \t")+"\n")
		}
	}
	if req.URL.RawQuery != "" || len(covered) > 0 {
		slices.SortFunc(covered, func(a, b string) int { // by name
			return strings.Compare(a[:strings.IndexByte(a, ':')], b[:strings.IndexByte(b, ':')])
		})
		text += "\n" + req.URL.RawQuery + "\n" + strings.Join(covered, "")
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(text))
	req.Header.Set("X-Sluice-Timestamp", ts)
	req.Header.Set("X-Sluice-Nonce", nonce)
	req.Header.Set("X-Sluice-Signature", hex.EncodeToString(mac.Sum(nil)))
}

// readme:end

// main sends METHOD PATH [BODY [NAME:VALUE ...]] and prints the answer;
// it exits 1 on an answer that is not a 2xx.
func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: signing METHOD PATH [BODY [NAME:VALUE ...]]")
		os.Exit(2)
	}
	method, path := os.Args[1], os.Args[2]
	var body []byte
	var headers []string
	if len(os.Args) > 3 {
		body, headers = []byte(os.Args[3]), os.Args[4:]
	}
	req, err := http.NewRequest(method, os.Getenv("SLUICE_BASE")+path, bytes.NewReader(body))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	req.Header.Set("Authorization", "Bearer "+os.Getenv("SLUICE_KEY"))
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ":")
		req.Header.Set(name, strings.TrimSpace(value))
	}
	sign(req, body, os.Getenv("SLUICE_SIGNING_SECRET"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(answer))
	if resp.StatusCode >= 300 {
		os.Exit(1)
	}
}
