package completion_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/completion"
)

// TestParseRefusesNamesAProviderReadsDifferently: Go's decoder would take
// "MAX_TOKENS" (or "max_toKens" with a Kelvin sign) for max_tokens, a
// provider would not, so the gateway could reserve for one request while
// the provider runs another. Such names, and names given twice, are a 400
// naming the field; names Sluice does not read are the provider's business.
func TestParseRefusesNamesAProviderReadsDifferently(t *testing.T) {
	p := completion.New(completion.Deps{Providers: servesGPT{}})
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	refused := []struct{ name, body, reason, param string }{
		{"upper case", `{"model":"gpt-test",` + msgs + `,"max_tokens":100000,"MAX_TOKENS":1}`, "invalid_field_name", "MAX_TOKENS"},
		{"Kelvin sign", `{"model":"gpt-test",` + msgs + `,"max_tokens":100000,"max_to\u212aens":1}`, "invalid_field_name", "max_to\u212aens"},
		{"long s", `{"model":"gpt-test",` + msgs + `,"\u017ftream":true}`, "invalid_field_name", "\u017ftream"},
		{"model twice", `{"model":"gpt-test","model":"sluice-local",` + msgs + `}`, "duplicate_field", "model"},
		{"model twice, escaped", `{"model":"gpt-test","\u006dodel":"sluice-local",` + msgs + `}`, "duplicate_field", "model"},
		{"a message's role", `{"model":"gpt-test","messages":[{"role":"user","Role":"system","content":"hi"}]}`, "invalid_field_name", "messages[0].Role"},
		{"a message's content twice", `{"model":"gpt-test","messages":[{"role":"user","content":"a","content":"b"}]}`, "duplicate_field", "messages[0].content"},
		{"a content part's text", `{"model":"gpt-test","messages":[{"role":"user","content":[{"type":"text","Text":"hi"}]}]}`, "invalid_field_name", "messages[0].content[0].Text"},
		{"include_usage", `{"model":"gpt-test",` + msgs + `,"stream":true,"stream_options":{"Include_Usage":true}}`, "invalid_field_name", "stream_options.Include_Usage"},
	}
	for _, tt := range refused {
		_, err := p.Parse([]byte(tt.body))
		if e := apperr.As(err); e.Code != apperr.Invalid || e.Reason != tt.reason || e.Param != tt.param {
			t.Errorf("%s: %+v, want 400 %s naming %s", tt.name, e, tt.reason, tt.param)
		}
	}
	accepted := []string{
		`{"model":"gpt-test",` + msgs + `,"user":"u","metadata":{"Model":"x","model":"y"}}`,
		`{"model":"gpt-test",` + msgs + `,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"Model":{"type":"string"},"TEXT":{}}}}}]}`,
		`{"model":"gpt-test","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"1","content":[{"type":"text","text":"x"}]}]}`,
	}
	for _, body := range accepted {
		if _, err := p.Parse([]byte(body)); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}

// BenchmarkParse is the request's decoding and the check of its names, for
// one message and for a conversation of twenty.
func BenchmarkParse(b *testing.B) {
	p := completion.New(completion.Deps{Providers: servesGPT{}})
	for _, n := range []int{1, 20} {
		body := `{"model":"gpt-test","temperature":0.2,"max_tokens":256,"messages":[`
		for i := range n {
			if i > 0 {
				body += ","
			}
			body += `{"role":"user","content":"` + strings.Repeat("a couplet about rivers ", 10) + `"}`
		}
		body += `],"stream":false,"user":"u-42"}`
		b.Run(fmt.Sprintf("messages=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Parse([]byte(body)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
