package mail_test

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
		if err := store.EnqueueMail(ctx, c.PasswordReset(to, "lnk_SECRET")); err != nil {
			t.Fatal(err)
		}
		w := mail.NewWorker(store, sender(t, mp), quiet(), mail.WithClock(clk.Now))
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
		if err := store.EnqueueMail(ctx, mail.NewComposer("https://s.example").SignupTaken(to)); err != nil {
			t.Fatal(err)
		}
		w := mail.NewWorker(store, sender(t, mp), quiet(), mail.WithClock(clk.Now), mail.WithRetry(time.Minute, time.Hour))
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
			if err := store.EnqueueMail(ctx, c.Verification(fmt.Sprintf("%s-%d@example.com", prefix, i), "lnk_X")); err != nil {
				t.Fatal(err)
			}
		}
		s := sender(t, mp)
		var wg sync.WaitGroup
		for range 4 {
			w := mail.NewWorker(store, s, quiet())
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

// TestSTARTTLS: a server that requires STARTTLS gets it, and the user and
// password are sent only over it.
func TestSTARTTLS(t *testing.T) {
	mp := testmail.Start(t, testmail.WithSTARTTLS())
	s := sender(t, mp)
	if err := s.Send(context.Background(), "tls@example.com", "over TLS", "hello"); err != nil {
		t.Fatalf("send over STARTTLS: %v", err)
	}
	if got := mp.To(t, "tls@example.com"); len(got) != 1 || got[0].Subject != "over TLS" {
		t.Fatalf("received %+v", got)
	}
	// Without trusting its certificate, nothing is sent.
	server, _ := mail.ParseURL(mp.URL())
	untrusting, _ := mail.NewSMTP(server, "sluice@example.com", nil)
	if err := untrusting.Send(context.Background(), "tls@example.com", "x", "y"); err == nil || !strings.Contains(err.Error(), "STARTTLS") {
		t.Fatalf("send to an untrusted certificate: %v", err)
	}
}

// TestParseURL reads SLUICE_SMTP_URL and says what is wrong with a bad one.
func TestParseURL(t *testing.T) {
	s, err := mail.ParseURL("smtp://us%40er:p%3Ass@mail.example.com:2525")
	if err != nil || s.Host != "mail.example.com" || s.Port != "2525" || s.Username != "us@er" || s.Password != "p:ss" || s.ImplicitTLS {
		t.Fatalf("%+v %v", s, err)
	}
	if s, _ := mail.ParseURL("smtps://mail.example.com"); s.Port != "465" || !s.ImplicitTLS {
		t.Fatalf("smtps: %+v", s)
	}
	if s, _ := mail.ParseURL("smtp://mail.example.com"); s.Port != "587" {
		t.Fatalf("smtp default port: %+v", s)
	}
	for raw, want := range map[string]string{
		"http://mail.example.com":       "must start with smtp://",
		"smtp://":                       "names no host",
		"smtp://mail.example.com/x?y=1": "no path or query",
	} {
		if _, err := mail.ParseURL(raw); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", raw, err, want)
		}
	}
}
