package jsonwalk

import (
	"encoding/json"
	"testing"
)

// FuzzWalkerValue: the Walker reads a document whole exactly when
// encoding/json finds it valid, and its raw value is the document.
func FuzzWalkerValue(f *testing.F) {
	for _, seed := range []string{`{}`, `[]`, `{"a":[1,2,{"b":null}],"c":"d\"e\u00e9"}`, `[1,-0.5e+3,true,false,null]`,
		`{"a" 1}`, `[1,]`, `{"a":1,}`, `"\x01"`, `01`, `1.`, `-`, `"\u12"`, `[[[[`, "\"\xff\"", ` {"a" : [ 1 , 2 ] } `, `{"a":1}{}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		var w Walker
		w.Reset(doc)
		v, err := w.Value()
		ok := err == nil && w.End()
		if valid := json.Valid(doc); ok != valid {
			t.Fatalf("%q: Walker %v (err %v), encoding/json valid %v", doc, ok, err, valid)
		}
		if ok && len(v) > 0 && string(v) != string(trimSpace(doc)) {
			t.Fatalf("%q: value %q", doc, v)
		}
	})
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r' || b[0] == '\n') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r' || b[len(b)-1] == '\n') {
		b = b[:len(b)-1]
	}
	return b
}
