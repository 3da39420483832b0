package mock

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The mock's Gemini speaker: POST .../v1beta/models/{model}:generateContent,
// :streamGenerateContent?alt=sse and :batchEmbedContents, in the format of
// Google's Gemini API (embeddings: a vector per request, as the OpenAI
// speaker makes them, of outputDimensionality; no usage, as Gemini sends
// none).
// The key comes in x-goog-api-key; a missing one is answered 403
// PERMISSION_DENIED and an unknown one 400 INVALID_ARGUMENT with the
// ErrorInfo reason API_KEY_INVALID, as Gemini answers them. The key's
// bucket, latency, failures and the X-Mock-Status and X-Mock-Retry-After
// hooks work as for chat completions; a refused take is a 429
// RESOURCE_EXHAUSTED whose google.rpc.RetryInfo says how long to wait
// (Gemini sends no rate-limit headers). The answer is "mock reply to: "
// and the start of the last user text, cut at maxOutputTokens
// (finishReason MAX_TOKENS); when the request declares functions and
// its last turn is not a function's result, it calls the first function
// it may call, with the arguments {"text": the start of the last user
// text}. The prompt is billed as its texts,
// calls, results and declarations, and each inline image as Gemini bills
// one (geminiImageTokens).

// geminiRequest is the part of a generateContent request the mock reads.
type geminiRequest struct {
	Contents          []geminiContent `json:"contents"`
	SystemInstruction *geminiContent  `json:"systemInstruction"`
	Tools             []struct {
		FunctionDeclarations []struct {
			Name        string `json:"name"`
			Description string `json:"description"`
		} `json:"functionDeclarations"`
	} `json:"tools"`
	ToolConfig *struct {
		FunctionCallingConfig struct {
			Mode                 string   `json:"mode"`
			AllowedFunctionNames []string `json:"allowedFunctionNames"`
		} `json:"functionCallingConfig"`
	} `json:"toolConfig"`
	GenerationConfig *struct {
		MaxOutputTokens *int `json:"maxOutputTokens"`
	} `json:"generationConfig"`
}

type geminiContent struct {
	Role  string       `json:"role,omitempty"`
	Parts []geminiPart `json:"parts"`
}

type geminiPart struct {
	Text       string `json:"text,omitempty"`
	InlineData *struct {
		MimeType string `json:"mimeType"`
		Data     string `json:"data"`
	} `json:"inlineData,omitempty"`
	FunctionCall *struct {
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	} `json:"functionCall,omitempty"`
	FunctionResponse *struct {
		Name     string          `json:"name"`
		Response json.RawMessage `json:"response"`
	} `json:"functionResponse,omitempty"`
}

type geminiUsage struct {
	PromptTokenCount     int `json:"promptTokenCount"`
	CandidatesTokenCount int `json:"candidatesTokenCount,omitempty"`
	TotalTokenCount      int `json:"totalTokenCount"`
}

type geminiCandidate struct {
	Content      geminiContent `json:"content"`
	FinishReason string        `json:"finishReason,omitempty"`
	Index        int           `json:"index"`
}

type geminiResponse struct {
	Candidates    []geminiCandidate `json:"candidates"`
	UsageMetadata geminiUsage       `json:"usageMetadata"`
	ModelVersion  string            `json:"modelVersion"`
	ResponseID    string            `json:"responseId"`
}

// geminiStatuses are Google's status names for the HTTP statuses the
// mock answers.
var geminiStatuses = map[int]string{400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
	404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}

// writeGeminiError writes Google's error body, with these details.
func writeGeminiError(w http.ResponseWriter, status int, message string, details ...any) {
	name, ok := geminiStatuses[status]
	if !ok {
		name = "UNKNOWN"
	}
	if details == nil {
		details = []any{}
	}
	type body struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
		Details []any  `json:"details,omitempty"`
	}
	writeJSON(w, status, struct {
		Error body `json:"error"`
	}{body{status, message, name, details}})
}

// retryInfo is a google.rpc.RetryInfo detail: d as a protobuf Duration,
// whole seconds or milliseconds ("13s", "0.250s").
func retryInfo(d time.Duration) any {
	delay := strconv.FormatInt(int64(d/time.Second), 10) + "s"
	if d%time.Second != 0 {
		delay = strconv.FormatFloat(ceilMs(d).Seconds(), 'f', 3, 64) + "s"
	}
	return map[string]string{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}
}

// gemini answers generateContent and streamGenerateContent.
func (s *Server) gemini(w http.ResponseWriter, r *http.Request, path string) {
	s.total.requests.Add(1)
	key := r.Header.Get("x-goog-api-key")
	ks := s.keys[key]
	switch {
	case key == "":
		writeGeminiError(w, http.StatusForbidden, "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.")
		return
	case ks == nil:
		writeGeminiError(w, http.StatusBadRequest, "API key not valid. Please pass a valid API key.",
			map[string]any{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID", "domain": "googleapis.com"})
		return
	}
	ks.counts.requests.Add(1)
	if r.Method != http.MethodPost {
		writeGeminiError(w, http.StatusMethodNotAllowed, "use POST for "+r.URL.Path)
		return
	}
	stream := strings.HasSuffix(path, ":streamGenerateContent")
	if stream && r.URL.Query().Get("alt") != "sse" {
		writeGeminiError(w, http.StatusBadRequest, "the mock streams server-sent events only: add alt=sse")
		return
	}
	if v := r.Header.Get("X-Mock-Status"); v != "" {
		status, err := strconv.Atoi(v)
		if err != nil || status < 400 || status > 599 {
			writeGeminiError(w, http.StatusBadRequest, "X-Mock-Status must be a status from 400 to 599")
			return
		}
		var details []any
		if ra, err := strconv.Atoi(r.Header.Get("X-Mock-Retry-After")); err == nil && status == http.StatusTooManyRequests {
			details = append(details, retryInfo(time.Duration(ra)*time.Second))
		}
		s.count(ks, status)
		writeGeminiError(w, status, "forced by X-Mock-Status", details...)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	model := path[strings.LastIndexByte(path, '/')+1 : strings.LastIndexByte(path, ':')]
	embed := strings.HasSuffix(path, ":batchEmbedContents")
	var req geminiRequest
	var batch geminiEmbedBatch
	switch {
	case err != nil:
	case embed:
		if err = json.Unmarshal(body, &batch); err == nil {
			err = batch.check(model)
		}
	default:
		if err = json.Unmarshal(body, &req); err == nil && len(req.Contents) == 0 {
			err = errors.New("contents is empty")
		}
	}
	if err != nil {
		writeGeminiError(w, http.StatusBadRequest, fmt.Sprintf("the body is not a valid %s request (%v)", path[strings.LastIndexByte(path, ':')+1:], err))
		return
	}
	if ks.bucket != nil {
		if d := ks.bucket.take(s.now()); !d.ok {
			s.count(ks, http.StatusTooManyRequests)
			writeGeminiError(w, http.StatusTooManyRequests, fmt.Sprintf(
				"You exceeded your current quota: %d requests per minute. Please retry in %s.", d.limit, formatReset(ceilMs(d.retryAfter))),
				map[string]any{"@type": "type.googleapis.com/google.rpc.QuotaFailure",
					"violations": []map[string]string{{"quotaId": "GenerateRequestsPerMinutePerProjectPerModel"}}},
				retryInfo(d.retryAfter))
			return
		}
	}
	if !sleep(r.Context(), s.delay()) {
		return
	}
	if s.fail() {
		s.count(ks, http.StatusInternalServerError)
		writeGeminiError(w, http.StatusInternalServerError, "An internal error has occurred (mock failure).")
		return
	}
	if embed {
		s.count(ks, http.StatusOK)
		writeJSON(w, http.StatusOK, batch.embeddings(model))
		return
	}
	cand, usage := s.geminiReply(req)
	s.count(ks, http.StatusOK)
	id := "mock-" + strconv.FormatUint(s.ids.Add(1), 10)
	if !stream {
		writeJSON(w, http.StatusOK, geminiResponse{Candidates: []geminiCandidate{cand}, UsageMetadata: usage, ModelVersion: model, ResponseID: id})
		return
	}
	s.geminiStream(w, r, cand, usage, model, id)
}

// geminiReply is the answer to req and its usage.
func (s *Server) geminiReply(req geminiRequest) (geminiCandidate, geminiUsage) {
	prompt, last, answered := 0, "", false
	contents := req.Contents
	if req.SystemInstruction != nil {
		contents = append([]geminiContent{*req.SystemInstruction}, contents...)
	}
	for _, c := range contents {
		prompt += 3
		answered = false
		for _, p := range c.Parts {
			prompt += s.bill.count(p.Text)
			if p.InlineData != nil && strings.HasPrefix(p.InlineData.MimeType, "image/") {
				prompt += geminiImageTokens(p.InlineData.Data)
			}
			if p.FunctionCall != nil {
				prompt += s.bill.count(p.FunctionCall.Name) + s.bill.count(string(p.FunctionCall.Args))
			}
			if p.FunctionResponse != nil {
				prompt += s.bill.count(p.FunctionResponse.Name) + s.bill.count(string(p.FunctionResponse.Response))
				answered = true
			}
			if c.Role == "user" && p.Text != "" {
				last = p.Text
			}
		}
	}
	var callable []string
	for _, t := range req.Tools {
		for _, f := range t.FunctionDeclarations {
			prompt += 7 + s.bill.count(f.Name+":"+f.Description)
			callable = append(callable, f.Name)
		}
	}
	if tc := req.ToolConfig; tc != nil {
		switch {
		case tc.FunctionCallingConfig.Mode == "NONE":
			callable = nil
		case len(tc.FunctionCallingConfig.AllowedFunctionNames) > 0:
			callable = tc.FunctionCallingConfig.AllowedFunctionNames
		}
	}
	cand := geminiCandidate{Content: geminiContent{Role: "model"}, FinishReason: "STOP"}
	completion := 0
	if r := []rune(last); len(r) > 40 {
		last = string(r[:40])
	}
	if len(callable) > 0 && !answered {
		args, _ := json.Marshal(map[string]string{"text": last})
		part := geminiPart{FunctionCall: &struct {
			Name string          `json:"name"`
			Args json.RawMessage `json:"args"`
		}{callable[0], args}}
		cand.Content.Parts = []geminiPart{part}
		completion = s.bill.count(callable[0] + string(args))
	} else {
		text := "mock reply to: " + last
		completion = s.bill.count(text)
		if g := req.GenerationConfig; g != nil && g.MaxOutputTokens != nil && *g.MaxOutputTokens >= 1 && completion > *g.MaxOutputTokens {
			text, completion, cand.FinishReason = s.bill.truncate(text, *g.MaxOutputTokens), *g.MaxOutputTokens, "MAX_TOKENS"
		}
		cand.Content.Parts = []geminiPart{{Text: text}}
	}
	return cand, geminiUsage{PromptTokenCount: prompt, CandidatesTokenCount: completion, TotalTokenCount: prompt + completion}
}

// geminiImageTokens is what Gemini bills for an inline image: 258 tokens
// when neither side is over 384 pixels, else 258 for each 768-pixel tile
// it is cut into (258 for one it cannot read).
func geminiImageTokens(data string) int {
	cfg, _, err := image.DecodeConfig(base64.NewDecoder(base64.StdEncoding, strings.NewReader(data)))
	if err != nil || cfg.Width <= 384 && cfg.Height <= 384 {
		return 258
	}
	return 258 * ((cfg.Width + 767) / 768) * ((cfg.Height + 767) / 768)
}

// geminiStream writes cand as Gemini's server-sent events, CRLF-ended as
// Google's are: the text in s.chunks pieces ChunkDelay apart (a function
// call in one event), each event with the usage so far, the last with the
// finishReason and the whole usage.
func (s *Server) geminiStream(w http.ResponseWriter, r *http.Request, cand geminiCandidate, usage geminiUsage, model, id string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	events := []geminiCandidate{cand}
	if text := cand.Content.Parts[0].Text; text != "" {
		events = events[:0]
		for _, piece := range split(text, s.chunks) {
			events = append(events, geminiCandidate{Content: geminiContent{Role: "model", Parts: []geminiPart{{Text: piece}}}})
		}
		events[len(events)-1].FinishReason = cand.FinishReason
	}
	sent := 0
	for i, ev := range events {
		if i > 0 && !sleep(r.Context(), s.cfg.ChunkDelay) {
			return
		}
		so := geminiUsage{PromptTokenCount: usage.PromptTokenCount}
		if sent += s.bill.count(ev.Content.Parts[0].Text); i == len(events)-1 {
			so = usage
		} else {
			so.CandidatesTokenCount, so.TotalTokenCount = sent, usage.PromptTokenCount+sent
		}
		b, _ := json.Marshal(geminiResponse{Candidates: []geminiCandidate{ev}, UsageMetadata: so, ModelVersion: model, ResponseID: id})
		var buf bytes.Buffer
		buf.WriteString("data: ")
		buf.Write(b)
		buf.WriteString("\r\n\r\n")
		if _, err := w.Write(buf.Bytes()); err != nil || rc.Flush() != nil {
			return
		}
	}
}
