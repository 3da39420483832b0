// Package models holds Sluice's gorm models and the stores that query them.
// Every query lives here; every tenant-owned query is scoped by organization,
// takes ctx first, and turns a missing row into apperr.NotFound.
package models

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/jackc/pgx/v5/pgconn"
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
// the SQLite file sqlitePath, creating its directory (0700) and the file
// (0600) when they are missing.
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
	if sqlitePath != "" && sqlitePath != ":memory:" {
		// The database holds every secret Sluice keeps, so nobody else may
		// read it: created 0600 before SQLite opens it, which gives its
		// -wal and -shm files the same mode.
		f, err := os.OpenFile(sqlitePath, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", sqlitePath, err)
		}
		f.Close()
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
	db  *gorm.DB
	now func() time.Time
	// emailVerification: Sluice sends mail, so addresses can be verified
	// and tiers' CreditNeedsVerifiedEmail is in force.
	emailVerification bool
}

// StoreOption adjusts a Store.
type StoreOption func(*Store)

// WithClock has the store stamp what it records as happening now (an
// organization's creation, its moves between tiers, a tier's new terms)
// with now instead of the wall clock: tests move time by hand.
func WithClock(now func() time.Time) StoreOption {
	return func(s *Store) { s.now = now }
}

// WithEmailVerification puts tiers' CreditNeedsVerifiedEmail in force:
// for a node that sends mail, where an address can be verified. Without
// mail nobody could verify, so the setting waits.
func WithEmailVerification() StoreOption {
	return func(s *Store) { s.emailVerification = true }
}

// NewStore returns a store over db.
func NewStore(db *DB, opts ...StoreOption) *Store {
	s := &Store{db: db.Gorm, now: time.Now}
	for _, o := range opts {
		o(s)
	}
	return s
}

// DatabaseRetryAfter is how long a client is told to wait while the
// database cannot be reached: about what a restart or a failover takes.
const DatabaseRetryAfter = 5 * time.Second

// errDatabaseDown is what a client refused because the database cannot be
// reached is told; the driver's error stays in the Cause, never shown.
const errDatabaseDown = "the database is unavailable right now; retry shortly"

// dbErr turns a store error into the domain's: a missing row is not_found,
// a unique violation a conflict, a database that cannot be reached (refused,
// reset or timed-out connections, a server shutting down) unavailable, with
// a Retry-After; anything else is internal and keeps its cause for the logs.
// Errors that already are domain errors (from inside a transaction) pass
// through unchanged.
func dbErr(err error, what string) error {
	var e *apperr.Error
	switch {
	case err == nil:
		return nil
	case unreachable(err):
		if errors.As(err, &e) && e.Code != apperr.Internal {
			return err
		}
		return &apperr.Error{Code: apperr.Unavailable, Reason: "database_unavailable", Message: errDatabaseDown,
			Cause: fmt.Errorf("%s: %w", what, err), RetryAfter: DatabaseRetryAfter}
	case errors.As(err, &e):
		return err
	case errors.Is(err, gorm.ErrRecordNotFound):
		return apperr.New(apperr.NotFound, "%s not found", what)
	case errors.Is(err, gorm.ErrDuplicatedKey):
		return apperr.New(apperr.Conflict, "%s already exists", what)
	default:
		return apperr.Wrap(err, what)
	}
}

// unreachable says whether err means the database could not be talked to,
// rather than that it refused the statement: the request may succeed once
// the database is back.
func unreachable(err error) bool {
	var connect *pgconn.ConnectError
	if errors.As(err, &connect) {
		return true
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		// The server answered: only its own "not now" is an outage.
		switch pg.Code {
		case "57P01", "57P02", "57P03", // admin_shutdown, crash_shutdown, cannot_connect_now
			"53300": // too_many_connections
			return true
		}
		return strings.HasPrefix(pg.Code, "08") // connection_exception
	}
	var netErr net.Error
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) ||
		errors.As(err, &netErr)
}

// Ping checks the database answers, for health checks.
func (db *DB) Ping(ctx context.Context) error {
	sqlDB, err := db.Gorm.DB()
	if err != nil {
		return err
	}
	return sqlDB.PingContext(ctx)
}
