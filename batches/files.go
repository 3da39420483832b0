package batches

import (
	"context"
	"io"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
)

// FileID is the public id of a file ("file-12").
func FileID(id int64) string { return "file-" + strconv.FormatInt(id, 10) }

// ID is the public id of a batch ("batch_7").
func ID(id int64) string { return "batch_" + strconv.FormatInt(id, 10) }

// parseID reads a public id with prefix; anything else names nothing.
func parseID(s, prefix string) (int64, bool) {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	return n, err == nil && n > 0 && strconv.FormatInt(n, 10) == rest
}

// FileLimit is the largest batch file caller's tier accepts; 0 accepts none.
func FileLimit(caller accounts.Caller) int64 { return caller.Tier.BatchFileBytes }

// TooLarge is the refusal of a file larger than caller's tier accepts.
func TooLarge(caller accounts.Caller) error {
	t := caller.Tier
	if t.BatchFileBytes == 0 {
		return apperr.Field(apperr.Forbidden, "files_not_allowed", "file", "the "+t.Name+" tier does not accept batch files")
	}
	return apperr.Field(apperr.TooLarge, "file_too_large", "file", "the file is larger than the "+t.Name+" tier accepts: batch files of up to "+
		sizeText(t.BatchFileBytes)+"; split the requests into several files, or ask for a larger tier")
}

// sizeText writes a byte count for people: "1 MiB (1048576 bytes)".
func sizeText(n int64) string {
	exact := strconv.FormatInt(n, 10) + " bytes"
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB (" + exact + ")"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB (" + exact + ")"
	}
	return exact
}

// Upload is a file as POST /v1/files sends it.
type Upload struct {
	Purpose  string
	Filename string
	Content  io.Reader
	// ExpiresAfter is how long to keep the file (OpenAI's expires_after
	// seconds, from its creation); 0 keeps it the default retention.
	ExpiresAfter time.Duration
}

// Upload stores a file for caller's organization: a batch input within
// the tier's size limit, streamed to storage as it is read. Its lines are
// read when a batch is made of it.
func (s *Service) Upload(ctx context.Context, caller accounts.Caller, u Upload) (models.BatchFile, error) {
	if err := checkPurpose(u.Purpose); err != nil {
		return models.BatchFile{}, err
	}
	up, err := s.BeginUpload(ctx, caller, u.Filename)
	if err != nil {
		return models.BatchFile{}, err
	}
	defer up.Abort()
	if _, err := io.Copy(up, u.Content); err != nil {
		return models.BatchFile{}, err
	}
	return up.Commit(u.Purpose, u.ExpiresAfter)
}

func checkPurpose(purpose string) error {
	switch {
	case purpose == "":
		return apperr.Field(apperr.Invalid, "missing_purpose", "purpose", "purpose is required: send purpose=batch")
	case purpose != models.PurposeBatch:
		return apperr.Field(apperr.Invalid, "invalid_purpose", "purpose", "purpose must be batch: this gateway keeps files only as batch input")
	}
	return nil
}

// FileUpload is a file being uploaded: written to storage a chunk at a
// time as it arrives (Write), refused as soon as it passes the tier's
// limit, and seen by no one until Commit. Abort, a refused Write or a
// failed Commit leaves nothing stored.
type FileUpload struct {
	caller  accounts.Caller
	w       *models.FileWriter
	limit   int64
	created time.Time
	keep    time.Duration
	storage int64 // Config.FileStorage
	now     func() time.Time
}

// BeginUpload starts caller's upload of a file named filename (cleaned);
// a tier without batch files refuses it here.
func (s *Service) BeginUpload(ctx context.Context, caller accounts.Caller, filename string) (*FileUpload, error) {
	limit := FileLimit(caller)
	if limit == 0 {
		return nil, TooLarge(caller)
	}
	f := models.BatchFile{OrgID: caller.OrgID, Purpose: models.PurposeBatch, Filename: cleanName(filename), CreatedAt: s.now()}
	w, err := s.store.CreateBatchFile(ctx, &f)
	if err != nil {
		return nil, err
	}
	return &FileUpload{caller: caller, w: w, limit: limit, created: f.CreatedAt, keep: s.cfg.FileRetention, storage: s.cfg.FileStorage, now: s.now}, nil
}

// Write stores p; past the tier's limit it is refused (file_too_large)
// and the upload aborted.
func (u *FileUpload) Write(p []byte) (int, error) {
	if u.w.Size()+int64(len(p)) > u.limit {
		u.Abort()
		return 0, TooLarge(u.caller)
	}
	return u.w.Write(p)
}

// Commit checks the upload's purpose and expires_after and makes the file
// seen; on a refusal the upload is aborted.
func (u *FileUpload) Commit(purpose string, expiresAfter time.Duration) (models.BatchFile, error) {
	err := checkPurpose(purpose)
	if err == nil && expiresAfter != 0 && (expiresAfter < time.Hour || expiresAfter > 30*24*time.Hour) {
		err = apperr.Field(apperr.Invalid, "invalid_expires_after", "expires_after",
			"expires_after seconds must be from 3600 (an hour) to 2592000 (30 days)")
	}
	if err != nil {
		u.Abort()
		return models.BatchFile{}, err
	}
	keep := u.keep
	if expiresAfter > 0 {
		keep = expiresAfter
	}
	return u.w.CommitWithin(u.now(), u.created.Add(keep), u.storage)
}

// Abort deletes what was stored of the upload; after Commit it does
// nothing.
func (u *FileUpload) Abort() { u.w.Abort() }

// cleanName keeps the last element of a client's file name, at most 255
// bytes of valid UTF-8; "upload.jsonl" when there is none.
func cleanName(name string) string {
	name = strings.ToValidUTF8(path.Base(strings.ReplaceAll(name, `\`, "/")), "")
	for len(name) > 255 {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	if name == "" || name == "." || name == "/" {
		return "upload.jsonl"
	}
	return name
}

// File returns one of orgID's files, without its content.
func (s *Service) File(ctx context.Context, orgID int64, id string) (models.BatchFile, error) {
	n, ok := parseID(id, "file-")
	if !ok {
		return models.BatchFile{}, models.ErrNoBatchFile
	}
	return s.store.BatchFile(ctx, orgID, n, s.now())
}

// FileContent returns one of orgID's files and a reader of its content,
// which reads it a chunk at a time.
func (s *Service) FileContent(ctx context.Context, orgID int64, id string) (models.BatchFile, io.Reader, error) {
	n, ok := parseID(id, "file-")
	if !ok {
		return models.BatchFile{}, nil, models.ErrNoBatchFile
	}
	return s.store.OpenBatchFile(ctx, orgID, n, s.now())
}

// DeleteFile deletes one of orgID's files.
func (s *Service) DeleteFile(ctx context.Context, orgID int64, id string) error {
	n, ok := parseID(id, "file-")
	if !ok {
		return models.ErrNoBatchFile
	}
	return s.store.DeleteBatchFile(ctx, orgID, n, s.now())
}

// FileList is a page of files as GET /v1/files asks for it.
type FileList struct {
	Purpose string
	After   string // a file id; "" from the start
	Limit   int    // 1 to 10000; 0: 10000
	Order   string // "asc" or "desc" (the default)
}

// Files lists a page of orgID's files and says whether more follow.
func (s *Service) Files(ctx context.Context, orgID int64, l FileList) ([]models.BatchFile, bool, error) {
	q := models.FileQuery{Purpose: l.Purpose, Limit: l.Limit, Now: s.now()}
	switch l.Order {
	case "", "desc":
	case "asc":
		q.Ascending = true
	default:
		return nil, false, apperr.Field(apperr.Invalid, "invalid_order", "order", "order must be asc or desc")
	}
	if q.Limit == 0 {
		q.Limit = 10000
	}
	if q.Limit < 1 || q.Limit > 10000 {
		return nil, false, apperr.Field(apperr.Invalid, "invalid_limit", "limit", "limit must be from 1 to 10000")
	}
	if l.After != "" {
		n, ok := parseID(l.After, "file-")
		if !ok {
			return nil, false, apperr.Field(apperr.Invalid, "invalid_after", "after", "after must be a file id such as file-12")
		}
		q.After = n
	}
	limit := q.Limit
	q.Limit++
	fs, err := s.store.BatchFiles(ctx, orgID, q)
	if err != nil {
		return nil, false, err
	}
	if len(fs) > limit {
		return fs[:limit], true, nil
	}
	return fs, false, nil
}
