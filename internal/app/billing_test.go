package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/mail"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/payments"
)

// TestPaymentFailuresAreMailedToOwners: the composition root's mail hook
// for payments queues a failed payment's mail to every owner of the
// organization, in the outbox, and wakes the worker.
func TestPaymentFailuresAreMailedToOwners(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		ctx := context.Background()
		store := models.NewStore(db)
		o, owner, err := store.CreateOrganizationWithOwner(ctx, "Acme", "free", "owner@acme.example", "h", models.RoleMember)
		if err != nil {
			t.Fatal(err)
		}
		member := testdb.AddMember(t, db, o.ID, "member@acme.example", "h", models.RoleMember)
		nudged := 0
		pm := paymentMail{store: store, composer: mail.NewComposer("https://sluice.example"), nudge: func() { nudged++ }}
		f := payments.Failure{OrgID: o.ID, Kind: payments.FailedRecharge, Message: "the card was declined", At: time.Now()}
		if err := pm.PaymentFailed(ctx, f); err != nil {
			t.Fatal(err)
		}
		ms, err := store.Mails(ctx, owner.Email)
		if err != nil || len(ms) != 1 || ms[0].Kind != mail.KindPaymentFailed || ms[0].Subject != "A payment for Acme failed" ||
			!strings.Contains(ms[0].BodyText, "failed: the card was declined") || !strings.Contains(ms[0].BodyText, "https://sluice.example/billing/payments") {
			t.Fatalf("mails to the owner: %+v %v", ms, err)
		}
		if ms, _ := store.Mails(ctx, member.Email); len(ms) != 0 || nudged != 1 {
			t.Fatalf("member's mails %+v, nudged %d", ms, nudged)
		}
	})
}
