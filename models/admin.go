package models

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/money"
)

// The admin console reads across tenants on purpose: these queries serve
// only admins, and each row still carries the organization it belongs to.

// Columns the organization overview sorts by.
const (
	SortName          = "name"
	SortTier          = "tier"
	SortSpend         = "spend"
	SortRequests      = "requests"
	SortRejectionRate = "rejection_rate"
	SortFreezes       = "freezes"
	SortCreated       = "created"
)

// OverviewSorts lists the overview's sort columns in the order the page
// shows them, a fresh slice each call.
func OverviewSorts() []string {
	return []string{SortName, SortTier, SortSpend, SortRequests, SortRejectionRate, SortFreezes, SortCreated}
}

// overviewKey is how the overview ranks organizations by a column: the
// key's SQL and the one join it needs, if any. Ranking joins nothing else,
// so a sort by name or creation time reads its page straight from an
// index, and the other sorts sort narrow rows; the page's 50 rows are
// joined to everything they show afterwards.
type overviewKey struct{ expr, join string }

var overviewOrder = map[string]overviewKey{
	SortName:     {"lower(o.name)", ""},
	SortTier:     {"t.name", " JOIN tiers t ON t.id = o.tier_id"},
	SortSpend:    {"COALESCE(m.cost, 0)", overviewMonth},
	SortRequests: {"COALESCE(m.requests, 0)", overviewMonth},
	// rejected / (requests + rejected); an organization with neither is at 0.
	SortRejectionRate: {"COALESCE(CAST(m.rejected AS DOUBLE PRECISION) / NULLIF(m.requests + m.rejected, 0), 0)", overviewMonth},
	SortFreezes:       {"COALESCE(f.n, 0)", " LEFT JOIN active_freezes f ON f.org_id = o.id"},
	SortCreated:       {"o.created_at", ""},
}

// overviewMonth joins an organization's rollup row of the month (its
// placeholder is the period).
const overviewMonth = " LEFT JOIN usage_monthly m ON m.period = ? AND m.org_id = o.id"

// ValidOverviewSort says whether the overview can sort by key.
func ValidOverviewSort(key string) bool {
	_, ok := overviewOrder[key]
	return ok
}

// OverviewPageSize is how many organizations a page of the overview shows.
const OverviewPageSize = 50

// MaxPage is the highest page number a list takes (?page=): beyond any
// list's length, and low enough that page × size never overflows an offset.
const MaxPage = 100_000

// ParsePage reads a ?page= value: 1 when empty; ok is false unless it is a
// whole number from 1 to MaxPage.
func ParsePage(s string) (page int, ok bool) {
	if s == "" {
		return 1, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxPage {
		return 0, false
	}
	return n, true
}

// MaxOverviewSearch bounds the overview's search text, in bytes.
const MaxOverviewSearch = 200

// OverviewQuery selects and orders a page of the organization overview.
type OverviewQuery struct {
	// Search matches organizations whose name, or an email of one of
	// their users, contains it, ignoring case. Empty matches all.
	Search   string
	Sort     string // one of OverviewSorts; empty sorts by name
	Desc     bool
	Page     int // from 1; below 1 is the first
	PageSize int // 0 is OverviewPageSize
	// Period is the month whose usage is shown (any time in it).
	Period time.Time
	// Now decides which freezes are active.
	Now time.Time
}

// OrgOverview is one organization as the admin overview lists it: its
// usage this month from the monthly rollup, and its freezes in force.
type OrgOverview struct {
	ID            int64
	Name          string
	OwnerEmail    string // its owner's (or, without one, its first user's) email; "" when it has no users
	Tier          string
	Spend         money.Amount // exact cost of this month's usage
	Requests      int64        // admitted this month
	Rejected      int64        // refused this month (429s of any reason)
	ActiveFreezes int64
	CreatedAt     time.Time
	DeletedAt     *time.Time // when an admin deleted it; nil while it is live
}

// RejectionRate is the share of this month's requests that were refused:
// rejected / (requests + rejected), 0 without any.
func (o OrgOverview) RejectionRate() float64 {
	if o.Requests+o.Rejected == 0 {
		return 0
	}
	return float64(o.Rejected) / float64(o.Requests+o.Rejected)
}

// OverviewPage is one page of the overview and where it is in the whole.
type OverviewPage struct {
	Rows     []OrgOverview
	Total    int64 // organizations matching the search
	Page     int
	Pages    int // at least 1
	PageSize int
}

// overviewRow is a row as the overview query returns it.
type overviewRow struct {
	OrgOverview
	Total int64
}

// OrganizationOverview reads one page of every organization with this
// month's spend, requests and rejections and its active freezes, searched
// and sorted as q says, and how many match. It is one statement: the
// organizations (those matching the search) ranked by the sort column,
// joined for that only to their monthly rollup row (by its primary key),
// to their count of freezes in force or to their tier, and cut to the page
// by LIMIT and OFFSET; only the page's rows are then joined to the rest and
// look up their owner. Sorted by name or creation time, the page is read
// in index order. It reads rollups, never raw
// events, so it stays fast at any volume of usage.
func (s *Store) OrganizationOverview(ctx context.Context, q OverviewQuery) (OverviewPage, error) {
	if q.Sort == "" {
		q.Sort = SortName
	}
	key, ok := overviewOrder[q.Sort]
	if !ok {
		key, q.Sort = overviewOrder[SortName], SortName
	}
	if q.PageSize <= 0 {
		q.PageSize = OverviewPageSize
	}
	q.Page = min(max(q.Page, 1), MaxPage)
	dir := "ASC"
	if q.Desc {
		dir = "DESC"
	}
	period := MonthOf(q.Period)
	// Arguments follow their placeholders in the order the text has them.
	var b strings.Builder
	var all []any
	add := func(sql string, args ...any) { b.WriteString(sql); all = append(all, args...) }

	// A search is run once, as the matching ids the ranking and the count
	// both read.
	where, searchArgs := overviewSearch(q.Search)
	total := "(SELECT COUNT(*) FROM organizations)"
	add("WITH ")
	if where != "" {
		add("matching AS (SELECT o.id FROM organizations o"+where+"), ", searchArgs...)
		total = "(SELECT COUNT(*) FROM matching)"
	}
	add(`active_freezes AS (
			SELECT org_id, COUNT(*) AS n FROM freezes WHERE lifted_at IS NULL AND frozen_until > ? GROUP BY org_id
		), ranked AS (
			SELECT o.id AS ov_id, `+key.expr+` AS ov_key FROM organizations o`, q.Now.UTC())
	if where != "" {
		add(" JOIN matching s ON s.id = o.id")
	}
	if key.join == overviewMonth {
		add(key.join, period)
	} else {
		add(key.join)
	}
	// The ranking's columns have names of their own, so ordering by them is
	// never ambiguous with a table's column.
	orderBy := " ORDER BY ov_key " + dir + ", ov_id " + dir
	add(orderBy+" LIMIT ? OFFSET ?", q.PageSize, (q.Page-1)*q.PageSize)
	add(`
		)
		SELECT o.id, o.name, t.name AS tier, o.created_at, o.deleted_at, COALESCE(m.cost, 0) AS spend, COALESCE(m.requests, 0) AS requests,
			COALESCE(m.rejected, 0) AS rejected, COALESCE(f.n, 0) AS active_freezes, `+total+` AS total,
			COALESCE((SELECT u.email FROM memberships mb JOIN users u ON u.id = mb.user_id WHERE mb.org_id = o.id
				ORDER BY CASE mb.role WHEN 'owner' THEN 0 ELSE 1 END, mb.created_at, u.id LIMIT 1), '') AS owner_email
		FROM ranked r
		JOIN organizations o ON o.id = r.ov_id
		JOIN tiers t ON t.id = o.tier_id
		LEFT JOIN usage_monthly m ON m.period = ? AND m.org_id = o.id
		LEFT JOIN active_freezes f ON f.org_id = o.id`+orderBy, period)
	query := b.String()
	var rows []overviewRow
	if err := s.db.WithContext(ctx).Raw(query, all...).Scan(&rows).Error; err != nil {
		return OverviewPage{}, dbErr(err, "organization overview")
	}
	out := OverviewPage{Page: q.Page, PageSize: q.PageSize, Rows: make([]OrgOverview, len(rows))}
	for i, r := range rows {
		r.CreatedAt, r.DeletedAt = r.CreatedAt.UTC(), utc(r.DeletedAt)
		out.Rows[i], out.Total = r.OrgOverview, r.Total
	}
	if len(rows) == 0 && q.Page > 1 { // past the end: no row carried the count
		err := s.db.WithContext(ctx).Raw(`SELECT COUNT(*) FROM organizations o`+where, searchArgs...).Scan(&out.Total).Error
		if err != nil {
			return OverviewPage{}, dbErr(err, "organization overview")
		}
	}
	out.Pages = max(1, int((out.Total+int64(q.PageSize)-1)/int64(q.PageSize)))
	return out, nil
}

// overviewSearch is the overview's WHERE clause for a search, and its
// arguments.
func overviewSearch(search string) (string, []any) {
	search = strings.TrimSpace(search)
	if search == "" {
		return "", nil
	}
	pattern := "%" + escapeLike(strings.ToLower(search)) + "%"
	// IN, not a correlated EXISTS: Postgres estimates the EXISTS per row,
	// and an estimate that high switches on its JIT compiler, which costs
	// more than the whole query.
	return ` WHERE (lower(o.name) LIKE ? ESCAPE '\'
			OR o.id IN (SELECT mb.org_id FROM memberships mb JOIN users u ON u.id = mb.user_id WHERE lower(u.email) LIKE ? ESCAPE '\'))`,
		[]any{pattern, pattern}
}

// escapeLike makes s match itself in a LIKE pattern escaped by '\'.
func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// OrganizationUsers lists an organization's members, owners first, for the
// admin's organization page.
func (s *Store) OrganizationUsers(ctx context.Context, orgID int64) ([]OrgMember, error) {
	return s.Members(ctx, orgID)
}

// PendingUpgrade is an upgrade request waiting for an admin, with who asked.
type PendingUpgrade struct {
	ID             int64
	OrgID          int64
	OrgName        string
	RequesterEmail string
	FromTier       string
	ToTier         string
	Note           string
	CreatedAt      time.Time
}

// PendingUpgrades lists the oldest pending upgrade requests of every
// organization, at most limit, and how many are pending in all.
func (s *Store) PendingUpgrades(ctx context.Context, limit int) ([]PendingUpgrade, int64, error) {
	var out []PendingUpgrade
	err := s.db.WithContext(ctx).Raw(`SELECT r.id, r.org_id, o.name AS org_name, COALESCE(u.email, '') AS requester_email,
			r.from_tier, r.to_tier, r.note, r.created_at
		FROM upgrade_requests r
		JOIN organizations o ON o.id = r.org_id
		LEFT JOIN users u ON u.id = r.user_id
		WHERE r.status = ? ORDER BY r.created_at, r.id LIMIT ?`, UpgradePending, limit).Scan(&out).Error
	if err != nil {
		return nil, 0, dbErr(err, "upgrade requests")
	}
	total := int64(len(out))
	if len(out) == limit {
		if err := s.db.WithContext(ctx).Model(&UpgradeRequest{}).Where("status = ?", UpgradePending).Count(&total).Error; err != nil {
			return nil, 0, dbErr(err, "upgrade requests")
		}
	}
	for i := range out {
		out[i].CreatedAt = out[i].CreatedAt.UTC()
	}
	return out, total, nil
}

// TierUsage counts the organizations on each tier, by tier id: a tier in
// use cannot be deleted.
func (s *Store) TierUsage(ctx context.Context) (map[int64]int64, error) {
	var rows []struct {
		TierID int64
		N      int64
	}
	err := s.db.WithContext(ctx).Raw(`SELECT tier_id, COUNT(*) AS n FROM organizations GROUP BY tier_id`).Scan(&rows).Error
	out := make(map[int64]int64, len(rows))
	for _, r := range rows {
		out[r.TierID] = r.N
	}
	return out, dbErr(err, "tier usage")
}

// OrganizationNames returns the names of the organizations with these ids,
// for admin lists that show whose a row is; unknown ids are left out.
func (s *Store) OrganizationNames(ctx context.Context, ids []int64) (map[int64]string, error) {
	out := make(map[int64]string, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	var rows []struct {
		ID   int64
		Name string
	}
	err := s.db.WithContext(ctx).Raw(`SELECT id, name FROM organizations WHERE id IN ?`, ids).Scan(&rows).Error
	for _, r := range rows {
		out[r.ID] = r.Name
	}
	return out, dbErr(err, "organizations")
}

// TokenPrefixes returns the display prefixes of the tokens with these ids,
// for lists of freezes; unknown ids are left out. orgID scopes it to one
// organization's tokens; 0 is every organization's, for admins.
func (s *Store) TokenPrefixes(ctx context.Context, orgID int64, ids []int64) (map[int64]string, error) {
	out := make(map[int64]string, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	var rows []struct {
		ID     int64
		Prefix string
	}
	q := s.db.WithContext(ctx).Table("api_tokens").Select("id, prefix").Where("id IN ?", ids)
	if orgID != 0 {
		q = q.Where("org_id = ?", orgID)
	}
	err := q.Scan(&rows).Error
	for _, r := range rows {
		out[r.ID] = r.Prefix
	}
	return out, dbErr(err, "tokens")
}
