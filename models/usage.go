package models

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
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

// TouchOnly says the event only marks a token as used (it has no request id
// and is not billed).
func (e UsageEvent) TouchOnly() bool { return e.RequestID == "" }

// InsertUsageEvents stores a batch. A request id already stored is skipped,
// so a batch retried after a partial failure never double-bills.
func (s *Store) InsertUsageEvents(ctx context.Context, evs []UsageEvent) error {
	if len(evs) == 0 {
		return nil
	}
	if s.db.Dialector.Name() == "sqlite" {
		return dbErr(s.insertUsageRows(ctx, evs), "usage events")
	}
	return dbErr(s.copyUsageRows(ctx, evs), "usage events")
}

// usageColumns are the columns a usage batch writes, in order.
var usageColumns = []string{"request_id", "org_id", "token_id", "model", "prompt_tokens", "completion_tokens",
	"status", "latency_ms", "cached", "fallback", "upstream_key_id", "created_at"}

// copyUsageRows streams a batch into Postgres with COPY, the cheapest way in,
// through a temporary table so that request ids already stored are skipped
// (COPY itself has no ON CONFLICT).
func (s *Store) copyUsageRows(ctx context.Context, evs []UsageEvent) error {
	sqlDB, err := s.db.DB()
	if err != nil {
		return err
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(driverConn any) error {
		pg := driverConn.(*stdlib.Conn).Conn()
		tx, err := pg.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		_, err = tx.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS usage_incoming (
			request_id TEXT, org_id BIGINT, token_id BIGINT, model TEXT, prompt_tokens INTEGER,
			completion_tokens INTEGER, status INTEGER, latency_ms INTEGER, cached BOOLEAN, fallback BOOLEAN,
			upstream_key_id BIGINT, created_at TIMESTAMPTZ) ON COMMIT DELETE ROWS`)
		if err != nil {
			return err
		}
		rows := make([][]any, len(evs))
		for i, e := range evs {
			rows[i] = []any{e.RequestID, e.OrgID, e.TokenID, e.Model, e.PromptTokens, e.CompletionTokens,
				e.Status, e.LatencyMs, e.Cached, e.Fallback, e.UpstreamKeyID, e.CreatedAt.UTC()}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"usage_incoming"}, usageColumns, pgx.CopyFromRows(rows)); err != nil {
			return err
		}
		cols := strings.Join(usageColumns, ", ")
		_, err = tx.Exec(ctx, `INSERT INTO usage_events (`+cols+`) SELECT `+cols+` FROM usage_incoming
			ON CONFLICT (request_id) DO NOTHING`)
		if err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
}

// insertUsageRows writes a whole batch with one short statement whose one
// parameter is the batch as JSON, expanded by SQLite's json_each. The
// pure-Go SQLite driver parses a statement's text on every execution and
// binds parameters in time quadratic in their number, so both a multi-row
// INSERT (thousands of parameters) and a prepared row-at-a-time INSERT cost
// more CPU than the requests they recorded; this costs one parse a batch.
func (s *Store) insertUsageRows(ctx context.Context, evs []UsageEvent) error {
	rows := make([]usageRow, len(evs))
	for i, e := range evs {
		rows[i] = usageRow{e.RequestID, e.OrgID, e.TokenID, e.Model, e.PromptTokens, e.CompletionTokens, e.Status,
			e.LatencyMs, e.Cached, e.Fallback, e.UpstreamKeyID, e.CreatedAt.UTC().Format(sqliteTime)}
	}
	batch, err := json.Marshal(rows)
	if err != nil {
		return err
	}
	return s.db.WithContext(ctx).Exec(`INSERT INTO usage_events (request_id, org_id, token_id, model, prompt_tokens,
		completion_tokens, status, latency_ms, cached, fallback, upstream_key_id, created_at)
		SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5, value->>6, value->>7,
			value->>8, value->>9, value->>10, value->>11
		FROM json_each(?) WHERE true
		ON CONFLICT (request_id) DO NOTHING`, string(batch)).Error
}

// usageRow is one usage event as a JSON array, in insertUsageRows' column order.
type usageRow [12]any

// sqliteTime is how the SQLite driver stores times, so rows written here
// compare and read back like the ones gorm writes.
const sqliteTime = "2006-01-02 15:04:05.999999999-07:00"

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
