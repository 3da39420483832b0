package messages

import (
	"github.com/sluicehq/sluice/internal/jsonwalk"
)

// The common path's content: the system prompt, the messages and their
// blocks (common.go).

// appendSystem writes the system prompt's message: a string, or its text
// blocks as parts (none: no message).
func (c *common) appendSystem(out []byte) ([]byte, bool) {
	if c.system[0] == '"' {
		out = append(out, `{"role":"system","content":`...)
		out = append(c.appendString(out, c.system), '}')
		c.origins = append(c.origins, "system")
		return out, true
	}
	v := &c.v
	v.Reset(c.system)
	if v.Open() != nil {
		return out, false
	}
	c.parts = c.parts[:0]
	if _, ok := elements(v, func(int) bool {
		typ, ok := c.blockType(v)
		return ok && typ == bText && c.textPart(v)
	}); !ok {
		return out, false
	}
	if len(c.parts) > 0 {
		out = append(out, `{"role":"system","content":[`...)
		out = append(append(out, c.parts...), "]}"...)
		c.origins = append(c.origins, "system")
	}
	return out, true
}

// appendTurns writes the messages' chat messages after those from start.
func (c *common) appendTurns(out []byte, start int) ([]byte, bool) {
	v := &c.v
	v.Reset(c.messages)
	if v.Open() != nil {
		return out, false
	}
	n, ok := elements(v, func(i int) bool {
		var ok bool
		out, ok = c.appendTurn(out, start, i)
		return ok
	})
	return out, ok && n > 0 // at least one message is required
}

// appendTurn writes message i (the walker at it).
func (c *common) appendTurn(out []byte, start, i int) ([]byte, bool) {
	v := &c.v
	if v.Kind() != '{' || v.Open() != nil {
		return out, false
	}
	var role, content []byte
	for {
		k, err := v.Next()
		if err != nil {
			return out, false
		}
		if k == '}' {
			break
		}
		name, err := v.Name()
		if err != nil {
			return out, false
		}
		switch string(name) {
		case `"role"`:
			if role != nil {
				return out, false
			}
			if role, err = v.Value(); err != nil {
				return out, false
			}
		case `"content"`:
			if content != nil || v.Kind() == 'n' {
				return out, false
			}
			switch v.Kind() {
			case '"':
				if content, err = v.Value(); err != nil {
					return out, false
				}
			case '[':
				// Read where it is, after the role: a turn must
				// have its role first to take blocks.
				if role == nil {
					return out, false
				}
				content = blocksRead
				var ok bool
				if out, ok = c.appendBlocks(out, start, v, role, at("messages", i)); !ok {
					return out, false
				}
			default:
				return out, false
			}
		default:
			return out, false
		}
	}
	if v.Close() != nil || content == nil {
		return out, false
	}
	if string(role) != `"user"` && string(role) != `"assistant"` {
		return out, false
	}
	if content[0] == '"' {
		out = c.comma(out, start)
		out = append(append(out, `{"role":`...), role...)
		out = append(c.appendString(append(out, `,"content":`...), content), '}')
		c.origins = append(c.origins, at("messages", i))
	}
	return out, true
}

// comma writes the comma before a message, unless it is the first.
func (c *common) comma(out []byte, start int) []byte {
	if len(out) > start {
		out = append(out, ',')
	}
	return out
}

// blocksRead stands for a content of blocks, read and written where it
// was met.
var blocksRead = []byte("[")

// Block types, as read.
const (
	bOther = iota
	bText
	bImage
	bToolUse
	bToolResult
	bThinking
	bRedacted
)

// appendBlocks reads a turn's content blocks (the walker at the array)
// and writes what they translate into: its tool results' tool messages,
// then its own message. role is quoted.
func (c *common) appendBlocks(out []byte, start int, v *jsonwalk.Walker, role []byte, path string) ([]byte, bool) {
	user := string(role) == `"user"`
	if !user && string(role) != `"assistant"` {
		return out, false
	}
	if v.Open() != nil {
		return out, false
	}
	c.parts, c.calls, c.blocks, c.partsFrom = c.parts[:0], c.calls[:0], c.blocks[:0], 0
	n, ok := elements(v, func(n int) bool {
		typ, ok := c.blockType(v)
		if !ok {
			return false
		}
		switch {
		case typ == bText:
			return c.textPart(v)
		case typ == bImage && user:
			return c.imagePart(v, at(path+".content", n))
		case typ == bToolUse && !user:
			return c.toolCall(v)
		case typ == bToolResult && user:
			out = c.comma(out, start)
			out, ok = c.toolResult(out, v, at(path+".content", n))
			c.origins = append(c.origins, path)
			return ok
		case (typ == bThinking || typ == bRedacted) && !user && len(c.parts) == 0 && len(c.calls) == 0:
			return c.thinkingBlock(v, typ)
		}
		return false
	})
	if !ok {
		return out, false
	}
	var content string
	switch {
	case len(c.calls) > 0:
		content = "null"
		if len(c.parts) > 0 {
			content = ""
		}
	case len(c.parts) > 0:
	case n == 0 || len(c.blocks) > 0:
		content = `""`
	default:
		return out, true // tool results alone: their tool messages
	}
	out = c.comma(out, start)
	out = append(append(out, `{"role":`...), role...)
	out = append(out, `,"content":`...)
	if content == "" {
		out = append(append(append(out, '['), c.parts...), ']')
	} else {
		out = append(out, content...)
	}
	if len(c.calls) > 0 {
		out = append(append(append(out, `,"tool_calls":[`...), c.calls...), ']')
	}
	if len(c.blocks) > 0 {
		out = append(append(append(out, `,"thinking_blocks":[`...), c.blocks...), ']')
	}
	c.origins = append(c.origins, path)
	return append(out, '}'), true
}

// blockType reads a block's type, which must be its first member: the
// walker is left after it, inside the block.
func (c *common) blockType(v *jsonwalk.Walker) (int, bool) {
	if v.Kind() != '{' || v.Open() != nil {
		return 0, false
	}
	if k, err := v.Next(); err != nil || k == '}' {
		return 0, false
	}
	name, err := v.Name()
	if err != nil || string(name) != `"type"` {
		return 0, false
	}
	t, err := v.Value()
	if err != nil {
		return 0, false
	}
	switch string(t) {
	case `"text"`:
		return bText, true
	case `"image"`:
		return bImage, true
	case `"tool_use"`:
		return bToolUse, true
	case `"tool_result"`:
		return bToolResult, true
	case `"thinking"`:
		return bThinking, true
	case `"redacted_thinking"`:
		return bRedacted, true
	}
	return bOther, true
}

// members reads the rest of an object whose names are among names, each
// at most once: fn is called with each name's index, the walker at its
// value, which fn must read. The object's end is read too.
func members(v *jsonwalk.Walker, names []string, fn func(i int) bool) bool {
	var seen uint32
	for {
		k, err := v.Next()
		if err != nil {
			return false
		}
		if k == '}' {
			return v.Close() == nil
		}
		name, err := v.Name()
		if err != nil || v.Kind() == 'n' {
			return false
		}
		i := -1
		for j, n := range names {
			if len(name) == len(n)+2 && string(name[1:len(name)-1]) == n {
				i = j
				break
			}
		}
		if i < 0 || seen&(1<<i) != 0 {
			return false
		}
		seen |= 1 << i
		if !fn(i) {
			return false
		}
	}
}

// elements walks the array the walker has just opened, calling fn with
// each element's index, the walker at the element; it answers how many
// there were, and false on bad JSON or an element fn declines.
func elements(v *jsonwalk.Walker, fn func(i int) bool) (int, bool) {
	for i := 0; ; i++ {
		k, err := v.Next()
		if err != nil {
			return i, false
		}
		if k == ']' {
			return i, v.Close() == nil
		}
		if !fn(i) {
			return i, false
		}
	}
}

// str reads a string value.
func str(v *jsonwalk.Walker) ([]byte, bool) {
	if v.Kind() != '"' {
		return nil, false
	}
	s, err := v.Value()
	return s, err == nil
}

// opaque reads a value the chat body carries as written (compacted): an
// object, every object in it with names given once.
func (c *common) opaque(v *jsonwalk.Walker) ([]byte, bool) {
	if v.Kind() != '{' {
		return nil, false
	}
	raw, err := v.Value()
	if err != nil || !c.unique(raw) {
		return nil, false
	}
	return raw, true
}

// textPart reads a text block after its type and writes its part.
func (c *common) textPart(v *jsonwalk.Walker) bool {
	var text, cache []byte
	ok := members(v, []string{"text", "cache_control"}, func(i int) bool {
		var ok bool
		if i == 0 {
			text, ok = str(v)
		} else {
			cache, ok = c.opaque(v)
		}
		return ok
	})
	if !ok || text == nil {
		return false
	}
	c.parts = c.partComma()
	c.parts = append(c.parts, `{"type":"text","text":`...)
	c.parts = c.appendString(c.parts, text)
	return c.closePart(cache)
}

// partComma is c.parts with the comma before a part, unless it is the
// first of its list.
func (c *common) partComma() []byte {
	if len(c.parts) > c.partsFrom {
		return append(c.parts, ',')
	}
	return c.parts
}

// closePart ends a part with its cache_control, if it has one.
func (c *common) closePart(cache []byte) bool {
	if cache != nil {
		c.parts = appendCompact(append(c.parts, `,"cache_control":`...), cache)
	}
	c.parts = append(c.parts, '}')
	c.lastCached = cache != nil
	return true
}

// imagePart reads an image block after its type and writes its part.
func (c *common) imagePart(v *jsonwalk.Walker, path string) bool {
	var typ, mediaType, data, url, cache []byte
	source := false
	ok := members(v, []string{"source", "cache_control"}, func(i int) bool {
		if i == 1 {
			var ok bool
			cache, ok = c.opaque(v)
			return ok
		}
		source = true
		if v.Kind() != '{' || v.Open() != nil {
			return false
		}
		return members(v, []string{"type", "media_type", "data", "url"}, func(i int) bool {
			s, ok := str(v)
			switch i {
			case 0:
				typ = s
			case 1:
				mediaType = s
			case 2:
				data = s
			default:
				url = s
			}
			return ok
		})
	})
	if !ok || !source {
		return false
	}
	c.parts = c.partComma()
	c.parts = append(c.parts, `{"type":"image_url","image_url":{"url":`...)
	switch string(typ) {
	case `"base64"`:
		switch string(mediaType) {
		case `"image/jpeg"`, `"image/png"`, `"image/gif"`, `"image/webp"`:
		default:
			return false
		}
		if url != nil || len(data) <= 2 {
			return false
		}
		c.parts = append(c.parts, `"data:`...)
		c.parts = append(c.parts, mediaType[1:len(mediaType)-1]...)
		c.parts = append(c.parts, `;base64,`...)
		c.parts = append(c.appendContents(c.parts, data), '"')
	case `"url"`:
		if mediaType != nil || data != nil || len(url) <= 2 {
			return false
		}
		c.parts = c.appendString(c.parts, url)
	default:
		return false
	}
	c.parts = append(c.parts, '}')
	if c.firstImage == "" {
		c.firstImage = path
	}
	return c.closePart(cache)
}

// toolCall reads a tool_use block after its type and writes its call.
func (c *common) toolCall(v *jsonwalk.Walker) bool {
	var id, name, input []byte
	ok := members(v, []string{"id", "name", "input"}, func(i int) bool {
		var ok bool
		switch i {
		case 0:
			id, ok = str(v)
		case 1:
			name, ok = str(v)
		default:
			input, ok = c.opaque(v)
		}
		return ok
	})
	if !ok || len(id) <= 2 || len(name) <= 2 || input == nil {
		return false
	}
	if len(c.calls) > 0 {
		c.calls = append(c.calls, ',')
	}
	c.calls = c.appendString(append(c.calls, `{"id":`...), id)
	c.calls = c.appendString(append(c.calls, `,"type":"function","function":{"name":`...), name)
	c.text = appendCompact(c.text[:0], input)
	c.calls = appendQuoted(append(c.calls, `,"arguments":`...), c.text)
	c.calls = append(c.calls, "}}"...)
	return true
}

// toolResult reads a tool_result block after its type and writes its
// tool message: its content "", a string or text and image parts, the
// block's cache_control on the last part (a text part made for it if
// need be).
func (c *common) toolResult(out []byte, v *jsonwalk.Walker, path string) ([]byte, bool) {
	var id, content, cache []byte
	isError := false
	// The result's parts are written after the turn's, and taken back
	// once its message is written.
	mark, from := len(c.parts), c.partsFrom
	defer func() { c.parts, c.partsFrom = c.parts[:mark], from }()
	c.partsFrom, c.lastCached = mark, false
	ok := members(v, []string{"tool_use_id", "content", "is_error", "cache_control"}, func(i int) bool {
		var ok bool
		switch i {
		case 0:
			id, ok = str(v)
		case 1:
			switch v.Kind() {
			case '"':
				content, ok = str(v)
			case '[':
				content, ok = blocksRead, c.resultParts(v, path+".content")
			}
		case 2:
			isError, ok = boolean(v)
		default:
			cache, ok = c.opaque(v)
		}
		return ok
	})
	if !ok || len(id) <= 2 {
		return out, false
	}
	parts := c.parts[mark:]
	out = append(out, `{"role":"tool","content":`...)
	switch {
	case cache == nil && content == nil:
		out = append(out, `""`...)
	case cache == nil && content[0] == '"':
		out = c.appendString(out, content)
	case cache == nil:
		out = append(append(append(out, '['), parts...), ']')
	case len(parts) > 0:
		if c.lastCached {
			return out, false // the block's would replace the part's own
		}
		out = append(append(out, '['), parts[:len(parts)-1]...) // the last part without its brace
		out = appendCompact(append(out, `,"cache_control":`...), cache)
		out = append(out, "}]"...)
	default:
		out = append(out, `[{"type":"text","text":`...)
		if content != nil && content[0] == '"' {
			out = c.appendString(out, content)
		} else {
			out = append(out, `""`...)
		}
		out = appendCompact(append(out, `,"cache_control":`...), cache)
		out = append(out, "}]"...)
	}
	out = c.appendString(append(out, `,"tool_call_id":`...), id)
	if isError {
		out = append(out, `,"is_error":true`...)
	}
	return append(out, '}'), true
}

// boolean reads true or false.
func boolean(v *jsonwalk.Walker) (bool, bool) {
	k := v.Kind()
	if k != 't' && k != 'f' {
		return false, false
	}
	_, err := v.Value()
	return k == 't', err == nil
}

// resultParts reads a tool_result's content blocks, text and images, as
// parts.
func (c *common) resultParts(v *jsonwalk.Walker, path string) bool {
	if v.Open() != nil {
		return false
	}
	for k := 0; ; k++ {
		next, err := v.Next()
		if err != nil {
			return false
		}
		if next == ']' {
			return v.Close() == nil
		}
		typ, ok := c.blockType(v)
		switch {
		case !ok:
		case typ == bText:
			ok = c.textPart(v)
		case typ == bImage:
			ok = c.imagePart(v, at(path, k))
		default:
			ok = false
		}
		if !ok {
			return false
		}
	}
}

// thinkingBlock reads a thinking or redacted_thinking block after its
// type and writes it as the chat form carries it.
func (c *common) thinkingBlock(v *jsonwalk.Walker, typ int) bool {
	var thinking, signature, data []byte
	names := []string{"thinking", "signature"}
	if typ == bRedacted {
		names = []string{"data"}
	}
	ok := members(v, names, func(i int) bool {
		s, ok := str(v)
		switch {
		case typ == bRedacted:
			data = s
		case i == 0:
			thinking = s
		default:
			signature = s
		}
		return ok
	})
	if !ok {
		return false
	}
	if len(c.blocks) > 0 {
		c.blocks = append(c.blocks, ',')
	}
	if typ == bRedacted {
		if len(data) <= 2 {
			return false
		}
		c.blocks = c.appendString(append(c.blocks, `{"type":"redacted_thinking","data":`...), data)
		c.blocks = append(c.blocks, '}')
		return true
	}
	if thinking == nil || signature == nil {
		return false
	}
	c.blocks = c.appendString(append(c.blocks, `{"type":"thinking","thinking":`...), thinking)
	c.blocks = c.appendString(append(c.blocks, `,"signature":`...), signature)
	c.blocks = append(c.blocks, '}')
	return true
}
