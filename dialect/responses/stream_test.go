package responses

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// event is one translated server-sent event.
type event struct {
	typ  string
	data map[string]any
}

// parseEvents reads a Responses event stream, checking that each event's
// name is its type and that sequence numbers count up from 0.
func parseEvents(t *testing.T, b []byte) []event {
	t.Helper()
	var out []event
	for _, block := range strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n") {
		if block == "" {
			continue
		}
		name, data, ok := strings.Cut(block, "\n")
		if !ok || !strings.HasPrefix(name, "event: ") || !strings.HasPrefix(data, "data: ") {
			t.Fatalf("not an event: %q", block)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(strings.TrimPrefix(data, "data: ")), &m); err != nil {
			t.Fatalf("event data is not JSON: %v: %q", err, data)
		}
		typ := strings.TrimPrefix(name, "event: ")
		if m["type"] != typ {
			t.Fatalf("event %q has type %v", typ, m["type"])
		}
		if seq := m["sequence_number"]; seq != float64(len(out)) {
			t.Fatalf("event %d (%s) has sequence_number %v", len(out), typ, seq)
		}
		out = append(out, event{typ, m})
	}
	return out
}

func types(evs []event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = strings.TrimPrefix(e.typ, "response.")
	}
	return out
}

// sse writes chat completion chunks as a chat completion's event stream.
func sse(chunks ...string) string {
	var b strings.Builder
	for _, c := range chunks {
		b.WriteString("data: " + c + "\n\n")
	}
	return b.String()
}

const (
	usageChunk = `{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":1}}}`
	done       = "[DONE]"
)

func delta(d string) string {
	return `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":` + d + `,"finish_reason":null}]}`
}

func finish(reason string) string {
	return `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"` + reason + `"}]}`
}

// translate feeds a chat stream to a new Stream in the given pieces and
// returns everything it wrote, Finish included.
func translate(t *testing.T, pieces []string, billed Usage) ([]byte, *Stream) {
	t.Helper()
	s := mustDecode(t, `{"model":"m","input":"hi","stream":true}`).NewStream(testMeta)
	out := append([]byte(nil), s.Start()...)
	for _, p := range pieces {
		out = append(out, s.Write([]byte(p))...)
	}
	return append(out, s.Finish(billed)...), s
}

func TestStreamTranslation(t *testing.T) {
	billed := NewUsage(50, 20, 0)
	cases := []struct {
		name   string
		chat   string
		types  []string
		status string
		output string // the final response's output items
		usage  int64  // its total tokens
	}{
		{"text",
			sse(delta(`{"role":"assistant","content":""}`), delta(`{"content":"Hel"}`), delta(`{"content":"lo, 你好"}`), finish("stop"), usageChunk, done),
			[]string{"created", "in_progress", "output_item.added", "content_part.added", "output_text.delta", "output_text.delta",
				"output_text.done", "content_part.done", "output_item.done", "completed"},
			"completed",
			`[{"type":"message","id":"msg_abc","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hello, 你好","annotations":[],"logprobs":[]}]}]`,
			7},
		{"function calls",
			sse(delta(`{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"weather","arguments":""}}]}`),
				delta(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}`),
				delta(`{"tool_calls":[{"index":0,"function":{"arguments":"\"Oslo\"}"}}]}`),
				delta(`{"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"time","arguments":"{}"}}]}`),
				finish("tool_calls"), usageChunk, done),
			[]string{"created", "in_progress", "output_item.added", "function_call_arguments.delta", "function_call_arguments.delta",
				"output_item.added", "function_call_arguments.delta", "function_call_arguments.done", "output_item.done",
				"function_call_arguments.done", "output_item.done", "completed"},
			"completed",
			`[{"type":"function_call","id":"fc_abc_0","status":"completed","call_id":"call_1","name":"weather","arguments":"{\"city\":\"Oslo\"}"},
			  {"type":"function_call","id":"fc_abc_1","status":"completed","call_id":"call_2","name":"time","arguments":"{}"}]`,
			7},
		{"text, then a call: the message ends where the call begins",
			sse(delta(`{"content":"Checking."}`), delta(`{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":"{}"}}]}`),
				finish("tool_calls"), usageChunk, done),
			[]string{"created", "in_progress", "output_item.added", "content_part.added", "output_text.delta", "output_text.done",
				"content_part.done", "output_item.done", "output_item.added", "function_call_arguments.delta",
				"function_call_arguments.done", "output_item.done", "completed"},
			"completed",
			`[{"type":"message","id":"msg_abc","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Checking.","annotations":[],"logprobs":[]}]},
			  {"type":"function_call","id":"fc_abc_0","status":"completed","call_id":"call_1","name":"f","arguments":"{}"}]`,
			7},
		{"cut by max_output_tokens",
			sse(delta(`{"content":"Once"}`), finish("length"), usageChunk, done),
			[]string{"created", "in_progress", "output_item.added", "content_part.added", "output_text.delta", "output_text.done",
				"content_part.done", "output_item.done", "incomplete"},
			"incomplete",
			`[{"type":"message","id":"msg_abc","status":"incomplete","role":"assistant","content":[{"type":"output_text","text":"Once","annotations":[],"logprobs":[]}]}]`,
			7},
		{"a refusal",
			sse(delta(`{"refusal":"No."}`), finish("stop"), usageChunk, done),
			[]string{"created", "in_progress", "output_item.added", "content_part.added", "refusal.delta", "refusal.done",
				"content_part.done", "output_item.done", "completed"},
			"completed",
			`[{"type":"message","id":"msg_abc","status":"completed","role":"assistant","content":[{"type":"refusal","refusal":"No."}]}]`,
			7},
		{"the provider's stream breaks: failed, with what came",
			sse(delta(`{"content":"Half"}`)) + `data: {"error":{"message":"the provider stopped sending; the answer is incomplete","type":"server_error","code":"upstream_stalled"}}` + "\n\n",
			[]string{"created", "in_progress", "output_item.added", "content_part.added", "output_text.delta", "output_text.done",
				"content_part.done", "output_item.done", "failed"},
			"failed",
			`[{"type":"message","id":"msg_abc","status":"incomplete","role":"assistant","content":[{"type":"output_text","text":"Half","annotations":[],"logprobs":[]}]}]`,
			0},
		{"no usage reported: the last event waits for what was billed",
			sse(delta(`{"content":"Hi"}`), finish("stop"), done),
			[]string{"created", "in_progress", "output_item.added", "content_part.added", "output_text.delta", "output_text.done",
				"content_part.done", "output_item.done", "completed"},
			"completed",
			`[{"type":"message","id":"msg_abc","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi","annotations":[],"logprobs":[]}]}]`,
			70},
		{"an empty answer is an empty message",
			sse(delta(`{"role":"assistant","content":""}`), finish("stop"), usageChunk, done),
			[]string{"created", "in_progress", "output_item.added", "content_part.added", "output_text.delta", "output_text.done",
				"content_part.done", "output_item.done", "completed"},
			"completed",
			`[{"type":"message","id":"msg_abc","status":"completed","role":"assistant","content":[{"type":"output_text","text":"","annotations":[],"logprobs":[]}]}]`,
			7},
		{"ended before it finished",
			sse(delta(`{"content":"Half"}`)),
			[]string{"created", "in_progress", "output_item.added", "content_part.added", "output_text.delta", "output_text.done",
				"content_part.done", "output_item.done", "failed"},
			"failed",
			`[{"type":"message","id":"msg_abc","status":"incomplete","role":"assistant","content":[{"type":"output_text","text":"Half","annotations":[],"logprobs":[]}]}]`,
			70},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			whole, s := translate(t, []string{c.chat}, billed)
			evs := parseEvents(t, whole)
			if got := types(evs); !slices.Equal(got, c.types) {
				t.Fatalf("events\n got %v\nwant %v", got, c.types)
			}
			last := evs[len(evs)-1].data["response"].(map[string]any)
			if last["status"] != c.status || !s.Ended() || s.Response().Status != c.status {
				t.Fatalf("final status %v (stream says %q)", last["status"], s.Response().Status)
			}
			out, _ := json.Marshal(last["output"])
			if !sameJSON(t, out, c.output) {
				t.Fatalf("output\n got %s\nwant %s", out, c.output)
			}
			var total int64
			if u, ok := last["usage"].(map[string]any); ok {
				total = int64(u["total_tokens"].(float64))
			}
			if total != c.usage {
				t.Fatalf("usage total %d, want %d: %v", total, c.usage, last["usage"])
			}
			if c.status == "failed" {
				if e, _ := last["error"].(map[string]any); e == nil || e["code"] != "server_error" || e["message"] == "" {
					t.Fatalf("a failed response says why: %v", last["error"])
				}
			}

			// However the bytes are cut, the events are the same.
			for i := 1; i < len(c.chat); i++ {
				if got, _ := translate(t, []string{c.chat[:i], c.chat[i:]}, billed); !bytes.Equal(got, whole) {
					t.Fatalf("split at byte %d:\n got %s\nwant %s", i, got, whole)
				}
			}
			rng := rand.New(rand.NewPCG(1, uint64(len(c.chat))))
			for range 20 {
				var pieces []string
				for rest := c.chat; len(rest) > 0; {
					n := min(len(rest), 1+rng.IntN(12))
					pieces, rest = append(pieces, rest[:n]), rest[n:]
				}
				if got, _ := translate(t, pieces, billed); !bytes.Equal(got, whole) {
					t.Fatalf("split in %d pieces: events differ", len(pieces))
				}
			}
			crlf := strings.ReplaceAll(c.chat, "\n", "\r\n")
			if got, _ := translate(t, []string{crlf}, billed); !bytes.Equal(got, whole) {
				t.Fatalf("CRLF line ends: events differ")
			}
		})
	}
}

func TestStreamEventsCarryWhatTheSDKReads(t *testing.T) {
	out, _ := translate(t, []string{sse(delta(`{"content":"Hi"}`), finish("stop"), usageChunk, done)}, Usage{})
	evs := parseEvents(t, out)
	created := evs[0].data["response"].(map[string]any)
	if created["status"] != "in_progress" || created["id"] != "resp_abc" || created["model"] != "m" || created["usage"] != nil {
		t.Fatalf("created: %v", created)
	}
	added := evs[2].data["item"].(map[string]any)
	if added["status"] != "in_progress" || added["id"] != "msg_abc" || evs[2].data["output_index"] != 0.0 {
		t.Fatalf("item added: %v", evs[2].data)
	}
	d := evs[4].data
	if d["delta"] != "Hi" || d["item_id"] != "msg_abc" || d["content_index"] != 0.0 || d["logprobs"] == nil {
		t.Fatalf("delta: %v", d)
	}
	if evs[5].data["text"] != "Hi" {
		t.Fatalf("text done: %v", evs[5].data)
	}
	u := evs[len(evs)-1].data["response"].(map[string]any)["usage"].(map[string]any)
	if u["input_tokens"] != 5.0 || u["output_tokens"] != 2.0 || u["input_tokens_details"].(map[string]any)["cached_tokens"] != 1.0 {
		t.Fatalf("usage: %v", u)
	}
	// Nothing after the end.
	s := mustDecode(t, `{"model":"m","input":"hi","stream":true}`).NewStream(testMeta)
	s.Start()
	s.Write([]byte(sse(finish("stop"), usageChunk, done)))
	if more := s.Write([]byte(sse(delta(`{"content":"late"}`)))); len(more) != 0 {
		t.Fatalf("events after the end: %s", more)
	}
	if more := s.Finish(Usage{}); len(more) != 0 {
		t.Fatalf("Finish after the end: %s", more)
	}
}
