// Package conversations keeps server-side chat histories for clients that
// send X-Sluice-Session: <id> (the header and the /v1/sessions routes keep
// the name clients know), so a client can send only its new messages and
// the gateway supplies the rest. A conversation belongs to one
// (organization, token, id) Scope: another token or organization using the
// same id gets a different, empty conversation, never this one.
// Conversations idle longer than a TTL are forgotten.
//
// The gateway's flow for one request is: Load the history, Compose the
// messages to send within a token budget, call the model, then Save
// Append(...) with the reply.
package conversations

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/chat"
)

// DefaultTTL is how long an idle conversation is kept when the operator does not
// configure a TTL: long enough for a person pausing mid-conversation, short
// enough that abandoned histories do not pile up.
const DefaultTTL = 30 * time.Minute

// HeaderName is the request header that names the conversation.
const HeaderName = "X-Sluice-Session"

// maxIDLen bounds conversation ids so they stay cheap as map and Redis keys.
const maxIDLen = 128

// ErrStoreUnavailable is how a failing store answers a client: the request
// may be retried, so it is a 503, not an internal error.
var ErrStoreUnavailable = apperr.WithReason(apperr.Unavailable, "session_store_unavailable",
	"the session store is unavailable right now; retry, or send the request without "+HeaderName)

// ErrInvalidID is returned by stores for a Scope whose ID fails ValidID; the
// gateway should answer 400 before reaching a store.
var ErrInvalidID = errors.New("conversations: invalid conversation id")

// Scope identifies a conversation. All three fields are part of the identity, so
// a conversation can only be read, extended or deleted with the same organization
// and API token that created it.
type Scope struct {
	OrgID   int64
	TokenID int64
	ID      string
}

// ValidID reports whether id can name a conversation: 1 to 128 characters of
// A-Z, a-z, 0-9, '.', '_', ':' and '-'. The narrow alphabet keeps ids safe in
// URLs (/v1/sessions/{id}), headers and Redis keys.
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > maxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// Store keeps conversation histories. A conversation not saved for longer than the
// store's TTL is gone: Load reports it missing and Delete reports nothing
// deleted. Save replaces the history and restarts the TTL; Load does not, so
// only conversing (not reading) keeps a conversation alive. Implementations are
// safe for concurrent use; two concurrent Saves to one conversation leave the last.
type Store interface {
	// Load returns the conversation's history and whether it exists.
	Load(ctx context.Context, s Scope) ([]chat.Message, bool, error)
	// Save replaces the conversation's history and restarts its TTL.
	Save(ctx context.Context, s Scope, messages []chat.Message) error
	// Delete forgets the conversation and reports whether it existed.
	Delete(ctx context.Context, s Scope) (bool, error)
}
