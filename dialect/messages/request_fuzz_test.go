package messages

import (
	"encoding/json"
	"testing"

	"github.com/sluicehq/sluice/apperr"
)

// FuzzToChat holds that no body, however malformed, panics or fails with
// anything but a 400, and that what translates is a JSON object.
func FuzzToChat(f *testing.F) {
	for _, seed := range []string{
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"m","max_tokens":5,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"x"}}]}]}]}`,
		`{"model":"m","max_tokens":5,"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"tool","name":"f"},"messages":[{"role":"user","content":[null,1,"x",{"type":7}]}]}`,
		`{"messages":{"role":"user"}}`, `[]`, `null`, `"x"`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		tr, err := ToChat(body, Options{})
		if err != nil {
			if e, ok := err.(*apperr.Error); !ok || e.Code != apperr.Invalid || e.Message == "" {
				t.Fatalf("%q: %v", body, err)
			}
			return
		}
		var v map[string]any
		if json.Unmarshal(tr.Chat, &v) != nil || v["model"] == nil {
			t.Fatalf("%q translated to %s", body, tr.Chat)
		}
	})
}
