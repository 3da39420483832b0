package migrations_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/models"
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
