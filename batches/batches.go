// Package batches is OpenAI's Batch API on the job queue: JSON Lines files
// of requests (chat completions or embeddings, one endpoint a batch)
// uploaded per organization, batches that run each line as a job through
// the completion pipeline (at the pace the tier allows, like
// any job), and the output and error files, made once when the last line
// is done. A malformed line fails alone; the batch goes on.
//
// Lifetimes: a batch has OpenAI's 24-hour completion window (lines not run
// by then fail with batch_expired and the batch ends expired); files, the
// input and the output and error files, are kept for FileRetention (30 days
// by default) unless the upload or the batch asked for less; a finished
// batch is kept as long after its window ends.
package batches

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/accounts"
	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/completion"
	"github.com/sluicehq/sluice/jobs"
	"github.com/sluicehq/sluice/metering"
	"github.com/sluicehq/sluice/models"
)

// Window is the one completion window: OpenAI's.
const Window = "24h"

// MaxLines is the most requests one batch takes, as OpenAI's.
const MaxLines = 50_000

// Config shapes the batches.
type Config struct {
	// FileRetention is how long a file is kept (unless its upload or batch
	// asked for less), and a finished batch after its window.
	FileRetention time.Duration
	// FileStorage is how many bytes of files (uploads and batches' output
	// and error files) one organization may keep: an upload past it is
	// refused. 0: no limit.
	FileStorage int64
	// MaxLineBytes is the longest line of an input file: a longer one
	// fails alone (line_too_long), unread. 0: DefaultMaxLineBytes.
	MaxLineBytes int
	Now          func() time.Time
}

// DefaultMaxLineBytes is the longest line by default: the default request
// body limit (1 MiB) and room for the line's custom_id, method and url.
const DefaultMaxLineBytes = 1<<20 + 4<<10

// MaxListedFailures is how many of an input file's lines that fail when
// it is read have a line of their own in the error file; the rest are
// counted in one more line after them.
const MaxListedFailures = 1000

// Deps are what the batches use.
type Deps struct {
	Store    *models.Store
	Pipeline *completion.Pipeline // checks each line as a live request would be
	Log      *slog.Logger
}

// Service keeps an organization's files and batches, and hears their
// lines' outcomes from the job queue (it is the queue's jobs.BatchLines).
type Service struct {
	store    *models.Store
	pipeline *completion.Pipeline
	log      *slog.Logger
	cfg      Config
	// wakes are the cancelled batches whose waiting lines Run wakes, so
	// that the cancel request does not wait for it (a large batch has
	// thousands of lines to wake, one queue call each).
	wakes chan int64
}

// pendingWakes is how many cancellations wait for Run to wake their lines.
// Beyond it, a line finds its batch cancelled when its own wait ends.
const pendingWakes = 64

// New returns the batches on d.Store.
func New(d Deps, cfg Config) *Service {
	if cfg.MaxLineBytes <= 0 {
		cfg.MaxLineBytes = DefaultMaxLineBytes
	}
	return &Service{store: d.Store, pipeline: d.Pipeline, log: d.Log, cfg: cfg, wakes: make(chan int64, pendingWakes)}
}

func (s *Service) now() time.Time { return s.cfg.Now().UTC() }

// Queue is where a batch's lines run: the job queue.
type Queue interface {
	EnqueueBatch(ctx context.Context, caller accounts.Caller, batchID int64, lines jobs.LineSource) error
	// WakeBatch makes the batch's lines that wait run now.
	WakeBatch(ctx context.Context, batchID int64) error
	// HasBatchLines says whether any of the batch's lines was queued.
	HasBatchLines(ctx context.Context, batchID int64) (bool, error)
}

// Create is a new batch as POST /v1/batches asks for it.
type Create struct {
	InputFileID      string
	Endpoint         string
	CompletionWindow string
	Metadata         map[string]string
	// OutputExpiresAfter is how long to keep the output and error files
	// (seconds, from their creation); 0: FileRetention.
	OutputExpiresAfter int64
}

// Create makes a batch of caller's input file and queues its requests on
// q, each a job run with caller's token. Lines that cannot run (malformed,
// a duplicate custom_id, a body the pipeline refuses) are failed at once
// and go to the error file: the first MaxListedFailures of them, each with
// its reason, and a count of the rest.
//
// The file is read as a stream, twice: once to check and count its lines
// (refused at its first line past MaxLines), keeping each request's line
// and custom_id; again, inside the queue's transaction, for the bodies of
// the lines to queue. Neither the file nor the bodies are held whole.
func (s *Service) Create(ctx context.Context, q Queue, caller accounts.Caller, in Create) (models.Batch, error) {
	if err := in.check(); err != nil {
		return models.Batch{}, err
	}
	fileID, ok := parseID(in.InputFileID, "file-")
	if !ok {
		return models.Batch{}, apperr.Field(apperr.NotFound, "file_not_found", "input_file_id", "no such file: "+in.InputFileID)
	}
	f, err := s.store.BatchFile(ctx, caller.OrgID, fileID, s.now())
	if apperr.CodeOf(err) == apperr.NotFound {
		return models.Batch{}, apperr.Field(apperr.NotFound, "file_not_found", "input_file_id", "no such file: "+in.InputFileID+" (or it expired)")
	}
	if err != nil {
		return models.Batch{}, err
	}
	if f.Purpose != models.PurposeBatch {
		return models.Batch{}, apperr.Field(apperr.Invalid, "invalid_input_file", "input_file_id", in.InputFileID+" is a batch's output, not an input file (purpose batch)")
	}
	read, err := s.read(s.store.FileReader(ctx, f), in.InputFileID, in.Endpoint)
	if err != nil {
		return models.Batch{}, err
	}
	now := s.now()
	b := models.Batch{OrgID: caller.OrgID, TokenID: caller.TokenID, InputFileID: fileID, Endpoint: in.Endpoint,
		CompletionWindow: in.CompletionWindow, Status: models.BatchInProgress, OutputTTLSecs: in.OutputExpiresAfter,
		Total: read.total, Failed: read.failed, CreatedAt: now, InProgressAt: &now, ExpiresAt: now.Add(24 * time.Hour)}
	if len(in.Metadata) > 0 {
		m, _ := json.Marshal(in.Metadata)
		b.Metadata = string(m)
	}
	// The lines are stored before their jobs exist, so no job can finish
	// before its line can hear it.
	err = s.store.CreateBatch(ctx, &b, read.rows, s.cfg.FileRetention,
		models.PendingLimit{Tier: caller.Tier.Name, Lines: caller.Tier.MaxPendingBatchLines})
	if err != nil {
		if apperr.As(err).Reason == models.QueueFull {
			s.pipeline.Rejected(caller, metering.RejectedQueue)
		}
		return models.Batch{}, err
	}
	if len(read.queued) == 0 {
		return b, nil
	}
	if err := q.EnqueueBatch(ctx, caller, b.ID, s.queued(f, in.Endpoint, read.queued)); err != nil {
		errs, _ := json.Marshal([]jobs.Failure{{Code: "internal", Message: "the batch's requests could not be queued; create it again"}})
		if ferr := s.store.FailBatch(context.WithoutCancel(ctx), caller.OrgID, b.ID, string(errs), now); ferr != nil {
			s.log.Error("failing a batch that could not be queued failed", "batch_id", ID(b.ID), "err", ferr)
		}
		return models.Batch{}, err
	}
	return b, nil
}

// reading is what Create keeps of an input file's first reading.
type reading struct {
	total, failed int       // requests, and those that failed
	lines         int       // the file's lines, blank ones too
	queued        []request // the requests to queue, in order
	listed        []inputLine
}

// request is a line to queue, without its body.
type request struct {
	line     int
	customID string
}

// read checks and counts the requests of an input file (id, for the
// refusals) for a batch of endpoint, stopping at the first past MaxLines.
func (s *Service) read(r io.Reader, id, endpoint string) (reading, error) {
	var out reading
	sc := newScanner(r, s.pipeline, endpoint, s.cfg.MaxLineBytes)
	for {
		l, err := sc.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return reading{}, err
		}
		if out.total++; out.total > MaxLines {
			return reading{}, apperr.Field(apperr.Invalid, "too_many_requests", "input_file_id",
				"a batch takes at most "+strconv.Itoa(MaxLines)+" requests; split the file")
		}
		switch {
		case l.failure == nil:
			out.queued = append(out.queued, request{line: l.line, customID: l.customID})
		case out.failed < MaxListedFailures:
			l.body = nil
			out.listed = append(out.listed, l.numbered())
			fallthrough
		default:
			out.failed++
		}
	}
	if out.total == 0 {
		return reading{}, apperr.Field(apperr.Invalid, "empty_input_file", "input_file_id", id+" has no requests: one JSON object a line")
	}
	out.lines = sc.lines.n
	return out, nil
}

// rows passes a new batch's lines to yield in input order: pending for
// the requests to queue, failed with their line of the error file for
// those listed, and after them, when more failed, one line that counts
// the rest.
func (r reading) rows(batchID int64, yield func(models.BatchResult) error) error {
	q, f := r.queued, r.listed
	for len(q) > 0 || len(f) > 0 {
		var row models.BatchResult
		if len(f) == 0 || (len(q) > 0 && q[0].line < f[0].line) {
			row = models.BatchResult{Line: q[0].line, CustomID: q[0].customID, State: models.LinePending}
			q = q[1:]
		} else {
			l := f[0]
			row = models.BatchResult{Line: l.line, CustomID: l.customID, State: models.LineFailed, ErrorCode: l.failure.Code,
				Result: failedLine(lineID("", batchID, l.line), l.customID, l.failure)}
			f = f[1:]
		}
		if err := yield(row); err != nil {
			return err
		}
	}
	if more := r.failed - len(r.listed); more > 0 {
		line := r.lines + 1 // after every line of the file, so last in the error file
		fail := &jobs.Failure{Code: "more_lines_failed", Message: fmt.Sprintf("… and %d more lines failed (only the first %d are listed)", more, MaxListedFailures)}
		return yield(models.BatchResult{Line: line, State: models.LineFailed, ErrorCode: fail.Code,
			Result: failedLine(lineID("", batchID, line), "", fail)})
	}
	return nil
}

// queued is the source of the bodies of a file's requests to queue for a
// batch of endpoint: the file read again (through the queue's transaction
// on SQLite), each of those lines' custom_id and body taken as the first
// reading checked them.
func (s *Service) queued(f models.BatchFile, endpoint string, queued []request) jobs.LineSource {
	return func(ctx context.Context, tx *sql.Tx, yield func(jobs.Line) error) error {
		lines := newLineReader(s.storeOn(tx).FileReader(ctx, f), s.cfg.MaxLineBytes)
		for _, want := range queued {
			var raw []byte
			for lines.n < want.line {
				var err error
				if raw, _, err = lines.next(); err != nil {
					if err == io.EOF {
						err = fmt.Errorf("batch file %d ended before its line %d", f.ID, want.line)
					}
					return err
				}
			}
			if lines.n == 1 {
				raw = bytes.TrimPrefix(raw, bom)
			}
			l, err := bodyOf(raw)
			if err != nil || l.CustomID != want.customID {
				return fmt.Errorf("batch file %d's line %d is not as it was read", f.ID, want.line)
			}
			l.Endpoint = endpoint
			if err := yield(l); err != nil {
				return err
			}
		}
		return nil
	}
}

// storeOn is the store that reads through tx (SQLite's transaction), or
// the service's own when there is none.
func (s *Service) storeOn(tx *sql.Tx) *models.Store {
	if tx == nil {
		return s.store
	}
	return s.store.On(tx)
}

// check says what is wrong with a new batch's parameters.
func (in Create) check() error {
	switch {
	case in.InputFileID == "":
		return apperr.Field(apperr.Invalid, "missing_input_file_id", "input_file_id", "input_file_id is required: the id of a file uploaded with purpose batch")
	case in.Endpoint != Endpoint && in.Endpoint != EmbeddingsEndpoint:
		return apperr.Field(apperr.Invalid, "invalid_endpoint", "endpoint", "endpoint must be "+Endpoint+" or "+EmbeddingsEndpoint+": the endpoints batches support here")
	case in.CompletionWindow != Window:
		return apperr.Field(apperr.Invalid, "invalid_completion_window", "completion_window", "completion_window must be 24h")
	case len(in.Metadata) > 16:
		return apperr.Field(apperr.Invalid, "invalid_metadata", "metadata", "metadata holds at most 16 keys")
	case in.OutputExpiresAfter != 0 && (in.OutputExpiresAfter < 3600 || in.OutputExpiresAfter > 30*24*3600):
		return apperr.Field(apperr.Invalid, "invalid_output_expires_after", "output_expires_after",
			"output_expires_after seconds must be from 3600 (an hour) to 2592000 (30 days)")
	}
	for k, v := range in.Metadata {
		if len(k) > 64 || len(v) > 512 {
			return apperr.Field(apperr.Invalid, "invalid_metadata", "metadata", "metadata keys are at most 64 characters and values at most 512")
		}
	}
	return nil
}

// Get returns one of orgID's batches.
func (s *Service) Get(ctx context.Context, orgID int64, id string) (models.Batch, error) {
	n, ok := parseID(id, "batch_")
	if !ok {
		return models.Batch{}, models.ErrNoBatch
	}
	return s.store.Batch(ctx, orgID, n)
}

// List returns a page of orgID's batches, newest first, after the batch
// id after ("" from the newest), and whether more follow.
func (s *Service) List(ctx context.Context, orgID int64, after string, limit int) ([]models.Batch, bool, error) {
	if limit == 0 {
		limit = 20
	}
	if limit < 1 || limit > 100 {
		return nil, false, apperr.Field(apperr.Invalid, "invalid_limit", "limit", "limit must be from 1 to 100")
	}
	var before int64
	if after != "" {
		n, ok := parseID(after, "batch_")
		if !ok {
			return nil, false, apperr.Field(apperr.Invalid, "invalid_after", "after", "after must be a batch id such as batch_12")
		}
		before = n
	}
	bs, err := s.store.Batches(ctx, orgID, before, limit+1)
	if err != nil {
		return nil, false, err
	}
	if len(bs) > limit {
		return bs[:limit], true, nil
	}
	return bs, false, nil
}

// Cancel stops one of orgID's batches: lines not started are skipped (and
// go to the error file as batch_cancelled), running ones finish; the batch
// is cancelling until they have, then cancelled. Run wakes the lines that
// wait, so they are skipped soon after, not when their wait ends.
func (s *Service) Cancel(ctx context.Context, orgID int64, id string) (models.Batch, error) {
	n, ok := parseID(id, "batch_")
	if !ok {
		return models.Batch{}, models.ErrNoBatch
	}
	b, err := s.store.CancelBatch(ctx, orgID, n, s.now())
	if err != nil {
		return b, err
	}
	if b.Status == models.BatchCancelling {
		select {
		case s.wakes <- b.ID:
		default: // Run is behind: the lines are skipped when they wake by themselves
		}
	}
	return b, nil
}

// Stopped says whether a line of batch batchID may still run: not once the
// batch is cancelling, failed or past its window.
func (s *Service) Stopped(ctx context.Context, batchID int64) (*jobs.Failure, error) {
	status, expiresAt, err := s.store.BatchState(ctx, batchID)
	switch {
	case apperr.CodeOf(err) == apperr.NotFound:
		return &jobs.Failure{Code: models.ExpiredLine, Message: "the batch no longer exists"}, nil
	case err != nil:
		return nil, err
	case status == models.BatchCancelling || status == models.BatchCancelled:
		return lineCancelled(), nil
	case status == models.BatchFailed:
		return &jobs.Failure{Code: "batch_failed", Message: "the batch failed before this request ran"}, nil
	case !models.BatchOpen(status) || !s.now().Before(expiresAt):
		return lineExpired(), nil
	}
	return nil, nil
}

// lineCancelled and lineExpired are the outcomes of lines that never ran,
// the same whether a worker or the sweep finds them so.
func lineCancelled() *jobs.Failure {
	return &jobs.Failure{Code: "batch_cancelled", Message: "the batch was cancelled before this request ran"}
}

func lineExpired() *jobs.Failure {
	return &jobs.Failure{Code: models.ExpiredLine, Message: "this request could not be run within the batch's 24h completion window"}
}

// LineDone records a line's final outcome; the batch's last line makes its
// files. It is the job queue's hook: an error retries the job.
func (s *Service) LineDone(ctx context.Context, batchID int64, customID, jobID string, out jobs.Output) error {
	return s.store.FinishBatchLine(ctx, batchID, customID, outcome(jobID, customID, out), s.now(), s.cfg.FileRetention)
}
