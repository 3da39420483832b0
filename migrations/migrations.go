// Package migrations applies Sluice's versioned SQL schema. Each dialect has
// its own directory of files named NNNN_description.sql; a file is applied in
// one transaction together with the row recording it in schema_migrations, so
// a failed migration leaves nothing half-done.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

//go:embed postgres/*.sql sqlite/*.sql
var files embed.FS

// Dialect names a directory of migrations.
type Dialect string

// The supported dialects.
const (
	Postgres Dialect = "postgres"
	SQLite   Dialect = "sqlite"
)

// Migration is one versioned SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// List returns the dialect's migrations in version order.
func List(d Dialect) ([]Migration, error) {
	entries, err := fs.ReadDir(files, string(d))
	if err != nil {
		return nil, fmt.Errorf("migrations: unknown dialect %q: %w", d, err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migrations: %s/%s: name must start with a positive version and '_'", d, name)
		}
		body, err := fs.ReadFile(files, path.Join(string(d), name))
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("migrations: %s: version %d used twice", d, out[i].Version)
		}
	}
	return out, nil
}

// Latest is the schema version this binary expects.
func Latest(d Dialect) (int, error) {
	ms, err := List(d)
	if err != nil || len(ms) == 0 {
		return 0, err
	}
	return ms[len(ms)-1].Version, nil
}

const createTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT NOT NULL,
	applied_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP
)`

// Current returns the highest applied version, 0 for an empty database.
func Current(ctx context.Context, db *sql.DB) (int, error) {
	if _, err := db.ExecContext(ctx, createTable); err != nil {
		return 0, fmt.Errorf("migrations: create schema_migrations: %w", err)
	}
	var v sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("migrations: read version: %w", err)
	}
	return int(v.Int64), nil
}

// Apply runs every migration newer than the database's version and returns
// the versions it applied. On Postgres an advisory lock keeps two starting
// nodes from migrating at once.
func Apply(ctx context.Context, db *sql.DB, d Dialect) ([]int, error) {
	ms, err := List(d)
	if err != nil {
		return nil, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if d == Postgres {
		// Session-level lock on this connection; released when it closes.
		if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock(7234611)`); err != nil {
			return nil, fmt.Errorf("migrations: lock: %w", err)
		}
		defer conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(7234611)`)
	}
	if _, err := conn.ExecContext(ctx, createTable); err != nil {
		return nil, fmt.Errorf("migrations: create schema_migrations: %w", err)
	}
	var current sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&current); err != nil {
		return nil, fmt.Errorf("migrations: read version: %w", err)
	}
	var applied []int
	for _, m := range ms {
		if m.Version <= int(current.Int64) {
			continue
		}
		if err := applyOne(ctx, conn, d, m); err != nil {
			return applied, err
		}
		applied = append(applied, m.Version)
	}
	return applied, nil
}

func applyOne(ctx context.Context, conn *sql.Conn, d Dialect, m Migration) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return fmt.Errorf("migrations: %s/%s: %w", d, m.Name, err)
	}
	record := `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`
	if d == SQLite {
		record = `INSERT INTO schema_migrations (version, name) VALUES (?, ?)`
	}
	if _, err := tx.ExecContext(ctx, record, m.Version, m.Name); err != nil {
		return fmt.Errorf("migrations: record %s: %w", m.Name, err)
	}
	return tx.Commit()
}

// Check returns an error when the database is behind this binary, so the
// server refuses to run against a schema it does not understand.
func Check(ctx context.Context, db *sql.DB, d Dialect) error {
	want, err := Latest(d)
	if err != nil {
		return err
	}
	have, err := Current(ctx, db)
	if err != nil {
		return err
	}
	if have < want {
		return fmt.Errorf("database schema is at version %d but this binary needs %d: run `sluice migrate` (or set SLUICE_AUTO_MIGRATE=true)", have, want)
	}
	return nil
}
