package conversations

import "github.com/sluicehq/sluice/chat"

const roleSystem, roleUser, roleAssistant = "system", "user", "assistant"

// Compose returns the messages to send upstream: the stored history followed
// by the incoming messages, trimmed to fit budget tokens, where a message
// costs count(content)+4. count nil means chat.CountTokens.
//
//   - The conversation's system prompt leads: the first system message of the
//     history, or else of the incoming messages, is placed first. An incoming
//     system message whose content equals one already present is skipped (a
//     client resending its system prompt every turn does not duplicate it);
//     any other system message is kept where it is.
//   - System messages are never dropped.
//   - While over budget, the oldest non-system history messages are dropped,
//     a user message together with the assistant reply that follows it, so
//     no answer is left without its question.
//   - Incoming messages are never dropped. If they (with the system
//     messages) exceed the budget on their own, they are returned with all
//     history turns dropped and the gateway's request limits decide.
//
// budget <= 0 means no limit.
func Compose(history []chat.Message, incoming []chat.Message, budget int, count func(string) int) []chat.Message {
	if count == nil {
		count = chat.CountTokens
	}
	msgs, fromHistory := merge(history, incoming)
	cost := func(m chat.Message) int { return count(m.Content) + chat.MessageOverheadTokens }
	total := 0
	for _, m := range msgs {
		total += cost(m)
	}
	if budget <= 0 || total <= budget {
		return msgs
	}
	var droppable []int
	for i, m := range msgs {
		if fromHistory[i] && m.Role != roleSystem {
			droppable = append(droppable, i)
		}
	}
	drop := make([]bool, len(msgs))
	for j := 0; j < len(droppable) && total > budget; j++ {
		i := droppable[j]
		drop[i] = true
		total -= cost(msgs[i])
		if msgs[i].Role == roleUser && j+1 < len(droppable) && msgs[droppable[j+1]].Role == roleAssistant {
			j++
			drop[droppable[j]] = true
			total -= cost(msgs[droppable[j]])
		}
	}
	kept := msgs[:0]
	for i, m := range msgs {
		if !drop[i] {
			kept = append(kept, m)
		}
	}
	return kept
}

// Append returns the history to store after a reply: the previous history,
// the incoming messages (with the same system-message handling as Compose:
// the system prompt first, repeated system prompts skipped) and the
// assistant's reply. It never modifies its arguments.
//
// Append keeps every turn, so an active conversation grows until its TTL lapses.
// To keep stored history bounded by the budget, store
// Append(Compose(history, incoming, budget, count), nil, reply) instead.
func Append(history []chat.Message, incoming []chat.Message, reply chat.Message) []chat.Message {
	msgs, _ := merge(history, incoming)
	return append(msgs, reply)
}

// merge concatenates history and incoming into a new slice, moving the first
// system message to the front and skipping incoming system messages that
// repeat one already present. fromHistory[i] reports whether msgs[i] came
// from the history, since only those may be dropped to fit a budget.
func merge(history, incoming []chat.Message) (msgs []chat.Message, fromHistory []bool) {
	msgs = make([]chat.Message, 0, len(history)+len(incoming)+1)
	fromHistory = make([]bool, 0, cap(msgs))
	systems := make(map[string]bool)

	leadInHistory, leadIndex := true, indexOfSystem(history)
	if leadIndex < 0 {
		leadInHistory, leadIndex = false, indexOfSystem(incoming)
	}
	if leadIndex >= 0 {
		lead := history
		if !leadInHistory {
			lead = incoming
		}
		msgs = append(msgs, lead[leadIndex])
		fromHistory = append(fromHistory, leadInHistory)
		systems[lead[leadIndex].Content] = true
	}
	for i, m := range history {
		if leadInHistory && i == leadIndex {
			continue
		}
		if m.Role == roleSystem {
			systems[m.Content] = true
		}
		msgs = append(msgs, m)
		fromHistory = append(fromHistory, true)
	}
	for i, m := range incoming {
		if !leadInHistory && i == leadIndex {
			continue
		}
		if m.Role == roleSystem {
			if systems[m.Content] {
				continue
			}
			systems[m.Content] = true
		}
		msgs = append(msgs, m)
		fromHistory = append(fromHistory, false)
	}
	return msgs, fromHistory
}

// indexOfSystem returns the index of the first system message, or -1.
func indexOfSystem(msgs []chat.Message) int {
	for i, m := range msgs {
		if m.Role == roleSystem {
			return i
		}
	}
	return -1
}
