package responses

import (
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/sluicehq/sluice/apperr"
)

// strict decodes one level of a request: a member the translation does
// not know is refused, never dropped. Duplicate names and invalid UTF-8
// are refused too (jsonv2's defaults).
var strict = jsonv2.RejectUnknownMembers(true)

// decode reads raw, at param within the request, into v.
func decode(raw []byte, param string, v any) error {
	if err := jsonv2.Unmarshal(raw, v, strict); err != nil {
		return decodeError(err, param)
	}
	return nil
}

// decodeError says what is wrong with the part of the request at prefix,
// and where, in the request's own terms.
func decodeError(err error, prefix string) error {
	var sem *jsonv2.SemanticError
	if errors.As(err, &sem) {
		param := joinPointer(prefix, sem.JSONPointer)
		if errors.Is(sem.Err, jsonv2.ErrUnknownName) {
			return unsupported(param, "field '"+param+"' is not supported: Sluice's Responses API runs on chat completions, which cannot carry it")
		}
		if want := kindOf(sem.GoType); want != "" && param != "" {
			return apperr.Field(apperr.Invalid, "invalid_type", param, "field '"+param+"' must be "+want)
		}
		return apperr.Field(apperr.Invalid, "invalid_json", param, "request body is not valid JSON at '"+param+"'")
	}
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) {
		param := joinPointer(prefix, syn.JSONPointer)
		if errors.Is(syn.Err, jsontext.ErrDuplicateName) {
			return apperr.Field(apperr.Invalid, "duplicate_field", param, "field '"+param+"' is given twice; send it once")
		}
		return apperr.Field(apperr.Invalid, "invalid_json", "", "request body is not valid JSON: syntax error at byte "+strconv.FormatInt(syn.ByteOffset, 10))
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return apperr.Field(apperr.Invalid, "invalid_json", "", "request body is not valid JSON: body is empty or cut short")
	}
	return apperr.Field(apperr.Invalid, "invalid_json", prefix, "request body is not valid JSON")
}

// joinPointer writes a JSON pointer under prefix the way the API names
// parameters: input[2].content[0].text.
func joinPointer(prefix string, p jsontext.Pointer) string {
	var b strings.Builder
	b.WriteString(prefix)
	for tok := range p.Tokens() {
		if _, err := strconv.Atoi(tok); err == nil && b.Len() > 0 {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// kindOf names the JSON a Go type takes.
func kindOf(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return ""
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Float64, reflect.Float32:
		return "a number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 { // a raw value: any JSON
			return ""
		}
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return ""
}

// unsupported refuses what the translation cannot carry, naming it.
func unsupported(param, message string) error {
	return apperr.Field(apperr.Invalid, "unsupported_parameter", param, message)
}

func invalid(param, message string) error {
	return apperr.Field(apperr.Invalid, "invalid_value", param, message)
}

func missing(param string) error {
	return apperr.Field(apperr.Invalid, "missing_required_parameter", param, "missing required parameter: '"+param+"'")
}

func at(prefix string, i int) string { return prefix + "[" + strconv.Itoa(i) + "]" }
