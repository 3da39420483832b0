package completion

import (
	"bytes"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/chat/family"
	"github.com/sluicehq/sluice/internal/jsonwalk"
	"github.com/sluicehq/sluice/upstream"
	"github.com/sluicehq/sluice/upstream/local"
)

// Embeddings (OpenAI's POST /v1/embeddings) run through the same pipeline
// as chat completions, admitted, reserved, settled and metered the same
// way. What differs: the prompt is the inputs, counted exactly as the
// model's family counts text (a token array counts its length), and
// nothing is generated, so the completion bound is 0 and the estimate is
// the input tokens; the body goes to the provider untouched; there is no
// stream, no conversation and no response cache; and a model that is not
// available is not answered by sluice-local instead, whose vectors would
// mean nothing next to the model's.

// The limits of one embeddings request, OpenAI's.
const (
	MaxEmbeddingInputs        = 2048
	MaxEmbeddingInputTokens   = 8192
	MaxEmbeddingRequestTokens = 300_000
)

// DialectEmbeddings is the usage events' dialect of embeddings requests.
const DialectEmbeddings = "embeddings"

// embeddingsFields are the names Sluice reads of an embeddings body (see
// requestFields).
var embeddingsFields = []string{"model", "input", "encoding_format", "dimensions", "user"}

// embedding is what an embeddings request carries besides its body.
type embedding struct {
	// inputs are each input's JSON in the body: a string, or an array of
	// token ids.
	inputs     []span
	base64     bool // encoding_format "base64": little-endian float32s
	dimensions int  // 0: the model's own
}

// The forms input may take, by its elements' first byte.
const (
	formText       = '"' // a string, or an array of strings
	formTokens     = '0' // an array of token ids: one input
	formTokenLists = '[' // an array of arrays of token ids
)

// embedScan is what one walk of an embeddings body found.
type embedScan struct {
	model, format, user string
	dimensions          int64
	hasDimensions       bool
	hasInput            bool
	form                byte
	inputs              []span
	tokens              []int64 // each input's tokens; -1 for a text, counted once the model is known
	// The least and greatest token ids and where they are, checked once
	// the model's tokenizer is known.
	minID, maxID int64
	minAt, maxAt tokenAt
	hasIDs       bool
	single       bool // input is one string or one array of token ids, not a list of inputs
	end          int
}

// tokenAt is where a token id is: input[list][index], list -1 for the
// flat form.
type tokenAt struct{ list, index int }

func (t tokenAt) String() string {
	if t.list < 0 {
		return inputAt(t.index)
	}
	return inputAt(t.list) + "[" + itoa(t.index) + "]"
}

// inputAt names input[i]; "input" for i -1, the one input. Written out
// only when an error names it, so the walk builds no paths.
func inputAt(i int) string {
	if i < 0 {
		return "input"
	}
	return "input[" + itoa(i) + "]"
}

var errInputForm = apperr.Field(apperr.Invalid, "invalid_input", "input",
	"input must be a string, an array of strings, an array of token ids (integers) or an array of arrays of token ids")

// ParseEmbeddings reads and validates an embeddings body in one walk, as
// Parse does a chat completion's, and counts its inputs with the model's
// family's tokenizer. The request's ID and Priority are the caller's to
// fill.
func (p *Pipeline) ParseEmbeddings(body []byte) (Request, error) {
	sc := scanners.Get().(*scanner)
	defer func() {
		sc.body = nil
		sc.dec.Reset(nil) // keep no body alive in the pool
		scanners.Put(sc)
	}()
	if err := sc.embeddingsRequest(body); err != nil {
		if _, ours := err.(*apperr.Error); ours {
			return Request{}, err
		}
		return Request{}, apperr.Field(apperr.Invalid, "invalid_json", "", "request body is not valid JSON: "+jsonProblem(err))
	}
	s := &sc.emb
	isLocal := s.model == local.ModelID
	switch {
	case s.model == "":
		return Request{}, apperr.Field(apperr.Invalid, "missing_model", "model", "you must provide a model parameter")
	case !isLocal && (p.d.Providers == nil || !p.d.Providers.Serves(s.model)):
		return Request{}, ErrModelNotFound(s.model)
	case !s.hasInput:
		return Request{}, apperr.Field(apperr.Invalid, "missing_input", "input", "you must provide an input parameter")
	case s.format != "" && s.format != "float" && s.format != "base64":
		return Request{}, apperr.Field(apperr.Invalid, "invalid_encoding_format", "encoding_format",
			quoted(s.format)+" is not one of ['float', 'base64'] - 'encoding_format'")
	case s.hasDimensions && s.dimensions < 1:
		return Request{}, apperr.Field(apperr.Invalid, "invalid_dimensions", "dimensions", "dimensions must be a whole number of at least 1")
	case isLocal && s.hasDimensions && s.dimensions > local.MaxDimensions:
		return Request{}, apperr.Field(apperr.Invalid, "invalid_dimensions", "dimensions",
			local.ModelID+"'s vectors have 1 to "+itoa(local.MaxDimensions)+" dimensions")
	}
	fam := family.Of(s.model)
	if err := s.checkIDs(fam); err != nil {
		return Request{}, err
	}
	total, err := p.countInputs(sc, fam)
	if err != nil {
		return Request{}, err
	}
	return Request{Endpoint: upstream.Embeddings, Dialect: DialectEmbeddings, Model: s.model, Body: body,
		Prompt: Prompt{Tokens: total, Family: fam}, end: s.end,
		embed: embedding{inputs: slices.Clone(s.inputs), base64: s.format == "base64", dimensions: int(s.dimensions)}}, nil
}

// quoted is a client's value in an error, in quotes, or "the value" when
// it is too long to repeat.
func quoted(v string) string {
	if len(v) > 32 || !utf8.ValidString(v) {
		return "the value"
	}
	return "'" + v + "'"
}

// checkIDs refuses token ids the model's tokenizer does not have; for a
// tokenizer Sluice does not know, those outside 0 to 2^31-1 (OpenAI's
// schema takes them as 32-bit integers).
func (s *embedScan) checkIDs(fam family.Family) error {
	if !s.hasIDs {
		return nil
	}
	vocab, of := fam.Vocabulary, "the model's tokenizer ("+fam.Name+")"
	if vocab == 0 {
		vocab, of = math.MaxInt32+1, "a token id"
	}
	bad := func(id int64, at tokenAt) error {
		return apperr.Field(apperr.Invalid, "invalid_token", at.String(),
			at.String()+" is "+strconv.FormatInt(id, 10)+", not a token id of "+of+": ids are from 0 to "+strconv.FormatInt(vocab-1, 10))
	}
	if s.minID < 0 {
		return bad(s.minID, s.minAt)
	}
	if s.maxID >= vocab {
		return bad(s.maxID, s.maxAt)
	}
	return nil
}

// countInputs counts each text input with the family's tokenizer (a
// token array has counted its length already), refusing an input longer
// than a model embeds and a request longer than OpenAI takes.
func (p *Pipeline) countInputs(sc *scanner, fam family.Family) (int64, error) {
	s := &sc.emb
	var total int64
	for i, at := range s.inputs {
		n := s.tokens[i]
		if n < 0 {
			text := at.in(sc.body)
			text = text[1 : len(text)-1]
			if bytes.IndexByte(text, '\\') >= 0 || !utf8.Valid(text) {
				sc.scratch = jsonwalk.AppendText(sc.scratch[:0], text, -1)
				text = sc.scratch
			}
			n = int64(fam.Counter.Count(text))
		}
		if n > MaxEmbeddingInputTokens {
			param := inputAt(i)
			if s.single {
				param = "input"
			}
			return 0, apperr.Field(apperr.Invalid, "context_length_exceeded", param,
				"This model's maximum context length is "+itoa(MaxEmbeddingInputTokens)+" tokens, however "+param+" has "+
					strconv.FormatInt(n, 10)+" tokens; shorten it or split it into several inputs")
		}
		total += n
	}
	if total > MaxEmbeddingRequestTokens {
		return 0, apperr.Field(apperr.Invalid, "max_tokens_per_request", "input",
			"Requested "+strconv.FormatInt(total, 10)+" tokens, max "+itoa(MaxEmbeddingRequestTokens)+" tokens per request")
	}
	return total, nil
}

// embeddingsRequest walks a whole embeddings body.
func (sc *scanner) embeddingsRequest(body []byte) error {
	sc.body = body
	sc.dec.Reset(body)
	inputs, tokens := sc.emb.inputs[:0], sc.emb.tokens[:0]
	sc.emb = embedScan{inputs: inputs, tokens: tokens}
	s := &sc.emb
	if k, err := sc.dec.Next(); err != nil || k != '{' {
		if err != nil {
			return err
		}
		return errNotObject
	}
	err := sc.object(embeddingsFields, func(f int) error {
		switch embeddingsFields[f] {
		case "model":
			return sc.str(&s.model, top("model"))
		case "input":
			return sc.input()
		case "encoding_format":
			return sc.str(&s.format, top("encoding_format"))
		case "dimensions":
			return sc.integer(&s.dimensions, &s.hasDimensions, top("dimensions"))
		default: // user
			return sc.str(&s.user, top("user"))
		}
	}, where{msg: -1})
	if err != nil {
		return err
	}
	s.end = sc.offset() - 1
	if !sc.dec.End() {
		return errNotOneObject
	}
	return nil
}

// input walks the input: a string, or an array of strings, of token ids
// or of arrays of token ids, all of one form.
func (sc *scanner) input() error {
	s := &sc.emb
	switch sc.dec.Kind() {
	case 'n':
		return sc.skip() // as absent
	case '"':
		s.hasInput, s.form, s.single = true, formText, true
		return sc.textInput(-1)
	case '[':
	default:
		if err := sc.skip(); err != nil {
			return err
		}
		return errInputForm
	}
	s.hasInput = true
	start := sc.peekOffset()
	if err := sc.dec.Open(); err != nil {
		return err
	}
	n := 0
	for ; ; n++ {
		k, err := sc.dec.Next()
		if err != nil {
			return err
		}
		if k == ']' {
			break
		}
		if n == 0 {
			switch k {
			case '"', '0', '[':
				s.form = k
			default:
				return errInputForm
			}
		}
		if s.form != formTokens && n == MaxEmbeddingInputs {
			return apperr.Field(apperr.Invalid, "too_many_inputs", "input",
				"input holds at most "+itoa(MaxEmbeddingInputs)+" inputs; split them over several requests")
		}
		switch {
		case k != s.form:
			if err := sc.skip(); err != nil {
				return err
			}
			return apperr.Field(apperr.Invalid, "invalid_input", inputAt(n), inputAt(n)+" must be "+formName(s.form)+", as input[0] is")
		case k == formText:
			err = sc.textInput(n)
		case k == formTokens:
			err = sc.tokenID(tokenAt{list: -1, index: n})
		default:
			err = sc.tokenList(n)
		}
		if err != nil {
			return err
		}
	}
	if err := sc.dec.Close(); err != nil {
		return err
	}
	if n == 0 {
		return apperr.Field(apperr.Invalid, "invalid_input", "input", "input must not be empty: send 1 to "+itoa(MaxEmbeddingInputs)+" inputs")
	}
	if s.form == formTokens { // the whole array is one input
		s.single = true
		s.inputs = append(s.inputs, span{start, sc.offset()})
		s.tokens = append(s.tokens, int64(n))
	}
	return nil
}

// formName says what an element of input of form is.
func formName(form byte) string {
	switch form {
	case formText:
		return "a string"
	case formTokens:
		return "a token id (an integer)"
	}
	return "an array of token ids"
}

// textInput notes string input i (-1: the one input), refusing an empty one.
func (sc *scanner) textInput(i int) error {
	v, err := sc.value()
	if err != nil {
		return err
	}
	if v.end-v.start == 2 {
		return apperr.Field(apperr.Invalid, "invalid_input", inputAt(i), inputAt(i)+" must not be an empty string")
	}
	sc.emb.inputs = append(sc.emb.inputs, v)
	sc.emb.tokens = append(sc.emb.tokens, -1)
	return nil
}

// tokenList walks one array of token ids, input[list].
func (sc *scanner) tokenList(list int) error {
	start := sc.peekOffset()
	if err := sc.dec.Open(); err != nil {
		return err
	}
	n := 0
	for ; ; n++ {
		k, err := sc.dec.Next()
		if err != nil {
			return err
		}
		if k == ']' {
			break
		}
		if err := sc.tokenID(tokenAt{list: list, index: n}); err != nil {
			return err
		}
	}
	if err := sc.dec.Close(); err != nil {
		return err
	}
	if n == 0 {
		return apperr.Field(apperr.Invalid, "invalid_input", inputAt(list), inputAt(list)+" must not be an empty array of tokens")
	}
	sc.emb.inputs = append(sc.emb.inputs, span{start, sc.offset()})
	sc.emb.tokens = append(sc.emb.tokens, int64(n))
	return nil
}

// tokenID reads one token id, noting the least and greatest.
func (sc *scanner) tokenID(at tokenAt) error {
	s := &sc.emb
	if sc.dec.Kind() != '0' {
		if err := sc.skip(); err != nil {
			return err
		}
		return apperr.Field(apperr.Invalid, "invalid_token", at.String(), at.String()+" must be a token id (an integer)")
	}
	v, err := sc.dec.Value()
	if err != nil {
		return err
	}
	id, perr := strconv.ParseInt(string(v), 10, 64)
	switch {
	case perr == nil:
	case bytes.ContainsAny(v, ".eE"):
		return apperr.Field(apperr.Invalid, "invalid_token", at.String(), at.String()+" must be a token id (an integer)")
	case v[0] == '-':
		id = math.MinInt64
	default:
		id = math.MaxInt64
	}
	if !s.hasIDs || id < s.minID {
		s.minID, s.minAt = id, at
	}
	if !s.hasIDs || id > s.maxID {
		s.maxID, s.maxAt = id, at
	}
	s.hasIDs = true
	return nil
}
