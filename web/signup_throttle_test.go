package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/cluster"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/quota"
)

// TestSignupPageThrottled: the 6th signup from one address within the hour
// is refused on the form (429, Retry-After) with a message saying when to
// try again; what was typed is kept, the password is not.
func TestSignupPageThrottled(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		s := newSite(t, db)
		acc, err := accounts.NewService(s.store, s.directory, cluster.None{}, accounts.NewLoginThrottle(s.clock.Now), 4,
			accounts.WithSignupThrottle(accounts.NewSignupThrottle(quota.NewMemory(s.clock.Now), 5)))
		if err != nil {
			t.Fatal(err)
		}
		s.accounts, s.deps.Accounts = acc, acc
		s.rebuild()
		signup := func(email string) *response {
			return s.anonymous().post("/signup", url.Values{"email": {email}, "password": {password}, "organization": {"Org of " + email}})
		}
		for i := range 5 {
			signup(fmt.Sprintf("a%d@example.com", i)).expectRedirect("/dashboard")
		}
		w := signup("a5@example.com")
		w.expectFormError(http.StatusTooManyRequests, "signup-form", "too many signups from your address (5 an hour); try again in 12 minutes")
		if got := w.Header().Get("Retry-After"); got != "720" {
			t.Errorf("Retry-After %q, want 720", got)
		}
		if w.value(`input[name=email]`) != "a5@example.com" || w.value(`input[name=organization]`) != "Org of a5@example.com" || w.value(`input[name=password]`) != "" {
			t.Errorf("the refused form kept email %q, organization %q, password %q",
				w.value(`input[name=email]`), w.value(`input[name=organization]`), w.value(`input[name=password]`))
		}
		if _, err := s.store.UserByEmail(context.Background(), "a5@example.com"); err == nil {
			t.Error("the refused signup made an account")
		}
		s.clock.Advance(12 * time.Minute)
		signup("a5@example.com").expectRedirect("/dashboard")
	})
}
