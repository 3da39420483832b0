// Package local is sluice-local, the built-in model that answers chat
// completions offline with the standard library alone. It exists so a fresh
// Sluice install can serve a real request (and be tested end to end) before
// any upstream provider is connected: it writes traditional spring couplets
// (春联) chosen to fit the prompt, and otherwise gives a short templated
// answer pointing at upstream providers. Replies are deterministic and their
// token usage is counted with chat.CountTokens. It also embeds text
// (embed.go): deterministic hashed-feature vectors, for offline use of the
// embeddings API.
package local

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/chat"
)

// ModelID is the name clients pass as "model".
const ModelID = "sluice-local"

// Finish reasons, as in the OpenAI chat completions API.
const (
	finishStop   = "stop"
	finishLength = "length"
)

// maxTopicRunes bounds how much of the prompt is echoed back, so a huge
// prompt does not produce a huge reply.
const maxTopicRunes = 80

// Reply is the model's answer with honest token counts.
type Reply struct {
	// Content is the answer text, already cut to the token limit.
	Content string
	// PromptTokens is chat.PromptTokens of the messages.
	PromptTokens int
	// CompletionTokens is chat.CountTokens(Content).
	CompletionTokens int
	// FinishReason is "length" when Content was cut to maxTokens, else "stop".
	FinishReason string
}

// Model is the built-in deterministic model. It holds only read-only tables
// built by New, so one Model may serve concurrent requests.
type Model struct {
	couplets []couplet
	themes   []theme
	phrases  []string
}

// New parses the embedded couplets. It fails if the embedded file is
// malformed or empty, so a broken build is caught at start-up rather than
// on the first request.
func New() (*Model, error) {
	cs, err := parseCouplets(coupletsTSV)
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	return &Model{couplets: cs, themes: themes(), phrases: requestPhrases()}, nil
}

// Complete answers the last user message. The same messages always give the
// same reply. maxTokens <= 0 means no limit; otherwise the reply is cut on a
// rune boundary so that its CompletionTokens is at most maxTokens, and
// FinishReason is "length". It never panics, whatever the input.
func (m *Model) Complete(msgs []chat.Message, maxTokens int) Reply {
	prompt := lastUserContent(msgs)
	content, cut := chat.Truncate(m.answer(prompt), maxTokens)
	r := Reply{
		Content:          content,
		PromptTokens:     chat.PromptTokens(msgs),
		CompletionTokens: chat.CountTokens(content),
		FinishReason:     finishStop,
	}
	if cut {
		r.FinishReason = finishLength
	}
	return r
}

// lastUserContent returns the content of the last user message, or "" if
// there is none. Roles are matched leniently because validation belongs to
// the HTTP layer, not here.
func lastUserContent(msgs []chat.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if strings.EqualFold(strings.TrimSpace(msgs[i].Role), "user") {
			return msgs[i].Content
		}
	}
	return ""
}

// answer builds the full reply text before any truncation.
func (m *Model) answer(prompt string) string {
	topic := topicOf(prompt)
	if topic == "" {
		// Nothing to go on, not even a language; English is the API's own.
		return "Hello! sluice-local is Sluice's built-in offline model. Send a message to get an answer; for example, ask for \"a spring couplet about good fortune\"."
	}
	zh := mostlyHan(prompt)
	if m != nil && len(m.couplets) > 0 && isCoupletRequest(m.phrases, prompt) {
		return m.coupletAnswer(prompt, zh)
	}
	if zh {
		return "你问的是“" + topic + "”。sluice-local 是 Sluice 内置的离线模型：它会写传统春联（例如“写一副关于福的春联”），其他问题只能简短回答。如需完整回答，请接入上游模型服务商。"
	}
	return "You asked about \"" + topic + "\". sluice-local is Sluice's built-in offline model: it writes traditional spring couplets (ask for a 春联 or \"a couplet about good fortune\") and otherwise answers briefly. Connect an upstream provider for general answers."
}

// coupletAnswer picks the best-fitting couplet and lays it out the way
// couplets are usually written down. English prompts get a note saying what
// the lines are, since the couplet itself stays in Chinese.
func (m *Model) coupletAnswer(prompt string, zh bool) string {
	text := themeText(m.phrases, prompt)
	matched := matchThemes(m.themes, text)
	c := pickCouplet(m.couplets, matched, text, prompt)
	out := "上联：" + c.upper + "\n下联：" + c.lower + "\n横批：" + c.scroll
	if zh {
		return out
	}
	note := "\nThis is a traditional Chinese spring couplet (public domain) from sluice-local's built-in collection"
	switch len(matched) {
	case 0:
		note += "."
	case 1:
		note += ", chosen for the theme of " + matched[0].name + "."
	default:
		names := make([]string, len(matched))
		for i, t := range matched {
			names[i] = t.name
		}
		note += ", chosen for the themes of " + strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1] + "."
	}
	return out + note
}

// mostlyHan reports whether the prompt is Chinese enough to answer in
// Chinese: it has at least as many Han characters as ASCII words, a rough
// balance since one Han character carries about as much as one English word.
func mostlyHan(s string) bool {
	han, words, inWord := 0, 0, false
	for _, r := range s {
		if isASCIIAlnum(r) {
			if !inWord {
				words++
			}
			inWord = true
			continue
		}
		inWord = false
		if unicode.Is(unicode.Han, r) {
			han++
		}
	}
	return han > 0 && han >= words
}

// topicOf turns the prompt into a tidy one-line echo: invalid UTF-8 and
// control characters dropped, whitespace collapsed, trailing question marks
// and full stops removed, and at most maxTopicRunes long.
func topicOf(prompt string) string {
	s := strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(prompt, ""))
	s = strings.Join(strings.Fields(s), " ")
	s = strings.TrimRight(s, "?？!！.。 ")
	if utf8.RuneCountInString(s) > maxTopicRunes {
		s = string([]rune(s)[:maxTopicRunes]) + "…"
	}
	return s
}

func isASCIIAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}
