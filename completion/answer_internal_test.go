package completion

import (
	"strings"
	"testing"
)

// TestUsageFilterLeavesOutOnlyTheUsageChunk: the usage chunk Sluice asked
// for goes, with the blank line that ends its event, however the stream is
// cut into reads; a usage riding on a chunk with choices, and everything
// else, passes as it came.
func TestUsageFilterLeavesOutOnlyTheUsageChunk(t *testing.T) {
	const (
		content = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n"
		finish  = "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\r\n\r\n"
		usage   = "data: {\"id\":\"x\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2}}\n\n"
		done    = "data: [DONE]\n\n"
	)
	in, want := content+finish+usage+done, content+finish+done
	for _, size := range []int{1, 2, 7, 64, len(in)} {
		f := usageFilter{strip: true}
		var out strings.Builder
		for i := 0; i < len(in); i += size {
			out.Write(f.keep([]byte(in[i:min(i+size, len(in))])))
		}
		if out.String() != want {
			t.Errorf("reads of %d bytes: %q, want %q", size, out.String(), want)
		}
	}
	f := usageFilter{}
	if got := string(f.keep([]byte(in))); got != in {
		t.Errorf("without strip: %q", got)
	}
}
