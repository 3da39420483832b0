package respcache_test

import (
	"testing"

	"github.com/sluicehq/sluice/respcache"
)

func TestCacheable(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		header string
		want   bool
	}{
		{"temperature 0", `{"model":"m","temperature":0}`, "", true},
		{"temperature 0.0", `{"model":"m","temperature":0.0}`, "", true},
		{"temperature -0e3", `{"temperature":-0e3}`, "", true},
		{"temperature 0 streaming", `{"temperature":0,"stream":true}`, "", true},
		{"temperature 0.7", `{"temperature":0.7}`, "", false},
		{"temperature tiny", `{"temperature":1e-9}`, "", false},
		{"temperature missing", `{"model":"m"}`, "", false},
		{"temperature null", `{"temperature":null}`, "", false},
		{"temperature string", `{"temperature":"0"}`, "", false},
		{"header on", `{"temperature":1}`, "on", true},
		{"header ON spaced", `{"temperature":1}`, " ON ", true},
		{"header on invalid body", `not json`, "on", true},
		{"header off wins over temperature 0", `{"temperature":0}`, "off", false},
		{"header unknown", `{"temperature":1}`, "maybe", false},
		{"header unknown temperature 0", `{"temperature":0}`, "maybe", true},
		{"invalid json", `{"temperature":0`, "", false},
		{"empty body", ``, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := respcache.Cacheable([]byte(tt.body), tt.header); got != tt.want {
				t.Errorf("Cacheable(%s, %q) = %v, want %v", tt.body, tt.header, got, tt.want)
			}
		})
	}
}

const baseBody = `{"model":"gpt-4o","temperature":0,"messages":[{"role":"user","content":"hi"}]}`

func mustKey(t *testing.T, org int64, endpoint, body string) string {
	t.Helper()
	k, err := respcache.Key(org, endpoint, []byte(body))
	if err != nil {
		t.Fatalf("Key(%d, %q, %s): %v", org, endpoint, body, err)
	}
	return k
}

func TestKeySameForEquivalentRequests(t *testing.T) {
	base := mustKey(t, 1, "/v1/chat/completions", baseBody)
	if len(base) != 64 {
		t.Fatalf("key %q is not hex SHA-256", base)
	}
	same := map[string]string{
		"reordered keys": `{"messages":[{"content":"hi","role":"user"}],"temperature":0,"model":"gpt-4o"}`,
		"whitespace": `{ "model" : "gpt-4o",
			"temperature" : 0 ,
			"messages" : [ { "role" : "user" , "content" : "hi" } ] }`,
		"float zero":     `{"model":"gpt-4o","temperature":0.0,"messages":[{"role":"user","content":"hi"}]}`,
		"exponent zero":  `{"model":"gpt-4o","temperature":0e10,"messages":[{"role":"user","content":"hi"}]}`,
		"user set":       `{"model":"gpt-4o","temperature":0,"user":"alice","messages":[{"role":"user","content":"hi"}]}`,
		"stream":         `{"model":"gpt-4o","temperature":0,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`,
		"trailing space": baseBody + "\n  ",
	}
	for name, body := range same {
		if got := mustKey(t, 1, "/v1/chat/completions", body); got != base {
			t.Errorf("%s: key differs from the base request", name)
		}
	}
}

func TestKeyDiffersForDifferentRequests(t *testing.T) {
	base := mustKey(t, 1, "/v1/chat/completions", baseBody)
	different := map[string]string{
		"other org":         mustKey(t, 2, "/v1/chat/completions", baseBody),
		"other endpoint":    mustKey(t, 1, "/v1/completions", baseBody),
		"other message":     mustKey(t, 1, "/v1/chat/completions", `{"model":"gpt-4o","temperature":0,"messages":[{"role":"user","content":"hello"}]}`),
		"other role":        mustKey(t, 1, "/v1/chat/completions", `{"model":"gpt-4o","temperature":0,"messages":[{"role":"system","content":"hi"}]}`),
		"other temperature": mustKey(t, 1, "/v1/chat/completions", `{"model":"gpt-4o","temperature":0.2,"messages":[{"role":"user","content":"hi"}]}`),
		"other model":       mustKey(t, 1, "/v1/chat/completions", `{"model":"gpt-4o-mini","temperature":0,"messages":[{"role":"user","content":"hi"}]}`),
		"string zero":       mustKey(t, 1, "/v1/chat/completions", `{"model":"gpt-4o","temperature":"0","messages":[{"role":"user","content":"hi"}]}`),
		"nested user kept":  mustKey(t, 1, "/v1/chat/completions", `{"model":"gpt-4o","temperature":0,"messages":[{"role":"user","content":"hi","user":"x"}]}`),
	}
	seen := map[string]string{base: "base"}
	for name, k := range different {
		if prev, ok := seen[k]; ok {
			t.Errorf("%s: same key as %s", name, prev)
		}
		seen[k] = name
	}
}

func TestKeyExactNumbers(t *testing.T) {
	// Seeds beyond float64 precision must not collapse into one key.
	a := mustKey(t, 1, "/v1/chat/completions", `{"seed":12345678901234567890}`)
	b := mustKey(t, 1, "/v1/chat/completions", `{"seed":12345678901234567891}`)
	if a == b {
		t.Error("distinct large integers share a key")
	}
	equal := [][2]string{
		{`{"x":0.5}`, `{"x":5e-1}`},
		{`{"x":100}`, `{"x":1e2}`},
		{`{"x":-0}`, `{"x":0}`},
		{`{"x":1.50}`, `{"x":15E-1}`},
	}
	for _, p := range equal {
		if mustKey(t, 1, "e", p[0]) != mustKey(t, 1, "e", p[1]) {
			t.Errorf("%s and %s should share a key", p[0], p[1])
		}
	}
	if mustKey(t, 1, "e", `{"x":-1}`) == mustKey(t, 1, "e", `{"x":1}`) {
		t.Error("-1 and 1 share a key")
	}
}

func TestKeyInvalidBody(t *testing.T) {
	for _, body := range []string{``, `not json`, `{"a":1`, `[1,2]`, `null`, `"s"`, `{"a":1} {"b":2}`, `{"a":1}x`} {
		if _, err := respcache.Key(1, "/v1/chat/completions", []byte(body)); err == nil {
			t.Errorf("Key(%q) succeeded, want error", body)
		}
	}
}
