package completion

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/chat"
	"github.com/sluicehq/sluice/conversations"
)

// withHistory sets the call's messages and body: the request's own, or,
// when it names a conversation, the stored history followed by them. The
// new turn's messages travel exactly as the client wrote them (images, tool
// calls and all); only the history, kept as text, is inserted before them,
// trimmed to the history budget. When the new turn brings its own system
// message, the stored one gives way, so a client resending its system
// prompt each turn does not accumulate copies.
func (p *Pipeline) withHistory(ctx context.Context, c *call) error {
	c.msgs, c.body = c.req.Messages, c.req.Body
	id := c.req.Conversation
	if id == "" || p.Conversations == nil {
		return nil
	}
	if !conversations.ValidID(id) {
		return apperr.Field(apperr.Invalid, "invalid_session_id", conversations.HeaderName,
			conversations.HeaderName+" must be 1 to 128 letters, digits or . _ : -")
	}
	history, _, err := p.Conversations.Load(ctx, conversationOf(c))
	if err != nil {
		p.Log.Warn("conversation store unavailable", "request_id", c.req.ID, "err", err)
		return conversations.ErrStoreUnavailable
	}
	if len(history) == 0 {
		return nil
	}
	if slices.ContainsFunc(c.msgs, chat.Message.IsSystem) {
		history = slices.DeleteFunc(slices.Clone(history), chat.Message.IsSystem)
	}
	historyBudget := p.HistoryBudget - chat.PromptTokens(c.msgs)
	var kept []chat.Message
	if historyBudget > 0 {
		kept = conversations.Compose(history, nil, historyBudget, chat.CountTokens)
	} else { // the new turn alone fills the budget: keep only the system prompt
		kept = slices.DeleteFunc(slices.Clone(history), func(m chat.Message) bool { return !m.IsSystem() })
	}
	var fields map[string]json.RawMessage
	var incoming []json.RawMessage
	if json.Unmarshal(c.body, &fields) != nil || json.Unmarshal(fields["messages"], &incoming) != nil {
		return apperr.Field(apperr.Invalid, "invalid_json", "", "request body is not valid JSON")
	}
	all := make([]json.RawMessage, 0, len(kept)+len(incoming))
	msgs := make([]chat.Message, 0, len(kept)+len(c.msgs))
	for _, m := range kept {
		raw, _ := json.Marshal(m)
		all = append(all, raw)
		msgs = append(msgs, m)
	}
	all = append(all, incoming...)
	msgs = append(msgs, c.msgs...)
	fields["messages"], _ = json.Marshal(all)
	body, err := json.Marshal(fields)
	if err != nil {
		return apperr.Wrap(err, "composing a conversation")
	}
	c.msgs, c.body = msgs, body
	return nil
}

// saveHistory stores the conversation with the new reply, restarting its
// TTL. c.msgs already hold the history.
func (p *Pipeline) saveHistory(ctx context.Context, c *call, reply string) {
	if c.req.Conversation == "" || p.Conversations == nil {
		return
	}
	stored := conversations.Append(nil, c.msgs, chat.Message{Role: "assistant", Content: reply})
	if err := p.Conversations.Save(ctx, conversationOf(c), stored); err != nil {
		p.Log.Warn("saving a conversation failed", "request_id", c.req.ID, "err", err)
	}
}

func conversationOf(c *call) conversations.Scope {
	return conversations.Scope{OrgID: c.caller.OrgID, TokenID: c.caller.TokenID, ID: c.req.Conversation}
}
