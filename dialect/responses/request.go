// Package responses translates OpenAI's Responses API to and from the
// chat completions the completion pipeline speaks: a Responses request
// into a chat completions body (Decode, Request.ChatBody), a chat
// completion into a Response object (Request.Response), and a chat
// completion's event stream into the Responses event stream, chunk by
// chunk (Stream). It knows no HTTP and no database: the handler runs the
// pipeline and stores responses.
//
// What the translation cannot carry is refused, naming the field, never
// dropped: hosted tools, background runs, encrypted reasoning sent back,
// include of extra output data and the like answer 400. What asks only
// for output chat completions never makes (reasoning summaries, encrypted
// reasoning in the answer) is accepted and simply not made.
package responses

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// maxOutputTokens is the largest max_output_tokens accepted: Sluice's
// bound for max_tokens.
const maxOutputTokens = 10_000_000

// Request is a Responses API request, checked and translated: the chat
// messages of its input and the chat fields of its options, and what its
// Response object echoes.
type Request struct {
	Model              string
	Stream             bool
	Store              bool   // keep the response for GET and continuations (default true)
	PreviousResponseID string // the stored response this one continues; "" for none
	// ReasoningEffort is reasoning.effort, sent as reasoning_effort; ""
	// when unset. A model that cannot reason refuses it.
	ReasoningEffort string

	instructions *string
	input        []chatMessage   // this request's input, as chat messages
	sources      []source        // where each input message came from, for errors
	images       []string        // the params of the input's images
	custom       map[string]bool // the names of the request's custom tools
	chat         chatOptions
	echo         echo
}

// source is the request parameter a chat message was made from.
type source struct {
	param string
	parts bool // its content parts are the item's, in order
}

// chatOptions are the chat completions fields the request sets.
type chatOptions struct {
	Tools               []json.RawMessage `json:"tools,omitempty"`
	ToolChoice          json.RawMessage   `json:"tool_choice,omitempty"`
	ParallelToolCalls   *bool             `json:"parallel_tool_calls,omitempty"`
	MaxCompletionTokens *int64            `json:"max_completion_tokens,omitempty"`
	Temperature         *float64          `json:"temperature,omitempty"`
	TopP                *float64          `json:"top_p,omitempty"`
	ResponseFormat      json.RawMessage   `json:"response_format,omitempty"`
	Verbosity           string            `json:"verbosity,omitempty"`
	ReasoningEffort     string            `json:"reasoning_effort,omitempty"`
	User                string            `json:"user,omitempty"`
	SafetyIdentifier    string            `json:"safety_identifier,omitempty"`
	PromptCacheKey      string            `json:"prompt_cache_key,omitempty"`
	ServiceTier         string            `json:"service_tier,omitempty"`
}

// wireRequest is the body of POST /v1/responses: every field Sluice
// reads; any other is refused by name.
type wireRequest struct {
	Model              string           `json:"model"`
	Input              jsontext.Value   `json:"input"`
	Instructions       *string          `json:"instructions"`
	Tools              []jsontext.Value `json:"tools"`
	ToolChoice         jsontext.Value   `json:"tool_choice"`
	ParallelToolCalls  *bool            `json:"parallel_tool_calls"`
	MaxOutputTokens    *int64           `json:"max_output_tokens"`
	MaxToolCalls       *int64           `json:"max_tool_calls"`
	Temperature        *float64         `json:"temperature"`
	TopP               *float64         `json:"top_p"`
	Text               jsontext.Value   `json:"text"`
	Reasoning          jsontext.Value   `json:"reasoning"`
	Metadata           jsontext.Value   `json:"metadata"`
	User               *string          `json:"user"`
	SafetyIdentifier   *string          `json:"safety_identifier"`
	PromptCacheKey     *string          `json:"prompt_cache_key"`
	ServiceTier        *string          `json:"service_tier"`
	Stream             *bool            `json:"stream"`
	StreamOptions      jsontext.Value   `json:"stream_options"`
	Store              *bool            `json:"store"`
	PreviousResponseID *string          `json:"previous_response_id"`
	// ClientMetadata is a client's telemetry about itself (Codex sends
	// its installation id): checked, never sent to the model, which it
	// says nothing to.
	ClientMetadata jsontext.Value `json:"client_metadata"`

	// Accepted only as what they mean when unset: chat completions cannot
	// carry more.
	Background   *bool          `json:"background"`
	Include      []string       `json:"include"` // reasoning.encrypted_content only: see refuseUnset
	Truncation   *string        `json:"truncation"`
	TopLogprobs  *int64         `json:"top_logprobs"`
	Conversation jsontext.Value `json:"conversation"`
	Prompt       jsontext.Value `json:"prompt"`
}

// Decode reads and checks a Responses API request body and translates
// it. Every kind of bad input is an *apperr.Error naming the field, in the
// Responses API's terms.
func Decode(body []byte) (*Request, error) {
	var w wireRequest
	if err := decode(body, "", &w); err != nil {
		return nil, err
	}
	r := &Request{Model: w.Model, Stream: w.Stream != nil && *w.Stream, Store: w.Store == nil || *w.Store, instructions: w.Instructions}
	if w.Model == "" {
		return nil, missing("model")
	}
	if err := refuseUnset(&w); err != nil {
		return nil, err
	}
	if w.PreviousResponseID != nil {
		if *w.PreviousResponseID == "" {
			return nil, invalid("previous_response_id", "previous_response_id must be the id of a stored response (resp_…), or left out")
		}
		r.PreviousResponseID = *w.PreviousResponseID
	}
	if err := r.readInput(w.Input); err != nil {
		return nil, err
	}
	if len(r.input) == 0 && r.PreviousResponseID == "" {
		return nil, missing("input")
	}
	if err := r.readOptions(&w); err != nil {
		return nil, err
	}
	if err := r.readTools(w.Tools, w.ToolChoice); err != nil {
		return nil, err
	}
	if err := r.readText(w.Text); err != nil {
		return nil, err
	}
	if err := r.readReasoning(w.Reasoning); err != nil {
		return nil, err
	}
	if err := r.readEcho(&w); err != nil {
		return nil, err
	}
	return r, nil
}

// refuseUnset refuses the fields that are accepted only unset (or at
// what unset means), since the translation cannot carry them.
func refuseUnset(w *wireRequest) error {
	switch {
	case w.Background != nil && *w.Background:
		return unsupported("background", "background responses are not supported: send the request without background and wait for its answer, or stream it")
	case w.Truncation != nil && *w.Truncation != "disabled":
		return unsupported("truncation", "truncation '"+*w.Truncation+"' is not supported: Sluice never drops input; use 'disabled' or leave it out")
	case w.TopLogprobs != nil && *w.TopLogprobs != 0:
		return unsupported("top_logprobs", "top_logprobs is not supported by Sluice's Responses API; leave it out")
	case isSet(w.Conversation):
		return unsupported("conversation", "conversations are not supported: continue a stored response with previous_response_id")
	case isSet(w.Prompt):
		return unsupported("prompt", "prompt templates are not supported: send the prompt as input and instructions")
	case w.MaxToolCalls != nil && *w.MaxToolCalls < 1:
		return invalid("max_tool_calls", "max_tool_calls must be at least 1")
	}
	for _, inc := range w.Include {
		// Encrypted reasoning is asked for so that a client keeping no
		// state (store: false, as Codex) can send reasoning items back.
		// Chat completions returns no reasoning items, so there is none
		// to include and none to send back: asking is harmless. Every
		// other include asks for output Sluice cannot make.
		if inc != "reasoning.encrypted_content" {
			return unsupported("include", "include '"+inc+"' is not supported: Sluice returns no extra output data; leave it out (only reasoning.encrypted_content is accepted, and Sluice returns no reasoning items)")
		}
	}
	if isSet(w.ClientMetadata) {
		var md map[string]string
		if err := decode(w.ClientMetadata, "client_metadata", &md); err != nil {
			return err
		}
	}
	if isSet(w.StreamOptions) {
		var so struct {
			IncludeObfuscation *bool `json:"include_obfuscation"`
		}
		if err := decode(w.StreamOptions, "stream_options", &so); err != nil {
			return err
		}
		if so.IncludeObfuscation != nil && *so.IncludeObfuscation {
			return unsupported("stream_options.include_obfuscation", "stream obfuscation is not supported; set include_obfuscation to false or leave it out")
		}
	}
	return nil
}

// isSet says whether a raw field is present and not null.
func isSet(v jsontext.Value) bool { return len(v) > 0 && v.Kind() != 'n' }

// readOptions reads the sampling options and the ones passed on as they are.
func (r *Request) readOptions(w *wireRequest) error {
	o := &r.chat
	if w.MaxOutputTokens != nil {
		if n := *w.MaxOutputTokens; n < 1 || n > maxOutputTokens {
			return invalid("max_output_tokens", "max_output_tokens must be from 1 to 10000000")
		}
		o.MaxCompletionTokens = w.MaxOutputTokens
	}
	if t := w.Temperature; t != nil {
		if *t < 0 || *t > 2 {
			return invalid("temperature", "temperature must be from 0 to 2")
		}
		o.Temperature = t
	}
	if p := w.TopP; p != nil {
		if *p < 0 || *p > 1 {
			return invalid("top_p", "top_p must be from 0 to 1")
		}
		o.TopP = p
	}
	o.User, o.SafetyIdentifier = deref(w.User), deref(w.SafetyIdentifier)
	o.PromptCacheKey, o.ServiceTier = deref(w.PromptCacheKey), deref(w.ServiceTier)
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// chatBody is the chat completions request a Responses request becomes.
type chatBody struct {
	Model    string            `json:"model"`
	Messages []json.RawMessage `json:"messages"`
	chatOptions
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ChatBody is the chat completions body of the request: the instructions
// as a system message, then history (the stored conversation of the
// response it continues, as chat messages), then its input. A stream asks
// for usage, so its last event says what the answer used.
func (r *Request) ChatBody(history []json.RawMessage) []byte {
	msgs := make([]json.RawMessage, 0, 1+len(history)+len(r.input))
	if r.instructions != nil {
		b, _ := json.Marshal(chatMessage{Role: "system", Content: *r.instructions})
		msgs = append(msgs, b)
	}
	msgs = append(msgs, history...)
	msgs = append(msgs, r.Input()...)
	body := chatBody{Model: r.Model, Messages: msgs, chatOptions: r.chat, Stream: r.Stream}
	if r.Stream {
		body.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	b, _ := json.Marshal(body) // raw values in it were read as JSON
	return b
}

// Input is the request's input as chat messages, without the
// instructions: what a stored response keeps of it, since a continuation
// does not inherit the instructions it was given.
func (r *Request) Input() []json.RawMessage {
	out := make([]json.RawMessage, len(r.input))
	for i, m := range r.input {
		out[i], _ = json.Marshal(m)
	}
	return out
}

// FirstImage is the param of the input's first image, "" when it has
// none: for a model that reads text only.
func (r *Request) FirstImage() string {
	if len(r.images) == 0 {
		return ""
	}
	return r.images[0]
}

// Param names, in the request's own terms, a parameter of the chat body
// ChatBody made with history messages in front of the input: what an
// error about the chat body is about.
func (r *Request) Param(chat string, history int) string {
	switch chat {
	case "max_tokens", "max_completion_tokens":
		return "max_output_tokens"
	case "messages":
		return "input"
	}
	rest, ok := strings.CutPrefix(chat, "messages[")
	if !ok {
		return chat
	}
	end := strings.IndexByte(rest, ']')
	i, err := strconv.Atoi(rest[:max(end, 0)])
	if end < 0 || err != nil {
		return "input"
	}
	tail := rest[end+1:]
	if r.instructions != nil {
		if i == 0 {
			return "instructions"
		}
		i--
	}
	if i < history {
		return "previous_response_id"
	}
	i -= history
	if i >= len(r.sources) {
		return "input"
	}
	s := r.sources[i]
	if s.parts && strings.HasPrefix(tail, ".content[") {
		return s.param + tail
	}
	return s.param
}
