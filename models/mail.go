package models

import (
	"context"
	"time"

	"gorm.io/gorm"
)

// Mail is one message of the outbox: written in the transaction of what
// causes it, sent later by a worker of any node (package mail). Its body
// may hold a one-time link, so it is emptied once the mail is sent and
// never logged.
type Mail struct {
	ID            int64
	Kind          string // what the mail is about (mail.KindInvitation, …), for the bounds and the log
	ToAddr        string `gorm:"column:to_addr"`
	Subject       string
	BodyText      string
	CreatedAt     time.Time
	NextAttemptAt time.Time
	Attempts      int
	LastError     string
	Claim         *string // the worker sending it now, nil when none is
	ClaimedUntil  *time.Time
	SentAt        *time.Time
	FailedAt      *time.Time // given up on after MaxMailAttempts
}

// TableName is the outbox's table.
func (Mail) TableName() string { return "mail_outbox" }

// MailsPerAddressHour bounds the mails of one kind that anonymous requests
// (signups, password resets, verification links) may have sent to one
// address in an hour, so nobody can use Sluice to flood an inbox. Past it
// nothing more is queued, and the request is answered as if it were.
const MailsPerAddressHour = 3

// MaxMailAttempts is how often a mail is tried before it is given up on
// (marked failed, kept in the outbox): with backoff capped at an hour,
// about two days of an unreachable mail server.
const MaxMailAttempts = 50

// enqueueMail writes ms to the outbox inside tx, due at once.
func enqueueMail(tx *gorm.DB, now time.Time, ms ...Mail) error {
	for _, m := range ms {
		m.ID, m.ToAddr = 0, NormalizeEmail(m.ToAddr)
		m.CreatedAt, m.NextAttemptAt = now.UTC(), now.UTC()
		if err := tx.Create(&m).Error; err != nil {
			return dbErr(err, "mail")
		}
	}
	return nil
}

// enqueueBoundedMail writes m to the outbox inside tx unless its address
// already got MailsPerAddressHour mails of its kind in the hour before
// now, and says whether it did.
func enqueueBoundedMail(tx *gorm.DB, now time.Time, m Mail) (bool, error) {
	var n int64
	err := tx.Model(&Mail{}).Where("to_addr = ? AND kind = ? AND created_at > ?", NormalizeEmail(m.ToAddr), m.Kind, now.UTC().Add(-time.Hour)).
		Count(&n).Error
	if err != nil {
		return false, dbErr(err, "mails")
	}
	if n >= MailsPerAddressHour {
		return false, nil
	}
	return true, enqueueMail(tx, now, m)
}

// EnqueueMail writes mails to the outbox, due at once.
func (s *Store) EnqueueMail(ctx context.Context, ms ...Mail) error {
	return enqueueMail(s.db.WithContext(ctx), s.now(), ms...)
}

// ClaimMail claims up to n mails due at now for claim until until, and
// returns them. Each row is claimed with a conditional update (not sent,
// not given up on, and no other claim in force), so of two workers, on
// one node or two, exactly one gets a mail, on SQLite and Postgres alike.
func (s *Store) ClaimMail(ctx context.Context, claim string, now, until time.Time, n int) ([]Mail, error) {
	db := s.db.WithContext(ctx)
	now = now.UTC()
	var ids []int64
	err := db.Model(&Mail{}).Where("sent_at IS NULL AND failed_at IS NULL AND next_attempt_at <= ? AND (claimed_until IS NULL OR claimed_until <= ?)", now, now).
		Order("next_attempt_at, id").Limit(n).Pluck("id", &ids).Error
	if err != nil {
		return nil, dbErr(err, "mail outbox")
	}
	var out []Mail
	for _, id := range ids {
		res := db.Model(&Mail{}).
			Where("id = ? AND sent_at IS NULL AND failed_at IS NULL AND (claimed_until IS NULL OR claimed_until <= ?)", id, now).
			Updates(map[string]any{"claim": claim, "claimed_until": until.UTC()})
		if res.Error != nil {
			return out, dbErr(res.Error, "mail outbox")
		}
		if res.RowsAffected == 0 {
			continue // another worker's
		}
		var m Mail
		if err := db.Where("id = ? AND claim = ?", id, claim).Take(&m).Error; err != nil {
			return out, dbErr(err, "mail")
		}
		out = append(out, m)
	}
	return out, nil
}

// MailSent marks a mail claim holds as sent at at and empties its body.
// It reports false when the claim is no longer the mail's (it ran out and
// another worker took the mail).
func (s *Store) MailSent(ctx context.Context, id int64, claim string, at time.Time) (bool, error) {
	res := s.db.WithContext(ctx).Model(&Mail{}).Where("id = ? AND claim = ?", id, claim).
		Updates(map[string]any{"sent_at": at.UTC(), "body_text": "", "claim": nil, "claimed_until": nil})
	return res.RowsAffected == 1, dbErr(res.Error, "mail")
}

// MailFailed records a failed attempt of a mail claim holds: tried again
// at next, or, with giveUp, marked failed (kept, with its error, for an
// operator to read).
func (s *Store) MailFailed(ctx context.Context, id int64, claim string, attempts int, next time.Time, reason string, giveUp bool, at time.Time) error {
	set := map[string]any{"attempts": attempts, "next_attempt_at": next.UTC(), "last_error": reason, "claim": nil, "claimed_until": nil}
	if giveUp {
		set["failed_at"] = at.UTC()
	}
	return dbErr(s.db.WithContext(ctx).Model(&Mail{}).Where("id = ? AND claim = ?", id, claim).Updates(set).Error, "mail")
}

// Mails lists the outbox to addr, oldest first, for tests and operators.
func (s *Store) Mails(ctx context.Context, addr string) ([]Mail, error) {
	var ms []Mail
	err := s.db.WithContext(ctx).Where("to_addr = ?", NormalizeEmail(addr)).Order("id").Find(&ms).Error
	return ms, dbErr(err, "mails")
}
