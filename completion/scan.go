package completion

import (
	"bytes"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/chat"
	"github.com/sluicehq/sluice/internal/jsonwalk"
)

// A chat request body is read in one walk (scanner.request): its JSON is
// checked, the fields Sluice acts on are decoded, every name is checked
// against the ones Sluice reads (see the field lists below), and the
// places of everything a provider bills are noted for the estimate. No
// message text is copied: texts are noted as the offsets of their JSON
// strings in the body, counted afterwards (estimate.go) straight from the
// body, or through one reused buffer when a string has escapes.

// The field names Sluice reads, where it reads them. Go's JSON decoder
// matches names without regard to case (and folds "ſ" to "s" and the
// Kelvin sign to "k"); providers do not. {"max_tokens":100000,"MAX_TOKENS":1}
// would be 1 token to the gateway's reservation and 100000 to the
// provider, so a name that only folds to one of these is refused, as is one
// of these names given twice (parsers disagree on which one wins). Names
// Sluice does not read are the provider's business.
var (
	requestFields = []string{"model", "messages", "max_tokens", "max_completion_tokens", "n", "temperature", "stream", "stream_options",
		"tools", "functions", "tool_choice", "function_call", "response_format", "prediction", "service_tier"}
	messageFields = []string{"role", "content", "name", "tool_calls", "tool_call_id", "function_call", "refusal", "audio", "thinking_blocks"}
	partFields    = []string{"type", "text", "image_url", "input_audio", "file", "refusal"}
	imageFields   = []string{"url", "detail"}
	optionFields  = []string{"include_usage"}
)

// span is where a JSON value lies in the body: body[start:end].
type span struct{ start, end int }

func (s span) in(body []byte) []byte { return body[s.start:s.end] }

// imagePart is an image_url part: where its URL's JSON string is, and the
// detail asked for.
type imagePart struct {
	url    span
	detail string
}

// scan is what one walk of a chat request body found.
type scan struct {
	model                          string
	modelAt                        span // the model's JSON string
	maxTokens, maxCompletionTokens int64
	hasMaxTokens, hasMaxCompletion bool
	n                              int64
	hasN                           bool
	temperature                    *float64
	stream, includeUsage           bool
	streamOptions                  span   // the stream_options value; zero when absent
	serviceTier                    string // "" when absent
	tools                          int64  // tools and functions offered
	end                            int    // offset of the body's closing '}'

	messages int
	// nonText is the first content part that is not text, and its
	// message: what sluice-local refuses.
	nonText   string
	nonTextAt int

	prediction span   // the prediction value; zero when absent
	texts      []span // JSON strings of message text: counted and weighed
	raws       []span // JSON values counted as they are: tools, tool calls, schemas
	// cycle holds the thinking_blocks of the assistant turns since the
	// last user message: the turns of a tool-use cycle still going on,
	// whose thinking Anthropic bills as input. It strips the thinking of
	// earlier turns, so those are not counted; these join raws at the end.
	// A user message right after tool results (Anthropic's user turn of
	// tool_result and text blocks) does not end the cycle: the safe side.
	cycle    []span
	lastRole string
	images   []imagePart
	// fixed is what is counted per message, name, tool and request on top
	// of the texts (see estimate.go).
	fixed int64
	// unbounded is the first part whose cost Sluice cannot bound before
	// the provider answers ("messages[2].content[0]"), unboundedType its
	// type ("input_audio").
	unbounded, unboundedType string
}

// Counted per message, name and tool on top of their text. OpenAI's
// cookbook counts 3 tokens a message and 3 to prime the reply, 1 more for a
// name, 7 to 10 per function and 12 per list of them, all at most these.
const (
	messageOverhead = chat.MessageOverheadTokens
	replyOverhead   = 3
	nameOverhead    = 1
	toolOverhead    = 10
	toolsOverhead   = 12
)

// scanner walks one body; name is a buffer for escaped names. It is kept
// for reuse with its walker's stack and its scan's slices, so a walk
// allocates nothing of its own.
type scanner struct {
	body    []byte
	dec     jsonwalk.Walker
	name    []byte
	scratch []byte // a text unescaped, to count it
	scan    scan
	emb     embedScan // an embeddings body's walk (embeddings.go)
}

var scanners = sync.Pool{New: func() any { return new(scanner) }}

// reset points the scanner at body, read in place.
func (sc *scanner) reset(body []byte) {
	sc.body = body
	sc.dec.Reset(body)
	texts, raws, images, cycle := sc.scan.texts[:0], sc.scan.raws[:0], sc.scan.images[:0], sc.scan.cycle[:0]
	sc.scan = scan{texts: texts, raws: raws, images: images, cycle: cycle}
}

// offset is where the decoder stands in the body.
func (sc *scanner) offset() int { return sc.dec.Offset() }

// request walks a whole chat request body.
func (sc *scanner) request(body []byte) error {
	sc.reset(body)
	s := &sc.scan
	if k, err := sc.dec.Next(); err != nil || k != '{' {
		if err != nil {
			return err
		}
		return errNotObject
	}
	err := sc.object(requestFields, func(f int) error {
		switch requestFields[f] {
		case "model":
			start := sc.peekOffset()
			err := sc.str(&s.model, top("model"))
			s.modelAt = span{start, sc.offset()}
			return err
		case "messages":
			return sc.array(top("messages"), sc.message)
		case "max_tokens":
			return sc.integer(&s.maxTokens, &s.hasMaxTokens, top("max_tokens"))
		case "max_completion_tokens":
			return sc.integer(&s.maxCompletionTokens, &s.hasMaxCompletion, top("max_completion_tokens"))
		case "n":
			return sc.integer(&s.n, &s.hasN, top("n"))
		case "temperature":
			return sc.number(&s.temperature, top("temperature"))
		case "stream":
			return sc.boolean(&s.stream, top("stream"))
		case "stream_options":
			start := sc.peekOffset()
			err := sc.objectOf(top("stream_options"), optionFields, func(int) error {
				return sc.boolean(&s.includeUsage, top("stream_options.include_usage"))
			})
			s.streamOptions = span{start, sc.offset()}
			return err
		case "tools", "functions":
			start, tools := sc.peekOffset(), int64(0)
			err := sc.array(top(requestFields[f]), func(int) error { tools++; return sc.skip() })
			if tools > 0 {
				s.tools += tools
				s.raws = append(s.raws, span{start, sc.offset()})
				s.fixed += toolsOverhead + toolOverhead*tools
			}
			return err
		case "service_tier":
			return sc.str(&s.serviceTier, top("service_tier"))
		case "prediction": // a predicted output: billed as completion tokens
			var err error
			s.prediction, err = sc.value()
			return err
		default: // tool_choice, function_call, response_format
			return sc.counted()
		}
	}, where{msg: -1})
	if err != nil {
		return err
	}
	s.end = sc.offset() - 1
	if !sc.dec.End() {
		return errNotOneObject
	}
	s.raws = append(s.raws, s.cycle...)
	s.fixed += replyOverhead + messageOverhead*int64(s.messages)
	return nil
}

// message walks one element of messages.
func (sc *scanner) message(i int) error {
	s := &sc.scan
	s.messages++
	at := where{msg: i, part: -1}
	var role string
	var thinking span
	err := sc.objectOf(at, messageFields, func(f int) error {
		switch messageFields[f] {
		case "role":
			return sc.str(&role, at.in("role"))
		case "content":
			return sc.content(i)
		case "name":
			s.fixed += nameOverhead
			return sc.text(at.in("name"))
		case "refusal", "tool_call_id":
			return sc.text(at.in(messageFields[f]))
		case "audio": // a reference to an earlier spoken answer: billed as audio
			sc.unboundable(at.in("audio"), "audio")
			return sc.skip()
		case "thinking_blocks": // Anthropic's signed thinking, sent back (counted with its signatures: the safe side)
			var err error
			thinking, err = sc.value()
			return err
		default: // tool_calls, function_call
			return sc.counted()
		}
	})
	if err != nil {
		return err
	}
	last := s.lastRole
	s.lastRole = role
	switch role {
	case "user":
		if last != "tool" {
			s.cycle = s.cycle[:0]
		}
		return nil
	case "system", "developer", "assistant", "tool":
		if thinking.end > 0 && string(thinking.in(sc.body)) != "null" {
			s.cycle = append(s.cycle, thinking)
		}
		return nil
	}
	return apperr.Field(apperr.Invalid, "invalid_role", at.in("role").String(), "role must be one of system, developer, user, assistant, tool")
}

// content walks a message's content: a string, an array of parts, or null.
func (sc *scanner) content(i int) error {
	at := where{msg: i, part: -1, field: "content"}
	switch sc.dec.Kind() {
	case 'n':
		return sc.skip()
	case '"':
		return sc.text(at)
	case '[':
		return sc.array(at, func(j int) error { return sc.part(i, j) })
	}
	if err := sc.skip(); err != nil {
		return err
	}
	return apperr.Field(apperr.Invalid, "invalid_content", at.String(), "content must be a string or an array of content parts")
}

// part walks one content part. Its fields may come in any order, so the
// type is judged at its end.
func (sc *scanner) part(i, j int) error {
	s := &sc.scan
	at := where{msg: i, part: j}
	var kind string
	var text span
	var image imagePart
	hasText, hasImage := false, false
	start := sc.peekOffset()
	err := sc.objectOf(at, partFields, func(f int) error {
		switch partFields[f] {
		case "type":
			return sc.str(&kind, at.in("type"))
		case "text", "refusal":
			if sc.dec.Kind() != '"' {
				return sc.typeError(at.in(partFields[f]), "a string")
			}
			var err error
			text, err = sc.value()
			hasText = true
			return err
		case "image_url":
			hasImage = true
			return sc.imageURL(&image, at.in("image_url"))
		default: // input_audio, file: looked at only by their type
			return sc.skip()
		}
	})
	if err != nil {
		return err
	}
	switch {
	case (kind == "text" || kind == "refusal") && hasText:
		s.texts = append(s.texts, text)
		return nil
	case kind == "text" || kind == "refusal":
		return apperr.Field(apperr.Invalid, "invalid_content", at.String(), "a "+kind+" part needs its '"+kind+"'")
	case kind == "image_url" && hasImage:
		s.images = append(s.images, image)
	case kind == "image_url":
		// An image part without its image: sluice-local names it below, a
		// provider refuses it, and nothing is billed for it.
	default: // input_audio, file, and types Sluice does not know
		sc.unboundable(at, kind)
		// Refused when a limit relies on the estimate; otherwise counted
		// as its JSON, which is no bound but never nothing.
		s.raws = append(s.raws, span{start, sc.offset()})
	}
	if s.nonText == "" {
		s.nonText, s.nonTextAt = kind, i
	}
	return nil
}

// imageURL walks an image_url: {"url": …, "detail": …}.
func (sc *scanner) imageURL(image *imagePart, at where) error {
	return sc.objectOf(at, imageFields, func(f int) error {
		if imageFields[f] == "detail" {
			return sc.str(&image.detail, at.in("detail"))
		}
		if sc.dec.Kind() != '"' {
			return sc.typeError(at.in("url"), "a string")
		}
		var err error
		image.url, err = sc.value()
		return err
	})
}

// unboundable notes a part whose cost Sluice cannot bound before the
// provider answers (audio, files, types it does not know): the request is
// refused when a limit relies on its estimate.
func (sc *scanner) unboundable(at where, kind string) {
	if sc.scan.unbounded == "" {
		sc.scan.unbounded, sc.scan.unboundedType = at.String(), kind
	}
}

// text notes a JSON string (or null) of message text at the decoder.
func (sc *scanner) text(at where) error {
	switch sc.dec.Kind() {
	case 'n':
		return sc.skip()
	case '"':
	default:
		return sc.typeError(at, "a string")
	}
	v, err := sc.value()
	if err == nil {
		sc.scan.texts = append(sc.scan.texts, v)
	}
	return err
}

// counted notes the value at the decoder to be counted as the JSON it is.
func (sc *scanner) counted() error {
	v, err := sc.value()
	if err == nil && string(v.in(sc.body)) != "null" {
		sc.scan.raws = append(sc.scan.raws, v)
	}
	return err
}

// value reads the value at the decoder and says where it is.
func (sc *scanner) value() (span, error) {
	v, err := sc.dec.Value()
	end := sc.offset()
	return span{end - len(v), end}, err
}

// peekOffset is where the next value starts.
func (sc *scanner) peekOffset() int {
	sc.dec.Kind()
	return sc.dec.Offset()
}

// skip reads the next value, whatever it is.
func (sc *scanner) skip() error {
	_, err := sc.dec.Value()
	return err
}

// str decodes a JSON string (null: "") into dst.
func (sc *scanner) str(dst *string, at where) error {
	switch sc.dec.Kind() {
	case 'n':
		return sc.skip()
	case '"':
	default:
		return sc.typeError(at, "a string")
	}
	v, err := sc.dec.Value()
	if err != nil {
		return err
	}
	raw := v[1 : len(v)-1]
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		*dst = string(raw)
		return nil
	}
	*dst = string(jsonwalk.AppendText(nil, raw, -1)) // invalid UTF-8 replaced, as encoding/json does
	return nil
}

// integer decodes a JSON integer (null: absent).
func (sc *scanner) integer(dst *int64, set *bool, at where) error {
	switch sc.dec.Kind() {
	case 'n':
		return sc.skip()
	case '0':
	default:
		return sc.typeError(at, "an integer")
	}
	v, err := sc.dec.Value()
	if err != nil {
		return err
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	switch {
	case err == nil:
	case bytes.ContainsAny(v, ".eE"):
		// The value is read: refused as typeError would, without reading on.
		return apperr.Field(apperr.Invalid, "invalid_json", "", "request body is not valid JSON: field '"+at.String()+"' must be an integer")
	default: // out of int64's range: out of any bound's
		n = maxCompletionTokens + 1
	}
	*dst, *set = n, true
	return nil
}

// number decodes a JSON number (null: nil).
func (sc *scanner) number(dst **float64, at where) error {
	switch sc.dec.Kind() {
	case 'n':
		return sc.skip()
	case '0':
	default:
		return sc.typeError(at, "a number")
	}
	v, err := sc.dec.Value()
	if err != nil {
		return err
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return sc.typeError(at, "a number")
	}
	*dst = &f
	return nil
}

// boolean decodes true or false (null: false).
func (sc *scanner) boolean(dst *bool, at where) error {
	switch sc.dec.Kind() {
	case 'n':
		return sc.skip()
	case 't', 'f':
	default:
		return sc.typeError(at, "true or false")
	}
	v, err := sc.dec.Value()
	*dst = err == nil && v[0] == 't'
	return err
}

// typeError refuses a field of the wrong type, after checking that the
// rest of the body is JSON at all (a syntax error says more).
func (sc *scanner) typeError(at where, want string) error {
	if err := sc.skip(); err != nil {
		return err
	}
	return apperr.Field(apperr.Invalid, "invalid_json", "", "request body is not valid JSON: field '"+at.String()+"' must be "+want)
}

// objectOf is object for a field that must be an object (null: absent).
func (sc *scanner) objectOf(at where, fields []string, value func(field int) error) error {
	switch sc.dec.Kind() {
	case 'n':
		return sc.skip()
	case '{':
		return sc.object(fields, value, at)
	}
	return sc.typeError(at, "an object")
}

// array calls each for every element of an array (null: none).
func (sc *scanner) array(at where, each func(i int) error) error {
	switch sc.dec.Kind() {
	case 'n':
		return sc.skip()
	case '[':
	default:
		return sc.typeError(at, "an array")
	}
	if err := sc.dec.Open(); err != nil {
		return err
	}
	for i := 0; ; i++ {
		k, err := sc.dec.Next()
		if err != nil {
			return err
		}
		if k == ']' {
			return sc.dec.Close()
		}
		if err := each(i); err != nil {
			return err
		}
	}
}

// object reads an object, checking each name against fields and handing
// the value of each one of them to value; other names' values are
// skipped. at is the object's place, for errors only.
func (sc *scanner) object(fields []string, value func(field int) error, at where) error {
	if err := sc.dec.Open(); err != nil { // '{'
		return err
	}
	var seen uint64 // bit f: fields[f] was given
	for {
		k, err := sc.dec.Next()
		if err != nil {
			return err
		}
		if k == '}' {
			return sc.dec.Close()
		}
		raw, err := sc.dec.Name()
		if err != nil {
			return err
		}
		name := raw[1 : len(raw)-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			sc.name = jsonwalk.AppendText(sc.name[:0], name, -1)
			name = sc.name
		}
		f, exact := fieldOf(fields, name)
		switch {
		case f < 0:
			err = sc.skip()
		case !exact:
			param := at.in(string(name)).String()
			return apperr.Field(apperr.Invalid, "invalid_field_name", param,
				"field names are case-sensitive: send '"+fields[f]+"', not '"+string(name)+"'")
		case seen&(1<<f) != 0:
			param := at.in(fields[f]).String()
			return apperr.Field(apperr.Invalid, "duplicate_field", param, "field '"+param+"' is given twice; send it once")
		default:
			seen |= 1 << f
			err = value(f)
		}
		if err != nil {
			return err
		}
	}
}

// fieldOf finds name among fields: its index and whether it matched
// exactly, or -1 when it is none of them even folded.
func fieldOf(fields []string, name []byte) (int, bool) {
	folded := -1
	for f, field := range fields {
		if string(name) == field {
			return f, true
		}
		if folded < 0 && bytes.EqualFold(name, []byte(field)) {
			folded = f
		}
	}
	return folded, false
}

// where is a place in the body, for errors: a top-level field (msg -1),
// a message's field (part -1) or a content part's, written out only when an
// error names it, so the walk builds no paths.
type where struct {
	msg, part int
	field     string // "" for the message or part itself; may be dotted
}

func top(field string) where { return where{msg: -1, field: field} }

// in is the place of a field inside w.
func (w where) in(field string) where {
	if w.field != "" {
		field = w.field + "." + field
	}
	w.field = field
	return w
}

func (w where) String() string {
	if w.msg < 0 {
		return w.field
	}
	s := "messages[" + itoa(w.msg) + "]"
	if w.part >= 0 {
		s += ".content[" + itoa(w.part) + "]"
	}
	if w.field != "" {
		s += "." + w.field
	}
	return s
}

func itoa(i int) string { return strconv.Itoa(i) }
