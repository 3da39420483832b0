package upstream

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/sluicehq/sluice/apperr"
)

// The chat form's Anthropic extensions (dialect/messages/thinking.go) at
// a provider that is not Anthropic. An Anthropic key reads them back
// exactly (anthropic_thinking.go); every other format maps each to what
// its API has, or refuses it by name, or leaves it out only where it
// provably changes nothing:
//
//   - thinking: for an OpenAI-compatible key a budget is reasoning_effort
//     (below 4,096 tokens low, below 16,384 medium, else high: the
//     budgets Google's own OpenAI compatibility gives low, medium and high
//     fall in those bands), unless the request sets reasoning_effort
//     itself, which is the same knob named by the client; Gemini takes the
//     budget itself (gemini_request.go). Adaptive thinking lets the model
//     decide whether and how much to think, which every model does when
//     not told; disabled is what a request without thinking asks.
//   - an assistant message's thinking_blocks are left out: they are signed
//     by Anthropic for Anthropic, and neither OpenAI's chat completions nor
//     Gemini has an input for a model's earlier reasoning (OpenAI drops a
//     reasoning model's reasoning between turns; Gemini reads back only
//     its own thought signatures, which Sluice carries in tool call ids),
//     so the provider answers the same without them;
//   - context_management's clear_thinking edits are left out for the same
//     reason: they choose which thinking blocks Anthropic keeps, and no
//     thinking block reaches another provider; its other edits (clearing
//     tool results, compaction) rewrite the prompt on Anthropic's side
//     and are refused;
//   - anthropic_beta is left out: a beta name only opts in to an Anthropic
//     feature, and each feature the request uses is judged by its own
//     field above.

// extensionMarks are what a body holds when it may carry an extension: the
// cheap test that spares every other body a walk.
var extensionMarks = [][]byte{[]byte(`"thinking`), []byte(`"context_management"`), []byte(`"anthropic_beta"`)}

// mayCarryExtensions says whether body may carry an extension.
func mayCarryExtensions(body []byte) bool {
	for _, m := range extensionMarks {
		if bytes.Contains(body, m) {
			return true
		}
	}
	return false
}

// member is one member of a JSON object: its name as written and value.
type member struct {
	name  string
	raw   jsontext.Value // the name's JSON string, as written
	value jsontext.Value
}

// members reads an object's members in order, as written, as leniently
// as the pipeline read them (a name it does not read may come twice).
func members(obj []byte) ([]member, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(obj), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil, apperr.Field(apperr.Invalid, "invalid_json", "", "the body must be a JSON object")
	}
	var out []member
	for dec.PeekKind() != '}' {
		name, err := dec.ReadValue()
		if err != nil {
			return nil, err
		}
		rawName := append(jsontext.Value(nil), name...)
		value, err := dec.ReadValue()
		if err != nil {
			return nil, err
		}
		var s string
		_ = json.Unmarshal(rawName, &s)
		out = append(out, member{name: s, raw: rawName, value: append(jsontext.Value(nil), value...)})
	}
	return out, nil
}

// writeObject writes members as an object, each as it was written.
func writeObject(ms []member) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(m.raw)
		b.WriteByte(':')
		b.Write(m.value)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// nonAnthropicRequest is what a format other than Anthropic's reads of
// the extensions: the body without them (its other members as written,
// in their order), and what they ask that the format maps itself.
type nonAnthropicRequest struct {
	body     []byte
	thinking json.RawMessage // the thinking object; nil when absent
	effort   bool            // the request sets reasoning_effort
}

// withoutExtensions takes the extensions out of a chat body, refusing the
// context_management edits no other provider can make. A body without
// them is returned as it is.
func withoutExtensions(body []byte) (nonAnthropicRequest, error) {
	out := nonAnthropicRequest{body: body}
	if !mayCarryExtensions(body) {
		return out, nil
	}
	ms, err := members(body)
	if err != nil {
		return out, apperr.Field(apperr.Invalid, "invalid_json", "", "the request body is not valid JSON")
	}
	kept := ms[:0:0]
	changed := false
	for _, m := range ms {
		switch m.name {
		case "thinking":
			if m.value.Kind() != 'n' {
				out.thinking = json.RawMessage(m.value)
			}
			changed = true
			continue
		case "anthropic_beta":
			changed = true
			continue
		case "context_management":
			if err := inertContextManagement(m.value); err != nil {
				return out, err
			}
			changed = true
			continue
		case "reasoning_effort":
			out.effort = m.value.Kind() != 'n'
		case "messages":
			if v, edited, err := withoutThinkingBlocks(m.value); err != nil {
				return out, err
			} else if edited {
				m.value, changed = v, true
			}
		}
		kept = append(kept, m)
	}
	if changed {
		out.body = writeObject(kept)
	}
	return out, nil
}

// withoutThinkingBlocks is messages with no message's thinking_blocks,
// and whether there were any.
func withoutThinkingBlocks(raw jsontext.Value) (jsontext.Value, bool, error) {
	if raw.Kind() != '[' || !bytes.Contains(raw, []byte(`"thinking_blocks"`)) {
		return raw, false, nil
	}
	var msgs []jsontext.Value
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return raw, false, nil // the format's own reading names what is wrong
	}
	edited := false
	for i, m := range msgs {
		if m.Kind() != '{' || !bytes.Contains(m, []byte(`"thinking_blocks"`)) {
			continue
		}
		ms, err := members(m)
		if err != nil {
			return raw, false, nil
		}
		kept := ms[:0:0]
		for _, f := range ms {
			if f.name != "thinking_blocks" {
				kept = append(kept, f)
			}
		}
		if len(kept) != len(ms) {
			msgs[i], edited = writeObject(kept), true
		}
	}
	if !edited {
		return raw, false, nil
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, m := range msgs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(m)
	}
	b.WriteByte(']')
	return b.Bytes(), true, nil
}

// inertContextManagement refuses the context_management edits that would
// change the answer of a provider other than Anthropic.
func inertContextManagement(raw jsontext.Value) error {
	if raw.Kind() == 'n' {
		return nil
	}
	var cm struct {
		Edits []struct {
			Type string `json:"type"`
		} `json:"edits"`
	}
	if err := json.Unmarshal(raw, &cm); err != nil {
		return apperr.Field(apperr.Invalid, "invalid_value", "context_management", "context_management must be an object of edits")
	}
	for i, e := range cm.Edits {
		if !strings.HasPrefix(e.Type, "clear_thinking_") {
			return apperr.Field(apperr.Invalid, "unsupported_parameter", "context_management.edits["+strconv.Itoa(i)+"].type",
				"context_management edit '"+e.Type+"' is made by Anthropic's API alone: it is not supported for this model's provider")
		}
	}
	return nil
}

// thinkingRequest is a thinking object as the formats read it.
type thinkingRequest struct {
	Type         string `json:"type"`
	BudgetTokens *int   `json:"budget_tokens"`
}

func readThinking(raw json.RawMessage) (thinkingRequest, error) {
	var t thinkingRequest
	if err := json.Unmarshal(raw, &t); err != nil {
		return t, apperr.Field(apperr.Invalid, "invalid_value", "thinking", "thinking must be an object with a type")
	}
	return t, nil
}

// The bands of thinking budgets an OpenAI-compatible key hears as
// reasoning efforts.
const (
	lowThinkingBelow    = 4096
	mediumThinkingBelow = 16384
)

// openAIEffort is the reasoning_effort a thinking object asks of an
// OpenAI-compatible model: by budget for enabled thinking, none for
// adaptive or disabled thinking.
func openAIEffort(raw json.RawMessage) (string, error) {
	t, err := readThinking(raw)
	if err != nil || t.Type != "enabled" || t.BudgetTokens == nil {
		return "", err
	}
	switch b := *t.BudgetTokens; {
	case b < lowThinkingBelow:
		return "low", nil
	case b < mediumThinkingBelow:
		return "medium", nil
	}
	return "high", nil
}

// openAIChatBody is a chat body as an OpenAI-compatible provider is sent
// it: the extensions taken out, a thinking budget as reasoning_effort.
func openAIChatBody(body []byte) ([]byte, error) {
	r, err := withoutExtensions(body)
	if err != nil || r.thinking == nil || r.effort {
		return r.body, err
	}
	effort, err := openAIEffort(r.thinking)
	if err != nil || effort == "" {
		return r.body, err
	}
	end := bytes.LastIndexByte(r.body, '}')
	if end < 0 {
		return r.body, nil
	}
	out := make([]byte, 0, len(r.body)+32)
	out = append(out, r.body[:end]...)
	if len(bytes.TrimSpace(r.body[:end])) > 1 { // the object has members
		out = append(out, ',')
	}
	out = append(out, `"reasoning_effort":"`+effort+`"`...)
	return append(out, r.body[end:]...), nil
}
