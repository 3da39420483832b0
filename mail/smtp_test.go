package mail_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testmail"
	"github.com/sluicehq/sluice/mail"
)

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
