// Package mail is Sluice's mail, with nothing of ours below it: what each
// mail says (Composer: invitations, password resets, email verification,
// budget alerts) and how one is sent (SMTP, with STARTTLS when offered).
// Mails are not sent from a request: they are written to the outbox
// (models.Mail) in the transaction of what causes them, and package
// mail/outbox sends them. Bodies may hold one-time links: nothing here
// logs them.
package mail

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/smtp"
	"net/url"
	"strings"
	"time"
)

// Server is where mail goes: an SMTP server, with the credentials to sign
// in with, if any.
type Server struct {
	Host     string
	Port     string
	Username string
	Password string
	// ImplicitTLS: smtps:// (TLS from the first byte, port 465 by default).
	// Otherwise smtp://, which upgrades with STARTTLS whenever the server
	// offers it.
	ImplicitTLS bool
	// TLS is the client configuration for either; nil verifies the server
	// against the system's roots under Host.
	TLS *tls.Config
}

// ParseURL reads SLUICE_SMTP_URL: smtp://user:pass@host:port (STARTTLS
// when offered; port 587 by default) or smtps://… (TLS; 465 by default).
// The user and password are optional; they are percent-decoded.
func ParseURL(raw string) (Server, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Server{}, errors.New("not a URL like smtp://user:pass@mail.example.com:587")
	}
	var s Server
	switch u.Scheme {
	case "smtp":
		s.Port = "587"
	case "smtps":
		s.Port, s.ImplicitTLS = "465", true
	default:
		return Server{}, errors.New("must start with smtp:// or smtps://, e.g. smtp://user:pass@mail.example.com:587")
	}
	if u.Hostname() == "" {
		return Server{}, errors.New("names no host, e.g. smtp://user:pass@mail.example.com:587")
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		return Server{}, errors.New("must be only smtp://user:pass@host:port, with no path or query")
	}
	s.Host = u.Hostname()
	if p := u.Port(); p != "" {
		s.Port = p
	}
	if u.User != nil {
		s.Username = u.User.Username()
		s.Password, _ = u.User.Password()
	}
	return s, nil
}

// Addr is the server's host:port.
func (s Server) Addr() string { return net.JoinHostPort(s.Host, s.Port) }

// SMTP sends mail to a Server from one address.
type SMTP struct {
	server  Server
	from    mail.Address
	timeout time.Duration
	now     func() time.Time
}

// NewSMTP returns a sender through server from from ("Sluice
// <sluice@example.com>" or a bare address); now dates the mails (nil:
// time.Now).
func NewSMTP(server Server, from string, now func() time.Time) (*SMTP, error) {
	a, err := mail.ParseAddress(from)
	if err != nil {
		return nil, fmt.Errorf("%q is not an address like Sluice <sluice@example.com>", from)
	}
	if now == nil {
		now = time.Now
	}
	return &SMTP{server: server, from: *a, timeout: time.Minute, now: now}, nil
}

// Send delivers one message over a connection of its own: dial, STARTTLS
// when the server offers it (or TLS from the start for smtps://), AUTH
// PLAIN when the URL has a user (net/smtp refuses it over an unencrypted
// connection to anything but localhost), MAIL, RCPT, DATA, QUIT. The whole
// exchange is bounded by a minute and by ctx. Errors name the step, never
// the body.
func (s *SMTP) Send(ctx context.Context, to, subject, body string) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	conn, err := s.dial(ctx)
	if err != nil {
		return err
	}
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	c, err := smtp.NewClient(conn, s.server.Host)
	if err != nil {
		conn.Close()
		return fmt.Errorf("smtp greeting: %w", err)
	}
	defer c.Close()
	if err := c.Hello("localhost"); err != nil {
		return fmt.Errorf("smtp EHLO: %w", err)
	}
	if ok, _ := c.Extension("STARTTLS"); ok && !s.server.ImplicitTLS {
		if err := c.StartTLS(s.tlsConfig()); err != nil {
			return fmt.Errorf("smtp STARTTLS: %w", err)
		}
	}
	if s.server.Username != "" {
		if err := c.Auth(smtp.PlainAuth("", s.server.Username, s.server.Password, s.server.Host)); err != nil {
			return fmt.Errorf("smtp AUTH: %w", err)
		}
	}
	if err := c.Mail(s.from.Address); err != nil {
		return fmt.Errorf("smtp MAIL FROM: %w", err)
	}
	if err := c.Rcpt(to); err != nil {
		return fmt.Errorf("smtp RCPT TO: %w", err)
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("smtp DATA: %w", err)
	}
	if _, err := w.Write(s.message(to, subject, body)); err != nil {
		return fmt.Errorf("smtp DATA: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("smtp DATA: %w", err)
	}
	return c.Quit()
}

func (s *SMTP) dial(ctx context.Context) (net.Conn, error) {
	d := &net.Dialer{}
	if s.server.ImplicitTLS {
		td := &tls.Dialer{NetDialer: d, Config: s.tlsConfig()}
		conn, err := td.DialContext(ctx, "tcp", s.server.Addr())
		if err != nil {
			return nil, fmt.Errorf("smtp connect to %s: %w", s.server.Addr(), err)
		}
		return conn, nil
	}
	conn, err := d.DialContext(ctx, "tcp", s.server.Addr())
	if err != nil {
		return nil, fmt.Errorf("smtp connect to %s: %w", s.server.Addr(), err)
	}
	return conn, nil
}

func (s *SMTP) tlsConfig() *tls.Config {
	if s.server.TLS != nil {
		return s.server.TLS.Clone()
	}
	return &tls.Config{ServerName: s.server.Host, MinVersion: tls.VersionTLS12}
}

// message is the mail as sent: headers, then the body as quoted-printable
// UTF-8 plain text.
func (s *SMTP) message(to, subject, body string) []byte {
	var b strings.Builder
	header := func(k, v string) { b.WriteString(k + ": " + v + "\r\n") }
	header("From", s.from.String())
	header("To", to)
	header("Subject", mime.QEncoding.Encode("utf-8", subject))
	header("Date", s.now().UTC().Format(time.RFC1123Z))
	header("Message-ID", "<"+rand.Text()+"@"+domainOf(s.from.Address)+">")
	header("MIME-Version", "1.0")
	header("Content-Type", "text/plain; charset=utf-8")
	header("Content-Transfer-Encoding", "quoted-printable")
	header("Auto-Submitted", "auto-generated")
	b.WriteString("\r\n")
	qp := quotedprintable.NewWriter(&b)
	_, _ = qp.Write([]byte(strings.ReplaceAll(strings.ReplaceAll(body, "\r\n", "\n"), "\n", "\r\n")))
	_ = qp.Close()
	return []byte(b.String())
}

func domainOf(addr string) string {
	if i := strings.LastIndexByte(addr, '@'); i >= 0 {
		return addr[i+1:]
	}
	return "localhost"
}
