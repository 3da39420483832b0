package models

import (
	"context"
	"fmt"
	"strings"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/apperr"
)

// An organization's queues are bounded by its tier: org_queues counts its
// queued jobs and its pending batch lines. A place is taken by one
// conditional increment (it changes nothing when it would pass the limit),
// so however many nodes take at once, the count never passes it; a place
// is given back exactly once, by whatever ends the thing holding it in the
// same transaction (a job's row in queued_jobs deleted, a line leaving
// pending).

// Execer runs one statement on a transaction that is not gorm's (the job
// queue's, Postgres's pgx or SQLite's database/sql) and says how many rows
// it changed. Statements use ? placeholders; the adapter rewrites them for
// its driver.
type Execer interface {
	Exec(ctx context.Context, query string, args ...any) (int64, error)
}

// QueueFull is the reason of a refusal past a queue's limit.
const QueueFull = "queue_full"

// TakeQueuedJob takes one of orgID's places for queued jobs in tx, where
// the job is being inserted: fewer than limit must be taken. The caller
// records the job with HoldQueuedJob in the same transaction. ok is false
// when the queue is full.
func TakeQueuedJob(ctx context.Context, tx Execer, orgID, limit int64) (ok bool, err error) {
	if _, err := tx.Exec(ctx, `INSERT INTO org_queues (org_id) VALUES (?) ON CONFLICT (org_id) DO NOTHING`, orgID); err != nil {
		return false, err
	}
	n, err := tx.Exec(ctx, `UPDATE org_queues SET jobs = jobs + 1 WHERE org_id = ? AND jobs + 1 <= ?`, orgID, limit)
	return n == 1, err
}

// HoldQueuedJob records that job jobID of orgID holds a place taken by
// TakeQueuedJob, in the same transaction.
func HoldQueuedJob(ctx context.Context, tx Execer, orgID, jobID int64) error {
	_, err := tx.Exec(ctx, `INSERT INTO queued_jobs (job_id, org_id) VALUES (?, ?)`, jobID, orgID)
	return err
}

// ReleaseQueuedJob gives back the place job jobID holds, if it holds one
// still: a job finished twice, or one queued before places were counted,
// gives back nothing.
func (s *Store) ReleaseQueuedJob(ctx context.Context, jobID int64) error {
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		return releaseJobs(tx, []int64{jobID})
	})
	return dbErr(err, "queued job")
}

// releaseJobs deletes the holds of jobIDs and gives their places back, one
// per hold actually deleted.
func releaseJobs(tx *gorm.DB, jobIDs []int64) error {
	var held []struct{ OrgID int64 }
	if err := tx.Raw(`DELETE FROM queued_jobs WHERE job_id IN ? RETURNING org_id`, jobIDs).Scan(&held).Error; err != nil {
		return err
	}
	perOrg := map[int64]int64{}
	for _, h := range held {
		perOrg[h.OrgID]++
	}
	for org, n := range perOrg {
		if err := tx.Exec(`UPDATE org_queues SET jobs = jobs - ? WHERE org_id = ? AND jobs >= ?`, n, org, n).Error; err != nil {
			return err
		}
	}
	return nil
}

// ReleaseFinishedJobs gives back the places of jobs the queue has finished
// (completed, cancelled or discarded, or deleted already) without their
// worker giving them back: a job cancelled before it ran, one discarded by
// the queue's rescuer, a node lost between finishing a job and giving its
// place back. It returns how many, a chunk at a time.
func (s *Store) ReleaseFinishedJobs(ctx context.Context) (int, error) {
	const chunk = 1000
	released := 0
	for {
		var ids []int64
		err := s.db.WithContext(ctx).Raw(`SELECT h.job_id FROM queued_jobs h LEFT JOIN river_job j ON j.id = h.job_id
			WHERE j.id IS NULL OR j.state IN ('completed', 'cancelled', 'discarded') ORDER BY h.job_id LIMIT ?`, chunk).Scan(&ids).Error
		if err == nil && len(ids) > 0 {
			err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return releaseJobs(tx, ids) })
		}
		if err != nil {
			return released, dbErr(err, "finished jobs' places")
		}
		released += len(ids)
		if len(ids) < chunk {
			return released, nil
		}
	}
}

// QueuedJobs is how many of orgID's jobs hold a place.
func (s *Store) QueuedJobs(ctx context.Context, orgID int64) (int64, error) {
	return s.queueCount(ctx, "jobs", orgID)
}

// PendingBatchLines is how many of orgID's batch lines are pending.
func (s *Store) PendingBatchLines(ctx context.Context, orgID int64) (int64, error) {
	return s.queueCount(ctx, "batch_lines", orgID)
}

func (s *Store) queueCount(ctx context.Context, column string, orgID int64) (int64, error) {
	var n []int64
	err := s.db.WithContext(ctx).Raw(`SELECT `+column+` FROM org_queues WHERE org_id = ?`, orgID).Scan(&n).Error
	if err != nil || len(n) == 0 {
		return 0, dbErr(err, "queue count")
	}
	return n[0], nil
}

// takeBatchLines takes n of orgID's places for pending batch lines in tx,
// where the lines are being stored; refused (a rate_limited error that
// says how many are pending) when they would pass limit.
func takeBatchLines(tx *gorm.DB, orgID, n, limit int64, tierName string) error {
	if n == 0 {
		return nil
	}
	if err := tx.Exec(`INSERT INTO org_queues (org_id) VALUES (?) ON CONFLICT (org_id) DO NOTHING`, orgID).Error; err != nil {
		return err
	}
	res := tx.Exec(`UPDATE org_queues SET batch_lines = batch_lines + ? WHERE org_id = ? AND batch_lines + ? <= ?`, n, orgID, n, limit)
	if res.Error != nil || res.RowsAffected == 1 {
		return res.Error
	}
	var pending []int64
	if err := tx.Raw(`SELECT batch_lines FROM org_queues WHERE org_id = ?`, orgID).Scan(&pending).Error; err != nil {
		return err
	}
	return ErrBatchLinesFull(tierName, limit, firstOr0(pending), n)
}

// releaseBatchLines gives back n places of the organization owning batch
// batchID, for lines that left pending in tx.
func releaseBatchLines(tx *gorm.DB, batchID, n int64) error {
	if n == 0 {
		return nil
	}
	return tx.Exec(`UPDATE org_queues SET batch_lines = batch_lines - ?
		WHERE org_id = (SELECT org_id FROM batches WHERE id = ?) AND batch_lines >= ?`, n, batchID, n).Error
}

func firstOr0(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	return v[0]
}

// ErrJobsFull is the refusal of a job past its tier's queue: how many
// may be queued and how many are. No Retry-After: when a place frees
// depends on how long the queued jobs take, which nothing here knows.
func ErrJobsFull(tierName string, limit, queued int64) error {
	return apperr.WithReason(apperr.RateLimited, QueueFull, fmt.Sprintf(
		"the %s tier queues at most %s jobs per organization and %s are queued; wait for some to finish",
		tierName, thousands(limit), thousands(queued)))
}

// ErrBatchLinesFull is the refusal of a batch whose lines would pass its
// tier's limit of pending lines.
func ErrBatchLinesFull(tierName string, limit, pending, lines int64) error {
	return apperr.WithReason(apperr.RateLimited, QueueFull, fmt.Sprintf(
		"the %s tier allows at most %s pending batch lines per organization; %s are pending and this batch has %s; wait for some to finish or split the file",
		tierName, thousands(limit), thousands(pending), thousands(lines)))
}

// thousands writes n with commas between groups of three digits.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
