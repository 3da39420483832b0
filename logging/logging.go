// Package logging builds Sluice's logger: JSON lines for machines in
// production, text for people in development, and personal data kept out
// of every line. E-mail addresses anywhere in a line (a message, an
// attribute, an error's text) are replaced by a short hash, stable per
// address, so lines about one person can still be found together without
// naming them. Prompts and completions are never logged unless an operator
// asks for it, and then only through Redact.
package logging

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"regexp"
	"strings"
)

// New returns a logger writing to w at level ("debug", "info", "warn",
// "error"), as "json" or "text".
func New(w io.Writer, level, format string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: l, ReplaceAttr: hashEmails}
	if format == "json" {
		return slog.New(&messageFilter{slog.NewJSONHandler(w, opts)})
	}
	return slog.New(&messageFilter{slog.NewTextHandler(w, opts)})
}

var emailPattern = regexp.MustCompile(`[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}`)

// HashEmails replaces each e-mail address in s with "email:" and 12 hex
// digits of its SHA-256 (of the lower-cased address).
func HashEmails(s string) string {
	if strings.IndexByte(s, '@') < 0 {
		return s
	}
	return emailPattern.ReplaceAllStringFunc(s, func(e string) string {
		sum := sha256.Sum256([]byte(strings.ToLower(e)))
		return "email:" + hex.EncodeToString(sum[:6])
	})
}

// hashEmails is the handlers' ReplaceAttr: strings and errors pass through
// HashEmails.
func hashEmails(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		if s := a.Value.String(); strings.IndexByte(s, '@') >= 0 {
			a.Value = slog.StringValue(HashEmails(s))
		}
	case slog.KindAny:
		if err, ok := a.Value.Any().(error); ok {
			a.Value = slog.StringValue(HashEmails(err.Error()))
		}
	}
	return a
}

// messageFilter applies HashEmails to a record's message too (ReplaceAttr
// sees only attributes).
type messageFilter struct{ slog.Handler }

func (m *messageFilter) Handle(ctx context.Context, r slog.Record) error {
	if strings.IndexByte(r.Message, '@') >= 0 {
		r.Message = HashEmails(r.Message)
	}
	return m.Handler.Handle(ctx, r)
}

func (m *messageFilter) WithAttrs(as []slog.Attr) slog.Handler {
	return &messageFilter{m.Handler.WithAttrs(as)}
}

func (m *messageFilter) WithGroup(name string) slog.Handler {
	return &messageFilter{m.Handler.WithGroup(name)}
}

var (
	phonePattern = regexp.MustCompile(`\+?\d[\d\s().\-]{7,}\d`)
	cardPattern  = regexp.MustCompile(`\b\d(?:[ \-]?\d){12,18}\b`)
)

// Redact masks what a prompt or a completion may carry about a person:
// e-mail addresses, payment card numbers and phone numbers. It is for the
// operator who turned prompt logging on (SLUICE_LOG_PROMPTS), never a
// licence to log more.
func Redact(s string) string {
	s = emailPattern.ReplaceAllString(s, "[email]")
	s = cardPattern.ReplaceAllStringFunc(s, func(m string) string {
		if luhn(m) {
			return "[card]"
		}
		return m
	})
	return phonePattern.ReplaceAllStringFunc(s, func(m string) string {
		// E.164 numbers have at most 15 digits; longer runs are something else.
		if digits(m) <= 15 {
			return "[phone]"
		}
		return m
	})
}

func digits(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] >= '0' && s[i] <= '9' {
			n++
		}
	}
	return n
}

// luhn reports whether the digits of s pass the Luhn check that payment
// card numbers carry, so order numbers and the like are not masked as
// cards.
func luhn(s string) bool {
	sum, n, double := 0, 0, false
	for i := len(s) - 1; i >= 0; i-- {
		c := s[i]
		if c < '0' || c > '9' {
			continue
		}
		d := int(c - '0')
		if double {
			if d *= 2; d > 9 {
				d -= 9
			}
		}
		sum, n, double = sum+d, n+1, !double
	}
	return n >= 13 && sum%10 == 0
}
