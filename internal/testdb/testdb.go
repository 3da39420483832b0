// Package testdb gives tests a fresh, migrated database: a SQLite file in a
// temp dir, and a private schema in the real Postgres of TEST_DATABASE_URL.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"gorm.io/driver/postgres"

	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/models"
)

// Each runs fn once per dialect as a subtest, so one table of store tests
// covers SQLite and Postgres alike.
func Each(t *testing.T, fn func(t *testing.T, db *models.DB)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) { fn(t, SQLite(t)) })
	t.Run("postgres", func(t *testing.T) { fn(t, Postgres(t)) })
}

// SQLite opens a migrated database in t's temp dir: a copy of one
// migrated once per test binary, since migrating SQLite (pure Go, and
// slower still under -race) costs seconds and a copy milliseconds.
func SQLite(t testing.TB) *models.DB {
	t.Helper()
	image, err := sqliteImage()
	if err != nil {
		t.Fatalf("migrating the template SQLite database: %v", err)
	}
	path := filepath.Join(t.TempDir(), "sluice.db")
	if err := os.WriteFile(path, image, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := models.Open(context.Background(), "", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// sqliteImage is the bytes of a freshly migrated SQLite database, made on
// first use and kept in memory (so no file outlives the test binary).
var sqliteImage = sync.OnceValues(func() ([]byte, error) {
	dir, err := os.MkdirTemp("", "sluice-testdb-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	db, err := models.Open(context.Background(), "", filepath.Join(dir, "migrating.db"))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	sqlDB, err := db.SQL()
	if err != nil {
		return nil, err
	}
	if _, err := migrations.Apply(context.Background(), sqlDB, migrations.Dialect(db.Dialect)); err != nil {
		return nil, err
	}
	// VACUUM INTO writes one self-contained file, whatever the WAL holds.
	image := filepath.Join(dir, "image.db")
	if _, err := sqlDB.Exec("VACUUM INTO ?", image); err != nil {
		return nil, err
	}
	return os.ReadFile(image)
})

// PostgresURL returns a URL to a fresh schema of TEST_DATABASE_URL, dropped
// when t ends, and skips t with a message when the variable is unset.
func PostgresURL(t testing.TB) string {
	t.Helper()
	base := os.Getenv("TEST_DATABASE_URL")
	if base == "" {
		t.Skip("TEST_DATABASE_URL is not set: skipping the Postgres variant (CI sets it)")
	}
	admin, err := models.Open(context.Background(), base, "")
	if err != nil {
		t.Fatalf("TEST_DATABASE_URL is set but unusable: %v", err)
	}
	var b [6]byte
	rand.Read(b[:])
	schema := "t_" + hex.EncodeToString(b[:])
	if err := admin.Gorm.Exec("CREATE SCHEMA " + schema).Error; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.Gorm.Exec("DROP SCHEMA " + schema + " CASCADE")
		admin.Close()
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// Postgres opens a migrated private schema of TEST_DATABASE_URL.
func Postgres(t testing.TB) *models.DB {
	t.Helper()
	db, err := models.Open(context.Background(), PostgresURL(t), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	migrate(t, db)
	return db
}

func migrate(t testing.TB, db *models.DB) {
	t.Helper()
	sqlDB, err := db.SQL()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(context.Background(), sqlDB, migrations.Dialect(db.Dialect)); err != nil {
		t.Fatal(err)
	}
}

// URL is the connection URL of db when it is Postgres, and "" for SQLite:
// what the job queue, which opens connections of its own, is given.
func URL(db *models.DB) string {
	if d, ok := db.Gorm.Dialector.(*postgres.Dialector); ok {
		return d.DSN
	}
	return ""
}
