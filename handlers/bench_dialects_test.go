package handlers

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/upstream"
	"github.com/sluicehq/sluice/upstream/mock"
)

// The dialect benchmarks: each dialect a client speaks, to each kind of
// provider, over loopback HTTP through Sluice, beside the same provider
// called directly and through a bare httputil.ReverseProxy, so that what
// Sluice adds can be set against what any proxy adds, in one run:
//
//	go test ./handlers -run '^$' -bench 'Dialects|FirstChunk' -benchmem -count 6
//
// Sluice's added time is sluice − direct; a bare proxy's is proxy −
// direct (docs/BENCHMARKS.md, "Dialects").

// dialectCase is one dialect in and one provider out.
type dialectCase struct {
	name     string
	path     string // under /v1
	body     string
	provider string // the key's kind
	// native is the same request in the provider's own dialect, for the
	// direct and proxy baselines; "" when the provider is the client's
	// dialect.
	nativePath, nativeBody string
}

var dialectCases = []dialectCase{
	{name: "chat/openai", path: "/chat/completions", provider: upstream.KindOpenAI,
		body: `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello there, how are you"}]}`},
	{name: "responses/openai", path: "/responses", provider: upstream.KindOpenAI,
		body:       `{"model":"gpt-4o-mini","input":"hello there, how are you","store":false}`,
		nativePath: "/chat/completions", nativeBody: `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello there, how are you"}]}`},
	{name: "messages/anthropic", path: "/messages", provider: upstream.KindAnthropic,
		body:       `{"model":"claude-mock","max_tokens":256,"messages":[{"role":"user","content":"hello there, how are you"}]}`,
		nativePath: "/v1/messages"},
	{name: "embeddings/openai", path: "/embeddings", provider: upstream.KindOpenAI,
		body: `{"model":"text-embedding-3-small","input":"hello there, how are you","encoding_format":"base64"}`},
	{name: "messages/openai", path: "/messages", provider: upstream.KindOpenAI,
		body:       `{"model":"gpt-4o-mini","max_tokens":256,"messages":[{"role":"user","content":"hello there, how are you"}]}`,
		nativePath: "/v1/chat/completions", nativeBody: `{"model":"gpt-4o-mini","max_tokens":256,"messages":[{"role":"user","content":"hello there, how are you"}]}`},
	{name: "chat/anthropic", path: "/chat/completions", provider: upstream.KindAnthropic,
		body:       `{"model":"claude-mock","max_tokens":256,"messages":[{"role":"user","content":"hello there, how are you"}]}`,
		nativePath: "/v1/messages", nativeBody: `{"model":"claude-mock","max_tokens":256,"messages":[{"role":"user","content":"hello there, how are you"}]}`},
	{name: "chat/gemini", path: "/chat/completions", provider: upstream.KindGemini,
		body:       `{"model":"gemini-2.5-flash","messages":[{"role":"user","content":"hello there, how are you"}]}`,
		nativePath: "/v1beta/models/gemini-2.5-flash:generateContent", nativeBody: `{"contents":[{"role":"user","parts":[{"text":"hello there, how are you"}]}]}`},
}

// dialectRig is Sluice with one key of a provider kind on the mock, the
// mock itself, and a bare reverse proxy to it, all on loopback.
type dialectRig struct {
	sluice, direct, proxy *httptest.Server
	token                 string
}

const benchProviderKey = "sk-bench-key"

func newDialectRig(b *testing.B, kind string, m *mock.Server) *dialectRig {
	e, token := benchEnv(b)
	direct := httptest.NewServer(m)
	b.Cleanup(direct.Close)
	base := direct.URL + "/v1"
	if kind != upstream.KindOpenAI {
		base = direct.URL
	}
	pool := upstream.NewPool(upstream.PoolOptions{Log: discardLog()})
	pool.SetKeys([]upstream.Key{{ID: 1, Name: "bench", Provider: kind, BaseURL: base, Secret: benchProviderKey, Weight: 1}})
	e.pipe.Providers, e.deps.Models = pool, pool.Models
	e.rebuild()
	sluice := httptest.NewServer(e.h)
	b.Cleanup(sluice.Close)
	target, _ := url.Parse(direct.URL)
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) }, FlushInterval: -1}
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 100}
	proxy := httptest.NewServer(rp)
	b.Cleanup(proxy.Close)
	return &dialectRig{sluice: sluice, direct: direct, proxy: proxy, token: token}
}

// post sends body to url with the credentials the path's dialect reads,
// and returns the answer's status after reading it whole.
func post(b *testing.B, client *http.Client, u, body, bearer string, header http.Header) *http.Response {
	req, err := http.NewRequest("POST", u, strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header = header.Clone()
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	return resp
}

// nativeHeader is how a provider kind reads its key.
func nativeHeader(kind string) (http.Header, string) {
	switch kind {
	case upstream.KindGemini:
		return http.Header{"X-Goog-Api-Key": {benchProviderKey}}, ""
	case upstream.KindAnthropic:
		return http.Header{"X-Api-Key": {benchProviderKey}, "Anthropic-Version": {"2023-06-01"}}, ""
	}
	return http.Header{}, benchProviderKey
}

func BenchmarkDialects(b *testing.B) {
	for _, tc := range dialectCases {
		rig := newDialectRig(b, tc.provider, mock.New(mock.Config{Keys: map[string]float64{benchProviderKey: 0}}))
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
		nativePath, nativeBody := cmpOr(tc.nativePath, "/v1"+tc.path), cmpOr(tc.nativeBody, tc.body)
		header, bearer := nativeHeader(tc.provider)
		for _, target := range []struct {
			name, url, body, bearer string
			header                  http.Header
		}{
			{"direct", rig.direct.URL + nativePath, nativeBody, bearer, header},
			{"proxy", rig.proxy.URL + nativePath, nativeBody, bearer, header},
			{"sluice", rig.sluice.URL + "/v1" + tc.path, tc.body, rig.token, http.Header{}},
		} {
			b.Run(tc.name+"/"+target.name, func(b *testing.B) {
				// Warm up before the timer starts: tokenizer tables, caches
				// and connections are loaded once per process, not per request.
				for range 20 {
					resp := post(b, client, target.url, target.body, target.bearer, target.header)
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				b.ReportAllocs()
				for b.Loop() {
					resp := post(b, client, target.url, target.body, target.bearer, target.header)
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Fatalf("%s: %d", target.url, resp.StatusCode)
					}
				}
			})
		}
	}
}

// BenchmarkFirstChunk is the time to a stream's first content through
// Sluice and through a bare proxy, from a provider that pauses between
// words: what a streaming client waits before it sees anything.
func BenchmarkFirstChunk(b *testing.B) {
	for _, tc := range dialectCases {
		if tc.path == "/embeddings" {
			continue // not streamed
		}
		m := mock.New(mock.Config{Keys: map[string]float64{benchProviderKey: 0}, ChunkDelay: 2 * time.Millisecond})
		rig := newDialectRig(b, tc.provider, m)
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
		stream := func(body string) string { return strings.Replace(body, "{", `{"stream":true,`, 1) }
		nativePath := cmpOr(tc.nativePath, "/v1"+tc.path)
		if tc.provider == upstream.KindGemini {
			nativePath = strings.Replace(nativePath, ":generateContent", ":streamGenerateContent?alt=sse", 1)
		}
		nativeBody := cmpOr(tc.nativeBody, tc.body)
		if tc.provider != upstream.KindGemini {
			nativeBody = stream(nativeBody)
		}
		header, bearer := nativeHeader(tc.provider)
		for _, target := range []struct {
			name, url, body, bearer string
			header                  http.Header
		}{
			{"proxy", rig.proxy.URL + nativePath, nativeBody, bearer, header},
			{"sluice", rig.sluice.URL + "/v1" + tc.path, stream(tc.body), rig.token, http.Header{}},
		} {
			b.Run(tc.name+"/"+target.name, func(b *testing.B) {
				for range 20 { // warm up, as BenchmarkDialects does
					resp := post(b, client, target.url, target.body, target.bearer, target.header)
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				var firsts []time.Duration
				for b.Loop() {
					start := time.Now()
					resp := post(b, client, target.url, target.body, target.bearer, target.header)
					if resp.StatusCode != http.StatusOK {
						b.Fatalf("%s: %d", target.url, resp.StatusCode)
					}
					r := bufio.NewReader(resp.Body)
					for {
						line, err := r.ReadString('\n')
						if err != nil {
							b.Fatalf("%s: the stream ended before any text: %v", target.url, err)
						}
						if strings.Contains(line, "mock") { // the first word of the mock's reply
							break
						}
					}
					firsts = append(firsts, time.Since(start))
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				slices.Sort(firsts)
				b.ReportMetric(float64(firsts[len(firsts)/2].Microseconds()), "p50-first-µs")
				b.ReportMetric(float64(firsts[len(firsts)*99/100].Microseconds()), "p99-first-µs")
			})
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
