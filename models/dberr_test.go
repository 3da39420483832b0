package models

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sluicehq/sluice/apperr"
)

// TestDBErrCodes: what each kind of store failure becomes. Only failures
// to reach the database are unavailable; the database's own refusals keep
// their meaning, and a client that went away is not an outage.
func TestDBErrCodes(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	tests := []struct {
		name string
		err  error
		want apperr.Code
	}{
		{"nil", nil, ""},
		{"missing row", gorm.ErrRecordNotFound, apperr.NotFound},
		{"unique violation", gorm.ErrDuplicatedKey, apperr.Conflict},
		{"refused dial", refused, apperr.Unavailable},
		{"reset connection", fmt.Errorf("read: %w", syscall.ECONNRESET), apperr.Unavailable},
		{"broken pipe", fmt.Errorf("write: %w", syscall.EPIPE), apperr.Unavailable},
		{"connection cut mid-answer", fmt.Errorf("failed to receive message: %w", io.ErrUnexpectedEOF), apperr.Unavailable},
		{"bad pooled connection", driver.ErrBadConn, apperr.Unavailable},
		{"deadline talking to the database", fmt.Errorf("query: %w", context.DeadlineExceeded), apperr.Unavailable},
		{"server shutting down", &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}, apperr.Unavailable},
		{"server starting", &pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}, apperr.Unavailable},
		{"too many connections", &pgconn.PgError{Code: "53300"}, apperr.Unavailable},
		{"connection exception", &pgconn.PgError{Code: "08006"}, apperr.Unavailable},
		{"undefined table", &pgconn.PgError{Code: "42P01", Message: "relation does not exist"}, apperr.Internal},
		{"client went away", context.Canceled, apperr.Internal},
		{"anything else", errors.New("boom"), apperr.Internal},
		{"a domain error from a transaction", apperr.New(apperr.Unprocessable, "name is too long"), apperr.Unprocessable},
		{"an internal one wrapping a refused dial", apperr.Wrap(refused, "audit"), apperr.Unavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := dbErr(tc.err, "token")
			if got := apperr.CodeOf(err); got != tc.want {
				t.Fatalf("dbErr(%v) is %q, want %q", tc.err, got, tc.want)
			}
			if tc.want != apperr.Unavailable {
				return
			}
			e := apperr.As(err)
			if e.Message != errDatabaseDown || e.Reason != "database_unavailable" || e.RetryAfter != DatabaseRetryAfter {
				t.Fatalf("got %q (reason %q, retry after %v)", e.Message, e.Reason, e.RetryAfter)
			}
			if !errors.Is(err, tc.err) {
				t.Fatalf("the cause %v is not kept for the logs", tc.err)
			}
		})
	}
}

// TestStoreWithoutADatabase: with nothing listening where Postgres should
// be, sign-in, sign-up and token creation fail as unavailable, not as bugs,
// and say nothing of the cause.
func TestStoreWithoutADatabase(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	g, err := gorm.Open(postgres.Open("postgres://sluice@"+addr+"/sluice?sslmode=disable&connect_timeout=5"),
		&gorm.Config{Logger: logger.Discard, TranslateError: true, DisableAutomaticPing: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if db, err := g.DB(); err == nil {
			db.Close()
		}
	})
	s := &Store{db: g}
	ctx := context.Background()
	_, err1 := s.UserByEmail(ctx, "ada@example.com")
	_, _, err2 := s.CreateOrganizationWithOwner(ctx, "A", "free", "ada@example.com", "hash", RoleOwner)
	_, _, err3 := s.CreateAPIToken(ctx, 1, 1, "ci", nil)
	for i, err := range []error{err1, err2, err3} {
		e := apperr.As(err)
		if e.Code != apperr.Unavailable || e.Message != errDatabaseDown || e.RetryAfter != DatabaseRetryAfter {
			t.Errorf("call %d: %v, want unavailable with a Retry-After", i+1, err)
		}
	}
}
