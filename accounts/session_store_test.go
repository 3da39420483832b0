package accounts_test

import (
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// TestSessionsEndOnTheServer runs a session's life against the database:
// Start records it, Resume accepts it on any node, End refuses it on every
// node at once, whoever holds a copy.
func TestSessionsEndOnTheServer(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		ada, _ := e.signup(t, "ada@example.com")
		nodeA := accounts.NewSessions(sessionSecret, sessionTTL, e.clock.Now)
		nodeB := accounts.NewSessions(sessionSecret, sessionTTL, e.clock.Now)

		tok, expires, err := nodeA.Start(ctx, e.store, ada)
		if err != nil {
			t.Fatal(err)
		}
		if want := e.clock.Now().Add(sessionTTL).Truncate(time.Second); !expires.Equal(want) {
			t.Errorf("expires %v, want %v", expires, want)
		}
		for name, node := range map[string]*accounts.Sessions{"A": nodeA, "B": nodeB} {
			if u, err := node.Resume(ctx, e.store, tok); err != nil || u.ID != ada.ID || u.Email != ada.Email {
				t.Fatalf("node %s: Resume = %+v, %v", name, u, err)
			}
		}
		// The row names the session by a hash: the jti is nowhere in it.
		var claims jwt.RegisteredClaims
		if _, _, err := jwt.NewParser().ParseUnverified(tok, &claims); err != nil {
			t.Fatal(err)
		}
		var rows []models.LoginSession
		if err := db.Gorm.Find(&rows).Error; err != nil || len(rows) != 1 {
			t.Fatalf("login_sessions: %+v, %v", rows, err)
		}
		if r := rows[0]; r.UserID != ada.ID || r.ID == claims.ID || strings.Contains(r.ID, claims.ID) || len(r.ID) != 64 || r.RevokedAt != nil {
			t.Errorf("stored session %+v for jti %q", r, claims.ID)
		}

		// A second sign-in is another session; ending one leaves the other.
		other, _, err := nodeB.Start(ctx, e.store, ada)
		if err != nil {
			t.Fatal(err)
		}
		if err := nodeA.End(ctx, e.store, tok); err != nil {
			t.Fatal(err)
		}
		for name, node := range map[string]*accounts.Sessions{"A": nodeA, "B": nodeB} {
			if _, err := node.Resume(ctx, e.store, tok); apperr.CodeOf(err) != apperr.Unauthorized {
				t.Errorf("node %s accepts an ended session: %v", name, err)
			}
		}
		if _, err := nodeA.Resume(ctx, e.store, other); err != nil {
			t.Errorf("ending one session ended another: %v", err)
		}
		// Ending again, or ending nonsense, is harmless.
		if err := nodeB.End(ctx, e.store, tok); err != nil {
			t.Error(err)
		}
		if err := nodeB.End(ctx, e.store, "not.a.jwt"); err != nil {
			t.Error(err)
		}

		// A well-signed token that was never started (an old one, or one
		// minted by whoever learnt the secret) is no session.
		minted, _, err := nodeA.Issue(ada.User)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nodeA.Resume(ctx, e.store, minted); apperr.CodeOf(err) != apperr.Unauthorized {
			t.Errorf("a session never started was accepted: %v", err)
		}

		// A user who is gone takes their sessions along.
		bob, _ := e.signup(t, "bob@example.com")
		bobTok, _, err := nodeA.Start(ctx, e.store, bob)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Gorm.Exec("DELETE FROM users WHERE id = ?", bob.ID).Error; err != nil {
			t.Fatal(err)
		}
		if _, err := nodeA.Resume(ctx, e.store, bobTok); apperr.CodeOf(err) != apperr.Unauthorized {
			t.Errorf("a deleted user's session was accepted: %v", err)
		}

		// Rows of expired sessions go when a later session starts.
		e.clock.Advance(sessionTTL + time.Second)
		if _, _, err := nodeA.Start(ctx, e.store, ada); err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := db.Gorm.Model(&models.LoginSession{}).Count(&n).Error; err != nil || n != 1 {
			t.Errorf("%d session rows after the others expired, want 1 (%v)", n, err)
		}
	})
}
