package handlers

import (
	"context"
	"encoding/json"
	"math"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicehq/sluice/chat/family"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
	"github.com/sluicehq/sluice/upstream/mock"
)

func embedWith(e *env, key, body string) *requestResult {
	w := e.do(request{method: "POST", path: "/v1/embeddings", bearer: key, body: body})
	return &requestResult{w.Code, w.Header(), w.Body.String()}
}

// embeddingModel is the provider model of these tests: cl100k_base, as
// OpenAI's.
const embeddingModel = "text-embedding-3-small"

// embeddingsEnv is an organization on a tier limited by money alone (no
// tokens per minute, a large request bucket), the mock provider serving
// embeddingModel, priced $1 a million input tokens.
func embeddingsEnv(t *testing.T, db *models.DB) (g *genEnv, owner, key string) {
	g = newGenEnv(t, db)
	admin := g.login("admin@example.com", "admin-password")
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/api/admin/upstreams", `{"name":"embed","base_url":"` + g.mockURL + `","api_key":"sk-mock-key","models":["` + embeddingModel + `"]}`},
		{"PUT", "/api/admin/tiers/free", `{"tokens_per_minute":0,"overage":"bill","capacity":1000,"refill_per_sec":1000,"refill_floor":1}`},
		{"PUT", "/api/admin/prices/" + embeddingModel, `{"input_per_mtok":"1","output_per_mtok":"10"}`},
	} {
		if w := g.do(request{method: c.method, path: c.path, bearer: admin, body: c.body}); w.Code/100 != 2 {
			t.Fatalf("%s %s: %d %s", c.method, c.path, w.Code, w.Body.String())
		}
	}
	owner = g.signup("a@example.com", "A")
	key, _ = g.apiToken(owner)
	return g, owner, key
}

// A hard budget worth N embeddings requests admits exactly N of 3N sent
// at once, each reserving its input tokens at the input price (nothing
// for a completion), and is not overspent; the refusals say what the
// request would cost.
func TestAHardBudgetHoldsForEmbeddings(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		g, owner, key := embeddingsEnv(t, db)
		text := strings.Repeat(" river", 100)
		tokens := int64(family.Of(embeddingModel).Counter.Count([]byte(text)))
		price, _ := money.ParsePrice("1")
		const n = 5
		setBudget(t, g, owner, price.Cost(n*tokens).String())
		body := `{"model":"` + embeddingModel + `","input":"` + text + `"}`
		results := make([]*requestResult, 3*n)
		var wg sync.WaitGroup
		for i := range results {
			wg.Go(func() { results[i] = embedWith(g.env, key, body) })
		}
		wg.Wait()
		admitted := 0
		for _, r := range results {
			switch {
			case r.Code == 200:
				admitted++
			case r.Code != 429 || !strings.Contains(r.Body, `"code":"insufficient_quota"`) ||
				!strings.Contains(r.Body, "this request may cost up to $"+price.Cost(tokens).String()+" ("+strconv.FormatInt(tokens, 10)+" input tokens)"):
				t.Fatalf("refusal %d %s", r.Code, r.Body)
			}
		}
		if admitted != n {
			t.Errorf("%d of %d admitted, want the %d the budget holds", admitted, 3*n, n)
		}
		if s := spent(t, g, owner); s > price.Cost(n*tokens) || s == 0 {
			t.Fatalf("spent $%s of a $%s hard budget", s, price.Cost(n*tokens))
		}
	})
}

// The tokens-per-minute bucket is charged the inputs' tokens, not a
// completion bound: what is left after a request is the limit less its
// input, and a request whose input no longer fits is refused for tokens.
func TestEmbeddingsSpendTheTokensBucketByTheirInput(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	admin := e.login("admin@example.com", "admin-password")
	if w := e.do(request{method: "PUT", path: "/api/admin/tiers/free", bearer: admin, body: `{"tokens_per_minute":1000}`}); w.Code != 200 {
		t.Fatalf("set tpm: %d %s", w.Code, w.Body.String())
	}
	key, _ := e.apiToken(e.signup("a@example.com", "A"))
	text := strings.Repeat("word ", 600)
	tokens := int64(family.Of("sluice-local").Counter.Count([]byte(text)))
	body := `{"model":"sluice-local","input":"` + text + `"}`
	r := embedWith(e, key, body)
	if r.Code != 200 || header(t, r, "x-ratelimit-limit-tokens") != 1000 || header(t, r, "x-ratelimit-remaining-tokens") != 1000-tokens {
		t.Fatalf("%d remaining %s, want %d: %.200s", r.Code, r.H.Get("x-ratelimit-remaining-tokens"), 1000-tokens, r.Body)
	}
	r = embedWith(e, key, body)
	if r.Code != 429 || !strings.Contains(r.Body, `"code":"tokens_rate_limit_exceeded"`) || !strings.Contains(r.Body, "rate limit reached for tokens per minute on the free tier") {
		t.Fatalf("second: %d %s", r.Code, r.Body)
	}
	if r := embedWith(e, key, `{"model":"sluice-local","input":"a few words"}`); r.Code != 200 {
		t.Fatalf("a small one still fits: %d %s", r.Code, r.Body)
	}
	// An input larger than the whole minute's tokens can never fit: a 400
	// naming the input, not max_tokens.
	huge := "[" + strings.Repeat("7,", 1399) + "7]"
	r = embedWith(e, key, `{"model":"sluice-local","input":`+huge+`}`)
	if r.Code != 400 || !strings.Contains(r.Body, `"param":"input"`) ||
		!strings.Contains(r.Body, "this request's input is 1400 tokens, more than the free tier's 1000 tokens per minute") {
		t.Fatalf("oversized: %d %s", r.Code, r.Body)
	}
}

// A provider's answer passes through as it came (base64 and all) and is
// billed by its usage at the input price, as an embeddings event.
func TestEmbeddingsThroughAProvider(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		g, owner, key := embeddingsEnv(t, db)
		r := embedWith(g.env, key, `{"model":"`+embeddingModel+`","input":["the river runs","to the sea"],"encoding_format":"base64","dimensions":4}`)
		var answer struct {
			Data []struct {
				Embedding json.RawMessage `json:"embedding"`
			} `json:"data"`
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(r.Body), &answer); err != nil || r.Code != 200 || len(answer.Data) != 2 || answer.Data[0].Embedding[0] != '"' ||
			r.H.Get("x-sluice-upstream-attempts") != "1" {
			t.Fatalf("%d %s", r.Code, r.Body)
		}
		billed := mock.Tokens("the river runs") + mock.Tokens("to the sea")
		if answer.Usage.PromptTokens != billed {
			t.Fatalf("the mock billed %d, want %d", answer.Usage.PromptTokens, billed)
		}
		var events []models.UsageEvent
		db.Gorm.Find(&events)
		price, _ := money.ParsePrice("1")
		if len(events) != 1 || events[0].Dialect != "embeddings" || events[0].Model != embeddingModel || events[0].PromptTokens != billed ||
			events[0].CompletionTokens != 0 || events[0].Cost != price.Cost(int64(billed)) || events[0].Status != 200 {
			t.Fatalf("events %+v", events)
		}
		// The organization's spending is the event's cost: what its invoice sums.
		setBudget(t, g, owner, "1.00")
		if s := spent(t, g, owner); s != price.Cost(int64(billed)) {
			t.Fatalf("spent $%s, want $%s", s, price.Cost(int64(billed)))
		}
	})
}

// Bad input is a 400 in OpenAI's error shape naming the field, and still
// costs a request; a model nobody serves is a 404.
func TestEmbeddingsRefuseBadInput(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	key, _ := e.apiToken(e.signup("a@example.com", "A"))
	for _, tc := range []struct {
		body                 string
		status               int
		code, param, message string
	}{
		{`{"model":"sluice-local","input":["a",""]}`, 400, "invalid_input", "input[1]", "input[1] must not be an empty string"},
		{`{"model":"sluice-local","input":"a","encoding_format":"hex"}`, 400, "invalid_encoding_format", "encoding_format",
			"'hex' is not one of ['float', 'base64'] - 'encoding_format'"},
		{`{"model":"sluice-local","input":[[1,2.5]]}`, 400, "invalid_token", "input[0][1]", "input[0][1] must be a token id (an integer)"},
		{`{"model":"sluice-local"}`, 400, "missing_input", "input", "you must provide an input parameter"},
		{`{"model":"text-embedding-3-small","input":"a"}`, 404, "model_not_found", "model", "the model 'text-embedding-3-small' does not exist"},
	} {
		before := embedWith(e, key, `{"model":"sluice-local","input":"ok"}`)
		r := embedWith(e, key, tc.body)
		var got struct {
			Error struct{ Type, Code, Param, Message string }
		}
		_ = json.Unmarshal([]byte(r.Body), &got)
		if r.Code != tc.status || got.Error.Type != "invalid_request_error" || got.Error.Code != tc.code || got.Error.Param != tc.param ||
			!strings.HasPrefix(got.Error.Message, tc.message) {
			t.Errorf("%s: %d %s", tc.body, r.Code, r.Body)
		}
		if header(t, r, "x-ratelimit-remaining-requests") != header(t, before, "x-ratelimit-remaining-requests")-1 {
			t.Errorf("%s: a refused request cost no request", tc.body)
		}
	}
}

// The official Go SDK, unchanged but for its base URL and key, embeds
// through the real router: base64 (what the SDKs ask for) decodes to the
// same vectors as floats, unit length, of the size asked for, with usage.
func TestOpenAIGoSDKEmbeddings(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	key, _ := e.apiToken(e.signup("a@example.com", "A"))
	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close)
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey(key), option.WithMaxRetries(0))
	inputs := []string{"the river runs to the sea", "写一副关于平安的春联"}
	var want int64
	for _, in := range inputs {
		want += int64(family.Of("sluice-local").Counter.Count([]byte(in)))
	}
	if u := embedBothWays(t, client, "sluice-local", inputs, 64); u.PromptTokens != want || u.TotalTokens != want {
		t.Fatalf("usage %+v, want %d tokens", u, want)
	}
}

// embedBothWays embeds inputs with client in base64 (what the SDKs ask
// for) and in floats, checks each answer (model, one unit vector of dims
// per input, in order) and that both carry the same float32s, and returns
// the usage both report.
func embedBothWays(t *testing.T, client openai.Client, model string, inputs []string, dims int64) openai.CreateEmbeddingResponseUsage {
	t.Helper()
	vectors := map[openai.EmbeddingNewParamsEncodingFormat][][]float64{}
	var usage []openai.CreateEmbeddingResponseUsage
	for _, format := range []openai.EmbeddingNewParamsEncodingFormat{openai.EmbeddingNewParamsEncodingFormatBase64, openai.EmbeddingNewParamsEncodingFormatFloat} {
		resp, err := client.Embeddings.New(context.Background(), openai.EmbeddingNewParams{
			Model: model, Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: inputs}, EncodingFormat: format, Dimensions: openai.Int(dims),
		})
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if resp.Model != model || len(resp.Data) != len(inputs) {
			t.Fatalf("%s: model %q, %d vectors, want %q and %d", format, resp.Model, len(resp.Data), model, len(inputs))
		}
		for i, d := range resp.Data {
			var n float64
			for _, x := range d.Embedding {
				n += x * x
			}
			if d.Index != int64(i) || int64(len(d.Embedding)) != dims || math.Abs(math.Sqrt(n)-1) > 1e-5 {
				t.Fatalf("%s: vector %d: index %d, %d dimensions, length %v", format, i, d.Index, len(d.Embedding), math.Sqrt(n))
			}
			vectors[format] = append(vectors[format], d.Embedding)
		}
		usage = append(usage, resp.Usage)
	}
	// The same float32s: a float printed in JSON reads back as the nearest
	// float64 to its digits, the one in base64 as the float32 itself.
	asFloat32 := func(a, b []float64) bool {
		return slices.EqualFunc(a, b, func(x, y float64) bool { return float32(x) == float32(y) })
	}
	if !slices.EqualFunc(vectors[openai.EmbeddingNewParamsEncodingFormatBase64], vectors[openai.EmbeddingNewParamsEncodingFormatFloat], asFloat32) {
		t.Fatal("the base64 vectors are not the float ones")
	}
	if usage[0].PromptTokens != usage[1].PromptTokens || usage[0].TotalTokens != usage[1].TotalTokens {
		t.Fatalf("usage %+v in base64, %+v in floats", usage[0], usage[1])
	}
	return usage[0]
}

// The official Go SDK embeds through a Gemini key: one batchEmbedContents
// call, answered as OpenAI's list, base64 (what the SDK asks for) and
// floats the same float32s, of the dimensions asked for, with Sluice's
// count of the inputs as the usage (Gemini reports none), which is what
// is billed. Token arrays are refused by name.
func TestOpenAIGoSDKEmbeddingsThroughAGeminiKey(t *testing.T) {
	db := testdb.SQLite(t)
	g := newGenEnv(t, db)
	admin := g.login("admin@example.com", "admin-password")
	const model = "gemini-embedding-001"
	if w := g.do(request{method: "POST", path: "/api/admin/upstreams", bearer: admin, body: `{"name":"gemini","provider":"gemini","base_url":"` +
		strings.TrimSuffix(g.mockURL, "/v1") + `","api_key":"sk-mock-key","models":["` + model + `"]}`}); w.Code != 201 {
		t.Fatalf("add the Gemini key: %d %s", w.Code, w.Body.String())
	}
	key, _ := g.apiToken(g.signup("a@example.com", "A"))
	srv := httptest.NewServer(g.h)
	t.Cleanup(srv.Close)
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey(key), option.WithMaxRetries(0))
	inputs := []string{"the river runs to the sea", "写一副关于平安的春联"}
	counted, err := g.deps.Pipeline.ParseEmbeddings([]byte(`{"model":"` + model + `","input":["` + strings.Join(inputs, `","`) + `"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if u := embedBothWays(t, client, model, inputs, 16); u.PromptTokens != counted.Prompt.Tokens || counted.Prompt.Tokens == 0 {
		t.Fatalf("usage %+v, want Sluice's count %d", u, counted.Prompt.Tokens)
	}
	var events []models.UsageEvent // recorded after the answer: wait for both
	for deadline := time.Now().Add(5 * time.Second); len(events) < 2 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		db.Gorm.Find(&events)
	}
	if len(events) != 2 || events[0].Model != model || int64(events[0].PromptTokens) != counted.Prompt.Tokens || events[0].Dialect != "embeddings" {
		t.Fatalf("usage events %+v, want two of %d prompt tokens", events, counted.Prompt.Tokens)
	}
	r := embedWith(g.env, key, `{"model":"`+model+`","input":[[1,2,3]]}`)
	if r.Code != 400 || !strings.Contains(r.Body, "token arrays are ids of OpenAI's tokenizer, which a Gemini model cannot read") || !strings.Contains(r.Body, `"param":"input"`) {
		t.Fatalf("token arrays to a Gemini key: %d %s", r.Code, r.Body)
	}
}
