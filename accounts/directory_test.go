package accounts_test

import (
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// token creates an API token through the service and returns it with its
// plain text.
func (e *env) token(t *testing.T, u models.Member, name string) (models.APIToken, string) {
	t.Helper()
	tok, secret, err := e.svc.CreateToken(ctx, u, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tok, secret
}

// typo changes the character at i of a token to another base62 character.
func typo(secret string, i int) string {
	b := []byte(secret)
	if b[i] == 'a' {
		b[i] = 'b'
	} else {
		b[i] = 'a'
	}
	return string(b)
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		ada, org := e.signup(t, "ada@example.com")
		valid, validSecret := e.token(t, ada, "valid")
		_, revokedSecret := e.token(t, ada, "revoked")
		revoked, _ := e.store.APITokens(ctx, org.ID)
		if _, err := e.svc.RevokeToken(ctx, ada, revoked[0].ID); err != nil {
			t.Fatal(err)
		}
		past := e.clock.Now().Add(-time.Minute)
		_, expiredSecret, err := e.store.CreateAPIToken(ctx, org.ID, ada.ID, "expired", &past)
		if err != nil {
			t.Fatal(err)
		}
		unknown, err := models.NewTokenSecret()
		if err != nil {
			t.Fatal(err)
		}

		refused := []struct {
			name, secret, reason string
		}{
			{"empty", "", "missing_api_key"},
			{"prefix and one character", "sk_sluice_x", "malformed_api_key"},
			{"one body character changed", typo(validSecret, len(models.TokenPrefix)+5), "malformed_api_key"},
			{"one checksum character changed", typo(validSecret, len(validSecret)-1), "malformed_api_key"},
			{"one character short", validSecret[:len(validSecret)-1], "malformed_api_key"},
			{"one character more", validSecret + "a", "malformed_api_key"},
			{"with the Bearer scheme", "Bearer " + validSecret, "malformed_api_key"},
			{"trailing newline", validSecret + "\n", "malformed_api_key"},
			{"another prefix", "sk_other__" + validSecret[len(models.TokenPrefix):], "malformed_api_key"},
			{"well formed but unknown", unknown, "invalid_api_key"},
			{"revoked", revokedSecret, "revoked_api_key"},
			{"expired", expiredSecret, "expired_api_key"},
		}
		for _, tt := range refused {
			t.Run(tt.name, func(t *testing.T) {
				// Twice: the second answer may come from the cache and must agree.
				for range 2 {
					c, err := e.dir.Authenticate(ctx, tt.secret)
					if !reflect.DeepEqual(c, accounts.Caller{}) {
						t.Errorf("refused key returned caller %+v", c)
					}
					got := wantErr(t, err, apperr.Unauthorized, tt.reason)
					if got.Message == "" {
						t.Error("no message")
					}
				}
			})
		}

		t.Run("valid", func(t *testing.T) {
			first, err := e.dir.Authenticate(ctx, validSecret)
			if err != nil {
				t.Fatal(err)
			}
			if first.TokenID != valid.ID || first.OrgID != org.ID || first.UserID != ada.ID {
				t.Fatalf("caller %+v, want token %d org %d user %d", first, valid.ID, org.ID, ada.ID)
			}
			if first.Tier == nil || first.Tier.Name != "free" || first.Tier.Capacity != 30 {
				t.Fatalf("tier %+v", first.Tier)
			}
			if first.RequestsKey == "" || first.TPMKey == "" || first.TokenKey == "" {
				t.Fatalf("empty bucket keys: %+v", first)
			}
			// From the cache, and after the cache is refilled, the same caller.
			cached, err := e.dir.Authenticate(ctx, validSecret)
			if err != nil || !reflect.DeepEqual(cached, first) {
				t.Fatalf("cached caller %+v %v, want %+v", cached, err, first)
			}
			e.clock.Advance(dirTTL + time.Second)
			refilled, err := e.dir.Authenticate(ctx, validSecret)
			if err != nil || refilled.RequestsKey != first.RequestsKey || refilled.TokenID != first.TokenID || refilled.Tier.Name != "free" {
				t.Fatalf("refilled caller %+v %v, want %+v", refilled, err, first)
			}

			// Another token of the same organization spends from the same
			// buckets (the tier binds the organization), but is its own
			// token for freezes.
			_, secondSecret := e.token(t, ada, "second")
			second, err := e.dir.Authenticate(ctx, secondSecret)
			if err != nil || second.OrgID != org.ID || second.TokenID == first.TokenID {
				t.Fatalf("second token %+v %v; first %+v", second, err, first)
			}
			if second.RequestsKey != first.RequestsKey || second.TPMKey != first.TPMKey {
				t.Errorf("second token's buckets %q, %q; want the organization's %q, %q",
					second.RequestsKey, second.TPMKey, first.RequestsKey, first.TPMKey)
			}
			if second.TokenKey == first.TokenKey {
				t.Errorf("both tokens have the token key %q", first.TokenKey)
			}
		})
	})
}

func TestAuthenticateExpiresWhileCached(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		ada, org := e.signup(t, "ada@example.com")

		// Stored expiry, checked against the directory's clock on every call.
		soon := e.clock.Now().Add(10 * time.Second)
		_, secret, err := e.store.CreateAPIToken(ctx, org.ID, ada.ID, "soon", &soon)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.dir.Authenticate(ctx, secret); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(10*time.Second - time.Millisecond)
		if _, err := e.dir.Authenticate(ctx, secret); err != nil {
			t.Fatalf("1 ms before expiry: %v", err)
		}
		e.clock.Advance(time.Millisecond) // still well within the cache TTL
		_, err = e.dir.Authenticate(ctx, secret)
		wantErr(t, err, apperr.Unauthorized, "expired_api_key")

		// A token made through the service to last a day expires after one.
		_, daySecret, err := e.svc.CreateToken(ctx, ada, "day", 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.dir.Authenticate(ctx, daySecret); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(23 * time.Hour)
		if _, err := e.dir.Authenticate(ctx, daySecret); err != nil {
			t.Fatalf("after 23 h: %v", err)
		}
		e.clock.Advance(2 * time.Hour)
		_, err = e.dir.Authenticate(ctx, daySecret)
		wantErr(t, err, apperr.Unauthorized, "expired_api_key")
	})
}

func TestDirectoryCachesUntilTTL(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		ada, org := e.signup(t, "ada@example.com")
		tok, secret := e.token(t, ada, "ci")
		if _, err := e.dir.Authenticate(ctx, secret); err != nil {
			t.Fatal(err)
		}

		// Revoked behind the directory's back: the cache still says yes...
		if _, err := e.store.RevokeAPIToken(ctx, ada.User, org.ID, tok.ID); err != nil {
			t.Fatal(err)
		}
		for _, step := range []time.Duration{0, dirTTL / 2, dirTTL/2 - time.Nanosecond} {
			e.clock.Advance(step)
			if c, err := e.dir.Authenticate(ctx, secret); err != nil || c.TokenID != tok.ID {
				t.Fatalf("within the TTL the cached entry should answer: %+v %v", c, err)
			}
		}
		// ...until the TTL has passed and the database is asked again.
		e.clock.Advance(time.Nanosecond)
		_, err := e.dir.Authenticate(ctx, secret)
		wantErr(t, err, apperr.Unauthorized, "revoked_api_key")
	})
}

func TestRevokeTokenIsImmediate(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		ada, _ := e.signup(t, "ada@example.com")
		bo, _ := e.signup(t, "bo@example.com")
		tok, secret := e.token(t, ada, "ci")
		_, keep := e.token(t, ada, "keep")
		for _, s := range []string{secret, keep} {
			if _, err := e.dir.Authenticate(ctx, s); err != nil {
				t.Fatal(err)
			}
		}

		// Another organization cannot revoke it, and the cache is untouched.
		_, err := e.svc.RevokeToken(ctx, bo, tok.ID)
		wantErr(t, err, apperr.NotFound, "")
		if _, err := e.dir.Authenticate(ctx, secret); err != nil {
			t.Fatalf("after another org's attempt: %v", err)
		}

		got, err := e.svc.RevokeToken(ctx, ada, tok.ID)
		if err != nil || got.RevokedAt == nil {
			t.Fatalf("%+v %v", got, err)
		}
		// No clock movement: refused at once.
		_, err = e.dir.Authenticate(ctx, secret)
		wantErr(t, err, apperr.Unauthorized, "revoked_api_key")
		// The organization's other token is unaffected.
		if _, err := e.dir.Authenticate(ctx, keep); err != nil {
			t.Fatalf("other token: %v", err)
		}
		// Revoking twice is harmless.
		if _, err := e.svc.RevokeToken(ctx, ada, tok.ID); err != nil {
			t.Fatal(err)
		}
		_, err = e.dir.Authenticate(ctx, secret)
		wantErr(t, err, apperr.Unauthorized, "revoked_api_key")
	})
}

func TestTierChangesApplyAtOnce(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		admin := e.admin(t)
		ada, org := e.signup(t, "ada@example.com")
		bo, _ := e.signup(t, "bo@example.com")
		_, adaSecret := e.token(t, ada, "ci")
		_, boSecret := e.token(t, bo, "ci")
		before, err := e.dir.Authenticate(ctx, adaSecret)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.dir.Authenticate(ctx, boSecret); err != nil {
			t.Fatal(err)
		}

		// Moving ada's organization to premium, with no clock movement.
		if _, err := e.svc.SetOrganizationTier(ctx, admin, org.ID, "premium"); err != nil {
			t.Fatal(err)
		}
		c, err := e.dir.Authenticate(ctx, adaSecret)
		if err != nil || c.Tier.Name != "premium" || c.Tier.Capacity != 200 {
			t.Fatalf("after the move: %+v %v", c.Tier, err)
		}
		if c.RequestsKey != before.RequestsKey {
			t.Errorf("RequestsKey changed with the tier: %q -> %q", before.RequestsKey, c.RequestsKey)
		}
		if c, _ := e.dir.Authenticate(ctx, boSecret); c.Tier == nil || c.Tier.Name != "free" {
			t.Fatalf("another organization moved too: %+v", c.Tier)
		}

		// Editing the free tier's capacity.
		if _, err := e.svc.UpdateTier(ctx, admin, "free", models.TierSettings{Capacity: 77, RefillPerSec: 1.5}); err != nil {
			t.Fatal(err)
		}
		c, err = e.dir.Authenticate(ctx, boSecret)
		if err != nil || c.Tier.Name != "free" || c.Tier.Capacity != 77 || c.Tier.RefillPerSec != 1.5 {
			t.Fatalf("after the edit: %+v %v", c.Tier, err)
		}
		// A caller handed out before keeps its snapshot: tiers are replaced,
		// never changed in place under a reader.
		if before.Tier.Capacity != 30 {
			t.Errorf("an earlier caller's tier changed in place to capacity %d", before.Tier.Capacity)
		}
		if c, _ := e.dir.Authenticate(ctx, adaSecret); c.Tier.Name != "premium" || c.Tier.Capacity != 200 {
			t.Fatalf("premium changed by the free edit: %+v", c.Tier)
		}
	})
}

func TestDirectoryReadsDatabaseOnlyOnMiss(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		e := newEnv(t, db)
		ada, _ := e.signup(t, "ada@example.com")
		tok, secret := e.token(t, ada, "ci")
		unknown, _ := models.NewTokenSecret()
		neverSeen, _ := models.NewTokenSecret()
		if _, err := e.dir.Authenticate(ctx, secret); err != nil {
			t.Fatal(err)
		}
		_, err := e.dir.Authenticate(ctx, unknown)
		wantErr(t, err, apperr.Unauthorized, "invalid_api_key")

		// With the database gone, cached answers, positive and negative,
		// still come back; anything else needs the database and fails.
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(dirTTL - time.Second)
		if c, err := e.dir.Authenticate(ctx, secret); err != nil || c.TokenID != tok.ID {
			t.Fatalf("cached token: %+v %v", c, err)
		}
		_, err = e.dir.Authenticate(ctx, unknown)
		wantErr(t, err, apperr.Unauthorized, "invalid_api_key")
		_, err = e.dir.Authenticate(ctx, neverSeen)
		wantErr(t, err, apperr.Internal, "")

		// Past the TTL the cache asks the database, and a failure there is
		// neither a pass nor remembered as "unknown".
		e.clock.Advance(time.Second)
		_, err = e.dir.Authenticate(ctx, secret)
		wantErr(t, err, apperr.Internal, "")
		_, err = e.dir.Authenticate(ctx, unknown)
		wantErr(t, err, apperr.Internal, "")
		_, err = e.dir.Authenticate(ctx, secret)
		wantErr(t, err, apperr.Internal, "")
	})
}

func TestAuthenticateConcurrent(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		if db.Dialect == "postgres" {
			// 100 simultaneous misses would open 100 connections and can
			// exhaust a Postgres shared with other tests.
			sqlDB, err := db.SQL()
			if err != nil {
				t.Fatal(err)
			}
			sqlDB.SetMaxOpenConns(8)
		}
		e := newEnv(t, db)
		admin := e.admin(t)
		type want struct {
			secret       string
			tokenID, org int64
		}
		var tokens []want
		for i := range 2 {
			u, o := e.signup(t, fmt.Sprintf("user%d@example.com", i))
			for j := range 5 {
				tok, secret := e.token(t, u, fmt.Sprintf("t%d", j))
				tokens = append(tokens, want{secret, tok.ID, o.ID})
			}
		}
		unknown, _ := models.NewTokenSecret()

		const goroutines, calls = 100, 10
		errs := make(chan error, goroutines*calls)
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				for i := range calls {
					// Half hammer one token, half spread over all of them.
					w := tokens[0]
					if g%2 == 1 {
						w = tokens[(g+i)%len(tokens)]
					}
					c, err := e.dir.Authenticate(ctx, w.secret)
					switch {
					case err != nil:
						errs <- fmt.Errorf("goroutine %d: %v", g, err)
					case c.TokenID != w.tokenID || c.OrgID != w.org || c.Tier == nil || c.RequestsKey == "":
						errs <- fmt.Errorf("goroutine %d: caller %+v, want token %d org %d", g, c, w.tokenID, w.org)
					}
					if g%10 == 0 {
						if _, err := e.dir.Authenticate(ctx, unknown); apperr.As(err).Reason != "invalid_api_key" {
							errs <- fmt.Errorf("goroutine %d: unknown token: %v", g, err)
						}
					}
				}
			})
		}
		// Cache invalidation and tier reloads racing with the readers.
		wg.Go(func() {
			for range 5 {
				e.dir.ForgetOrganization(tokens[0].org)
				if _, err := e.svc.UpdateTier(ctx, admin, "free", models.TierSettings{Capacity: 40, RefillPerSec: 1}); err != nil {
					errs <- err
				}
				e.clock.Advance(dirTTL)
			}
		})
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}
