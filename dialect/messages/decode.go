package messages

import (
	"bytes"
	"errors"
	"reflect"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/sluicehq/sluice/apperr"
)

// Decoding is strict, as Anthropic's API is: names match exactly (no case
// folding), a name given twice is refused, and a name the Messages API
// does not have is refused rather than dropped, so nothing a client sent
// is lost without it hearing so. Errors name the field the way Anthropic's
// do ("messages.0.content: Field required").

// strict are the options every part of a request is decoded with.
var strict = jsonv2.JoinOptions(jsonv2.RejectUnknownMembers(true))

// decodeAt decodes raw, the value at path, into v, mapping every failure
// to a 400 that names the field at fault.
func decodeAt(raw []byte, path string, v any) error {
	err := jsonv2.Unmarshal(raw, v, strict)
	if err == nil {
		return nil
	}
	var sem *jsonv2.SemanticError
	var syn *jsontext.SyntacticError
	switch {
	case errors.As(err, &syn):
		where := join(path, pointerPath(syn.JSONPointer))
		if errors.Is(syn.Err, jsontext.ErrDuplicateName) {
			return invalid("duplicate_field", where, where+": given twice; send it once")
		}
		if path == "" && len(bytes.TrimSpace(raw)) == 0 {
			return invalid("invalid_json", "", "the request body is not valid JSON: it is empty")
		}
		return invalid("invalid_json", "", "the request body is not valid JSON: syntax error after byte "+strconv.FormatInt(syn.ByteOffset, 10))
	case errors.As(err, &sem):
		where := join(path, pointerPath(sem.JSONPointer))
		if errors.Is(sem.Err, jsonv2.ErrUnknownName) {
			return invalid("unknown_field", where, where+": Extra inputs are not permitted")
		}
		if where == "" {
			return invalid("invalid_json", "", "the request body must be a JSON object")
		}
		return invalid("invalid_field", where, where+": Input should be "+kindOf(sem.GoType))
	}
	return invalid("invalid_json", path, "the request body could not be decoded")
}

// kindOf names what a Go type accepts, as Anthropic's errors do.
func kindOf(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "valid JSON"
	}
	switch t.Kind() {
	case reflect.String:
		return "a valid string"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "a valid integer"
	case reflect.Float64, reflect.Float32:
		return "a valid number"
	case reflect.Bool:
		return "a valid boolean"
	case reflect.Slice:
		return "a valid list"
	case reflect.Struct, reflect.Map:
		return "a valid dictionary"
	}
	return "valid JSON"
}

// pointerPath writes a JSON pointer ("/messages/0/content") as Anthropic
// names fields ("messages.0.content").
func pointerPath(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// join is path, then sub inside it.
func join(path, sub string) string {
	switch {
	case path == "":
		return sub
	case sub == "":
		return path
	}
	return path + "." + sub
}

// at is the path of element i of path.
func at(path string, i int) string { return path + "." + strconv.Itoa(i) }

// invalid is a 400 about one field; message already names it.
func invalid(reason, param, message string) *apperr.Error {
	return apperr.Field(apperr.Invalid, reason, param, message)
}

// required is Anthropic's error for a missing field.
func required(path string) *apperr.Error {
	return invalid("missing_field", path, path+": Field required")
}

// unsupported refuses a feature of the Messages API that Sluice does not
// carry, by name, rather than dropping it.
func unsupported(path, message string) *apperr.Error {
	return invalid("unsupported_feature", path, path+": "+message)
}

// kind is the JSON kind of raw: '"', '[', '{', 'n', 't', 'f', '0' or 0
// when it is absent.
func kind(raw []byte) byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return 0
	}
	return byte(jsontext.Value(raw).Kind())
}

// blockType reads the "type" of a block or tool without decoding the rest,
// so that an unsupported type is named as such rather than as an unknown
// field of a supported one.
func blockType(raw []byte, path string) (string, error) {
	if kind(raw) != '{' {
		return "", invalid("invalid_field", path, path+": Input should be a valid dictionary")
	}
	var head struct {
		Type jsontext.Value `json:"type"`
	}
	if err := jsonv2.Unmarshal(raw, &head); err != nil {
		return "", decodeAt(raw, path, &head)
	}
	if len(head.Type) == 0 || head.Type.Kind() == 'n' {
		return "", nil
	}
	var s string
	if err := jsonv2.Unmarshal(head.Type, &s); err != nil {
		return "", invalid("invalid_field", path+".type", path+".type: Input should be a valid string")
	}
	return s, nil
}
