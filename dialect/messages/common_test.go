package messages

import (
	"reflect"
	"strings"
	"testing"
)

// commonBodies are requests the common path must translate itself: the
// shapes the official SDKs and Claude Code send, and each field and block
// it reads, with the escapes and spacing clients write.
var commonBodies = []string{
	`{"model":"claude-mock","max_tokens":256,"messages":[{"role":"user","content":"hello there, how are you"}]}`,
	`{"max_tokens":1024,"messages":[{"content":"Hello, Claude","role":"user"}],"model":"claude-sonnet-4-5"}`,
	` { "model" : "m" , "max_tokens" : 5 , "messages" : [ { "role" : "user" , "content" : [ { "type" : "text" , "text" : "spaced" } ] } ] } `,
	`{"model":"m","max_tokens":5,"system":"be brief <b>&","messages":[{"role":"user","content":"a\nb\t\"q\" \\ \/ \u00e9 \u0001 \u2028 写一副春联"}]}`,
	"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"raw \u2028 and \u2029 separators, \x7f\"}]}",
	`{"model":"m","max_tokens":5,"system":[{"type":"text","text":"You are Claude Code.","cache_control":{"type":"ephemeral"}},{"type":"text","text":"second","cache_control":{ "type" : "ephemeral", "ttl":"1h" }}],"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","max_tokens":5,"system":[],"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[]}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":""}]},{"role":"assistant","content":""}]}`,
	`{"model":"m","max_tokens":9,"temperature":0.5,"top_p":0.9,"top_k":40,"stop_sequences":["END","\n\nHuman:"],"metadata":{"user_id":"u-1"},"stream":true,"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","max_tokens":9,"temperature":0,"top_p":1,"top_k":0,"stop_sequences":[],"metadata":{"user_id":""},"stream":false,"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","max_tokens":9,"temperature":1e-7,"top_p":0.30000000000000004,"metadata":{},"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","max_tokens":9,"temperature":-0,"top_p":5e-1,"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"what is it"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBOR"}},{"type":"image","source":{"type":"url","url":"https://x.example/a.jpg?q=1&r=<2>"},"cache_control":{"type":"ephemeral"}}]}]}`,
	`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{"media_type":"image/webp","data":"UklG\/RiQ=","type":"base64"}}]}]}`,
	`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"weather?"},
	  {"role":"assistant","content":[{"type":"text","text":"checking"},{"type":"tool_use","id":"toolu_1","name":"weather","input":{ "city" : "Oslo", "days": [1, 2, {"x": null}], "note":"a \"b\" \u2028" }},{"type":"tool_use","id":"toolu_2","name":"time","input":{}}]},
	  {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"rain"},{"type":"tool_result","tool_use_id":"toolu_2","is_error":true,"content":[{"type":"text","text":"no clock"}]},{"type":"text","text":"and so?"}]}]}`,
	`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","cache_control":{"type":"ephemeral"}}]}]}`,
	`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"s","cache_control":{"type":"ephemeral"},"is_error":false}]}]}`,
	`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[],"cache_control":{"type":"ephemeral"}}]}]}`,
	`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[]}]}]}`,
	`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"before"},{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"a"},{"type":"image","source":{"type":"url","url":"https://x.example/b.png"}}],"cache_control":{"type":"ephemeral"}},{"type":"image","source":{"type":"url","url":"https://x.example/c.png"}}]}]}`,
	`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"weather","description":"the weather","input_schema":{"type":"object","properties":{"city":{"type":"string","description":"a \"city\""}},"required":["city"]},"cache_control":{"type":"ephemeral"}},{"type":"custom","name":"t2","description":"","input_schema":{}}],"tool_choice":{"type":"tool","name":"weather","disable_parallel_tool_use":true}}`,
	`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tools":[],"tool_choice":{"type":"any"}}`,
	`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"auto","disable_parallel_tool_use":false}}`,
	`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"none","disable_parallel_tool_use":true}}`,
	`{"model":"m","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","max_tokens":2048,"thinking":{ "type" : "adaptive", "display":"summarized" },"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","max_tokens":2048,"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","max_tokens":2048,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"thinking","thinking":"let me see \n","signature":"EqQB"},{"type":"redacted_thinking","data":"abc"},{"type":"text","text":"so"},{"type":"tool_use","id":"t","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok"}]}]}`,
	`{"model":"m","max_tokens":2048,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"thinking","thinking":"","signature":""}]}]}`,
	`{"model":"gpt-5","max_tokens":9,"messages":[{"role":"user","content":"x"}]}`,
}

// generalOnly are requests the common path leaves to the general path,
// which translates them or says what is wrong: every kind of thing it
// does not read or vouch for.
var generalOnly = []string{
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"output_config":{"effort":"low"}}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"context_management":{"edits":[]}}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"service_tier":null}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"mcp_servers":[{}]}`,
	`{"model":"m","max_tokens":5,"system":null,"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"temperature":null}`,
	`{"model":"m","max_tokens":5,"model":"n","messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","role":"user","content":"x"}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"a":1,"a":2}}]}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f","input_schema":{"properties":{"p":{},"p":{}}}}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"metadata":{"user_id":"u","user_id":"v"}}`,
	`{"mo\u0064el":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"\ud83d\ude00 paired"}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"\ud800 lone"}]}`,
	"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}",
	`{"model":"m","max_tokens":5.0,"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","max_tokens":99999999999999999999,"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","max_tokens":5,"temperature":1.5,"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","max_tokens":5,"messages":[]}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}]}`,
	`{"model":"","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"x"}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"content":[{"type":"text","text":"content before role"}],"role":"user"}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"text":"type not first","type":"text"}]}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{}}]}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"image","source":{"type":"url","url":"u"}}]}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"x","id":""}]}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/bmp","data":"x"}}]}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"f"}}]}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}],"cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"thinking","thinking":"late","signature":"s"}]}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{},"cache_control":{"type":"ephemeral"}}]}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"web_search_20250305","name":"web_search"}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"auto","name":"f"}}`,
	`{"model":"m","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":4096},"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","max_tokens":2048,"thinking":{"type":"disabled","display":"omitted"},"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]} trailing`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"system":[{"type":"text","text":"s","cache_control":"ephemeral"}]}`,
}

// commonOptions are the options a handler translates with.
var commonOptions = []Options{
	{},
	{CountOnly: true},
	{BoundField: func(model string) string {
		if strings.HasPrefix(model, "gpt-5") {
			return "max_completion_tokens"
		}
		return "max_tokens"
	}},
	{Betas: []string{"interleaved-thinking-2025-05-14", "a \"quoted\" beta"}},
}

// sameAsGeneral fails t unless the common path's translation of body,
// where it makes one, is the general path's exactly; it says whether the
// common path made it.
func sameAsGeneral(t *testing.T, body []byte, opts Options) bool {
	t.Helper()
	got, ok := translateCommon(body, opts)
	if !ok {
		return false
	}
	want, err := translateGeneral(body, opts)
	if err != nil {
		t.Fatalf("%s\nthe common path translated what the general path refuses (%v):\n%s", body, err, got.Chat)
	}
	if string(got.Chat) != string(want.Chat) {
		t.Fatalf("%s\ncommon:  %s\ngeneral: %s", body, got.Chat, want.Chat)
	}
	gotChat, wantChat := got.Chat, want.Chat
	got.Chat, want.Chat = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s\ncommon:  %+v\ngeneral: %+v", body, got, want)
	}
	got.Chat, want.Chat = gotChat, wantChat
	return true
}

func TestCommonIsTheGeneralPath(t *testing.T) {
	for _, body := range commonBodies {
		for i, opts := range commonOptions {
			if !sameAsGeneral(t, []byte(body), opts) {
				t.Errorf("options %d: the common path left a common request to the general path:\n%s", i, body)
			}
		}
	}
}

func TestCommonLeavesToTheGeneralPath(t *testing.T) {
	for _, body := range generalOnly {
		if _, ok := translateCommon([]byte(body), Options{}); ok {
			t.Errorf("the common path translated what it must leave to the general path:\n%s", body)
		}
		// What ToChat answers is the general path's.
		got, gotErr := ToChat([]byte(body), Options{})
		want, wantErr := translateGeneral([]byte(body), Options{})
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotErr, wantErr) {
			t.Errorf("%s\nToChat: %+v, %v\ngeneral: %+v, %v", body, got, gotErr, want, wantErr)
		}
	}
}

// FuzzCommonIsTheGeneralPath holds the common path to the general one on
// any body: what it translates, the general path translates the same.
func FuzzCommonIsTheGeneralPath(f *testing.F) {
	for _, body := range append(append([]string{}, commonBodies...), generalOnly...) {
		f.Add([]byte(body), uint8(0))
	}
	f.Fuzz(func(t *testing.T, body []byte, opt uint8) {
		sameAsGeneral(t, body, commonOptions[int(opt)%len(commonOptions)])
	})
}

// BenchmarkToChat is the translation of a small body and of a Claude
// Code turn, by the common path and by the general one.
func BenchmarkToChat(b *testing.B) {
	for _, tc := range []struct{ name, body string }{
		{"small", commonBodies[0]},
		{"tools", commonBodies[15]},
	} {
		for _, path := range []struct {
			name string
			fn   func([]byte, Options) (Translation, error)
		}{{"common", ToChat}, {"general", translateGeneral}} {
			b.Run(tc.name+"/"+path.name, func(b *testing.B) {
				body := []byte(tc.body)
				b.ReportAllocs()
				for b.Loop() {
					if _, err := path.fn(body, Options{}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
