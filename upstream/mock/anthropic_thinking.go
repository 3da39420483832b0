package mock

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/wire"
)

// Extended thinking, as the mock's Anthropic speaker does it. A request
// with thinking enabled or adaptive is answered with a thinking block
// first: "mock thinking about: …" (the text it answers), signed; with
// display "omitted" its thinking is empty and the signature still
// carries it, as Anthropic's does. Its tokens are output, counted in
// output_tokens and in output_tokens_details.thinking_tokens.
//
// It checks what Anthropic checks of thinking where a translation could
// go wrong: the thinking object (a budget of at least 1,024 tokens and,
// without the interleaved-thinking beta, below max_tokens), that a
// thinking block sent back carries the signature it was given for its
// text (a block changed on the way is refused), that while thinking the
// assistant turn answered by tool results starts with its thinking, and
// that context_management comes with its beta and, for clear_thinking,
// with thinking on.

// mockThinking is a request's thinking object.
type mockThinking struct {
	Type         string `json:"type"`
	BudgetTokens *int64 `json:"budget_tokens"`
	Display      string `json:"display"`
}

// thinkingOf reads req's thinking; on says it is enabled or adaptive.
func thinkingOf(req wire.AnthropicRequest) (t mockThinking, on bool, err error) {
	if len(req.Thinking) == 0 || string(req.Thinking) == "null" {
		return t, false, nil
	}
	if err := json.Unmarshal(req.Thinking, &t); err != nil {
		return t, false, fmt.Errorf("thinking: Input should be a valid dictionary")
	}
	switch t.Type {
	case "enabled", "adaptive":
		return t, true, nil
	case "disabled":
		return t, false, nil
	}
	return t, false, fmt.Errorf("thinking.type: Input should be 'enabled', 'disabled' or 'adaptive'")
}

// signingKey makes the mock's signatures its own: a block whose text or
// signature changed on its way back does not verify.
const signingKey = "mock-anthropic-thinking"

// thinkingSignature signs a thinking text: the text itself, so that a
// block whose text was omitted still carries it, and a check of both.
func thinkingSignature(thinking string) string {
	sum := sha256.Sum256([]byte(signingKey + "\x00" + thinking))
	return base64.RawURLEncoding.EncodeToString([]byte(thinking)) + "." + hex.EncodeToString(sum[:8])
}

// signedText is the text a signature signs, if it is one of the mock's.
func signedText(sig string) (string, bool) {
	enc, check, ok := strings.Cut(sig, ".")
	if !ok {
		return "", false
	}
	text, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || thinkingSignature(string(text)) != enc+"."+check {
		return "", false
	}
	return string(text), true
}

// checkThinking checks req's thinking, its thinking blocks and its
// context_management against the rules above; betas is the
// anthropic-beta header.
func checkThinking(req wire.AnthropicRequest, betas string, turns []anthropicTurn) error {
	t, on, err := thinkingOf(req)
	if err != nil {
		return err
	}
	if t.Type == "enabled" {
		switch {
		case t.BudgetTokens == nil:
			return fmt.Errorf("thinking.enabled.budget_tokens: Field required")
		case *t.BudgetTokens < 1024:
			return fmt.Errorf("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
		case *t.BudgetTokens >= req.MaxTokens && !strings.Contains(betas, "interleaved-thinking-"):
			return fmt.Errorf("`max_tokens` must be greater than `thinking.budget_tokens`")
		}
	}
	if len(req.ContextManagement) > 0 {
		if !strings.Contains(betas, "context-management-") {
			return fmt.Errorf("context_management: Extra inputs are not permitted")
		}
		if strings.Contains(string(req.ContextManagement), "clear_thinking_") && !on {
			return fmt.Errorf("`clear_thinking_20251015` strategy requires `thinking` to be enabled or adaptive")
		}
	}
	for i, turn := range turns {
		for j, b := range turn.blocks {
			at := "messages." + strconv.Itoa(i) + ".content." + strconv.Itoa(j)
			switch b.Type {
			case "thinking":
				text, ok := signedText(deref(b.Signature))
				if !ok || b.Thinking == nil || *b.Thinking != "" && *b.Thinking != text {
					return fmt.Errorf("%s: Invalid `signature` in `thinking` block", at)
				}
			case "redacted_thinking":
				if b.Data == "" {
					return fmt.Errorf("%s.data: Field required", at)
				}
			}
		}
	}
	// While thinking, the assistant turn that tool results answer starts
	// with its thinking.
	if n := len(turns); on && n >= 2 && hasToolResult(turns[n-1]) {
		prev := turns[n-2]
		if first := prev.blocks[0].Type; first != "thinking" && first != "redacted_thinking" {
			return fmt.Errorf("messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. When `thinking` is enabled, "+
				"a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks)", n-2, first)
		}
	}
	return nil
}

func hasToolResult(t anthropicTurn) bool {
	for _, b := range t.blocks {
		if b.Type == "tool_result" {
			return true
		}
	}
	return false
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// thinkingBlock is the thinking the mock does before answering about,
// and its tokens.
func (s *Server) thinkingBlock(t mockThinking, about string) (wire.AnthropicBlock, int) {
	thinking := "mock thinking about: " + about
	sig := thinkingSignature(thinking)
	shown := thinking
	if t.Display == "omitted" {
		shown = ""
	}
	return wire.AnthropicBlock{Type: "thinking", Thinking: &shown, Signature: &sig}, s.bill.count(thinking)
}
