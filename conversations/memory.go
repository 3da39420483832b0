package conversations

import (
	"container/list"
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/chat"
)

// DefaultMaxConversations caps how many conversations a Memory store holds, so a
// client inventing conversation ids cannot exhaust the gateway's memory; past it
// the least recently saved conversation is forgotten first.
const DefaultMaxConversations = 100_000

// Memory is an in-process Store, used when no Redis is configured. Conversations
// are kept in order of their last Save, which is also their expiry order
// (the TTL is fixed), so expired conversations are swept from the front on every
// write and, when the store is full, the least recently saved goes first.
type Memory struct {
	ttl time.Duration
	now func() time.Time
	max int

	mu      sync.Mutex
	byScope map[Scope]*list.Element // of *memConversation
	order   *list.List              // of *memConversation, least recently saved first
}

// memConversation is one stored conversation.
type memConversation struct {
	scope    Scope
	messages []chat.Message
	expires  time.Time
}

// NewMemory returns a Memory store forgetting conversations not saved for ttl
// (DefaultTTL when ttl <= 0) and holding at most DefaultMaxConversations. now is
// the clock used for expiry (time.Now when nil); tests pass a fake one.
func NewMemory(ttl time.Duration, now func() time.Time) *Memory {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if now == nil {
		now = time.Now
	}
	return &Memory{
		ttl:     ttl,
		now:     now,
		max:     DefaultMaxConversations,
		byScope: make(map[Scope]*list.Element),
		order:   list.New(),
	}
}

// Load returns a copy of the conversation's history if it has not expired.
func (m *Memory) Load(_ context.Context, s Scope) ([]chat.Message, bool, error) {
	if !ValidID(s.ID) {
		return nil, false, ErrInvalidID
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.byScope[s]
	if !ok {
		return nil, false, nil
	}
	sess := el.Value.(*memConversation)
	if !m.now().Before(sess.expires) {
		m.remove(el)
		return nil, false, nil
	}
	return append([]chat.Message{}, sess.messages...), true, nil
}

// Save stores a copy of messages as the conversation's history and restarts its
// TTL, first forgetting expired conversations and, if the store is full, the
// least recently saved ones.
func (m *Memory) Save(_ context.Context, s Scope, messages []chat.Message) error {
	if !ValidID(s.ID) {
		return ErrInvalidID
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for el := m.order.Front(); el != nil && !now.Before(el.Value.(*memConversation).expires); el = m.order.Front() {
		m.remove(el)
	}
	stored := append([]chat.Message{}, messages...)
	if el, ok := m.byScope[s]; ok {
		sess := el.Value.(*memConversation)
		sess.messages, sess.expires = stored, now.Add(m.ttl)
		m.order.MoveToBack(el)
		return nil
	}
	for m.order.Len() >= m.max {
		m.remove(m.order.Front())
	}
	m.byScope[s] = m.order.PushBack(&memConversation{scope: s, messages: stored, expires: now.Add(m.ttl)})
	return nil
}

// Delete forgets the conversation and reports whether it existed unexpired.
func (m *Memory) Delete(_ context.Context, s Scope) (bool, error) {
	if !ValidID(s.ID) {
		return false, ErrInvalidID
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.byScope[s]
	if !ok {
		return false, nil
	}
	live := m.now().Before(el.Value.(*memConversation).expires)
	m.remove(el)
	return live, nil
}

// Len returns how many conversations are held, expired ones not yet swept
// included; it is for metrics and tests.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.order.Len()
}

// remove drops a conversation; m.mu must be held.
func (m *Memory) remove(el *list.Element) {
	delete(m.byScope, el.Value.(*memConversation).scope)
	m.order.Remove(el)
}
