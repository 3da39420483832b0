package mock

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxBody bounds a request body; the mock is not a place for huge prompts.
const maxBody = 4 << 20

// maxAnswerTokens bounds X-Mock-Answer-Tokens.
const maxAnswerTokens = 1_000_000

// stallAfterFirstChunk is the one value X-Mock-Stall knows.
const stallAfterFirstChunk = "after-first-chunk"

// chatRequest is the part of a chat completion request the mock reads.
type chatRequest struct {
	Model               string        `json:"model"`
	Messages            []chatMessage `json:"messages"`
	MaxTokens           *int          `json:"max_tokens"`
	MaxCompletionTokens *int          `json:"max_completion_tokens"`
	Stream              bool          `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
}

// toolToCall is the tool the mock calls instead of answering: the named
// tool_choice, else the first tool, unless tool_choice is "none" or the
// last message already is a tool's result.
func (req chatRequest) toolToCall() string {
	if len(req.Tools) == 0 || len(req.Messages) > 0 && req.Messages[len(req.Messages)-1].Role == "tool" {
		return ""
	}
	var choice struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	switch {
	case string(req.ToolChoice) == `"none"`:
		return ""
	case json.Unmarshal(req.ToolChoice, &choice) == nil && choice.Function.Name != "":
		return choice.Function.Name
	}
	return req.Tools[0].Function.Name
}

// chatMessage holds content as either a string or an array of parts.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// text returns the message's text: the string, or its text parts joined.
func (m chatMessage) text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(m.Content, &parts) != nil {
		return ""
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, " ")
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// reply is the answer to a request, the same for plain and streamed answers.
type reply struct {
	id      string
	created int64
	model   string
	content string
	call    string // the tool called instead of content; "" for none
	args    string // its arguments: {"text": the start of the last user message}
	finish  string
	usage   usage
}

// reply answers req, whose body is body: "mock reply to: " and the start
// of the last user message, grown to answer tokens when the request asks
// for a long answer (X-Mock-Answer-Tokens, Config.AnswerTokens), and cut
// to the request's max_completion_tokens or max_tokens, as a model stops
// at its bound (finish_reason "length").
func (s *Server) reply(req chatRequest, body []byte, answer int) reply {
	last := ""
	for _, m := range req.Messages {
		if m.Role == "user" {
			last = m.text()
		}
	}
	if r := []rune(last); len(r) > 40 {
		last = string(r[:40])
	}
	content := "mock reply to: " + last
	if grow := answer - s.bill.count(content); grow > 0 {
		content += strings.Repeat(" ok", grow) // " ok" is one token, and one word
	}
	completion, finish := s.bill.count(content), "stop"
	bound := req.MaxCompletionTokens
	if bound == nil {
		bound = req.MaxTokens
	}
	if bound != nil && *bound >= 1 && completion > *bound {
		content, completion, finish = s.bill.truncate(content, *bound), *bound, "length"
	}
	prompt := s.bill.prompt(body)
	if s.bill.words {
		prompt = 0
		for _, m := range req.Messages {
			prompt += len(strings.Fields(m.text()))
		}
	}
	call, args := req.toolToCall(), ""
	if call != "" {
		b, _ := json.Marshal(map[string]string{"text": last})
		args = string(b)
		content, finish, completion = "", "tool_calls", s.bill.count(call+args)
	}
	return reply{
		call:    call,
		args:    args,
		id:      "chatcmpl-mock-" + strconv.FormatUint(s.ids.Add(1), 10),
		created: s.now().Unix(),
		model:   req.Model,
		content: content,
		finish:  finish,
		usage:   usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion},
	}
}

// chat answers POST .../chat/completions: auth, hooks, bucket, latency,
// failures, then the answer.
func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	s.total.requests.Add(1)
	ks := s.authorize(w, r)
	if ks == nil {
		return
	}
	ks.counts.requests.Add(1)
	if r.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "use POST for "+r.URL.Path)
		return
	}
	if s.forced(w, r, ks) {
		return
	}
	stall := r.Header.Get("X-Mock-Stall")
	if stall != "" && stall != stallAfterFirstChunk {
		writeError(w, http.StatusBadRequest, "X-Mock-Stall must be "+stallAfterFirstChunk)
		return
	}
	answer := s.cfg.AnswerTokens
	if v := r.Header.Get("X-Mock-Answer-Tokens"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > maxAnswerTokens {
			writeError(w, http.StatusBadRequest, "X-Mock-Answer-Tokens must be a whole number from 0 to 1000000")
			return
		}
		answer = n
	}
	usageDelay := s.cfg.UsageDelay
	if v := r.Header.Get("X-Mock-Usage-Delay"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			writeError(w, http.StatusBadRequest, "X-Mock-Usage-Delay must be a duration such as 2s")
			return
		}
		usageDelay = d
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "the body is not a valid chat completion request: "+err.Error())
		return
	}
	if ks.bucket != nil {
		d := ks.bucket.take(s.now())
		setLimitHeaders(w.Header(), d, s.cfg.OmitLimitHeaders)
		if !d.ok {
			s.count(ks, http.StatusTooManyRequests)
			writeError(w, http.StatusTooManyRequests, fmt.Sprintf(
				"Rate limit reached for requests: limit %d per minute, please try again in %s.", d.limit, formatReset(ceilMs(d.retryAfter))))
			return
		}
	}
	if !sleep(r.Context(), s.delay()) {
		return // the client went away
	}
	if s.fail() {
		s.count(ks, http.StatusInternalServerError)
		writeError(w, http.StatusInternalServerError, "The server had an error while processing your request (mock failure).")
		return
	}
	rep := s.reply(req, body, answer)
	if req.Stream {
		s.count(ks, http.StatusOK)
		s.stream(w, r, rep, req.StreamOptions != nil && req.StreamOptions.IncludeUsage, stall != "", usageDelay)
		return
	}
	if stall != "" {
		s.count(ks, http.StatusOK)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush()
		<-r.Context().Done()
		return
	}
	s.count(ks, http.StatusOK)
	writeJSON(w, http.StatusOK, completion(rep))
}

// toolCall is a tool call, whole or (in a stream) its first delta.
type toolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// callOf is rep's tool call, with the reply's id as the call's.
func callOf(rep reply, index *int) toolCall {
	tc := toolCall{Index: index, ID: "call_" + rep.id, Type: "function"}
	tc.Function.Name, tc.Function.Arguments = rep.call, rep.args
	return tc
}

// completion is the chat.completion body of a reply.
func completion(rep reply) any {
	content, calls := &rep.content, []toolCall(nil)
	if rep.call != "" {
		content, calls = nil, []toolCall{callOf(rep, nil)}
	}
	type message struct {
		Role      string     `json:"role"`
		Content   *string    `json:"content"`
		ToolCalls []toolCall `json:"tool_calls,omitempty"`
	}
	type choice struct {
		Index        int     `json:"index"`
		Message      message `json:"message"`
		FinishReason string  `json:"finish_reason"`
	}
	return struct {
		ID      string   `json:"id"`
		Object  string   `json:"object"`
		Created int64    `json:"created"`
		Model   string   `json:"model"`
		Choices []choice `json:"choices"`
		Usage   usage    `json:"usage"`
	}{
		ID: rep.id, Object: "chat.completion", Created: rep.created, Model: rep.model,
		Choices: []choice{{Message: message{Role: "assistant", Content: content, ToolCalls: calls}, FinishReason: rep.finish}},
		Usage:   rep.usage,
	}
}

// delta is the changing part of a chat.completion.chunk.
type delta struct {
	Role      string     `json:"role,omitempty"`
	Content   *string    `json:"content,omitempty"`
	ToolCalls []toolCall `json:"tool_calls,omitempty"`
}

type chunkChoice struct {
	Index        int     `json:"index"`
	Delta        delta   `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

type chunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	Usage   *usage        `json:"usage,omitempty"`
}

// stream writes rep as server-sent events: a role chunk, s.chunks content
// deltas ChunkDelay apart, a finish chunk, a usage chunk if asked (after
// usageDelay), and [DONE]. With stall it writes the role chunk and waits
// for the client to go.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, rep reply, includeUsage, stall bool, usageDelay time.Duration) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(c any) bool {
		var buf bytes.Buffer
		buf.WriteString("data: ")
		if str, ok := c.(string); ok {
			buf.WriteString(str)
		} else {
			b, _ := json.Marshal(c)
			buf.Write(b)
		}
		buf.WriteString("\n\n")
		if _, err := w.Write(buf.Bytes()); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	base := func(choices ...chunkChoice) chunk {
		if choices == nil {
			choices = []chunkChoice{}
		}
		return chunk{ID: rep.id, Object: "chat.completion.chunk", Created: rep.created, Model: rep.model, Choices: choices}
	}
	empty := ""
	if !send(base(chunkChoice{Delta: delta{Role: "assistant", Content: &empty}})) {
		return
	}
	if stall {
		<-r.Context().Done()
		return
	}
	if rep.call != "" {
		zero := 0
		if !send(base(chunkChoice{Delta: delta{ToolCalls: []toolCall{callOf(rep, &zero)}}})) {
			return
		}
	}
	for i, piece := range split(rep.content, s.chunks) {
		if piece == "" {
			continue
		}
		if i > 0 && !sleep(r.Context(), s.cfg.ChunkDelay) {
			return
		}
		if !send(base(chunkChoice{Delta: delta{Content: &piece}})) {
			return
		}
	}
	if !send(base(chunkChoice{Delta: delta{}, FinishReason: &rep.finish})) {
		return
	}
	if includeUsage {
		if !sleep(r.Context(), usageDelay) {
			return // the client went away before the usage came
		}
		c := base()
		c.Usage = &rep.usage
		if !send(c) {
			return
		}
	}
	send("[DONE]")
}

// split cuts s into n pieces of about equal length in runes; their
// concatenation is s.
func split(s string, n int) []string {
	r := []rune(s)
	pieces := make([]string, n)
	for i := range n {
		pieces[i] = string(r[i*len(r)/n : (i+1)*len(r)/n])
	}
	return pieces
}

// sleep waits d, or less if ctx ends first; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
