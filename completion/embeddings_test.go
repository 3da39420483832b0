package completion_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/chat/family"
	"github.com/sluicehq/sluice/completion"
	"github.com/sluicehq/sluice/upstream"
)

// servesEmbeddings serves gpt-test (a family Sluice has no tokenizer for)
// and text-embedding-3-small (cl100k_base).
type servesEmbeddings struct{ servesGPT }

func (servesEmbeddings) Serves(model string) bool {
	return model == "gpt-test" || model == "text-embedding-3-small"
}

// tokenList is a JSON array of n token ids.
func tokenList(n int) string { return "[" + strings.TrimSuffix(strings.Repeat("1,", n), ",") + "]" }

// Every kind of bad embeddings body is a 400 (a 404 for a model not
// served) naming the field and saying what is wrong.
func TestParseEmbeddingsRefusesBadInput(t *testing.T) {
	p := completion.New(completion.Deps{Providers: servesEmbeddings{}})
	const m = `"model":"text-embedding-3-small",`
	many := `["a"` + strings.Repeat(`,"a"`, completion.MaxEmbeddingInputs) + `]`
	long := strings.Repeat(" word", 9000) // a token each in cl100k_base
	var overall []string
	for range 40 {
		overall = append(overall, tokenList(8000))
	}
	for _, tc := range []struct {
		name, body    string
		code          apperr.Code
		reason, param string
		message       string
	}{
		{"not an object", `["a"]`, apperr.Invalid, "invalid_json", "", "the body must be an object"},
		{"no model", `{"input":"a"}`, apperr.Invalid, "missing_model", "model", "you must provide a model parameter"},
		{"a model not served", `{"model":"nope","input":"a"}`, apperr.NotFound, "model_not_found", "model", "the model 'nope' does not exist"},
		{"no input", `{` + m + `"user":"u"}`, apperr.Invalid, "missing_input", "input", "you must provide an input parameter"},
		{"null input", `{` + m + `"input":null}`, apperr.Invalid, "missing_input", "input", "you must provide an input parameter"},
		{"a number", `{` + m + `"input":5}`, apperr.Invalid, "invalid_input", "input", "input must be a string, an array of strings, an array of token ids"},
		{"an object", `{` + m + `"input":{"text":"a"}}`, apperr.Invalid, "invalid_input", "input", "input must be a string"},
		{"an array of nulls", `{` + m + `"input":[null]}`, apperr.Invalid, "invalid_input", "input", "input must be a string"},
		{"an empty string", `{` + m + `"input":""}`, apperr.Invalid, "invalid_input", "input", "input must not be an empty string"},
		{"an empty array", `{` + m + `"input":[]}`, apperr.Invalid, "invalid_input", "input", "input must not be empty: send 1 to 2048 inputs"},
		{"an empty string in a list", `{` + m + `"input":["a",""]}`, apperr.Invalid, "invalid_input", "input[1]", "input[1] must not be an empty string"},
		{"too many inputs", `{` + m + `"input":` + many + `}`, apperr.Invalid, "too_many_inputs", "input", "input holds at most 2048 inputs"},
		{"a string and a token", `{` + m + `"input":["a",1]}`, apperr.Invalid, "invalid_input", "input[1]", "input[1] must be a string, as input[0] is"},
		{"a token and a string", `{` + m + `"input":[1,"a"]}`, apperr.Invalid, "invalid_input", "input[1]", "input[1] must be a token id (an integer), as input[0] is"},
		{"an empty token array", `{` + m + `"input":[[1],[]]}`, apperr.Invalid, "invalid_input", "input[1]", "input[1] must not be an empty array of tokens"},
		{"a fraction", `{` + m + `"input":[1.5]}`, apperr.Invalid, "invalid_token", "input[0]", "input[0] must be a token id (an integer)"},
		{"an exponent", `{` + m + `"input":[[1,2e3]]}`, apperr.Invalid, "invalid_token", "input[0][1]", "input[0][1] must be a token id (an integer)"},
		{"a string among tokens", `{` + m + `"input":[[1,"a"]]}`, apperr.Invalid, "invalid_token", "input[0][1]", "input[0][1] must be a token id (an integer)"},
		{"a nested array", `{` + m + `"input":[[[1]]]}`, apperr.Invalid, "invalid_token", "input[0][0]", "input[0][0] must be a token id"},
		{"past the vocabulary", `{` + m + `"input":[5,100277]}`, apperr.Invalid, "invalid_token", "input[1]",
			"input[1] is 100277, not a token id of the model's tokenizer (cl100k_base): ids are from 0 to 100276"},
		{"negative", `{` + m + `"input":[[5],[7,-1]]}`, apperr.Invalid, "invalid_token", "input[1][1]", "input[1][1] is -1, not a token id"},
		{"past 32 bits, no tokenizer known", `{"model":"gpt-test","input":[2147483648]}`, apperr.Invalid, "invalid_token", "input[0]",
			"input[0] is 2147483648, not a token id of a token id: ids are from 0 to 2147483647"},
		{"past 64 bits", `{"model":"gpt-test","input":[[99999999999999999999999]]}`, apperr.Invalid, "invalid_token", "input[0][0]", "ids are from 0 to 2147483647"},
		{"an unknown encoding", `{` + m + `"input":"a","encoding_format":"hex"}`, apperr.Invalid, "invalid_encoding_format", "encoding_format",
			"'hex' is not one of ['float', 'base64'] - 'encoding_format'"},
		{"an encoding that is no string", `{` + m + `"input":"a","encoding_format":1}`, apperr.Invalid, "invalid_json", "", "field 'encoding_format' must be a string"},
		{"no dimensions", `{` + m + `"input":"a","dimensions":0}`, apperr.Invalid, "invalid_dimensions", "dimensions", "dimensions must be a whole number of at least 1"},
		{"half a dimension", `{` + m + `"input":"a","dimensions":1.5}`, apperr.Invalid, "invalid_json", "", "field 'dimensions' must be an integer"},
		{"more dimensions than sluice-local has", `{"model":"sluice-local","input":"a","dimensions":3073}`, apperr.Invalid, "invalid_dimensions", "dimensions",
			"sluice-local's vectors have 1 to 3072 dimensions"},
		{"a user that is no string", `{` + m + `"input":"a","user":7}`, apperr.Invalid, "invalid_json", "", "field 'user' must be a string"},
		{"a name folded", `{` + m + `"input":"a","INPUT":["b"]}`, apperr.Invalid, "invalid_field_name", "INPUT", "send 'input', not 'INPUT'"},
		{"input twice", `{` + m + `"input":"a","input":"b"}`, apperr.Invalid, "duplicate_field", "input", "field 'input' is given twice"},
		{"a long text", `{` + m + `"input":"` + long + `"}`, apperr.Invalid, "context_length_exceeded", "input",
			"This model's maximum context length is 8192 tokens, however input has 9000 tokens"},
		{"a long text in a list", `{` + m + `"input":["a","` + long + `"]}`, apperr.Invalid, "context_length_exceeded", "input[1]",
			"however input[1] has 9000 tokens"},
		{"a long token list", `{` + m + `"input":` + tokenList(8193) + `}`, apperr.Invalid, "context_length_exceeded", "input", "however input has 8193 tokens"},
		{"a long token array", `{` + m + `"input":[[1],` + tokenList(8193) + `]}`, apperr.Invalid, "context_length_exceeded", "input[1]", "however input[1] has 8193 tokens"},
		{"too many tokens in all", `{` + m + `"input":[` + strings.Join(overall, ",") + `]}`, apperr.Invalid, "max_tokens_per_request", "input",
			"Requested 320000 tokens, max 300000 tokens per request"},
	} {
		_, err := p.ParseEmbeddings([]byte(tc.body))
		e := apperr.As(err)
		if err == nil || e.Code != tc.code || e.Reason != tc.reason || e.Param != tc.param || !strings.Contains(e.Message, tc.message) {
			t.Errorf("%s: %v %+v, want %s %s naming %q: %q", tc.name, err, e, tc.code, tc.reason, tc.param, tc.message)
		}
	}
}

// Each form of input is read and counted as the model's family counts
// it: texts with its tokenizer (cl100k_base for text-embedding-3), token
// arrays by their length.
func TestParseEmbeddingsCountsEachFormOfInput(t *testing.T) {
	p := completion.New(completion.Deps{Providers: servesEmbeddings{}})
	cl100k := family.Of("text-embedding-3-small").Counter
	count := func(s string) int64 { return int64(cl100k.Count([]byte(s))) }
	for _, tc := range []struct {
		input string
		want  int64
	}{
		{`"the river runs to the sea"`, count("the river runs to the sea")},
		{`"caf\u00e9 \"quoted\""`, count(`café "quoted"`)},
		{`["the river","runs to the sea"]`, count("the river") + count("runs to the sea")},
		{`[1, 2, 3]`, 3},
		{`[[1,2],[3],[100276]]`, 4},
	} {
		body := `{"model":"text-embedding-3-small","input":` + tc.input + `,"encoding_format":"base64","dimensions":64,"user":"u-1"}`
		req, err := p.ParseEmbeddings([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", tc.input, err)
		}
		if req.Prompt.Tokens != tc.want || req.Endpoint != upstream.Embeddings || req.Dialect != "embeddings" || string(req.Body) != body {
			t.Errorf("%s: %d tokens, endpoint %q, dialect %q; want %d", tc.input, req.Prompt.Tokens, req.Endpoint, req.Dialect, tc.want)
		}
	}
	// A chat body is not an embeddings body, nor the other way round.
	if _, err := p.ParseEmbeddings([]byte(`{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]}`)); apperr.As(err).Reason != "missing_input" {
		t.Errorf("a chat body as embeddings: %v", err)
	}
	if _, err := p.Parse([]byte(`{"model":"gpt-test","input":"hi"}`)); apperr.As(err).Reason != "invalid_messages" {
		t.Errorf("an embeddings body as chat: %v", err)
	}
}

// embedded is an embeddings answer as a client reads it.
type embedded struct {
	Object string `json:"object"`
	Model  string `json:"model"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

// vectors reads an answer's vectors, floats or base64.
func (e embedded) vectors(t *testing.T) [][]float32 {
	t.Helper()
	var out [][]float32
	for _, d := range e.Data {
		var v []float32
		if d.Embedding[0] == '"' {
			var s string
			_ = json.Unmarshal(d.Embedding, &s)
			raw, err := base64.StdEncoding.DecodeString(s)
			if err != nil || len(raw)%4 != 0 {
				t.Fatalf("base64 %q: %v", s, err)
			}
			for i := 0; i < len(raw); i += 4 {
				v = append(v, math.Float32frombits(binary.LittleEndian.Uint32(raw[i:])))
			}
		} else if err := json.Unmarshal(d.Embedding, &v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

func (r *rig) embed(body string) (completion.Served, *sink, error) {
	r.t.Helper()
	req, err := r.p.ParseEmbeddings([]byte(body))
	if err != nil {
		r.t.Fatalf("parse %s: %v", body, err)
	}
	req.ID = "req_embeddings"
	s := newSink()
	out, err := r.p.Complete(context.Background(), r.caller, &req, s)
	return out, s, err
}

// sluice-local answers in OpenAI's shape: a unit vector per input, in
// order, of the size asked for, the same floats in base64 as in JSON,
// usage the inputs' count, metered as embeddings.
func TestLocalEmbeddingsThroughThePipeline(t *testing.T) {
	r := newRig(t)
	const inputs = `["the river runs to the sea","写一副春联"]`
	answers := map[string][][]float32{}
	for _, format := range []string{"float", "base64"} {
		out, s, err := r.embed(`{"model":"sluice-local","input":` + inputs + `,"dimensions":48,"encoding_format":"` + format + `"}`)
		if err != nil {
			t.Fatal(err)
		}
		var e embedded
		if err := json.Unmarshal([]byte(s.String()), &e); err != nil || s.status != 200 || e.Object != "list" || e.Model != "sluice-local" || len(e.Data) != 2 {
			t.Fatalf("%s: %d %s (%v)", format, s.status, s.String(), err)
		}
		want := family.Of("sluice-local").Counter.Count([]byte("the river runs to the sea")) + family.Of("sluice-local").Counter.Count([]byte("写一副春联"))
		if e.Usage.PromptTokens != want || e.Usage.TotalTokens != want || out.Usage.PromptTokens != want || out.Usage.CompletionTokens != 0 {
			t.Fatalf("%s: usage %+v, served %+v, want %d", format, e.Usage, out.Usage, want)
		}
		for i, v := range e.vectors(t) {
			var n float64
			for _, x := range v {
				n += float64(x) * float64(x)
			}
			if e.Data[i].Index != i || e.Data[i].Object != "embedding" || len(v) != 48 || math.Abs(math.Sqrt(n)-1) > 1e-5 {
				t.Fatalf("%s: vector %d: index %d, %d dimensions, length %v", format, i, e.Data[i].Index, len(v), math.Sqrt(n))
			}
		}
		answers[format] = e.vectors(t)
	}
	if !slices.EqualFunc(answers["float"], answers["base64"], slices.Equal) {
		t.Fatal("the base64 vectors are not the float ones")
	}
	evs := r.recorder.all()
	if len(evs) != 2 || evs[0].Dialect != "embeddings" || evs[0].CompletionTokens != 0 || evs[0].Model != "sluice-local" {
		t.Fatalf("events %+v", evs)
	}
	// Token ids embed too, and without dimensions the vector has 256.
	_, s, err := r.embed(`{"model":"sluice-local","input":[[1,2,3],[4]]}`)
	var e embedded
	if json.Unmarshal([]byte(s.String()), &e); err != nil || len(e.vectors(t)) != 2 || len(e.vectors(t)[0]) != 256 || e.Usage.PromptTokens != 4 {
		t.Fatalf("tokens: %v %s", err, s.String())
	}
}

// A provider gets the body as written at its embeddings endpoint, with
// the inputs' count as the key's estimate; the event is billed by its
// usage at the input price; without usage, by Sluice's own count.
func TestProviderEmbeddingsAreBilledByTheirUsage(t *testing.T) {
	r := newRig(t)
	price := r.price(providerModel, "2", "10", "1")
	const body = `{"model":"gpt-test","input":["alpha beta","gamma"],"encoding_format":"base64"}`
	answer := `{"object":"list","data":[{"object":"embedding","index":0,"embedding":"AAAAPwAAgL4="},{"object":"embedding","index":1,"embedding":"AACAPwAAAAA="}],` +
		`"model":"gpt-test","usage":{"prompt_tokens":7,"total_tokens":7}}`
	r.provider.answer = answerJSON(answer)
	out, s, err := r.embed(body)
	if err != nil || s.String() != answer || out.Usage.PromptTokens != 7 || out.Usage.CompletionTokens != 0 {
		t.Fatalf("%v %+v %s", err, out, s.String())
	}
	counted := int64(family.Of(providerModel).Counter.Count([]byte("alpha beta")) + family.Of(providerModel).Counter.Count([]byte("gamma")))
	call := r.provider.calls[0]
	if call.Endpoint != upstream.Embeddings || string(call.Body) != body || call.Estimate != counted || call.Stream {
		t.Fatalf("the provider was asked %+v", call)
	}
	ev := r.recorder.all()[0]
	// 7 tokens at $2 a million.
	if ev.Dialect != "embeddings" || ev.PromptTokens != 7 || ev.CompletionTokens != 0 || ev.Cost.String() != "0.000014" || ev.PriceID != price.ID {
		t.Fatalf("event %+v cost %s", ev, ev.Cost)
	}
	if st := r.provider.settlements(); len(st) != 1 || st[0].estimate != counted || st[0].actual != 7 {
		t.Fatalf("key settled %+v", st)
	}

	r.provider.answer = answerJSON(`{"object":"list","data":[],"model":"gpt-test"}`)
	if out, _, err := r.embed(body); err != nil || int64(out.Usage.PromptTokens) != counted {
		t.Fatalf("without usage: %v %+v, want %d prompt tokens", err, out.Usage, counted)
	}
}

// When no provider can take an embeddings request, sluice-local does not
// answer instead (its vectors are not the model's), whatever the tier
// says: a 503, nothing billed, the tokens reserved given back.
func TestEmbeddingsNeverFallBackToTheLocalModel(t *testing.T) {
	r := newRig(t)
	r.provider.answer = func(context.Context, upstream.Request) (*upstream.Response, error) {
		return nil, upstream.ErrUnavailable
	}
	_, s, err := r.embed(`{"model":"gpt-test","input":"alpha"}`)
	e := apperr.As(err)
	if e.Code != apperr.Unavailable || e.Reason != "upstream_unavailable" ||
		!strings.Contains(e.Message, "embeddings are never answered by another model") || s.header.Get("X-Sluice-Fallback") != "" || s.status != 0 {
		t.Fatalf("%v %+v %d", err, e, s.status)
	}
	if evs := r.recorder.all(); len(evs) != 0 {
		t.Fatalf("billed %+v", evs)
	}
	adj := r.limiter.settlements()
	if len(adj) != 1 || adj[0].key != r.caller.TPMKey || adj[0].delta != -int64(family.Of("gpt-test").Counter.Count([]byte("alpha"))) {
		t.Fatalf("tokens bucket settled %+v", adj)
	}
}

// FuzzParseEmbeddings feeds any body to the embeddings parser. It never
// panics; a refusal is the client's (a 4xx with a reason); an accepted
// body is one JSON object, kept byte for byte, within OpenAI's limits.
func FuzzParseEmbeddings(f *testing.F) {
	for _, seed := range []string{
		`{"model":"sluice-local","input":"写一副春联"}`,
		`{"model":"gpt-test","input":["a","b"],"encoding_format":"base64","dimensions":8,"user":"u"}`,
		`{"model":"text-embedding-3-small","input":[1,2,100276]}`,
		`{"model":"text-embedding-3-small","input":[[1],[2,3]]}`,
		`{"model":"gpt-test","input":[[1],"a"]}`, `{"model":"gpt-test","input":[-1]}`, `{"model":"gpt-test","input":["\ud800\xff"]}`,
		`{"model":"gpt-test","input":""}`, `{"model":"gpt-test","input":[]}`, `{} {}`, `{`, `[]`, ``,
	} {
		f.Add([]byte(seed))
	}
	p := completion.New(completion.Deps{Providers: servesEmbeddings{}})
	f.Fuzz(func(t *testing.T, body []byte) {
		in := slices.Clone(body)
		req, err := p.ParseEmbeddings(body)
		if !slices.Equal(body, in) {
			t.Fatal("ParseEmbeddings changed the body it was given")
		}
		if err != nil {
			e := apperr.As(err)
			if s := apperr.Status(e.Code); s < 400 || s > 499 || e.Reason == "" || e.Message == "" {
				t.Fatalf("refusal %+v (status %d) is not a client error with a reason and a message", e, s)
			}
			return
		}
		if !json.Valid(body) || !slices.Equal(req.Body, body) || req.Prompt.Tokens < 0 || req.Prompt.Tokens > completion.MaxEmbeddingRequestTokens {
			t.Fatalf("accepted %q: valid JSON %v, %d tokens", body, json.Valid(body), req.Prompt.Tokens)
		}
	})
}
