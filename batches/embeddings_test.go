package batches_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/models"
)

// A batch on /v1/embeddings runs each line through the pipeline as a live
// embeddings request: sluice-local's vectors and a provider's answer in
// the output file, metered as embeddings; a line for another endpoint, or
// a body that is no embeddings request, fails alone.
func TestABatchOfEmbeddings(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		q := f.queue(f.svc)
		embed := func(customID, body string) string {
			return `{"custom_id":"` + customID + `","method":"POST","url":"/v1/embeddings","body":` + body + `}`
		}
		input := strings.Join([]string{
			embed("local", `{"model":"sluice-local","input":["the river","the sea"],"dimensions":4}`),
			embed("provider", `{"model":"gpt-test","input":"alpha beta","encoding_format":"base64"}`),
			line("chat", "a chat line in an embeddings batch"),
			embed("empty", `{"model":"sluice-local","input":""}`),
		}, "\n") + "\n"
		b := f.createFor(q, f.caller, "/v1/embeddings", input)
		if b.Endpoint != "/v1/embeddings" || b.Total != 4 || b.Failed != 2 {
			t.Fatalf("created: %+v", b)
		}
		b = f.wait(f.caller, b.ID, 20*time.Second)
		if b.Status != "completed" || b.Completed != 2 || b.Failed != 2 {
			t.Fatalf("done: %+v", b)
		}
		out := f.file(f.caller, b.OutputFileID)
		if len(out) != 2 || out[0].custom() != "local" || out[1].custom() != "provider" {
			t.Fatalf("output: %+v", out)
		}
		var local struct {
			Object string
			Data   []struct{ Embedding []float32 }
			Usage  struct {
				PromptTokens int `json:"prompt_tokens"`
			}
		}
		if err := json.Unmarshal(out[0].Response.Body, &local); err != nil || out[0].Response.StatusCode != 200 || local.Object != "list" ||
			len(local.Data) != 2 || len(local.Data[0].Embedding) != 4 || local.Usage.PromptTokens == 0 {
			t.Fatalf("local line: %v %s", err, out[0].Response.Body)
		}
		if body := string(out[1].Response.Body); !strings.Contains(body, `"embedding":"AAAAPwAAgL4="`) || f.embeddingCalls.Load() != 1 {
			t.Fatalf("provider line: %s (%d embeddings calls)", body, f.embeddingCalls.Load())
		}
		errs := f.file(f.caller, b.ErrorFileID)
		if len(errs) != 2 || errs[0].custom() != "chat" || errs[0].Error.Code != "invalid_url" ||
			errs[0].Error.Message != `line 3: url must be "/v1/embeddings", the batch's endpoint` ||
			errs[1].custom() != "empty" || errs[1].Error.Code != "invalid_input" || errs[1].Error.Message != "line 4: body: input must not be an empty string" {
			t.Fatalf("error file: %+v", errs)
		}
		// Metered under the jobs' ids as embeddings: the provider's by its
		// usage, nothing generated.
		var events []models.UsageEvent
		db.Gorm.Where("request_id LIKE 'job_%'").Order("model").Find(&events)
		if len(events) != 2 || events[0].Model != "gpt-test" || events[0].PromptTokens != 4 || events[1].Model != "sluice-local" {
			t.Fatalf("usage %+v", events)
		}
		for _, ev := range events {
			if ev.Dialect != "embeddings" || ev.CompletionTokens != 0 {
				t.Fatalf("event %+v", ev)
			}
		}
	})
}
