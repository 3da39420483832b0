package models

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/apperr"
)

// File purposes of the Batch API.
const (
	PurposeBatch       = "batch"        // an uploaded input file
	PurposeBatchOutput = "batch_output" // a batch's output or error file
)

// BatchFile is a file of the Batch API: an organization's uploaded input,
// or the output or error file of one of its batches.
type BatchFile struct {
	ID        int64
	OrgID     int64
	Purpose   string
	Filename  string
	Bytes     int64
	Content   []byte // only from BatchFileContent
	CreatedAt time.Time
	ExpiresAt time.Time
}

// batchFileColumns are a file's columns but its content.
const batchFileColumns = "id, org_id, purpose, filename, bytes, created_at, expires_at"

// ErrNoBatchFile is the answer for a file that is not the caller's or has expired.
var ErrNoBatchFile = apperr.WithReason(apperr.NotFound, "file_not_found", "no such file (or it expired)")

// CreateBatchFile stores f and sets its id.
func (s *Store) CreateBatchFile(ctx context.Context, f *BatchFile) error {
	f.Bytes = int64(len(f.Content))
	return dbErr(s.db.WithContext(ctx).Create(f).Error, "batch file")
}

// BatchFile returns one of orgID's files without its content; another
// organization's, or one expired at now, is not found.
func (s *Store) BatchFile(ctx context.Context, orgID, id int64, now time.Time) (BatchFile, error) {
	var f BatchFile
	res := s.db.WithContext(ctx).Select(batchFileColumns).Where("org_id = ? AND id = ? AND expires_at > ?", orgID, id, now.UTC()).Limit(1).Find(&f)
	if res.Error != nil {
		return f, dbErr(res.Error, "batch file")
	}
	if res.RowsAffected == 0 {
		return f, ErrNoBatchFile
	}
	return f, nil
}

// BatchFileContent returns one of orgID's files with its content.
func (s *Store) BatchFileContent(ctx context.Context, orgID, id int64, now time.Time) (BatchFile, error) {
	var f BatchFile
	res := s.db.WithContext(ctx).Where("org_id = ? AND id = ? AND expires_at > ?", orgID, id, now.UTC()).Limit(1).Find(&f)
	if res.Error != nil {
		return f, dbErr(res.Error, "batch file")
	}
	if res.RowsAffected == 0 {
		return f, ErrNoBatchFile
	}
	return f, nil
}

// DeleteBatchFile deletes one of orgID's files. A batch made from it keeps
// running: its lines were copied into their jobs.
func (s *Store) DeleteBatchFile(ctx context.Context, orgID, id int64, now time.Time) error {
	res := s.db.WithContext(ctx).Where("org_id = ? AND id = ? AND expires_at > ?", orgID, id, now.UTC()).Delete(&BatchFile{})
	if res.Error != nil {
		return dbErr(res.Error, "batch file")
	}
	if res.RowsAffected == 0 {
		return ErrNoBatchFile
	}
	return nil
}

// FileQuery is a page of an organization's files: ids after After (before
// it, newest first, unless Ascending), of Purpose when set.
type FileQuery struct {
	Purpose   string
	After     int64 // 0: from the start
	Limit     int
	Ascending bool
	Now       time.Time
}

// BatchFiles lists a page of orgID's files without their content.
func (s *Store) BatchFiles(ctx context.Context, orgID int64, q FileQuery) ([]BatchFile, error) {
	db := s.db.WithContext(ctx).Select(batchFileColumns).Where("org_id = ? AND expires_at > ?", orgID, q.Now.UTC())
	if q.Purpose != "" {
		db = db.Where("purpose = ?", q.Purpose)
	}
	switch {
	case q.Ascending:
		db = db.Where("id > ?", q.After).Order("id")
	case q.After > 0:
		db = db.Where("id < ?", q.After).Order("id DESC")
	default:
		db = db.Order("id DESC")
	}
	var fs []BatchFile
	err := db.Limit(q.Limit).Find(&fs).Error
	return fs, dbErr(err, "batch files")
}
