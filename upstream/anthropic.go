package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/wire"
)

// anthropicFormat is Anthropic's Messages API
// (https://api.anthropic.com): a chat completion is sent as a Messages
// request to {base}/v1/messages with the key in x-api-key and the API
// version Sluice speaks, and its answer, stream, errors and rate-limit
// headers are translated back to OpenAI's. What the chat form carries for
// Anthropic alone rides as LiteLLM writes it: cache_control on content
// parts and tools, top_k, a tool message's is_error, and extended
// thinking (thinking, an assistant message's thinking_blocks; see
// dialect/messages/thinking.go), context_management and the
// anthropic-beta values (anthropic_beta), all sent exactly as they came;
// reasoning_effort is Anthropic's output_config.effort.
//
// Anthropic requires max_tokens. The pipeline sends a bound whenever a
// limit relies on one (the model's longest answer or less); a request
// with none gets anthropicDefaultMaxTokens, as LiteLLM does: a longer
// answer stops there with finish_reason "length", which the client sees.
type anthropicFormat struct {
	// now stamps the answers' created time: Anthropic's carry none.
	now func() time.Time
}

// anthropicDefaultMaxTokens is the bound of a request that carries none.
const anthropicDefaultMaxTokens = 4096

// check takes the API root, "https://api.anthropic.com", with or without
// its /v1.
func (anthropicFormat) check(base *url.URL) error {
	if strings.HasSuffix(strings.TrimSuffix(base.Path, "/"), "/messages") {
		return errors.New("an Anthropic base_url is the API root, such as https://api.anthropic.com, not the messages endpoint")
	}
	return nil
}

// messagesURL is {base}/v1/messages, or {base}/messages for a base that
// ends in /v1 already.
func messagesURL(base *url.URL) string {
	if strings.HasSuffix(strings.TrimSuffix(base.Path, "/"), "/v1") {
		return base.JoinPath("messages").String()
	}
	return base.JoinPath("v1", "messages").String()
}

func (anthropicFormat) newRequest(ctx context.Context, k *Key, base *url.URL, req Request) (*http.Request, error) {
	if req.endpoint() != ChatCompletions {
		return nil, apperr.Field(apperr.Invalid, "unsupported_endpoint", "model",
			"'"+req.Model+"' is served by Anthropic, which has no "+req.endpoint()+" API")
	}
	var body []byte
	var betas []string
	if req.nativeFor(KindAnthropic) {
		body, betas = req.Native.Body, req.Native.Betas
	} else {
		var err error
		if body, betas, err = anthropicRequest(req.Body); err != nil {
			return nil, err
		}
	}
	hreq, err := postJSON(ctx, messagesURL(base), body, req.Stream)
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("x-api-key", k.Secret)
	hreq.Header.Set("anthropic-version", wire.AnthropicVersion)
	if len(betas) > 0 {
		hreq.Header.Set("anthropic-beta", strings.Join(betas, ","))
	}
	return hreq, nil
}

// The chat completion request, as far as a Messages request is made of it.
type chatIn struct {
	Model               string          `json:"model"`
	Messages            []chatInMessage `json:"messages"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int64          `json:"top_k"`
	Stop                json.RawMessage `json:"stop"`
	User                string          `json:"user"`
	Stream              bool            `json:"stream"`
	N                   *int            `json:"n"`
	Tools               []struct {
		Type     string `json:"type"`
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
		CacheControl json.RawMessage `json:"cache_control"`
	} `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
	ReasoningEffort   json.RawMessage `json:"reasoning_effort"`
	// Anthropic's own, carried in the chat form as they came.
	Thinking          json.RawMessage `json:"thinking"`
	ContextManagement json.RawMessage `json:"context_management"`
	AnthropicBeta     []string        `json:"anthropic_beta"`

	// What Anthropic's Messages API has no equivalent of: refused when
	// set to anything but its default.
	ResponseFormat   json.RawMessage `json:"response_format"`
	Logprobs         *bool           `json:"logprobs"`
	TopLogprobs      json.RawMessage `json:"top_logprobs"`
	LogitBias        json.RawMessage `json:"logit_bias"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	Seed             json.RawMessage `json:"seed"`
	Functions        json.RawMessage `json:"functions"`
	FunctionCall     json.RawMessage `json:"function_call"`
	Audio            json.RawMessage `json:"audio"`
	Modalities       []string        `json:"modalities"`
	Prediction       json.RawMessage `json:"prediction"`
	WebSearchOptions json.RawMessage `json:"web_search_options"`
}

type chatInMessage struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	ToolCalls []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
	ToolCallID string `json:"tool_call_id"`
	IsError    bool   `json:"is_error"`
	// ThinkingBlocks open an assistant turn, exactly as Anthropic wrote
	// them: it checks their signatures.
	ThinkingBlocks []wire.AnthropicBlock `json:"thinking_blocks"`
}

type chatInPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Refusal  string `json:"refusal"`
	ImageURL struct {
		URL string `json:"url"`
	} `json:"image_url"`
	CacheControl json.RawMessage `json:"cache_control"`
}

// unsupportedByAnthropic refuses a chat feature Anthropic cannot do.
func unsupportedByAnthropic(param, what string) *apperr.Error {
	return apperr.Field(apperr.Invalid, "unsupported_parameter", param, what+" is not supported by Anthropic's models")
}

// set says whether a raw field was given a value other than null.
func set(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// anthropicRequest translates a chat completion body into a Messages
// body: system and developer messages into system; a json_schema
// response_format into output_config.format; each tool message into
// a user turn's tool_result block; consecutive turns of one role merged,
// as Anthropic wants them to alternate; images by data: URL inline,
// others by address; tools and tool_choice; stop; the user into metadata;
// thinking, context_management and reasoning_effort (as
// output_config.effort). It also returns the anthropic-beta values to
// send.
func anthropicRequest(body []byte) ([]byte, []string, error) {
	var in chatIn
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, nil, apperr.Field(apperr.Invalid, "invalid_json", "", "the request could not be read for Anthropic: "+err.Error())
	}
	if err := refuseForAnthropic(&in); err != nil {
		return nil, nil, err
	}
	betas, err := anthropicBetas(in.AnthropicBeta)
	if err != nil {
		return nil, nil, err
	}
	effort, err := anthropicEffort(in.ReasoningEffort)
	if err != nil {
		return nil, nil, err
	}
	out := wire.AnthropicRequest{Model: in.Model, Temperature: in.Temperature, TopP: in.TopP, TopK: in.TopK, Stream: in.Stream,
		MaxTokens: anthropicDefaultMaxTokens, Thinking: rawIfSet(in.Thinking), ContextManagement: rawIfSet(in.ContextManagement)}
	format, err := anthropicFormatOf(in.ResponseFormat)
	if err != nil {
		return nil, nil, err
	}
	if effort != "" || format != nil {
		out.OutputConfig = &wire.AnthropicOutputConfig{Effort: effort, Format: format}
	}
	switch {
	case in.MaxCompletionTokens != nil:
		out.MaxTokens = *in.MaxCompletionTokens
	case in.MaxTokens != nil:
		out.MaxTokens = *in.MaxTokens
	}
	if in.User != "" {
		out.Metadata = &wire.AnthropicMetadata{UserID: in.User}
	}
	stop, err := stopSequences(in.Stop)
	if err != nil {
		return nil, nil, err
	}
	out.StopSequences = stop
	var turns []turnBlocks
	for i, m := range in.Messages {
		at := "messages[" + strconv.Itoa(i) + "]"
		switch m.Role {
		case "system", "developer":
			blocks, err := textBlocks(m.Content, at)
			if err != nil {
				return nil, nil, err
			}
			out.System = append(out.System, blocks...)
		case "user":
			blocks, err := contentBlocks(m.Content, at, true)
			if err != nil {
				return nil, nil, err
			}
			turns = appendTurn(turns, "user", blocks)
		case "assistant":
			blocks, err := contentBlocks(m.Content, at, false)
			if err != nil {
				return nil, nil, err
			}
			if len(m.ThinkingBlocks) > 0 {
				blocks = append(thinkingBlocks(m.ThinkingBlocks), blocks...)
			}
			for j, tc := range m.ToolCalls {
				input, err := toolArguments(tc.Function.Arguments)
				if err != nil {
					return nil, nil, apperr.Field(apperr.Invalid, "invalid_tool_call", at+".tool_calls["+strconv.Itoa(j)+"].function.arguments",
						"a tool call's arguments must be a JSON object for Anthropic")
				}
				blocks = append(blocks, wire.AnthropicBlock{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name, Input: input})
			}
			turns = appendTurn(turns, "assistant", blocks)
		case "tool":
			result, err := toolResult(m, at)
			if err != nil {
				return nil, nil, err
			}
			turns = appendTurn(turns, "user", []wire.AnthropicBlock{result})
		}
	}
	for _, t := range turns {
		content, _ := json.Marshal(t.blocks)
		out.Messages = append(out.Messages, wire.AnthropicTurn{Role: t.role, Content: content})
	}
	for i, tool := range in.Tools {
		if tool.Type != "" && tool.Type != "function" {
			return nil, nil, unsupportedByAnthropic("tools["+strconv.Itoa(i)+"].type", "a tool of type '"+tool.Type+"'")
		}
		schema := tool.Function.Parameters
		if !set(schema) {
			schema = json.RawMessage(`{"type":"object"}`) // a function without parameters
		}
		out.Tools = append(out.Tools, wire.AnthropicTool{Name: tool.Function.Name, Description: tool.Function.Description,
			InputSchema: schema, CacheControl: tool.CacheControl})
	}
	choice, err := anthropicToolChoice(in.ToolChoice, in.ParallelToolCalls)
	if err != nil {
		return nil, nil, err
	}
	out.ToolChoice = choice
	b, err := json.Marshal(out)
	return b, betas, err
}

// refuseForAnthropic names the chat features Anthropic has no equivalent
// of, when a request uses them.
func refuseForAnthropic(in *chatIn) error {
	switch {
	case in.N != nil && *in.N != 1:
		return unsupportedByAnthropic("n", "n other than 1")
	case set(in.ResponseFormat) && formatType(in.ResponseFormat) != "text" && formatType(in.ResponseFormat) != "json_schema":
		return unsupportedByAnthropic("response_format", "response_format "+formatType(in.ResponseFormat)+" (send a json_schema)")
	case in.Logprobs != nil && *in.Logprobs, set(in.TopLogprobs):
		return unsupportedByAnthropic("logprobs", "logprobs")
	case set(in.LogitBias) && string(in.LogitBias) != "{}":
		return unsupportedByAnthropic("logit_bias", "logit_bias")
	case in.PresencePenalty != nil && *in.PresencePenalty != 0:
		return unsupportedByAnthropic("presence_penalty", "presence_penalty")
	case in.FrequencyPenalty != nil && *in.FrequencyPenalty != 0:
		return unsupportedByAnthropic("frequency_penalty", "frequency_penalty")
	case set(in.Seed):
		return unsupportedByAnthropic("seed", "seed")
	case set(in.Functions), set(in.FunctionCall):
		return unsupportedByAnthropic("functions", "the legacy functions API (send tools)")
	case set(in.Audio) || len(in.Modalities) > 1 || len(in.Modalities) == 1 && in.Modalities[0] != "text":
		return unsupportedByAnthropic("modalities", "audio output")
	case set(in.Prediction):
		return unsupportedByAnthropic("prediction", "a predicted output")
	case set(in.WebSearchOptions):
		return unsupportedByAnthropic("web_search_options", "web search")
	}
	return nil
}

// formatType is a response_format's type.
func formatType(raw json.RawMessage) string {
	var f struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(raw, &f)
	return f.Type
}

// turnBlocks is one Messages turn being built.
type turnBlocks struct {
	role   string
	blocks []wire.AnthropicBlock
}

// appendTurn adds blocks as a turn of role, merged into the last turn when
// it has the same role (chat's consecutive user messages, or an
// assistant's answer split by tool results, are one turn to Anthropic).
func appendTurn(turns []turnBlocks, role string, blocks []wire.AnthropicBlock) []turnBlocks {
	if len(blocks) == 0 {
		return turns
	}
	if n := len(turns); n > 0 && turns[n-1].role == role {
		turns[n-1].blocks = append(turns[n-1].blocks, blocks...)
		return turns
	}
	return append(turns, turnBlocks{role: role, blocks: blocks})
}

// textBlocks is a content as text blocks: a system prompt's.
func textBlocks(raw json.RawMessage, at string) ([]wire.AnthropicBlock, error) {
	blocks, err := contentBlocks(raw, at, false)
	for _, b := range blocks {
		if b.Type != "text" {
			return nil, unsupportedByAnthropic(at+".content", "a system message of "+b.Type+" parts")
		}
	}
	return blocks, err
}

// contentBlocks translates a content (a string, parts, or null) into
// blocks; images only where allowed (user turns and tool results). Empty
// texts are left out: Anthropic refuses empty text blocks.
func contentBlocks(raw json.RawMessage, at string, images bool) ([]wire.AnthropicBlock, error) {
	if !set(raw) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil, nil
		}
		return []wire.AnthropicBlock{{Type: "text", Text: &s}}, nil
	}
	var parts []chatInPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, apperr.Field(apperr.Invalid, "invalid_content", at+".content", "content must be a string or an array of content parts")
	}
	var out []wire.AnthropicBlock
	for j, p := range parts {
		pat := at + ".content[" + strconv.Itoa(j) + "]"
		switch {
		case p.Type == "text" || p.Type == "refusal":
			text := p.Text
			if p.Type == "refusal" {
				text = p.Refusal
			}
			if text == "" && len(p.CacheControl) == 0 {
				continue
			}
			out = append(out, wire.AnthropicBlock{Type: "text", Text: &text, CacheControl: p.CacheControl})
		case p.Type == "image_url" && images:
			src, err := imageSource(p.ImageURL.URL, pat)
			if err != nil {
				return nil, err
			}
			out = append(out, wire.AnthropicBlock{Type: "image", Source: src, CacheControl: p.CacheControl})
		default:
			return nil, unsupportedByAnthropic(pat, "a content part of type '"+p.Type+"' here")
		}
	}
	return out, nil
}

// imageSource is an image's source: a data: URL inline, an http(s) URL by
// address.
func imageSource(u, at string) (*wire.AnthropicSource, error) {
	if data, ok := strings.CutPrefix(u, "data:"); ok {
		mediaType, b64, ok := strings.Cut(data, ";base64,")
		if !ok || mediaType == "" {
			return nil, apperr.Field(apperr.Invalid, "invalid_image", at+".image_url.url", "an inline image must be a base64 data: URL")
		}
		return &wire.AnthropicSource{Type: "base64", MediaType: mediaType, Data: b64}, nil
	}
	if strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://") {
		return &wire.AnthropicSource{Type: "url", URL: u}, nil
	}
	return nil, apperr.Field(apperr.Invalid, "invalid_image", at+".image_url.url", "an image must be a data: URL or an http(s) URL")
}

// toolArguments is a tool call's arguments as a tool_use input: a JSON
// object ("" is an empty one).
func toolArguments(args string) (json.RawMessage, error) {
	if strings.TrimSpace(args) == "" {
		return json.RawMessage("{}"), nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(args), &obj); err != nil || obj == nil {
		return nil, errors.New("not a JSON object")
	}
	return json.RawMessage(args), nil
}

// toolResult translates a tool message into a tool_result block; the
// cache_control of its last part, where the Messages dialect keeps a
// block's, goes back on the block.
func toolResult(m chatInMessage, at string) (wire.AnthropicBlock, error) {
	b := wire.AnthropicBlock{Type: "tool_result", ToolUseID: m.ToolCallID, IsError: m.IsError}
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		if s != "" {
			b.Content, _ = json.Marshal(s)
		}
		return b, nil
	}
	blocks, err := contentBlocks(m.Content, at, true)
	if err != nil {
		return b, err
	}
	if n := len(blocks); n > 0 && len(blocks[n-1].CacheControl) > 0 {
		b.CacheControl, blocks[n-1].CacheControl = blocks[n-1].CacheControl, nil
		if blocks[n-1].Type == "text" && *blocks[n-1].Text == "" {
			blocks = blocks[:n-1]
		}
	}
	if len(blocks) > 0 {
		b.Content, _ = json.Marshal(blocks)
	}
	return b, nil
}

// anthropicToolChoice translates tool_choice: "auto", "none", "required"
// (Anthropic's any) or a named function (its tool); parallel_tool_calls
// false is disable_parallel_tool_use.
func anthropicToolChoice(raw json.RawMessage, parallel *bool) (*wire.AnthropicToolChoice, error) {
	noParallel := parallel != nil && !*parallel
	if !set(raw) {
		if noParallel {
			return &wire.AnthropicToolChoice{Type: "auto", DisableParallelToolUse: true}, nil
		}
		return nil, nil
	}
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		switch mode {
		case "auto":
			return &wire.AnthropicToolChoice{Type: "auto", DisableParallelToolUse: noParallel}, nil
		case "required":
			return &wire.AnthropicToolChoice{Type: "any", DisableParallelToolUse: noParallel}, nil
		case "none":
			return &wire.AnthropicToolChoice{Type: "none"}, nil
		}
		return nil, apperr.Field(apperr.Invalid, "invalid_tool_choice", "tool_choice", "tool_choice must be auto, none, required or a function")
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &named) != nil || named.Type != "function" || named.Function.Name == "" {
		return nil, apperr.Field(apperr.Invalid, "invalid_tool_choice", "tool_choice", "tool_choice must be auto, none, required or a function")
	}
	return &wire.AnthropicToolChoice{Type: "tool", Name: named.Function.Name, DisableParallelToolUse: noParallel}, nil
}

// limits rewrites Anthropic's rate-limit headers as OpenAI's, which the
// pool learns from: anthropic-ratelimit-requests-{limit,remaining,reset}
// and -tokens-* (Anthropic's "most restrictive" token limit; its
// -input-tokens-* when that is absent), each reset an RFC 3339 time made
// a duration from now.
func (anthropicFormat) limits(h http.Header, now time.Time) {
	rewrite := func(from []anthropicDim, to dimHeaders) {
		for _, d := range from {
			// The names are canonical already: h[…] rather than h.Get,
			// which would canonicalise each one again on every answer.
			limit, remaining, reset := headerValue(h, d.limit), headerValue(h, d.remaining), headerValue(h, d.reset)
			if limit == "" && remaining == "" && reset == "" {
				continue
			}
			if limit != "" {
				h[to.limit] = []string{limit}
			}
			if remaining != "" {
				h[to.remaining] = []string{remaining}
			}
			if t, err := time.Parse(time.RFC3339, reset); err == nil {
				h[to.reset] = []string{max(t.Sub(now), 0).Round(time.Millisecond).String()}
			}
			return
		}
	}
	rewrite(anthropicRequestDims, requestHeaders)
	rewrite(anthropicTokenDims, tokenHeaders)
}

// anthropicDim is one of Anthropic's rate-limit dimensions: its headers'
// canonical names.
type anthropicDim struct{ limit, remaining, reset string }

func anthropicDimOf(prefix string) anthropicDim {
	return anthropicDim{prefix + "-Limit", prefix + "-Remaining", prefix + "-Reset"}
}

var (
	anthropicRequestDims = []anthropicDim{anthropicDimOf("Anthropic-Ratelimit-Requests")}
	// The "most restrictive" token limit, or the input tokens' when that
	// is absent.
	anthropicTokenDims = []anthropicDim{anthropicDimOf("Anthropic-Ratelimit-Tokens"), anthropicDimOf("Anthropic-Ratelimit-Input-Tokens")}
)

// headerValue is h's first value of a canonical name.
func headerValue(h http.Header, canonical string) string {
	if v := h[canonical]; len(v) > 0 {
		return v[0]
	}
	return ""
}
