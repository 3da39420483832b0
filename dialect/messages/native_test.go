package messages

import (
	"strings"
	"testing"
)

const nativeEvents = "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_provider\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-x\",\"content\":[],\"usage\":{\"input_tokens\":5,\"cache_read_input_tokens\":3,\"output_tokens\":1}}}\r\n\r\n" +
	"event: ping\ndata: {\"type\":\"ping\"}\n\n" +
	"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\",\"citations\":[]}}\n\n" +
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Rivers\"}}\n\n" +
	"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":2}}\n\n" +
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

// relabeled is nativeEvents as the client gets them: message_start's id
// and model the gateway's, line ends "\n", nothing else changed.
var relabeled = strings.ReplaceAll(strings.Replace(strings.Replace(nativeEvents, `"id":"msg_provider"`, `"id":"msg_gw"`, 1),
	`"model":"claude-x"`, `"model":"fast"`, 1), "\r\n", "\n")

// TestANativeStreamIsPassedOnHoweverItIsCut: whatever the pieces the
// provider's events arrive in, the client gets them as they came but for
// message_start's id and model, and a stream that ended with message_stop
// gets nothing more.
func TestANativeStreamIsPassedOnHoweverItIsCut(t *testing.T) {
	for cut := 1; cut < len(nativeEvents); cut++ {
		s := NewNativeStream("msg_gw", "fast")
		var out strings.Builder
		out.Write(s.Write([]byte(nativeEvents[:cut])))
		out.Write(s.Write([]byte(nativeEvents[cut:])))
		out.Write(s.End())
		if out.String() != relabeled {
			t.Fatalf("cut at %d:\n%s\nwant\n%s", cut, out.String(), relabeled)
		}
	}
}

// TestANativeStreamCutShortEndsWithAnError: a stream that stops before
// message_stop, even mid-line or after its message_delta, ends with one
// error event; one that ended with the provider's error event gets no
// second.
func TestANativeStreamCutShortEndsWithAnError(t *testing.T) {
	const ours = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"the provider stopped sending; the answer is incomplete\"}}\n\n"
	stop := strings.Index(nativeEvents, "event: message_stop")
	for _, tc := range []struct{ in, want string }{
		{nativeEvents[:stop], relabeled[:strings.Index(relabeled, "event: message_stop")] + ours},
		{nativeEvents[:stop-3], relabeled[:strings.Index(relabeled, "event: message_stop")-3] + "\n\n" + ours},
		{"", ours},
		{"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"boom\"}}",
			"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"boom\"}}\n\n"},
	} {
		s := NewNativeStream("msg_gw", "fast")
		got := string(s.Write([]byte(tc.in)))
		got += string(s.End())
		if got != tc.want {
			t.Errorf("%q:\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}
