package models_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

func resetMail(to string) *models.Mail {
	return &models.Mail{Kind: "password_reset", ToAddr: to, Subject: "Reset", BodyText: "a link"}
}

// TestResetLinksWorkOnceForAnHour: a reset link sets the password and
// ends every session; used again, or after its hour (by the store's
// clock), it is refused saying why; a newer link replaces an older one.
func TestResetLinksWorkOnceForAnHour(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		tm := newTeam(t, db)
		s, owner := tm.s, tm.owner
		for _, id := range []string{"s1", "s2"} {
			if err := s.CreateLoginSession(ctx, models.LoginSession{ID: id, UserID: owner.ID, CreatedAt: tm.clock.Now(), ExpiresAt: tm.clock.Now().Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
		}
		token := models.NewLinkToken()
		if made, err := s.CreatePasswordReset(ctx, owner.User, token, nil, resetMail(owner.Email)); !made || err != nil {
			t.Fatalf("create: %v %v", made, err)
		}
		tm.clock.Advance(59 * time.Minute)
		u, ended, err := s.ResetPassword(ctx, token, "new-hash")
		if err != nil || ended != 2 || u.PasswordHash != "new-hash" {
			t.Fatalf("reset: %+v %d %v", u, ended, err)
		}
		if u.EmailVerifiedAt == nil {
			t.Error("a mailed reset link did not verify the address it was mailed to")
		}
		for _, id := range []string{"s1", "s2"} {
			if _, err := s.LoginSessionMember(ctx, id, owner.ID); apperr.CodeOf(err) != apperr.NotFound {
				t.Errorf("session %s after the reset: %v", id, err)
			}
		}
		_, _, err = s.ResetPassword(ctx, token, "again")
		expectReason(t, err, "link_used", "this password reset link has already been used (each works once)")

		late := models.NewLinkToken()
		if _, err := s.CreatePasswordReset(ctx, owner.User, late, nil, resetMail(owner.Email)); err != nil {
			t.Fatal(err)
		}
		tm.clock.Advance(time.Hour)
		_, _, err = s.ResetPassword(ctx, late, "late")
		expectReason(t, err, "link_expired", "links work for an hour")

		older, newer := models.NewLinkToken(), models.NewLinkToken()
		for _, tok := range []string{older, newer} {
			if _, err := s.CreatePasswordReset(ctx, owner.User, tok, nil, resetMail(owner.Email)); err != nil {
				t.Fatal(err)
			}
		}
		_, _, err = s.ResetPassword(ctx, older, "older")
		expectReason(t, err, "link_used", "already been used")
		if _, _, err := s.ResetPassword(ctx, newer, "newer"); err != nil {
			t.Fatalf("the newest link: %v", err)
		}
		_, _, err = s.ResetPassword(ctx, "lnk_AAAAAAAAAAAAAAAAAAAAAAAAAA", "x")
		expectReason(t, err, "link_not_found", "this password reset link is not valid")
	})
}

// TestResetLinkIsUsedOnceUnderRace: twenty uses of one link at once set
// the password once.
func TestResetLinkIsUsedOnceUnderRace(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		tm := newTeam(t, db)
		token := models.NewLinkToken()
		if _, err := tm.s.CreatePasswordReset(ctx, tm.owner.User, token, &tm.owner.User, nil); err != nil {
			t.Fatal(err)
		}
		var wins, used atomic.Int32
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				_, _, err := tm.s.ResetPassword(ctx, token, "h")
				switch {
				case err == nil:
					wins.Add(1)
				case apperr.As(err).Reason == "link_used":
					used.Add(1)
				case apperr.CodeOf(err) == apperr.Unavailable: // SQLite's one writer kept it waiting past its busy timeout
				default:
					t.Errorf("use: %v", err)
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d uses succeeded (%d told it was used), want 1", wins.Load(), used.Load())
		}
	})
}

// TestMailBoundsPerAddress: anonymous requests get at most three mails of
// a kind to one address an hour; the fourth reset makes nothing.
func TestMailBoundsPerAddress(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		tm := newTeam(t, db)
		for i := range models.MailsPerAddressHour + 1 {
			made, err := tm.s.CreatePasswordReset(ctx, tm.owner.User, models.NewLinkToken(), nil, resetMail(tm.owner.Email))
			if err != nil || made != (i < models.MailsPerAddressHour) {
				t.Fatalf("reset %d: made %v, %v", i+1, made, err)
			}
		}
		mails, _ := tm.s.Mails(ctx, tm.owner.Email)
		if len(mails) != models.MailsPerAddressHour {
			t.Fatalf("%d mails queued, want %d", len(mails), models.MailsPerAddressHour)
		}
		tm.clock.Advance(time.Hour)
		if made, err := tm.s.CreatePasswordReset(ctx, tm.owner.User, models.NewLinkToken(), nil, resetMail(tm.owner.Email)); !made || err != nil {
			t.Fatalf("an hour later: %v %v", made, err)
		}
	})
}

// TestPendingSignupIsMadeByItsLink: a signup link makes the organization
// and its verified owner once; an address taken meanwhile is a conflict
// that says to sign in.
func TestPendingSignupIsMadeByItsLink(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		tm := newTeam(t, db)
		token, raced := models.NewLinkToken(), models.NewLinkToken()
		for _, tok := range []string{token, raced} {
			if _, err := tm.s.CreatePendingSignup(ctx, "new@example.com", "hash", "Newco", tok, models.Mail{Kind: "signup", ToAddr: "new@example.com"}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tm.s.UserByEmail(ctx, "new@example.com"); apperr.CodeOf(err) != apperr.NotFound {
			t.Fatalf("an account exists before its address is confirmed: %v", err)
		}
		c, err := tm.s.ConfirmEmail(ctx, token)
		if err != nil || !c.Created || c.Organization.Name != "Newco" || c.Member.Role != models.RoleOwner || c.Member.EmailVerifiedAt == nil ||
			c.Organization.Tier.Name != "free" {
			t.Fatalf("confirm: %+v %v", c, err)
		}
		_, err = tm.s.ConfirmEmail(ctx, token)
		expectReason(t, err, "link_used", "this email confirmation link has already been used")
		_, err = tm.s.ConfirmEmail(ctx, raced)
		expectReason(t, err, "email_taken", "an account with this email already exists: sign in")
	})
}

// TestCreditWaitsForAVerifiedOwner: on a tier whose credit needs a
// verified email, an organization none of whose owners is verified gets
// no included credit, where the store enforces verification; a verified
// owner (or a store without mail) gives it back.
func TestCreditWaitsForAVerifiedOwner(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		tm := newTeam(t, db)
		verifying := models.NewStore(db, models.WithClock(tm.clock.Now), models.WithEmailVerification())
		credit := func(s *models.Store) (money.Amount, bool) {
			m, err := s.MonthTerms(ctx, tm.org.ID, tm.clock.Now())
			if err != nil {
				t.Fatal(err)
			}
			return m.IncludedCredit(), m.CreditWithheld
		}
		if c, withheld := credit(verifying); c != 0 || !withheld {
			t.Fatalf("unverified owner: credit %s, withheld %v", c, withheld)
		}
		if c, withheld := credit(tm.s); c == 0 || withheld {
			t.Fatalf("without mail: credit %s, withheld %v", c, withheld)
		}
		// A verified member who is not an owner does not count.
		m := testdb.AddMember(t, db, tm.org.ID, "member@acme.example", "h", models.RoleMember)
		verify(t, verifying, m.User)
		if _, withheld := credit(verifying); !withheld {
			t.Fatal("a verified member released the credit")
		}
		verify(t, verifying, tm.owner.User)
		if c, withheld := credit(verifying); c == 0 || withheld {
			t.Fatalf("verified owner: credit %s, withheld %v", c, withheld)
		}
		// A tier without the setting never withholds.
		o, _, err := tm.s.CreateOrganizationWithOwner(ctx, "Premium", "premium", "premium@example.com", "h", models.RoleMember)
		if err != nil {
			t.Fatal(err)
		}
		if m, _ := verifying.MonthTerms(ctx, o.ID, tm.clock.Now()); m.CreditWithheld {
			t.Fatal("premium withheld its credit")
		}
	})
}

// verify verifies u's address with a verification link.
func verify(t *testing.T, s *models.Store, u models.User) {
	t.Helper()
	tok := models.NewLinkToken()
	if _, err := s.CreateVerification(ctx, u, tok, models.Mail{Kind: "email_verification", ToAddr: u.Email}); err != nil {
		t.Fatal(err)
	}
	if c, err := s.ConfirmEmail(ctx, tok); err != nil || c.Created || c.Member.EmailVerifiedAt == nil {
		t.Fatalf("verify %s: %+v %v", u.Email, c, err)
	}
}

func expectReason(t *testing.T, err error, reason, message string) {
	t.Helper()
	e := apperr.As(err)
	if err == nil || e.Reason != reason || !strings.Contains(e.Message, message) {
		t.Fatalf("got %v (reason %q), want %s: %q", err, e.Reason, reason, message)
	}
}

// TestStaleLinksAreDeleted: a link used or expired more than LinkKeep ago
// is deleted (an abandoned signup's password hash with it); a live one and
// one that ended lately stay, so a late click is still told why.
func TestStaleLinksAreDeleted(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		tm := newTeam(t, db)
		s := tm.s
		used, expired, live := models.NewLinkToken(), models.NewLinkToken(), models.NewLinkToken()
		if _, err := s.CreatePasswordReset(ctx, tm.owner.User, used, nil, nil); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.ResetPassword(ctx, used, "h"); err != nil {
			t.Fatal(err)
		}
		if made, err := s.CreatePendingSignup(ctx, "new@example.com", "bcrypt-hash", "New", expired, models.Mail{Kind: "signup", ToAddr: "new@example.com"}); !made || err != nil {
			t.Fatal(made, err)
		}
		count := func() (n int64) {
			db.Gorm.Model(&models.AccountLink{}).Count(&n)
			return n
		}
		if n, err := s.DeleteStaleLinks(ctx, tm.clock.Now().Add(models.LinkKeep-time.Minute)); err != nil || n != 0 || count() != 2 {
			t.Fatalf("a minute short of the keep: deleted %d (%v), %d left", n, err, count())
		}
		tm.clock.Advance(models.LinkKeep + 25*time.Hour) // past the keep of both
		if made, err := s.CreatePendingSignup(ctx, "later@example.com", "bcrypt-hash", "Later", live, models.Mail{Kind: "signup", ToAddr: "later@example.com"}); !made || err != nil {
			t.Fatal(made, err)
		}
		n, err := s.DeleteStaleLinks(ctx, tm.clock.Now())
		if err != nil || n != 2 || count() != 1 {
			t.Fatalf("deleted %d (%v), %d left; want the used and the expired gone, the live one kept", n, err, count())
		}
		var hashes int64
		db.Gorm.Model(&models.AccountLink{}).Where("password_hash = ? AND email = ?", "bcrypt-hash", "new@example.com").Count(&hashes)
		if hashes != 0 {
			t.Error("the abandoned signup's password hash is still stored")
		}
	})
}
