// Package family is what Sluice knows of a model family before it asks the
// model anything: the tokenizer its prompts are billed by, the longest
// answer it can give and the context it holds, the request field that
// bounds its answer, and what an image costs it. The gateway reserves an
// upper bound of what a provider will bill before it forwards a request,
// and this is what that bound is made of.
//
// The facts are OpenAI's published ones (tiktoken's model table, the
// model pages' output and context limits, the vision guide's image
// formulas) and, for other families, the providers' documented limits;
// where sources disagree, the choice that keeps the reservation an upper
// bound without making the provider refuse a request is taken, and said.
package family

import (
	"strings"

	"github.com/sluicehq/sluice/chat"
)

// Counter counts the tokens of a text as a model family's tokenizer does.
type Counter interface {
	Count(text []byte) int
}

// Family is one model family's facts.
type Family struct {
	// Name is the family's tokenizer ("o200k_base", "cl100k_base") or
	// "approximate" when Sluice knows none for it.
	Name string
	// Counter counts prompt text; Exact says it is the family's own
	// tokenizer, not chat's approximation.
	Counter Counter
	Exact   bool
	// Vocabulary is how many token ids the family's tokenizer has (ids 0
	// to Vocabulary-1), for requests that send token ids (embeddings);
	// 0 when Sluice does not know the tokenizer.
	Vocabulary int64
	// MaxOutput is the most completion tokens the model can produce (0:
	// unknown); Context the prompt and completion it holds together (0:
	// unknown).
	MaxOutput, Context int64
	// BoundField is the request field the family's API takes as the
	// completion bound: "max_completion_tokens" for OpenAI's own models
	// (its reasoning models refuse max_tokens), "max_tokens" for every
	// other (DeepSeek and Ollama ignore max_completion_tokens).
	BoundField string
	// ToolsPrompt is what the provider adds to a prompt that offers tools,
	// as a system prompt of its own: Anthropic's tool-use prompt, 346
	// tokens for Claude's models (313 when a tool is forced; the larger is
	// counted). 0 for families whose providers add none Sluice knows of.
	ToolsPrompt int64

	image imageCost
}

// claudeToolsPrompt is Anthropic's tool-use system prompt, in tokens, as
// its pricing page gives it for Claude's current models.
const claudeToolsPrompt = 346

// IgnoresCompletionField says model's API reads the completion bound
// from max_tokens only and ignores max_completion_tokens (DeepSeek's, and
// the open models Ollama serves): a bound sent in the latter alone does
// not hold it. Other models are not assumed to: OpenAI's reasoning
// models, under names Sluice cannot tell (an Azure deployment, a
// fine-tune), refuse max_tokens.
func IgnoresCompletionField(model string) bool {
	m := name(model)
	for _, p := range []string{"deepseek", "llama", "codellama", "qwen", "qwq", "mistral", "mixtral", "gemma", "phi", "glm", "yi-"} {
		if strings.HasPrefix(m, p) {
			return true
		}
	}
	return false
}

// claude says a model (its name as name gives it) is Anthropic's.
func claude(m string) bool { return strings.HasPrefix(m, "claude") }

// HourCacheWrites says model's provider may write a prompt to its cache
// for an hour, at twice the input price (Anthropic's ttl "1h"). Cheaper
// than Of, for the reservation of every priced request.
func HourCacheWrites(model string) bool { return claude(name(model)) }

// Of returns the family of a model name as a client sends it. A provider
// prefix ("openai/gpt-4o", as routers name models) is ignored; case is not
// significant.
func Of(model string) Family {
	m := name(model)
	f := Family{Name: "approximate", Counter: approximate{}, BoundField: "max_tokens", image: unknownImages}
	if enc := tokenizerOf(m); enc != nil {
		f.Name, f.Counter, f.Exact, f.Vocabulary = enc.name, enc.counter(), true, enc.vocab
	}
	if l, ok := lookup(limits, m); ok {
		f.MaxOutput, f.Context = l.output, l.context
	}
	if openAIOwn(m) {
		f.BoundField = "max_completion_tokens"
	}
	if claude(m) {
		f.ToolsPrompt = claudeToolsPrompt
	}
	if ic, ok := lookup(imageCosts, m); ok {
		f.image = ic
	}
	return f
}

// BoundFieldOf is Of(model).BoundField, without the rest of the family:
// a translation asks it of every request.
func BoundFieldOf(model string) string {
	if openAIOwn(name(model)) {
		return "max_completion_tokens"
	}
	return "max_tokens"
}

// name is a model name as the tables have it: lower case, without a
// router's provider prefix.
func name(model string) string {
	m := strings.ToLower(model)
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	return m
}

// openAIOwn says whether m is one of OpenAI's current models, which take
// max_completion_tokens (and, the reasoning ones, only that).
func openAIOwn(m string) bool {
	for _, p := range []string{"o1", "o3", "o4", "gpt-5", "gpt-4o", "gpt-4.1", "gpt-4.5", "chatgpt-4o", "computer-use", "ft:gpt-4o"} {
		if strings.HasPrefix(m, p) {
			return true
		}
	}
	return false
}

// prefixed is a table row matched by model name prefix.
type prefixed[T any] struct {
	prefix string
	v      T
}

// lookup finds the longest prefix of m in table.
func lookup[T any](table []prefixed[T], m string) (T, bool) {
	best, found := -1, false
	var v T
	for _, row := range table {
		if strings.HasPrefix(m, row.prefix) && len(row.prefix) > best {
			best, v, found = len(row.prefix), row.v, true
		}
	}
	return v, found
}

type limit struct{ output, context int64 }

// limits are the models' published output and context limits. Where
// sources disagree the smaller output is taken: Sluice sends it as the
// bound, and a bound above the model's own makes the provider refuse the
// request.
var limits = []prefixed[limit]{
	{"gpt-3.5-turbo", limit{4096, 16385}},
	{"gpt-35-turbo", limit{4096, 16385}},
	{"gpt-4", limit{8192, 8192}},
	{"gpt-4-32k", limit{8192, 32768}},
	{"gpt-4-turbo", limit{4096, 128000}},
	{"gpt-4-1106", limit{4096, 128000}},
	{"gpt-4-0125", limit{4096, 128000}},
	{"gpt-4o", limit{16384, 128000}},
	{"chatgpt-4o", limit{16384, 128000}},
	{"gpt-4.1", limit{32768, 1047576}},
	{"gpt-4.5", limit{16384, 128000}},
	{"gpt-5", limit{128000, 400000}},
	{"gpt-5-chat", limit{16384, 128000}},
	{"gpt-5.1-chat", limit{16384, 128000}},
	{"gpt-5-pro", limit{272000, 400000}},
	{"o1", limit{100000, 200000}},
	{"o1-mini", limit{65536, 128000}},
	{"o1-preview", limit{32768, 128000}},
	{"o3", limit{100000, 200000}},
	{"o4-mini", limit{100000, 200000}},
	{"gpt-oss", limit{32768, 131072}},
	{"claude-3-haiku", limit{4096, 200000}},
	{"claude-3-opus", limit{4096, 200000}},
	{"claude-3-5-haiku", limit{8192, 200000}},
	{"claude-3-5-sonnet", limit{8192, 200000}},
	{"claude-3-7-sonnet", limit{64000, 200000}},
	{"claude-sonnet-4", limit{64000, 200000}},
	{"claude-opus-4", limit{32000, 200000}},
	{"claude-opus-4-5", limit{64000, 200000}},
	{"claude-haiku-4", limit{64000, 200000}},
	{"gemini-2.0-flash", limit{8192, 1048576}},
	{"gemini-2.5", limit{65536, 1048576}},
	{"gemini-3", limit{65536, 1048576}},
	{"deepseek-chat", limit{8192, 128000}},
	{"deepseek-reasoner", limit{65536, 128000}},
}

// Bound is the completion bound to reserve and send for a request that set
// none, given its prompt estimate: the model's longest answer, less than
// what would overflow its context; defaultMax when the model's longest
// answer is unknown. It is 0 when the prompt alone fills the context (the
// provider will refuse the request whatever bound it carries).
func (f Family) Bound(prompt, defaultMax int64) int64 {
	b := f.MaxOutput
	if b == 0 {
		b = defaultMax
	}
	if f.Context > 0 {
		b = min(b, f.Context-prompt)
	}
	return max(b, 0)
}

// approximate is chat's tokenizer-free count, for families whose
// tokenizer Sluice does not have.
type approximate struct{}

func (approximate) Count(text []byte) int { return chat.CountTokensBytes(text) }
