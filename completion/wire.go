package completion

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/sluicehq/sluice/chat"
)

// OpenAI's chat completion answer, as the local model writes it.

type wireResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []wireChoice `json:"choices"`
	Usage   *wireUsage   `json:"usage,omitempty"`
}

type wireChoice struct {
	Index        int       `json:"index"`
	Message      *wireText `json:"message,omitempty"`
	Delta        *wireText `json:"delta,omitempty"`
	FinishReason *string   `json:"finish_reason"`
	Logprobs     *struct{} `json:"logprobs"`
}

type wireText struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content"`
}

type wireUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func toWireUsage(u chat.Usage) *wireUsage {
	return &wireUsage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.Total()}
}

// streamLocal sends a local reply as OpenAI's server-sent events: a role
// chunk, content chunks, a finish chunk, optionally a usage chunk, then
// [DONE]. head carries the id, creation time and model of every chunk.
func streamLocal(sink Sink, head wireResponse, content, finish string, usage chat.Usage, includeUsage bool) {
	_ = sink.StartStream(200)
	send := func(ch wireResponse) {
		ch.ID, ch.Object, ch.Created, ch.Model = head.ID, "chat.completion.chunk", head.Created, head.Model
		b, _ := json.Marshal(ch)
		frame := make([]byte, 0, len(b)+8)
		frame = append(append(append(frame, "data: "...), b...), "\n\n"...)
		_, _ = sink.Write(frame)
	}
	send(wireResponse{Choices: []wireChoice{{Delta: &wireText{Role: "assistant"}}}})
	for _, piece := range chunks(content, 8) {
		send(wireResponse{Choices: []wireChoice{{Delta: &wireText{Content: piece}}}})
	}
	send(wireResponse{Choices: []wireChoice{{Delta: &wireText{}, FinishReason: &finish}}})
	if includeUsage {
		send(wireResponse{Choices: []wireChoice{}, Usage: toWireUsage(usage)})
	}
	_, _ = sink.Write([]byte("data: [DONE]\n\n"))
}

// chunks splits s into pieces of at most n runes.
func chunks(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		i, count := 0, 0
		for i < len(s) && count < n {
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
			count++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}
