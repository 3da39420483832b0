package models

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/apperr"
)

// StoredResponse is a response of the Responses API kept for its
// organization (store: true): the Response object GET answers, and the
// conversation, as chat messages, that a request naming it as
// previous_response_id continues.
type StoredResponse struct {
	ID      string // resp_…
	OrgID   int64
	TokenID int64 // the token that made it; any token of the organization may read it
	Model   string
	// Conversation is a JSON array of chat messages: the chain it
	// continued, its own input and the model's output.
	Conversation string
	Response     string // the Response object, JSON
	CreatedAt    time.Time
	ExpiresAt    time.Time
}

// ErrNoStoredResponse is the answer for a response that is not the
// organization's, was deleted, or has expired: the same, so one tenant
// cannot learn another's ids.
var ErrNoStoredResponse = apperr.WithReason(apperr.NotFound, "response_not_found", "no such response (or it expired)")

// CreateStoredResponse stores r; one insert.
func (s *Store) CreateStoredResponse(ctx context.Context, r StoredResponse) error {
	r.CreatedAt, r.ExpiresAt = r.CreatedAt.UTC(), r.ExpiresAt.UTC()
	return dbErr(s.db.WithContext(ctx).Create(&r).Error, "stored response")
}

// StoredResponse is the organization's response id, unless it has
// expired by now (ErrNoStoredResponse): an expired row is gone to readers
// before the sweep deletes it.
func (s *Store) StoredResponse(ctx context.Context, orgID int64, id string, now time.Time) (StoredResponse, error) {
	var r StoredResponse
	res := s.db.WithContext(ctx).Where("org_id = ? AND id = ? AND expires_at > ?", orgID, id, now.UTC()).Limit(1).Find(&r)
	if res.Error != nil {
		return StoredResponse{}, dbErr(res.Error, "stored response")
	}
	if res.RowsAffected == 0 {
		return StoredResponse{}, ErrNoStoredResponse
	}
	return r, nil
}

// DeleteStoredResponse deletes the organization's response id;
// ErrNoStoredResponse when it has none by that id (or it expired).
func (s *Store) DeleteStoredResponse(ctx context.Context, orgID int64, id string, now time.Time) error {
	res := s.db.WithContext(ctx).Where("org_id = ? AND id = ? AND expires_at > ?", orgID, id, now.UTC()).Delete(&StoredResponse{})
	if res.Error != nil {
		return dbErr(res.Error, "stored response")
	}
	if res.RowsAffected == 0 {
		return ErrNoStoredResponse
	}
	return nil
}

// DeleteExpiredResponses deletes the responses past their retention and
// says how many.
func (s *Store) DeleteExpiredResponses(ctx context.Context, now time.Time) (int64, error) {
	res := s.db.WithContext(ctx).Where("expires_at <= ?", now.UTC()).Delete(&StoredResponse{})
	return res.RowsAffected, dbErr(res.Error, "expired responses")
}
