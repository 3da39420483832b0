package completion

import (
	"bytes"
	"strconv"
	"sync"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/sluicehq/sluice/apperr"
)

// The field names Sluice reads, where it reads them. Go's JSON decoder
// matches names without regard to case (and folds "ſ" to "s" and the
// Kelvin sign to "k"); providers do not. {"max_tokens":100000,"MAX_TOKENS":1}
// would be 1 token to the gateway's reservation and 100000 to the
// provider, so a name that only folds to one of these is refused, as is one
// of these names given twice (parsers disagree on which one wins). Names
// Sluice does not read are the provider's business.
var (
	requestFields = []string{"model", "messages", "max_tokens", "max_completion_tokens", "n", "temperature", "stream", "stream_options"}
	messageFields = []string{"role", "content"}
	partFields    = []string{"type", "text"}
	optionFields  = []string{"include_usage"}
)

// checkKeys refuses a body whose names Sluice and a provider could read
// differently. body has been decoded already, so it is valid JSON.
//
// It reads the body as tokens once more, so it is written not to allocate
// per value: names are compared as the bytes in the body (unquoted only
// when escaped), values Sluice does not look into are skipped whole, and a
// field's path is built only for an error.
func (c *keyChecker) checkKeys(body []byte) error {
	c.read(body)
	err := c.object(requestFields, func(f int) error {
		switch requestFields[f] {
		case "messages":
			return c.array(func(i int) error {
				return c.object(messageFields, func(f int) error {
					if messageFields[f] != "content" {
						return c.dec.SkipValue()
					}
					return c.array(func(j int) error {
						return c.object(partFields, nil, func() string { return "messages[" + itoa(i) + "].content[" + itoa(j) + "]" })
					})
				}, func() string { return "messages[" + itoa(i) + "]" })
			})
		case "stream_options":
			return c.object(optionFields, nil, func() string { return "stream_options" })
		}
		return c.dec.SkipValue()
	}, func() string { return "" })
	if _, ours := err.(*apperr.Error); err != nil && !ours {
		return apperr.Field(apperr.Invalid, "invalid_json", "", "request body is not valid JSON")
	}
	return err
}

func itoa(i int) string { return strconv.Itoa(i) }

// keyChecker reads a request body, to decode it and then to walk its
// objects; name is a buffer for escaped names.
type keyChecker struct {
	body bytes.Reader
	dec  *jsontext.Decoder
	name []byte
}

// keyCheckers keeps decoders for reuse: a fresh one costs several
// allocations per request (its buffers and name stacks).
var keyCheckers = sync.Pool{New: func() any { return &keyChecker{dec: new(jsontext.Decoder)} }}

// read points c's decoder at the start of body: invalid UTF-8 is replaced,
// and a repeated name is left for checkKeys to judge.
func (c *keyChecker) read(body []byte) {
	c.body.Reset(body)
	c.dec.Reset(&c.body, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
}

// object reads an object (or skips any other value), checking each name
// against fields and handing the value of each one of them to value (nil:
// skip it). at is the object's path, for errors only.
func (c *keyChecker) object(fields []string, value func(field int) error, at func() string) error {
	if c.dec.PeekKind() != '{' {
		return c.dec.SkipValue()
	}
	if _, err := c.dec.ReadToken(); err != nil {
		return err
	}
	var seen uint64 // bit f: fields[f] was given
	for c.dec.PeekKind() != '}' {
		raw, err := c.dec.ReadValue()
		if err != nil {
			return err
		}
		name := raw[1 : len(raw)-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			if c.name, err = jsontext.AppendUnquote(c.name[:0], raw); err != nil {
				return err
			}
			name = c.name
		}
		f, exact := fieldOf(fields, name)
		switch {
		case f < 0:
			err = c.dec.SkipValue()
		case !exact:
			param := path(at(), string(name))
			return apperr.Field(apperr.Invalid, "invalid_field_name", param,
				"field names are case-sensitive: send '"+fields[f]+"', not '"+string(name)+"'")
		case seen&(1<<f) != 0:
			param := path(at(), fields[f])
			return apperr.Field(apperr.Invalid, "duplicate_field", param, "field '"+param+"' is given twice; send it once")
		case value == nil:
			seen |= 1 << f
			err = c.dec.SkipValue()
		default:
			seen |= 1 << f
			err = value(f)
		}
		if err != nil {
			return err
		}
	}
	_, err := c.dec.ReadToken() // '}'
	return err
}

// array calls each for every element of an array (or skips any other value).
func (c *keyChecker) array(each func(i int) error) error {
	if c.dec.PeekKind() != '[' {
		return c.dec.SkipValue()
	}
	if _, err := c.dec.ReadToken(); err != nil {
		return err
	}
	for i := 0; c.dec.PeekKind() != ']'; i++ {
		if err := each(i); err != nil {
			return err
		}
	}
	_, err := c.dec.ReadToken() // ']'
	return err
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

func path(at, name string) string {
	if at == "" {
		return name
	}
	return at + "." + name
}
