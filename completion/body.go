package completion

import (
	"strconv"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// bodyEdits are the changes Sluice makes to a body before a provider gets
// it, and only these: the model, when the client named an alias; the
// completion bound it reserved, when the client set none and a limit
// relies on it, in the field the model family takes (or the client's
// max_completion_tokens copied to max_tokens for a model that reads only
// that: family.IgnoresCompletionField); and include_usage on a stream,
// which is what a stream is billed by.
type bodyEdits struct {
	model        string // the alias's model to name instead of the client's; "" keeps it
	boundField   string // "" for none
	bound        int64
	includeUsage bool
}

func (e bodyEdits) none() bool { return e.model == "" && e.boundField == "" && !e.includeUsage }

// providerBody is req's body with edits made, in one copy, the message
// texts untouched: what comes before, between and after the edited parts
// is copied as it is. Without edits it is the body itself.
func providerBody(req *Request, e bodyEdits) []byte {
	body := req.Body
	if e.none() {
		return body
	}
	out := make([]byte, 0, len(body)+64+len(e.model))
	// The values replaced in place, in the body's order.
	type replaced struct {
		at   span
		with []byte
	}
	var in [2]replaced
	n := 0
	if e.model != "" {
		with, _ := jsonv2.Marshal(e.model) // a string always encodes
		in[n], n = replaced{req.modelAt, with}, n+1
	}
	appendOptions := false
	if e.includeUsage {
		if so := req.streamOptions; so.end > 0 {
			in[n], n = replaced{so, withUsageOption(body[so.start:so.end])}, n+1
		} else {
			appendOptions = true
		}
	}
	if n == 2 && in[1].at.start < in[0].at.start {
		in[0], in[1] = in[1], in[0]
	}
	pos := 0
	for _, r := range in[:n] {
		out = append(out, body[pos:r.at.start]...)
		out = append(out, r.with...)
		pos = r.at.end
	}
	out = append(out, body[pos:req.end]...) // all but the closing brace
	if appendOptions {
		out = append(out, `,"stream_options":{"include_usage":true}`...)
	}
	if e.boundField != "" {
		out = append(out, `,"`...)
		out = append(out, e.boundField...)
		out = append(out, `":`...)
		out = strconv.AppendInt(out, e.bound, 10)
	}
	return append(out, body[req.end:]...)
}

// withUsageOption is a stream_options object (or null) with include_usage
// set to true and its other options kept.
func withUsageOption(raw []byte) []byte {
	var opts map[string]jsontext.Value
	if jsonv2.Unmarshal(raw, &opts) != nil || opts == nil {
		opts = map[string]jsontext.Value{}
	}
	opts["include_usage"] = jsontext.Value("true")
	b, err := jsonv2.Marshal(opts, jsonv2.Deterministic(true))
	if err != nil {
		return []byte(`{"include_usage":true}`)
	}
	return b
}
