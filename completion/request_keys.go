package completion

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/apperr"
)

// The field names Sluice reads, where it reads them. Go's JSON decoder
// matches names without regard to case (and folds "ſ" to "s" and the
// Kelvin sign to "k"); providers do not. {"max_tokens":100000,"MAX_TOKENS":1}
// would be 1 token to the gateway's reservation and 100000 to the
// provider, so a name that only folds to one of these is refused, as is a
// name given twice (parsers disagree on which one wins).
var (
	requestFields = []string{"model", "messages", "max_tokens", "max_completion_tokens", "n", "temperature", "stream", "stream_options"}
	messageFields = []string{"role", "content"}
	partFields    = []string{"type", "text"}
	optionFields  = []string{"include_usage"}
)

// checkKeys refuses a body whose names Sluice and a provider could read
// differently. body has been decoded already, so it is valid JSON.
func checkKeys(body []byte) error {
	err := checkNames(json.NewDecoder(bytes.NewReader(body)))
	if _, ours := err.(*apperr.Error); err != nil && !ours {
		return apperr.Field(apperr.Invalid, "invalid_json", "", "request body is not valid JSON")
	}
	return err
}

func checkNames(dec *json.Decoder) error {
	return keysOf(dec, "", requestFields, func(name, param string) error {
		switch name {
		case "messages":
			return eachElement(dec, param, func(param string) error {
				return keysOf(dec, param, messageFields, func(name, param string) error {
					if name == "content" {
						return eachElement(dec, param, func(param string) error {
							return keysOf(dec, param, partFields, nil)
						})
					}
					return skip(dec)
				})
			})
		case "stream_options":
			return keysOf(dec, param, optionFields, nil)
		}
		return skip(dec)
	})
}

// keysOf reads an object (or skips any other value), checking each name
// against fields and handing each field's value to value (nil: skip it).
func keysOf(dec *json.Decoder, at string, fields []string, value func(name, param string) error) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != json.Delim('{') {
		return skipRest(dec, tok)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		name := tok.(string)
		param := name
		if at != "" {
			param = at + "." + name
		}
		if seen[name] {
			return apperr.Field(apperr.Invalid, "duplicate_field", param, "field '"+param+"' is given twice; send it once")
		}
		seen[name] = true
		for _, f := range fields {
			if name != f && strings.EqualFold(name, f) {
				return apperr.Field(apperr.Invalid, "invalid_field_name", param,
					"field names are case-sensitive: send '"+f+"', not '"+name+"'")
			}
		}
		if value == nil {
			err = skip(dec)
		} else {
			err = value(name, param)
		}
		if err != nil {
			return err
		}
	}
	_, err = dec.Token() // '}'
	return err
}

// eachElement calls fn for each element of an array (or skips any other value).
func eachElement(dec *json.Decoder, at string, fn func(param string) error) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != json.Delim('[') {
		return skipRest(dec, tok)
	}
	for i := 0; dec.More(); i++ {
		if err := fn(at + "[" + strconv.Itoa(i) + "]"); err != nil {
			return err
		}
	}
	_, err = dec.Token() // ']'
	return err
}

// skip reads one value, whatever it is.
func skip(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	return skipRest(dec, tok)
}

// skipRest reads the rest of a value whose first token was tok.
func skipRest(dec *json.Decoder, tok json.Token) error {
	d, ok := tok.(json.Delim)
	if !ok || (d != '{' && d != '[') {
		return nil
	}
	for depth := 1; depth > 0; {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return nil
}
