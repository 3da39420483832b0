package handlers

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/upstream"
	"github.com/sluicehq/sluice/upstream/mock"
)

// The translation matrix: every dialect a client speaks (dialect_matrix_
// dialects_test.go) to every kind of provider key, through the router and
// a real mock provider of that kind, whole and streamed: text, a cut
// answer, a tool call and its result, an image, usage and its cost, a
// prompt cache where the provider reports one, and the provider's
// refusal, each in the client's dialect.

// matrixProvider is a kind of provider key and what the mock answers as it.
type matrixProvider struct {
	kind, model string
	base        func(mockURL string) string
	// afterTool is the mock's answer once the last turn is the tool's result.
	afterTool func(ask, result string) string
	// cache: the provider reports prompt cache reads and writes.
	cache bool
}

// mockReply is the mock's answer to a user's text (upstream/mock chat.go,
// anthropic.go, gemini.go): "mock reply to: " and its first 40 runes.
func mockReply(text string) string { return "mock reply to: " + first40(text) }

func first40(s string) string {
	if r := []rune(s); len(r) > 40 {
		return string(r[:40])
	}
	return s
}

// mockArgs are the arguments of the mock's tool call when the user said
// ask, as every kind of provider it speaks calls.
func mockArgs(ask string) map[string]any { return map[string]any{"text": first40(ask)} }

func replyToTheAsk(ask, _ string) string { return mockReply(ask) }

var matrixProviders = []matrixProvider{
	{kind: upstream.KindOpenAI, model: "gpt-4o-mini", base: func(u string) string { return u + "/v1" }, afterTool: replyToTheAsk},
	{kind: upstream.KindAzure, model: "gpt-4o",
		base: func(u string) string { return u + "/openai/deployments/gpt-4o?api-version=2024-10-21" }, afterTool: replyToTheAsk},
	{kind: upstream.KindAnthropic, model: "claude-sonnet-4-5", base: func(u string) string { return u },
		afterTool: func(_, result string) string { return "mock reply to tool result: " + first40(result) }, cache: true},
	{kind: upstream.KindGemini, model: "gemini-2.5-flash", base: func(u string) string { return u }, afterTool: replyToTheAsk},
}

// matrixRefusal in a request makes the mock refuse it: a 400 by its
// X-Mock-Status hook, which the router does not pass on.
const matrixRefusal = "please refuse this"

// refusing puts the X-Mock-Status hook on the requests that ask for it.
func refusing(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(matrixRefusal)) {
			r.Header.Set("X-Mock-Status", "400")
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
	})
}

// matrixPrices are every model's in the matrix, each part distinct, so
// a token billed as the wrong kind shows in the cost.
var matrixPrices = map[string]string{"input_per_mtok": "2", "output_per_mtok": "8", "cached_input_per_mtok": "0.5",
	"cache_creation_per_mtok": "2.5"}

func matrixPrice(t *testing.T) models.ModelPrice {
	t.Helper()
	parse := func(field string) money.Price {
		v, err := money.ParsePrice(matrixPrices[field])
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	creation := parse("cache_creation_per_mtok")
	return models.ModelPrice{InputPerMTok: parse("input_per_mtok"), OutputPerMTok: parse("output_per_mtok"),
		CachedInputPerMTok: parse("cached_input_per_mtok"), CacheCreationPerMTok: &creation}
}

// matrixRig is the router with one key of each kind on one mock.
type matrixRig struct {
	*genEnv
	db    *models.DB
	key   string
	price models.ModelPrice
}

func newMatrixRig(t *testing.T, db *models.DB) *matrixRig {
	// No case here waits out the pool's budget, and the 300 ms of
	// newGenEnv was spent by one answer of a busy CI host under -race:
	// the request fell back to the local model and the test read its text.
	g := newGenEnvWithBudget(t, db, 10*time.Second)
	m := mock.New(mock.Config{Keys: map[string]float64{"sk-matrix-key": 0}, StreamChunks: 3})
	srv := httptest.NewServer(refusing(m))
	t.Cleanup(srv.Close)
	admin := g.login("admin@example.com", "admin-password")
	put := func(path, body string) {
		if w := g.do(request{method: "PUT", path: path, bearer: admin, body: body}); w.Code != 200 {
			t.Fatalf("PUT %s: %d %s", path, w.Code, w.Body.String())
		}
	}
	put("/api/admin/tiers/free", `{"tokens_per_minute":0,"overage":"bill","capacity":1000,"refill_per_sec":1000,"refill_floor":1}`)
	for _, p := range matrixProviders {
		body, _ := json.Marshal(map[string]any{"name": p.kind, "provider": p.kind, "base_url": p.base(srv.URL),
			"api_key": "sk-matrix-key", "models": []string{p.model}})
		if w := g.do(request{method: "POST", path: "/api/admin/upstreams", bearer: admin, body: string(body)}); w.Code != 201 {
			t.Fatalf("add the %s key: %d %s", p.kind, w.Code, w.Body.String())
		}
		put("/api/admin/prices/"+p.model, mustJSON(matrixPrices))
	}
	key, _ := g.apiToken(g.signup("a@example.com", "A"))
	return &matrixRig{genEnv: g, db: db, key: key, price: matrixPrice(t)}
}

// send asks a in dialect d for model and reads the answer, which must be a 200.
func (r *matrixRig) send(t *testing.T, d matrixDialect, model string, a matrixAsk) (*httptest.ResponseRecorder, matrixAnswer) {
	t.Helper()
	w := r.do(request{method: "POST", path: d.path, body: d.ask(model, a), header: d.auth(r.key)})
	if w.Code != 200 {
		t.Fatalf("%s: %d %s", d.name, w.Code, w.Body.String())
	}
	if got := strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream"); got != a.stream {
		t.Fatalf("stream %v answered as %s", a.stream, w.Header().Get("Content-Type"))
	}
	return w, d.read(t, w.Body.String(), a.stream)
}

// billed checks that the answer's usage is what its usage event records,
// and that the event costs what metering.Cost says at the price set.
func (r *matrixRig) billed(t *testing.T, d matrixDialect, model string, w *httptest.ResponseRecorder, got matrixAnswer) {
	t.Helper()
	ev := usageOf(t, r.db, w)
	want := matrixUsage{input: ev.PromptTokens, output: ev.CompletionTokens, cacheRead: ev.CachedTokens, cacheWrite: ev.CacheCreationTokens}
	if !d.reportsCacheWrites {
		want.cacheWrite = 0
	}
	if got.usage != want || ev.PromptTokens == 0 || ev.CompletionTokens == 0 {
		t.Fatalf("the answer's usage %+v, the event's %+v", got.usage, ev)
	}
	if cost := metering.Cost(r.price, billedUsage(ev)); ev.Cost != cost || cost == 0 {
		t.Fatalf("the event cost %s, want %s", ev.Cost, cost)
	}
	if ev.Dialect != d.event || ev.Model != model || ev.Status != 200 || ev.UpstreamKeyID == nil {
		t.Fatalf("event %+v, want dialect %s, model %s, a key's 200", ev, d.event, model)
	}
}

// pngDataURL is a small image as a data: URL.
func pngDataURL(t *testing.T) string {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 100, 75))
	for x := range 100 {
		img.Set(x, x%75, color.RGBA{R: 200, A: 255})
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes())
}

// TestEveryDialectToEveryProvider: each of the 12 pairs of dialect and
// provider kind, whole and streamed, answers the mock's text with the
// dialect's stop reason; a small bound cuts it (length, incomplete,
// max_tokens); an offered tool is called by name with the mock's
// arguments and its result sent back gets the mock's text; an image
// reaches the provider; every answer's usage is its usage event's, costed
// by metering.Cost; the provider's refusal is the client's 400 in its
// dialect's error shape. Where the dialect can mark a prompt cacheable
// and the provider reports its cache (chat and messages to Anthropic),
// the write and then the read are billed at their prices.
func TestEveryDialectToEveryProvider(t *testing.T) {
	r := newMatrixRig(t, testdb.SQLite(t))
	img := pngDataURL(t)
	const ask, result = "tell me about the rivers of Europe", "the Danube and the Rhine"
	for _, d := range matrixDialects {
		for _, p := range matrixProviders {
			t.Run(d.name+"/"+p.kind, func(t *testing.T) {
				for _, stream := range []bool{false, true} {
					mode := map[bool]string{false: "whole", true: "streamed"}[stream]
					t.Run("text/"+mode, func(t *testing.T) {
						w, got := r.send(t, d, p.model, matrixAsk{text: ask, stream: stream})
						if got.text != mockReply(ask) || got.stop != d.stops.text || len(got.calls) != 0 {
							t.Fatalf("answered %+v, want %q and %s", got, mockReply(ask), d.stops.text)
						}
						r.billed(t, d, p.model, w, got)
					})
					t.Run("cut/"+mode, func(t *testing.T) {
						const bound = 3
						w, got := r.send(t, d, p.model, matrixAsk{text: ask, maxTokens: bound, stream: stream})
						if got.text == "" || !strings.HasPrefix(mockReply(ask), got.text) || got.text == mockReply(ask) ||
							got.stop != d.stops.cut || got.usage.output != bound {
							t.Fatalf("answered %+v, want the start of %q, %d tokens, and %s", got, mockReply(ask), bound, d.stops.cut)
						}
						r.billed(t, d, p.model, w, got)
					})
					t.Run("tools/"+mode, func(t *testing.T) {
						w, got := r.send(t, d, p.model, matrixAsk{text: ask, tool: true, stream: stream})
						if got.stop != d.stops.tool || got.text != "" || len(got.calls) != 1 || got.calls[0].name != matrixTool || got.calls[0].id == "" {
							t.Fatalf("answered %+v, want one call of %s and %s", got, matrixTool, d.stops.tool)
						}
						var args map[string]any
						if err := json.Unmarshal([]byte(got.calls[0].args), &args); err != nil || !reflect.DeepEqual(args, mockArgs(ask)) {
							t.Fatalf("the call's arguments %q (%v), want %v", got.calls[0].args, err, mockArgs(ask))
						}
						r.billed(t, d, p.model, w, got)

						call := got.calls[0]
						w, got = r.send(t, d, p.model, matrixAsk{text: ask, tool: true, call: &call, result: result, stream: stream})
						if want := p.afterTool(ask, result); got.text != want || got.stop != d.stops.text || len(got.calls) != 0 {
							t.Fatalf("after the tool's result: %+v, want %q and %s", got, want, d.stops.text)
						}
						r.billed(t, d, p.model, w, got)
					})
					// Every provider's format carries a data: URL image;
					// it reached the provider if the prompt grew by it.
					t.Run("image/"+mode, func(t *testing.T) {
						_, without := r.send(t, d, p.model, matrixAsk{text: ask, stream: stream})
						w, got := r.send(t, d, p.model, matrixAsk{text: ask, image: img, stream: stream})
						if got.text != mockReply(ask) || got.stop != d.stops.text || got.usage.input <= without.usage.input {
							t.Fatalf("answered %+v, want %q from a prompt over the %d tokens of the text alone", got, mockReply(ask), without.usage.input)
						}
						r.billed(t, d, p.model, w, got)
					})
					t.Run("refused/"+mode, func(t *testing.T) {
						w := r.do(request{method: "POST", path: d.path, body: d.ask(p.model, matrixAsk{text: matrixRefusal, stream: stream}),
							header: d.auth(r.key)})
						d.refused(t, w, "forced by X-Mock-Status")
					})
				}
				if !p.cache || !d.carriesCacheControl {
					return
				}
				// The same cacheable prompt twice: written to the
				// provider's cache, then read from it, each billed at its
				// price.
				t.Run("cache", func(t *testing.T) {
					system := "You are a careful assistant who knows every river of the world, asked in " + d.name + "."
					w, write := r.send(t, d, p.model, matrixAsk{text: ask, system: system, stream: false})
					if write.text != mockReply(ask) || write.stop != d.stops.text {
						t.Fatalf("answered %+v, want %q", write, mockReply(ask))
					}
					r.billed(t, d, p.model, w, write)
					written := usageOf(t, r.db, w)
					w, read := r.send(t, d, p.model, matrixAsk{text: ask, system: system, stream: true})
					r.billed(t, d, p.model, w, read)
					if ev := usageOf(t, r.db, w); written.CacheCreationTokens == 0 || written.CachedTokens != 0 ||
						ev.CachedTokens != written.CacheCreationTokens || ev.CacheCreationTokens != 0 || ev.PromptTokens != written.PromptTokens {
						t.Fatalf("written %+v, then read %+v", written, ev)
					}
				})
			})
		}
	}
}
