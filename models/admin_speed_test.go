package models_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// speedOrgs is how many organizations the speed test seeds: an admin's
// pages must stay fast at 10,000 organizations.
const speedOrgs = 10_000

// speedBudget is the slowest median a query may have: 50 ms for a
// whole page. Medians measured are far below it (see the log); the
// bound is loose so a busy test machine does not fail the build.
const speedBudget = 50 * time.Millisecond

// TestAdminQueriesAt10kOrganizations seeds a Postgres database with 10,000
// organizations (owners, tokens, three months of monthly rollups, 50,000
// freezes of which some hold, 200,000 audit entries) and times every sort
// of the overview, a search and the last page, and the audit log's
// filters. It logs each query's median and worst time and the plans of the
// slowest, and fails if a median is over speedBudget (but for -race
// builds, which only log). It runs only with TEST_DATABASE_URL and without
// -short.
func TestAdminQueriesAt10kOrganizations(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds 10,000 organizations")
	}
	db := testdb.Postgres(t)
	now := time.Now().UTC()
	start := time.Now()
	seed := []string{
		`INSERT INTO organizations (name, tier_id, created_at)
			SELECT 'Org ' || g || ' ' || substr(md5(g::text), 1, 8),
				(SELECT id FROM tiers WHERE name = CASE WHEN g % 10 = 0 THEN 'premium' ELSE 'free' END),
				now() - g * interval '7 minutes'
			FROM generate_series(1, 10000) g`,
		`INSERT INTO users (org_id, email, password_hash, role, created_at)
			SELECT id, 'owner' || id || '@customer' || (id % 97) || '.example', 'h', 'member', created_at FROM organizations`,
		`INSERT INTO users (org_id, email, password_hash, role, created_at)
			SELECT id, 'dev' || id || '@customer' || (id % 97) || '.example', 'h', 'member', created_at FROM organizations WHERE id % 3 = 0`,
		`INSERT INTO memberships (org_id, user_id, role, created_at)
			SELECT org_id, id, CASE WHEN email LIKE 'owner%' THEN 'owner' ELSE 'member' END, created_at FROM users`,
		`INSERT INTO api_tokens (org_id, user_id, name, prefix, hash, created_at)
			SELECT org_id, id, 't', 'sk_sluice_abcdef', md5('tok' || id), created_at FROM users`,
		`INSERT INTO usage_monthly (period, org_id, requests, rejected, tokens, cost)
			SELECT date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - m * interval '1 month', id,
				(random() * 100000)::bigint, (random() * 3000)::bigint, (random() * 1e7)::bigint, (random() * 5e13)::bigint
			FROM organizations, generate_series(0, 2) m WHERE id % 5 <> 0`,
		`INSERT INTO freezes (token_id, org_id, reason, window_count, frozen_from, frozen_until, lifted_at)
			SELECT t.id, t.org_id, 'r', 20, now() - g * interval '1 day',
				CASE WHEN g = 1 AND t.org_id % 40 = 0 THEN now() + interval '1 hour' ELSE now() - g * interval '1 day' + interval '10 minutes' END,
				CASE WHEN g = 2 AND t.org_id % 7 = 0 THEN now() - interval '1 day' END
			FROM api_tokens t, generate_series(1, 4) g`,
		`INSERT INTO audit_log (org_id, actor_user_id, action, target, detail, created_at)
			SELECT o.id, NULL, (ARRAY['token.create', 'token.freeze', 'organization.budget', 'tier.update', 'price.set', 'upgrade.request'])[1 + g % 6],
				g::text, 'seeded', now() - g * interval '13 seconds' - o.id * interval '1 millisecond'
			FROM organizations o, generate_series(1, 20) g`,
		`ANALYZE`,
	}
	for _, q := range seed {
		if err := db.Gorm.Exec(q).Error; err != nil {
			t.Fatalf("seed: %v\n%s", err, q)
		}
	}
	t.Logf("seeded %d organizations in %v", speedOrgs, time.Since(start).Round(time.Millisecond))

	// The store's statements are captured, to explain the slowest.
	capture := &sqlCapture{}
	db.Gorm = db.Gorm.Session(&gorm.Session{Logger: capture})
	s := models.NewStore(db)
	ctx := context.Background()

	type result struct {
		name          string
		median, worst time.Duration
		sql           string
	}
	var results []result
	measure := func(name string, run func() error) {
		t.Helper()
		var times []time.Duration
		for i := range 21 {
			capture.reset()
			begin := time.Now()
			if err := run(); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if i > 0 { // the first warms the caches
				times = append(times, time.Since(begin))
			}
		}
		slices.Sort(times)
		results = append(results, result{name, times[len(times)/2], times[len(times)-1], capture.last()})
	}
	overview := func(q models.OverviewQuery) func() error {
		q.Now, q.Period = now, now
		return func() error {
			page, err := s.OrganizationOverview(ctx, q)
			if err == nil && page.Total == 0 {
				err = fmt.Errorf("nothing found")
			}
			return err
		}
	}
	for _, sort := range models.OverviewSorts() {
		for _, desc := range []bool{false, true} {
			measure(fmt.Sprintf("overview sort=%s desc=%v", sort, desc), overview(models.OverviewQuery{Sort: sort, Desc: desc}))
		}
	}
	measure("overview last page (200)", overview(models.OverviewQuery{Sort: models.SortSpend, Desc: true, Page: 200}))
	measure("overview search name", overview(models.OverviewQuery{Search: "org 12", Sort: models.SortSpend, Desc: true}))
	measure("overview search email", overview(models.OverviewQuery{Search: "@customer42.", Sort: models.SortName}))
	audit := func(q models.AuditQuery) func() error {
		return func() error { _, _, err := s.AuditEntries(ctx, q); return err }
	}
	measure("audit newest", audit(models.AuditQuery{}))
	measure("audit page 100", audit(models.AuditQuery{Page: 100}))
	measure("audit organization", audit(models.AuditQuery{OrgID: 4242}))
	measure("audit action prefix tier.", audit(models.AuditQuery{ActionPrefix: "tier."}))
	measure("audit action + range", audit(models.AuditQuery{ActionPrefix: "price.", From: now.Add(-48 * time.Hour), To: now.Add(-24 * time.Hour)}))
	measure("audit organization + action", audit(models.AuditQuery{OrgID: 4242, ActionPrefix: "token."}))

	var b strings.Builder
	slowest := results[0]
	for _, r := range results {
		fmt.Fprintf(&b, "  %-40s median %7v  worst %7v\n", r.name, r.median.Round(10*time.Microsecond), r.worst.Round(10*time.Microsecond))
		if r.median > speedBudget && !raceEnabled {
			t.Errorf("%s: median %v, over %v", r.name, r.median, speedBudget)
		}
		if r.median > slowest.median {
			slowest = r
		}
	}
	t.Logf("query times at %d organizations (20 runs each):\n%s", speedOrgs, b.String())
	for _, r := range []result{slowest, results[0]} {
		var plan []string
		if err := db.Gorm.Raw("EXPLAIN (ANALYZE, BUFFERS) " + r.sql).Scan(&plan).Error; err != nil {
			t.Fatalf("explain %s: %v", r.name, err)
		}
		t.Logf("plan of %s:\n%s", r.name, strings.Join(plan, "\n"))
	}
}

// sqlCapture is a gorm logger that keeps the last statement run, with its
// arguments in place, for EXPLAIN.
type sqlCapture struct {
	mu  sync.Mutex
	sql string
}

func (c *sqlCapture) reset() { c.mu.Lock(); c.sql = ""; c.mu.Unlock() }

func (c *sqlCapture) last() string { c.mu.Lock(); defer c.mu.Unlock(); return c.sql }

func (c *sqlCapture) LogMode(logger.LogLevel) logger.Interface { return c }
func (c *sqlCapture) Info(context.Context, string, ...any)     {}
func (c *sqlCapture) Warn(context.Context, string, ...any)     {}
func (c *sqlCapture) Error(context.Context, string, ...any)    {}
func (c *sqlCapture) Trace(_ context.Context, _ time.Time, fc func() (string, int64), _ error) {
	sql, _ := fc()
	if strings.HasPrefix(strings.TrimSpace(sql), "SELECT COUNT(*) FROM upgrade") {
		return
	}
	c.mu.Lock()
	if c.sql == "" || len(sql) > len(c.sql) { // the main statement, not a follow-up count
		c.sql = sql
	}
	c.mu.Unlock()
}
