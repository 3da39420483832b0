package messages

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// feed runs a chat stream through a Stream in the given pieces, as the
// pipeline would: Start, Write per piece, End.
func feed(pieces []string) string {
	s := NewStream("msg_1", "claude-x", 12, func(t string) int { return len(strings.Fields(t)) })
	var out strings.Builder
	out.Write(s.Start())
	for _, p := range pieces {
		out.Write(s.Write([]byte(p)))
	}
	out.Write(s.End())
	return out.String()
}

// event is one server-sent event: its name and its data as JSON.
type event struct {
	name string
	data any
}

func events(t *testing.T, stream string) []event {
	t.Helper()
	if !strings.HasSuffix(stream, "\n\n") && stream != "" {
		t.Fatalf("the stream does not end an event: %q", stream)
	}
	var out []event
	for _, raw := range strings.Split(strings.TrimSuffix(stream, "\n\n"), "\n\n") {
		name, data, ok := strings.Cut(raw, "\ndata: ")
		if !ok || !strings.HasPrefix(name, "event: ") {
			t.Fatalf("not an event: %q", raw)
		}
		out = append(out, event{strings.TrimPrefix(name, "event: "), canonical(t, data)})
	}
	return out
}

func want(t *testing.T, pairs ...string) []event {
	var out []event
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, event{pairs[i], canonical(t, pairs[i+1])})
	}
	return out
}

const messageStart = `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[],"stop_reason":null,"stop_sequence":null,
	"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}}`

// A text answer then a tool call, with usage, as OpenAI streams it.
const chatStream = `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}

data: {"id":"c","choices":[{"index":0,"delta":{"content":"Let me "},"finish_reason":null}]}

data: {"id":"c","choices":[{"index":0,"delta":{"content":"check. 天气"},"finish_reason":null}]}

: keep-alive

data: {"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"weather","arguments":""}}]},"finish_reason":null}]}

data: {"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]},"finish_reason":null}]}

data: {"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Oslo\"}"}}]},"finish_reason":null}]}

data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

data: {"id":"c","choices":[],"usage":{"prompt_tokens":50,"completion_tokens":9,"prompt_tokens_details":{"cached_tokens":20},"cache_creation_input_tokens":10}}

data: [DONE]

`

func TestStreamTranslatesChunkByChunk(t *testing.T) {
	whole := feed([]string{chatStream})
	got := events(t, whole)
	sameInEveryPiece(t, chatStream, whole)
	expected := want(t,
		"message_start", messageStart,
		"ping", `{"type":"ping"}`,
		"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me "}}`,
		"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"check. 天气"}}`,
		"content_block_stop", `{"type":"content_block_stop","index":0}`,
		"content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"call_1","name":"weather","input":{}}}`,
		"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}`,
		"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"Oslo\"}"}}`,
		"content_block_stop", `{"type":"content_block_stop","index":1}`,
		"message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},
			"usage":{"input_tokens":20,"cache_creation_input_tokens":10,"cache_read_input_tokens":20,"output_tokens":9}}`,
		"message_stop", `{"type":"message_stop"}`,
	)
	if !reflect.DeepEqual(got, expected) {
		t.Fatalf("events:\n%s", whole)
	}
}

// sameInEveryPiece holds that whatever pieces a chat stream's bytes arrive
// in, its events are the same: a byte at a time (splitting UTF-8 too), and
// at random places.
func sameInEveryPiece(t *testing.T, stream, whole string) {
	t.Helper()
	var bytewise []string
	for i := range len(stream) {
		bytewise = append(bytewise, stream[i:i+1])
	}
	if got := feed(bytewise); got != whole {
		t.Fatalf("a byte at a time:\n%s", got)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var pieces []string
		for rest := stream; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(40))
			pieces, rest = append(pieces, rest[:n]), rest[n:]
		}
		if got := feed(pieces); got != whole {
			t.Fatalf("split at %q:\n%s", pieces, got)
		}
	}
}

// A thinking answer as an Anthropic key's format streams it: the thinking
// text in reasoning_content, each block's signature (or a redacted block)
// in thinking_blocks, then text and a tool call; and a LiteLLM-style
// chunk that repeats its text in its block.
const thinkingStream = `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}

data: {"choices":[{"index":0,"delta":{"reasoning_content":"The user wants "},"finish_reason":null}]}

data: {"choices":[{"index":0,"delta":{"reasoning_content":"天气."},"finish_reason":null}]}

data: {"choices":[{"index":0,"delta":{"thinking_blocks":[{"type":"thinking","thinking":"","signature":"sig/1+="}]},"finish_reason":null}]}

data: {"choices":[{"index":0,"delta":{"thinking_blocks":[{"type":"redacted_thinking","data":"ZW5j"}]},"finish_reason":null}]}

data: {"choices":[{"index":0,"delta":{"reasoning_content":"Then","thinking_blocks":[{"type":"thinking","thinking":"Then"}]},"finish_reason":null}]}

data: {"choices":[{"index":0,"delta":{"thinking_blocks":[{"type":"thinking","thinking":" check.","signature":"sig-2"}]},"finish_reason":null}]}

data: {"choices":[{"index":0,"delta":{"content":"Checking."},"finish_reason":null}]}

data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"toolu_1","type":"function","function":{"name":"weather","arguments":"{}"}}]},"finish_reason":null}]}

data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

data: {"choices":[],"usage":{"prompt_tokens":50,"completion_tokens":30,"completion_tokens_details":{"reasoning_tokens":20}}}

data: [DONE]

`

func TestStreamCarriesThinkingBlocksBeforeTheText(t *testing.T) {
	whole := feed([]string{thinkingStream})
	expected := want(t,
		"message_start", messageStart,
		"ping", `{"type":"ping"}`,
		"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
		"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"The user wants "}}`,
		"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"天气."}}`,
		"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig/1+="}}`,
		"content_block_stop", `{"type":"content_block_stop","index":0}`,
		"content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"ZW5j"}}`,
		"content_block_stop", `{"type":"content_block_stop","index":1}`,
		"content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
		"content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"thinking_delta","thinking":"Then"}}`,
		"content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"thinking_delta","thinking":" check."}}`,
		"content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"signature_delta","signature":"sig-2"}}`,
		"content_block_stop", `{"type":"content_block_stop","index":2}`,
		"content_block_start", `{"type":"content_block_start","index":3,"content_block":{"type":"text","text":""}}`,
		"content_block_delta", `{"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"Checking."}}`,
		"content_block_stop", `{"type":"content_block_stop","index":3}`,
		"content_block_start", `{"type":"content_block_start","index":4,"content_block":{"type":"tool_use","id":"toolu_1","name":"weather","input":{}}}`,
		"content_block_delta", `{"type":"content_block_delta","index":4,"delta":{"type":"input_json_delta","partial_json":"{}"}}`,
		"content_block_stop", `{"type":"content_block_stop","index":4}`,
		"message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},
			"usage":{"input_tokens":50,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":30}}`,
		"message_stop", `{"type":"message_stop"}`,
	)
	if got := events(t, whole); !reflect.DeepEqual(got, expected) {
		t.Fatalf("events:\n%s", whole)
	}
	sameInEveryPiece(t, thinkingStream, whole)

	// Cut short without usage: the thinking shown is output, and counted.
	cut := `data: {"choices":[{"index":0,"delta":{"reasoning_content":"one two three "},"finish_reason":null}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{"content":"four"},"finish_reason":"length"}]}` + "\n\n"
	tail := events(t, feed([]string{cut}))
	if final := tail[len(tail)-2]; final.name != "message_delta" ||
		final.data.(map[string]any)["usage"].(map[string]any)["output_tokens"] != float64(4) {
		t.Fatalf("the thinking shown was not counted: %v", final)
	}
}

func TestStreamEndings(t *testing.T) {
	text := `data: {"choices":[{"index":0,"delta":{"content":"half an"},"finish_reason":null}]}` + "\n\n"
	for _, tc := range []struct {
		name, stream string
		tail         []event
	}{
		{"the provider broke off: the pipeline's error event is Anthropic's",
			text + `data: {"error":{"message":"the provider stopped sending; the answer is incomplete","type":"server_error","param":null,"code":"upstream_stalled"}}` + "\n\n",
			want(t, "error", `{"type":"error","error":{"type":"overloaded_error","message":"the provider stopped sending; the answer is incomplete"}}`)},
		{"cut short with no word: an api_error",
			text,
			want(t, "error", `{"type":"error","error":{"type":"api_error","message":"the answer ended before it was complete"}}`)},
		{"finished but no [DONE] and no usage: closed, the output counted",
			text + `data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`,
			want(t, "message_delta", `{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},
				"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2}}`,
				"message_stop", `{"type":"message_stop"}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := events(t, feed([]string{tc.stream}))
			head := want(t, "message_start", messageStart, "ping", `{"type":"ping"}`,
				"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
				"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"half an"}}`)
			if tc.tail[0].name == "message_delta" {
				head = append(head, want(t, "content_block_stop", `{"type":"content_block_stop","index":0}`)...)
			}
			if !reflect.DeepEqual(got, append(head, tc.tail...)) {
				t.Fatalf("got %v", got)
			}
		})
	}
}
