package handlers

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/sluicehq/sluice/internal/testdb"
)

// TestOpenAIGoSDKResponses drives the Responses API with the official
// openai-go SDK, unchanged but for its base URL and key, against the real
// router: a response, its continuation sent the moment it arrives, GET,
// a stream read event by event, a refusal as the SDK's typed error, and
// DELETE.
func TestOpenAIGoSDKResponses(t *testing.T) {
	e := newEnv(t, testdb.SQLite(t))
	key, _ := e.apiToken(e.signup("a@example.com", "A"))
	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close)
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey(key), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	params := responses.ResponseNewParams{
		Model:        "sluice-local",
		Instructions: openai.String("Answer briefly."),
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("写一副关于平安的春联")},
		Tools: []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "weather", Strict: openai.Bool(true),
			Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}}},
		Metadata: map[string]string{"case": "sdk"},
	}

	resp, err := client.Responses.New(ctx, params)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if !strings.HasPrefix(resp.ID, "resp_") || resp.Status != responses.ResponseStatusCompleted || !strings.Contains(resp.OutputText(), "上联") ||
		resp.Model != "sluice-local" || resp.Metadata["case"] != "sdk" || len(resp.Tools) != 1 || resp.Tools[0].Name != "weather" {
		t.Fatalf("response: %+v", resp)
	}
	u := resp.Usage
	if u.InputTokens == 0 || u.OutputTokens == 0 || u.TotalTokens != u.InputTokens+u.OutputTokens {
		t.Fatalf("usage: %+v", u)
	}

	again := responses.ResponseNewParams{Model: "sluice-local", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("再来一副")}}
	fresh, err := client.Responses.New(ctx, again)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	again.PreviousResponseID = openai.String(resp.ID)
	next, err := client.Responses.New(ctx, again)
	if err != nil {
		t.Fatalf("continuation: %v", err)
	}
	if next.PreviousResponseID != resp.ID || next.Usage.InputTokens <= fresh.Usage.InputTokens+u.OutputTokens {
		t.Fatalf("the continuation's input (%d tokens) lacks the first exchange: alone it is %d, the first answer %d",
			next.Usage.InputTokens, fresh.Usage.InputTokens, u.OutputTokens)
	}

	got, err := client.Responses.Get(ctx, resp.ID, responses.ResponseGetParams{})
	if err != nil || got.OutputText() != resp.OutputText() || got.Usage.TotalTokens != u.TotalTokens {
		t.Fatalf("Get: %+v %v", got, err)
	}

	stream := client.Responses.NewStreaming(ctx, params)
	var text strings.Builder
	var kinds []string
	var completed responses.Response
	for stream.Next() {
		ev := stream.Current()
		kinds = append(kinds, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.AsResponseOutputTextDelta().Delta)
		case "response.completed":
			completed = ev.AsResponseCompleted().Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v (events %v)", err, kinds)
	}
	if kinds[0] != "response.created" || kinds[len(kinds)-1] != "response.completed" || text.String() != completed.OutputText() ||
		!strings.Contains(text.String(), "上联") || completed.Usage.TotalTokens != u.TotalTokens || completed.Usage.OutputTokens != u.OutputTokens {
		t.Fatalf("streamed %q, completed %+v, events %v", text.String(), completed, kinds)
	}

	params.Background = openai.Bool(true)
	_, err = client.Responses.New(ctx, params)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "unsupported_parameter" || apiErr.Param != "background" ||
		!strings.Contains(apiErr.Message, "background responses are not supported") {
		t.Fatalf("refusal: %v", err)
	}

	if err := client.Responses.Delete(ctx, resp.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err = client.Responses.Get(ctx, resp.ID, responses.ResponseGetParams{})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "response_not_found" {
		t.Fatalf("Get after Delete: %v", err)
	}
}
