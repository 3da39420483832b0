package mock

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/wire"
)

// The mock's Anthropic speaker: POST .../v1/messages answered as
// Anthropic's Messages API documents it. Keys come in x-api-key and
// anthropic-version is required; a request is checked as Anthropic checks
// it where a translation could go wrong (max_tokens, roles alternating,
// non-empty text, every tool_use answered by a tool_result in the next
// turn and no tool_result without one); errors are Anthropic's shape and
// types (529 overloaded_error among them); the rate-limit headers are
// anthropic-ratelimit-requests-{limit,remaining,reset}, the reset an RFC
// 3339 time, and retry-after on a 429. The same hooks as chat
// completions apply (X-Mock-Status, X-Mock-Retry-After, X-Mock-Stall,
// X-Mock-Answer-Tokens).
//
// The answer: a tool_use of the chosen tool (tool_choice's, or the first)
// with input {"text": the last user text} when the request offers tools
// and its last turn holds no tool_result; "mock reply to tool result: …"
// after tool results; else "mock reply to: …", cut at max_tokens
// (stop_reason max_tokens) or before a stop sequence (stop_sequence);
// with thinking on, a thinking block before it (anthropic_thinking.go).
//
// The prompt cache: the prompt up to its last cache_control breakpoint
// (tools, then system, then the messages' blocks, Anthropic's order) is
// written to the cache the first time a key sends it
// (cache_creation_input_tokens) and read from it after
// (cache_read_input_tokens); input_tokens are the rest. There is no
// minimum length, unlike Anthropic's.

// anthropicErrorType is Anthropic's error type for a status.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

func (s *Server) writeAnthropicError(w http.ResponseWriter, status int, message string) {
	writeJSON(w, status, wire.AnthropicError{Type: "error", RequestID: "req_mock_" + strconv.FormatUint(s.ids.Add(1), 10),
		Error: wire.AnthropicErrorDetail{Type: anthropicErrorType(status), Message: message}})
}

// anthropic answers POST .../v1/messages: auth, version, hooks, the
// request's checks, bucket, latency, failures, then the answer.
func (s *Server) anthropic(w http.ResponseWriter, r *http.Request) {
	s.total.requests.Add(1)
	ks := s.keys[strings.TrimSpace(r.Header.Get("x-api-key"))]
	if ks == nil {
		s.writeAnthropicError(w, http.StatusUnauthorized, "invalid x-api-key")
		return
	}
	ks.counts.requests.Add(1)
	if r.Method != http.MethodPost {
		s.writeAnthropicError(w, http.StatusMethodNotAllowed, "use POST for "+r.URL.Path)
		return
	}
	if r.Header.Get("anthropic-version") == "" {
		s.writeAnthropicError(w, http.StatusBadRequest, "anthropic-version: header is required")
		return
	}
	if v := r.Header.Get("X-Mock-Status"); v != "" {
		status, err := strconv.Atoi(v)
		if err != nil || status < 400 || status > 599 {
			s.writeAnthropicError(w, http.StatusBadRequest, "X-Mock-Status must be a status from 400 to 599")
			return
		}
		if ra := r.Header.Get("X-Mock-Retry-After"); ra != "" && status == http.StatusTooManyRequests {
			w.Header().Set("retry-after", ra)
		}
		s.count(ks, status)
		s.writeAnthropicError(w, status, "forced by X-Mock-Status")
		return
	}
	stall := r.Header.Get("X-Mock-Stall")
	if stall != "" && stall != stallAfterFirstChunk {
		s.writeAnthropicError(w, http.StatusBadRequest, "X-Mock-Stall must be "+stallAfterFirstChunk)
		return
	}
	answer := s.cfg.AnswerTokens
	if v := r.Header.Get("X-Mock-Answer-Tokens"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > maxAnswerTokens {
			s.writeAnthropicError(w, http.StatusBadRequest, "X-Mock-Answer-Tokens must be a whole number from 0 to 1000000")
			return
		}
		answer = n
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		s.writeAnthropicError(w, http.StatusRequestEntityTooLarge, "reading the body: "+err.Error())
		return
	}
	var req wire.AnthropicRequest
	if err := json.Unmarshal(body, &req); err != nil {
		s.writeAnthropicError(w, http.StatusBadRequest, "the body is not a valid Messages request: "+err.Error())
		return
	}
	turns, err := checkAnthropic(req)
	if err == nil {
		err = checkThinking(req, r.Header.Get("anthropic-beta"), turns)
	}
	if err != nil {
		s.writeAnthropicError(w, http.StatusBadRequest, err.Error())
		return
	}
	if ks.bucket != nil {
		d := ks.bucket.take(s.now())
		s.setAnthropicLimits(w.Header(), d)
		if !d.ok {
			s.count(ks, http.StatusTooManyRequests)
			s.writeAnthropicError(w, http.StatusTooManyRequests, fmt.Sprintf(
				"This request would exceed the rate limit for your organization of %d requests per minute.", d.limit))
			return
		}
	}
	if !sleep(r.Context(), s.delay()) {
		return
	}
	if s.fail() {
		s.count(ks, http.StatusInternalServerError)
		s.writeAnthropicError(w, http.StatusInternalServerError, "Internal server error (mock failure)")
		return
	}
	msg := s.anthropicReply(r.Header.Get("x-api-key"), req, turns, answer)
	s.count(ks, http.StatusOK)
	if req.Stream {
		s.anthropicStream(w, r, msg, stall != "")
		return
	}
	if stall != "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush()
		<-r.Context().Done()
		return
	}
	writeJSON(w, http.StatusOK, msg)
}

// setAnthropicLimits writes a take's anthropic-ratelimit-requests-*
// headers (unless OmitLimitHeaders), the reset a time to the millisecond,
// and retry-after when it was refused.
func (s *Server) setAnthropicLimits(h http.Header, d decision) {
	if !s.cfg.OmitLimitHeaders {
		h.Set("anthropic-ratelimit-requests-limit", strconv.FormatInt(d.limit, 10))
		h.Set("anthropic-ratelimit-requests-remaining", strconv.FormatInt(d.remaining, 10))
		h.Set("anthropic-ratelimit-requests-reset", s.now().Add(ceilMs(d.reset)).UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	}
	if !d.ok {
		h.Set("retry-after", strconv.FormatInt(int64(math.Ceil(d.retryAfter.Seconds())), 10))
	}
}

// anthropicTurn is one message's blocks, read.
type anthropicTurn struct {
	role   string
	blocks []wire.AnthropicBlock
}

// checkAnthropic checks a request as Anthropic would where a translation
// could go wrong, and reads its turns.
func checkAnthropic(req wire.AnthropicRequest) ([]anthropicTurn, error) {
	switch {
	case req.Model == "":
		return nil, fmt.Errorf("model: Field required")
	case req.MaxTokens < 1:
		return nil, fmt.Errorf("max_tokens: Field required")
	case len(req.Messages) == 0:
		return nil, fmt.Errorf("messages: at least one message is required")
	}
	turns := make([]anthropicTurn, len(req.Messages))
	for i, m := range req.Messages {
		at := "messages." + strconv.Itoa(i)
		if m.Role != "user" && m.Role != "assistant" {
			return nil, fmt.Errorf("%s.role: Input should be 'user' or 'assistant'", at)
		}
		if i > 0 && req.Messages[i-1].Role == m.Role {
			return nil, fmt.Errorf("messages: roles must alternate between \"user\" and \"assistant\", but found multiple %q roles in a row", m.Role)
		}
		t := anthropicTurn{role: m.Role}
		var text string
		if json.Unmarshal(m.Content, &text) == nil {
			t.blocks = []wire.AnthropicBlock{{Type: "text", Text: &text}}
		} else if err := json.Unmarshal(m.Content, &t.blocks); err != nil {
			return nil, fmt.Errorf("%s.content: Input should be a valid string or a list of content blocks", at)
		}
		for j, b := range t.blocks {
			bat := at + ".content." + strconv.Itoa(j)
			switch b.Type {
			case "text":
				if b.Text == nil || *b.Text == "" {
					return nil, fmt.Errorf("%s.text: text content blocks must be non-empty", bat)
				}
			case "thinking", "redacted_thinking":
				if m.Role != "assistant" {
					return nil, fmt.Errorf("%s.type: `%s` blocks are only allowed in assistant messages", bat, b.Type)
				}
			case "image", "tool_use", "tool_result":
			default:
				return nil, fmt.Errorf("%s.type: unknown block type %q", bat, b.Type)
			}
		}
		turns[i] = t
	}
	// Every tool_use is answered in the next turn, and every tool_result
	// answers one.
	for i, t := range turns {
		var asked []string
		if t.role == "assistant" {
			for _, b := range t.blocks {
				if b.Type == "tool_use" {
					asked = append(asked, b.ID)
				}
			}
		}
		var answered map[string]bool
		if i+1 < len(turns) {
			answered = map[string]bool{}
			for _, b := range turns[i+1].blocks {
				if b.Type == "tool_result" {
					answered[b.ToolUseID] = true
				}
			}
		}
		for _, id := range asked {
			if answered != nil && !answered[id] {
				return nil, fmt.Errorf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s", i, id)
			}
		}
		if t.role == "user" {
			var prev map[string]bool
			if i > 0 {
				prev = map[string]bool{}
				for _, b := range turns[i-1].blocks {
					if b.Type == "tool_use" {
						prev[b.ID] = true
					}
				}
			}
			for _, b := range t.blocks {
				if b.Type == "tool_result" && !prev[b.ToolUseID] {
					return nil, fmt.Errorf("messages.%d.content: unexpected `tool_use_id` found in `tool_result` blocks: %s", i, b.ToolUseID)
				}
			}
		}
	}
	return turns, nil
}

// anthropicReply is the answer to req from key (see the file's comment).
func (s *Server) anthropicReply(key string, req wire.AnthropicRequest, turns []anthropicTurn, answer int) wire.AnthropicMessage {
	prompt, cacheable, prefix := s.anthropicPrompt(req, turns)
	usage := wire.AnthropicUsage{InputTokens: prompt - cacheable}
	if cacheable > 0 {
		sum := sha256.Sum256([]byte(key + "\x00" + req.Model + "\x00" + prefix))
		id := hex.EncodeToString(sum[:])
		s.cacheMu.Lock()
		if s.cached[id] {
			usage.CacheReadInputTokens = cacheable
		} else {
			s.cached[id] = true
			usage.CacheCreationInputTokens = cacheable
		}
		s.cacheMu.Unlock()
	}
	msg := wire.AnthropicMessage{ID: "msg_mock_" + strconv.FormatUint(s.ids.Add(1), 10), Type: "message", Role: "assistant",
		Model: req.Model, Content: []wire.AnthropicBlock{}}
	last := turns[len(turns)-1]
	var lastText, resultText string
	hasResult := false
	for _, b := range last.blocks {
		switch {
		case b.Type == "text" && last.role == "user":
			lastText = *b.Text
		case b.Type == "tool_result":
			hasResult = true
			resultText = toolResultText(b.Content)
		}
	}
	short := func(s string) string {
		if r := []rune(s); len(r) > 40 {
			return string(r[:40])
		}
		return s
	}
	stop := "end_turn"
	thinkingTokens := 0
	if t, on, _ := thinkingOf(req); on {
		about := lastText
		if hasResult {
			about = "the tool result " + resultText
		}
		var block wire.AnthropicBlock
		block, thinkingTokens = s.thinkingBlock(t, short(about))
		msg.Content = append(msg.Content, block)
		usage.OutputTokensDetails = &wire.AnthropicOutputDetails{ThinkingTokens: thinkingTokens}
	}
	if tool, ok := chosenTool(req); ok && !hasResult {
		input, _ := json.Marshal(map[string]string{"text": short(lastText)})
		msg.Content = append(msg.Content, wire.AnthropicBlock{Type: "tool_use", ID: "toolu_mock_" + strconv.FormatUint(s.ids.Add(1), 10),
			Name: tool, Input: input})
		usage.OutputTokens = thinkingTokens + s.bill.count(tool+string(input))
		stop = "tool_use"
	} else {
		content := "mock reply to: " + short(lastText)
		if hasResult {
			content = "mock reply to tool result: " + short(resultText)
		}
		if grow := answer - s.bill.count(content); grow > 0 {
			content += strings.Repeat(" ok", grow)
		}
		for _, seq := range req.StopSequences {
			if i := strings.Index(content, seq); seq != "" && i >= 0 {
				content, stop = content[:i], "stop_sequence"
				msg.StopSequence = &seq
				break
			}
		}
		// The thinking is part of the answer max_tokens bounds.
		completion, room := s.bill.count(content), max(0, int(req.MaxTokens)-thinkingTokens)
		if completion > room {
			content, completion, stop, msg.StopSequence = s.bill.truncate(content, room), room, "max_tokens", nil
		}
		if content != "" {
			msg.Content = append(msg.Content, wire.AnthropicBlock{Type: "text", Text: &content})
		}
		usage.OutputTokens = thinkingTokens + completion
	}
	msg.StopReason, msg.Usage = &stop, usage
	return msg
}

// chosenTool is the tool the mock calls: tool_choice's, or the first
// offered unless tool_choice is none.
func chosenTool(req wire.AnthropicRequest) (string, bool) {
	if len(req.Tools) == 0 || req.ToolChoice != nil && req.ToolChoice.Type == "none" {
		return "", false
	}
	if c := req.ToolChoice; c != nil && c.Type == "tool" {
		return c.Name, true
	}
	return req.Tools[0].Name, true
}

// toolResultText is a tool_result's text: its string, or its text blocks.
func toolResultText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []wire.AnthropicBlock
	_ = json.Unmarshal(raw, &blocks)
	var out []string
	for _, b := range blocks {
		if b.Type == "text" && b.Text != nil {
			out = append(out, *b.Text)
		}
	}
	return strings.Join(out, " ")
}

// anthropicPrompt counts a request's prompt: 3 tokens, and per turn 3 and
// its blocks' texts, tool inputs, results and images (Anthropic's
// width × height / 750, 1,600 for one by address); tools as their name,
// description and schema. It also returns the tokens and the JSON of the
// prefix up to the last cache_control breakpoint, in the order the prompt
// cache reads: tools, system, messages.
func (s *Server) anthropicPrompt(req wire.AnthropicRequest, turns []anthropicTurn) (total, cacheable int, prefix string) {
	var seen bytes.Buffer
	total = 3
	mark := func(tokens int, v any, breakpoint bool) {
		total += tokens
		b, _ := json.Marshal(v)
		seen.Write(b)
		if breakpoint {
			cacheable, prefix = total-3, seen.String()
		}
	}
	for _, t := range req.Tools {
		mark(s.bill.count(t.Name+" "+t.Description+" "+string(t.InputSchema)), t, len(t.CacheControl) > 0)
	}
	for _, b := range req.System {
		mark(s.blockTokens(b), b, len(b.CacheControl) > 0)
	}
	for _, t := range turns {
		total += 3
		for _, b := range t.blocks {
			mark(s.blockTokens(b), b, len(b.CacheControl) > 0)
		}
	}
	return total, min(cacheable, total), prefix
}

// blockTokens counts one block.
func (s *Server) blockTokens(b wire.AnthropicBlock) int {
	switch b.Type {
	case "text":
		if b.Text != nil {
			return s.bill.count(*b.Text)
		}
	case "tool_use":
		return s.bill.count(b.Name + " " + string(b.Input))
	case "tool_result":
		n := s.bill.count(toolResultText(b.Content))
		var blocks []wire.AnthropicBlock
		if json.Unmarshal(b.Content, &blocks) == nil {
			for _, inner := range blocks {
				if inner.Type == "image" {
					n += anthropicImageTokens(inner.Source)
				}
			}
		}
		return n
	case "image":
		return anthropicImageTokens(b.Source)
	}
	return 0
}

// anthropicImageTokens is Anthropic's published estimate of an image:
// width × height / 750, at most 1,600 (the size it scales images to fit).
func anthropicImageTokens(src *wire.AnthropicSource) int {
	if src == nil || src.Type != "base64" {
		return 1600
	}
	cfg, _, err := image.DecodeConfig(base64.NewDecoder(base64.StdEncoding, strings.NewReader(src.Data)))
	if err != nil {
		return 1600
	}
	return min(1600, max(1, cfg.Width*cfg.Height/750))
}

// anthropicStream writes msg as Anthropic's events: message_start, ping,
// each block (a text one in s.chunks deltas ChunkDelay apart, a tool_use
// one's input in two input_json_deltas), message_delta, message_stop.
// With stall it writes message_start and waits for the client to go.
func (s *Server) anthropicStream(w http.ResponseWriter, r *http.Request, msg wire.AnthropicMessage, stall bool) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(name string, v any) bool {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	start := msg
	start.Content, start.StopReason, start.StopSequence = []wire.AnthropicBlock{}, nil, nil
	start.Usage.OutputTokens = 1
	if !send("message_start", wire.AnthropicEvent{Type: "message_start", Message: &start}) {
		return
	}
	if stall {
		<-r.Context().Done()
		return
	}
	if !send("ping", wire.AnthropicEvent{Type: "ping"}) {
		return
	}
	for i, b := range msg.Content {
		index := i
		block := b
		var pieces []string
		var delta func(string) *wire.AnthropicDelta
		switch b.Type {
		case "text":
			empty := ""
			block.Text = &empty
			pieces = split(*b.Text, s.chunks)
			delta = func(p string) *wire.AnthropicDelta { return &wire.AnthropicDelta{Type: "text_delta", Text: &p} }
		case "tool_use":
			block.Input = json.RawMessage("{}")
			pieces = split(string(b.Input), 2)
			delta = func(p string) *wire.AnthropicDelta {
				return &wire.AnthropicDelta{Type: "input_json_delta", PartialJSON: &p}
			}
		case "thinking":
			// Started empty, the text in thinking_deltas, the signature
			// in a signature_delta just before the block stops.
			empty, empty2 := "", ""
			block.Thinking, block.Signature = &empty, &empty2
			if t := deref(b.Thinking); t != "" {
				pieces = split(t, s.chunks)
			}
			pieces = append(pieces, "\x00"+deref(b.Signature))
			delta = func(p string) *wire.AnthropicDelta {
				if sig, ok := strings.CutPrefix(p, "\x00"); ok {
					return &wire.AnthropicDelta{Type: "signature_delta", Signature: &sig}
				}
				return &wire.AnthropicDelta{Type: "thinking_delta", Thinking: &p}
			}
		}
		if !send("content_block_start", wire.AnthropicEvent{Type: "content_block_start", Index: &index, ContentBlock: &block}) {
			return
		}
		for j, p := range pieces {
			if j > 0 && !sleep(r.Context(), s.cfg.ChunkDelay) {
				return
			}
			if !send("content_block_delta", wire.AnthropicEvent{Type: "content_block_delta", Index: &index, Delta: delta(p)}) {
				return
			}
		}
		if !send("content_block_stop", wire.AnthropicEvent{Type: "content_block_stop", Index: &index}) {
			return
		}
	}
	final := struct {
		Type  string                     `json:"type"`
		Delta wire.AnthropicMessageDelta `json:"delta"`
		Usage struct {
			OutputTokens        int                          `json:"output_tokens"`
			OutputTokensDetails *wire.AnthropicOutputDetails `json:"output_tokens_details,omitempty"`
		} `json:"usage"`
	}{Type: "message_delta", Delta: wire.AnthropicMessageDelta{StopReason: msg.StopReason, StopSequence: msg.StopSequence}}
	final.Usage.OutputTokens, final.Usage.OutputTokensDetails = msg.Usage.OutputTokens, msg.Usage.OutputTokensDetails
	if !send("message_delta", final) {
		return
	}
	send("message_stop", wire.AnthropicEvent{Type: "message_stop"})
}
