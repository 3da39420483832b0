package migrations_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

func TestDialectsHaveTheSameVersions(t *testing.T) {
	pg, err := migrations.List(migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	lite, err := migrations.List(migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	if len(pg) == 0 || len(pg) != len(lite) {
		t.Fatalf("postgres has %d migrations, sqlite %d", len(pg), len(lite))
	}
	for i := range pg {
		if pg[i].Name != lite[i].Name {
			t.Errorf("migration %d: postgres %s, sqlite %s", i, pg[i].Name, lite[i].Name)
		}
	}
}

func TestApplyIsRecordedIdempotentAndGated(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		ctx := context.Background()
		sqlDB, _ := db.SQL()
		d := migrations.Dialect(db.Dialect)
		// testdb already migrated: applying again does nothing.
		applied, err := migrations.Apply(ctx, sqlDB, d)
		if err != nil || len(applied) != 0 {
			t.Fatalf("second apply: applied %v, err %v", applied, err)
		}
		if err := migrations.Check(ctx, sqlDB, d); err != nil {
			t.Fatalf("check on a current schema: %v", err)
		}
		// Pretend the last migration was never applied: the gate must refuse.
		latest, _ := migrations.Latest(d)
		if _, err := sqlDB.ExecContext(ctx, "DELETE FROM schema_migrations WHERE version = "+strconv.Itoa(latest)); err != nil {
			t.Fatal(err)
		}
		err = migrations.Check(ctx, sqlDB, d)
		if err == nil || !strings.Contains(err.Error(), "sluice migrate") {
			t.Fatalf("check on an old schema: got %v, want an error naming `sluice migrate`", err)
		}
	})
}

// TestMonthlyModelsBackfill runs 0009's backfill over usage stored before
// it: the per-price months it makes are what the recorder keeps since.
func TestMonthlyModelsBackfill(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		ctx := context.Background()
		s := models.NewStore(db)
		o, u, _ := s.CreateOrganizationWithOwner(ctx, "A", "free", "a@example.com", "h", models.RoleOwner)
		tok, _, _ := s.CreateAPIToken(ctx, o.ID, u.ID, "t", nil)
		nov := time.Date(2026, 11, 30, 23, 30, 0, 0, time.UTC)
		var evs []models.UsageEvent
		for i, at := range []time.Time{nov, nov.Add(-48 * time.Hour), nov.Add(time.Hour)} { // two in November, one in December
			evs = append(evs, models.UsageEvent{RequestID: "r" + strconv.Itoa(i), OrgID: o.ID, TokenID: tok.ID, Model: "m", PromptTokens: 10 + i,
				CompletionTokens: 5, CachedTokens: 2, Cost: money.Amount(100 * (i + 1)), PriceID: 7, Status: 200, CreatedAt: at})
		}
		if err := s.InsertUsageEvents(ctx, evs); err != nil {
			t.Fatal(err)
		}
		if err := s.AddRejections(ctx, []models.Rejections{{OrgID: o.ID, TokenID: tok.ID, Model: "m", Hour: nov, Requests: 4}}); err != nil {
			t.Fatal(err)
		}
		want := map[time.Time]models.PricedUsage{}
		for _, month := range []time.Time{nov, nov.Add(time.Hour)} {
			lines, err := s.UsageByPrice(ctx, o.ID, month)
			if err != nil || len(lines) != 1 {
				t.Fatalf("%v by price as recorded: %+v %v", month, lines, err)
			}
			want[month] = lines[0]
		}
		if want[nov].Requests != 2 || want[nov].Cost != 300 || want[nov.Add(time.Hour)].Requests != 1 {
			t.Fatalf("as recorded: %+v", want)
		}

		// Forget the rows and run the migration's backfill.
		if err := db.Gorm.Exec("DELETE FROM usage_monthly_models").Error; err != nil {
			t.Fatal(err)
		}
		all, err := migrations.List(migrations.Dialect(db.Dialect))
		if err != nil {
			t.Fatal(err)
		}
		var backfill string
		for _, m := range all {
			if strings.HasSuffix(m.Name, "_monthly_models.sql") {
				_, backfill, _ = strings.Cut(m.SQL, ");\n") // what follows CREATE TABLE
			}
		}
		if !strings.Contains(backfill, "INSERT INTO usage_monthly_models") {
			t.Fatalf("no backfill found in the migration: %q", backfill)
		}
		if err := db.Gorm.Exec(backfill).Error; err != nil {
			t.Fatal(err)
		}
		for month, w := range want {
			lines, err := s.UsageByPrice(ctx, o.ID, month)
			if err != nil || len(lines) != 1 || lines[0] != w {
				t.Errorf("%v after the backfill: %+v %v, want %+v", month, lines, err, w)
			}
		}
	})
}

// TestTierTermsBackfill runs 0011 over a database of an earlier version:
// every tier gets one version of its terms in force since the epoch, every
// organization one membership of its tier from its creation, so a month
// still open bills as it did before (the tier as it stands, from the
// organization's creation on).
func TestTierTermsBackfill(t *testing.T) {
	for _, open := range []struct {
		name string
		db   func(t *testing.T) *models.DB
	}{
		{"sqlite", func(t *testing.T) *models.DB {
			db, err := models.Open(context.Background(), "", filepath.Join(t.TempDir(), "sluice.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		}},
		{"postgres", func(t *testing.T) *models.DB {
			db, err := models.Open(context.Background(), testdb.PostgresURL(t), "")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		}},
	} {
		t.Run(open.name, func(t *testing.T) {
			ctx := context.Background()
			db := open.db(t)
			sqlDB, _ := db.SQL()
			d := migrations.Dialect(db.Dialect)
			all, err := migrations.List(d)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := migrations.Current(ctx, sqlDB); err != nil { // creates schema_migrations
				t.Fatal(err)
			}
			for _, m := range all {
				if m.Version >= 11 {
					break
				}
				if _, err := sqlDB.ExecContext(ctx, m.SQL); err != nil {
					t.Fatalf("%s: %v", m.Name, err)
				}
				if err := db.Gorm.Exec("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", m.Version, m.Name).Error; err != nil {
					t.Fatal(err)
				}
			}
			// Before 0011: two organizations, one created mid-October, one
			// mid-November, and an edited tier.
			oct15, nov15 := time.Date(2026, 10, 15, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 15, 0, 0, 0, 0, time.UTC)
			for _, q := range []struct {
				sql  string
				args []any
			}{
				{"UPDATE tiers SET monthly_fee = ? WHERE name = 'premium'", []any{59 * money.Dollar}},
				{"INSERT INTO organizations (name, tier_id, created_at) SELECT 'Old', id, ? FROM tiers WHERE name = 'premium'", []any{oct15}},
				{"INSERT INTO organizations (name, tier_id, created_at) SELECT 'New', id, ? FROM tiers WHERE name = 'premium'", []any{nov15}},
			} {
				if err := db.Gorm.Exec(q.sql, q.args...).Error; err != nil {
					t.Fatal(err)
				}
			}
			applied, err := migrations.Apply(ctx, sqlDB, d)
			if err != nil || len(applied) == 0 || applied[0] != 11 {
				t.Fatalf("applied %v: %v", applied, err)
			}
			s := models.NewStore(db)
			tiers, err := s.Tiers(ctx)
			if err != nil || len(tiers) != 2 {
				t.Fatalf("tiers %+v %v", tiers, err)
			}
			for _, tier := range tiers {
				if tier.TermsFrom.Unix() != 0 {
					t.Errorf("%s: terms from %v, want the epoch", tier.Name, tier.TermsFrom)
				}
			}
			var orgs []models.Organization
			db.Gorm.Order("id").Find(&orgs)
			nov := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
			for i, want := range []string{
				"premium 59.00/10.00/bill from 2026-11-01 for 2592000 s",
				"premium 59.00/10.00/bill from 2026-11-15 for 1382400 s",
			} {
				m, err := s.MonthTerms(ctx, orgs[i].ID, nov)
				if err != nil || len(m.Terms) != 1 {
					t.Fatalf("%s: %+v %v", orgs[i].Name, m, err)
				}
				tt := m.Terms[0]
				got := fmt.Sprintf("%s %s/%s/%s from %s for %d s", tt.Terms.TierName, tt.Terms.MonthlyFee, tt.Terms.IncludedCredit, tt.Terms.Overage,
					tt.Spans[0].From.Format("2006-01-02"), tt.Seconds)
				if got != want || tt.Terms.EffectiveFrom.Unix() != 0 {
					t.Errorf("%s in November: %s (version from %v), want %s", orgs[i].Name, got, tt.Terms.EffectiveFrom, want)
				}
			}
			var memberships int64
			db.Gorm.Model(&models.TierMembership{}).Count(&memberships)
			if memberships != 2 {
				t.Errorf("%d memberships, want one per organization", memberships)
			}
		})
	}
}

// TestTokenLimitsMigration applies 0012 (token limits) to a database
// migrated up to the version before it, with a tier of an admin's own: the default tiers get their limits
// (free 10, premium 200) and the other tier no limit (0).
func TestTokenLimitsMigration(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			ctx := context.Background()
			db, sqlDB, d, target := beforeMigration(t, dialect, "_token_limits.sql")
			if err := db.Gorm.Exec("INSERT INTO tiers (name, capacity, refill_per_sec) VALUES ('team', 100, 2)").Error; err != nil {
				t.Fatal(err)
			}
			applied, err := migrations.Apply(ctx, sqlDB, d)
			if err != nil || len(applied) == 0 || applied[0] != target.Version {
				t.Fatalf("apply from the version before %s: %v %v", target.Name, applied, err)
			}
			s := models.NewStore(db)
			for name, want := range map[string]int{"free": 10, "premium": 200, "team": 0} {
				tier, err := s.TierByName(ctx, name)
				if err != nil || tier.MaxAPITokens != want {
					t.Errorf("%s: max_api_tokens %d (%v), want %d", name, tier.MaxAPITokens, err, want)
				}
			}
			if err := db.Gorm.Exec("UPDATE tiers SET max_api_tokens = -1 WHERE name = 'team'").Error; err == nil {
				t.Error("a negative max_api_tokens was stored")
			}
		})
	}
}

// TestQueueLimitsMigration applies 0013 (queue limits) to a database at
// the version before it: free 100 jobs and 1,000 lines, premium 10,000 and
// 500,000, another tier the free tier's; lines already pending in open
// batches are counted, and a negative limit is refused.
func TestQueueLimitsMigration(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			ctx := context.Background()
			db, sqlDB, d, target := beforeMigration(t, dialect, "_queue_limits.sql")
			g := db.Gorm
			steps := []string{
				"INSERT INTO tiers (name, capacity, refill_per_sec) VALUES ('team', 100, 2)",
				"INSERT INTO organizations (id, name, tier_id) VALUES (900, 'Acme', (SELECT id FROM tiers WHERE name = 'free'))",
				"INSERT INTO batch_files (id, org_id, purpose, filename, bytes, content, created_at, expires_at) VALUES (900, 900, 'batch', 'in.jsonl', 0, '', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)",
				"INSERT INTO batches (id, org_id, token_id, input_file_id, endpoint, completion_window, status, total, created_at, expires_at) VALUES (900, 900, 0, 900, '/v1/chat/completions', '24h', 'in_progress', 3, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)",
				"INSERT INTO batches (id, org_id, token_id, input_file_id, endpoint, completion_window, status, total, created_at, expires_at) VALUES (901, 900, 0, 900, '/v1/chat/completions', '24h', 'failed', 1, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)",
				"INSERT INTO batch_results (batch_id, line, custom_id, state) VALUES (900, 1, 'a', 'pending'), (900, 2, 'b', 'pending'), (900, 3, 'c', 'ok'), (901, 1, 'd', 'pending')",
			}
			for _, q := range steps {
				if err := g.Exec(q).Error; err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			applied, err := migrations.Apply(ctx, sqlDB, d)
			if err != nil || len(applied) == 0 || applied[0] != target.Version {
				t.Fatalf("apply from the version before %s: %v %v", target.Name, applied, err)
			}
			s := models.NewStore(db)
			for name, want := range map[string][2]int64{"free": {100, 1000}, "premium": {10_000, 500_000}, "team": {100, 1000}} {
				tier, err := s.TierByName(ctx, name)
				if err != nil || tier.MaxQueuedJobs != want[0] || tier.MaxPendingBatchLines != want[1] {
					t.Errorf("%s: %d jobs, %d lines (%v), want %v", name, tier.MaxQueuedJobs, tier.MaxPendingBatchLines, err, want)
				}
			}
			if n, err := s.PendingBatchLines(ctx, 900); err != nil || n != 2 {
				t.Errorf("pending lines counted: %d (%v), want 2", n, err)
			}
			if err := g.Exec("UPDATE tiers SET max_queued_jobs = -1 WHERE name = 'team'").Error; err == nil {
				t.Error("a negative max_queued_jobs was stored")
			}
		})
	}
}

// TestFileChunksMigration applies 0014 (file chunks) to a database
// migrated up to the version before it, with files stored whole: each
// file's content moves into chunks of 256 KiB, byte for byte (a file of
// several chunks and a bit, one of a few bytes, an empty one), the files
// are complete, and the content column is gone.
func TestFileChunksMigration(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			ctx := context.Background()
			db, sqlDB, d, target := beforeMigration(t, dialect, "_file_chunks.sql")
			s := models.NewStore(db)
			// By hand: the store writes tables later migrations make.
			var o models.Organization
			if err := db.Gorm.Raw(`INSERT INTO organizations (name, tier_id, created_at)
				VALUES ('Files', (SELECT id FROM tiers WHERE name = 'free'), ?) RETURNING id`, time.Now().UTC()).Scan(&o.ID).Error; err != nil {
				t.Fatal(err)
			}
			big := make([]byte, 3*256<<10+1000)
			for i := range big {
				big[i] = byte(i % 253)
			}
			now := time.Now().UTC()
			contents := [][]byte{big, []byte("{}\n"), {}}
			ids := make([]int64, len(contents))
			for i, c := range contents {
				if err := db.Gorm.Raw(`INSERT INTO batch_files (org_id, purpose, filename, bytes, content, created_at, expires_at)
					VALUES (?, 'batch', ?, ?, ?, ?, ?) RETURNING id`, o.ID, fmt.Sprintf("f%d.jsonl", i), len(c), c, now, now.Add(time.Hour)).Scan(&ids[i]).Error; err != nil {
					t.Fatal(err)
				}
			}
			applied, err := migrations.Apply(ctx, sqlDB, d)
			if err != nil || len(applied) == 0 || applied[0] != target.Version {
				t.Fatalf("apply from the version before %s: %v %v", target.Name, applied, err)
			}
			for i, want := range contents {
				f, r, err := s.OpenBatchFile(ctx, o.ID, ids[i], now)
				if err != nil {
					t.Fatalf("file %d: %v", i, err)
				}
				got, err := io.ReadAll(r)
				if err != nil || !bytes.Equal(got, want) || f.Bytes != int64(len(want)) || !f.Complete {
					t.Errorf("file %d: %d bytes back of %d (%v), %+v", i, len(got), len(want), err, f)
				}
			}
			var chunks []struct {
				FileID int64
				Seq    int
				Size   int
			}
			db.Gorm.Raw("SELECT file_id, seq, LENGTH(data) AS size FROM batch_file_chunks ORDER BY file_id, seq").Scan(&chunks)
			if len(chunks) != 5 || chunks[0].Size != 256<<10 || chunks[3].Size != 1000 || chunks[4].FileID != ids[1] || chunks[4].Size != 3 {
				t.Errorf("chunks: %+v", chunks)
			}
			if err := db.Gorm.Exec("SELECT content FROM batch_files").Error; err == nil {
				t.Error("batch_files still has its content column")
			}
		})
	}
}

// TestMembershipsMigration applies 0019 (memberships) to a database at the
// version before it: every user's organization and role become a
// membership (an admin owns the organization it was made in and stays an
// admin), users.role keeps only who is an admin, and open sessions keep
// working in their user's organization.
func TestMembershipsMigration(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			ctx := context.Background()
			db, sqlDB, d, target := beforeMigration(t, dialect, "_memberships.sql")
			joined := time.Date(2026, 2, 1, 10, 0, 0, 0, time.UTC)
			exec := func(q string, args ...any) int64 {
				t.Helper()
				var id int64
				if err := db.Gorm.Raw(q+" RETURNING id", args...).Scan(&id).Error; err != nil {
					t.Fatalf("%s: %v", q, err)
				}
				return id
			}
			acme := exec(`INSERT INTO organizations (name, tier_id, created_at) VALUES ('Acme', (SELECT id FROM tiers WHERE name = 'free'), ?)`, joined)
			ops := exec(`INSERT INTO organizations (name, tier_id, created_at) VALUES ('Ops', (SELECT id FROM tiers WHERE name = 'premium'), ?)`, joined)
			user := func(org int64, email, role string) int64 {
				return exec(`INSERT INTO users (org_id, email, password_hash, role, created_at) VALUES (?, ?, 'h', ?, ?)`, org, email, role, joined)
			}
			owner, member, admin := user(acme, "owner@acme.example", "owner"), user(acme, "member@acme.example", "member"), user(ops, "ops@example.com", "admin")
			if err := db.Gorm.Exec(`INSERT INTO login_sessions (id, user_id, created_at, expires_at) VALUES ('open', ?, ?, ?)`,
				member, time.Now().UTC(), time.Now().UTC().Add(time.Hour)).Error; err != nil {
				t.Fatal(err)
			}

			applied, err := migrations.Apply(ctx, sqlDB, d)
			if err != nil || len(applied) == 0 || applied[0] != target.Version {
				t.Fatalf("apply from the version before %s: %v %v", target.Name, applied, err)
			}
			s := models.NewStore(db)
			for _, c := range []struct {
				user, org int64
				role      models.Role
				admin     bool
			}{{owner, acme, models.RoleOwner, false}, {member, acme, models.RoleMember, false}, {admin, ops, models.RoleOwner, true}} {
				u, err := s.User(ctx, c.user)
				if err != nil {
					t.Fatal(err)
				}
				m, err := s.StartingMember(ctx, u)
				if err != nil || m.OrgID != c.org || m.Role != c.role || u.IsAdmin() != c.admin || u.LastOrgID != c.org {
					t.Errorf("%s: %+v %v, want org %d as %s (admin %v)", u.Email, m, err, c.org, c.role, c.admin)
				}
				if !c.admin && u.AccountRole != models.RoleMember {
					t.Errorf("%s: users.role %q, want member (roles in organizations are memberships')", u.Email, u.AccountRole)
				}
			}
			if ms, err := s.Members(ctx, acme); err != nil || len(ms) != 2 || !ms[0].JoinedAt.Equal(joined) {
				t.Errorf("Acme's members: %+v %v", ms, err)
			}
			if m, err := s.LoginSessionMember(ctx, "open", member); err != nil || m.OrgID != acme || m.Role != models.RoleMember {
				t.Errorf("the open session: %+v %v", m, err)
			}
			if err := db.Gorm.Exec(`INSERT INTO memberships (org_id, user_id, role, created_at) VALUES (?, ?, 'admin', ?)`, ops, owner, joined).Error; err == nil {
				t.Error("a membership with the admin role was stored")
			}
		})
	}
}

// TestAdminUsersMigration: users and organizations that existed before
// come out enabled and not deleted, and a session of theirs still works.
func TestAdminUsersMigration(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			ctx := context.Background()
			db, sqlDB, d, target := beforeMigration(t, dialect, "_admin_users.sql")
			at := time.Date(2026, 2, 1, 10, 0, 0, 0, time.UTC)
			var org, user int64
			if err := db.Gorm.Raw(`INSERT INTO organizations (name, tier_id, created_at) VALUES ('Acme', (SELECT id FROM tiers WHERE name = 'free'), ?) RETURNING id`, at).Scan(&org).Error; err != nil {
				t.Fatal(err)
			}
			if err := db.Gorm.Raw(`INSERT INTO users (org_id, email, password_hash, role, created_at) VALUES (?, 'ada@acme.example', 'h', 'member', ?) RETURNING id`, org, at).Scan(&user).Error; err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{
				`INSERT INTO memberships (org_id, user_id, role, created_at) VALUES (?, ?, 'owner', ?)`,
				`INSERT INTO login_sessions (id, org_id, user_id, created_at, expires_at) VALUES ('open', ?, ?, ?, ?)`,
			} {
				args := []any{org, user, at}
				if strings.Contains(q, "login_sessions") {
					args = []any{org, user, time.Now().UTC(), time.Now().UTC().Add(time.Hour)}
				}
				if err := db.Gorm.Exec(q, args...).Error; err != nil {
					t.Fatal(err)
				}
			}
			applied, err := migrations.Apply(ctx, sqlDB, d)
			if err != nil || len(applied) == 0 || applied[0] != target.Version {
				t.Fatalf("apply from the version before %s: %v %v", target.Name, applied, err)
			}
			s := models.NewStore(db)
			u, err := s.User(ctx, user)
			if err != nil || u.Disabled() || u.LastLoginAt != nil {
				t.Errorf("user after the migration: %+v %v", u, err)
			}
			if o, err := s.Organization(ctx, org); err != nil || o.Deleted() || o.PurgeAfter != nil {
				t.Errorf("organization after the migration: %+v %v", o, err)
			}
			if m, err := s.LoginSessionMember(ctx, "open", user); err != nil || m.OrgID != org {
				t.Errorf("the open session: %+v %v", m, err)
			}
		})
	}
}

// beforeMigration opens a fresh database of dialect (sqlite, postgres)
// with every migration before the one whose name ends in suffix applied by
// hand and recorded, as Apply would have, and returns it with that
// migration: the state a migration meets in the field.
func beforeMigration(t *testing.T, dialect, suffix string) (*models.DB, *sql.DB, migrations.Dialect, migrations.Migration) {
	t.Helper()
	ctx := context.Background()
	var db *models.DB
	var err error
	if dialect == "sqlite" {
		db, err = models.Open(ctx, "", filepath.Join(t.TempDir(), "sluice.db"))
	} else {
		db, err = models.Open(ctx, testdb.PostgresURL(t), "")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	sqlDB, _ := db.SQL()
	d := migrations.Dialect(db.Dialect)
	all, err := migrations.List(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Current(ctx, sqlDB); err != nil { // creates schema_migrations
		t.Fatal(err)
	}
	for _, m := range all {
		if strings.HasSuffix(m.Name, suffix) {
			return db, sqlDB, d, m
		}
		if _, err := sqlDB.ExecContext(ctx, m.SQL); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		if err := db.Gorm.Exec("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", m.Version, m.Name).Error; err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("no *%s in %s", suffix, d)
	return nil, nil, "", migrations.Migration{}
}

// TestUserIdentitiesMigration applies 0022 (single sign-on's identities)
// to a database at the version before it: the users there keep their
// passwords; an account at a provider links to one user, a user to one
// account per provider, and deleting a user deletes their identities.
func TestUserIdentitiesMigration(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			ctx := context.Background()
			db, sqlDB, d, target := beforeMigration(t, dialect, "_user_identities.sql")
			now := time.Date(2027, 3, 1, 10, 0, 0, 0, time.UTC)
			var org, user int64
			if err := db.Gorm.Raw(`INSERT INTO organizations (name, tier_id, created_at) VALUES ('Acme', (SELECT id FROM tiers WHERE name = 'free'), ?) RETURNING id`, now).Scan(&org).Error; err != nil {
				t.Fatal(err)
			}
			if err := db.Gorm.Raw(`INSERT INTO users (org_id, email, password_hash, role, created_at) VALUES (?, 'ada@example.com', 'bcrypt-hash', 'member', ?) RETURNING id`, org, now).Scan(&user).Error; err != nil {
				t.Fatal(err)
			}
			applied, err := migrations.Apply(ctx, sqlDB, d)
			if err != nil || len(applied) == 0 || applied[0] != target.Version {
				t.Fatalf("apply from the version before %s: %v %v", target.Name, applied, err)
			}
			u, err := models.NewStore(db).User(ctx, user)
			if err != nil || !u.HasPassword() || u.PasswordHash != "bcrypt-hash" {
				t.Fatalf("the user after the migration: %+v %v", u, err)
			}
			insert := func(issuer, subject string) error {
				return db.Gorm.Exec(`INSERT INTO user_identities (issuer, subject, user_id, email, created_at, last_sign_in_at) VALUES (?, ?, ?, 'ada@example.com', ?, ?)`,
					issuer, subject, user, now, now).Error
			}
			if err := insert("https://login.example.com", "sub-1"); err != nil {
				t.Fatal(err)
			}
			if err := insert("https://login.example.com", "sub-1"); err == nil {
				t.Error("one account at a provider was linked twice")
			}
			if err := insert("https://login.example.com", "sub-2"); err == nil {
				t.Error("a user was linked to two accounts at one provider")
			}
			if err := insert("https://other.example.com", "sub-1"); err != nil {
				t.Errorf("an account at another provider: %v", err)
			}
			if err := db.Gorm.Exec(`DELETE FROM users WHERE id = ?`, user).Error; err != nil {
				t.Fatal(err)
			}
			var left int64
			db.Gorm.Raw(`SELECT COUNT(*) FROM user_identities`).Scan(&left)
			if left != 0 {
				t.Errorf("%d identities outlived their user", left)
			}
		})
	}
}

// TestMailMigration applies 0020 (mail) to a database at the version
// before it: the free tier's credit waits for a verified email and no
// other tier's does; accounts from before are unverified (verification
// did not exist) and keep working; a link of no known purpose is refused.
func TestMailMigration(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			ctx := context.Background()
			db, sqlDB, d, target := beforeMigration(t, dialect, "_mail.sql")
			if err := db.Gorm.Exec("INSERT INTO tiers (name, capacity, refill_per_sec) VALUES ('team', 100, 2)").Error; err != nil {
				t.Fatal(err)
			}
			s := models.NewStore(db)
			if err := db.Gorm.Exec(`INSERT INTO organizations (name, tier_id, created_at) VALUES ('Acme', (SELECT id FROM tiers WHERE name = 'free'), ?)`, time.Now().UTC()).Error; err != nil {
				t.Fatal(err)
			}
			if err := db.Gorm.Exec(`INSERT INTO users (org_id, email, password_hash, role, created_at) VALUES ((SELECT id FROM organizations WHERE name = 'Acme'), 'owner@acme.example', 'h', 'member', ?)`, time.Now().UTC()).Error; err != nil {
				t.Fatal(err)
			}
			applied, err := migrations.Apply(ctx, sqlDB, d)
			if err != nil || len(applied) == 0 || applied[0] != target.Version {
				t.Fatalf("apply from the version before %s: %v %v", target.Name, applied, err)
			}
			for name, want := range map[string]bool{"free": true, "premium": false, "team": false} {
				tier, err := s.TierByName(ctx, name)
				if err != nil || tier.CreditNeedsVerifiedEmail != want {
					t.Errorf("%s: credit_needs_verified_email %v (%v), want %v", name, tier.CreditNeedsVerifiedEmail, err, want)
				}
			}
			u, err := s.UserByEmail(ctx, "owner@acme.example")
			if err != nil || u.EmailVerifiedAt != nil {
				t.Errorf("the user from before: %+v %v, want unverified", u, err)
			}
			if err := db.Gorm.Exec(`INSERT INTO account_links (purpose, token_hash, email, created_at, expires_at) VALUES ('login', 'x', 'a@b.c', ?, ?)`,
				time.Now().UTC(), time.Now().UTC()).Error; err == nil {
				t.Error("a link of no known purpose was stored")
			}
		})
	}
}
