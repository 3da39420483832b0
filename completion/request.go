package completion

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/chat"
	"github.com/sluicehq/sluice/upstream/local"
)

// Request is one chat completion as the pipeline runs it: the parts of
// OpenAI's request body Sluice reads, the body itself (which is what a
// provider gets), and the gateway's own options, which travel in headers
// over HTTP.
type Request struct {
	ID           string         // the gateway's request id: the usage event's key
	Model        string         // "sluice-local" or a model a provider key serves
	Messages     []chat.Message // each message's text, for counting, weighing and the local model
	Body         []byte         // the body as the client wrote it
	MaxTokens    int            // max_completion_tokens or max_tokens; 0 when unset
	Stream       bool
	IncludeUsage bool     // stream_options.include_usage
	Temperature  *float64 // nil when unset

	Priority     string // X-Sluice-Priority: low, normal (""), high
	Conversation string // X-Sluice-Session: the conversation to continue; "" for none
	CacheMode    string // X-Sluice-Cache: "on", "off" or "" (cache only temperature 0)

	// Queued marks a job's request: it may use only the part of the
	// caller's buckets live traffic leaves (see ErrWait), and an empty
	// bucket or a freeze makes it wait, not fail.
	Queued bool
}

// maxCompletionTokens bounds max_tokens far above any model's output, so
// estimates (prompt + max_tokens) cannot overflow.
const maxCompletionTokens = 10_000_000

// wireRequest is the part of OpenAI's chat request Sluice reads; unknown
// fields are accepted, as OpenAI's SDKs send many.
type wireRequest struct {
	Model               string        `json:"model"`
	Messages            []wireMessage `json:"messages"`
	MaxTokens           *int          `json:"max_tokens"`
	MaxCompletionTokens *int          `json:"max_completion_tokens"`
	N                   *int          `json:"n"`
	Temperature         *float64      `json:"temperature"`
	Stream              bool          `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type wireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// Parse decodes and validates a chat completion body, mapping every kind of
// bad input to an error that says what is wrong and which field. The
// gateway's options (ID, Priority, Conversation, CacheMode) are the
// caller's to fill.
func (p *Pipeline) Parse(body []byte) (Request, error) {
	c := keyCheckers.Get().(*keyChecker)
	defer keyCheckers.Put(c)
	w, err := c.decodeRequest(body)
	if err != nil {
		return Request{}, err
	}
	if err := c.checkKeys(body); err != nil {
		return Request{}, err
	}
	isLocal := w.Model == local.ModelID
	switch {
	case w.Model == "":
		return Request{}, apperr.Field(apperr.Invalid, "missing_model", "model", "you must provide a model parameter")
	case !isLocal && (p.Providers == nil || !p.Providers.Serves(w.Model)):
		return Request{}, apperr.Field(apperr.NotFound, "model_not_found", "model", "the model '"+w.Model+"' does not exist or you do not have access to it; GET /v1/models lists yours")
	case len(w.Messages) == 0:
		return Request{}, apperr.Field(apperr.Invalid, "invalid_messages", "messages", "messages must be a non-empty array")
	case w.N != nil && *w.N != 1:
		return Request{}, apperr.Field(apperr.Invalid, "unsupported_n", "n", "only n=1 is supported")
	}
	maxTokens := w.MaxCompletionTokens
	if maxTokens == nil {
		maxTokens = w.MaxTokens
	}
	if maxTokens != nil && (*maxTokens < 1 || *maxTokens > maxCompletionTokens) {
		return Request{}, apperr.Field(apperr.Invalid, "invalid_max_tokens", "max_tokens", "max_tokens must be from 1 to 10000000")
	}
	msgs := make([]chat.Message, len(w.Messages))
	for i, m := range w.Messages {
		param := "messages[" + strconv.Itoa(i) + "]"
		switch m.Role {
		case "system", "developer", "user", "assistant", "tool":
		default:
			return Request{}, apperr.Field(apperr.Invalid, "invalid_role", param+".role", "role must be one of system, developer, user, assistant, tool")
		}
		text, err := contentText(m.Content, isLocal)
		if err != nil {
			return Request{}, apperr.Field(apperr.Invalid, "invalid_content", param+".content", err.Error())
		}
		msgs[i] = chat.Message{Role: m.Role, Content: text}
	}
	r := Request{Model: w.Model, Messages: msgs, Body: body, Stream: w.Stream, Temperature: w.Temperature,
		IncludeUsage: w.StreamOptions != nil && w.StreamOptions.IncludeUsage}
	if maxTokens != nil {
		r.MaxTokens = *maxTokens
	}
	return r, nil
}

// decodeRequest reads the one JSON object of body into a wireRequest with
// the v2 decoder: names matched exactly (checkKeys then refuses a name
// that only folds to one Sluice reads, and one given twice), invalid UTF-8
// replaced as encoding/json does, in about half encoding/json's time.
func (c *keyChecker) decodeRequest(body []byte) (wireRequest, error) {
	var w wireRequest
	c.read(body)
	if err := jsonv2.UnmarshalDecode(c.dec, &w); err != nil {
		return w, apperr.Field(apperr.Invalid, "invalid_json", "", "request body is not valid JSON: "+jsonProblem(err))
	}
	if _, err := c.dec.ReadToken(); err != io.EOF {
		return w, apperr.Field(apperr.Invalid, "invalid_json", "", "request body must be one JSON object")
	}
	return w, nil
}

// contentText accepts OpenAI's two content forms: a string, or an array of
// parts. The local model reads only text parts; for a provider, other parts
// (images, audio) travel on untouched and only the text counts toward the
// estimate.
func contentText(raw json.RawMessage, textOnly bool) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	// Most contents are plain strings without escapes (raw was checked as
	// JSON when the body was decoded): those need no decoder.
	if n := len(raw); n >= 2 && raw[0] == '"' && raw[n-1] == '"' && bytes.IndexByte(raw[1:n-1], '\\') < 0 && utf8.Valid(raw) {
		return string(raw[1 : n-1]), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("content must be a string or an array of content parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			if !textOnly {
				continue
			}
			return "", errors.New("content part type '" + p.Type + "' is not supported by " + local.ModelID + "; send text parts")
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// jsonProblem describes a decoding error without echoing the body.
func jsonProblem(err error) string {
	var syn *jsontext.SyntacticError
	var sem *jsonv2.SemanticError
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "body is empty or cut short"
	case errors.As(err, &syn):
		return "syntax error at byte " + strconv.FormatInt(syn.ByteOffset, 10)
	case errors.As(err, &sem) && sem.JSONPointer == "":
		return "the body must be an object"
	case errors.As(err, &sem):
		return "field '" + fieldPath(sem.JSONPointer) + "' must be " + kindOf(sem.GoType)
	default:
		return "cannot decode"
	}
}

// fieldPath writes a JSON pointer as the request's fields are named in
// errors: /messages/0/role is messages[0].role.
func fieldPath(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if n, err := strconv.Atoi(tok); err == nil && b.Len() > 0 {
			b.WriteString("[" + strconv.Itoa(n) + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// kindOf names what a Go type takes in JSON, for errors.
func kindOf(t reflect.Type) string {
	if t == nil {
		return "of another type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Float64, reflect.Float32:
		return "a number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 { // a raw value: content
			return "a string or an array"
		}
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	default:
		return "of another type"
	}
}
