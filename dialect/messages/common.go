package messages

import (
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/jsonwalk"
)

// The common request, translated in one walk.
//
// ToChat's general path decodes a body with reflection, part by part (the
// request, each message's content, each block three times over), and
// writes the chat body with encoding/json: on the hot path that was most
// of what a Messages request cost beyond a chat completion. Most bodies
// use a small part of the API, so translateCommon reads those in place
// (internal/jsonwalk) and appends the chat body as it goes, and gives up
// on anything else: a field it does not read, a null, a name given twice
// or with an escape in it, a value out of range, an escaped surrogate or
// invalid UTF-8 anywhere. It gives up rather than refuses: the general
// path then reads the body again, translates it or names what is wrong.
//
// What it translates it translates exactly as the general path does: the
// same chat body byte for byte (strings re-quoted as encoding/json quotes
// them, raw JSON compacted as encoding/json compacts it, numbers written
// as it writes them) and the same Translation. TestCommonIsTheGeneralPath
// and FuzzCommonIsTheGeneralPath hold it to that.
//
// What it reads: model, max_tokens, system (a string or text blocks),
// messages (a string, or text, image, tool_use, tool_result, thinking and
// redacted_thinking blocks), temperature, top_p, top_k, stop_sequences,
// stream, metadata.user_id, client tools, tool_choice and thinking.
// output_config, context_management and the features Sluice refuses are
// left to the general path.

// translateCommon is the translation of body when it is a common request;
// ok is false when it is not, and the general path must read it.
func translateCommon(body []byte, opts Options) (tr Translation, ok bool) {
	if !utf8.Valid(body) || surrogateEscape(body) {
		return Translation{}, false
	}
	c := commons.Get().(*common)
	defer c.put()
	if !c.top(body) {
		return Translation{}, false
	}
	return c.translate(body, opts)
}

// common is one translation's state, pooled: the walkers, the values of
// the top level, and the scratch a turn is assembled in.
type common struct {
	w jsonwalk.Walker // the top level
	v jsonwalk.Walker // a value of it
	u jsonwalk.Walker // an opaque value checked for repeated names

	model, system, messages, stop, metadata, tools, toolChoice, thinking []byte
	maxTokens, topK                                                      int64
	temperature, topP                                                    float64
	seen                                                                 uint32 // the f… bits of the fields read

	parts, calls, blocks []byte // one turn's content, tool calls and thinking blocks
	partsFrom            int    // where the list of parts being written starts in parts
	lastCached           bool   // the last part written has a cache_control
	text                 []byte // a string's text, unescaped
	names                [][]byte
	origins              []string
	firstImage           string
}

var commons = sync.Pool{New: func() any { return new(common) }}

// put returns c to the pool, holding nothing of the body it read and no
// scratch a very large body grew.
func (c *common) put() {
	keep := func(b []byte) []byte {
		if cap(b) > 64<<10 {
			return nil
		}
		return b[:0]
	}
	clear(c.names[:cap(c.names)])
	out := common{parts: keep(c.parts), calls: keep(c.calls), blocks: keep(c.blocks), text: keep(c.text), names: c.names[:0]}
	out.w, out.v, out.u = c.w, c.v, c.u
	out.w.Reset(nil)
	out.v.Reset(nil)
	out.u.Reset(nil)
	*c = out
	commons.Put(c)
}

// The top-level fields read, as bits of common.seen.
const (
	fModel uint32 = 1 << iota
	fMaxTokens
	fSystem
	fMessages
	fTemperature
	fTopP
	fTopK
	fStop
	fStream
	fStreamTrue
	fMetadata
	fTools
	fToolChoice
	fThinking
)

// top reads the top level: each field once, each value of the kind it
// must be, and nothing else.
func (c *common) top(body []byte) bool {
	w := &c.w
	w.Reset(body)
	if w.Kind() != '{' || w.Open() != nil {
		return false
	}
	for {
		k, err := w.Next()
		if err != nil {
			return false
		}
		if k == '}' {
			break
		}
		name, err := w.Name()
		if err != nil {
			return false
		}
		kind := w.Kind()
		v, err := w.Value()
		if err != nil || kind == 'n' {
			return false
		}
		var bit uint32
		ok := true
		switch string(name) {
		case `"model"`:
			bit, c.model = fModel, v
			if kind != '"' || len(v) <= 2 {
				return false
			}
		case `"max_tokens"`:
			bit = fMaxTokens
			if c.maxTokens, ok = count(v); !ok || c.maxTokens < 1 {
				return false
			}
		case `"system"`:
			bit, c.system = fSystem, v
			if kind != '"' && kind != '[' {
				return false
			}
		case `"messages"`:
			bit, c.messages = fMessages, v
			if kind != '[' {
				return false
			}
		case `"temperature"`:
			bit = fTemperature
			if c.temperature, ok = unit(kind, v); !ok {
				return false
			}
		case `"top_p"`:
			bit = fTopP
			if c.topP, ok = unit(kind, v); !ok {
				return false
			}
		case `"top_k"`:
			bit = fTopK
			if c.topK, ok = count(v); !ok {
				return false
			}
		case `"stop_sequences"`:
			bit, c.stop = fStop, v
			if kind != '[' {
				return false
			}
		case `"stream"`:
			bit = fStream
			switch kind {
			case 't':
				c.seen |= fStreamTrue
			case 'f':
			default:
				return false
			}
		case `"metadata"`:
			bit, c.metadata = fMetadata, v
			if kind != '{' {
				return false
			}
		case `"tools"`:
			bit, c.tools = fTools, v
			if kind != '[' {
				return false
			}
		case `"tool_choice"`:
			bit, c.toolChoice = fToolChoice, v
			if kind != '{' {
				return false
			}
		case `"thinking"`:
			bit, c.thinking = fThinking, v
			if kind != '{' {
				return false
			}
		default:
			return false
		}
		if c.seen&bit != 0 {
			return false
		}
		c.seen |= bit
	}
	if w.Close() != nil || !w.End() {
		return false
	}
	return c.seen&fModel != 0 && c.seen&fMessages != 0
}

// translate writes the chat body of the top level read.
func (c *common) translate(body []byte, opts Options) (Translation, bool) {
	if c.seen&fMaxTokens == 0 && !opts.CountOnly {
		return Translation{}, false
	}
	model, ok := c.plain(c.model)
	if !ok {
		return Translation{}, false
	}
	thinkingType, ok := c.checkThinking(opts)
	if !ok {
		return Translation{}, false
	}
	out := make([]byte, 0, len(body)+len(body)/8+64)
	out = append(out, `{"model":`...)
	out = c.appendString(out, c.model)
	out = append(out, `,"messages":[`...)
	start := len(out)
	if c.seen&fSystem != 0 {
		if out, ok = c.appendSystem(out); !ok {
			return Translation{}, false
		}
	}
	if out, ok = c.appendTurns(out, start); !ok {
		return Translation{}, false
	}
	out = append(out, ']')
	if c.seen&fMaxTokens != 0 {
		field := "max_tokens"
		if opts.BoundField != nil {
			field = opts.BoundField(model)
		}
		if field == "max_completion_tokens" {
			out = append(out, `,"max_completion_tokens":`...)
		} else {
			out = append(out, `,"max_tokens":`...)
		}
		out = strconv.AppendInt(out, c.maxTokens, 10)
	}
	if c.seen&fTemperature != 0 {
		out = appendFloat(append(out, `,"temperature":`...), c.temperature)
	}
	if c.seen&fTopP != 0 {
		out = appendFloat(append(out, `,"top_p":`...), c.topP)
	}
	if c.seen&fTopK != 0 {
		out = strconv.AppendInt(append(out, `,"top_k":`...), c.topK, 10)
	}
	if c.seen&fStop != 0 {
		if out, ok = c.appendStop(out); !ok {
			return Translation{}, false
		}
	}
	if c.seen&fMetadata != 0 {
		if out, ok = c.appendUser(out); !ok {
			return Translation{}, false
		}
	}
	stream := !opts.CountOnly && c.seen&fStreamTrue != 0
	if stream {
		out = append(out, `,"stream":true,"stream_options":{"include_usage":true}`...)
	}
	if c.seen&fTools != 0 {
		if out, ok = c.appendTools(out); !ok {
			return Translation{}, false
		}
	}
	if c.seen&fToolChoice != 0 {
		if out, ok = c.appendToolChoice(out); !ok {
			return Translation{}, false
		}
	}
	if c.seen&fThinking != 0 {
		out = appendCompact(append(out, `,"thinking":`...), c.thinking)
	}
	if len(opts.Betas) > 0 {
		out = append(out, `,"anthropic_beta":[`...)
		for i, b := range opts.Betas {
			if i > 0 {
				out = append(out, ',')
			}
			out = appendQuoted(out, b)
		}
		out = append(out, ']')
	}
	out = append(out, '}')
	return Translation{Chat: out, Model: model, Stream: stream, Origins: c.origins, FirstImage: c.firstImage, Thinking: thinkingType}, true
}

// appendStop writes stop_sequences as stop (none: nothing).
func (c *common) appendStop(out []byte) ([]byte, bool) {
	return c.appendList(out, c.stop, "stop", func(out []byte) ([]byte, bool) {
		s, ok := str(&c.v)
		if !ok {
			return out, false
		}
		return c.appendString(out, s), true
	})
}

// appendList writes the array raw as the chat body's field, each element
// by item (the walker at it); an empty array writes nothing.
func (c *common) appendList(out, raw []byte, field string, item func(out []byte) ([]byte, bool)) ([]byte, bool) {
	v := &c.v
	v.Reset(raw)
	if v.Open() != nil {
		return out, false
	}
	mark := len(out)
	out = append(append(append(out, `,"`...), field...), `":[`...)
	n, ok := elements(v, func(n int) bool {
		if n > 0 {
			out = append(out, ',')
		}
		var ok bool
		out, ok = item(out)
		return ok
	})
	if !ok {
		return out, false
	}
	if n == 0 {
		return out[:mark], true
	}
	return append(out, ']'), true
}

// appendUser writes metadata.user_id as user ("" or none: nothing).
func (c *common) appendUser(out []byte) ([]byte, bool) {
	v := &c.v
	v.Reset(c.metadata)
	if v.Open() != nil {
		return out, false
	}
	var user []byte
	ok := members(v, []string{"user_id"}, func(int) bool {
		var ok bool
		user, ok = str(v)
		return ok
	})
	if !ok {
		return out, false
	}
	if len(user) > 2 {
		out = c.appendString(append(out, `,"user":`...), user)
	}
	return out, true
}

// appendTools writes the client tools (none: nothing).
func (c *common) appendTools(out []byte) ([]byte, bool) {
	return c.appendList(out, c.tools, "tools", c.appendTool)
}

// appendTool writes one client tool as a function (the walker at it).
func (c *common) appendTool(out []byte) ([]byte, bool) {
	v := &c.v
	if v.Kind() != '{' || v.Open() != nil {
		return out, false
	}
	var typ, name, description, schema, cache []byte
	ok := members(v, []string{"type", "name", "description", "input_schema", "cache_control"}, func(i int) bool {
		var ok bool
		switch i {
		case 0:
			typ, ok = str(v)
		case 1:
			name, ok = str(v)
		case 2:
			description, ok = str(v)
		case 3:
			schema, ok = c.opaque(v)
		default:
			cache, ok = c.opaque(v)
		}
		return ok
	})
	if !ok || typ != nil && string(typ) != `"custom"` || len(name) <= 2 || schema == nil {
		return out, false
	}
	out = c.appendString(append(out, `{"type":"function","function":{"name":`...), name)
	if len(description) > 2 {
		out = c.appendString(append(out, `,"description":`...), description)
	}
	out = appendCompact(append(out, `,"parameters":`...), schema)
	out = append(out, '}')
	if cache != nil {
		out = appendCompact(append(out, `,"cache_control":`...), cache)
	}
	return append(out, '}'), true
}

// appendToolChoice writes tool_choice, and parallel_tool_calls false when
// parallel tool use is off.
func (c *common) appendToolChoice(out []byte) ([]byte, bool) {
	v := &c.v
	v.Reset(c.toolChoice)
	if v.Open() != nil {
		return out, false
	}
	var typ, name []byte
	serial := false
	ok := members(v, []string{"type", "name", "disable_parallel_tool_use"}, func(i int) bool {
		var ok bool
		switch i {
		case 0:
			typ, ok = str(v)
		case 1:
			name, ok = str(v)
		default:
			serial, ok = boolean(v)
		}
		return ok
	})
	if !ok || name != nil && string(typ) != `"tool"` {
		return out, false
	}
	switch string(typ) {
	case `"auto"`:
		out = append(out, `,"tool_choice":"auto"`...)
	case `"any"`:
		out = append(out, `,"tool_choice":"required"`...)
	case `"none"`:
		return append(out, `,"tool_choice":"none"`...), true
	case `"tool"`:
		if len(name) <= 2 {
			return out, false
		}
		out = c.appendString(append(out, `,"tool_choice":{"function":{"name":`...), name)
		out = append(out, `},"type":"function"}`...)
	default:
		return out, false
	}
	if serial {
		out = append(out, `,"parallel_tool_calls":false`...)
	}
	return out, true
}

// checkThinking checks the thinking object against Anthropic's rules
// (checkThinking of the general path: what breaks one is left to it) and
// returns its type.
func (c *common) checkThinking(opts Options) (string, bool) {
	if c.seen&fThinking == 0 {
		return "", true
	}
	v := &c.v
	v.Reset(c.thinking)
	if v.Open() != nil {
		return "", false
	}
	var typ, display []byte
	budget, hasBudget := int64(0), false
	ok := members(v, []string{"type", "budget_tokens", "display"}, func(i int) bool {
		var ok bool
		switch i {
		case 0:
			typ, ok = str(v)
		case 1:
			raw, err := v.Value()
			budget, ok = count(raw)
			ok, hasBudget = ok && err == nil, true
		default:
			display, ok = str(v)
		}
		return ok
	})
	if !ok || !v.End() {
		return "", false
	}
	switch string(typ) {
	case `"enabled"`:
		if !hasBudget || budget < minThinkingBudget ||
			c.seen&fMaxTokens != 0 && budget >= c.maxTokens && !interleaved(opts.Betas) {
			return "", false
		}
	case `"adaptive"`, `"disabled"`:
		if hasBudget || display != nil && string(typ) == `"disabled"` {
			return "", false
		}
	default:
		return "", false
	}
	if display != nil && string(display) != `"summarized"` && string(display) != `"omitted"` {
		return "", false
	}
	return string(typ[1 : len(typ)-1]), true
}
