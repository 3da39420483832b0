// Package models holds Sluice's gorm models and the stores that query them.
// Every query lives here; every tenant-owned query is scoped by organization,
// takes ctx first, and turns a missing row into apperr.NotFound.
package models

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sluicehq/sluice/apperr"
)

// DB is an open database and the dialect its migrations are written in.
type DB struct {
	Gorm    *gorm.DB
	Dialect string // "postgres" or "sqlite", the names of the migrations directories
}

// Open connects to Postgres when dsn is a postgres:// URL, and otherwise to
// the SQLite file sqlitePath, creating its directory.
func Open(ctx context.Context, dsn, sqlitePath string) (*DB, error) {
	cfg := &gorm.Config{
		Logger:         logger.Discard,
		NowFunc:        func() time.Time { return time.Now().UTC() },
		TranslateError: true,
	}
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		g, err := gorm.Open(postgres.Open(dsn), cfg)
		if err != nil {
			return nil, fmt.Errorf("open postgres: %w", err)
		}
		sqlDB, err := g.DB()
		if err != nil {
			return nil, err
		}
		// Bounded, so a burst of cache misses queues for a connection
		// instead of exhausting the server's max_connections.
		sqlDB.SetMaxOpenConns(20)
		sqlDB.SetMaxIdleConns(20)
		sqlDB.SetConnMaxIdleTime(5 * time.Minute)
		db := &DB{Gorm: g, Dialect: "postgres"}
		return db, db.Ping(ctx)
	}
	if dsn != "" {
		return nil, fmt.Errorf("DATABASE_URL must start with postgres:// (got a value that does not)")
	}
	if dir := filepath.Dir(sqlitePath); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create data dir: %w", err)
		}
	}
	// WAL lets readers run beside the one writer; busy_timeout waits instead
	// of failing when the writer holds the lock.
	g, err := gorm.Open(sqlite.Open(sqlitePath+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)"), cfg)
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", sqlitePath, err)
	}
	sqlDB, err := g.DB()
	if err != nil {
		return nil, err
	}
	// SQLite has one writer; a single connection turns lock contention into
	// a queue instead of SQLITE_BUSY errors.
	sqlDB.SetMaxOpenConns(1)
	db := &DB{Gorm: g, Dialect: "sqlite"}
	return db, db.Ping(ctx)
}

// Close closes the connection pool.
func (db *DB) Close() error {
	sqlDB, err := db.Gorm.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}

// SQL returns the underlying pool, for migrations and health checks.
func (db *DB) SQL() (*sql.DB, error) { return db.Gorm.DB() }

// Store is the gateway's access to durable state.
type Store struct {
	db *gorm.DB
}

// NewStore returns a store over db.
func NewStore(db *DB) *Store { return &Store{db: db.Gorm} }

// dbErr turns gorm's missing-row error into the domain's; anything else
// is internal and keeps its cause for the logs.
func dbErr(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, gorm.ErrRecordNotFound):
		return apperr.New(apperr.NotFound, "%s not found", what)
	case errors.Is(err, gorm.ErrDuplicatedKey):
		return apperr.New(apperr.Conflict, "%s already exists", what)
	default:
		return apperr.Wrap(err, what)
	}
}

// Ping checks the database answers, for health checks.
func (db *DB) Ping(ctx context.Context) error {
	sqlDB, err := db.Gorm.DB()
	if err != nil {
		return err
	}
	return sqlDB.PingContext(ctx)
}
