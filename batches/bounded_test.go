package batches_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/batches"
	"github.com/sluicehq/sluice/jobs"
	"github.com/sluicehq/sluice/models"
)

// A file of 2,000 bad lines around a good one makes a batch whose error
// file lists the first 1,000 failures, each with its line, and then one
// line that counts the other 1,000; the counts are of every line.
func TestFailuresAreListedUpToAThousand(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		var lines []string
		for i := range 2001 {
			if i == 1500 {
				lines = append(lines, line("good", "x"))
				continue
			}
			lines = append(lines, fmt.Sprintf(`{"custom_id":"bad-%d","method":"GET"}`, i))
		}
		held := &heldQueue{}
		b := f.create(held, f.caller, strings.Join(lines, "\n")+"\n")
		if b.Total != 2001 || b.Failed != 2000 || b.Status != "in_progress" || len(held.lines) != 1 || held.lines[0].CustomID != "good" {
			t.Fatalf("created: %+v, %d queued", b, len(held.lines))
		}
		var rows int64
		db.Gorm.Raw("SELECT COUNT(*) FROM batch_results WHERE batch_id = ?", b.ID).Scan(&rows)
		if rows != 1000+1+1 {
			t.Errorf("%d result rows, want 1,000 failures, their count and the pending line", rows)
		}
		if err := f.svc.LineDone(context.Background(), b.ID, "good", "job_1", outputOK()); err != nil {
			t.Fatal(err)
		}
		done, _ := f.svc.Get(context.Background(), f.caller.OrgID, batches.ID(b.ID))
		if done.Status != "completed" || done.Completed != 1 || done.Failed != 2000 {
			t.Fatalf("done: %+v", done)
		}
		errs := f.file(f.caller, done.ErrorFileID)
		if len(errs) != 1001 {
			t.Fatalf("%d error lines, want 1,001", len(errs))
		}
		for i, l := range errs[:1000] {
			if want := fmt.Sprintf("line %d: ", i+1); l.custom() != fmt.Sprintf("bad-%d", i) || l.Error.Code != "invalid_method" || !strings.HasPrefix(l.Error.Message, want) {
				t.Fatalf("error line %d: %s %+v", i, l.custom(), l.Error)
			}
		}
		last := errs[1000]
		if last.CustomID != nil || last.Response != nil || last.Error.Code != "more_lines_failed" ||
			last.Error.Message != "… and 1000 more lines failed (only the first 1000 are listed)" || last.ID != fmt.Sprintf("batch_req_%d_2003", b.ID) {
			t.Errorf("the count line: %+v %+v", last, last.Error)
		}
		if out := f.file(f.caller, done.OutputFileID); len(out) != 1 || out[0].custom() != "good" {
			t.Errorf("output: %+v", out)
		}
	})
}

// A file of 50,001 requests is refused, naming the limit, and nothing of
// a batch is stored; 50,000 make one.
func TestAFileOfMoreThanMaxLinesIsRefused(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		ctx := context.Background()
		over := f.upload(f.caller, strings.Repeat("x\n", batches.MaxLines+1))
		_, err := f.svc.Create(ctx, &heldQueue{}, f.caller, batches.Create{InputFileID: over, Endpoint: batches.Endpoint, CompletionWindow: "24h"})
		if e := apperr.As(err); e.Code != apperr.Invalid || e.Reason != "too_many_requests" || e.Param != "input_file_id" ||
			e.Message != "a batch takes at most 50000 requests; split the file" {
			t.Fatalf("50,001 lines: %v", err)
		}
		var batchRows int64
		db.Gorm.Raw("SELECT COUNT(*) FROM batches").Scan(&batchRows)
		if batchRows != 0 {
			t.Fatalf("%d batches stored for a refused file", batchRows)
		}
		b := f.create(&heldQueue{}, f.caller, strings.Repeat("x\n", batches.MaxLines))
		if b.Status != "completed" || b.Total != batches.MaxLines || b.Failed != batches.MaxLines {
			t.Fatalf("50,000 lines: %+v", b)
		}
		if errs := f.file(f.caller, b.ErrorFileID); len(errs) != batches.MaxListedFailures+1 {
			t.Fatalf("%d error lines", len(errs))
		}
	})
}

// An upload past the tier's limit is refused as soon as it passes it,
// from a reader that would go on for ever, and leaves no file nor chunk.
func TestAnUploadIsRefusedMidStream(t *testing.T) {
	each(t, func(t *testing.T, db *models.DB, url string) {
		f := newFixture(t, db, url)
		src := &endless{}
		_, err := f.svc.Upload(context.Background(), f.caller, batches.Upload{Purpose: "batch", Filename: "in.jsonl", Content: src})
		if e := apperr.As(err); e.Code != apperr.TooLarge || e.Reason != "file_too_large" {
			t.Fatalf("an endless upload: %v", err)
		}
		if n := src.read.Load(); n > 1<<20+64<<10 {
			t.Errorf("read %d bytes for a 1 MiB limit", n)
		}
		var files, chunks int64
		db.Gorm.Raw("SELECT COUNT(*) FROM batch_files").Scan(&files)
		db.Gorm.Raw("SELECT COUNT(*) FROM batch_file_chunks").Scan(&chunks)
		if files != 0 || chunks != 0 {
			t.Errorf("%d files and %d chunks left", files, chunks)
		}
	})
}

// endless is a reader of "x\n" for ever, counting what was read.
type endless struct{ read atomic.Int64 }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = "x\n"[i%2]
	}
	e.read.Add(int64(len(p)))
	return len(p), nil
}

var _ io.Reader = (*endless)(nil)

func outputOK() jobs.Output {
	return jobs.Output{RequestID: "job_1", Status: 200, Body: json.RawMessage(`{}`)}
}
