package accounts_test

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

func TestServiceHashesAtItsCost(t *testing.T) {
	t.Parallel()
	// Cost 12 is slow by design (seconds under -race: one hash in
	// NewService, one in Signup), so this runs on one database only and is
	// declared first so it starts first.
	store := models.NewStore(testdb.SQLite(t))
	dir, err := accounts.NewDirectory(ctx, store, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := accounts.NewService(store, dir, cluster.None{}, accounts.NewLoginThrottle(nil), 12)
	if err != nil {
		t.Fatal(err)
	}
	u, _, err := svc.Signup(ctx, "ada@example.com", "password1", "Acme", "192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	c, err := bcrypt.Cost([]byte(u.PasswordHash))
	if err != nil || c < 12 {
		t.Fatalf("hash cost %d (%v), want >= 12", c, err)
	}
}

func TestSignupValidation(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		bad := []struct {
			name, email, password, org string
			msg                        string // the message names the problem
		}{
			{"no email", "", "password1", "Acme", "email"},
			{"email without domain", "ada", "password1", "Acme", "email"},
			{"email with display name", "Ada <ada@example.com>", "password1", "Acme", "email"},
			{"two emails", "ada@example.com, bo@example.com", "password1", "Acme", "email"},
			{"empty password", "ada@example.com", "", "Acme", "at least 8 bytes"},
			{"password of 7 bytes", "ada@example.com", "1234567", "Acme", "at least 8 bytes"},
			{"password of 73 bytes", "ada@example.com", strings.Repeat("p", 73), "Acme", "at most 72 bytes"},
			// 25 three-byte runes: 25 characters but 75 bytes, past bcrypt's limit.
			{"password of 75 bytes in 25 runes", "ada@example.com", strings.Repeat("€", 25), "Acme", "at most 72 bytes"},
			{"empty org name", "ada@example.com", "password1", "", "organization name"},
			{"blank org name", "ada@example.com", "password1", "   ", "organization name"},
			{"org name of 101 runes", "ada@example.com", "password1", strings.Repeat("é", 101), "organization name"},
		}
		for _, tt := range bad {
			t.Run(tt.name, func(t *testing.T) {
				_, _, err := e.svc.Signup(ctx, tt.email, tt.password, tt.org, "192.0.2.1")
				got := wantErr(t, err, apperr.Unprocessable, "")
				if !strings.Contains(got.Message, tt.msg) {
					t.Errorf("message %q does not name the problem (%q)", got.Message, tt.msg)
				}
			})
		}
		if orgs, err := e.store.Organizations(ctx); err != nil || len(orgs) != 0 {
			t.Fatalf("rejected signups left %d organizations behind (%v)", len(orgs), err)
		}

		good := []struct {
			name, email, password, org string
			wantEmail, wantOrg         string
		}{
			{"password of exactly 8 bytes", "p8@example.com", "12345678", "Acme", "p8@example.com", "Acme"},
			{"password of exactly 72 bytes", "p72@example.com", strings.Repeat("p", 72), "Acme", "p72@example.com", "Acme"},
			{"org name of exactly 100 runes (200 bytes)", "o100@example.com", "password1", strings.Repeat("é", 100), "o100@example.com", strings.Repeat("é", 100)},
			{"spaces trimmed, email lower-cased", "  Mixed.Case@Example.COM ", "password1", "  Spacey  ", "mixed.case@example.com", "Spacey"},
		}
		for _, tt := range good {
			t.Run(tt.name, func(t *testing.T) {
				u, o, err := e.svc.Signup(ctx, tt.email, tt.password, tt.org, "192.0.2.1")
				if err != nil {
					t.Fatal(err)
				}
				if u.Email != tt.wantEmail || o.Name != tt.wantOrg {
					t.Fatalf("stored email %q org %q, want %q %q", u.Email, o.Name, tt.wantEmail, tt.wantOrg)
				}
				if _, err := e.svc.Login(ctx, tt.email, tt.password, "192.0.2.1"); err != nil {
					t.Fatalf("cannot sign in with the password signed up with: %v", err)
				}
			})
		}
	})
}

func TestSignupCreatesOwnerOnFreeTier(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		u, o, err := e.svc.Signup(ctx, "ada@example.com", "password1", "Acme", "192.0.2.1")
		if err != nil {
			t.Fatal(err)
		}
		if u.ID == 0 || o.ID == 0 || u.OrgID != o.ID || u.Role != models.RoleOwner || u.IsAdmin() {
			t.Fatalf("user %+v org %+v", u, o)
		}
		if o.Tier.Name != "free" {
			t.Fatalf("returned org on tier %q", o.Tier.Name)
		}
		stored, err := e.store.Organization(ctx, o.ID)
		if err != nil || stored.Name != "Acme" || stored.Tier.Name != "free" {
			t.Fatalf("stored org %+v %v", stored, err)
		}
		su, err := e.store.UserByEmail(ctx, "ada@example.com")
		if err != nil || su.ID != u.ID || su.AccountRole != models.RoleMember || su.LastOrgID != o.ID {
			t.Fatalf("stored user %+v %v", su, err)
		}
		// Only a bcrypt hash is stored, at the service's cost.
		if su.PasswordHash == "password1" || bcrypt.CompareHashAndPassword([]byte(su.PasswordHash), []byte("password1")) != nil {
			t.Fatalf("stored password hash %q does not verify", su.PasswordHash)
		}
		if c, err := bcrypt.Cost([]byte(su.PasswordHash)); err != nil || c != bcrypt.MinCost {
			t.Fatalf("hash cost %d %v, want the service's %d", c, err, bcrypt.MinCost)
		}

		// The same email again, differing only in case and spaces.
		for _, dup := range []string{"ada@example.com", "ADA@Example.com", " Ada@example.COM "} {
			_, _, err := e.svc.Signup(ctx, dup, "password2", "Other", "192.0.2.1")
			got := wantErr(t, err, apperr.Conflict, "email_taken")
			if got.Message == "" {
				t.Errorf("%q: no message", dup)
			}
		}
		if orgs, _ := e.store.Organizations(ctx); len(orgs) != 1 {
			t.Fatalf("duplicate signups left %d organizations", len(orgs))
		}
		// The first account's password is untouched.
		if _, err := e.svc.Login(ctx, "ada@example.com", "password1", "192.0.2.1"); err != nil {
			t.Fatal(err)
		}
	})
}

func TestLogin(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		ada, _ := e.signup(t, "ada@example.com")

		for _, email := range []string{"ada@example.com", "ADA@example.com", "  ada@Example.com "} {
			u, err := e.svc.Login(ctx, email, "password1", "192.0.2.1")
			if err != nil || u.ID != ada.ID {
				t.Fatalf("login as %q: %+v %v", email, u, err)
			}
		}

		// A wrong password and an unknown email look the same to the caller.
		fails := []struct{ name, email, password string }{
			{"wrong password", "ada@example.com", "password2"},
			{"password differing in case", "ada@example.com", "PASSWORD1"},
			{"empty password", "ada@example.com", ""},
			{"unknown email", "nobody@example.com", "password1"},
			// Unknown emails are checked against a dummy hash for timing; its
			// password must not open a door.
			{"unknown email, dummy hash's password", "nobody@example.com", "not a real password"},
			{"malformed email", "nobody", "password1"},
		}
		var first *apperr.Error
		for _, tt := range fails {
			t.Run(tt.name, func(t *testing.T) {
				u, err := e.svc.Login(ctx, tt.email, tt.password, "192.0.2.99")
				if u.ID != 0 {
					t.Errorf("failed login returned user %+v", u)
				}
				got := wantErr(t, err, apperr.Unauthorized, "invalid_credentials")
				if got.Message == "" {
					t.Fatal("no message")
				}
				if first == nil {
					first = got
				} else if got.Message != first.Message {
					t.Errorf("message %q differs from %q: it tells emails apart", got.Message, first.Message)
				}
			})
		}
	})
}

func TestEnsureAdmin(t *testing.T) {
	t.Parallel()
	t.Run("generated password", func(t *testing.T) {
		testdb.Each(t, func(t *testing.T, db *models.DB) {
			e := newEnv(t, db)
			created, shown, err := e.svc.EnsureAdmin(ctx, "root@example.com", "")
			if err != nil || !created {
				t.Fatalf("created %v err %v", created, err)
			}
			if len(shown) < 8 {
				t.Fatalf("shown password %q", shown)
			}
			u, err := e.svc.Login(ctx, "root@example.com", shown, "192.0.2.1")
			if err != nil || !u.IsAdmin() {
				t.Fatalf("login with the shown password: %+v %v", u, err)
			}
			o, err := e.store.Organization(ctx, u.OrgID)
			if err != nil || o.Tier.Name != "premium" {
				t.Fatalf("admin's org %+v %v", o, err)
			}

			// Once there is an admin, nothing more is created.
			created, shown2, err := e.svc.EnsureAdmin(ctx, "second@example.com", "")
			if err != nil || created || shown2 != "" {
				t.Fatalf("second call: created %v shown %q err %v", created, shown2, err)
			}
			if _, err := e.store.UserByEmail(ctx, "second@example.com"); apperr.CodeOf(err) != apperr.NotFound {
				t.Fatalf("second admin was created: %v", err)
			}
			if orgs, _ := e.store.Organizations(ctx); len(orgs) != 1 {
				t.Fatalf("%d organizations", len(orgs))
			}
			// The first admin's password is unchanged.
			if _, err := e.svc.Login(ctx, "root@example.com", shown, "192.0.2.1"); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("given password", func(t *testing.T) {
		testdb.Each(t, func(t *testing.T, db *models.DB) {
			e := newEnv(t, db)
			created, shown, err := e.svc.EnsureAdmin(ctx, "root@example.com", "correct horse")
			if err != nil || !created || shown != "" {
				t.Fatalf("created %v shown %q err %v", created, shown, err)
			}
			if u, err := e.svc.Login(ctx, "root@example.com", "correct horse", "192.0.2.1"); err != nil || !u.IsAdmin() {
				t.Fatalf("%+v %v", u, err)
			}
		})
	})
	t.Run("given password too short", func(t *testing.T) {
		testdb.Each(t, func(t *testing.T, db *models.DB) {
			e := newEnv(t, db)
			created, _, err := e.svc.EnsureAdmin(ctx, "root@example.com", "short")
			wantErr(t, err, apperr.Unprocessable, "")
			if exists, _ := e.store.AdminExists(ctx); created || exists {
				t.Fatalf("created %v, admin exists %v", created, exists)
			}
		})
	})
}

func TestCreateTokenExpiry(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		u, _ := e.signup(t, "ada@example.com")
		tests := []struct {
			days    int
			ok      bool
			wantExp time.Duration // 0: never expires
		}{
			{-1, false, 0},
			{accounts.MaxTokenDays + 1, false, 0},
			{0, true, 0},
			{1, true, 24 * time.Hour},
			{30, true, 30 * 24 * time.Hour},
			{accounts.MaxTokenDays, true, accounts.MaxTokenDays * 24 * time.Hour},
		}
		for _, tt := range tests {
			before := time.Now()
			tok, secret, err := e.svc.CreateToken(ctx, u, "  ci  ", tt.days)
			after := time.Now()
			if !tt.ok {
				got := wantErr(t, err, apperr.Unprocessable, "")
				if !strings.Contains(got.Message, "expires_in_days") || secret != "" {
					t.Errorf("%d days: message %q secret %q", tt.days, got.Message, secret)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%d days: %v", tt.days, err)
			}
			if tok.Name != "ci" || tok.OrgID != u.OrgID || tok.UserID != u.ID || !models.CheckTokenSyntax(secret) || tok.Hash != models.HashToken(secret) {
				t.Fatalf("%d days: token %+v secret %q", tt.days, tok, secret)
			}
			if tt.wantExp == 0 {
				if tok.ExpiresAt != nil {
					t.Errorf("0 days: expires at %v, want never", tok.ExpiresAt)
				}
				continue
			}
			if tok.ExpiresAt == nil {
				t.Fatalf("%d days: no expiry", tt.days)
			}
			// AddDate counts calendar days; allow an hour for a DST change.
			lo, hi := before.Add(tt.wantExp-time.Hour), after.Add(tt.wantExp+time.Hour)
			if tok.ExpiresAt.Before(lo) || tok.ExpiresAt.After(hi) {
				t.Errorf("%d days: expires at %v, want about %v", tt.days, tok.ExpiresAt, before.Add(tt.wantExp))
			}
		}
		// Only the valid requests made tokens.
		if list, _ := e.store.APITokens(ctx, u.OrgID); len(list) != 4 {
			t.Fatalf("%d tokens stored, want 4", len(list))
		}
		_, _, err := e.svc.CreateToken(ctx, u, "   ", 0)
		wantErr(t, err, apperr.Unprocessable, "")
	})
}

func TestAdminOnlyChanges(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		owner, org := e.signup(t, "ada@example.com")
		member := owner
		member.Role = models.RoleMember
		for _, u := range []models.User{owner.User, member.User} {
			_, err := e.svc.UpdateTier(ctx, u, "free", models.TierSettings{Capacity: 1_000_000, RefillPerSec: 1000})
			wantErr(t, err, apperr.Forbidden, "")
			_, err = e.svc.SetOrganizationTier(ctx, u, org.ID, "premium")
			wantErr(t, err, apperr.Forbidden, "")
		}
		if tier, _ := e.store.TierByName(ctx, "free"); tier.Capacity != 30 {
			t.Fatalf("free tier changed by a non-admin: %+v", tier)
		}
		if o, _ := e.store.Organization(ctx, org.ID); o.Tier.Name != "free" {
			t.Fatalf("org moved by a non-admin to %q", o.Tier.Name)
		}

		admin := e.admin(t)
		tier, err := e.svc.UpdateTier(ctx, admin, "free", models.TierSettings{Capacity: 45, RefillPerSec: 2})
		if err != nil || tier.Capacity != 45 {
			t.Fatalf("admin UpdateTier: %+v %v", tier, err)
		}
		if d := e.dir.Tier("free"); d == nil || d.Capacity != 45 || d.RefillPerSec != 2 {
			t.Fatalf("directory's free tier %+v", d)
		}
		o, err := e.svc.SetOrganizationTier(ctx, admin, org.ID, "premium")
		if err != nil || o.Tier.Name != "premium" {
			t.Fatalf("admin SetOrganizationTier: %+v %v", o, err)
		}
		_, err = e.svc.UpdateTier(ctx, admin, "free", models.TierSettings{Capacity: 0, RefillPerSec: 2})
		wantErr(t, err, apperr.Unprocessable, "")
		_, err = e.svc.SetOrganizationTier(ctx, admin, org.ID, "gold")
		wantErr(t, err, apperr.NotFound, "")
	})
}
