package sessions

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// DefaultMaxSessions caps how many sessions a Memory store holds, so a
// client inventing session ids cannot exhaust the gateway's memory; past it
// the least recently saved session is forgotten first.
const DefaultMaxSessions = 100_000

// Memory is an in-process Store, used when no Redis is configured. Sessions
// are kept in order of their last Save, which is also their expiry order
// (the TTL is fixed), so expired sessions are swept from the front on every
// write and, when the store is full, the least recently saved goes first.
type Memory struct {
	ttl time.Duration
	now func() time.Time
	max int

	mu      sync.Mutex
	byScope map[Scope]*list.Element // of *memSession
	order   *list.List              // of *memSession, least recently saved first
}

// memSession is one stored session.
type memSession struct {
	scope    Scope
	messages []Message
	expires  time.Time
}

// NewMemory returns a Memory store forgetting sessions not saved for ttl
// (DefaultTTL when ttl <= 0) and holding at most DefaultMaxSessions. now is
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
		max:     DefaultMaxSessions,
		byScope: make(map[Scope]*list.Element),
		order:   list.New(),
	}
}

// Load returns a copy of the session's history if it has not expired.
func (m *Memory) Load(_ context.Context, s Scope) ([]Message, bool, error) {
	if !ValidID(s.ID) {
		return nil, false, ErrInvalidID
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.byScope[s]
	if !ok {
		return nil, false, nil
	}
	sess := el.Value.(*memSession)
	if !m.now().Before(sess.expires) {
		m.remove(el)
		return nil, false, nil
	}
	return append([]Message{}, sess.messages...), true, nil
}

// Save stores a copy of messages as the session's history and restarts its
// TTL, first forgetting expired sessions and, if the store is full, the
// least recently saved ones.
func (m *Memory) Save(_ context.Context, s Scope, messages []Message) error {
	if !ValidID(s.ID) {
		return ErrInvalidID
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for el := m.order.Front(); el != nil && !now.Before(el.Value.(*memSession).expires); el = m.order.Front() {
		m.remove(el)
	}
	stored := append([]Message{}, messages...)
	if el, ok := m.byScope[s]; ok {
		sess := el.Value.(*memSession)
		sess.messages, sess.expires = stored, now.Add(m.ttl)
		m.order.MoveToBack(el)
		return nil
	}
	for m.order.Len() >= m.max {
		m.remove(m.order.Front())
	}
	m.byScope[s] = m.order.PushBack(&memSession{scope: s, messages: stored, expires: now.Add(m.ttl)})
	return nil
}

// Delete forgets the session and reports whether it existed unexpired.
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
	live := m.now().Before(el.Value.(*memSession).expires)
	m.remove(el)
	return live, nil
}

// Len returns how many sessions are held, expired ones not yet swept
// included; it is for metrics and tests.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.order.Len()
}

// remove drops a session; m.mu must be held.
func (m *Memory) remove(el *list.Element) {
	delete(m.byScope, el.Value.(*memSession).scope)
	m.order.Remove(el)
}
