package mock

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/png"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

const geminiPath = "/v1beta/models/gemini-2.5-flash:generateContent"

const geminiBody = `{"systemInstruction":{"parts":[{"text":"be brief"}]},"contents":[{"role":"user","parts":[{"text":"write a spring couplet about good fortune and long life please"}]}]}`

// doGemini sends one Gemini request to h with key in x-goog-api-key.
func doGemini(t *testing.T, h http.Handler, path, key, body string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest("POST", path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("x-goog-api-key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

type googleError struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
		Details []struct {
			Type       string `json:"@type"`
			Reason     string `json:"reason"`
			RetryDelay string `json:"retryDelay"`
		} `json:"details"`
	} `json:"error"`
}

func googleErrorOf(t *testing.T, rec *httptest.ResponseRecorder) googleError {
	t.Helper()
	var e googleError
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
		t.Fatalf("error body %q: %v", rec.Body.String(), err)
	}
	return e
}

// The Gemini speaker refuses keys as Gemini does: none with 403
// PERMISSION_DENIED, an unknown one with 400 API_KEY_INVALID.
func TestGeminiAuth(t *testing.T) {
	s := New(Config{Keys: map[string]float64{"AIza-a": 0}})
	rec := doGemini(t, s, geminiPath, "", geminiBody)
	if e := googleErrorOf(t, rec); rec.Code != 403 || e.Error.Status != "PERMISSION_DENIED" || !strings.Contains(e.Error.Message, "unregistered callers") {
		t.Fatalf("no key: %d %s", rec.Code, rec.Body)
	}
	rec = doGemini(t, s, geminiPath, "AIza-b", geminiBody)
	if e := googleErrorOf(t, rec); rec.Code != 400 || e.Error.Status != "INVALID_ARGUMENT" || e.Error.Message != "API key not valid. Please pass a valid API key." ||
		len(e.Error.Details) != 1 || e.Error.Details[0].Reason != "API_KEY_INVALID" {
		t.Fatalf("unknown key: %d %s", rec.Code, rec.Body)
	}
	if rec := doGemini(t, s, geminiPath, "AIza-a", geminiBody); rec.Code != 200 {
		t.Fatalf("good key: %d %s", rec.Code, rec.Body)
	}
}

type geminiAnswer struct {
	Candidates []struct {
		Content struct {
			Role  string `json:"role"`
			Parts []struct {
				Text         string `json:"text"`
				FunctionCall *struct {
					Name string          `json:"name"`
					Args json.RawMessage `json:"args"`
				} `json:"functionCall"`
			} `json:"parts"`
		} `json:"content"`
		FinishReason string `json:"finishReason"`
	} `json:"candidates"`
	UsageMetadata struct {
		PromptTokenCount, CandidatesTokenCount, TotalTokenCount int
	} `json:"usageMetadata"`
	ModelVersion string `json:"modelVersion"`
}

func geminiAnswerOf(t *testing.T, body string) geminiAnswer {
	t.Helper()
	var a geminiAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil || len(a.Candidates) != 1 || len(a.Candidates[0].Content.Parts) == 0 {
		t.Fatalf("answer %q: %v", body, err)
	}
	return a
}

// It answers in Gemini's format with usageMetadata, cut at
// maxOutputTokens with MAX_TOKENS.
func TestGeminiAnswer(t *testing.T) {
	s := New(Config{Keys: map[string]float64{"k": 0}})
	rec := doGemini(t, s, geminiPath, "k", geminiBody)
	a := geminiAnswerOf(t, rec.Body.String())
	text := "mock reply to: write a spring couplet about good fortun" // the first 40 runes
	c := a.Candidates[0]
	if rec.Code != 200 || c.Content.Role != "model" || c.Content.Parts[0].Text != text || c.FinishReason != "STOP" || a.ModelVersion != "gemini-2.5-flash" {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	u := a.UsageMetadata
	if u.CandidatesTokenCount != Tokens(text) || u.PromptTokenCount <= Tokens("be brief") || u.TotalTokenCount != u.PromptTokenCount+u.CandidatesTokenCount {
		t.Fatalf("usage %+v", u)
	}
	bounded := strings.Replace(geminiBody, `"contents"`, `"generationConfig":{"maxOutputTokens":3},"contents"`, 1)
	a = geminiAnswerOf(t, doGemini(t, s, geminiPath, "k", bounded).Body.String())
	if c := a.Candidates[0]; c.FinishReason != "MAX_TOKENS" || a.UsageMetadata.CandidatesTokenCount != 3 || Tokens(c.Content.Parts[0].Text) != 3 {
		t.Fatalf("bounded: %+v", a)
	}
}

// An inline image is billed as Gemini bills it: 258 tokens up to 384
// pixels a side, 258 a 768-pixel tile above.
func TestGeminiBillsInlineImages(t *testing.T) {
	s := New(Config{Keys: map[string]float64{"k": 0}})
	prompt := func(parts string) int {
		t.Helper()
		rec := doGemini(t, s, geminiPath, "k", `{"contents":[{"role":"user","parts":[{"text":"what is this?"}`+parts+`]}]}`)
		if rec.Code != 200 {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		return geminiAnswerOf(t, rec.Body.String()).UsageMetadata.PromptTokenCount
	}
	inline := func(w, h int) string {
		var b bytes.Buffer
		if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
			t.Fatal(err)
		}
		return `,{"inlineData":{"mimeType":"image/png","data":"` + base64.StdEncoding.EncodeToString(b.Bytes()) + `"}}`
	}
	text := prompt("")
	for _, c := range []struct {
		w, h, tokens int
	}{{40, 30, 258}, {384, 384, 258}, {385, 100, 258}, {800, 1600, 258 * 2 * 3}} {
		if got := prompt(inline(c.w, c.h)) - text; got != c.tokens {
			t.Errorf("a %d×%d image billed %d tokens, want %d", c.w, c.h, got, c.tokens)
		}
	}
	if got := prompt(inline(40, 30)+inline(40, 30)) - text; got != 2*258 {
		t.Errorf("two images billed %d tokens", got)
	}
}

// A request with functions gets a call of the first one it may call; once
// the last turn is a function's result, a text answer.
func TestGeminiFunctionCall(t *testing.T) {
	s := New(Config{Keys: map[string]float64{"k": 0}})
	tools := `"tools":[{"functionDeclarations":[{"name":"get_weather"},{"name":"get_time"}]}]`
	a := geminiAnswerOf(t, doGemini(t, s, geminiPath, "k", `{"contents":[{"role":"user","parts":[{"text":"weather?"}]}],`+tools+`}`).Body.String())
	if fc := a.Candidates[0].Content.Parts[0].FunctionCall; fc == nil || fc.Name != "get_weather" || string(fc.Args) != `{"text":"weather?"}` {
		t.Fatalf("answer %+v", a)
	}
	a = geminiAnswerOf(t, doGemini(t, s, geminiPath, "k", `{"contents":[{"role":"user","parts":[{"text":"weather?"}]}],`+tools+
		`,"toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["get_time"]}}}`).Body.String())
	if fc := a.Candidates[0].Content.Parts[0].FunctionCall; fc == nil || fc.Name != "get_time" {
		t.Fatalf("allowed names: %+v", a)
	}
	a = geminiAnswerOf(t, doGemini(t, s, geminiPath, "k", `{"contents":[{"role":"user","parts":[{"text":"weather?"}]}],`+tools+
		`,"toolConfig":{"functionCallingConfig":{"mode":"NONE"}}}`).Body.String())
	if p := a.Candidates[0].Content.Parts[0]; p.FunctionCall != nil || p.Text != "mock reply to: weather?" {
		t.Fatalf("mode NONE: %+v", a)
	}
	answered := `{"contents":[{"role":"user","parts":[{"text":"weather?"}]},{"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{}}}]},
		{"role":"user","parts":[{"functionResponse":{"name":"get_weather","response":{"content":"sunny"}}}]}],` + tools + `}`
	a = geminiAnswerOf(t, doGemini(t, s, geminiPath, "k", answered).Body.String())
	if p := a.Candidates[0].Content.Parts[0]; p.FunctionCall != nil || p.Text != "mock reply to: weather?" {
		t.Fatalf("after the result: %+v", a)
	}
}

// A stream (alt=sse) is Gemini's events, CRLF-ended, each with the usage
// so far; the last finishes with the whole usage, which is the plain
// answer's.
func TestGeminiStream(t *testing.T) {
	s := New(Config{Keys: map[string]float64{"k": 0}, StreamChunks: 3})
	path := "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
	if rec := doGemini(t, s, path, "k", geminiBody); rec.Code != 400 || !strings.Contains(rec.Body.String(), "alt=sse") {
		t.Fatalf("without alt=sse: %d %s", rec.Code, rec.Body)
	}
	rec := doGemini(t, s, path+"?alt=sse", "k", geminiBody)
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %v", rec.Code, rec.Header())
	}
	events := strings.Split(strings.TrimSuffix(rec.Body.String(), "\r\n\r\n"), "\r\n\r\n")
	if len(events) != 3 {
		t.Fatalf("%d events:\n%s", len(events), rec.Body)
	}
	var text strings.Builder
	var last geminiAnswer
	for i, ev := range events {
		payload, ok := strings.CutPrefix(ev, "data: ")
		if !ok {
			t.Fatalf("event %q", ev)
		}
		last = geminiAnswerOf(t, payload)
		text.WriteString(last.Candidates[0].Content.Parts[0].Text)
		if fin := last.Candidates[0].FinishReason; (i < 2) != (fin == "") {
			t.Fatalf("event %d finishes with %q", i, fin)
		}
	}
	whole := geminiAnswerOf(t, doGemini(t, s, geminiPath, "k", geminiBody).Body.String())
	if text.String() != whole.Candidates[0].Content.Parts[0].Text || last.UsageMetadata != whole.UsageMetadata {
		t.Fatalf("streamed %q with %+v; whole %+v", text.String(), last.UsageMetadata, whole)
	}
}

// An empty bucket is a 429 RESOURCE_EXHAUSTED whose RetryInfo says when a
// request is allowed again, and no rate-limit headers; X-Mock-Status
// forces a status in Gemini's error shape.
func TestGeminiRateLimitAndHooks(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := New(Config{Keys: map[string]float64{"k": 4}, Burst: 1, Now: func() time.Time { return now }})
	if rec := doGemini(t, s, geminiPath, "k", geminiBody); rec.Code != 200 {
		t.Fatalf("first: %d", rec.Code)
	}
	rec := doGemini(t, s, geminiPath, "k", geminiBody)
	e := googleErrorOf(t, rec)
	if rec.Code != 429 || e.Error.Status != "RESOURCE_EXHAUSTED" || len(e.Error.Details) != 2 || e.Error.Details[1].RetryDelay != "0.250s" ||
		rec.Header().Get("Retry-After") != "" || rec.Header().Get("x-ratelimit-limit-requests") != "" {
		t.Fatalf("%d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	rec = doGemini(t, s, geminiPath, "k", geminiBody, "X-Mock-Status", "429", "X-Mock-Retry-After", "13")
	if e := googleErrorOf(t, rec); rec.Code != 429 || e.Error.Message != "forced by X-Mock-Status" || e.Error.Details[0].RetryDelay != "13s" {
		t.Fatalf("forced 429: %d %s", rec.Code, rec.Body)
	}
	rec = doGemini(t, s, geminiPath, "k", geminiBody, "X-Mock-Status", "503")
	if e := googleErrorOf(t, rec); rec.Code != 503 || e.Error.Status != "UNAVAILABLE" || e.Error.Code != 503 {
		t.Fatalf("forced 503: %d %s", rec.Code, rec.Body)
	}
	if st := s.Stats().Keys["k"]; st.Requests != 4 || st.OK != 1 || st.Status429 != 2 || st.Status5xx != 1 {
		t.Fatalf("stats %+v", st)
	}
}
