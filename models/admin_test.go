package models_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// overviewFixture is four organizations with known usage this month and
// freezes, plus usage in another month and freezes that no longer hold,
// which must not count.
type overviewFixture struct {
	now                                time.Time
	acme, globex, initech, umbrella    models.Organization
	acmeOwner, globexOwner, initechOwn models.Member
}

func newOverviewFixture(t *testing.T, db *models.DB) overviewFixture {
	t.Helper()
	s := models.NewStore(db)
	f := overviewFixture{now: time.Date(2027, time.March, 15, 12, 0, 0, 0, time.UTC)}
	mk := func(name, tier, email string, created time.Time) (models.Organization, models.Member) {
		o, u, err := s.CreateOrganizationWithOwner(ctx, name, tier, email, "h", models.RoleOwner)
		if err != nil {
			t.Fatal(err)
		}
		// Creation times are set apart, so sorting by them is meaningful.
		if err := db.Gorm.Exec("UPDATE organizations SET created_at = ? WHERE id = ?", created, o.ID).Error; err != nil {
			t.Fatal(err)
		}
		o.CreatedAt = created
		return o, u
	}
	day := func(d int) time.Time { return time.Date(2026, time.January, d, 0, 0, 0, 0, time.UTC) }
	f.acme, f.acmeOwner = mk("Acme", "free", "wile@acme.example", day(3))
	f.globex, f.globexOwner = mk("globex", "premium", "hank@globex.example", day(1))
	f.initech, f.initechOwn = mk("Initech", "free", "bill@initech.example", day(4))
	f.umbrella, _ = mk("Umbrella 100%_off", "premium", "alice@umbrella.example", day(2))
	// A member of Initech whose email search should find too.
	testdb.AddMember(t, db, f.initech.ID, "milton@stapler.example", "h", models.RoleMember)

	token := func(o models.Organization, u models.Member) models.APIToken {
		tok, _, err := s.CreateAPIToken(ctx, o.ID, u.ID, "t", nil)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	acmeTok, globexTok, initechTok := token(f.acme, f.acmeOwner), token(f.globex, f.globexOwner), token(f.initech, f.initechOwn)
	n := 0
	usage := func(tok models.APIToken, at time.Time, requests int, cost money.Amount) {
		var evs []models.UsageEvent
		for range requests {
			n++
			evs = append(evs, models.UsageEvent{RequestID: fmt.Sprintf("r%d", n), OrgID: tok.OrgID, TokenID: tok.ID, Model: "m",
				PromptTokens: 1, CompletionTokens: 1, Cost: cost, Status: 200, CreatedAt: at})
		}
		if err := s.InsertUsageEvents(ctx, evs); err != nil {
			t.Fatal(err)
		}
	}
	reject := func(tok models.APIToken, at time.Time, n int64) {
		if err := s.AddRejections(ctx, []models.Rejections{{OrgID: tok.OrgID, TokenID: tok.ID, Model: "m", Hour: at, Requests: n}}); err != nil {
			t.Fatal(err)
		}
	}
	thisMonth, lastMonth := f.now.Add(-24*time.Hour), f.now.AddDate(0, -1, 0)
	// Acme: 4 requests costing 0.000001 each, 4 rejected: 50%.
	usage(acmeTok, thisMonth, 4, money.Dollar/1_000_000)
	reject(acmeTok, thisMonth, 4)
	// Globex: 2 requests costing $1.50 in all, 1 rejected: 33%; and a lot last month.
	usage(globexTok, thisMonth, 2, 75*money.Cent)
	reject(globexTok, thisMonth, 1)
	usage(globexTok, lastMonth, 9, 10*money.Dollar)
	reject(globexTok, lastMonth, 50)
	// Initech: 1 request, free; Umbrella: nothing this month.
	usage(initechTok, thisMonth, 1, 0)

	freeze := func(tok models.APIToken, until time.Time, lift bool) {
		fr, err := s.CreateFreeze(ctx, models.Freeze{TokenID: tok.ID, OrgID: tok.OrgID, Reason: "r", WindowCount: 20,
			FrozenFrom: f.now.Add(-time.Hour), FrozenUntil: until})
		if err != nil {
			t.Fatal(err)
		}
		if lift {
			if _, err := s.LiftFreeze(ctx, f.globexOwner.User, fr.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	freeze(initechTok, f.now.Add(time.Hour), false)   // active
	freeze(initechTok, f.now.Add(2*time.Hour), false) // active
	freeze(acmeTok, f.now.Add(time.Hour), false)      // active
	freeze(acmeTok, f.now.Add(-time.Minute), false)   // expired
	freeze(globexTok, f.now.Add(time.Hour), true)     // lifted
	return f
}

func (f overviewFixture) query(q models.OverviewQuery) models.OverviewQuery {
	q.Now, q.Period = f.now, f.now
	return q
}

func names(rows []models.OrgOverview) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Name
	}
	return out
}

// The overview shows each organization's own month and freezes in force:
// another organization's usage, another month's and freezes lifted or
// expired do not count.
func TestOverviewCountsEachOrganizationsOwnMonth(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		s := models.NewStore(db)
		f := newOverviewFixture(t, db)
		page, err := s.OrganizationOverview(ctx, f.query(models.OverviewQuery{}))
		if err != nil {
			t.Fatal(err)
		}
		if page.Total != 4 || page.Pages != 1 || page.Page != 1 || page.PageSize != models.OverviewPageSize {
			t.Fatalf("page %+v", page)
		}
		got := map[string]models.OrgOverview{}
		for _, r := range page.Rows {
			got[r.Name] = r
		}
		want := map[string]models.OrgOverview{
			"Acme": {ID: f.acme.ID, Name: "Acme", OwnerEmail: "wile@acme.example", Tier: "free", Spend: 4 * money.Dollar / 1_000_000,
				Requests: 4, Rejected: 4, ActiveFreezes: 1, CreatedAt: f.acme.CreatedAt},
			"globex": {ID: f.globex.ID, Name: "globex", OwnerEmail: "hank@globex.example", Tier: "premium", Spend: 150 * money.Cent,
				Requests: 2, Rejected: 1, CreatedAt: f.globex.CreatedAt},
			"Initech": {ID: f.initech.ID, Name: "Initech", OwnerEmail: "bill@initech.example", Tier: "free", Requests: 1,
				ActiveFreezes: 2, CreatedAt: f.initech.CreatedAt},
			"Umbrella 100%_off": {ID: f.umbrella.ID, Name: "Umbrella 100%_off", OwnerEmail: "alice@umbrella.example", Tier: "premium",
				CreatedAt: f.umbrella.CreatedAt},
		}
		for name, w := range want {
			if g := got[name]; g != w {
				t.Errorf("%s:\n got %+v\nwant %+v", name, g, w)
			}
		}
		if r := got["Acme"].RejectionRate(); r != 0.5 {
			t.Errorf("Acme's rejection rate = %v, want 0.5", r)
		}
		if r := got["Umbrella 100%_off"].RejectionRate(); r != 0 {
			t.Errorf("an idle organization's rejection rate = %v, want 0", r)
		}

		// Last month is its own period.
		last, err := s.OrganizationOverview(ctx, models.OverviewQuery{Search: "globex", Now: f.now, Period: f.now.AddDate(0, -1, 0)})
		if err != nil || len(last.Rows) != 1 || last.Rows[0].Requests != 9 || last.Rows[0].Rejected != 50 || last.Rows[0].Spend != 90*money.Dollar {
			t.Fatalf("last month: %+v %v", last, err)
		}
	})
}

func TestOverviewSortsByEveryColumn(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		s := models.NewStore(db)
		f := newOverviewFixture(t, db)
		// Ties (equal tiers, no freezes) fall back to the id in the same
		// direction, so every order is total and pages never overlap.
		tests := map[string][]string{
			models.SortName:          {"Acme", "globex", "Initech", "Umbrella 100%_off"}, // ignoring case
			models.SortTier:          {"Acme", "Initech", "globex", "Umbrella 100%_off"},
			models.SortSpend:         {"Initech", "Umbrella 100%_off", "Acme", "globex"},
			models.SortRequests:      {"Umbrella 100%_off", "Initech", "globex", "Acme"},
			models.SortRejectionRate: {"Initech", "Umbrella 100%_off", "globex", "Acme"},
			models.SortFreezes:       {"globex", "Umbrella 100%_off", "Acme", "Initech"},
			models.SortCreated:       {"globex", "Umbrella 100%_off", "Acme", "Initech"},
		}
		if len(tests) != len(models.OverviewSorts()) {
			t.Fatalf("%d sorts tested, %d exist", len(tests), len(models.OverviewSorts()))
		}
		for _, sort := range models.OverviewSorts() {
			want := tests[sort]
			for _, desc := range []bool{false, true} {
				page, err := s.OrganizationOverview(ctx, f.query(models.OverviewQuery{Sort: sort, Desc: desc}))
				if err != nil {
					t.Fatal(err)
				}
				w := slices.Clone(want)
				if desc {
					slices.Reverse(w)
				}
				if got := names(page.Rows); !slices.Equal(got, w) {
					t.Errorf("sort %s desc=%v: %v, want %v", sort, desc, got, w)
				}
			}
		}
		// An unknown sort is by name.
		page, err := s.OrganizationOverview(ctx, f.query(models.OverviewQuery{Sort: "name; DROP TABLE organizations"}))
		if err != nil || names(page.Rows)[0] != "Acme" {
			t.Fatalf("unknown sort: %v %v", names(page.Rows), err)
		}
		if !models.ValidOverviewSort(models.SortSpend) || models.ValidOverviewSort("password_hash") {
			t.Error("ValidOverviewSort")
		}
	})
}

func TestOverviewSearchesNamesAndEmails(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		s := models.NewStore(db)
		f := newOverviewFixture(t, db)
		tests := []struct {
			search string
			want   []string
		}{
			{"", []string{"Acme", "globex", "Initech", "Umbrella 100%_off"}},
			{"ACME", []string{"Acme"}},              // names ignore case
			{"  GLOB  ", []string{"globex"}},        // and surrounding spaces
			{"HANK@GLOBEX", []string{"globex"}},     // the owner's email
			{"stapler", []string{"Initech"}},        // any user's email
			{"100%", []string{"Umbrella 100%_off"}}, // % is a character, not a wildcard
			{"%", []string{"Umbrella 100%_off"}},    //
			{"_", []string{"Umbrella 100%_off"}},    // so is _
			{"example", []string{"Acme", "globex", "Initech", "Umbrella 100%_off"}},
			{"nobody", nil},
			{`\`, nil},
		}
		for _, tt := range tests {
			page, err := s.OrganizationOverview(ctx, f.query(models.OverviewQuery{Search: tt.search}))
			if err != nil {
				t.Fatal(err)
			}
			if got := names(page.Rows); !slices.Equal(got, tt.want) || page.Total != int64(len(tt.want)) || page.Pages != 1 {
				t.Errorf("search %q: %v (total %d, pages %d), want %v", tt.search, got, page.Total, page.Pages, tt.want)
			}
		}
	})
}

func TestOverviewPages(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		s := models.NewStore(db)
		f := newOverviewFixture(t, db) // 4 organizations, and the admins' is not there: the store has none
		var seen []string
		for p := 1; p <= 2; p++ {
			page, err := s.OrganizationOverview(ctx, f.query(models.OverviewQuery{Sort: models.SortCreated, Desc: true, Page: p, PageSize: 3}))
			if err != nil {
				t.Fatal(err)
			}
			if page.Total != 4 || page.Pages != 2 || page.Page != p {
				t.Fatalf("page %d: %+v", p, page)
			}
			seen = append(seen, names(page.Rows)...)
		}
		if want := []string{"Initech", "Acme", "Umbrella 100%_off", "globex"}; !slices.Equal(seen, want) {
			t.Errorf("pages: %v, want %v", seen, want)
		}
		// Past the end: no rows, but the total and page count still hold.
		page, err := s.OrganizationOverview(ctx, f.query(models.OverviewQuery{Page: 9, PageSize: 3}))
		if err != nil || len(page.Rows) != 0 || page.Total != 4 || page.Pages != 2 || page.Page != 9 {
			t.Fatalf("past the end: %+v %v", page, err)
		}
		page, err = s.OrganizationOverview(ctx, f.query(models.OverviewQuery{Search: "acme", Page: 2}))
		if err != nil || len(page.Rows) != 0 || page.Total != 1 || page.Pages != 1 {
			t.Fatalf("past the end of a search: %+v %v", page, err)
		}
		page, err = s.OrganizationOverview(ctx, f.query(models.OverviewQuery{Search: "nobody"}))
		if err != nil || len(page.Rows) != 0 || page.Total != 0 || page.Pages != 1 || page.Page != 1 {
			t.Fatalf("no match: %+v %v", page, err)
		}
		page, err = s.OrganizationOverview(ctx, f.query(models.OverviewQuery{Page: -3}))
		if err != nil || page.Page != 1 || len(page.Rows) != 4 {
			t.Fatalf("page below 1: %+v %v", page, err)
		}
	})
}

func TestPendingUpgradesAndTierUsage(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		s := models.NewStore(db)
		f := newOverviewFixture(t, db)
		if _, err := s.RequestUpgrade(ctx, f.acmeOwner, "premium", "more please"); err != nil {
			t.Fatal(err)
		}
		r, err := s.RequestUpgrade(ctx, f.initechOwn, "premium", "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.RequestUpgrade(ctx, f.globexOwner, "free", ""); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DecideUpgrade(ctx, f.globexOwner.User, r.ID, false); err != nil {
			t.Fatal(err)
		}
		ups, total, err := s.PendingUpgrades(ctx, 1)
		if err != nil || total != 2 || len(ups) != 1 {
			t.Fatalf("pending: %+v %d %v", ups, total, err)
		}
		if u := ups[0]; u.OrgName != "Acme" || u.RequesterEmail != "wile@acme.example" || u.FromTier != "free" || u.ToTier != "premium" || u.Note != "more please" {
			t.Errorf("oldest pending = %+v", u)
		}
		ups, total, err = s.PendingUpgrades(ctx, 10)
		if err != nil || total != 2 || len(ups) != 2 || ups[1].OrgName != "globex" {
			t.Fatalf("pending: %+v %d %v", ups, total, err)
		}

		usage, err := s.TierUsage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		free, _ := s.TierByName(ctx, "free")
		premium, _ := s.TierByName(ctx, "premium")
		if usage[free.ID] != 2 || usage[premium.ID] != 2 {
			t.Errorf("tier usage = %v", usage)
		}
		users, err := s.OrganizationUsers(ctx, f.initech.ID)
		if err != nil || len(users) != 2 || users[0].Role != models.RoleOwner || users[1].Email != "milton@stapler.example" {
			t.Fatalf("users: %+v %v", users, err)
		}
	})
}

// TestAuditEntriesFilter filters the audit log by organization, action
// prefix and time, newest first, a page at a time.
func TestAuditEntriesFilter(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		s := models.NewStore(db)
		_, admin, err := s.CreateOrganizationWithOwner(ctx, "Ops", "premium", "ops@example.com", "h", models.RoleAdmin)
		if err != nil {
			t.Fatal(err)
		}
		acme, _, err := s.CreateOrganizationWithOwner(ctx, "Acme", "free", "a@example.com", "h", models.RoleOwner)
		if err != nil {
			t.Fatal(err)
		}
		free, _ := s.TierByName(ctx, "free")
		settings := free.Settings()
		settings.Capacity = 31
		if _, err := s.UpdateTier(ctx, admin.User, "free", settings); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetOrganizationTier(ctx, admin.User, acme.ID, "premium"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetModelPrice(ctx, admin.User, models.ModelPrice{Model: "m", InputPerMTok: 1}, time.Now()); err != nil {
			t.Fatal(err)
		}
		// Entries at known times, for the range filter: one a day.
		base := time.Date(2026, time.June, 1, 0, 0, 0, 0, time.UTC)
		for i := range 5 {
			err := db.Gorm.Exec(`INSERT INTO audit_log (org_id, actor_user_id, action, target, detail, created_at)
				VALUES (?, NULL, 'tierx.test', ?, '', ?)`, acme.ID, fmt.Sprint(i), base.AddDate(0, 0, i)).Error
			if err != nil {
				t.Fatal(err)
			}
		}

		actions := func(rs []models.AuditRecord) []string {
			var out []string
			for _, r := range rs {
				out = append(out, r.Action)
			}
			return out
		}
		all, more, err := s.AuditEntries(ctx, models.AuditQuery{})
		if err != nil || more {
			t.Fatal(more, err)
		}
		// Signups, then the three admin actions, newest first; the dated
		// test entries are oldest.
		if got := actions(all[:3]); !slices.Equal(got, []string{"price.set", "organization.tier", "tier.update"}) {
			t.Errorf("newest first: %v", actions(all))
		}
		tier := all[2]
		if tier.ActorEmail != "ops@example.com" || tier.ActorUserID == nil || *tier.ActorUserID != admin.ID || tier.Target != "free" ||
			tier.OrgName != "Ops" || !strings.Contains(tier.Detail, "capacity 30 -> 31") {
			t.Errorf("tier entry = %+v", tier)
		}
		if moved := all[1]; moved.OrgID == nil || *moved.OrgID != acme.ID || moved.OrgName != "Acme" || moved.Target != fmt.Sprint(acme.ID) {
			t.Errorf("an organization's move is filed under it: %+v", moved)
		}

		tests := []struct {
			name string
			q    models.AuditQuery
			want []string // targets, newest first
		}{
			{"prefix tier. is not tierx.", models.AuditQuery{ActionPrefix: "tier."}, []string{"free"}},
			{"whole action", models.AuditQuery{ActionPrefix: "price.set"}, []string{"m"}},
			{"prefix of a word", models.AuditQuery{ActionPrefix: "tierx"}, []string{"4", "3", "2", "1", "0"}},
			{"organization", models.AuditQuery{OrgID: acme.ID, ActionPrefix: "organization."},
				[]string{fmt.Sprint(acme.ID), "Acme"}},
			{"range", models.AuditQuery{OrgID: acme.ID, From: base.AddDate(0, 0, 1), To: base.AddDate(0, 0, 3)}, []string{"2", "1"}},
			{"from only", models.AuditQuery{ActionPrefix: "tierx.", From: base.AddDate(0, 0, 3)}, []string{"4", "3"}},
			{"to only", models.AuditQuery{ActionPrefix: "tierx.", To: base.AddDate(0, 0, 1)}, []string{"0"}},
			{"page 2 of 2", models.AuditQuery{ActionPrefix: "tierx.", Page: 2, PageSize: 3}, []string{"1", "0"}},
			{"nothing", models.AuditQuery{OrgID: 999999}, nil},
		}
		for _, tt := range tests {
			rs, _, err := s.AuditEntries(ctx, tt.q)
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			var got []string
			for _, r := range rs {
				got = append(got, r.Target)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("%s: targets %v, want %v", tt.name, got, tt.want)
			}
		}
		rs, more, err := s.AuditEntries(ctx, models.AuditQuery{ActionPrefix: "tierx.", PageSize: 3})
		if err != nil || len(rs) != 3 || !more {
			t.Errorf("first page of 5 by 3: %d rows, more=%v, %v", len(rs), more, err)
		}
		for _, bad := range []string{"Tier.", "tier%", "tier'", strings.Repeat("a", 65), "tïer"} {
			if _, _, err := s.AuditEntries(ctx, models.AuditQuery{ActionPrefix: bad}); apperr.CodeOf(err) != apperr.Invalid {
				t.Errorf("action %q: %v, want invalid", bad, err)
			}
		}
	})
}

func TestParsePage(t *testing.T) {
	for in, want := range map[string]int{"": 1, "1": 1, "7": 7, "100000": models.MaxPage} {
		if got, ok := models.ParsePage(in); !ok || got != want {
			t.Errorf("ParsePage(%q) = %d, %v; want %d", in, got, ok, want)
		}
	}
	for _, in := range []string{"0", "-1", "100001", "9223372036854775807", "1e3", "x", " 1"} {
		if got, ok := models.ParsePage(in); ok {
			t.Errorf("ParsePage(%q) = %d, accepted", in, got)
		}
	}
}

// A page far beyond the end is empty, never an offset that overflows into
// a database error.
func TestOverviewPageBeyondTheEnd(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		s := models.NewStore(db)
		f := newOverviewFixture(t, db)
		page, err := s.OrganizationOverview(ctx, f.query(models.OverviewQuery{Page: int(^uint(0) >> 1)}))
		if err != nil || len(page.Rows) != 0 || page.Page != models.MaxPage || page.Total != 4 {
			t.Fatalf("%+v %v", page, err)
		}
	})
}
