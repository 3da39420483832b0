package models

import (
	"context"
	"time"

	"gorm.io/gorm/clause"
)

// UsageEvent is one admitted API request as billed.
type UsageEvent struct {
	ID               int64
	RequestID        string
	OrgID            int64
	TokenID          int64
	Model            string
	PromptTokens     int
	CompletionTokens int
	Status           int
	LatencyMs        int
	Cached           bool   // answered from the response cache
	Fallback         bool   // answered by sluice-local because providers were unavailable
	UpstreamKeyID    *int64 // the provider key that answered, nil for local answers
	CreatedAt        time.Time
}

// InsertUsageEvents stores a batch. A request id already stored is skipped,
// so a batch retried after a partial failure never double-bills.
func (s *Store) InsertUsageEvents(ctx context.Context, evs []UsageEvent) error {
	if len(evs) == 0 {
		return nil
	}
	err := s.db.WithContext(ctx).Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "request_id"}},
		DoNothing: true,
	}).CreateInBatches(evs, 500).Error
	return dbErr(err, "usage events")
}

// UsageTotals are an organization's counts over a period.
type UsageTotals struct {
	Requests         int64
	PromptTokens     int64
	CompletionTokens int64
}

// TotalTokens is prompt plus completion tokens.
func (u UsageTotals) TotalTokens() int64 { return u.PromptTokens + u.CompletionTokens }

// UsageSince sums orgID's usage from since on.
func (s *Store) UsageSince(ctx context.Context, orgID int64, since time.Time) (UsageTotals, error) {
	var u UsageTotals
	err := s.db.WithContext(ctx).Model(&UsageEvent{}).
		Select("COUNT(*) AS requests, COALESCE(SUM(prompt_tokens), 0) AS prompt_tokens, COALESCE(SUM(completion_tokens), 0) AS completion_tokens").
		Where("org_id = ? AND created_at >= ?", orgID, since.UTC()).
		Scan(&u).Error
	return u, dbErr(err, "usage")
}
