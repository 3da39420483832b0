package models

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/apperr"
)

// Batch statuses, as OpenAI names them.
const (
	BatchValidating = "validating"
	BatchFailed     = "failed"
	BatchInProgress = "in_progress"
	BatchFinalizing = "finalizing"
	BatchCompleted  = "completed"
	BatchExpired    = "expired"
	BatchCancelling = "cancelling"
	BatchCancelled  = "cancelled"
)

// BatchOpen says whether a batch with status still has lines to finish.
func BatchOpen(status string) bool {
	return status == BatchValidating || status == BatchInProgress || status == BatchCancelling
}

// Batch is one of an organization's batches: the requests of an input
// file, run as jobs, and their outcome in an output and an error file.
type Batch struct {
	ID               int64
	OrgID            int64
	TokenID          int64 // whose buckets and budget its lines use
	InputFileID      int64
	Endpoint         string
	CompletionWindow string
	Status           string
	Metadata         string // a JSON object of strings; "" for none
	Errors           string // a JSON array of {code, message} when the batch failed
	OutputTTLSecs    int64  // how long its output and error files are kept; 0: the default
	Total            int    // lines
	Completed        int    // lines answered 2xx
	Failed           int    // every other finished line
	OutputFileID     *int64
	ErrorFileID      *int64
	CreatedAt        time.Time
	InProgressAt     *time.Time
	FinalizingAt     *time.Time
	CompletedAt      *time.Time
	FailedAt         *time.Time
	ExpiredAt        *time.Time
	CancellingAt     *time.Time
	CancelledAt      *time.Time
	ExpiresAt        time.Time // the end of its completion window
}

// Line states of a batch.
const (
	LinePending = "pending"
	LineOK      = "ok"
	LineFailed  = "failed"
)

// BatchResult is one line of a batch: its custom_id, its state and, once
// finished, its line of the output file (ok) or the error file (failed).
type BatchResult struct {
	BatchID   int64 `gorm:"primaryKey;autoIncrement:false"`
	Line      int   `gorm:"primaryKey;autoIncrement:false"` // from 1, in the input file
	CustomID  string
	State     string
	ErrorCode string
	Result    []byte
}

// ExpiredLine is the error code of a line that did not run within its
// batch's completion window; a batch with one ends expired.
const ExpiredLine = "batch_expired"

// ErrNoBatch is the answer for a batch that is not the caller's or has expired.
var ErrNoBatch = apperr.WithReason(apperr.NotFound, "batch_not_found", "no such batch (or it expired)")

// CreateBatch stores b (in progress, with its Total and Failed counts:
// every line of the input, and those failed already) and its lines, which
// lines passes to yield once b has its id, in order: pending for those that
// will run as jobs, already finished for those that cannot (a malformed
// line). They are inserted a few hundred at a time, so no more are held. A
// batch whose every line is already finished is finalized at once.
// fileTTL is how long its files are kept by default. Its pending lines take
// places of the organization's pending batch lines in the same transaction;
// past limit, the batch is refused and nothing is stored.
func (s *Store) CreateBatch(ctx context.Context, b *Batch, lines func(batchID int64, yield func(BatchResult) error) error, fileTTL time.Duration, limit PendingLimit) error {
	done := false
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		b.Completed = 0
		if err := tx.Create(b).Error; err != nil {
			return err
		}
		rows := make([]BatchResult, 0, 500)
		insert := func() error {
			if len(rows) == 0 {
				return nil
			}
			err := tx.Create(&rows).Error
			rows = rows[:0]
			return err
		}
		if err := takeBatchLines(tx, b.OrgID, int64(b.Total-b.Failed), limit.Lines, limit.Tier); err != nil {
			return err
		}
		err := lines(b.ID, func(r BatchResult) error {
			r.BatchID = b.ID
			if r.Result == nil {
				r.Result = []byte{}
			}
			if rows = append(rows, r); len(rows) == cap(rows) {
				return insert()
			}
			return nil
		})
		if err == nil {
			err = insert()
		}
		if err != nil {
			return err
		}
		if done = b.Completed+b.Failed == b.Total; done {
			return finalizeBatch(tx, b.ID, b.CreatedAt, fileTTL)
		}
		return nil
	})
	if err != nil {
		return dbErr(err, "batch")
	}
	if done {
		*b, err = s.Batch(ctx, b.OrgID, b.ID)
	}
	return err
}

// PendingLimit is the most batch lines an organization may have pending,
// and its tier's name, for the refusal's words.
type PendingLimit struct {
	Tier  string
	Lines int64
}

// Batch returns one of orgID's batches; another organization's is not found.
func (s *Store) Batch(ctx context.Context, orgID, id int64) (Batch, error) {
	var b Batch
	res := s.db.WithContext(ctx).Where("org_id = ? AND id = ?", orgID, id).Limit(1).Find(&b)
	if res.Error != nil {
		return b, dbErr(res.Error, "batch")
	}
	if res.RowsAffected == 0 {
		return b, ErrNoBatch
	}
	return b, nil
}

// BatchState is what a batch's line needs to know before it runs. The
// job queue's worker asks by the batch's id alone: it comes from the
// job's own arguments, never from a client.
func (s *Store) BatchState(ctx context.Context, id int64) (status string, expiresAt time.Time, err error) {
	var b Batch
	res := s.db.WithContext(ctx).Select("status, expires_at").Where("id = ?", id).Limit(1).Find(&b)
	if res.Error != nil {
		return "", time.Time{}, dbErr(res.Error, "batch")
	}
	if res.RowsAffected == 0 {
		return "", time.Time{}, ErrNoBatch
	}
	return b.Status, b.ExpiresAt, nil
}

// Batches lists a page of orgID's batches, newest first: those with ids
// below before (0: from the newest).
func (s *Store) Batches(ctx context.Context, orgID, before int64, limit int) ([]Batch, error) {
	db := s.db.WithContext(ctx).Where("org_id = ?", orgID)
	if before > 0 {
		db = db.Where("id < ?", before)
	}
	var bs []Batch
	err := db.Order("id DESC").Limit(limit).Find(&bs).Error
	return bs, dbErr(err, "batches")
}

// FailBatch ends a batch that could not be started (its lines could not be
// queued) as failed, with errors (a JSON array of {code, message}); its
// pending lines fail with it and give their places back.
func (s *Store) FailBatch(ctx context.Context, orgID, id int64, errors string, now time.Time) error {
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Model(&Batch{}).Where("org_id = ? AND id = ? AND status IN ?", orgID, id, []string{BatchValidating, BatchInProgress}).
			Updates(map[string]any{"status": BatchFailed, "errors": errors, "failed_at": now.UTC()})
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		res = tx.Exec(`UPDATE batch_results SET state = ?, error_code = ? WHERE batch_id = ? AND state = ?`, LineFailed, "batch_failed", id, LinePending)
		if res.Error != nil {
			return res.Error
		}
		return releaseBatchLines(tx, id, res.RowsAffected)
	})
	return dbErr(err, "batch")
}

// CancelBatch asks one of orgID's batches to stop: it is cancelling until
// its running lines finish (the lines not started are skipped), then
// cancelled. Cancelling a batch again returns it as it is; a finished one
// is a conflict.
func (s *Store) CancelBatch(ctx context.Context, orgID, id int64, now time.Time) (Batch, error) {
	res := s.db.WithContext(ctx).Model(&Batch{}).Where("org_id = ? AND id = ? AND status IN ?", orgID, id, []string{BatchValidating, BatchInProgress}).
		Updates(map[string]any{"status": BatchCancelling, "cancelling_at": now.UTC()})
	if res.Error != nil {
		return Batch{}, dbErr(res.Error, "batch")
	}
	b, err := s.Batch(ctx, orgID, id)
	if err != nil {
		return b, err
	}
	if res.RowsAffected == 0 && b.Status != BatchCancelling && b.Status != BatchCancelled {
		return b, apperr.WithReason(apperr.Conflict, "batch_not_cancellable", "the batch is "+b.Status+"; only a batch in progress can be cancelled")
	}
	return b, nil
}

// LineOutcome is how a batch's line ended, written as its line of the
// output file (OK) or the error file.
type LineOutcome struct {
	OK        bool
	ErrorCode string
	Result    []byte
}

// FinishBatchLine records the outcome of the line of batch id with
// customID and counts it. The line that finishes the batch makes its
// output and error files in the same transaction, under the batch's row
// lock, so lines finished on several nodes at once make them once. A line
// already finished (its job worked twice) changes nothing.
func (s *Store) FinishBatchLine(ctx context.Context, id int64, customID string, o LineOutcome, now time.Time, fileTTL time.Duration) error {
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		state, ok, failed := LineFailed, 0, 1
		if o.OK {
			state, ok, failed = LineOK, 1, 0
		}
		res := tx.Exec(`UPDATE batch_results SET state = ?, error_code = ?, result = ? WHERE batch_id = ? AND custom_id = ? AND state = ?`,
			state, o.ErrorCode, o.Result, id, customID, LinePending)
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		if err := releaseBatchLines(tx, id, 1); err != nil {
			return err
		}
		return countLines(tx, id, ok, failed, now, fileTTL)
	})
	return dbErr(err, "batch line")
}

// FailPendingLines ends every line of batch id still pending with code and
// the error line render writes, then finalizes the batch: for a batch whose
// lines never came back (a node lost between storing the batch and queueing
// its lines) once its window, or its cancellation, is long past.
func (s *Store) FailPendingLines(ctx context.Context, id int64, code string, render func(line int, customID string) []byte, now time.Time, fileTTL time.Duration) error {
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var pending []BatchResult
		if err := tx.Select("line, custom_id").Where("batch_id = ? AND state = ?", id, LinePending).Order("line").Find(&pending).Error; err != nil {
			return err
		}
		failed := 0
		for _, p := range pending {
			res := tx.Exec(`UPDATE batch_results SET state = ?, error_code = ?, result = ? WHERE batch_id = ? AND line = ? AND state = ?`,
				LineFailed, code, render(p.Line, p.CustomID), id, p.Line, LinePending)
			if res.Error != nil {
				return res.Error
			}
			failed += int(res.RowsAffected)
		}
		if err := releaseBatchLines(tx, id, int64(failed)); err != nil {
			return err
		}
		return countLines(tx, id, 0, failed, now, fileTTL)
	})
	return dbErr(err, "batch lines")
}

// countLines adds finished lines to batch id's counts (taking its row
// lock) and finalizes it when they were its last.
func countLines(tx *gorm.DB, id int64, ok, failed int, now time.Time, fileTTL time.Duration) error {
	var c struct {
		Status                   string
		Total, Completed, Failed int
	}
	res := tx.Raw(`UPDATE batches SET completed = completed + ?, failed = failed + ? WHERE id = ? RETURNING status, total, completed, failed`,
		ok, failed, id).Scan(&c)
	if res.Error != nil || res.RowsAffected == 0 {
		return res.Error
	}
	if c.Completed+c.Failed < c.Total || !BatchOpen(c.Status) {
		return nil
	}
	return finalizeBatch(tx, id, now, fileTTL)
}

// finalizeBatch writes the output and error files of batch id from its
// lines, in input order, and ends it: cancelled if it was cancelling,
// expired if a line ran out of its window, completed otherwise. The
// status change is conditional on the status read, so a batch is
// finalized once; its lines are then deleted (the files hold them).
func finalizeBatch(tx *gorm.DB, id int64, now time.Time, fileTTL time.Duration) error {
	var b Batch
	if err := tx.Where("id = ?", id).Take(&b).Error; err != nil {
		return err
	}
	if !BatchOpen(b.Status) {
		return nil
	}
	now = now.UTC()
	ttl := fileTTL
	if b.OutputTTLSecs > 0 {
		ttl = time.Duration(b.OutputTTLSecs) * time.Second
	}
	// The files are written as the lines are read, a page of lines at a
	// time: neither file is held whole.
	out := &outputFile{tx: tx, file: BatchFile{OrgID: b.OrgID, Purpose: PurposeBatchOutput, Filename: fmt.Sprintf("batch_%d_output.jsonl", id), CreatedAt: now}}
	errs := &outputFile{tx: tx, file: BatchFile{OrgID: b.OrgID, Purpose: PurposeBatchOutput, Filename: fmt.Sprintf("batch_%d_errors.jsonl", id), CreatedAt: now}}
	expired := false
	const page = 100
	for after := 0; ; {
		var rows []BatchResult
		if err := tx.Select("line, state, error_code, result").Where("batch_id = ? AND line > ?", id, after).Order("line").Limit(page).Find(&rows).Error; err != nil {
			return err
		}
		for _, r := range rows {
			dst := errs
			if r.State == LineOK {
				dst = out
			}
			if err := dst.line(r.Result); err != nil {
				return err
			}
			expired = expired || r.ErrorCode == ExpiredLine
		}
		if len(rows) < page {
			break
		}
		after = rows[len(rows)-1].Line
	}
	cols := map[string]any{"finalizing_at": now}
	for _, f := range []struct {
		file   *outputFile
		column string
	}{{out, "output_file_id"}, {errs, "error_file_id"}} {
		if f.file.w == nil {
			continue
		}
		if _, err := f.file.w.Commit(now.Add(ttl)); err != nil {
			return err
		}
		cols[f.column] = f.file.file.ID
	}
	switch {
	case b.Status == BatchCancelling:
		cols["status"], cols["cancelled_at"] = BatchCancelled, now
	case expired:
		cols["status"], cols["expired_at"] = BatchExpired, now
	default:
		cols["status"], cols["completed_at"] = BatchCompleted, now
	}
	res := tx.Model(&Batch{}).Where("id = ? AND status = ?", id, b.Status).Updates(cols)
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected != 1 {
		return fmt.Errorf("batch %d changed while it was finalized", id)
	}
	return tx.Exec(`DELETE FROM batch_results WHERE batch_id = ?`, id).Error
}

// outputFile is a batch's output or error file as finalizeBatch writes
// it: made with its first line, none for a batch without any.
type outputFile struct {
	tx   *gorm.DB
	file BatchFile
	w    *FileWriter
}

func (f *outputFile) line(l []byte) error {
	if f.w == nil {
		w, err := createFile(f.tx.Statement.Context, f.tx, &f.file)
		if err != nil {
			return err
		}
		f.w = w
	}
	if _, err := f.w.Write(l); err != nil {
		return err
	}
	_, err := f.w.Write([]byte{'\n'})
	return err
}

// OverdueBatches lists batches still open whose window ended before
// before, or that began cancelling before it: their remaining lines are
// not coming back.
func (s *Store) OverdueBatches(ctx context.Context, before time.Time, limit int) ([]Batch, error) {
	var bs []Batch
	err := s.db.WithContext(ctx).Where("status IN ? AND (expires_at < ? OR (status = ? AND cancelling_at < ?))",
		[]string{BatchValidating, BatchInProgress, BatchCancelling}, before.UTC(), BatchCancelling, before.UTC()).
		Order("id").Limit(limit).Find(&bs).Error
	return bs, dbErr(err, "overdue batches")
}

// StrandedBatches lists batches still in progress, created before before,
// that have lines pending: where their lines were never queued (a node
// lost between storing the batch and queueing its lines) is for the
// caller to ask the queue.
func (s *Store) StrandedBatches(ctx context.Context, before time.Time, limit int) ([]Batch, error) {
	var bs []Batch
	err := s.db.WithContext(ctx).Where("status = ? AND created_at < ? AND EXISTS (SELECT 1 FROM batch_results r WHERE r.batch_id = batches.id AND r.state = ?)",
		BatchInProgress, before.UTC(), LinePending).Order("id").Limit(limit).Find(&bs).Error
	return bs, dbErr(err, "stranded batches")
}

// PendingLines lists the custom ids of batch id's lines still pending.
func (s *Store) PendingLines(ctx context.Context, id int64) (map[string]bool, error) {
	var ids []string
	err := s.db.WithContext(ctx).Model(&BatchResult{}).Where("batch_id = ? AND state = ?", id, LinePending).Pluck("custom_id", &ids).Error
	pending := make(map[string]bool, len(ids))
	for _, c := range ids {
		pending[c] = true
	}
	return pending, dbErr(err, "batch lines")
}

// DeleteExpiredBatchData deletes files expired at now and finished
// batches whose window ended more than keep ago (their lines with them).
func (s *Store) DeleteExpiredBatchData(ctx context.Context, now time.Time, keep time.Duration) (files, batches int64, err error) {
	db := s.db.WithContext(ctx)
	res := db.Where("expires_at <= ?", now.UTC()).Delete(&BatchFile{})
	if res.Error != nil {
		return 0, 0, dbErr(res.Error, "expired batch files")
	}
	files = res.RowsAffected
	res = db.Where("expires_at < ? AND status NOT IN ?", now.Add(-keep).UTC(), []string{BatchValidating, BatchInProgress, BatchCancelling}).
		Delete(&Batch{})
	return files, res.RowsAffected, dbErr(res.Error, "expired batches")
}
