package batches

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"time"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/jobs"
	"github.com/sluicehq/sluice/models"
)

// overdueGrace is how long after a batch's window ends, or after it began
// cancelling, its lines still pending are taken as lost: longer than a
// job's longest backoff (10 minutes), so a line that still runs reports in
// before.
const overdueGrace = 15 * time.Minute

// strandedAfter is how long after its creation a batch whose lines were
// never queued is taken as stranded: creating one takes seconds, so a
// batch this old without a single line in the queue lost its node between
// being stored and queueing its lines.
const strandedAfter = 10 * time.Minute

// Sweep ends what time has ended, and queues what a lost node did not:
// batches stored whose lines were never queued get them queued (on q);
// batches whose remaining lines are not coming back (their window, or
// their cancellation, is long past) fail those lines and finish; expired
// files are deleted, and finished batches once they are as old as the
// files. Every step is a conditional statement, or an insert of lines
// unique in the queue, so every node may sweep.
func (s *Service) Sweep(ctx context.Context, q Queue) error {
	now := s.now()
	if err := s.requeueStranded(ctx, q, now); err != nil {
		return err
	}
	overdue, err := s.store.OverdueBatches(ctx, now.Add(-overdueGrace), 100)
	if err != nil {
		return err
	}
	for _, b := range overdue {
		f := lineExpired()
		if b.Status == models.BatchCancelling {
			f = lineCancelled()
		}
		render := func(line int, customID string) []byte { return failedLine(lineID("", b.ID, line), customID, f) }
		if err := s.store.FailPendingLines(ctx, b.ID, f.Code, render, now, s.cfg.FileRetention); err != nil {
			return err
		}
		s.log.Warn("a batch's lines did not all come back; the rest were failed", "batch_id", ID(b.ID), "status", b.Status, "code", f.Code)
	}
	files, batches, err := s.store.DeleteExpiredBatchData(ctx, now, s.cfg.FileRetention)
	if err != nil {
		return err
	}
	if files > 0 || batches > 0 {
		s.log.Info("deleted expired batch files and batches", "files", files, "batches", batches)
	}
	return nil
}

// requeueStranded queues the lines of batches that were stored and never
// queued. Their lines are read again from the input file, as Create read
// them.
func (s *Service) requeueStranded(ctx context.Context, q Queue, now time.Time) error {
	stranded, err := s.store.StrandedBatches(ctx, now.Add(-strandedAfter), 100)
	if err != nil {
		return err
	}
	for _, b := range stranded {
		queued, err := q.HasBatchLines(ctx, b.ID)
		if err != nil {
			return err
		}
		if queued {
			continue
		}
		f, err := s.store.BatchFile(ctx, b.OrgID, b.InputFileID, now)
		if err != nil {
			s.log.Warn("a stranded batch's input file cannot be read; its lines fail when its window ends", "batch_id", ID(b.ID), "err", err)
			continue
		}
		pending, err := s.store.PendingLines(ctx, b.ID)
		if err != nil {
			return err
		}
		// Only the lines still pending: with a short job retention, lines
		// done long ago have no job left either. The file is read again,
		// as Create read it.
		lines := 0
		source := func(ctx context.Context, tx *sql.Tx, yield func(jobs.Line) error) error {
			sc := newScanner(s.storeOn(tx).FileReader(ctx, f), s.pipeline, b.Endpoint, s.cfg.MaxLineBytes)
			for {
				l, err := sc.next()
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return err
				}
				if l.failure == nil && pending[l.customID] {
					lines++
					// The body is the scanner's until its next line: the
					// queue keeps a chunk of lines before it inserts them.
					if err := yield(jobs.Line{CustomID: l.customID, Endpoint: b.Endpoint, Body: bytes.Clone(l.body)}); err != nil {
						return err
					}
				}
			}
		}
		if len(pending) == 0 {
			continue
		}
		if err := q.EnqueueBatch(ctx, accounts.Caller{OrgID: b.OrgID, TokenID: b.TokenID}, b.ID, source); err != nil {
			return err // another node queued them first (Postgres), or the queue failed: the next sweep looks again
		}
		if lines > 0 {
			s.log.Warn("a batch's lines were never queued (its node was lost); queued them now", "batch_id", ID(b.ID), "lines", lines)
		}
	}
	return nil
}

// Run sweeps every interval, and wakes the waiting lines of the batches
// Cancel stopped, on q, until ctx ends.
func (s *Service) Run(ctx context.Context, q Queue, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-s.wakes:
			if err := q.WakeBatch(ctx, id); err != nil && ctx.Err() == nil {
				// They are skipped when they wake by themselves.
				s.log.Warn("waking a cancelled batch's waiting lines failed", "batch_id", ID(id), "err", err)
			}
		case <-t.C:
			if err := s.Sweep(ctx, q); err != nil && ctx.Err() == nil {
				s.log.Warn("sweeping batches failed; the next sweep tries again", "err", err)
			}
		}
	}
}
