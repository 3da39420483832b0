package models

import (
	"context"
	"database/sql"
	"sync"
)

// AdvisoryLeader elects one node of a Postgres-backed cluster with a
// session-level advisory lock held on a dedicated connection: whoever holds
// the lock leads, and if that node dies its connection closes and the lock
// is free for the next node to take. On SQLite, a single node, it always
// leads.
type AdvisoryLeader struct {
	db      *DB
	lockKey int64

	mu   sync.Mutex
	conn *sql.Conn // non-nil while we hold the lock
}

// NewAdvisoryLeader returns a leader election on lockKey.
func NewAdvisoryLeader(db *DB, lockKey int64) *AdvisoryLeader {
	return &AdvisoryLeader{db: db, lockKey: lockKey}
}

// Lead reports whether this node leads now, taking the lock if it is free.
func (l *AdvisoryLeader) Lead(ctx context.Context) (bool, error) {
	if l.db.Dialect != "postgres" {
		return true, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		// Still ours as long as the session that holds it is alive.
		if err := l.conn.PingContext(ctx); err == nil {
			return true, nil
		}
		l.conn.Close()
		l.conn = nil
	}
	pool, err := l.db.SQL()
	if err != nil {
		return false, err
	}
	conn, err := pool.Conn(ctx)
	if err != nil {
		return false, err
	}
	var got bool
	if err := conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", l.lockKey).Scan(&got); err != nil || !got {
		conn.Close()
		return false, err
	}
	l.conn = conn
	return true, nil
}

// Resign gives the lock up, on shutdown, so another node takes over at once.
func (l *AdvisoryLeader) Resign() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		l.conn.ExecContext(context.Background(), "SELECT pg_advisory_unlock($1)", l.lockKey)
		l.conn.Close()
		l.conn = nil
	}
}
