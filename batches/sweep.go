package batches

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/models"
)

// overdueGrace is how long after a batch's window ends, or after it began
// cancelling, its lines still pending are taken as lost: longer than a
// job's longest backoff (10 minutes), so a line that still runs reports in
// before.
const overdueGrace = 15 * time.Minute

// Sweep ends what time has ended: batches whose remaining lines are not
// coming back (their window, or their cancellation, is long past: lines
// lost with a node before they were queued) fail those lines and finish;
// expired files are deleted, and finished batches once they are as old as
// the files. Every step is a conditional statement, so every node may
// sweep.
func (s *Service) Sweep(ctx context.Context) error {
	now := s.now()
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
			if err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("sweeping batches failed; the next sweep tries again", "err", err)
			}
		}
	}
}
