package models

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"

	"github.com/sluicehq/sluice/money"
)

// UsageEvent is one admitted API request as billed.
type UsageEvent struct {
	RequestID        string `gorm:"primaryKey"`
	OrgID            int64
	TokenID          int64
	Model            string
	PromptTokens     int
	CompletionTokens int
	CachedTokens     int // of PromptTokens, served from the provider's prompt cache
	// CacheCreationTokens are the PromptTokens the provider wrote to its
	// prompt cache (Anthropic bills them above the input price);
	// ReasoningTokens the CompletionTokens a model spent thinking.
	CacheCreationTokens int
	ReasoningTokens     int
	Dialect             string // the API the client spoke: chat, responses, messages, embeddings
	Cost                money.Amount
	PriceID             int64 // the price version billed; 0 when not billed (no price, or a free cache hit)
	Status              int
	LatencyMs           int
	Cached              bool   // answered from the response cache
	Fallback            bool   // answered by sluice-local because providers were unavailable
	UpstreamKeyID       *int64 // the provider key that answered, nil for local answers
	// Prepaid says the cost was debited from the organization's prepaid
	// balance: storing the event adds it to the day's balance_spending.
	Prepaid   bool
	CreatedAt time.Time
}

// TouchOnly says the event only marks a token as used (it has no request id
// and is not billed).
func (e UsageEvent) TouchOnly() bool { return e.RequestID == "" }

// InsertUsageEvents stores a batch and adds it to the hourly and monthly
// rollups, in one transaction. A request id already stored is skipped and
// only newly stored events are rolled up, so a batch retried after a
// partial failure never double-bills or double-counts.
func (s *Store) InsertUsageEvents(ctx context.Context, evs []UsageEvent) error {
	evs = uniqueRequests(evs)
	if len(evs) == 0 {
		return nil
	}
	if s.db.Dialector.Name() == "sqlite" {
		return dbErr(s.insertUsageRows(ctx, evs), "usage events")
	}
	return dbErr(s.copyUsageRows(ctx, evs), "usage events")
}

// uniqueRequests drops repeats of a request id within a batch, which the
// rollups below would otherwise count twice. Repeats are rare, so evs
// itself is returned when there are none, and a copy from the first one.
func uniqueRequests(evs []UsageEvent) []UsageEvent {
	seen := make(map[string]struct{}, len(evs))
	for i, e := range evs {
		if _, dup := seen[e.RequestID]; dup {
			out := slices.Clone(evs[:i])
			for _, e := range evs[i+1:] {
				if _, dup := seen[e.RequestID]; !dup {
					seen[e.RequestID] = struct{}{}
					out = append(out, e)
				}
			}
			return out
		}
		seen[e.RequestID] = struct{}{}
	}
	return evs
}

// usageColumns are the columns a usage batch writes, in order.
var usageColumns = []string{"request_id", "org_id", "token_id", "model", "prompt_tokens", "completion_tokens",
	"cached_tokens", "cost", "price_id", "status", "latency_ms", "cached", "fallback", "upstream_key_id", "created_at",
	"cache_creation_tokens", "reasoning_tokens", "dialect", "prepaid"}

// spendingUpdate adds a batch's spending from balances to a day's.
const spendingUpdate = `ON CONFLICT (org_id, day) DO UPDATE SET amount = balance_spending.amount + EXCLUDED.amount`

// rollupUpdate adds the incoming counts to a rollup row's.
const rollupUpdate = `requests = usage_hourly.requests + EXCLUDED.requests,
	prompt_tokens = usage_hourly.prompt_tokens + EXCLUDED.prompt_tokens,
	completion_tokens = usage_hourly.completion_tokens + EXCLUDED.completion_tokens,
	cached_tokens = usage_hourly.cached_tokens + EXCLUDED.cached_tokens,
	cache_hits = usage_hourly.cache_hits + EXCLUDED.cache_hits,
	cost = usage_hourly.cost + EXCLUDED.cost`

const monthlyUpdate = `requests = usage_monthly.requests + EXCLUDED.requests,
	tokens = usage_monthly.tokens + EXCLUDED.tokens,
	cost = usage_monthly.cost + EXCLUDED.cost`

// pricedColumns and pricedUpdate upsert usage_monthly_models rows.
const pricedColumns = `usage_monthly_models (org_id, period, model, price_id, requests, prompt_tokens,
	completion_tokens, cached_tokens, cost)`

const pricedUpdate = `ON CONFLICT (org_id, period, model, price_id) DO UPDATE SET
	requests = usage_monthly_models.requests + EXCLUDED.requests,
	prompt_tokens = usage_monthly_models.prompt_tokens + EXCLUDED.prompt_tokens,
	completion_tokens = usage_monthly_models.completion_tokens + EXCLUDED.completion_tokens,
	cached_tokens = usage_monthly_models.cached_tokens + EXCLUDED.cached_tokens,
	cost = usage_monthly_models.cost + EXCLUDED.cost`

// copyUsageRows stores a batch in Postgres. The usual batch holds only new
// request ids: it is copied straight into usage_events (COPY, the cheapest
// way in) and the rollups, summed here first, are upserted in one
// statement. A batch some of whose events are stored already (a retry of a
// flush whose commit landed after all) fails that COPY on the unique request
// id and takes the slower path that skips them.
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
		err := copyNewUsage(ctx, pg, evs)
		if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation
			return copyUsageSkippingStored(ctx, pg, evs)
		}
		return err
	})
}

// copyNewUsage copies evs into usage_events and adds them to the rollups,
// in one transaction; it fails, storing nothing, if a request id is stored
// already.
func copyNewUsage(ctx context.Context, pg *pgx.Conn, evs []UsageEvent) error {
	tx, err := pg.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"usage_events"}, usageColumns, &usageSource{evs: evs}); err != nil {
		return err
	}
	r := rollUp(evs)
	if _, err := tx.Exec(ctx, `WITH hourly AS (
			INSERT INTO usage_hourly (org_id, hour, token_id, model, price_id, requests, prompt_tokens,
				completion_tokens, cached_tokens, cache_hits, cost)
			SELECT * FROM unnest($1::bigint[], $2::timestamptz[], $3::bigint[], $4::text[], $5::bigint[], $6::bigint[],
				$7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[])
			ON CONFLICT (org_id, hour, token_id, model, price_id) DO UPDATE SET `+rollupUpdate+`
		), seen AS (
			INSERT INTO metered_models (model) SELECT unnest($12::text[]) ON CONFLICT (model) DO NOTHING
		), priced AS (
			INSERT INTO `+pricedColumns+`
			SELECT * FROM unnest($18::bigint[], $19::timestamptz[], $20::text[], $21::bigint[], $22::bigint[],
				$23::bigint[], $24::bigint[], $25::bigint[], $26::bigint[])
			`+pricedUpdate+`
		), spending AS (
			INSERT INTO balance_spending (org_id, day, amount)
			SELECT * FROM unnest($27::bigint[], $28::timestamptz[], $29::bigint[])
			`+spendingUpdate+`
		)
		INSERT INTO usage_monthly (period, org_id, requests, tokens, cost)
		SELECT * FROM unnest($13::timestamptz[], $14::bigint[], $15::bigint[], $16::bigint[], $17::bigint[])
		ON CONFLICT (period, org_id) DO UPDATE SET `+monthlyUpdate, r.args()...); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// usageSource feeds COPY one event at a time from a reused row, without
// building the whole batch as [][]any first.
type usageSource struct {
	evs []UsageEvent
	i   int
	row [19]any
}

func (u *usageSource) Next() bool { u.i++; return u.i <= len(u.evs) }
func (u *usageSource) Err() error { return nil }
func (u *usageSource) Values() ([]any, error) {
	e := &u.evs[u.i-1]
	u.row = [19]any{e.RequestID, e.OrgID, e.TokenID, e.Model, e.PromptTokens, e.CompletionTokens,
		e.CachedTokens, int64(e.Cost), e.PriceID, e.Status, e.LatencyMs, e.Cached, e.Fallback, e.UpstreamKeyID, e.CreatedAt.UTC(),
		e.CacheCreationTokens, e.ReasoningTokens, e.Dialect, e.Prepaid}
	return u.row[:], nil
}

// rollups are a batch's sums per hourly and monthly rollup row, as the
// column arrays the upsert unnests. Rows come sorted by key, so concurrent
// flushes lock rollup rows in one order and cannot deadlock.
type rollups struct {
	hOrg, hToken, hPrice                                   []int64
	hHour                                                  []time.Time
	hModel                                                 []string
	hRequests, hPrompt, hCompletion, hCached, hHits, hCost []int64
	models                                                 []string
	mPeriod                                                []time.Time
	mOrg, mRequests, mTokens, mCost                        []int64
	// Per organization, month, model and price (usage_monthly_models).
	pOrg, pPrice                                    []int64
	pPeriod                                         []time.Time
	pModel                                          []string
	pRequests, pPrompt, pCompletion, pCached, pCost []int64
	// Spending from prepaid balances per organization and day (balance_spending).
	sOrg, sAmount []int64
	sDay          []time.Time
}

func (r *rollups) args() []any {
	return []any{r.hOrg, r.hHour, r.hToken, r.hModel, r.hPrice, r.hRequests, r.hPrompt, r.hCompletion, r.hCached, r.hHits, r.hCost,
		r.models, r.mPeriod, r.mOrg, r.mRequests, r.mTokens, r.mCost,
		r.pOrg, r.pPeriod, r.pModel, r.pPrice, r.pRequests, r.pPrompt, r.pCompletion, r.pCached, r.pCost,
		r.sOrg, r.sDay, r.sAmount}
}

type spendingKey struct{ org, day int64 }

type hourlyKey struct {
	org, hour, token, price int64
	model                   string
}

type hourlySums struct{ requests, prompt, completion, cached, hits, cost int64 }

type monthlyKey struct{ period, org int64 }

type monthlySums struct{ requests, tokens, cost int64 }

type pricedKey struct {
	org, period, price int64
	model              string
}

// add counts one event.
func (h *hourlySums) add(e *UsageEvent) {
	h.requests++
	h.prompt += int64(e.PromptTokens)
	h.completion += int64(e.CompletionTokens)
	h.cached += int64(e.CachedTokens)
	if e.Cached {
		h.hits++
	}
	h.cost += int64(e.Cost)
}

// entry is m's value for k, added zero when missing.
func entry[K comparable, V any](m map[K]*V, k K) *V {
	v := m[k]
	if v == nil {
		v = new(V)
		m[k] = v
	}
	return v
}

// rollUp sums evs into the hourly and monthly rollup rows they add to.
func rollUp(evs []UsageEvent) *rollups {
	hourly := make(map[hourlyKey]*hourlySums)
	monthly := make(map[monthlyKey]*monthlySums)
	priced := make(map[pricedKey]*hourlySums) // hits unused
	seen := make(map[string]struct{})
	spending := make(map[spendingKey]int64)
	for i := range evs {
		e := &evs[i]
		at := e.CreatedAt.UTC()
		if e.Prepaid && e.Cost != 0 {
			spending[spendingKey{e.OrgID, at.Truncate(24 * time.Hour).Unix()}] += int64(e.Cost)
		}
		entry(hourly, hourlyKey{e.OrgID, at.Truncate(time.Hour).Unix(), e.TokenID, e.PriceID, e.Model}).add(e)
		mk := monthlyKey{MonthOf(at).Unix(), e.OrgID}
		m := entry(monthly, mk)
		m.requests++
		m.tokens += int64(e.PromptTokens + e.CompletionTokens)
		m.cost += int64(e.Cost)
		entry(priced, pricedKey{e.OrgID, mk.period, e.PriceID, e.Model}).add(e)
		seen[e.Model] = struct{}{}
	}
	r := &rollups{}
	hks := slices.SortedFunc(maps.Keys(hourly), func(a, b hourlyKey) int {
		return cmp.Or(cmp.Compare(a.org, b.org), cmp.Compare(a.hour, b.hour), cmp.Compare(a.token, b.token),
			strings.Compare(a.model, b.model), cmp.Compare(a.price, b.price))
	})
	for _, k := range hks {
		h := hourly[k]
		r.hOrg, r.hHour, r.hToken = append(r.hOrg, k.org), append(r.hHour, time.Unix(k.hour, 0).UTC()), append(r.hToken, k.token)
		r.hModel, r.hPrice = append(r.hModel, k.model), append(r.hPrice, k.price)
		r.hRequests, r.hPrompt, r.hCompletion = append(r.hRequests, h.requests), append(r.hPrompt, h.prompt), append(r.hCompletion, h.completion)
		r.hCached, r.hHits, r.hCost = append(r.hCached, h.cached), append(r.hHits, h.hits), append(r.hCost, h.cost)
	}
	r.models = slices.Sorted(maps.Keys(seen))
	mks := slices.SortedFunc(maps.Keys(monthly), func(a, b monthlyKey) int {
		return cmp.Or(cmp.Compare(a.period, b.period), cmp.Compare(a.org, b.org))
	})
	for _, k := range mks {
		m := monthly[k]
		r.mPeriod, r.mOrg = append(r.mPeriod, time.Unix(k.period, 0).UTC()), append(r.mOrg, k.org)
		r.mRequests, r.mTokens, r.mCost = append(r.mRequests, m.requests), append(r.mTokens, m.tokens), append(r.mCost, m.cost)
	}
	pks := slices.SortedFunc(maps.Keys(priced), func(a, b pricedKey) int {
		return cmp.Or(cmp.Compare(a.org, b.org), cmp.Compare(a.period, b.period), strings.Compare(a.model, b.model), cmp.Compare(a.price, b.price))
	})
	for _, k := range pks {
		p := priced[k]
		r.pOrg, r.pPeriod, r.pModel, r.pPrice = append(r.pOrg, k.org), append(r.pPeriod, time.Unix(k.period, 0).UTC()), append(r.pModel, k.model), append(r.pPrice, k.price)
		r.pRequests, r.pPrompt, r.pCompletion = append(r.pRequests, p.requests), append(r.pPrompt, p.prompt), append(r.pCompletion, p.completion)
		r.pCached, r.pCost = append(r.pCached, p.cached), append(r.pCost, p.cost)
	}
	sks := slices.SortedFunc(maps.Keys(spending), func(a, b spendingKey) int {
		return cmp.Or(cmp.Compare(a.org, b.org), cmp.Compare(a.day, b.day))
	})
	for _, k := range sks {
		r.sOrg, r.sDay, r.sAmount = append(r.sOrg, k.org), append(r.sDay, time.Unix(k.day, 0).UTC()), append(r.sAmount, spending[k])
	}
	return r
}

// copyUsageRows' slow path copies the batch into a temporary table; one
// statement then stores the new events and rolls up exactly those (the
// RETURNING of the insert), so request ids already stored are skipped by
// both.
func copyUsageSkippingStored(ctx context.Context, pg *pgx.Conn, evs []UsageEvent) error {
	tx, err := pg.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS usage_incoming (
		request_id TEXT, org_id BIGINT, token_id BIGINT, model TEXT, prompt_tokens INTEGER,
		completion_tokens INTEGER, cached_tokens INTEGER, cost BIGINT, price_id BIGINT, status INTEGER,
		latency_ms INTEGER, cached BOOLEAN, fallback BOOLEAN, upstream_key_id BIGINT, created_at TIMESTAMPTZ,
		cache_creation_tokens INTEGER, reasoning_tokens INTEGER, dialect TEXT, prepaid BOOLEAN)
		ON COMMIT DELETE ROWS`)
	if err != nil {
		return err
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"usage_incoming"}, usageColumns, &usageSource{evs: evs}); err != nil {
		return err
	}
	cols := strings.Join(usageColumns, ", ")
	_, err = tx.Exec(ctx, `WITH stored AS (
			INSERT INTO usage_events (`+cols+`) SELECT `+cols+` FROM usage_incoming
			ON CONFLICT (request_id) DO NOTHING
			RETURNING org_id, token_id, model, price_id, created_at, prompt_tokens, completion_tokens, cached_tokens, cost, cached, prepaid
		), spending AS (
			INSERT INTO balance_spending (org_id, day, amount)
			SELECT org_id, date_trunc('day', created_at, 'UTC'), sum(cost) FROM stored WHERE prepaid AND cost <> 0 GROUP BY 1, 2
			`+spendingUpdate+`
		), hourly AS (
			INSERT INTO usage_hourly (org_id, hour, token_id, model, price_id, requests, prompt_tokens,
				completion_tokens, cached_tokens, cache_hits, cost)
			SELECT org_id, date_trunc('hour', created_at, 'UTC'), token_id, model, price_id, count(*), sum(prompt_tokens),
				sum(completion_tokens), sum(cached_tokens), count(*) FILTER (WHERE cached), sum(cost)
			FROM stored GROUP BY 1, 2, 3, 4, 5
			ON CONFLICT (org_id, hour, token_id, model, price_id) DO UPDATE SET `+rollupUpdate+`
		), seen AS (
			INSERT INTO metered_models (model) SELECT DISTINCT model FROM stored ON CONFLICT (model) DO NOTHING
		), priced AS (
			INSERT INTO `+pricedColumns+`
			SELECT org_id, date_trunc('month', created_at, 'UTC'), model, price_id, count(*), sum(prompt_tokens),
				sum(completion_tokens), sum(cached_tokens), sum(cost)
			FROM stored GROUP BY 1, 2, 3, 4
			`+pricedUpdate+`
		)
		INSERT INTO usage_monthly (period, org_id, requests, tokens, cost)
		SELECT date_trunc('month', created_at, 'UTC'), org_id, count(*), sum(prompt_tokens + completion_tokens), sum(cost)
		FROM stored GROUP BY 1, 2
		ON CONFLICT (period, org_id) DO UPDATE SET `+monthlyUpdate)
	if err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// insertUsageRows writes a whole batch to SQLite with short statements
// whose one parameter is the batch as JSON, expanded by jsonb_each.
// jsonb_each, not json_each: it hands each row over as binary JSON, whose
// columns ->> reaches by skipping sizes, where a row as JSON text is parsed
// again for every one of its columns. The pure-Go SQLite driver parses a
// statement's text on every execution and binds parameters in time
// quadratic in their number, so both a multi-row INSERT (thousands of
// parameters) and a prepared row-at-a-time INSERT cost more CPU than the
// requests they recorded.
//
// The events go straight into usage_events, skipping request ids stored
// already, and the rollups are summed from the rows that insert added:
// those whose id (AUTOINCREMENT, so never reused) is above the highest
// before it. Staging the batch in a temporary table and probing
// usage_events for each event once per rollup cost 18% more per event, CPU
// the embedded default spends on the cores that serve requests
// (docs/BENCHMARKS.md).
func (s *Store) insertUsageRows(ctx context.Context, evs []UsageEvent) error {
	batch := string(appendUsageJSON(make([]byte, 0, 160*len(evs)), evs))
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var last int64
		if err := tx.Raw(`SELECT coalesce(max(id), 0) FROM usage_events`).Scan(&last).Error; err != nil {
			return err
		}
		if err := tx.Exec(insertUsageFromJSON, batch).Error; err != nil {
			return err
		}
		// created_at is stored as sqliteTime in UTC ("2026-11-30 22:28:38.1+00:00"),
		// so its first 13 characters name the hour and its first 8 the month.
		const fresh = `(SELECT *, substr(created_at, 1, 13) || ':00:00+00:00' AS hour,
			substr(created_at, 1, 8) || '01 00:00:00+00:00' AS period FROM usage_events WHERE id > @last)`
		if err := tx.Exec(`INSERT INTO usage_hourly (org_id, hour, token_id, model, price_id, requests, prompt_tokens,
				completion_tokens, cached_tokens, cache_hits, cost)
			SELECT org_id, hour, token_id, model, price_id, count(*), sum(prompt_tokens), sum(completion_tokens),
				sum(cached_tokens), sum(cached), sum(cost) FROM `+fresh+` GROUP BY 1, 2, 3, 4, 5
			ON CONFLICT (org_id, hour, token_id, model, price_id) DO UPDATE SET `+rollupUpdate,
			sql.Named("last", last)).Error; err != nil {
			return err
		}
		if err := tx.Exec(`INSERT INTO usage_monthly (period, org_id, requests, tokens, cost)
			SELECT period, org_id, count(*), sum(prompt_tokens + completion_tokens), sum(cost) FROM `+fresh+` GROUP BY 1, 2
			ON CONFLICT (period, org_id) DO UPDATE SET `+monthlyUpdate, sql.Named("last", last)).Error; err != nil {
			return err
		}
		if err := tx.Exec(`INSERT INTO `+pricedColumns+`
			SELECT org_id, period, model, price_id, count(*), sum(prompt_tokens), sum(completion_tokens),
				sum(cached_tokens), sum(cost) FROM `+fresh+` GROUP BY 1, 2, 3, 4 `+pricedUpdate,
			sql.Named("last", last)).Error; err != nil {
			return err
		}
		if err := tx.Exec(`INSERT INTO balance_spending (org_id, day, amount)
			SELECT org_id, substr(created_at, 1, 10) || ' 00:00:00+00:00', sum(cost) FROM usage_events
			WHERE id > ? AND prepaid AND cost <> 0 GROUP BY 1, 2 `+spendingUpdate, last).Error; err != nil {
			return err
		}
		return tx.Exec(`INSERT INTO metered_models (model) SELECT DISTINCT model FROM usage_events WHERE id > ?
			ON CONFLICT (model) DO NOTHING`, last).Error
	})
}

// appendUsageJSON appends evs to b as a JSON array of arrays, each in
// usageColumns' order. Written by hand, it makes one buffer per batch where
// encoding/json boxed every field of every event.
func appendUsageJSON(b []byte, evs []UsageEvent) []byte {
	num := func(b []byte, n int64) []byte { return strconv.AppendInt(append(b, ','), n, 10) }
	b = append(b, '[')
	for i, e := range evs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b, _ = jsontext.AppendQuote(b, e.RequestID) // invalid UTF-8 becomes U+FFFD, as encoding/json does
		b = num(b, e.OrgID)
		b = num(b, e.TokenID)
		b, _ = jsontext.AppendQuote(append(b, ','), e.Model)
		for _, n := range []int64{int64(e.PromptTokens), int64(e.CompletionTokens), int64(e.CachedTokens),
			int64(e.Cost), e.PriceID, int64(e.Status), int64(e.LatencyMs)} {
			b = num(b, n)
		}
		b = strconv.AppendBool(append(b, ','), e.Cached)
		b = strconv.AppendBool(append(b, ','), e.Fallback)
		if e.UpstreamKeyID != nil {
			b = num(b, *e.UpstreamKeyID)
		} else {
			b = append(b, ",null"...)
		}
		b = append(e.CreatedAt.UTC().AppendFormat(append(b, ',', '"'), sqliteTime), '"')
		b = num(b, int64(e.CacheCreationTokens))
		b = num(b, int64(e.ReasoningTokens))
		b, _ = jsontext.AppendQuote(append(b, ','), e.Dialect)
		b = strconv.AppendBool(append(b, ','), e.Prepaid)
		b = append(b, ']')
	}
	return append(b, ']')
}

// insertUsageFromJSON stores the usageRows of a JSON array, skipping
// request ids stored already.
var insertUsageFromJSON = func() string {
	values := make([]string, len(usageColumns))
	for i := range values {
		values[i] = "value->>" + strconv.Itoa(i)
	}
	return `INSERT INTO usage_events (` + strings.Join(usageColumns, ", ") + `)
		SELECT ` + strings.Join(values, ", ") + ` FROM jsonb_each(?) WHERE true
		ON CONFLICT (request_id) DO NOTHING`
}()

// sqliteTime is how the SQLite driver stores times, so rows written here
// compare and read back like the ones gorm writes.
const sqliteTime = "2006-01-02 15:04:05.999999999-07:00"

// MonthOf is the start of t's calendar month in UTC: a billing period.
func MonthOf(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// Rejections counts requests refused in one hour for one organization,
// token and model, by reason; the recorder adds them up in memory and
// stores the sums, never a row per rejection.
type Rejections struct {
	OrgID, TokenID int64
	Model          string // "" when the request was refused before its model was known
	Hour           time.Time
	Requests       int64 // request bucket empty
	Tokens         int64 // tokens-per-minute bucket empty
	Frozen         int64 // token frozen
	Budget         int64 // budget or included credit exhausted
	Queue          int64 // queued jobs or pending batch lines at the tier's limit
}

// Total is every rejection counted.
func (r Rejections) Total() int64 { return r.Requests + r.Tokens + r.Frozen + r.Budget + r.Queue }

// AddRejections adds rejection counts to the hourly and monthly rollups.
func (s *Store) AddRejections(ctx context.Context, rs []Rejections) error {
	if len(rs) == 0 {
		return nil
	}
	return dbErr(s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		for _, r := range rs {
			hour := r.Hour.UTC().Truncate(time.Hour)
			err := tx.Exec(`INSERT INTO usage_hourly (org_id, hour, token_id, model, price_id,
					rejected_requests, rejected_tokens, rejected_frozen, rejected_budget, rejected_queue)
				VALUES (?, ?, ?, ?, 0, ?, ?, ?, ?, ?)
				ON CONFLICT (org_id, hour, token_id, model, price_id) DO UPDATE SET
					rejected_requests = usage_hourly.rejected_requests + EXCLUDED.rejected_requests,
					rejected_tokens = usage_hourly.rejected_tokens + EXCLUDED.rejected_tokens,
					rejected_frozen = usage_hourly.rejected_frozen + EXCLUDED.rejected_frozen,
					rejected_budget = usage_hourly.rejected_budget + EXCLUDED.rejected_budget,
					rejected_queue = usage_hourly.rejected_queue + EXCLUDED.rejected_queue`,
				r.OrgID, hour, r.TokenID, r.Model, r.Requests, r.Tokens, r.Frozen, r.Budget, r.Queue).Error
			if err != nil {
				return err
			}
			err = tx.Exec(`INSERT INTO usage_monthly (period, org_id, rejected) VALUES (?, ?, ?)
				ON CONFLICT (period, org_id) DO UPDATE SET rejected = usage_monthly.rejected + EXCLUDED.rejected`,
				MonthOf(hour), r.OrgID, r.Total()).Error
			if err != nil {
				return err
			}
		}
		return nil
	}), "rejection counts")
}

// UsageTotals are an organization's counts over a period.
type UsageTotals struct {
	Requests         int64
	PromptTokens     int64
	CompletionTokens int64
}

// TotalTokens is prompt plus completion tokens.
func (u UsageTotals) TotalTokens() int64 { return u.PromptTokens + u.CompletionTokens }

// UsageSince sums orgID's usage from the hour of since on, from the hourly
// rollups.
func (s *Store) UsageSince(ctx context.Context, orgID int64, since time.Time) (UsageTotals, error) {
	var u UsageTotals
	err := s.db.WithContext(ctx).Raw(`SELECT COALESCE(SUM(requests), 0) AS requests,
			COALESCE(SUM(prompt_tokens), 0) AS prompt_tokens, COALESCE(SUM(completion_tokens), 0) AS completion_tokens
		FROM usage_hourly WHERE org_id = ? AND hour >= ?`, orgID, since.UTC().Truncate(time.Hour)).Scan(&u).Error
	return u, dbErr(err, "usage")
}

// UsageBucket is usage summed over one UTC hour, for one group (a model, a
// token id, or everything).
type UsageBucket struct {
	Hour             time.Time
	Group            string // the model or the token id; "" when not grouped
	Requests         int64
	Rejected         int64
	PromptTokens     int64
	CompletionTokens int64
	CachedTokens     int64
	CacheHits        int64
	Cost             money.Amount
}

// Usage groupings of UsageHours.
const (
	GroupNone  = ""
	GroupModel = "model"
	GroupToken = "token"
)

// UsageHours reads orgID's hourly rollups in [from, to), summed per hour
// and group, ordered by hour. It reads rollups, never raw events, so it
// stays fast however many events there are.
func (s *Store) UsageHours(ctx context.Context, orgID int64, from, to time.Time, groupBy string) ([]UsageBucket, error) {
	group, groupBys := "''", "hour"
	switch groupBy {
	case GroupModel:
		group = "model"
	case GroupToken:
		group = "CAST(token_id AS TEXT)"
	}
	if group != "''" {
		groupBys += ", " + group
	}
	var out []UsageBucket
	err := s.db.WithContext(ctx).Raw(`SELECT hour, `+group+` AS "group", SUM(requests) AS requests,
			SUM(rejected_requests + rejected_tokens + rejected_frozen + rejected_budget + rejected_queue) AS rejected,
			SUM(prompt_tokens) AS prompt_tokens, SUM(completion_tokens) AS completion_tokens,
			SUM(cached_tokens) AS cached_tokens, SUM(cache_hits) AS cache_hits, SUM(cost) AS cost
		FROM usage_hourly WHERE org_id = ? AND hour >= ? AND hour < ?
		GROUP BY `+groupBys+` ORDER BY `+groupBys,
		orgID, from.UTC(), to.UTC()).Scan(&out).Error
	for i := range out {
		out[i].Hour = out[i].Hour.UTC()
	}
	return out, dbErr(err, "usage")
}

// MonthlyUsage is one organization's month, from the monthly rollup.
type MonthlyUsage struct {
	Requests int64
	Rejected int64
	Tokens   int64
	Cost     money.Amount
}

// UsageInMonth reads orgID's totals for the month starting at period.
func (s *Store) UsageInMonth(ctx context.Context, orgID int64, period time.Time) (MonthlyUsage, error) {
	var m MonthlyUsage
	err := s.db.WithContext(ctx).Raw(`SELECT requests, rejected, tokens, cost FROM usage_monthly
		WHERE period = ? AND org_id = ?`, MonthOf(period), orgID).Scan(&m).Error
	return m, dbErr(err, "usage")
}

// PricedUsage is a month's usage of one model at one price version
// (PriceID 0: not billed).
type PricedUsage struct {
	Model            string
	PriceID          int64
	Requests         int64
	PromptTokens     int64
	CompletionTokens int64
	CachedTokens     int64
	Cost             money.Amount
}

// UsageByPrice is orgID's usage in the month starting at period, per model
// and price version: an invoice's usage lines.
func (s *Store) UsageByPrice(ctx context.Context, orgID int64, period time.Time) ([]PricedUsage, error) {
	var out []PricedUsage
	err := s.db.WithContext(ctx).Raw(`SELECT model, price_id, requests, prompt_tokens, completion_tokens, cached_tokens, cost
		FROM usage_monthly_models WHERE org_id = ? AND period = ? ORDER BY model, price_id`, orgID, MonthOf(period)).Scan(&out).Error
	return out, dbErr(err, "usage by price")
}

// MeteredModels lists every model that has ever been metered.
func (s *Store) MeteredModels(ctx context.Context) ([]string, error) {
	var out []string
	err := s.db.WithContext(ctx).Raw(`SELECT model FROM metered_models ORDER BY model`).Scan(&out).Error
	return out, dbErr(err, "metered models")
}
