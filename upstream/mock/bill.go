package mock

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	_ "image/gif" // the sizes of images sent inline
	_ "image/jpeg"
	_ "image/png"
	"strings"
	"sync"

	"github.com/tiktoken-go/tokenizer"
)

// The mock bills as a provider does: the prompt's tokens from the whole
// body (every message's text, names, tool calls, tool definitions,
// response schemas and images) counted with OpenAI's o200k_base tokenizer
// (tiktoken-go, an implementation of its own, not Sluice's), the way
// OpenAI's cookbook counts them; the answer's tokens likewise. With
// Billing "words" it counts words instead, which costs nothing: for load
// runs, where the mock's own time would hide the gateway's.

// Billing modes of Config.Billing.
const (
	BillTokens = "tokens"
	BillWords  = "words"
)

// biller counts prompts and answers for one Server.
type biller struct {
	words bool
	codec tokenizer.Codec
}

func newBiller(mode string) *biller {
	if mode == BillWords {
		return &biller{words: true}
	}
	codec, err := tokenizer.Get(tokenizer.O200kBase)
	if err != nil {
		panic("mock: o200k_base: " + err.Error()) // embedded in the module: cannot fail
	}
	return &biller{codec: codec}
}

// Tokens is what the mock bills for a text: its o200k_base tokens.
func Tokens(text string) int { return o200kBiller().count(text) }

// o200kBiller is the biller Tokens uses, built once.
var o200kBiller = sync.OnceValue(func() *biller { return newBiller(BillTokens) })

// PromptTokens is what the mock bills for a chat request's prompt, with
// the tiktoken encoding named ("o200k_base", "cl100k_base"): OpenAI's
// cookbook count, the reference Sluice's estimate is checked against.
func PromptTokens(body []byte, encoding string) (int, error) {
	codec, err := tokenizer.Get(tokenizer.Encoding(encoding))
	if err != nil {
		return 0, err
	}
	return (&biller{codec: codec}).prompt(body), nil
}

// count is a text's tokens.
func (b *biller) count(s string) int {
	if b.words {
		return len(strings.Fields(s))
	}
	n, _ := b.codec.Count(s)
	return n
}

// truncate cuts s to at most n tokens.
func (b *biller) truncate(s string, n int) string {
	if b.words {
		words := strings.Fields(s)
		return strings.Join(words[:min(n, len(words))], " ")
	}
	ids, _, _ := b.codec.Encode(s)
	out, _ := b.codec.Decode(ids[:n])
	return out
}

// billedRequest is what the biller reads of a chat request.
type billedRequest struct {
	Messages []struct {
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		Name      string          `json:"name"`
		ToolCalls []struct {
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
		ToolCallID string `json:"tool_call_id"`
	} `json:"messages"`
	Tools []struct {
		Function function `json:"function"`
	} `json:"tools"`
	Functions      []function      `json:"functions"`
	ResponseFormat json.RawMessage `json:"response_format"`
}

type function struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Parameters  struct {
		Properties map[string]struct {
			Type        any      `json:"type"`
			Description string   `json:"description"`
			Enum        []string `json:"enum"`
		} `json:"properties"`
	} `json:"parameters"`
}

// prompt is the prompt tokens of body, as OpenAI's cookbook counts them:
// 3 a message and 3 to prime the reply, each value of a message, 1 more
// for a name, and its function-calling formula for tool definitions.
func (b *biller) prompt(body []byte) int {
	var req billedRequest
	if json.Unmarshal(body, &req) != nil {
		return 0
	}
	n := 3
	for _, m := range req.Messages {
		n += 3 + b.count(m.Role) + b.content(m.Content) + b.count(m.ToolCallID)
		if m.Name != "" {
			n += 1 + b.count(m.Name)
		}
		for _, tc := range m.ToolCalls {
			n += b.count(tc.Function.Name) + b.count(tc.Function.Arguments)
		}
	}
	fns := req.Functions
	for _, t := range req.Tools {
		fns = append(fns, t.Function)
	}
	for _, f := range fns {
		n += 7 + b.count(f.Name+":"+strings.TrimSuffix(f.Description, "."))
		if len(f.Parameters.Properties) > 0 {
			n += 3
		}
		for key, p := range f.Parameters.Properties {
			n += 3
			if len(p.Enum) > 0 {
				n -= 3
				for _, e := range p.Enum {
					n += 3 + b.count(e)
				}
			}
			typ, _ := json.Marshal(p.Type)
			n += b.count(key + ":" + strings.Trim(string(typ), `"`) + ":" + strings.TrimSuffix(p.Description, "."))
		}
	}
	if len(fns) > 0 {
		n += 12
	}
	if len(req.ResponseFormat) > 0 && string(req.ResponseFormat) != "null" {
		n += b.count(string(req.ResponseFormat))
	}
	return n
}

// content counts a message's content: a string, or text and image parts.
func (b *biller) content(raw json.RawMessage) int {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return b.count(s)
	}
	var parts []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		ImageURL struct {
			URL    string `json:"url"`
			Detail string `json:"detail"`
		} `json:"image_url"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return 0
	}
	n := 0
	for _, p := range parts {
		switch p.Type {
		case "text":
			n += b.count(p.Text)
		case "image_url":
			n += imageTokens(p.ImageURL.URL, p.ImageURL.Detail)
		}
	}
	return n
}

// imageTokens is gpt-4o's price of an image: 85, and 170 a 512-pixel tile
// of it scaled to fit 2048 × 2048 and then 768 on its shorter side. An image
// sent by address is taken to be 1024 × 1024 (the mock fetches nothing).
func imageTokens(url, detail string) int {
	if detail == "low" {
		return 85
	}
	w, h := 1024, 1024
	if data, ok := strings.CutPrefix(url, "data:"); ok {
		if _, b64, ok := strings.Cut(data, ";base64,"); ok {
			if cfg, _, err := image.DecodeConfig(base64.NewDecoder(base64.StdEncoding, bytes.NewReader([]byte(b64)))); err == nil {
				w, h = cfg.Width, cfg.Height
			}
		}
	}
	if m := max(w, h); m > 2048 {
		w, h = w*2048/m, h*2048/m
	}
	if s := min(w, h); s > 768 {
		w, h = w*768/s, h*768/s
	}
	return 85 + 170*((w+511)/512)*((h+511)/512)
}
