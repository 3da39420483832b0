package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/apperr"
)

// canonical is a JSON text with its object keys sorted and no spaces, so
// two texts compare by meaning.
func canonical(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func geminiBody(t *testing.T, model, body string) (string, error) {
	t.Helper()
	b, err := geminiRequestBody(Request{Model: model, Body: []byte(body)})
	return string(b), err
}

// OpenAI's chat requests reach Gemini as generateContent bodies that mean
// the same: system messages as the system instruction, turns merged by
// role, images, audio and files inline or by address, tool calls and
// their results as function calls and responses, tools with their JSON
// Schema, tool_choice as the function calling mode, the sampling settings
// and bounds in generationConfig.
func TestGeminiTranslatesRequests(t *testing.T) {
	cases := []struct {
		name, model, in, want string
	}{
		{"system, merged turns, generation settings", "gemini-2.5-flash",
			`{"model":"gemini-2.5-flash","messages":[{"role":"system","content":"be brief"},{"role":"developer","content":[{"type":"text","text":"in French"}]},
			{"role":"user","content":"hi"},{"role":"user","content":[{"type":"text","text":"there"}]},{"role":"assistant","content":"bonjour"},{"role":"user","content":""}],
			"max_tokens":50,"temperature":0.7,"top_p":1,"presence_penalty":0.5,"frequency_penalty":-0.5,"stop":"END","seed":7,"n":1,
			"stream":true,"stream_options":{"include_usage":true},"user":"u1","logprobs":false,"parallel_tool_calls":true}`,
			`{"contents":[{"role":"user","parts":[{"text":"hi"},{"text":"there"}]},{"role":"model","parts":[{"text":"bonjour"}]}],
			"systemInstruction":{"parts":[{"text":"be brief"},{"text":"in French"}]},
			"generationConfig":{"stopSequences":["END"],"maxOutputTokens":50,"temperature":0.7,"topP":1,"presencePenalty":0.5,"frequencyPenalty":-0.5,"seed":7}}`},
		{"max_completion_tokens over max_tokens, stop as a list", "gemini-2.5-flash",
			`{"messages":[{"role":"user","content":"hi"}],"max_tokens":10,"max_completion_tokens":20,"stop":["a","b"]}`,
			`{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"stopSequences":["a","b"],"maxOutputTokens":20}}`},
		{"images, audio and files", "gemini-2.5-flash",
			`{"messages":[{"role":"user","content":[{"type":"text","text":"look"},
			{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0K","detail":"high"}},
			{"type":"image_url","image_url":{"url":"https://example.com/cat.JPG?size=2"}},
			{"type":"input_audio","input_audio":{"data":"UklGRg","format":"wav"}},
			{"type":"file","file":{"file_data":"data:application/pdf;base64,JVBERi0","filename":"a.pdf"}}]}]}`,
			`{"contents":[{"role":"user","parts":[{"text":"look"},{"inlineData":{"mimeType":"image/png","data":"iVBORw0K"}},
			{"fileData":{"mimeType":"image/jpeg","fileUri":"https://example.com/cat.JPG?size=2"}},
			{"inlineData":{"mimeType":"audio/wav","data":"UklGRg"}},{"inlineData":{"mimeType":"application/pdf","data":"JVBERi0"}}]}]}`},
		{"tool calls, their results, tools and tool_choice", "gemini-2.5-flash",
			`{"messages":[{"role":"user","content":"weather and time?"},
			{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}},
			{"id":"call_2","type":"function","function":{"name":"get_time","arguments":""}}]},
			{"role":"tool","tool_call_id":"call_1","content":"{\"temp\":21}"},{"role":"tool","tool_call_id":"call_2","content":[{"type":"text","text":"noon"}]}],
			"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather now","parameters":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object",
			"properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false},"strict":false}},
			{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{}}}}],"tool_choice":"auto"}`,
			`{"contents":[{"role":"user","parts":[{"text":"weather and time?"}]},
			{"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{"city":"Paris"}}},{"functionCall":{"name":"get_time","args":{}}}]},
			{"role":"user","parts":[{"functionResponse":{"name":"get_weather","response":{"temp":21}}},{"functionResponse":{"name":"get_time","response":{"content":"noon"}}}]}],
			"tools":[{"functionDeclarations":[{"name":"get_weather","description":"Weather now","parametersJsonSchema":{"$schema":"http://json-schema.org/draft-07/schema#",
			"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}},{"name":"get_time"}]}],
			"toolConfig":{"functionCallingConfig":{"mode":"AUTO"}}}`},
		{"a tool call's thought signature goes back with it", "gemini-3-pro-preview",
			`{"messages":[{"role":"user","content":"go"},{"role":"assistant","content":"calling","tool_calls":[{"id":"call_abc_0__ts_-__-","type":"function","function":{"name":"f","arguments":"{}"}}]},
			{"role":"tool","tool_call_id":"call_abc_0__ts_-__-","content":"done"}],"tools":[{"type":"function","function":{"name":"f"}}]}`,
			`{"contents":[{"role":"user","parts":[{"text":"go"}]},{"role":"model","parts":[{"text":"calling"},{"functionCall":{"name":"f","args":{}},"thoughtSignature":"+//+"}]},
			{"role":"user","parts":[{"functionResponse":{"name":"f","response":{"content":"done"}}}]}],"tools":[{"functionDeclarations":[{"name":"f"}]}]}`},
		{"JSON mode with a schema, thinking budget", "gemini-2.5-flash",
			`{"messages":[{"role":"user","content":"hi"}],"reasoning_effort":"low",
			"response_format":{"type":"json_schema","json_schema":{"name":"r","strict":true,"schema":{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":false}}}}`,
			`{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"responseMimeType":"application/json",
			"responseJsonSchema":{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":false},"thinkingConfig":{"thinkingBudget":1024}}}`},
		{"JSON mode, thinking level", "gemini-3-pro-preview",
			`{"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object"},"reasoning_effort":"high"}`,
			`{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"responseMimeType":"application/json","thinkingConfig":{"thinkingLevel":"high"}}}`},
		{"thinking off on Gemini 2", "gemini-2.5-flash",
			`{"messages":[{"role":"user","content":"hi"}],"reasoning_effort":"none","response_format":{"type":"text"}}`,
			`{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"thinkingConfig":{"thinkingBudget":0}}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := geminiBody(t, tc.model, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if canonical(t, got) != canonical(t, tc.want) {
				t.Fatalf("got  %s\nwant %s", canonical(t, got), canonical(t, tc.want))
			}
		})
	}
}

// tool_choice is Gemini's function calling mode: none NONE, auto AUTO,
// required ANY, a named function ANY limited to it, allowed_tools ANY or
// VALIDATED limited to them, strict functions VALIDATED.
func TestGeminiTranslatesToolChoice(t *testing.T) {
	tools := `"tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b","strict":%s}}]`
	cases := []struct{ choice, strict, want string }{
		{`"none"`, "false", `{"functionCallingConfig":{"mode":"NONE"}}`},
		{`"required"`, "false", `{"functionCallingConfig":{"mode":"ANY"}}`},
		{`{"type":"function","function":{"name":"b"}}`, "false", `{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["b"]}}`},
		{`{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"function","function":{"name":"a"}}]}}`, "false",
			`{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["a"]}}`},
		{`{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[{"type":"function","function":{"name":"a"}}]}}`, "false",
			`{"functionCallingConfig":{"mode":"VALIDATED","allowedFunctionNames":["a"]}}`},
		{`"auto"`, "true", `{"functionCallingConfig":{"mode":"VALIDATED"}}`},
		{`null`, "true", `{"functionCallingConfig":{"mode":"VALIDATED"}}`},
		{`"required"`, "true", `{"functionCallingConfig":{"mode":"ANY"}}`},
		{`null`, "false", `null`},
	}
	for _, tc := range cases {
		in := `{"messages":[{"role":"user","content":"x"}],"tool_choice":` + tc.choice + "," + strings.Replace(tools, "%s", tc.strict, 1) + "}"
		got, err := geminiBody(t, "gemini-2.5-flash", in)
		if err != nil {
			t.Fatalf("%s strict %s: %v", tc.choice, tc.strict, err)
		}
		var body struct {
			ToolConfig json.RawMessage `json:"toolConfig"`
		}
		_ = json.Unmarshal([]byte(got), &body)
		if body.ToolConfig == nil {
			body.ToolConfig = json.RawMessage("null")
		}
		if canonical(t, string(body.ToolConfig)) != canonical(t, tc.want) {
			t.Errorf("%s strict %s: toolConfig %s, want %s", tc.choice, tc.strict, body.ToolConfig, tc.want)
		}
	}
}

// What Gemini cannot do is refused with a 400 naming the field, never
// dropped; so is a request the translation cannot make sense of.
func TestGeminiRefusesWhatItCannotDo(t *testing.T) {
	user := `"messages":[{"role":"user","content":"hi"}]`
	image := func(url string) string { // a user message of one image_url part
		return `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"` + url + `"}}]}]}`
	}
	cases := []struct{ name, model, in, param, message string }{
		{"n", "gemini-2.5-flash", `{` + user + `,"n":2}`, "n", "n other than 1 is not supported"},
		{"logprobs", "gemini-2.5-flash", `{` + user + `,"logprobs":true}`, "logprobs", "logprobs are not supported"},
		{"top_logprobs", "gemini-2.5-flash", `{` + user + `,"top_logprobs":2}`, "top_logprobs", "top_logprobs is not supported by Gemini keys"},
		{"logit_bias", "gemini-2.5-flash", `{` + user + `,"logit_bias":{"50256":-100}}`, "logit_bias", "logit_bias is not supported"},
		{"audio output", "gemini-2.5-flash", `{` + user + `,"audio":{"voice":"alloy","format":"wav"}}`, "audio", "audio is not supported by Gemini keys"},
		{"modalities", "gemini-2.5-flash", `{` + user + `,"modalities":["text","audio"]}`, "modalities", "answer text only"},
		{"parallel_tool_calls false", "gemini-2.5-flash", `{` + user + `,"parallel_tool_calls":false}`, "parallel_tool_calls", "no switch to prevent it"},
		{"prediction", "gemini-2.5-flash", `{` + user + `,"prediction":{"type":"content","content":"x"}}`, "prediction", "prediction is not supported"},
		{"legacy functions", "gemini-2.5-flash", `{` + user + `,"functions":[{"name":"f"}]}`, "functions", "use tools and tool_choice"},
		{"store", "gemini-2.5-flash", `{` + user + `,"store":true}`, "store", "keeps no stored completions"},
		{"service tier", "gemini-2.5-flash", `{` + user + `,"service_tier":"flex"}`, "service_tier", "service_tier flex is not supported"},
		{"unknown field", "gemini-2.5-flash", `{` + user + `,"web_search_options":{}}`, "web_search_options", "web_search_options is not supported by Gemini keys"},
		{"response format", "gemini-2.5-flash", `{` + user + `,"response_format":{"type":"grammar"}}`, "response_format.type", "'grammar' is not supported"},
		{"reasoning effort", "gemini-3-pro-preview", `{` + user + `,"reasoning_effort":"none"}`, "reasoning_effort", "'none' is not supported by gemini-3-pro-preview"},
		{"bad tool arguments", "gemini-2.5-flash",
			`{"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{city:"}}]}]}`,
			"messages[1].tool_calls[0].function.arguments", "must be a JSON object; messages[1].tool_calls[0] has {city:"},
		{"arguments not an object", "gemini-2.5-flash",
			`{"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"[1]"}}]}]}`,
			"messages[1].tool_calls[0].function.arguments", "must be a JSON object"},
		{"tool result without its call", "gemini-2.5-flash",
			`{"messages":[{"role":"user","content":"x"},{"role":"tool","tool_call_id":"call_9","content":"r"}]}`,
			"messages[1].tool_call_id", "'call_9' matches no tool call of an earlier assistant message"},
		{"image by ftp", "gemini-2.5-flash", image("ftp://x/y.png"),
			"messages[0].content[0].image_url.url", "data: URLs or https addresses"},
		{"image by http", "gemini-2.5-flash", image("http://x/y.png"),
			"messages[0].content[0].image_url.url", "data: URLs or https addresses"},
		{"a PDF as an image", "gemini-2.5-flash", image("data:application/pdf;base64,JVBERi0"),
			"messages[0].content[0].image_url.url", "an image_url part must carry an image; messages[0].content[0] is application/pdf"},
		{"a video as an image", "gemini-2.5-flash", image("data:video/mp4;base64,AAAA"),
			"messages[0].content[0].image_url.url", "is video/mp4"},
		{"a PDF by address", "gemini-2.5-flash", image("https://x.example/doc.pdf"),
			"messages[0].content[0].image_url.url", "only when its path ends in an image's extension"},
		{"an address without an extension", "gemini-2.5-flash", image("https://x.example/render?id=1"),
			"messages[0].content[0].image_url.url", "send messages[0].content[0] as a data: URL"},
		{"data URL not base64", "gemini-2.5-flash", image("data:image/png,abc"),
			"messages[0].content[0].image_url.url", "must be a base64 data: URL"},
		{"file by id", "gemini-2.5-flash", `{"messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-1"}}]}]}`,
			"messages[0].content[0].file.file_id", "not as OpenAI file ids"},
		{"audio format", "gemini-2.5-flash", `{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"x","format":"flac"}}]}]}`,
			"messages[0].content[0].input_audio.format", "wav or mp3"},
		{"image in a system message", "gemini-2.5-flash",
			`{"messages":[{"role":"system","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,x"}}]},{"role":"user","content":"x"}]}`,
			"messages[0].content[0].type", "text only"},
		{"assistant audio", "gemini-2.5-flash", `{"messages":[{"role":"user","content":"x"},{"role":"assistant","audio":{"id":"a1"}}]}`,
			"messages[1].audio", "audio in assistant messages"},
		{"custom tool", "gemini-2.5-flash", `{` + user + `,"tools":[{"type":"custom","custom":{"name":"g"}}]}`, "tools[0].type", "function tools only; tools[0] is 'custom'"},
		{"tool_choice names no tool", "gemini-2.5-flash",
			`{` + user + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`,
			"tool_choice", "names 'g', which is not among the tools"},
		{"tool_choice without tools", "gemini-2.5-flash", `{` + user + `,"tool_choice":"required"}`, "tool_choice", "tool_choice needs tools"},
		{"system only", "gemini-2.5-flash", `{"messages":[{"role":"system","content":"x"}]}`, "messages", "at least one user or assistant message"},
		{"unknown role", "gemini-2.5-flash", `{"messages":[{"role":"robot","content":"x"}]}`, "messages[0].role", "role must be one of"},
		{"not an object", "gemini-2.5-flash", `[1]`, "", "the body must be a JSON object"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := geminiBody(t, tc.model, tc.in)
			var ae *apperr.Error
			if !errors.As(err, &ae) || ae.Code != apperr.Invalid || ae.Param != tc.param || !strings.Contains(ae.Message, tc.message) {
				t.Fatalf("err = %#v, want a 400 on %q saying %q", err, tc.param, tc.message)
			}
		})
	}
}

// A request a Gemini key cannot make is refused by Do before anything is
// sent, and reaches the client as the 400 it is; the key stays healthy.
func TestGeminiRefusalsSendNothing(t *testing.T) {
	var h hits
	srv := provider(t, func(w http.ResponseWriter, r *http.Request) { h.add(r) })
	k := key(1, srv.URL, "g")
	k.Provider = KindGemini
	p, _ := testPool(t, PoolOptions{}, k)
	for _, req := range []Request{
		{Model: "gemini-2.5-flash", Body: []byte(`{"messages":[{"role":"user","content":"hi"}],"logit_bias":{"1":2}}`)},
		{Model: "gemini/../../secrets", Body: []byte(`{"messages":[{"role":"user","content":"hi"}]}`)},
		{Model: "text-embedding-004", Endpoint: Embeddings, Body: []byte(`{"input":[[1,2,3]]}`)},
		{Model: "text-embedding-004", Endpoint: Embeddings, Body: []byte(`{"input":[` + strings.Repeat(`"x",`, geminiEmbedMax) + `"x"]}`)},
	} {
		_, err := p.Do(context.Background(), req)
		var ae *apperr.Error
		if !errors.As(err, &ae) || apperr.Status(ae.Code) != http.StatusBadRequest || ae.Param == "" {
			t.Fatalf("%s: err = %v, want a 400 naming the field", req.Model, err)
		}
	}
	if h.total() != 0 {
		t.Fatalf("the provider was called %d times", h.total())
	}
	if s := status(t, p, 1); s.State != Healthy || s.Failures != 0 {
		t.Fatalf("status %+v, want healthy", s)
	}
}

// A Gemini key's base URL is the API root, with or without /v1beta;
// anything else, or a key in the URL, is refused in words the admin can
// act on.
func TestGeminiBaseURLs(t *testing.T) {
	for _, tc := range []struct{ base, want string }{
		{"https://generativelanguage.googleapis.com", ""},
		{"https://generativelanguage.googleapis.com/", ""},
		{"https://generativelanguage.googleapis.com/v1beta", ""},
		{"https://generativelanguage.googleapis.com/v1beta/", ""},
		{"http://127.0.0.1:8080", ""},
		{"https://generativelanguage.googleapis.com/v1", "Sluice calls /v1beta/models/{model}:generateContent"},
		{"https://generativelanguage.googleapis.com/v1beta/openai", "Sluice calls /v1beta/models/{model}:generateContent"},
		{"https://generativelanguage.googleapis.com?key=AIza", "never in the URL"},
		{"https://user:pw@generativelanguage.googleapis.com", "never in the URL"},
		{"ftp://generativelanguage.googleapis.com", "absolute http(s) URL"},
	} {
		err := CheckBaseURL(KindGemini, tc.base)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.base, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.base, err, tc.want)
		}
	}
	if kinds := strings.Join(Kinds(), ","); kinds != "openai,anthropic,gemini,azure" {
		t.Fatalf("Kinds() = %s", kinds)
	}
}

// The request goes to the model's generateContent (streamGenerateContent
// with alt=sse for a stream) under v1beta, the key in x-goog-api-key and
// never in the URL.
func TestGeminiRequestURLAndKey(t *testing.T) {
	for _, tc := range []struct {
		base, model string
		stream      bool
		want        string
	}{
		{"https://g.example", "gemini-2.5-flash", false, "https://g.example/v1beta/models/gemini-2.5-flash:generateContent"},
		{"https://g.example/v1beta/", "models/gemini-2.5-flash", true, "https://g.example/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"},
		{"https://g.example", "tunedModels/my-model-1", false, "https://g.example/v1beta/tunedModels/my-model-1:generateContent"},
	} {
		base, _ := url.Parse(tc.base)
		req := Request{Model: tc.model, Stream: tc.stream, Body: []byte(`{"messages":[{"role":"user","content":"hi"}]}`)}
		hreq, err := geminiFormat{}.newRequest(context.Background(), &Key{Secret: "AIza-secret"}, base, req)
		if err != nil {
			t.Fatal(err)
		}
		if hreq.URL.String() != tc.want || strings.Contains(hreq.URL.String(), "AIza") {
			t.Errorf("URL %s, want %s", hreq.URL, tc.want)
		}
		if hreq.Header.Get("x-goog-api-key") != "AIza-secret" || hreq.Header.Get("Authorization") != "" {
			t.Errorf("headers %v", hreq.Header)
		}
	}
}
