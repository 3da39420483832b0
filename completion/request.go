package completion

import (
	"errors"
	"slices"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/chat"
	"github.com/sluicehq/sluice/chat/family"
	"github.com/sluicehq/sluice/internal/jsonwalk"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/upstream"
	"github.com/sluicehq/sluice/upstream/local"
)

// Request is one chat completion as the pipeline runs it: the parts of
// OpenAI's request body Sluice reads, the body itself (which is what a
// provider gets, changed only where Sluice must: see providerBody), what
// its prompt counts, and the gateway's own options, which travel in
// headers over HTTP.
type Request struct {
	ID      string // the gateway's request id: the usage event's key
	Dialect string // the API the client spoke ("chat", "responses", "messages", "embeddings", …), for metering
	// Endpoint is what the request is for: upstream.ChatCompletions ("")
	// or upstream.Embeddings (ParseEmbeddings).
	Endpoint     string
	Model        string // "sluice-local", a model a provider key serves, or an alias
	Body         []byte // the body as the client wrote it
	MaxTokens    int    // max_completion_tokens or max_tokens; 0 when unset
	Stream       bool
	IncludeUsage bool     // stream_options.include_usage
	Temperature  *float64 // nil when unset
	// Prompt is what the prompt will be billed at most, counted in the
	// one walk of the body.
	Prompt Prompt

	Priority     string // X-Sluice-Priority: low, normal (""), high
	Conversation string // X-Sluice-Session: the conversation to continue; "" for none
	CacheMode    string // X-Sluice-Cache: "on", "off" or "" (cache only temperature 0)

	// Native is the client's body in a provider's own dialect (Anthropic's
	// Messages), which Body translates: a key of that provider is sent it
	// as it came, and answers in it, when nothing of Sluice's changes the
	// body but the model (nativeFor). The dialect must carry the
	// completion bound itself (Messages requires max_tokens) and its sink
	// be a NativeSink; everything the pipeline reads it reads of Body.
	Native *upstream.Native

	// Paid is what the request paid before its stored conversation was
	// read (PayForHistory); admission charges that much less.
	Paid Paid

	// Queued marks a job's request: it may use only the part of the
	// caller's buckets live traffic leaves (see ErrWait), and an empty
	// bucket or a freeze makes it wait, not fail.
	Queued bool

	// Where the body's model and stream_options values and closing brace
	// are, for providerBody.
	modelAt       span
	streamOptions span
	end           int

	// completionFieldOnly says the client bounded the completion with
	// max_completion_tokens alone, which some models' APIs ignore
	// (family.IgnoresCompletionField): see bodyEdits.
	completionFieldOnly bool

	// route is the alias Model names, nil for a model; resolved once, by
	// Parse, so the request keeps the routing it was admitted with.
	route *models.ModelAlias

	messages []chat.Message // the messages' texts, read on first use (Messages)

	embed embedding // an embeddings request's inputs and options
}

// maxCompletionTokens bounds max_tokens far above any model's output, so
// estimates (prompt + max_tokens) cannot overflow.
const maxCompletionTokens = 10_000_000

var (
	errNotObject    = apperr.Field(apperr.Invalid, "invalid_json", "", "request body is not valid JSON: the body must be an object")
	errNotOneObject = apperr.Field(apperr.Invalid, "invalid_json", "", "request body must be one JSON object")
)

// ErrModelNotFound is the answer for a model that does not exist and for
// one the caller's token may not use: the same, so neither is told from
// the other.
func ErrModelNotFound(model string) error {
	return apperr.Field(apperr.NotFound, "model_not_found", "model",
		"the model '"+model+"' does not exist or you do not have access to it; GET /v1/models lists yours")
}

// Parse reads and validates a chat completion body in one walk, mapping
// every kind of bad input to an error that says what is wrong and which
// field, and counts its prompt. The gateway's options (ID, Priority,
// Conversation, CacheMode) are the caller's to fill.
func (p *Pipeline) Parse(body []byte) (Request, error) {
	sc := scanners.Get().(*scanner)
	defer func() {
		sc.body = nil
		sc.dec.Reset(nil) // keep no body alive in the pool
		scanners.Put(sc)
	}()
	if err := sc.request(body); err != nil {
		if _, ours := err.(*apperr.Error); ours {
			return Request{}, err
		}
		return Request{}, apperr.Field(apperr.Invalid, "invalid_json", "", "request body is not valid JSON: "+jsonProblem(err))
	}
	s := &sc.scan
	isLocal := s.model == local.ModelID
	// An alias is looked up before the keys' models: the store keeps a
	// key from serving a model under an alias's name, and should the two
	// meet anyway (a key with no model list serves every name), the
	// alias the admin defined is what the name means.
	var route *models.ModelAlias
	if !isLocal && p.d.Aliases != nil {
		route, _ = p.d.Aliases.Alias(s.model)
	}
	switch {
	case s.model == "":
		return Request{}, apperr.Field(apperr.Invalid, "missing_model", "model", "you must provide a model parameter")
	case !isLocal && route == nil && (p.d.Providers == nil || !p.d.Providers.Serves(s.model)):
		return Request{}, ErrModelNotFound(s.model)
	case s.messages == 0:
		return Request{}, apperr.Field(apperr.Invalid, "invalid_messages", "messages", "messages must be a non-empty array")
	case s.hasN && s.n != 1:
		return Request{}, apperr.Field(apperr.Invalid, "unsupported_n", "n", "only n=1 is supported")
	case s.serviceTier == "priority" || s.serviceTier == "scale":
		// Billed by OpenAI above the model's price, which is all Sluice
		// knows: the answer would cost more than it is billed.
		return Request{}, apperr.Field(apperr.Invalid, "unsupported_parameter", "service_tier",
			"service_tier '"+s.serviceTier+"' is billed above the model's price, which is what Sluice bills; omit it, or send auto, default or flex")
	case isLocal && s.nonText != "":
		return Request{}, apperr.Field(apperr.Invalid, "invalid_content", "messages["+itoa(s.nonTextAt)+"].content",
			"content part type '"+s.nonText+"' is not supported by "+local.ModelID+"; send text parts")
	}
	for _, f := range []struct {
		name string
		set  bool
		n    int64
	}{{"max_tokens", s.hasMaxTokens, s.maxTokens}, {"max_completion_tokens", s.hasMaxCompletion, s.maxCompletionTokens}} {
		if f.set && (f.n < 1 || f.n > maxCompletionTokens) {
			return Request{}, apperr.Field(apperr.Invalid, "invalid_max_tokens", f.name, f.name+" must be from 1 to 10000000")
		}
	}
	// Both set: providers differ in which they read (OpenAI the second,
	// most others the first), so the larger is reserved.
	var maxTokens int64
	if s.hasMaxTokens {
		maxTokens = s.maxTokens
	}
	if s.hasMaxCompletion {
		maxTokens = max(maxTokens, s.maxCompletionTokens)
	}
	return Request{Model: s.model, Body: body, MaxTokens: int(maxTokens), Stream: s.stream, IncludeUsage: s.includeUsage,
		Temperature: s.temperature, Prompt: p.promptOf(sc, s.model, route), modelAt: s.modelAt, streamOptions: s.streamOptions,
		end: s.end, route: route, completionFieldOnly: s.hasMaxCompletion && !s.hasMaxTokens}, nil
}

// promptOf counts the prompt with the family of the model asked for or,
// for an alias, with the family of each model that may answer it, keeping
// the highest count (and the highest predicted output): the reservation
// must bound whichever of them answers. Families that share a tokenizer
// count text alike, so one of them is enough unless images (whose cost
// differs between them) are sent.
func (p *Pipeline) promptOf(sc *scanner, model string, route *models.ModelAlias) Prompt {
	if route == nil {
		return p.count(sc, family.Of(model))
	}
	var best Prompt
	var tokenizers []string
	for i, m := range route.Models() {
		f := family.Of(m)
		if len(sc.scan.images) == 0 && slices.Contains(tokenizers, f.Name) {
			continue
		}
		tokenizers = append(tokenizers, f.Name)
		pr := p.count(sc, f)
		predicted := max(best.Predicted, pr.Predicted)
		if i == 0 || pr.Tokens > best.Tokens {
			best = pr
		}
		best.Predicted = predicted
	}
	return best
}

// dialect is the API the client spoke; "chat" unless its handler said.
func (r *Request) dialect() string {
	if r.Dialect == "" {
		return "chat"
	}
	return r.Dialect
}

// Messages are the request's messages as text (a content's text parts
// joined by new lines; other parts left out), read from the body on first
// use: only the local model, conversations and prompt logs need them.
func (r *Request) Messages() []chat.Message {
	if r.messages != nil {
		return r.messages
	}
	var w struct {
		Messages []struct {
			Role    string         `json:"role"`
			Content jsontext.Value `json:"content"`
		} `json:"messages"`
	}
	// Parse has walked this body: it decodes.
	_ = jsonv2.Unmarshal(r.Body, &w, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	r.messages = make([]chat.Message, len(w.Messages))
	for i, m := range w.Messages {
		r.messages[i] = chat.Message{Role: m.Role, Content: contentText(m.Content)}
	}
	return r.messages
}

// contentText is the text of a content: the string, or its text parts
// joined by new lines.
func contentText(raw jsontext.Value) string {
	switch raw.Kind() {
	case '"':
		return string(jsonwalk.AppendText(nil, raw[1:len(raw)-1], -1))
	case '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		_ = jsonv2.Unmarshal(raw, &parts, jsontext.AllowInvalidUTF8(true))
		var b strings.Builder
		for _, p := range parts {
			if p.Type != "text" {
				continue
			}
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(p.Text)
		}
		return b.String()
	}
	return ""
}

// jsonProblem describes a syntax error without echoing the body.
func jsonProblem(err error) string {
	var syn *jsonwalk.SyntaxError
	switch {
	case errors.Is(err, jsonwalk.ErrEnd):
		return "body is empty or cut short"
	case errors.As(err, &syn):
		return "syntax error at byte " + strconv.Itoa(syn.Offset)
	default:
		return "cannot decode"
	}
}
