package models

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"time"

	"gorm.io/gorm"

	"github.com/sluicehq/sluice/apperr"
)

// File purposes of the Batch API.
const (
	PurposeBatch       = "batch"        // an uploaded input file
	PurposeBatchOutput = "batch_output" // a batch's output or error file
)

// BatchFile is a file of the Batch API: an organization's uploaded input,
// or the output or error file of one of its batches. Its content is kept
// in chunks (batch_file_chunks), written with a FileWriter and read with a
// FileReader, never whole.
type BatchFile struct {
	ID        int64
	OrgID     int64
	Purpose   string
	Filename  string
	Bytes     int64
	Complete  bool // false while its content is being written: no read sees it
	CreatedAt time.Time
	ExpiresAt time.Time
}

// FileChunk is the most content one chunk row holds.
const FileChunk = 256 << 10

// batchFileChunk is a row of a file's content.
type batchFileChunk struct {
	FileID int64
	Seq    int
	Data   []byte
}

func (batchFileChunk) TableName() string { return "batch_file_chunks" }

// abandonedAfter is how long an upload may take: a file still incomplete
// then (its node was lost mid-upload) expires, and the sweep deletes it.
const abandonedAfter = 24 * time.Hour

// ErrNoBatchFile is the answer for a file that is not the caller's or has expired.
var ErrNoBatchFile = apperr.WithReason(apperr.NotFound, "file_not_found", "no such file (or it expired)")

// FileWriter stores a new file's content as it is written, a chunk at a
// time; the file is seen by no read until Commit. Abort, or a failed write
// or Commit, deletes what was stored. It is not safe for concurrent use.
type FileWriter struct {
	db   *gorm.DB
	ctx  context.Context
	file BatchFile
	buf  []byte
	seq  int
	err  error
	done bool
}

// CreateBatchFile starts f (its id is set), incomplete, and returns the
// writer of its content.
func (s *Store) CreateBatchFile(ctx context.Context, f *BatchFile) (*FileWriter, error) {
	return createFile(ctx, s.db, f)
}

func createFile(ctx context.Context, db *gorm.DB, f *BatchFile) (*FileWriter, error) {
	f.Bytes, f.Complete = 0, false
	row := *f
	row.ExpiresAt = f.CreatedAt.Add(abandonedAfter)
	if err := db.WithContext(ctx).Create(&row).Error; err != nil {
		return nil, dbErr(err, "batch file")
	}
	f.ID = row.ID
	return &FileWriter{db: db, ctx: ctx, file: *f, buf: make([]byte, 0, FileChunk)}, nil
}

// Write stores p, in whole chunks as they fill.
func (w *FileWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), FileChunk-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == FileChunk {
			if err := w.flush(); err != nil {
				return n - len(p), err
			}
		}
	}
	return n, nil
}

// Size is how much has been written.
func (w *FileWriter) Size() int64 { return w.file.Bytes + int64(len(w.buf)) }

func (w *FileWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.db.WithContext(w.ctx).Create(&batchFileChunk{FileID: w.file.ID, Seq: w.seq, Data: w.buf}).Error
	if err != nil {
		w.fail(dbErr(err, "batch file chunk"))
		return w.err
	}
	w.file.Bytes += int64(len(w.buf))
	w.seq++
	w.buf = w.buf[:0]
	return nil
}

// fail keeps err for every later call and deletes what was stored.
func (w *FileWriter) fail(err error) {
	w.err = err
	w.Abort()
}

// Commit stores the rest and makes the file complete, to expire at
// expiresAt, and returns it.
func (w *FileWriter) Commit(expiresAt time.Time) (BatchFile, error) {
	return w.CommitWithin(time.Time{}, expiresAt, 0)
}

// CommitWithin is Commit for a file its organization keeps within storage
// bytes of files in all (0: no limit), counting the files unexpired at
// now: counted with the organization's row locked, so two uploads at once
// cannot both take the last room. Past it the file is refused
// (file_storage_full) and aborted.
func (w *FileWriter) CommitWithin(now, expiresAt time.Time, storage int64) (BatchFile, error) {
	if w.err != nil {
		return BatchFile{}, w.err
	}
	if err := w.flush(); err != nil {
		return BatchFile{}, err
	}
	w.file.Complete, w.file.ExpiresAt = true, expiresAt.UTC()
	err := w.db.WithContext(w.ctx).Transaction(func(tx *gorm.DB) error {
		if storage > 0 {
			if err := lockOrganization(tx, w.file.OrgID); err != nil {
				return err
			}
			var held int64
			if err := tx.Model(&BatchFile{}).Where("org_id = ? AND complete = ? AND expires_at > ?", w.file.OrgID, true, now.UTC()).
				Select("COALESCE(SUM(bytes), 0)").Scan(&held).Error; err != nil {
				return dbErr(err, "batch files")
			}
			if held+w.file.Bytes > storage {
				return apperr.Field(apperr.TooLarge, "file_storage_full", "file", fmt.Sprintf(
					"the organization keeps %d bytes of files, and this one's %d would pass its %d; delete files (DELETE /v1/files/{id}) or wait for them to expire",
					held, w.file.Bytes, storage))
			}
		}
		res := tx.Model(&BatchFile{}).Where("id = ? AND complete = ?", w.file.ID, false).
			Updates(map[string]any{"bytes": w.file.Bytes, "complete": true, "expires_at": w.file.ExpiresAt})
		if res.Error == nil && res.RowsAffected != 1 {
			res.Error = fmt.Errorf("batch file %d was deleted while it was written", w.file.ID)
		}
		return dbErr(res.Error, "batch file")
	})
	if err != nil {
		w.fail(err)
		w.Abort()
		return BatchFile{}, err
	}
	w.done = true
	return w.file, nil
}

// Abort deletes the file and what was stored of it; after Commit it does
// nothing.
func (w *FileWriter) Abort() {
	if w.done {
		return
	}
	w.done = true
	if w.err == nil {
		w.err = errors.New("the file was aborted")
	}
	// The chunks go with the file (ON DELETE CASCADE). Deleted even when
	// the request that wrote it was cancelled; a failure here leaves an
	// incomplete file that the sweep deletes when it expires.
	w.db.WithContext(context.WithoutCancel(w.ctx)).Where("id = ? AND complete = ?", w.file.ID, false).Delete(&BatchFile{})
}

// batchFileColumns are a file's columns.
const batchFileColumns = "id, org_id, purpose, filename, bytes, complete, created_at, expires_at"

// BatchFile returns one of orgID's files (its row); another
// organization's, one expired at now, or one not yet complete, is not
// found.
func (s *Store) BatchFile(ctx context.Context, orgID, id int64, now time.Time) (BatchFile, error) {
	var f BatchFile
	res := s.db.WithContext(ctx).Select(batchFileColumns).Where("org_id = ? AND id = ? AND complete = ? AND expires_at > ?", orgID, id, true, now.UTC()).
		Limit(1).Find(&f)
	if res.Error != nil {
		return f, dbErr(res.Error, "batch file")
	}
	if res.RowsAffected == 0 {
		return f, ErrNoBatchFile
	}
	return f, nil
}

// OpenBatchFile returns one of orgID's files and a reader of its content.
func (s *Store) OpenBatchFile(ctx context.Context, orgID, id int64, now time.Time) (BatchFile, *FileReader, error) {
	f, err := s.BatchFile(ctx, orgID, id, now)
	if err != nil {
		return f, nil, err
	}
	return f, s.FileReader(ctx, f), nil
}

// FileReader reads f's content a chunk at a time. The reader runs on s: a
// store on a transaction's connection (On) reads through it.
func (s *Store) FileReader(ctx context.Context, f BatchFile) *FileReader {
	return &FileReader{db: s.db, ctx: ctx, id: f.ID, size: f.Bytes}
}

// FileReader reads a stored file's content, one chunk (one query) at a
// time: at most a chunk of it is held, and no query outlives its chunk.
type FileReader struct {
	db   *gorm.DB
	ctx  context.Context
	id   int64
	size int64
	read int64 // bytes returned so far
	seq  int   // the next chunk
	buf  []byte
}

// Read reads the content, fetching the next chunk when the last is used.
func (r *FileReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.read >= r.size {
			return 0, io.EOF
		}
		if err := r.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	r.read += int64(n)
	return n, nil
}

// WriteTo writes the content to w chunk by chunk, without another copy.
func (r *FileReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		for len(r.buf) == 0 {
			if r.read >= r.size {
				return total, nil
			}
			if err := r.next(); err != nil {
				return total, err
			}
		}
		n, err := w.Write(r.buf)
		r.buf = r.buf[n:]
		r.read += int64(n)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
}

// next fetches the next chunk.
func (r *FileReader) next() error {
	var data []byte
	err := r.db.WithContext(r.ctx).Raw("SELECT data FROM batch_file_chunks WHERE file_id = ? AND seq = ?", r.id, r.seq).Row().Scan(&data)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && len(data) == 0) || (err == nil && r.read+int64(len(data)) > r.size) {
		// Deleted (or expired and swept) while it was read.
		return apperr.New(apperr.NotFound, "batch file %d's content is gone", r.id)
	}
	if err != nil {
		return dbErr(err, "batch file chunk")
	}
	r.buf, r.seq = data, r.seq+1
	return nil
}

// DeleteBatchFile deletes one of orgID's files. A batch made from it keeps
// running: its lines were copied into their jobs.
func (s *Store) DeleteBatchFile(ctx context.Context, orgID, id int64, now time.Time) error {
	res := s.db.WithContext(ctx).Where("org_id = ? AND id = ? AND complete = ? AND expires_at > ?", orgID, id, true, now.UTC()).Delete(&BatchFile{})
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

// BatchFiles lists a page of orgID's complete files.
func (s *Store) BatchFiles(ctx context.Context, orgID int64, q FileQuery) ([]BatchFile, error) {
	db := s.db.WithContext(ctx).Select(batchFileColumns).Where("org_id = ? AND complete = ? AND expires_at > ?", orgID, true, q.Now.UTC())
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

// On returns the store running on tx: for reading (a file's chunks) inside
// a transaction that holds the one connection of SQLite.
func (s *Store) On(tx *sql.Tx) *Store {
	// A session with a context has a statement of its own (as gorm's
	// Begin makes): the store's is left as it was.
	db := s.db.Session(&gorm.Session{NewDB: true, Context: context.Background()})
	db.Statement.ConnPool = tx
	return &Store{db: db, now: s.now}
}
