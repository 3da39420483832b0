package metering

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/mail"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// TestBudgetAlertsAreMailedToOwners: with mail, each threshold crossed is
// queued as a mail to every owner of the organization (not its members),
// with the alert's record, once however often it is seen.
func TestBudgetAlertsAreMailedToOwners(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		ctx := context.Background()
		store := models.NewStore(db)
		o, owner, err := store.CreateOrganizationWithOwner(ctx, "Acme", "free", "owner@acme.example", "h", models.RoleMember)
		if err != nil {
			t.Fatal(err)
		}
		second := testdb.AddMember(t, db, o.ID, "second@acme.example", "h", models.RoleOwner)
		member := testdb.AddMember(t, db, o.ID, "member@acme.example", "h", models.RoleMember)
		nudged := 0
		a := NewBudgetAlerts(store, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now).
			WithMail(mail.NewComposer("https://sluice.example"), func() { nudged++ })
		c := crossing{orgID: o.ID, period: Period(time.Now()), percent: 80, spent: 8 * money.Dollar, limit: 10 * money.Dollar}
		noWebhook := func(context.Context, int64, string, []byte) error { t.Fatal("no webhook is set"); return nil }
		a.send(ctx, c, noWebhook)
		a.send(ctx, c, noWebhook) // another node saw it too
		for _, to := range []string{owner.Email, second.Email} {
			ms, err := store.Mails(ctx, to)
			if err != nil || len(ms) != 1 || ms[0].Kind != mail.KindBudgetAlert || ms[0].Subject != "Acme has spent 80% of its monthly budget" ||
				!strings.Contains(ms[0].BodyText, "$8.00 of its $10.00 monthly budget") {
				t.Fatalf("mails to %s: %+v %v", to, ms, err)
			}
		}
		if ms, _ := store.Mails(ctx, member.Email); len(ms) != 0 {
			t.Fatalf("a member got the owners' alert: %+v", ms)
		}
		if nudged != 1 {
			t.Fatalf("the outbox worker was nudged %d times, want 1", nudged)
		}
	})
}

// TestLowBalanceAlertsAreMailedToOwners: a prepaid balance that falls to
// its owners' threshold is mailed to every owner, once however many
// nodes see the fall, with the alert's record, and to no member.
func TestLowBalanceAlertsAreMailedToOwners(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		ctx := context.Background()
		store := models.NewStore(db)
		o, owner, err := store.CreateOrganizationWithOwner(ctx, "Acme", "free", "owner@acme.example", "h", models.RoleMember)
		if err != nil {
			t.Fatal(err)
		}
		second := testdb.AddMember(t, db, o.ID, "second@acme.example", "h", models.RoleOwner)
		member := testdb.AddMember(t, db, o.ID, "member@acme.example", "h", models.RoleMember)
		nudged := 0
		a := NewBudgetAlerts(store, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now).
			WithMail(mail.NewComposer("https://sluice.example"), func() { nudged++ })
		low := lowBalance{orgID: o.ID, threshold: 2 * money.Dollar, balance: 150 * money.Cent}
		noWebhook := func(context.Context, int64, string, []byte) error { t.Fatal("no webhook is set"); return nil }
		a.sendLow(ctx, low, noWebhook)
		a.sendLow(ctx, low, noWebhook) // another node saw it too
		for _, to := range []string{owner.Email, second.Email} {
			ms, err := store.Mails(ctx, to)
			if err != nil || len(ms) != 1 || ms[0].Kind != mail.KindLowBalance || ms[0].Subject != "Acme's prepaid balance is low: $1.50" ||
				!strings.Contains(ms[0].BodyText, "has $1.50 left of its prepaid balance, at or below the alert you set at $2.00") {
				t.Fatalf("mails to %s: %+v %v", to, ms, err)
			}
		}
		if ms, _ := store.Mails(ctx, member.Email); len(ms) != 0 {
			t.Fatalf("a member got the owners' alert: %+v", ms)
		}
		if nudged != 1 {
			t.Fatalf("the outbox worker was nudged %d times, want 1", nudged)
		}
	})
}
