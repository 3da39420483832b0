// Package outbox sends the mail queued in the outbox (models.Mail): a
// Worker on every node claims due mails and sends them, retrying with
// backoff, so a mail server that is down delays mail and never loses it or
// blocks a request.
package outbox

import (
	"context"
	"crypto/rand"
	"log/slog"
	"math/big"
	"time"

	"github.com/sluicehq/sluice/mail"
	"github.com/sluicehq/sluice/models"
)

// Row is the outbox row of m, to queue with the store.
func Row(m mail.Message) models.Mail {
	return models.Mail{Kind: m.Kind, ToAddr: m.To, Subject: m.Subject, BodyText: m.Text}
}

// Sender delivers one mail; *mail.SMTP is the real one.
type Sender interface {
	Send(ctx context.Context, to, subject, body string) error
}

// Outbox is what the worker needs of the store; *models.Store is one.
type Outbox interface {
	ClaimMail(ctx context.Context, claim string, now, until time.Time, n int) ([]models.Mail, error)
	MailSent(ctx context.Context, id int64, claim string, at time.Time) (bool, error)
	MailFailed(ctx context.Context, id int64, claim string, attempts int, next time.Time, reason string, giveUp bool, at time.Time) error
}

// Worker sends the outbox's due mails. Every node runs one; a mail is
// claimed for Lease before it is sent (models.Store.ClaimMail), which is
// far longer than a send may take (mail.SMTP.Send stops at a minute), so two
// workers never send one mail at once. A node that dies between sending
// and marking a mail sent leaves it to be sent again once the lease ends:
// at least once, never lost.
type Worker struct {
	outbox    Outbox
	sender    Sender
	log       *slog.Logger
	now       func() time.Time
	claim     string
	batch     int
	lease     time.Duration
	poll      time.Duration
	retryBase time.Duration
	retryMax  time.Duration
	nudge     chan struct{}
}

// WorkerOption adjusts a Worker.
type WorkerOption func(*Worker)

// WithClock has the worker judge what is due by now (tests move it by
// hand).
func WithClock(now func() time.Time) WorkerOption { return func(w *Worker) { w.now = now } }

// WithRetry sets a failed mail's first retry wait (doubling per attempt,
// at most max).
func WithRetry(base, max time.Duration) WorkerOption {
	return func(w *Worker) { w.retryBase, w.retryMax = base, max }
}

// WithPoll sets how often the worker looks for due mail when nobody on its
// node nudged it.
func WithPoll(d time.Duration) WorkerOption { return func(w *Worker) { w.poll = d } }

// NewWorker returns a worker sending outbox's mail through sender.
func NewWorker(outbox Outbox, sender Sender, log *slog.Logger, opts ...WorkerOption) *Worker {
	w := &Worker{outbox: outbox, sender: sender, log: log, now: time.Now, claim: rand.Text(), batch: 10,
		lease: 10 * time.Minute, poll: 5 * time.Second, retryBase: 30 * time.Second, retryMax: time.Hour,
		nudge: make(chan struct{}, 1)}
	for _, o := range opts {
		o(w)
	}
	return w
}

// Nudge wakes the worker at once: a mail was just queued on this node.
// It never blocks.
func (w *Worker) Nudge() {
	select {
	case w.nudge <- struct{}{}:
	default:
	}
}

// Run sends due mail until ctx ends: whenever nudged, and every poll
// interval for mail queued on other nodes and retries.
func (w *Worker) Run(ctx context.Context) {
	t := time.NewTicker(w.poll)
	defer t.Stop()
	for {
		for {
			n, err := w.SendDue(ctx)
			if err != nil && ctx.Err() == nil {
				w.log.Warn("reading the mail outbox failed; trying again shortly", "err", err)
			}
			if n < w.batch || err != nil {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.nudge:
		}
	}
}

// SendDue claims up to one batch of due mails and sends them, one after
// the other, and returns how many it claimed. A failed send is tried
// again after a backoff (full jitter over a doubling wait), or given up on
// after models.MaxMailAttempts; either way the mail stays in the outbox.
func (w *Worker) SendDue(ctx context.Context) (int, error) {
	now := w.now()
	ms, err := w.outbox.ClaimMail(ctx, w.claim, now, now.Add(w.lease), w.batch)
	for _, m := range ms {
		w.send(ctx, m)
	}
	return len(ms), err
}

func (w *Worker) send(ctx context.Context, m models.Mail) {
	err := w.sender.Send(ctx, m.ToAddr, m.Subject, m.BodyText)
	at := w.now()
	if err == nil {
		ok, err := w.outbox.MailSent(context.WithoutCancel(ctx), m.ID, w.claim, at)
		switch {
		case err != nil:
			w.log.Error("a mail was sent but could not be marked sent; it may be sent again", "mail_id", m.ID, "kind", m.Kind, "err", err)
		case !ok:
			w.log.Warn("a mail was sent after its claim ran out; another worker may send it again", "mail_id", m.ID, "kind", m.Kind)
		default:
			w.log.Info("mail sent", "mail_id", m.ID, "kind", m.Kind)
		}
		return
	}
	attempts := m.Attempts + 1
	giveUp := attempts >= models.MaxMailAttempts
	next := at.Add(w.backoff(attempts))
	if ferr := w.outbox.MailFailed(context.WithoutCancel(ctx), m.ID, w.claim, attempts, next, err.Error(), giveUp, at); ferr != nil {
		w.log.Error("recording a failed mail failed; it is tried again when its claim ends", "mail_id", m.ID, "err", ferr)
	}
	if giveUp {
		w.log.Error("mail given up on", "mail_id", m.ID, "kind", m.Kind, "attempts", attempts, "err", err)
		return
	}
	w.log.Warn("sending mail failed; it stays in the outbox and is tried again", "mail_id", m.ID, "kind", m.Kind,
		"attempts", attempts, "retry_at", next.UTC(), "err", err)
}

// backoff is the wait before attempt+1: uniformly up to retryBase ×
// 2^(attempt-1), capped at retryMax, and never under a tenth of it, so a
// mail server coming back is not met by every mail at once.
func (w *Worker) backoff(attempt int) time.Duration {
	d := w.retryBase
	for i := 1; i < attempt && d < w.retryMax; i++ {
		d *= 2
	}
	d = min(d, w.retryMax)
	floor := d / 10
	n, err := rand.Int(rand.Reader, big.NewInt(int64(d-floor)+1))
	if err != nil {
		return d
	}
	return floor + time.Duration(n.Int64())
}
