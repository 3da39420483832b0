package completion

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/chat"
	"github.com/sluicehq/sluice/conversations"
)

// withHistory sets the call's history and prompt: the request's own, or,
// when it names a conversation, the stored history in front of it, trimmed
// to the history budget and counted as the model's family counts. When the
// new turn brings its own system message, the stored one gives way, so a
// client resending its system prompt each turn does not accumulate copies.
func (p *Pipeline) withHistory(ctx context.Context, c *call) error {
	c.prompt = c.req.Prompt.Tokens
	id := c.req.Conversation
	if id == "" || p.d.Conversations == nil {
		return nil
	}
	if !conversations.ValidID(id) {
		return apperr.Field(apperr.Invalid, "invalid_session_id", conversations.HeaderName,
			conversations.HeaderName+" must be 1 to 128 letters, digits or . _ : -")
	}
	history, _, err := p.d.Conversations.Load(ctx, conversationOf(c))
	if err != nil {
		p.d.Log.Warn("conversation store unavailable", "request_id", c.req.ID, "err", err)
		return conversations.ErrStoreUnavailable
	}
	if len(history) == 0 {
		return nil
	}
	if slices.ContainsFunc(c.req.Messages(), chat.Message.IsSystem) {
		history = slices.DeleteFunc(slices.Clone(history), chat.Message.IsSystem)
	}
	historyBudget := p.d.HistoryBudget - int(c.prompt)
	if historyBudget > 0 {
		c.history = conversations.Compose(history, nil, historyBudget, chat.CountTokens)
	} else { // the new turn alone fills the budget: keep only the system prompt
		c.history = slices.DeleteFunc(slices.Clone(history), func(m chat.Message) bool { return !m.IsSystem() })
	}
	count := c.req.Prompt.Family.Counter
	for _, m := range c.history {
		c.prompt += int64(count.Count([]byte(m.Content))) + messageOverhead
	}
	return nil
}

// composedBody is the body to send for a call with history: the stored
// turns (as text) in front of the request's messages, which travel exactly
// as the client wrote them (images, tool calls and all), with edits made.
func composedBody(c *call, e bodyEdits) ([]byte, error) {
	var fields map[string]json.RawMessage
	var incoming []json.RawMessage
	if json.Unmarshal(c.req.Body, &fields) != nil || json.Unmarshal(fields["messages"], &incoming) != nil {
		return nil, apperr.Field(apperr.Invalid, "invalid_json", "", "request body is not valid JSON")
	}
	all := make([]json.RawMessage, 0, len(c.history)+len(incoming))
	for _, m := range c.history {
		raw, _ := json.Marshal(m)
		all = append(all, raw)
	}
	fields["messages"], _ = json.Marshal(append(all, incoming...))
	if e.model != "" {
		fields["model"], _ = json.Marshal(e.model)
	}
	if e.includeUsage {
		fields["stream_options"] = withUsageOption(fields["stream_options"])
	}
	if e.boundField != "" {
		fields[e.boundField] = json.RawMessage(itoa(int(e.bound)))
	}
	body, err := json.Marshal(fields)
	if err != nil {
		return nil, apperr.Wrap(err, "composing a conversation")
	}
	return body, nil
}

// saveHistory stores the conversation with the new reply, restarting its
// TTL.
func (p *Pipeline) saveHistory(ctx context.Context, c *call, reply string) {
	if c.req.Conversation == "" || p.d.Conversations == nil {
		return
	}
	stored := conversations.Append(nil, c.messages(), chat.Message{Role: "assistant", Content: reply})
	if err := p.d.Conversations.Save(ctx, conversationOf(c), stored); err != nil {
		p.d.Log.Warn("saving a conversation failed", "request_id", c.req.ID, "err", err)
	}
}

func conversationOf(c *call) conversations.Scope {
	return conversations.Scope{OrgID: c.caller.OrgID, TokenID: c.caller.TokenID, ID: c.req.Conversation}
}
