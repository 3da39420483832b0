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
	if s.db.Dialector.Name() == "sqlite" {
		return dbErr(s.insertUsageRows(ctx, evs), "usage events")
	}
	err := s.db.WithContext(ctx).Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "request_id"}},
		DoNothing: true,
	}).CreateInBatches(evs, 500).Error
	return dbErr(err, "usage events")
}

// insertUsageRows writes one prepared single-row INSERT per event inside one
// transaction. The pure-Go SQLite driver binds parameters in time quadratic
// in their number, so a multi-row INSERT of a whole batch (thousands of
// parameters) cost more CPU than the requests it recorded; single rows keep
// it linear, and one transaction keeps it to one fsync.
func (s *Store) insertUsageRows(ctx context.Context, evs []UsageEvent) error {
	sqlDB, err := s.db.DB()
	if err != nil {
		return err
	}
	tx, err := sqlDB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO usage_events
		(request_id, org_id, token_id, model, prompt_tokens, completion_tokens, status, latency_ms, cached, fallback, upstream_key_id, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (request_id) DO NOTHING`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, e := range evs {
		_, err := stmt.ExecContext(ctx, e.RequestID, e.OrgID, e.TokenID, e.Model, e.PromptTokens, e.CompletionTokens,
			e.Status, e.LatencyMs, e.Cached, e.Fallback, e.UpstreamKeyID, e.CreatedAt.UTC())
		if err != nil {
			return err
		}
	}
	return tx.Commit()
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
