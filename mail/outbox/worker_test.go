package outbox_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/testmail"
	"github.com/sluicehq/sluice/mail"
	"github.com/sluicehq/sluice/mail/outbox"
	"github.com/sluicehq/sluice/models"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func sender(t *testing.T, mp *testmail.Server) *mail.SMTP {
	t.Helper()
	server, err := mail.ParseURL(mp.URL())
	if err != nil {
		t.Fatal(err)
	}
	server.TLS = mp.TLS
	s, err := mail.NewSMTP(server, "Sluice <sluice@example.com>", nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestWorkerSendsTheOutbox: a queued mail reaches the SMTP server with its
// subject, sender and text, is marked sent, and loses its body (which may
// hold a one-time link).
func TestWorkerSendsTheOutbox(t *testing.T) {
	mp := testmail.Start(t)
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		ctx := context.Background()
		clk := clocktest.New(time.Now())
		store := models.NewStore(db, models.WithClock(clk.Now))
		c := mail.NewComposer("https://sluice.example.com/")
		to := db.Dialect + "-ada@example.com"
		if err := store.EnqueueMail(ctx, outbox.Row(c.PasswordReset(to, "lnk_SECRET"))); err != nil {
			t.Fatal(err)
		}
		w := outbox.NewWorker(store, sender(t, mp), quiet(), outbox.WithClock(clk.Now))
		if n, err := w.SendDue(ctx); n != 1 || err != nil {
			t.Fatalf("SendDue: %d %v", n, err)
		}
		got := mp.To(t, to)
		if len(got) != 1 || got[0].Subject != "Reset your Sluice password" || got[0].From.Address != "sluice@example.com" ||
			!strings.Contains(got[0].Text, "https://sluice.example.com/password-reset/lnk_SECRET") {
			t.Fatalf("received %+v", got)
		}
		rows, _ := store.Mails(ctx, to)
		if len(rows) != 1 || rows[0].SentAt == nil || rows[0].BodyText != "" || rows[0].Claim != nil {
			t.Fatalf("outbox row after sending: %+v", rows)
		}
		if n, _ := w.SendDue(ctx); n != 0 {
			t.Fatalf("a sent mail was claimed again (%d)", n)
		}
	})
}

// TestFailedSendStaysAndIsRetried: with the SMTP server down the mail
// stays in the outbox with its error and a retry time; it is not tried
// before then, and once the server is back and the time has come it is
// delivered, once.
func TestFailedSendStaysAndIsRetried(t *testing.T) {
	mp := testmail.Start(t)
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		ctx := context.Background()
		clk := clocktest.New(time.Now())
		store := models.NewStore(db, models.WithClock(clk.Now))
		to := db.Dialect + "-retry@example.com"
		if err := store.EnqueueMail(ctx, outbox.Row(mail.NewComposer("https://s.example").SignupTaken(to))); err != nil {
			t.Fatal(err)
		}
		w := outbox.NewWorker(store, sender(t, mp), quiet(), outbox.WithClock(clk.Now), outbox.WithRetry(time.Minute, time.Hour))
		mp.Stop(t)
		if n, err := w.SendDue(ctx); n != 1 || err != nil {
			t.Fatalf("SendDue with the server down: %d %v", n, err)
		}
		rows, _ := store.Mails(ctx, to)
		if len(rows) != 1 || rows[0].SentAt != nil || rows[0].Attempts != 1 || !strings.Contains(rows[0].LastError, "smtp connect to") ||
			!rows[0].NextAttemptAt.After(clk.Now()) || rows[0].BodyText == "" {
			t.Fatalf("outbox row after a failed send: %+v", rows)
		}
		mp.Restart(t)
		if n, _ := w.SendDue(ctx); n != 0 {
			t.Fatal("a failed mail was tried again before its retry time")
		}
		clk.Advance(time.Minute)
		if n, err := w.SendDue(ctx); n != 1 || err != nil {
			t.Fatalf("SendDue once due again: %d %v", n, err)
		}
		if got := mp.To(t, to); len(got) != 1 || !strings.Contains(got[0].Text, "already has one") {
			t.Fatalf("received %+v", got)
		}
		rows, _ = store.Mails(ctx, to)
		if rows[0].SentAt == nil || rows[0].Attempts != 1 {
			t.Fatalf("outbox row after the retry: %+v", rows[0])
		}
	})
}

// TestWorkersNeverSendOneMailTwice: four workers (four nodes) drain one
// outbox at once, eight goroutines each; every mail arrives exactly once.
func TestWorkersNeverSendOneMailTwice(t *testing.T) {
	mp := testmail.Start(t)
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		ctx := context.Background()
		store := models.NewStore(db)
		c := mail.NewComposer("https://s.example")
		const mails = 40
		prefix := db.Dialect + "-many"
		for i := range mails {
			if err := store.EnqueueMail(ctx, outbox.Row(c.Verification(fmt.Sprintf("%s-%d@example.com", prefix, i), "lnk_X"))); err != nil {
				t.Fatal(err)
			}
		}
		s := sender(t, mp)
		var wg sync.WaitGroup
		for range 4 {
			w := outbox.NewWorker(store, s, quiet())
			for range 8 {
				wg.Go(func() {
					for {
						n, err := w.SendDue(ctx)
						if err != nil {
							t.Error(err)
							return
						}
						if n == 0 {
							return
						}
					}
				})
			}
		}
		wg.Wait()
		count := map[string]int{}
		for _, m := range mp.Messages(t) {
			if a := m.To[0].Address; strings.HasPrefix(a, prefix) {
				count[a]++
			}
		}
		if len(count) != mails {
			t.Fatalf("%d addresses received mail, want %d", len(count), mails)
		}
		for a, n := range count {
			if n != 1 {
				t.Errorf("%s received %d copies", a, n)
			}
		}
	})
}
