package accounts_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/clocktest"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/models"
)

var ctx = context.Background()

// env is a service wired the way main wires it, on one database, with the
// directory and the login throttle on one fake clock.
type env struct {
	store    *models.Store
	clock    *clocktest.Clock
	dir      *accounts.Directory
	throttle *accounts.LoginThrottle
	svc      *accounts.Service
}

// dirTTL is the directory's cache TTL in these tests.
const dirTTL = 30 * time.Second

func newEnv(t *testing.T, db *models.DB) *env {
	t.Helper()
	store := models.NewStore(db)
	// CreateToken stamps expiry with the real clock, so the fake one starts
	// at the real now.
	clock := clocktest.New(time.Now())
	dir, err := accounts.NewDirectory(ctx, store, dirTTL, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	throttle := accounts.NewLoginThrottle(clock.Now)
	svc, err := accounts.NewService(store, dir, cluster.None{}, throttle, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return &env{store: store, clock: clock, dir: dir, throttle: throttle, svc: svc}
}

// signup creates an owner of a free organization with password "password1".
func (e *env) signup(t *testing.T, email string) (models.Member, models.Organization) {
	t.Helper()
	u, o, err := e.svc.Signup(ctx, email, "password1", "Org of "+email, "192.0.2.1")
	if err != nil {
		t.Fatalf("signup %s: %v", email, err)
	}
	return u, o
}

// admin creates an admin account and returns it.
func (e *env) admin(t *testing.T) models.User {
	t.Helper()
	if _, _, err := e.svc.EnsureAdmin(ctx, "root@example.com", "admin-password"); err != nil {
		t.Fatal(err)
	}
	u, err := e.store.UserByEmail(ctx, "root@example.com")
	if err != nil || !u.IsAdmin() {
		t.Fatalf("admin %+v %v", u, err)
	}
	return u
}

// wantErr fails t unless err is an apperr with code and, when given, reason.
func wantErr(t *testing.T, err error, code apperr.Code, reason string) *apperr.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s %q", code, reason)
	}
	e := apperr.As(err)
	if e.Code != code || (reason != "" && e.Reason != reason) {
		t.Fatalf("got %s %q (%v), want %s %q", e.Code, e.Reason, err, code, reason)
	}
	return e
}
